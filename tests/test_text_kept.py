"""A PNG's text chunks and a JPEG's comments: kept by images of the input's colours in formats
that hold them; their loss said where the output's format holds none."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from helpers import manifest_records, ok
from PIL import Image, PngImagePlugin

from convcli.io.png_text import COMPRESSED_FROM, keywords, text_chunks

LONG_TEXT = "steps: 30, sampler: Euler a, seed: 1234; " * 40  # a generator's parameters


def _texty_png(path, size=(40, 30)):
    """An RGB PNG with a tEXt, a zTXt, a German iTXt and a long tEXt."""
    pixels = np.random.default_rng(3).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    info = PngImagePlugin.PngInfo()
    info.add_text("Author", "Ada Lovelace")
    info.add_text("Comment", "taken at dawn", zip=True)
    info.add_itxt(
        "Description", "Ein Bild \u2013 \u00fcber den Hafen", lang="de", tkey="Beschreibung"
    )
    info.add_text("parameters", LONG_TEXT)
    info.add_text("Software", "Some Editor 1.0")  # replaced by convcli's marker
    Image.fromarray(pixels).save(path, pnginfo=info)
    return path


def _chunks(path) -> dict[bytes, list[bytes]]:
    """The chunks of the PNG file at `path`: kind -> the data of each, in order."""
    data, at, found = path.read_bytes(), 8, {}
    while at < len(data):
        size = int.from_bytes(data[at : at + 4], "big")
        kind = data[at + 4 : at + 8]
        found.setdefault(kind, []).append(data[at + 8 : at + 8 + size])
        at += 12 + size
    return found


def _assert_text_kept(path):
    with Image.open(path) as im:
        text = im.text
    assert text["Software"] == "convcli"
    assert text["Author"] == "Ada Lovelace"
    assert text["Comment"] == "taken at dawn"
    assert text["parameters"] == LONG_TEXT
    assert text["Description"] == "Ein Bild \u2013 \u00fcber den Hafen"
    assert (text["Description"].lang, text["Description"].tkey) == ("de", "Beschreibung")
    chunks = _chunks(path)
    long_chunk = next(c for c in chunks[b"zTXt"] if c.startswith(b"parameters\0"))
    assert zlib.decompress(long_chunk[len(b"parameters\0\0") :]).decode("latin-1") == LONG_TEXT
    assert [c.split(b"\0")[0] for c in chunks[b"tEXt"]].count(b"Software") == 1


@pytest.mark.parametrize(
    ("command", "output"),
    [("pool", "harbour_pool-max-f2-s2.png"), ("pad", "harbour_pad-constant-2.png")],
)
def test_images_of_the_inputs_colours_keep_a_pngs_text(tmp_path, command, output):
    source = _texty_png(tmp_path / "harbour.png")
    before = source.read_bytes()
    result = ok(command, "-v", source, "-o", tmp_path / "out")
    assert "not kept" not in result.stderr
    assert "PNG text (Author, Comment, Description, parameters)" in result.stderr
    _assert_text_kept(tmp_path / "out" / output)
    (record,) = manifest_records(tmp_path / "out")
    assert record["kept"]["png_text"] == ["Author", "Comment", "Description", "parameters"]
    assert source.read_bytes() == before


@pytest.mark.parametrize(
    ("fmt", "lost"),
    [("jpg", "Author, Comment, Description, parameters"), ("tiff", "Comment, parameters")],
)
def test_formats_without_png_text_say_what_they_lose_once(tmp_path, fmt, lost):
    _texty_png(tmp_path / "a.png")
    _texty_png(tmp_path / "b.png")
    result = ok("pool", "--format", fmt, tmp_path / "a.png", tmp_path / "b.png", "-o", tmp_path)
    line = f"convcli: PNG text ({lost}) not kept: {fmt} outputs hold none (png outputs do)"
    assert result.stderr.splitlines().count(line) == 1
    (record, _) = manifest_records(tmp_path)
    assert "png_text" not in record.get("kept", {})


def test_a_tiff_holds_a_pngs_author_copyright_and_description_in_its_own_tags(tmp_path):
    """As exiftool maps them: Artist, Copyright and ImageDescription, in UTF-8; an EXIF's own
    text tag comes first."""
    import tifffile

    source = _texty_png(tmp_path / "harbour.png")
    result = ok("pool", "-v", "--format", "tiff", source, "-o", tmp_path / "out")
    assert "TIFF tags (ImageDescription, Artist)" in result.stderr
    with tifffile.TiffFile(tmp_path / "out" / "harbour_pool-max-f2-s2.tiff") as tif:
        tags = tif.pages[0].tags
        assert tags[315].value == "Ada Lovelace"
        assert tags[270].value == "Ein Bild \u2013 \u00fcber den Hafen"  # in UTF-8
    info = PngImagePlugin.PngInfo()
    info.add_text("Copyright", "\u00a9 PNG")
    exif = Image.Exif()
    exif[33432] = "(c) EXIF"
    Image.new("RGB", (8, 8)).save(tmp_path / "both.png", pnginfo=info, exif=exif)
    said = ok("pool", "--format", "tiff", tmp_path / "both.png", "-o", tmp_path / "both").stderr
    assert "PNG text (Copyright) not kept: tiff outputs hold none" in said
    with tifffile.TiffFile(tmp_path / "both" / "both_pool-max-f2-s2.tiff") as tif:
        assert tif.pages[0].tags[33432].value == "(c) EXIF"


def test_an_edge_map_keeps_no_text_and_says_none(tmp_path):
    _texty_png(tmp_path / "a.png")
    result = ok("conv", "-k", "vertical", tmp_path / "a.png", "-o", tmp_path / "out")
    assert "not kept" not in result.stderr
    with Image.open(tmp_path / "out" / "a_conv-vertical-sum.png") as im:
        assert im.text == {"Software": "convcli"}


def test_raw_profiles_are_not_kept_and_said(tmp_path):
    """ImageMagick's hex copy of an EXIF would keep an orientation the pixels no longer have."""
    info = PngImagePlugin.PngInfo()
    info.add_text("Title", "Dawn")
    info.add_text("Raw profile type exif", "\nexif\n      6\n457869660000\n", zip=True)
    Image.new("RGB", (20, 10), (200, 40, 40)).save(tmp_path / "a.png", pnginfo=info)
    result = ok("pool", tmp_path / "a.png", "-o", tmp_path / "out")
    assert "PNG text (Raw profile type exif) not kept: convcli writes none" in result.stderr
    with Image.open(tmp_path / "out" / "a_pool-max-f2-s2.png") as im:
        assert im.text == {"Software": "convcli", "Title": "Dawn"}


