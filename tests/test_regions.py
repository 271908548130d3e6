"""convcli.io.regions: TIFF row bands equal to read_image's rows, decoding only what they need."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest
import tifffile
from hypothesis import given
from hypothesis import strategies as st

from convcli.io import regions
from convcli.io.decoders import deep_codecs_missing
from convcli.io.images import ImageError, read_image
from convcli.io.regions import open_regions
from convcli.io.tiff_pages import whole_read_reason

RNG = np.random.default_rng(20)


def _levels(shape, dtype=np.uint8):
    top = 2 if dtype is bool else np.iinfo(dtype).max + 1
    return RNG.integers(0, top, shape).astype(dtype)


def _floats(shape):
    values = (RNG.random(shape, dtype=np.float32) * 7 - 1).astype(np.float32)
    values.flat[::37] = np.inf
    values.flat[5::41] = -np.inf
    return values


RGB = {"photometric": "rgb"}
ALPHA = {"extrasamples": ["unassalpha"]}
# name: (pixels, tifffile.imwrite's options)
CASES = {
    "grey strips": (_levels((53, 71)), {}),
    "grey one strip deflate": (_levels((53, 71)), {"compression": "zlib"}),
    "grey tiled bigtiff deflate": (
        _levels((53, 71)),
        {"tile": (16, 32), "compression": "zlib", "bigtiff": True},
    ),
    "grey lzw predictor": (
        _levels((53, 71)),
        {"rowsperstrip": 7, "compression": "lzw", "predictor": 2},
    ),
    "grey packbits tiled": (_levels((40, 33)), {"tile": (16, 16), "compression": "packbits"}),
    "grey old deflate code": (_levels((20, 30)), {"compression": 32946, "rowsperstrip": 3}),
    "one row": (_levels((1, 300)), {"tile": (16, 16), "compression": "zlib"}),
    "one column": (_levels((90, 1)), {"rowsperstrip": 4, "compression": "zlib"}),
    "one pixel": (_levels((1, 1)), {}),
    "grey 16 big-endian tiled": (
        _levels((53, 71), np.uint16),
        {"byteorder": ">", "tile": (16, 16)},
    ),
    "grey 16 deflate predictor": (
        _levels((53, 71), np.uint16),
        {"compression": "zlib", "predictor": 2, "rowsperstrip": 10},
    ),
    "grey alpha tiled": (
        _levels((53, 71, 2)),
        {"photometric": "minisblack", **ALPHA, "tile": (32, 16), "compression": "zlib"},
    ),
    "grey extra unspecified": (
        _levels((20, 25, 2)),
        {"photometric": "minisblack", "extrasamples": ["unspecified"]},
    ),
    "rgb tiled lzw": (_levels((53, 71, 3)), {**RGB, "tile": (16, 48), "compression": "lzw"}),
    "rgba strips deflate": (
        _levels((53, 71, 4)),
        {**RGB, **ALPHA, "rowsperstrip": 5, "compression": "zlib"},
    ),
    "rgbx": (_levels((20, 25, 4)), {**RGB, "extrasamples": ["unspecified"]}),
    "rgbx 16 deflate": (
        _levels((20, 25, 4), np.uint16),
        {**RGB, "extrasamples": ["unspecified"], "compression": "zlib"},
    ),
    "rgb 16 tiled": (_levels((53, 71, 3), np.uint16), {**RGB, "tile": (16, 16)}),
    "rgba 16 deflate": (_levels((30, 20, 4), np.uint16), {**RGB, **ALPHA, "compression": "zlib"}),
    "float tiled predictor": (
        _floats((53, 71)),
        {"tile": (16, 16), "compression": "zlib", "predictor": 3},
    ),
    "float big-endian strips": (_floats((33, 20)), {"byteorder": ">", "rowsperstrip": 4}),
    "float small values": (_floats((20, 20)) / 100, {}),
    "bilevel min-is-white": (_levels((53, 71), bool), {}),
    "bilevel min-is-black packbits": (
        _levels((53, 71), bool),
        {"photometric": "minisblack", "compression": "packbits", "rowsperstrip": 3},
    ),
    "grey min-is-white": (_levels((53, 71)), {"photometric": "miniswhite", "compression": "zlib"}),
    "grey 16 min-is-white": (
        _levels((53, 71), np.uint16),
        {"photometric": "miniswhite", "compression": "zlib", "rowsperstrip": 9},
    ),
    "grey 12 bits": (_levels((53, 71), np.uint16) >> 4, {"bitspersample": 12, "rowsperstrip": 5}),
    "ome-tiff three planes": (
        _levels((3, 53, 71)),
        {"ome": True, "tile": (16, 16), "compression": "zlib"},
    ),
    "pages": (_levels((2, 20, 30)), {"photometric": "minisblack"}),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Each case written once: name -> (path, read_image's Picture)."""
    folder = tmp_path_factory.mktemp("regions")
    made = {}
    for index, (name, (pixels, options)) in enumerate(CASES.items()):
        path = folder / f"case{index}.tif"
        tifffile.imwrite(path, pixels, **options)
        made[name] = (path, read_image(path))
    return made


