"""An XMP packet kept by the images of its pixels: upright, with their size and resolution."""

import numpy as np
import pytest
import tifffile
from helpers import manifest_records, ok, outputs_in, run
from PIL import Image, PngImagePlugin

from convcli.io.xmp import upright_xmp, xmp_sized

TIFF_NS = b"http://ns.adobe.com/tiff/1.0/"
TIFF = 'xmlns:tiff="http://ns.adobe.com/tiff/1.0/"'
EXIF = 'xmlns:exif="http://ns.adobe.com/exif/1.0/"'


def _packet(fields: str, body: str = "") -> bytes:
    """An XMP packet of one description with `fields` as attributes and `body` inside."""
    return (
        '<?xpacket begin="" id="W5M0MpCehiHzreSzNTczkc9d"?><x:xmpmeta xmlns:x="adobe:ns:meta/">'
        '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description '
        f'rdf:about="" xmlns:dc="http://purl.org/dc/elements/1.1/" {TIFF} {EXIF} {fields}>'
        f'<dc:title><rdf:Alt><rdf:li xml:lang="x-default">Harbour at dusk</rdf:li></rdf:Alt>'
        f'</dc:title>{body}</rdf:Description></rdf:RDF></x:xmpmeta><?xpacket end="w"?>'
    ).encode()


PHOTO_XMP = _packet(
    'tiff:Orientation="6" exif:PixelXDimension="40" exif:PixelYDimension="30"',
    "<tiff:ImageWidth>40</tiff:ImageWidth><tiff:ImageLength>30</tiff:ImageLength>"
    "<tiff:XResolution>300/1</tiff:XResolution><tiff:YResolution>300/1</tiff:YResolution>"
    "<tiff:ResolutionUnit>2</tiff:ResolutionUnit>",
)


def test_the_fields_of_the_pixels_are_set_in_either_form_and_nothing_else_changes():
    packet = _packet('tiff:Orientation="8"', "<exif:PixelXDimension>640</exif:PixelXDimension>")
    turned = upright_xmp(packet)
    assert turned == packet.replace(b'tiff:Orientation="8"', b'tiff:Orientation="1"')
    sized = xmp_sized(turned, 32, 24)
    assert sized == turned.replace(b">640<", b">32<")
    # Any prefix the packet binds to the namespace; a field's name in text is no field.
    other = b"<d xmlns:T=\"http://ns.adobe.com/tiff/1.0/\" T:ImageLength='9'>tiff:ImageLength=9</d>"
    assert xmp_sized(other, 5, 7) == other.replace(b"'9'", b"'7'")
    # No namespace bound: nothing to set.
    assert xmp_sized(b"<d tiff:ImageWidth='5'/>", 1, 1) == b"<d tiff:ImageWidth='5'/>"
    # Words in a text or a comment are no fields.
    said = f'<d {TIFF}><dc:title>tiff:Orientation="6"</dc:title><!-- tiff:Orientation="6" -->'
    assert upright_xmp(said.encode()) == said.encode()


@pytest.mark.parametrize(
    ("unit", "expected"),
    [("2", b">150/1<"), ("3", b">7500/127<")],  # 150 dpi: 59.06 a cm
)
def test_the_resolution_is_set_in_the_packets_unit(unit, expected):
    packet = _packet(
        "",
        f"<tiff:ResolutionUnit>{unit}</tiff:ResolutionUnit><tiff:XResolution>1/1"
        "</tiff:XResolution><tiff:YResolution>1/1</tiff:YResolution>",
    )
    assert xmp_sized(packet, 1, 1, (150.0, 150.0)).count(expected) == 2
    assert xmp_sized(packet, 1, 1) == packet  # a resolution not known: left as it is


def _turned_photo(path):
    """A 40x30 JPEG stored on its side (EXIF orientation 6: 30x40 upright) with PHOTO_XMP."""
    pixels = np.random.default_rng(3).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(pixels).save(path, exif=exif, xmp=PHOTO_XMP, dpi=(300, 300))