def test_text_chunks_encode_each_kind():
    itxt = PngImagePlugin.iTXt("\u65e5\u306e\u51fa", "ja", "")
    chunks, unkept = text_chunks(
        {
            "Title": "Caf\u00e9",
            "Note": "\u2713 checked",  # no Latin-1: iTXt without a language
            "Caption": itxt,
            "Long": "x" * COMPRESSED_FROM,
            "": "no keyword",
            "k" * 80: "keyword too long",
            " padded": "keyword with a space first",
            "Software": "Other",
            "XML:com.adobe.xmp": "<x/>",
            "Raw profile type iptc": "\niptc\n0\n",
            "Raw profile type 8bim": "\n8bim\n0\n",
        }
    )
    assert chunks[0] == (b"tEXt", b"Title\0Caf\xe9")
    assert chunks[1] == (b"iTXt", b"Note\0\0\0\0\0" + "\u2713 checked".encode())
    assert chunks[2] == (b"iTXt", b"Caption\0\0\0ja\0\0" + "\u65e5\u306e\u51fa".encode())
    kind, data = chunks[3]
    assert kind == b"zTXt" and data[:6] == b"Long\0\0"
    assert zlib.decompress(data[6:]) == b"x" * COMPRESSED_FROM
    assert len(chunks) == 4
    assert unkept == ("", "k" * 80, " padded", "Raw profile type 8bim")
    assert keywords(chunks) == ["Title", "Note", "Caption", "Long"]
    assert text_chunks({}) == (None, ())