@pytest.mark.parametrize("name", CASES)
def test_whole_image_and_header_match_read_image(files, name):
    path, picture = files[name]
    with open_regions(path) as source:
        assert (source.height, source.width) == picture.pixels.shape[:2]
        assert source.channels == picture.channels
        assert source.white == picture.white
        assert source.depth == picture.depth
        assert source.notes == picture.notes
        np.testing.assert_array_equal(source.read_rows(0, source.height), picture.pixels)


@given(data=st.data(), name=st.sampled_from(sorted(CASES)))
def test_random_bands_match_read_image(files, data, name):
    path, picture = files[name]
    height = picture.pixels.shape[0]
    with open_regions(path) as source:
        for _ in range(3):  # in any order, overlapping or not
            r0 = data.draw(st.integers(0, height), label="r0")
            r1 = data.draw(st.integers(r0, height), label="r1")
            band = source.read_rows(r0, r1)
            assert band.dtype == np.float32
            np.testing.assert_array_equal(band, picture.pixels[r0:r1])


@pytest.mark.parametrize("name", CASES)
def test_samples_are_the_stored_8_bit_values_where_read_image_keeps_them(files, name):
    # Strips read these (uint8 where a whole read keeps uint8), so that a strip's picture is
    # a whole read's rows: the same dtype and values.
    path, _ = files[name]
    picture = read_image(path)  # its own: asking for pixels makes a picture's samples float32
    with open_regions(path) as source:
        rows = source.read_samples(1, source.height)
        assert rows.dtype == (np.uint8 if source.reads_as_stored else np.float32)
        if source.reads_as_stored:
            assert picture.samples.dtype == np.uint8
            np.testing.assert_array_equal(rows, picture.samples[1:])
        np.testing.assert_array_equal(rows.astype(np.float32), picture.pixels[1:])
    assert (
        name not in ("grey strips", "rgb tiled lzw", "grey alpha tiled") or source.reads_as_stored
    )