def _xmp_of(path) -> bytes | None:
    if path.suffix in (".tif", ".tiff"):
        with tifffile.TiffFile(path) as tif:
            found = tif.pages[0].tags.valueof(700)
            return None if found is None else bytes(found)
    with Image.open(path) as im:
        return im.info.get("xmp")


@pytest.mark.parametrize("fmt", ["jpg", "png", "tiff"])
def test_a_pooled_photo_keeps_its_xmp_upright_with_its_own_size_and_resolution(tmp_path, fmt):
    _turned_photo(tmp_path / "harbour.jpg")
    said = ok("pool", tmp_path / "harbour.jpg", "--format", fmt, "-o", tmp_path / "o", "-v")
    assert "XMP" in said.stderr.split("kept: ")[1] and "XMP not kept" not in said.stderr
    (out,) = outputs_in(tmp_path / "o")
    with Image.open(out) as im:
        assert im.size == (15, 20)  # upright 30x40, pooled 2x2
    packet = _xmp_of(out)
    expected = PHOTO_XMP
    for before, after in (
        (b'tiff:Orientation="6"', b'tiff:Orientation="1"'),
        (b'Dimension="40"', b'Dimension="15"'),  # the upright photo's width, pooled
        (b'Dimension="30"', b'Dimension="20"'),
        (b">40</tiff:Image", b">15</tiff:Image"),
        (b">30</tiff:Image", b">20</tiff:Image"),
        (b">300/1<", b">150/1<"),  # a pixel every 2: 150 dpi
    ):
        assert expected.count(before) in (1, 2)
        expected = expected.replace(before, after)
    assert packet == expected
    (record,) = manifest_records(tmp_path / "o")
    assert record["kept"]["xmp"] is True


@pytest.mark.parametrize(
    ("field", "turned"), [('tiff:Orientation="6"', True), ('T:Orientation="6"', False)]
)
def test_the_xmp_orientation_says_1_only_where_the_pixels_were_turned(tmp_path, field, turned):
    """Without EXIF, Pillow turns the pixels by an XMP orientation it reads (under the prefix
    ``tiff``): the output's says 1; one it does not read, the pixels as stored, is kept."""
    packet = _packet(field).replace(TIFF.encode(), TIFF.encode() + b' xmlns:T="' + TIFF_NS + b'"')
    pixels = np.random.default_rng(5).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "x.jpg", xmp=packet)
    ok("pad", "--pad", "0", tmp_path / "x.jpg", "-o", tmp_path / "o")
    (out,) = outputs_in(tmp_path / "o")
    with Image.open(out) as im:
        assert im.size == ((30, 40) if turned else (40, 30))
    if turned:
        packet = packet.replace(b'Orientation="6"', b'Orientation="1"')
    assert _xmp_of(out) == packet


def test_a_packet_that_its_sizes_take_past_a_jpegs_segment_loses_its_padding(tmp_path):
    bare = _packet('tiff:ImageWidth="1"')
    padding = b" " * (65503 - len(bare) - 1) + b"\n"  # 65503 bytes in all: 1 to spare
    packet = bare.replace(b"<?xpacket end", padding + b"<?xpacket end")
    Image.new("RGB", (400, 300), (10, 20, 30)).save(tmp_path / "p.jpg", xmp=packet)
    assert len(packet) == 65503
    ok("pad", "--pad", "1000", tmp_path / "p.jpg", "-o", tmp_path / "o")
    (out,) = outputs_in(tmp_path / "o")
    written = _xmp_of(out)
    assert b'tiff:ImageWidth="2400"' in written and len(written) < len(packet)
    assert written.replace(b'"2400"', b'"1"') == packet.replace(padding, b"\n")