def _commented_jpeg(path, comments):
    """An RGB JPEG with a COM segment for each of `comments`, after its JFIF header."""
    pixels = np.random.default_rng(4).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    data = path.read_bytes()
    segments = b"".join(b"\xff\xfe" + (len(c) + 2).to_bytes(2, "big") + c for c in comments)
    path.write_bytes(data[:20] + segments + data[20:])  # SOI and the 18-byte APP0
    return path


def _coms(path) -> list[bytes]:
    with Image.open(path) as im:
        return [data for kind, data in im.applist if kind == "COM"]


COMMENTS = (b"Shot by Ada at dawn", b"Caf\xe9 du Port")  # ASCII, then Latin-1


def test_jpeg_comments_are_kept_by_jpegs_and_pngs_and_said_lost_by_tiffs(tmp_path):
    source = _commented_jpeg(tmp_path / "port.jpg", COMMENTS)
    assert _coms(source) == list(COMMENTS)
    result = ok("pool", "-v", source, "-o", tmp_path / "out")
    assert "kept: comment" in result.stderr
    out = tmp_path / "out" / "port_pool-max-f2-s2.jpg"
    assert _coms(out) == [*COMMENTS, b"convcli"]  # convcli's marker last
    (record,) = manifest_records(tmp_path / "out")
    assert record["kept"]["comment"] is True
    # The output is still convcli's: --overwrite replaces it, and a run without it keeps it.
    assert "1 skipped" in ok("pool", source, "-o", tmp_path / "out").stderr
    assert "1 processed" in ok("pool", "--overwrite", source, "-o", tmp_path / "out").stderr
    # A JPEG of convcli's as an input: its marker is not carried as a comment of its own.
    ok("pool", out, "-o", tmp_path / "again")
    assert _coms(tmp_path / "again" / "port_pool-max-f2-s2_pool-max-f2-s2.jpg") == [
        *COMMENTS,
        b"convcli",
    ]

    ok("pool", "--format", "png", source, "-o", tmp_path / "png")
    png = tmp_path / "png" / "port_pool-max-f2-s2.png"
    assert _chunks(png)[b"tEXt"][1:] == [b"Comment\0" + c for c in COMMENTS]  # Latin-1 text
    with Image.open(png) as im:
        assert im.text["Comment"] == "Caf\u00e9 du Port"  # Pillow keeps the last of a keyword

    said = ok("pool", "--format", "tiff", source, "-o", tmp_path / "tiff").stderr
    line = "convcli: comment not kept: tiff outputs hold none (png and jpg outputs do)"
    assert said.splitlines().count(line) == 1


def test_an_edge_map_keeps_no_jpeg_comment(tmp_path):
    source = _commented_jpeg(tmp_path / "a.jpg", COMMENTS)
    result = ok("conv", "-k", "vertical", "--format", "jpg", source, "-o", tmp_path / "out")
    assert "not kept" not in result.stderr
    assert _coms(tmp_path / "out" / "a_conv-vertical-sum.jpg") == [b"convcli"]


@pytest.mark.parametrize("frames", [1, 3])
def test_a_gifs_comment_is_kept_by_its_png(tmp_path, frames):
    images = [Image.new("RGB", (30, 20), (i * 80, 40, 200 - i * 60)) for i in range(frames)]
    images[0].save(
        tmp_path / "a.gif", save_all=True, append_images=images[1:], comment=b"Made by Ada"
    )
    result = ok("pool", "-v", tmp_path / "a.gif", "-o", tmp_path / "out")
    assert "kept: comment" in result.stderr
    with Image.open(tmp_path / "out" / "a_pool-max-f2-s2.png") as im:
        assert getattr(im, "n_frames", 1) == frames
        assert im.info["Comment"] == "Made by Ada"
    said = ok("pool", "--format", "tiff", tmp_path / "a.gif", "-o", tmp_path / "tiff").stderr
    assert "comment not kept: tiff outputs hold none (png and jpg outputs do)" in said


