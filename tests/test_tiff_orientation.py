"""A TIFF turned by its Orientation tag (2 to 8) is read upright, whatever its samples and
compression: the pixels are those of the same raster stored with Orientation 1, turned as the
TIFF specification says (checked against libvips' ``autorot`` and ImageMagick's
``-auto-orient``)."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
from helpers import ok, run
from PIL import Image

from convcli.io.images import read_image, read_stack

UPRIGHT = {
    1: lambda s: s,
    2: lambda s: s[:, ::-1],
    3: lambda s: s[::-1, ::-1],
    4: lambda s: s[::-1],
    5: lambda s: s.swapaxes(0, 1),
    6: lambda s: np.rot90(s, -1),
    7: lambda s: s.swapaxes(0, 1)[::-1, ::-1],
    8: lambda s: np.rot90(s, 1),
}
"""The stored raster (rows, columns, ...) as it is shown, for each Orientation."""

_RNG = np.random.default_rng(27)
_STORED = _RNG.integers(0, 256, (40, 60, 4), dtype=np.uint8)
_COLOURMAP = np.stack(
    [np.arange(256) * 257, (255 - np.arange(256)) * 257, np.full(256, 30000)]
).astype(np.uint16)
KINDS = {
    "grey": (_STORED[..., 0], {"photometric": "minisblack"}),
    "grey16": (_STORED[..., 0].astype(np.uint16) * 257 + 3, {"photometric": "minisblack"}),
    "palette": (_STORED[..., 0], {"photometric": "palette", "colormap": _COLOURMAP}),
    "rgb": (_STORED[..., :3], {"photometric": "rgb"}),
    "rgba": (_STORED, {"photometric": "rgb", "extrasamples": ["unassalpha"]}),
    "rgb16": (_STORED[..., :3].astype(np.uint16) * 251, {"photometric": "rgb"}),
    "rgb16 planar": (
        np.moveaxis(_STORED[..., :3].astype(np.uint16) * 253, -1, 0),
        {"photometric": "rgb", "planarconfig": "separate"},
    ),
    "int8": (_STORED[..., 0].view(np.int8), {"photometric": "minisblack"}),
    "uint32": (_STORED[..., 0].astype(np.uint32) * 16_000_007, {"photometric": "minisblack"}),
    "float32 big-endian": (
        _RNG.standard_normal((40, 60)).astype(np.float32) * 1e3,
        {"photometric": "minisblack", "byteorder": ">", "predictor": 3},
    ),
    "int16 big-endian": (
        _STORED[..., 0].astype(np.int16) * 97 - 12_000,
        {"photometric": "minisblack", "byteorder": ">"},
    ),
}


def _write(path, kind: str, orientation: int, *, pages: int = 1, compression=None):
    stored, options = KINDS[kind]
    if options.get("predictor") and compression is None:
        options = {k: v for k, v in options.items() if k != "predictor"}
    byteorder = options.get("byteorder", "<")
    options = {k: v for k, v in options.items() if k != "byteorder"}
    with tifffile.TiffWriter(path, byteorder=byteorder) as tif:
        for k in range(pages):
            tif.write(
                np.roll(stored, 7 * k, axis=1),
                compression=compression,
                metadata=None,
                extratags=[(274, "H", 1, orientation, True)],
                **options,
            )
    return path


@pytest.mark.parametrize("compression", [None, "zlib"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_turned_tiff_is_read_upright(tmp_path, kind, compression):
    """Its values, scale and notes are those of the page stored upright (Orientation 1)."""
    flat = read_image(_write(tmp_path / "o1.tif", kind, 1, compression=compression))
    for orientation in range(2, 9):
        path = _write(tmp_path / f"o{orientation}.tif", kind, orientation, compression=compression)
        pic = read_image(path)
        expected = UPRIGHT[orientation](flat.pixels)
        assert pic.pixels.shape == expected.shape, orientation
        np.testing.assert_array_equal(pic.pixels, expected, err_msg=f"orientation {orientation}")
        assert (pic.white, pic.depth, pic.channels) == (flat.white, flat.depth, flat.channels)
        assert pic.notes == flat.notes


@pytest.mark.parametrize("kind", ["grey", "palette", "grey16"])
def test_the_pages_of_a_turned_tiff_are_read_upright(tmp_path, kind):
    flat = read_stack(_write(tmp_path / "flat.tif", kind, 1, pages=2)).pixels
    for orientation in (3, 6, 7):
        pic = read_stack(_write(tmp_path / f"o{orientation}.tif", kind, orientation, pages=2))
        expected = np.stack([UPRIGHT[orientation](page) for page in flat])
        np.testing.assert_array_equal(pic.pixels, expected, err_msg=f"orientation {orientation}")


@pytest.mark.parametrize("kind", ["grey", "rgb"])
def test_a_turned_tiff_is_padded_upright_and_its_dry_run_says_that_size(tmp_path, kind):
    stored = KINDS[kind][0]
    _write(tmp_path / "scan.tif", kind, 6)
    args = ("pad", "--pad", "1", "--format", "png", tmp_path / "scan.tif", "-o", tmp_path / "out")
    name = "scan_pad-constant-1" + ("-L" if kind == "grey" else "")
    dry = run(*args, "--dry-run")
    assert dry.exit_code == 0 and f"{name}.png (42x62 png)" in dry.stdout, dry.output
    ok(*args)
    with Image.open(tmp_path / "out" / f"{name}.png") as im:
        written = np.asarray(im)
    assert written.shape[:2] == (62, 42)
    np.testing.assert_array_equal(written[1:-1, 1:-1], np.rot90(stored, -1))
    assert not written[0].any() and not written[:, -1].any()


_UTM_KEYS = (1, 1, 0, 4, 1024, 0, 1, 1, 1025, 0, 1, 1, 3072, 0, 1, 32633, 3076, 0, 1, 9001)


def test_a_turned_geotiff_keeps_its_nodata_and_says_its_georeference_is_not_kept(tmp_path):
    """Its georeference places the pixels as stored (GDAL reads them so): once they are turned
    it no longer holds, and is said lost; GDAL's nodata value still marks missing pixels."""
    values = np.full((40, 60), 100, np.uint8)
    values[0, 0] = 0  # missing; shown at the top right (Orientation 6)
    tifffile.imwrite(
        tmp_path / "turned.tif",
        values,
        resolution=(300, 150),
        resolutionunit="INCH",
        extratags=[
            (274, "H", 1, 6, True),
            (33550, "d", 3, (10.0, 10.0, 0.0), True),
            (33922, "d", 6, (0.0, 0.0, 0.0, 500000.0, 4000000.0, 0.0), True),
            (34735, "H", len(_UTM_KEYS), _UTM_KEYS, True),
            (42113, "s", 0, "0", True),
        ],
    )
    result = ok(
        "pool",
        "--mode",
        "average",
        "--format",
        "tiff",
        tmp_path / "turned.tif",
        "-o",
        tmp_path / "out",
    )
    assert "its georeference not kept: it places the pixels as stored" in result.stderr
    with tifffile.TiffFile(tmp_path / "out" / "turned_pool-average-f2-s2-L.tiff") as tif:
        page = tif.pages[0]
        pooled, tags = page.asarray(), {code: tag.value for code, tag in page.tags.items()}
    assert pooled.shape == (30, 20)
    assert pooled[0, -1] == 100  # the window's three valid pixels, the missing one left out
    assert tags[42113] == "0" and not {33550, 33922, 34264, 34735} & set(tags)
    assert tags.get(274, 1) == 1
    assert tags[282] == (75, 1) and tags[283] == (150, 1)  # across is down, then pooled by 2


def test_a_stacks_picture_keeps_its_frames_notes_once(tmp_path):
    pic = read_stack(_write(tmp_path / "u32.tif", "uint32", 6, pages=3))
    assert pic.notes[0] == "3 frames"
    assert pic.notes[1:] == read_image(tmp_path / "u32.tif").notes[1:]  # after "used the first"
    assert len(pic.notes) == 2 and "32-bit integer samples" in pic.notes[1]


@pytest.mark.parametrize("value", [0, 9])
def test_an_orientation_tiff_does_not_define_is_read_upright_whole_and_in_strips(tmp_path, value):
    """Orientation 0 or 9 is none of TIFF's eight: the page is read as stored, whole and in
    strips alike (the strips took it for a turned page and left it to a whole read)."""
    from convcli.io.regions import open_regions

    stored = KINDS["grey"][0]
    path = _write(tmp_path / "odd.tif", "grey", value)
    np.testing.assert_array_equal(read_image(path).pixels[:, :, 0], stored)
    with open_regions(path) as source:
        np.testing.assert_array_equal(source.read_rows(0, source.height)[:, :, 0], stored)