def test_a_packet_that_its_sizes_take_past_a_jpegs_segment_without_padding_is_said(tmp_path):
    """No padding to drop: the packet with its new size would not fit, and the input's,
    of the old size, would be wrong; it is left out and said, as a packet over 64 KB."""
    bare = _packet('tiff:ImageWidth="1"', "<dc:description></dc:description>")
    filler = b"x" * (65504 - len(bare))  # 65504 bytes in all: none to spare
    packet = bare.replace(b"</dc:description>", filler + b"</dc:description>")
    assert len(packet) == 65504
    Image.new("RGB", (400, 300), (10, 20, 30)).save(tmp_path / "p.jpg", xmp=packet)
    said = ok("pad", "--pad", "1000", tmp_path / "p.jpg", "-o", tmp_path / "o").stderr
    (out,) = outputs_in(tmp_path / "o")
    assert _xmp_of(out) is None
    assert said.count("XMP over 64 KB not kept: jpg outputs hold none") == 1
    ok("pad", "--pad", "1000", tmp_path / "p.jpg", "--format", "png", "-o", tmp_path / "png")
    (out,) = outputs_in(tmp_path / "png")
    assert _xmp_of(out) == packet.replace(b'"1"', b'"2400"')


def test_a_packet_near_a_jpegs_segment_is_kept_where_its_sizes_fit_and_lost_by_its_resolution(
    tmp_path,
):
    """Sizes are taken at a JPEG's longest (5 digits): a packet 6 bytes short of the limit
    keeps its place; its resolution fields, written out as 72.26 dpi, take it past, and the
    loss names the formats that hold it, not jpg."""
    bare = _packet(
        'tiff:ImageWidth="40" tiff:XResolution="1/1"', "<dc:description></dc:description>"
    )
    packet = bare.replace(b"</dc:description>", b"x" * (65498 - len(bare)) + b"</dc:description>")
    Image.new("RGB", (40, 30), (10, 20, 30)).save(tmp_path / "near.jpg", xmp=packet)
    ok("pad", "--pad", "0", tmp_path / "near.jpg", "-o", tmp_path / "o")
    (out,) = outputs_in(tmp_path / "o")
    assert _xmp_of(out) == packet
    info = PngImagePlugin.PngInfo()
    info.add_itxt("XML:com.adobe.xmp", packet.decode())
    Image.new("RGB", (40, 30)).save(tmp_path / "res.png", pnginfo=info, dpi=(72.26, 72.26))
    said = ok("pad", "--pad", "0", tmp_path / "res.png", "--format", "jpg", "-o", tmp_path / "r")
    line = "XMP over 64 KB not kept: jpg outputs hold none (png and tiff outputs do)"
    assert said.stderr.count(line) == 1, said.stderr
    (out,) = outputs_in(tmp_path / "r")
    assert _xmp_of(out) is None


def test_an_edge_map_keeps_no_xmp(tmp_path):
    _turned_photo(tmp_path / "harbour.jpg")
    ok("conv", "-k", "vertical", tmp_path / "harbour.jpg", "-o", tmp_path / "o")
    (out,) = outputs_in(tmp_path / "o")
    assert _xmp_of(out) is None


@pytest.mark.parametrize("fmt", ["tiff", "png"])
def test_a_tiff_read_in_strips_keeps_its_xmp_as_stored(tmp_path, small_strips, fmt):
    pixels = np.random.default_rng(4).integers(0, 256, (700, 600, 3), dtype=np.uint8)
    packet = _packet('tiff:Orientation="1" tiff:ImageWidth="600" tiff:ImageLength="700"')
    tifffile.imwrite(
        tmp_path / "scan.tif",
        pixels,
        photometric="rgb",
        extratags=[(700, "B", len(packet), packet, True)],
    )
    for folder, extra in (("whole", []), ("strips", ["--memory", small_strips])):
        args = ["--pad", "2", "--format", fmt, tmp_path / "scan.tif", "-o", tmp_path / folder]
        said = ok("pad", *args, "-v", *extra).stderr
        assert ("processed in strips" in said) == bool(extra)
        (out,) = outputs_in(tmp_path / folder)
        assert _xmp_of(out) == packet.replace(b'"600"', b'"604"').replace(b'"700"', b'"704"')