def test_imagemagicks_properties_are_not_kept_and_said_once_by_namespace(tmp_path):
    """ImageMagick writes its properties as PNG text: the file's dates, and copies of the
    EXIF that a pooled image would contradict (its size, its resolution)."""
    info = PngImagePlugin.PngInfo()
    for keyword, value in (
        ("date:create", "2026-11-29T07:00:00+00:00"),
        ("exif:PixelXDimension", "40"),
        ("exif:Artist", "Ada"),
        ("tiff:XResolution", "300/1"),
        ("Title", "Dawn"),
    ):
        info.add_text(keyword, value)
    Image.new("RGB", (40, 30), (10, 120, 200)).save(tmp_path / "m.png", pnginfo=info)
    result = ok("pool", tmp_path / "m.png", "-o", tmp_path / "out")
    line = "convcli: PNG text (date:*, exif:*, tiff:*) not kept: convcli writes none"
    assert result.stderr.splitlines().count(line) == 1
    with Image.open(tmp_path / "out" / "m_pool-max-f2-s2.png") as im:
        assert im.text == {"Software": "convcli", "Title": "Dawn"}


def test_a_jpegs_extended_xmp_is_said_lost(tmp_path):
    packet = (
        b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/'
        b'22-rdf-syntax-ns#"><rdf:Description xmlns:xmpNote="http://ns.adobe.com/xmp/note/" '
        b'xmpNote:HasExtendedXMP="0123456789ABCDEF0123456789ABCDEF"/></rdf:RDF></x:xmpmeta>'
    )
    Image.new("RGB", (40, 30), (90, 60, 30)).save(tmp_path / "x.jpg", xmp=packet)
    pooled = ok("pool", tmp_path / "x.jpg", "-o", tmp_path / "out").stderr
    assert pooled.splitlines().count("convcli: extended XMP not kept: convcli writes none") == 1
    edges = ok("conv", "-k", "vertical", tmp_path / "x.jpg", "-o", tmp_path / "edges").stderr
    assert "not kept" not in edges


def test_a_comment_over_a_jpeg_segment_is_said_lost_not_a_crash(tmp_path):
    Image.new("P", (16, 16)).save(tmp_path / "long.gif", comment=b"y" * 65534)
    said = ok("pool", "--format", "jpg", tmp_path / "long.gif", "-o", tmp_path).stderr
    assert "comment over 64 KB not kept: jpg outputs hold none (png outputs do)" in said
    with Image.open(tmp_path / "long_pool-max-f2-s2.jpg") as im:
        assert [data for kind, data in im.applist if kind == "COM"] == [b"convcli"]
    ok("pool", "--format", "png", tmp_path / "long.gif", "-o", tmp_path / "png")
    with Image.open(tmp_path / "png" / "long_pool-max-f2-s2.png") as im:
        assert im.info["Comment"] == "y" * 65534


def test_a_keyword_with_a_line_break_is_no_png_keyword(tmp_path):
    chunks, unkept = text_chunks({"line\nbreak": "x", "Tab\there": "y", "Title": "ok"})
    assert keywords(chunks) == ["Title"]
    assert unkept == ("line\nbreak", "Tab\there")


def test_empty_text_is_no_tag_and_an_ome_tiffs_description_says_why_it_is_lost(tmp_path):
    import tifffile

    info = PngImagePlugin.PngInfo()
    info.add_text("Author", "")
    info.add_text("Copyright", "a\0b")
    info.add_text("Description", "the harbour")
    Image.new("RGB", (8, 8)).save(tmp_path / "t.png", pnginfo=info)
    said = ok("pool", "--format", "tiff", "-v", tmp_path / "t.png", "-o", tmp_path / "out").stderr
    assert "PNG text (Author, Copyright) not kept: tiff outputs hold none" in said
    with tifffile.TiffFile(next((tmp_path / "out").glob("*.tiff"))) as tif:
        tags = tif.pages[0].tags
        assert 315 not in tags and 33432 not in tags and tags[270].value == "the harbour"
    said = ok("pool", "-v", tmp_path / "t.png", "-o", tmp_path / "x.ome.tif").stderr
    assert (
        "PNG text (Description) not kept: an OME-TIFF's ImageDescription holds its OME-XML" in said
    )