def test_sixteen_bit_colour_without_imagecodecs_is_the_high_byte(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVCLI_FAST_CODECS", "0")
    path = tmp_path / "rgb16.tif"
    tifffile.imwrite(path, _levels((20, 30, 3), np.uint16), photometric="rgb", tile=(16, 16))
    picture = read_image(path)
    with open_regions(path) as source:
        assert (source.white, source.depth, source.notes) == (255.0, 8, picture.notes)
        assert "8-bit" in source.notes[0]
        np.testing.assert_array_equal(source.read_rows(3, 20), picture.pixels[3:])


def test_a_16_bit_min_is_white_page_is_inverted_as_its_8_bit_one_is(tmp_path):
    """MinIsWhite: 0 is white. Viewers (libvips, ImageMagick) show 65535 - value."""
    stored = _levels((20, 30), np.uint16)
    tifffile.imwrite(tmp_path / "w.tif", stored, photometric="miniswhite")
    picture = read_image(tmp_path / "w.tif")
    assert (picture.white, picture.depth, picture.notes) == (65535.0, 16, ())
    np.testing.assert_array_equal(picture.pixels[:, :, 0], 65535 - stored.astype(np.float32))


def test_a_12_bit_page_keeps_its_values_on_a_scale_of_4095(tmp_path):
    """Its values as stored, 4095 white (as ImageMagick shows it: not 6% of white)."""
    stored = _levels((20, 30), np.uint16) >> 4
    tifffile.imwrite(tmp_path / "b12.tif", stored, bitspersample=12)
    picture = read_image(tmp_path / "b12.tif")
    assert (picture.white, picture.depth, picture.channels) == (4095.0, 16, ("L",))
    np.testing.assert_array_equal(picture.pixels[:, :, 0], stored)


def test_a_12_bit_page_without_imagecodecs_says_what_it_needs(tmp_path, monkeypatch):
    tifffile.imwrite(tmp_path / "b12.tif", _levels((20, 30), np.uint16) >> 4, bitspersample=12)
    monkeypatch.setitem(sys.modules, "imagecodecs", None)  # not installed
    with pytest.raises(ImageError) as caught:
        read_image(tmp_path / "b12.tif")
    assert str(caught.value) == (
        "cannot decode the image: its 12-bit samples need imagecodecs: pip install 'convcli[deep]'"
    )
    assert open_regions(tmp_path / "b12.tif") is None
    # --memory's refusal says the same (it blamed the page's compression, "none")
    assert whole_read_reason(str(tmp_path / "b12.tif")) == (
        "its 12-bit samples are read in strips only with imagecodecs: pip install 'convcli[deep]'"
    )


@pytest.mark.parametrize("fast", ["1", "0"])
def test_sixteen_bit_colour_says_its_unread_extra_sample(tmp_path, monkeypatch, fast):
    """Read at 16 bits where imagecodecs is here, else as the high byte: in both, the extra
    sample of no stated meaning is said to be left out."""
    monkeypatch.setenv("CONVCLI_FAST_CODECS", fast)
    stored = _levels((20, 30, 4), np.uint16)
    path = tmp_path / "rgbx16.tif"
    tifffile.imwrite(path, stored, photometric="rgb", extrasamples=["unspecified"])
    picture = read_image(path)
    assert picture.channels == ("R", "G", "B")
    assert picture.notes[-1].endswith(regions.UNSPECIFIED_NOTE)  # with the narrowing, if any
    if deep_codecs_missing() is None:
        assert picture.depth == 16
        np.testing.assert_array_equal(picture.pixels, stored[..., :3])
    else:
        assert "8-bit" in picture.notes[0]
        np.testing.assert_array_equal(picture.pixels, stored[..., :3] >> 8)


def _cmyk(path):
    tifffile.imwrite(path, _levels((20, 30, 4)), photometric="separated")


def _orientation(path):
    tifffile.imwrite(path, _levels((20, 30)), extratags=[(274, "H", 1, 6, True)])


FALLBACKS = {
    "palette": lambda p: tifffile.imwrite(
        p, _levels((20, 30)), photometric="palette", colormap=_levels((3, 256), np.uint16)
    ),
    "cmyk": _cmyk,
    "rotated": _orientation,
    "premultiplied alpha": lambda p: tifffile.imwrite(
        p, _levels((20, 30, 4)), **RGB, extrasamples=["assocalpha"]
    ),
    "png": lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40)),
    "not tiff at all": lambda p: p.write_bytes(b"plain text"),
    "corrupt header": lambda p: p.write_bytes(b"II*\0" + bytes(4) + b"junk"),
}


@pytest.mark.parametrize("name", FALLBACKS)
def test_layouts_read_whole_give_none(tmp_path, name):
    path = tmp_path / "x.tif"
    FALLBACKS[name](path)
    assert open_regions(path) is None


def test_one_large_compressed_strip_is_read_whole(tmp_path, monkeypatch):
    path = tmp_path / "one-strip.tif"
    tifffile.imwrite(path, _levels((64, 64)), compression="zlib")  # one strip
    monkeypatch.setattr(regions, "MAX_SEGMENT_PIXELS", 64 * 63)
    assert open_regions(path) is None
    tifffile.imwrite(path, _levels((64, 64)))  # uncompressed: rows read straight
    with open_regions(path) as source:
        np.testing.assert_array_equal(source.read_rows(10, 12), read_image(path).pixels[10:12])


def test_missing_file_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        open_regions(tmp_path / "missing.tif")
    assert open_regions(tmp_path) is None  # a folder: the whole-image path reports it


def test_bad_rows_name_the_arguments(files):
    with open_regions(files["grey strips"][0]) as source:
        for r0, r1 in [(-1, 3), (4, 3), (0, 54), (0.0, 3)]:
            with pytest.raises(ValueError, match="r0 <= r1 <= 53"):
                source.read_rows(r0, r1)


@pytest.mark.parametrize(
    "options",
    [
        {"tile": (16, 16), "compression": "zlib"},
        {"rowsperstrip": 8},
        {"rowsperstrip": 8, "compression": "zlib"},
    ],
)
def test_truncated_file_is_one_line_image_error(tmp_path, options):
    path = tmp_path / "cut.tif"
    tifffile.imwrite(path, _levels((64, 64)), **options)
    with tifffile.TiffFile(path) as tif:
        page = tif.pages[0]
        end = max(np.add(page.dataoffsets, page.databytecounts))
    with open(path, "r+b") as fh:
        fh.truncate(end - 100)
    with open_regions(path) as source:
        source.read_rows(0, 8)  # the first segments are whole
        with pytest.raises(ImageError, match="^cannot decode the image: [^\n]*$"):
            source.read_rows(56, 64)