def test_xmp_too_large_for_a_jpeg_is_said_and_kept_by_the_other_formats(tmp_path):
    big = _packet("", "<dc:description>" + "x" * 70_000 + "</dc:description>")
    info = PngImagePlugin.PngInfo()
    info.add_itxt("XML:com.adobe.xmp", big.decode(), zip=True)
    Image.new("RGB", (8, 6), (10, 20, 30)).save(tmp_path / "p.png", pnginfo=info)
    said = run("pool", tmp_path / "p.png", "--format", "jpg", "-o", tmp_path / "o")
    assert said.exit_code == 0, said.output
    line = "XMP over 64 KB not kept: jpg outputs hold none (png and tiff outputs do)"
    assert said.stderr.count(line) == 1
    (out,) = outputs_in(tmp_path / "o")
    assert _xmp_of(out) is None
    ok("pool", tmp_path / "p.png", "-o", tmp_path / "png")
    (out,) = outputs_in(tmp_path / "png")
    assert _xmp_of(out) == big


def test_xmp_resolution_follows_the_exifs_where_the_file_has_no_other(tmp_path):
    """A PNG without pHYs whose EXIF and XMP give 300 x 150 dpi, turned a quarter: the
    EXIF came out turned and halved (75 x 150), the XMP as it was (300 x 150)."""
    from PIL.TiffImagePlugin import IFDRational

    exif = Image.Exif()
    exif[274], exif[282], exif[283], exif[296] = 6, IFDRational(300), IFDRational(150), 2
    packet = (
        '<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF '
        'xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description '
        'rdf:about="" xmlns:tiff="http://ns.adobe.com/tiff/1.0/" tiff:Orientation="6" '
        'tiff:XResolution="300/1" tiff:YResolution="150/1" tiff:ResolutionUnit="2"/>'
        "</rdf:RDF></x:xmpmeta>"
    )
    info = PngImagePlugin.PngInfo()
    info.add_itxt("XML:com.adobe.xmp", packet)
    Image.new("RGB", (80, 60), (99, 99, 99)).save(tmp_path / "x.png", exif=exif, pnginfo=info)
    ok("pool", "--size", "2", tmp_path / "x.png", "-o", tmp_path / "out")
    with Image.open(tmp_path / "out" / "x_pool-max-f2-s2.png") as im:
        written = im.getexif()
        xmp = im.info["xmp"]
    xmp = xmp.decode() if isinstance(xmp, bytes) else xmp
    assert (float(written[282]), float(written[283])) == (75.0, 150.0)
    assert 'tiff:XResolution="75/1"' in xmp and 'tiff:YResolution="150/1"' in xmp


def test_an_xmp_packet_checked_for_a_jpeg_is_the_one_written(tmp_path):
    """Its resolution from the EXIF (no other in the file) made the packet written longer
    than the one checked: the JPEG failed with 'XMP data is too long'. It is now checked as
    written: left out of the JPEG, and said."""
    from PIL.TiffImagePlugin import IFDRational

    exif = Image.Exif()
    exif[282], exif[283], exif[296] = IFDRational(1234567, 1000), IFDRational(1234567, 1000), 2
    head = (
        '<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF '
        'xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description '
        'rdf:about="" xmlns:tiff="http://ns.adobe.com/tiff/1.0/" tiff:XResolution="1" '
        'tiff:YResolution="1" tiff:ResolutionUnit="2"><tiff:Make>'
    )
    tail = "</tiff:Make></rdf:Description></rdf:RDF></x:xmpmeta>"
    packet = head + "m" * (65504 - len(head) - len(tail)) + tail  # the most a JPEG holds
    info = PngImagePlugin.PngInfo()
    info.add_itxt("XML:com.adobe.xmp", packet)
    Image.new("RGB", (8, 6), (9, 9, 9)).save(tmp_path / "x.png", exif=exif, pnginfo=info)
    result = ok("pool", "--size", "1", "--format", "jpg", tmp_path / "x.png", "-o", tmp_path / "o")
    assert "XMP over 64 KB not kept: jpg outputs hold none" in result.stderr
    with Image.open(tmp_path / "o" / "x_pool-max-f1-s1.jpg") as im:
        assert "xmp" not in im.info and im.getexif()[282] == 1234.567
