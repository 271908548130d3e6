"""EXIF text as the file had it (UTF-8 ``©`` and accents, not ``?``), and a TIFF output's text
tags (ImageDescription, Make, Model, DateTime, Artist, Copyright) from its input's EXIF or
TIFF tags."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
from helpers import manifest_records, ok
from PIL import Image
from PIL.TiffImagePlugin import IFDRational

from convcli.io.exif import (
    EXIF_IFD,
    GPS_IFD,
    exif_beyond_text,
    exif_bytes,
    exif_text,
    is_description,
)

ARTIST = "Zo\u00eb \u00d8deg\u00e5rd".encode()
COPYRIGHT = "\u00a9 2026 Zo\u00eb".encode()
LENS = "\u00c6rolens 35mm".encode()
PIXELS = np.random.default_rng(6).integers(0, 256, (40, 60, 3), dtype=np.uint8)


def _camera_jpeg(path):
    """A JPEG whose EXIF has UTF-8 text, a camera block (exposure, lens) and a GPS block."""
    exif = Image.Exif()
    exif[271], exif[272], exif[315], exif[33432] = "Canon", "EOS R5", ARTIST, COPYRIGHT
    exif.get_ifd(EXIF_IFD)[0x829A] = (1, 250)
    exif.get_ifd(EXIF_IFD)[0xA434] = LENS
    exif.get_ifd(GPS_IFD)[1] = "N"
    Image.fromarray(PIXELS).save(path, exif=exif.tobytes())
    return path


def _exif_of(path):
    with Image.open(path) as im:
        exif = im.getexif()
        return exif, exif.get_ifd(EXIF_IFD)


def _raw(text) -> bytes:
    """A tag's bytes from Pillow's Latin-1 reading of them."""
    return text.encode("latin-1") if isinstance(text, str) else bytes(text).rstrip(b"\0")


@pytest.mark.parametrize("fmt", ["jpg", "png"])
def test_exif_text_that_is_not_ascii_is_written_as_the_file_had_it(tmp_path, fmt):
    source = _camera_jpeg(tmp_path / "cam.jpg")
    ok("pool", "--format", fmt, source, "-o", tmp_path)
    exif, camera = _exif_of(tmp_path / f"cam_pool-max-f2-s2.{fmt}")
    assert (_raw(exif[315]), _raw(exif[33432])) == (ARTIST, COPYRIGHT)
    assert _raw(camera[0xA434]) == LENS
    assert camera[0x829A] == _exif_of(source)[1][0x829A]  # the exposure, as it was


def test_a_tiff_output_keeps_the_exifs_text_tags_and_says_the_rest_is_lost(tmp_path):
    _camera_jpeg(tmp_path / "a.jpg")
    _camera_jpeg(tmp_path / "b.jpg")
    result = ok(
        "pool", "-v", "--format", "tiff", tmp_path / "a.jpg", tmp_path / "b.jpg", "-o", tmp_path
    )
    assert "kept: TIFF tags (Make, Model, Artist, Copyright)" in result.stderr
    line = (
        "convcli: EXIF other than its text tags not kept: tiff outputs hold none "
        "(png and jpg outputs do)"
    )
    assert result.stderr.splitlines().count(line) == 1
    with tifffile.TiffFile(tmp_path / "a_pool-max-f2-s2.tiff") as tif:
        tags = tif.pages[0].tags
        assert (tags["Make"].value, tags["Model"].value) == ("Canon", "EOS R5")
        assert tags["Artist"].value == ARTIST.decode()
        assert tags["Copyright"].value == COPYRIGHT.decode()
        assert tags["Software"].value == "convcli"
        assert "ImageDescription" not in tags
    assert manifest_records(tmp_path)[0]["kept"]["tiff_tags"] == [
        "Make",
        "Model",
        "Artist",
        "Copyright",
    ]


def _described_tiff(path, description: bytes):
    extratags = [(270, "s", 0, description, True), (315, "s", 0, ARTIST, True)]
    tifffile.imwrite(path, PIXELS, photometric="rgb", metadata=None, extratags=extratags)
    return path


def test_a_tiffs_description_and_artist_are_kept_by_tiffs_and_in_the_exif_of_pngs(tmp_path):
    description = "Hafen \u2013 fr\u00fch".encode()
    source = _described_tiff(tmp_path / "harbour.tif", description)
    result = ok("pool", "-v", source, "-o", tmp_path / "out")
    assert "kept: TIFF tags (ImageDescription, Artist)" in result.stderr
    assert "not kept" not in result.stderr  # no EXIF beyond its text
    with tifffile.TiffFile(tmp_path / "out" / "harbour_pool-max-f2-s2.tiff") as tif:
        tags = tif.pages[0].tags
        assert tags["ImageDescription"].value == description.decode()
        assert tags["Artist"].value == ARTIST.decode()
    ok("pool", "--format", "png", source, "-o", tmp_path / "png")
    exif, _ = _exif_of(tmp_path / "png" / "harbour_pool-max-f2-s2.png")
    assert (_raw(exif[270]), _raw(exif[315])) == (description, ARTIST)

    # An OME-TIFF's ImageDescription holds its OME-XML: the description's loss is said.
    said = ok("pool", "-v", source, "-o", tmp_path / "cells.ome.tiff").stderr
    assert "ImageDescription not kept: an OME-TIFF's holds its OME-XML" in said
    with tifffile.TiffFile(tmp_path / "cells.ome.tiff") as tif:
        assert tif.pages[0].description.startswith("<?xml")
        assert tif.pages[0].tags["Artist"].value == ARTIST.decode()


def test_tifffiles_own_description_is_no_description_of_the_picture(tmp_path):
    tifffile.imwrite(tmp_path / "shaped.tif", PIXELS, photometric="rgb")  # '{"shape": ...}'
    with tifffile.TiffFile(tmp_path / "shaped.tif") as tif:
        assert tif.pages[0].description.startswith("{")
    result = ok("pool", "-v", tmp_path / "shaped.tif", "-o", tmp_path / "out")
    assert "ImageDescription" not in result.stderr
    with tifffile.TiffFile(tmp_path / "out" / "shaped_pool-max-f2-s2.tiff") as tif:
        assert "ImageDescription" not in tif.pages[0].tags


def test_exif_bytes_keeps_the_texts_bytes_and_leaves_the_tags_as_they_were():
    exif = Image.Exif()
    exif[315] = ARTIST
    exif.get_ifd(EXIF_IFD)[0xA434] = LENS
    loaded = Image.Exif()
    loaded.load(exif.tobytes())
    assert loaded[315] == ARTIST.decode("latin-1")  # Pillow's reading: Latin-1
    written = exif_bytes(loaded)
    assert loaded[315] == ARTIST.decode("latin-1")  # unchanged
    again = Image.Exif()
    again.load(written)
    assert _raw(again[315]) == ARTIST
    assert _raw(again.get_ifd(EXIF_IFD)[0xA434]) == LENS
    # Text read as text (tifffile's) goes out as UTF-8.
    text = Image.Exif()
    text[315] = ARTIST.decode()
    back = Image.Exif()
    back.load(exif_bytes(text, "utf-8"))
    assert _raw(back[315]) == ARTIST


def test_exif_text_and_what_lies_beyond_it():
    exif = Image.Exif()
    exif[271], exif[274], exif[282], exif[315] = "Nikon", 6, 300.0, ARTIST
    data = exif.tobytes()
    assert exif_text(data) == ((271, b"Nikon"), (315, ARTIST))
    assert not exif_beyond_text(data)  # the orientation and resolution are the pixels'
    exif[0x9286] = "a note"  # UserComment in the first directory: not a TIFF tag of ours
    assert exif_beyond_text(exif.tobytes())
    gps = Image.Exif()
    gps.get_ifd(GPS_IFD)[1] = "N"
    assert exif_beyond_text(gps.tobytes())
    assert exif_text(None) is None
    assert exif_text(Image.Exif().tobytes()) is None


@pytest.mark.parametrize(
    ("value", "described"),
    [
        ("Harbour at dawn", True),
        ('{"shape": [40, 60, 3]}', False),
        ('<?xml version="1.0"?><OME/>', False),
        ("ImageJ=1.54f\nimages=3\n", False),
        ("  \0", False),
        (None, False),
    ],
)
def test_is_description(value, described):
    assert is_description(value) is described


def test_a_tiffs_exif_block_keeps_exifs_own_codes_and_its_user_comment(tmp_path):
    """tifffile names the TIFF/EP codes (0x920E, 0x9214) as EXIF's (0xA20E, 0xA214), and gives
    a UserComment without its character code."""
    from PIL import TiffImagePlugin
    from PIL.TiffImagePlugin import IFDRational

    info = TiffImagePlugin.ImageFileDirectory_v2()
    info[271] = "Cam"
    comment = "t\u00efff comment"
    info[EXIF_IFD] = {
        0xA20E: IFDRational(5000, 1),  # FocalPlaneXResolution
        0xA214: (30, 20),  # SubjectLocation
        0x9286: b"UNICODE\0" + comment.encode("utf-16-le"),  # in the file's order: Pillow's II
    }
    Image.fromarray(PIXELS).save(tmp_path / "e.tif", tiffinfo=info)
    ok("pool", "--format", "jpg", tmp_path / "e.tif", "-o", tmp_path)
    _, camera = _exif_of(tmp_path / "e_pool-max-f2-s2.jpg")
    assert 0x920E not in camera and 0x9214 not in camera
    assert camera[0xA20E] == 2500  # pooled by 2, as the resolution is
    assert tuple(camera[0xA214]) == (30, 20)
    user_comment = camera[0x9286]
    assert user_comment[:8] == b"UNICODE\0"
    assert user_comment[8:].decode("utf-16-be") == comment


def test_tiff_pages_that_pillow_turns_upright_say_orientation_1(tmp_path):
    stored = PIXELS.copy()
    stored[:10, :20] = 255  # a white corner at the top left, as stored
    with tifffile.TiffWriter(tmp_path / "turned.tif") as tif:
        for _ in range(2):
            tif.write(stored, photometric="rgb", metadata=None, extratags=[(274, 3, 1, 6, True)])
    ok("pool", "--format", "png", tmp_path / "turned.tif", "-o", tmp_path)
    with Image.open(tmp_path / "turned_pool-max-f2-s2.png") as im:
        assert im.n_frames == 2
        assert im.size == (20, 30)  # 60x40 turned a quarter, then pooled
        assert im.getexif().get(0x0112, 1) == 1
        pixels = np.asarray(im.convert("RGB"))
    assert (pixels[:10, -5:] == 255).all()  # Orientation 6: the top left goes to the top right


def test_an_animations_frames_keep_their_orientation_in_a_tiff(tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 6
    frames = [Image.fromarray(np.roll(PIXELS, k, axis=1)) for k in range(3)]
    frames[0].save(tmp_path / "a.png", save_all=True, append_images=frames[1:], exif=exif)
    ok("pool", "--format", "tiff", tmp_path / "a.png", "-o", tmp_path)
    with tifffile.TiffFile(tmp_path / "a_pool-max-f2-s2.tiff") as tif:
        assert len(tif.pages) == 3
        assert tif.pages[0].shape[:2] == (20, 30)  # as stored: viewers turn it
        assert tif.pages[0].tags["Orientation"].value == 6


@pytest.mark.parametrize("fmt", ["jpg", "png", "tiff"])
def test_a_quarter_turn_swaps_the_resolution_across_and_down(tmp_path, fmt):
    exif = Image.Exif()
    exif[0x0112], exif[282], exif[283], exif[296] = 6, 300.0, 150.0, 2
    Image.fromarray(PIXELS).save(tmp_path / "fax.jpg", dpi=(300, 150), exif=exif.tobytes())
    ok("pool", "--format", fmt, tmp_path / "fax.jpg", "-o", tmp_path)
    with Image.open(tmp_path / f"fax_pool-max-f2-s2.{fmt}") as im:
        assert im.size == (20, 30)
        assert tuple(round(d) for d in im.info["dpi"]) == (75, 150)
        if fmt != "tiff":
            written = im.getexif()
            assert (written[282], written[283]) == (75, 150)


def test_pooling_divides_the_focal_plane_resolution_as_the_resolution(tmp_path):
    exif = Image.Exif()
    exif[282], exif[283], exif[296] = 300.0, 300.0, 2
    exif.get_ifd(EXIF_IFD)[0xA20E] = 5000.0  # FocalPlaneXResolution, pixels a sensor unit
    exif.get_ifd(EXIF_IFD)[0xA20F] = 4000.0
    exif.get_ifd(EXIF_IFD)[0xA210] = 3  # its unit: centimetres, as it was
    Image.fromarray(PIXELS).save(tmp_path / "cam.jpg", exif=exif.tobytes(), dpi=(300, 300))
    ok("pool", "--size", "4", "--stride", "4", tmp_path / "cam.jpg", "-o", tmp_path)
    written, camera = _exif_of(tmp_path / "cam_pool-max-f4-s4.jpg")
    assert (written[282], written[283]) == (75, 75)
    assert (camera[0xA20E], camera[0xA20F], camera[0xA210]) == (1250, 1000, 3)


def test_the_focal_plane_resolution_stays_rational_and_is_turned_with_the_picture(tmp_path):
    """Divided, it was written as a DOUBLE, which EXIF readers take for a RATIONAL's bits
    (ImageMagick: 2000 read as 1084178432); a quarter turn left it unswapped."""
    exif = Image.Exif()
    exif[274] = 6  # turned a quarter to be shown
    exif.get_ifd(EXIF_IFD)[0xA20E] = IFDRational(4000, 1)
    exif.get_ifd(EXIF_IFD)[0xA20F] = IFDRational(3000, 1)
    exif.get_ifd(EXIF_IFD)[0xA210] = 2
    Image.fromarray(PIXELS).save(tmp_path / "cam.jpg", exif=exif.tobytes())
    ok("pool", "--size", "2", tmp_path / "cam.jpg", "-o", tmp_path)
    written, camera = _exif_of(tmp_path / "cam_pool-max-f2-s2.jpg")
    assert written[274] == 1
    across, down = camera[0xA20E], camera[0xA20F]
    assert isinstance(across, IFDRational) and isinstance(down, IFDRational)  # type 5, not 12
    assert (across, down) == (1500, 2000)  # the sensor's down is the picture's across


def test_a_jpegs_resolution_is_said_as_its_jfif_header_holds_it(tmp_path):
    """40 x 20 dots a centimetre (101.6 x 50.8 dpi), halved: the JFIF header holds whole dots
    an inch, 51 x 25; -v and the manifest said 50.8 x 25.4, which the file does not hold."""
    Image.fromarray(PIXELS).save(tmp_path / "cm.jpg", dpi=(101.6, 50.8))
    data = bytearray((tmp_path / "cm.jpg").read_bytes())
    at = data.find(b"JFIF\0")
    data[at + 7 : at + 12] = bytes([2]) + (40).to_bytes(2, "big") + (20).to_bytes(2, "big")
    (tmp_path / "cm.jpg").write_bytes(bytes(data))  # units 2: dots a centimetre
    result = ok("pool", "--size", "2", tmp_path / "cm.jpg", "-o", tmp_path / "out", "-v")
    with Image.open(tmp_path / "out" / "cm_pool-max-f2-s2.jpg") as im:
        assert im.info["dpi"] == (51, 25)
    assert "(kept: 51x25 dpi)" in result.stderr
    (record,) = manifest_records(tmp_path / "out")
    assert record["kept"]["dpi"] == [51.0, 25.0]