def test_a_band_reads_only_its_segments(tmp_path, monkeypatch):
    path = tmp_path / "tiled.tif"
    pixels = _levels((100, 100))
    tifffile.imwrite(path, pixels, tile=(16, 16), compression="zlib")
    asked = []
    real = tifffile.FileHandle.read_segments

    def counting(self, offsets, counts, *args, indices=None, **kwargs):
        asked.extend(indices)
        return real(self, offsets, counts, *args, indices=indices, **kwargs)

    monkeypatch.setattr(tifffile.FileHandle, "read_segments", counting)
    with open_regions(path) as source:
        np.testing.assert_array_equal(source.read_rows(40, 50)[..., 0], pixels[40:50])
        assert sorted(asked) == list(range(14, 28))  # tile rows 2 and 3, 7 tiles each
        asked.clear()
        source.read_rows(50, 70)  # tile row 3 is kept from the band before
        assert sorted(asked) == list(range(28, 35))


def test_a_band_of_a_large_image_allocates_about_the_band(tmp_path):
    path = tmp_path / "large.tif"
    size, tile = 20000, 256
    tiles = (np.full((tile, tile), i % 251, np.uint8) for i in range(79 * 79))
    tifffile.imwrite(
        path,
        tiles,
        shape=(size, size),
        dtype=np.uint8,
        tile=(tile, tile),
        compression="zlib",
        bigtiff=True,
    )
    with open_regions(path) as source:
        tracemalloc.start()
        try:
            band = source.read_rows(300, 556)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert band.shape == (256, size, 1) and band[0, 0, 0] == 79 % 251
    # The band is 20 MB of float32 and a tile row 5 MB per row of tiles (two here);
    # the image is 400 MB as stored and 1.6 GB as float32.
    assert peak < band.nbytes + 3 * tile * size


def test_without_imagecodecs_deflate_and_packbits_are_read_and_lzw_is_not(files):
    paths = {
        name: str(files[name][0])
        for name in (
            "grey tiled bigtiff deflate",
            "grey packbits tiled",
            "grey lzw predictor",
            "float tiled predictor",
        )
    }
    script = textwrap.dedent(f"""
        import sys
        sys.modules["imagecodecs"] = None  # as if not installed
        import numpy as np
        from convcli.io.regions import open_regions
        for name, path in {paths!r}.items():
            source = open_regions(path)
            print(name, "none" if source is None else source.read_rows(0, 5).sum())
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    lines = dict(line.rsplit(" ", 1) for line in done.stdout.splitlines())
    for name in ("grey tiled bigtiff deflate", "grey packbits tiled"):
        assert float(lines[name]) == files[name][1].pixels[:5].sum()
    assert lines["grey lzw predictor"] == "none"
    assert lines["float tiled predictor"] == "none"
    # --memory's refusal names the predictor (it blamed the deflate alone)
    script = textwrap.dedent(f"""
        import sys
        sys.modules["imagecodecs"] = None
        from convcli.io.tiff_pages import whole_read_reason
        print(whole_read_reason({paths["float tiled predictor"]!r}))
    """)
    said = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert said.stdout.strip() == (
        "its ADOBE_DEFLATE compression with predictor FLOATINGPOINT is read in strips only "
        "with imagecodecs: pip install 'convcli[deep]'"
    )


@pytest.mark.parametrize("compression", ["webp", "jpegxl", "lerc"])
def test_a_tiff_compressed_by_a_codec_of_imagecodecs_is_read_whole(tmp_path, compression):
    """WebP, JPEG XL, LERC ...: tifffile decodes them with imagecodecs (Pillow's libtiff
    mostly cannot): read whole as tifffile gives them, never in strips."""
    pytest.importorskip("imagecodecs")
    stored = _levels((37, 53, 3))
    path = tmp_path / f"{compression}.tif"
    options = {"compressionargs": {"lossless": True}} if compression == "webp" else {}
    tifffile.imwrite(path, stored, photometric="rgb", compression=compression, **options)
    picture = read_image(path)
    np.testing.assert_array_equal(picture.pixels, tifffile.imread(path))
    assert (picture.channels, picture.notes) == (("R", "G", "B"), ())
    assert open_regions(path) is None


def test_a_webp_tiff_without_imagecodecs_says_what_it_needs(tmp_path, monkeypatch):
    pytest.importorskip("imagecodecs")
    path = tmp_path / "w.tif"
    tifffile.imwrite(path, _levels((20, 30, 3)), photometric="rgb", compression="webp")
    monkeypatch.setitem(sys.modules, "imagecodecs", None)
    monkeypatch.setattr(tifffile.TIFF, "DECOMPRESSORS", {1: None}, raising=False)
    with pytest.raises(ImageError, match=r"its compression \(WEBP\) needs imagecodecs"):
        read_image(path)
