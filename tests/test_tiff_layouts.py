"""Every TIFF layout tifffile writes is read whole, in strips and as frames with tifffile's values.

One reader decides for every path (:class:`convcli.io.tiff_pages.TiffPages` and
:class:`convcli.io.regions.RegionSource`): a file is read with the values
tifffile gives, by each path, or refused in one line by each. Never a wrong
value in silence (Pillow decoded big-endian floats with deflate as 8.8e-44).
"""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest
import tifffile
from helpers import alpha_weighted_pool, assert_one_line_error, ok, run, run_without
from PIL import Image

from convcli.io import spill, tiff_pages
from convcli.io.images import ImageError, read_image, read_stack
from convcli.io.regions import open_regions

RNG = np.random.default_rng(31)
SHAPE = (37, 45)  # rows, columns: tiles of 16 leave partial tiles on both edges

SAMPLE_TYPES = [
    "uint8",
    "int8",
    "uint16",
    "int16",
    "uint32",
    "int32",
    "float16",
    "float32",
    "float64",
]
COMPRESSIONS = [None, "deflate", "lzw", "packbits", "zstd", "lzma"]


def _values(dtype: str, channels: int) -> np.ndarray:
    shape = SHAPE + ((channels,) if channels > 1 else ())
    kind = np.dtype(dtype)
    if kind.kind == "f":
        values = RNG.normal(0, 300, shape).astype(dtype)
        values.flat[::53] = np.inf
        values.flat[7::61] = np.nan
        return values
    info = np.iinfo(kind)
    low, high = max(info.min, -(2**20)), min(info.max, 2**20)  # exact in float32
    return RNG.integers(low, high, shape, endpoint=True).astype(dtype)


def _layouts():
    for dtype, byteorder, compression, predictor, bigtiff, tiled in itertools.product(
        SAMPLE_TYPES,
        "<>",
        COMPRESSIONS,
        (None, "horizontal", "float"),
        (False, True),
        (False, True),
    ):
        if predictor and compression is None:
            continue
        if predictor == "float" and not dtype.startswith("float"):
            continue
        yield dtype, byteorder, compression, predictor, bigtiff, tiled


def _write(path, values, byteorder, compression, predictor, bigtiff, tiled, **options):
    predictor = {None: None, "horizontal": 2, "float": 3}[predictor]
    tifffile.imwrite(
        path,
        values,
        byteorder=byteorder,
        compression=compression,
        predictor=predictor,
        bigtiff=bigtiff,
        tile=(16, 16) if tiled else None,
        rowsperstrip=None if tiled else 5,
        **options,
    )


def _read_strips(path) -> np.ndarray | None:
    source = open_regions(path)
    if source is None:
        return None
    with source:
        top = source.read_rows(0, 20)
        return np.concatenate([top, source.read_rows(20, source.height)])


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


@pytest.mark.parametrize("dtype", SAMPLE_TYPES)
def test_every_grey_layout_is_read_with_tifffiles_values_whole_and_in_strips(tmp_path, dtype):
    checked = 0
    for k, (dtype_, byteorder, compression, predictor, bigtiff, tiled) in enumerate(_layouts()):
        if dtype_ != dtype:
            continue
        values = _values(dtype, 1)
        path = tmp_path / f"{k}.tif"
        try:
            _write(path, values, byteorder, compression, predictor, bigtiff, tiled)
        except (ValueError, NotImplementedError, KeyError):
            continue  # a layout tifffile does not write
        expected = tifffile.imread(path).astype(np.float32)[:, :, None]
        whole = read_image(path)
        assert _same(whole.pixels, expected), (byteorder, compression, predictor, bigtiff, tiled)
        strips = _read_strips(path)
        assert strips is None or _same(strips, expected), (byteorder, compression, predictor)
        if dtype.startswith("float"):
            finite = expected[np.isfinite(expected)]
            assert whole.white == max(1.0, float(finite.max()))
        checked += 1
    assert checked >= 40


@pytest.mark.parametrize("dtype", ["uint8", "uint16"])
@pytest.mark.parametrize("channels", [3, 4])
def test_colour_layouts_of_both_byte_orders_agree_with_tifffile(tmp_path, dtype, channels):
    checked = 0
    for k, (dtype_, byteorder, compression, predictor, bigtiff, tiled) in enumerate(_layouts()):
        if dtype_ != dtype:
            continue
        values = _values(dtype, channels)
        path = tmp_path / f"{k}.tif"
        extra = {"extrasamples": ["unassalpha"]} if channels == 4 else {}
        _write(
            path,
            values,
            byteorder,
            compression,
            predictor,
            bigtiff,
            tiled,
            photometric="rgb",
            **extra,
        )
        expected = tifffile.imread(path).astype(np.float32)
        assert _same(read_image(path).pixels, expected), (byteorder, compression, predictor)
        strips = _read_strips(path)
        assert strips is None or _same(strips, expected)
        checked += 1
    assert checked >= 40


def _written(tmp_path, dtype: str, values: np.ndarray, options: dict):
    """Each layout of :func:`_layouts` of samples `dtype` that tifffile writes, `values`
    written so with `options`: (path, layout)."""
    for k, (dtype_, byteorder, compression, predictor, bigtiff, tiled) in enumerate(_layouts()):
        if dtype_ != dtype:
            continue
        path = tmp_path / f"{k}.tif"
        layout = (byteorder, compression, predictor, bigtiff, tiled)
        try:
            _write(path, values, *layout, **options)
        except (ValueError, NotImplementedError, KeyError):
            continue  # a layout tifffile does not write
        yield path, layout


def _colour_options(channels: int, planar: str = "contig") -> dict:
    """tifffile's options for grey + alpha, RGB or RGBA samples (the alpha unassociated),
    contiguous or planar ("separate")."""
    alpha = {"extrasamples": ["unassalpha"]} if channels in (2, 4) else {}
    return {"photometric": "rgb" if channels > 2 else "minisblack", "planarconfig": planar, **alpha}


@pytest.mark.parametrize(
    ("dtype", "channels"), [("float16", 3), ("float32", 3), ("float32", 4), ("float64", 4)]
)
def test_float_colour_layouts_are_read_with_tifffiles_values_whole_and_in_strips(
    tmp_path, dtype, channels
):
    checked = 0
    values = _values(dtype, channels)
    for path, layout in _written(tmp_path, dtype, values, _colour_options(channels)):
        expected = tifffile.imread(path).astype(np.float32)
        whole = read_image(path)
        assert whole.channels == ("R", "G", "B", "A")[:channels] and whole.floats, layout
        assert _same(whole.pixels, expected), layout
        strips = _read_strips(path)
        assert strips is not None and _same(strips, expected), layout
        finite = expected[np.isfinite(expected)]
        assert whole.white == max(1.0, float(finite.max()))
        checked += 1
    assert checked >= 40


@pytest.mark.parametrize(
    ("dtype", "channels"), [("uint8", 2), ("uint8", 3), ("uint16", 4), ("float32", 3)]
)
def test_planar_layouts_are_read_with_tifffiles_values_whole_and_in_strips(
    tmp_path, dtype, channels
):
    checked = 0
    planes = np.moveaxis(_values(dtype, channels), -1, 0)  # (samples, rows, columns)
    options = _colour_options(channels, "separate")
    for path, layout in _written(tmp_path, dtype, planes, options):
        with tifffile.TiffFile(path) as tif:
            assert tif.pages[0].planarconfig == 2
            expected = np.moveaxis(tif.asarray(), 0, -1).astype(np.float32)
        assert _same(read_image(path).pixels, expected), layout
        strips = _read_strips(path)
        assert strips is not None and _same(strips, expected), layout
        checked += 1
    assert checked >= 40


def _grey_and_alpha_16(alpha: str, planar: str = "contig") -> dict:
    """tifffile's options for 16-bit grey + `alpha` ("unassalpha" or "assocalpha")."""
    return {"photometric": "minisblack", "planarconfig": planar, "extrasamples": [alpha]}


def _as_read(values: np.ndarray, alpha: str) -> np.ndarray:
    """16-bit `values` (..., C) as read with `alpha`: associated alpha's colours divided by
    it (c * 65535 / alpha, rounded half up, at most 65535; 0 where alpha is 0)."""
    if alpha != "assocalpha":
        return values
    colour, opacity = values[..., :-1].astype(np.float64), values[..., -1:].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        divided = np.minimum(np.floor(colour * 65535 / opacity + 0.5), 65535)
    return np.concatenate([np.where(opacity == 0, 0, divided), opacity], axis=-1).astype(np.uint16)


@pytest.mark.parametrize("alpha", ["unassalpha", "assocalpha"])
@pytest.mark.parametrize("planar", ["contig", "separate"])
def test_16_bit_grey_and_alpha_is_read_at_16_bits_whole_and_in_strips(tmp_path, alpha, planar):
    """Pillow opens no 16-bit grey + alpha TIFF: the TIFF reader reads it, whatever is
    installed; associated alpha's grey divided by it, as 16-bit RGBA's colours are."""
    checked = 0
    values = _values("uint16", 2)
    samples = values if planar == "contig" else np.moveaxis(values, -1, 0)
    expected = _as_read(values, alpha).astype(np.float32)
    for path, layout in _written(tmp_path, "uint16", samples, _grey_and_alpha_16(alpha, planar)):
        whole = read_image(path)
        assert (whole.channels, whole.white, whole.depth) == (("L", "A"), 65535.0, 16), layout
        assert whole.notes == () and _same(whole.pixels, expected), layout
        strips = _read_strips(path)
        assert strips is not None and _same(strips, expected), layout
        checked += 1
    assert checked >= 40


def test_16_bit_grey_and_alpha_tiff_needs_no_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "imagecodecs", None)
    monkeypatch.setenv("CONVCLI_FAST_CODECS", "0")
    values = _values("uint16", 2)
    path = tmp_path / "la.tif"
    tifffile.imwrite(path, values, **_grey_and_alpha_16("unassalpha"))
    whole = read_image(path)
    assert (whole.depth, whole.notes) == (16, ())
    assert _same(whole.pixels, values.astype(np.float32))
    assert _same(_read_strips(path), whole.pixels)


@pytest.mark.parametrize("alpha", ["unassalpha", "assocalpha"])
@pytest.mark.parametrize("memory", [[], ["--memory", "1M"]])
def test_16_bit_grey_and_alpha_is_pooled_into_16_bit_levels_whole_and_in_strips(
    tmp_path, alpha, memory
):
    values = RNG.integers(0, 65536, (24, 34, 2)).astype(np.uint16)  # an odd column left over
    values[..., 1][RNG.random((24, 34)) < 0.3] = 0  # transparent pixels: their grey never shows
    values[:2, :2, 1] = 0  # a window of transparent pixels alone
    path = tmp_path / "la.tif"
    tifffile.imwrite(path, values, rowsperstrip=3, **_grey_and_alpha_16(alpha))
    for mode in ("max", "average"):
        result = ok("pool", "--mode", mode, "-v", path, "-o", tmp_path / mode, *memory)
        assert ("in strips" in result.stderr) == bool(memory), result.stderr
        pooled = tifffile.imread(tmp_path / mode / f"la_pool-{mode}-f2-s2.tiff")
        assert pooled.dtype == np.uint16
        expected = alpha_weighted_pool(_as_read(values, alpha), 2, mode, 65535.0)
        # the average grey within a level (float32), the rest exact
        atol = 1 if mode == "average" else 0
        np.testing.assert_allclose(pooled[..., 0], np.rint(expected[..., 0]), rtol=0, atol=atol)
        np.testing.assert_array_equal(pooled[..., 1], np.rint(expected[..., 1]))


def test_16_bit_rgba_of_associated_alpha_is_read_with_its_colours_divided_by_it(tmp_path):
    """A 16-bit RGBA TIFF of premultiplied colours (imagecodecs reads the stored values) is
    read as unassociated RGBA, as Pillow reads an 8-bit one: a half-transparent orange
    stays orange, and pad writes it back with its colours, as unassociated alpha."""
    pytest.importorskip("imagecodecs")
    opacity = np.linspace(0, 1, 40)[None, :, None] * np.ones((30, 1, 1))
    colour = np.array([0.8, 0.4, 0.2]) * opacity  # premultiplied
    values = np.round(np.concatenate([colour, opacity], axis=-1) * 65535).astype(np.uint16)
    path = tmp_path / "assoc.tif"
    tifffile.imwrite(path, values, photometric="rgb", extrasamples=["assocalpha"])
    picture = read_image(path)
    assert (picture.channels, picture.depth) == (("R", "G", "B", "A"), 16)
    expected = _as_read(values, "assocalpha")
    np.testing.assert_array_equal(picture.pixels, expected)
    # Where alpha is high enough to hold them, the colours are the orange's, to a level.
    opaque = values[..., 3] > 6553
    assert np.abs(expected[opaque][:, :3] / 65535 - [0.8, 0.4, 0.2]).max() < 2e-4
    ok("pad", "--pad", "0", "--format", "tiff", path, "-o", tmp_path / "out")
    with tifffile.TiffFile(tmp_path / "out" / "assoc_pad-constant-0.tiff") as tif:
        assert tif.pages[0].extrasamples == (2,)  # unassociated
        np.testing.assert_array_equal(tif.pages[0].asarray(), expected)


def test_planar_tiles_read_through_band_files_give_tifffiles_values(tmp_path, monkeypatch):
    monkeypatch.setattr(spill, "SPILL_BYTES", 0)  # every row of tiles on disk
    monkeypatch.setattr(spill, "PIECE_BYTES", 1)  # in pieces of one tile
    path = tmp_path / "planar.tif"
    planes = np.moveaxis(_values("float32", 4), -1, 0)
    _write(path, planes, "<", "zlib", "float", False, True, **_colour_options(4, "separate"))
    with tifffile.TiffFile(path) as tif:
        expected = np.moveaxis(tif.asarray(), 0, -1)
    assert _same(_read_strips(path), expected)


def _pool_by_one(path, out, *extra) -> np.ndarray:
    """The values `pool --size 1 --stride 1` writes as npy of `path` (its input's values)."""
    options = ("--size", 1, "--stride", 1, "--format", "npy", "-v")
    result = ok("pool", *options, path, "-o", out, *extra)
    assert ("in strips" in result.stderr) == bool(extra), result.stderr
    return np.load(next(out.glob("*.npy")))


def test_the_frames_of_a_float_rgba_stack_give_tifffiles_values(tmp_path):
    values = _values("float32", 4)
    stack = np.stack([values, values * 2, -values])
    path = tmp_path / "stack.tif"
    with tifffile.TiffWriter(path, byteorder=">", bigtiff=True) as tif:
        for page in stack:
            tif.write(page, compression="zlib", predictor=3, tile=(16, 16), **_colour_options(4))
    expected = tifffile.imread(path, key=range(len(stack))).astype(np.float32)
    assert _same(read_stack(path).pixels, expected)


def test_a_float_rgb_file_is_run_with_tifffiles_values_whole_and_in_strips(tmp_path):
    path = tmp_path / "colour.tif"
    tifffile.imwrite(
        path,
        _values("float32", 3),
        byteorder=">",
        compression="zlib",
        predictor=3,
        rowsperstrip=5,
        **_colour_options(3),
    )
    expected = tifffile.imread(path).astype(np.float32)
    whole = _pool_by_one(path, tmp_path / "whole")
    strips = _pool_by_one(path, tmp_path / "strips", "--memory", "64K")
    assert _same(whole, strips) and _same(whole.reshape(expected.shape), expected)


def _linear_rgb(path, shape=(60, 80)) -> np.ndarray:
    """A float RGB TIFF of linear light beyond 1 (an HDR render) and below 0 at `path`."""
    values = RNG.uniform(-2, 40, (*shape, 3)).astype(np.float32)
    tifffile.imwrite(path, values, photometric="rgb", tile=(16, 16), compression="zlib")
    return values


@pytest.mark.parametrize("memory", [[], ["--memory", "64K"]], ids=["whole", "strips"])
@pytest.mark.parametrize(
    "command, expected_of",
    [
        (["pool", "--size", "2"], lambda v: v.reshape(30, 2, 40, 2, 3).max(axis=(1, 3))),
        (
            ["pad", "--pad", "1", "--mode", "edge"],
            lambda v: np.pad(v, ((1, 1), (1, 1), (0, 0)), "edge"),
        ),
    ],
    ids=["pool", "pad"],
)
def test_a_float_rgb_tiff_keeps_its_float_values_through_pool_and_pad_into_tiff(
    tmp_path, command, expected_of, memory
):
    values = _linear_rgb(tmp_path / "render.tif")
    out = tmp_path / "out"
    result = ok(*command, "--format", "tiff", tmp_path / "render.tif", "-o", out, "-v", *memory)
    assert ("processed in strips" in result.stderr) == bool(memory), result.stderr
    (written,) = out.glob("*.tiff")
    with tifffile.TiffFile(written) as tif:
        assert tif.pages[0].photometric == tifffile.PHOTOMETRIC.RGB
        kept = tif.pages[0].asarray()
    assert kept.dtype == np.float32  # the values beyond 0..1, not levels clipped to them
    np.testing.assert_array_equal(kept, expected_of(values))


def test_the_frames_of_a_float_rgb_stack_keep_their_float_values_into_tiff(tmp_path):
    pages = [_linear_rgb(tmp_path / f"{k}.tif") for k in range(3)]
    with tifffile.TiffWriter(tmp_path / "stack.tif") as tif:
        for page in pages:
            tif.write(page, photometric="rgb")
    ok("pool", "--size", "2", "--format", "tiff", tmp_path / "stack.tif", "-o", tmp_path / "out")
    (written,) = (tmp_path / "out").glob("*.tiff")
    with tifffile.TiffFile(written) as tif:
        kept = np.stack([page.asarray() for page in tif.pages])
    expected = np.stack(pages).reshape(3, 30, 2, 40, 2, 3).max(axis=(2, 4))
    assert kept.dtype == np.float32
    np.testing.assert_array_equal(kept, expected)


GEO_TAGS = [  # a GeoTIFF's pixel size, tie point and keys (UTM 33N), and GDAL's nodata
    (33550, "d", 3, (10.0, 10.0, 0.0), True),
    (33922, "d", 6, (0, 0, 0, 500000.0, 4600000.0, 0), True),
    (34735, "H", 16, (1, 1, 0, 3, 1024, 0, 1, 1, 1025, 0, 1, 1, 3072, 0, 1, 32633), True),
    (42113, "s", 0, "-9999", True),
]


@pytest.mark.parametrize("memory", [[], ["--memory", "64K"]], ids=["whole", "strips"])
def test_the_nodata_samples_of_a_float_rgb_geotiff_are_never_averaged_and_kept(tmp_path, memory):
    bands = RNG.uniform(0, 900, (64, 48, 3)).astype(np.float32)
    bands[10:14, 6:10] = -9999  # a hole in every band
    bands[21, 21, 1] = -9999  # and in one
    tifffile.imwrite(tmp_path / "scene.tif", bands, photometric="rgb", extratags=GEO_TAGS)
    command = ("pool", "--mode", "average", "--format", "tiff", tmp_path / "scene.tif")
    ok(*command, "-o", tmp_path / "out", *memory)
    with tifffile.TiffFile(tmp_path / "out" / "scene_pool-average-f2-s2.tiff") as tif:
        assert tif.pages[0].tags[42113].value == "-9999"
        kept = tif.pages[0].asarray()
    windows = bands.reshape(32, 2, 24, 2, 3).transpose(0, 2, 4, 1, 3).reshape(32, 24, 3, 4)
    lost = windows == -9999
    missing = lost.all(axis=3)  # the hole's windows; the green window at 21, 21 keeps 3 values
    assert missing.sum(axis=(0, 1)).tolist() == [4, 4, 4]
    np.testing.assert_array_equal(kept[missing], -9999)
    valid_mean = np.where(lost, 0, windows).sum(axis=3) / np.maximum((~lost).sum(axis=3), 1)
    np.testing.assert_allclose(kept[~missing], valid_mean[~missing], rtol=1e-6)


def test_a_float_rgb_tiff_pooled_into_png_becomes_16_bit_levels_of_its_white(tmp_path):
    values = _linear_rgb(tmp_path / "render.tif")
    ok("pool", "--size", "2", "--format", "png", tmp_path / "render.tif", "-o", tmp_path / "out")
    (written,) = (tmp_path / "out").glob("*.png")
    bit_depth, colour_type = written.read_bytes()[24:26]  # IHDR
    assert (bit_depth, colour_type) == (16, 2)  # 16-bit RGB
    pooled = values.reshape(30, 2, 40, 2, 3).max(axis=(1, 3))
    expected = np.clip(pooled / values.max(), 0, 1) * 255  # the white: the largest value
    with Image.open(written) as im:  # Pillow reads 16-bit colour at 8 bits
        assert im.mode == "RGB"
        assert np.abs(np.asarray(im, np.float64) - expected).max() <= 1


UNREAD = {  # layouts neither the TIFF reader nor Pillow reads: what the error says of them
    "5 float planes": (
        (5, 20, 30),
        {"photometric": "minisblack", "planarconfig": "separate"},
        "5 float32 samples per pixel (grey + 4 unspecified, planar)",
    ),
    "float grey + alpha": (
        (20, 30, 2),
        {"photometric": "minisblack", "extrasamples": ["unassalpha"]},
        "2 float32 samples per pixel (grey + alpha)",
    ),
    "float CMYK": ((20, 30, 4), {"photometric": "separated"}, "4 float32 samples per pixel (CMYK)"),
}


@pytest.mark.parametrize("name", UNREAD)
@pytest.mark.parametrize("memory", [[], ["--memory", "64K"]])
def test_a_tiff_no_reader_reads_is_refused_in_one_line_saying_what_it_holds(tmp_path, name, memory):
    shape, options, held = UNREAD[name]
    path = tmp_path / "unread.tif"
    tifffile.imwrite(path, RNG.random(shape, np.float32), **options)
    result = run("pool", path, "-o", tmp_path / "out", "-q", *memory)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.splitlines() == [
        f"convcli: {path}: a TIFF of {held}, which convcli does not read"
    ]
    with pytest.raises(ImageError, match=r"^a TIFF of .*, which convcli does not read$"):
        read_image(path)


def test_a_page_of_a_stack_that_no_reader_reads_is_named_in_the_error(tmp_path):
    path = tmp_path / "mixed.tif"
    with tifffile.TiffWriter(path) as tif:
        tif.write(_values("uint8", 3), photometric="rgb")
        tif.write(RNG.random((*SHAPE, 2), np.float32), **_colour_options(2))
    with pytest.raises(ImageError) as raised:
        read_stack(path)
    assert str(raised.value) == (
        "frame 1 of 2: a TIFF of 2 float32 samples per pixel (grey + alpha), "
        "which convcli does not read"
    )


def test_the_reported_big_endian_deflate_float_file_gives_its_values_by_every_path(tmp_path):
    values = (np.arange(5120).reshape(64, 80) * 0.5).astype("float32")
    tifffile.imwrite(tmp_path / "be.tif", values, byteorder=">", compression="deflate")
    for extra in ([], ["--memory", "64K"]):
        out = tmp_path / f"out{len(extra)}"
        result = run(
            "pool",
            "--size",
            "1",
            "--stride",
            "1",
            "--format",
            "npy",
            str(tmp_path / "be.tif"),
            "-o",
            str(out),
            "-q",
            *extra,
        )
        assert result.exit_code == 0, result.output
        written = np.load(next(out.glob("*.npy")))
        np.testing.assert_array_equal(written.reshape(64, 80), values)


def test_frames_of_a_big_endian_float_stack_are_read_by_the_same_reader(tmp_path):
    values = _values("float32", 1)
    stack = np.stack([values, values * 2, -values])
    with tifffile.TiffWriter(tmp_path / "stack.tif", byteorder=">") as tif:
        for page in stack:
            tif.write(page, compression="zlib", predictor=3)
    read = read_stack(tmp_path / "stack.tif")
    np.testing.assert_array_equal(read.pixels[..., 0], stack)


def test_a_compression_whose_codec_is_missing_is_refused_in_one_line(tmp_path, monkeypatch):
    values = _values("float32", 1)
    tifffile.imwrite(tmp_path / "z.tif", values, byteorder=">", compression="zstd")
    monkeypatch.setattr(tiff_pages, "_codecs_here", lambda page: False)  # no imagecodecs
    with pytest.raises(ImageError, match=r"ZSTD.*convcli\[deep\]"):
        read_image(tmp_path / "z.tif")


@pytest.mark.parametrize("damage", ["zero byte count", "huge byte count", "short byte counts"])
def test_a_damaged_tiff_is_refused_or_read_alike_whole_and_in_strips(tmp_path, damage):
    values = _values("uint16", 1)
    path = tmp_path / "d.tif"
    tifffile.imwrite(path, values, compression="zlib", rowsperstrip=5, bigtiff=True)
    with tifffile.TiffFile(path) as tif:
        tag = tif.pages[0].tags["StripByteCounts"]
        counts = list(tag.value)
    if damage == "zero byte count":
        counts[2] = 0
    elif damage == "huge byte count":
        counts[2] = 2**31
    else:
        counts = [c // 2 for c in counts]
    with tifffile.TiffFile(path, mode="r+") as tif:
        tif.pages[0].tags["StripByteCounts"].overwrite(counts, dtype=16)  # LONG8
    outcomes = []
    for read in (lambda: read_image(path).pixels, lambda: _read_strips(path)):
        try:
            outcomes.append(read())
        except ImageError as exc:
            outcomes.append(str(exc).split(":")[0])
    whole, strips = outcomes
    if isinstance(whole, str) or isinstance(strips, str):
        assert whole == strips == "cannot decode the image"
    else:
        assert _same(whole, strips)


def _jpeg_layouts():
    """JPEG-compressed TIFFs as tifffile (libjpeg-turbo through imagecodecs) writes them:
    grey, and RGB stored as subsampled YCbCr; both byte orders, classic and BigTIFF, strips
    and tiles."""
    both = (False, True)
    for channels, byteorder, bigtiff, tiled in itertools.product((1, 3), "<>", both, both):
        yield channels, dict(byteorder=byteorder, bigtiff=bigtiff, tile=(16, 16) if tiled else None)


def _photo(channels: int) -> np.ndarray:
    """A smooth picture with an edge, as JPEG is made for (noise would only test the codec)."""
    rows, columns = np.mgrid[0 : SHAPE[0], 0 : SHAPE[1]]
    grey = (rows * 5 + columns * 3 + 60 * (columns > 20)) % 256
    picture = np.stack([grey, 255 - grey, (grey * 2) % 256], axis=-1).astype(np.uint8)
    return picture[..., 0] if channels == 1 else picture


def test_jpeg_tiffs_are_read_with_tifffiles_values_whole_and_in_strips(tmp_path):
    for k, (channels, options) in enumerate(_jpeg_layouts()):
        path = tmp_path / f"{k}.tif"
        tifffile.imwrite(path, _photo(channels), compression="jpeg", rowsperstrip=8, **options)
        expected = tifffile.imread(path).astype(np.float32).reshape(*SHAPE, channels)
        whole = read_image(path)
        assert whole.channels == ("L",) if channels == 1 else ("R", "G", "B"), options
        assert _same(whole.pixels, expected), options
        strips = _read_strips(path)
        assert strips is not None and _same(strips, expected), options


def test_a_jpeg_tiff_with_shared_tables_is_read_alike_by_pillow_and_by_strips(tmp_path):
    path = tmp_path / "libtiff.tif"
    Image.fromarray(_photo(3)).save(path, compression="jpeg")  # libtiff: JPEGTables, RGB
    with tifffile.TiffFile(path) as tif:
        assert tif.pages[0].jpegtables is not None
    with Image.open(path) as im:
        expected = np.asarray(im, np.float32)
    whole = _pool_by_one(path, tmp_path / "whole")
    strips = _pool_by_one(path, tmp_path / "strips", "--memory", "16K")
    assert _same(whole, strips) and _same(whole.reshape(expected.shape), expected)


def test_without_imagecodecs_jpeg_tiffs_are_pillows_or_refused_saying_so(tmp_path):
    little = tmp_path / "little.tif"
    tifffile.imwrite(little, _photo(3), compression="jpeg")
    big = tmp_path / "big.tif"
    tifffile.imwrite(big, _photo(3), compression="jpeg", byteorder=">", bigtiff=True)
    options = ("pool", "--size", "1", "--stride", "1", "--format", "npy", "-q")
    read = run_without("imagecodecs", *options, little, "-o", tmp_path / "pillow")
    assert read.returncode == 0, read.stderr  # Pillow's libtiff decodes it
    with Image.open(little) as im:
        expected = np.asarray(im, np.float32)
    written = np.load(tmp_path / "pillow" / "little_pool-max-f1-s1.npy")
    assert _same(written.reshape(expected.shape), expected)
    refused = run_without("imagecodecs", *options, big, "-o", tmp_path / "big")
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        f"convcli: {big}: cannot decode the image: its compression (JPEG) needs imagecodecs: "
        "pip install 'convcli[deep]'"
    ]
    budget = run_without("imagecodecs", *options, "--memory", "16K", little, "-o", tmp_path / "m")
    assert budget.returncode == 1
    (line,) = budget.stderr.splitlines()
    assert line.endswith(
        "is read whole (its JPEG compression is read in strips only with imagecodecs: "
        "pip install 'convcli[deep]'): raise --memory"
    ), line


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"photometric": "palette", "colormap": np.zeros((3, 256), np.uint16)}, "(palette) is"),
        ({"photometric": "rgb", "extratags": [(274, "H", 1, 3, True)]}, "Orientation tag"),
        ({"photometric": "rgb", "compression": "webp"}, "its WEBP compression is never read"),
    ],
    ids=["palette", "orientation", "webp"],
)
def test_a_tiff_read_whole_over_its_budget_is_refused_saying_why(tmp_path, options, why):
    path = tmp_path / "whole.tif"
    values = _photo(3 if options["photometric"] == "rgb" else 1)
    tifffile.imwrite(path, values, **options)
    command = ("pool", "--size", "1", "--stride", "1", "--memory", "16K", "-q")
    result = run(*command, path, "-o", tmp_path / "o")
    assert_one_line_error(result, 1, why, "never read in strips", "raise --memory")
    assert "only TIFFs and Zarr stores" not in result.stderr


def test_a_tiff_of_one_large_compressed_strip_over_its_budget_says_so(tmp_path, monkeypatch):
    from convcli.io import regions

    monkeypatch.setattr(regions, "MAX_SEGMENT_PIXELS", 64 * 63)  # one strip of 64 x 64: whole
    path = tmp_path / "one-strip.tif"
    tifffile.imwrite(path, _photo(3)[:32, :32].repeat(2, 0).repeat(2, 1), compression="zlib")
    command = ("pool", "--size", "1", "--stride", "1", "--memory", "16K", "-q")
    result = run(*command, path, "-o", tmp_path / "o")
    assert_one_line_error(result, 1, "each of its tiles or strips holds too many pixels")


@pytest.mark.parametrize("memory", [[], ["--memory", "1M"]], ids=["whole", "strips"])
def test_valid_values_equal_to_the_nodata_value_are_moved_off_it(tmp_path, small_strips, memory):
    """A Byte GeoTIFF whose nodata value is 0, its raw conv values in a float TIFF: the flat
    areas' valid 0s are written one float32 step above 0, so that only the windows that
    reach a missing pixel read as nodata (GDAL would mask every 0)."""
    grey = np.full((600, 400), 100, np.uint8)
    grey[:, 200:] = 150
    grey[300, 100] = 0  # missing: 9 windows reach it
    tags = [*GEO_TAGS[:3], (42113, "s", 0, "0", True)]
    tifffile.imwrite(tmp_path / "dem.tif", grey, extratags=tags, tile=(64, 64))
    command = ("conv", "-k", "sobel-x", "--normalize", "none", "--format", "tiff", "-v")
    result = ok(*command, *memory, tmp_path / "dem.tif", "-o", tmp_path / "edges.tif")
    assert ("processed in strips" in result.stderr) is bool(memory)
    with tifffile.TiffFile(tmp_path / "edges.tif") as tif:
        assert tif.pages[0].tags[42113].value == "0"
        values = tif.asarray()
    reference = _sobel_x_reflect(grey.astype(np.float64))
    missing = np.zeros(grey.shape, bool)
    missing[299:302, 99:102] = True
    assert (values == 0).sum() == missing.sum() and (values[missing] == 0).all()
    moved = (reference == 0) & ~missing
    assert moved.sum() > 100_000
    assert (values[moved] == np.nextafter(np.float32(0), np.float32(1))).all()
    np.testing.assert_array_equal(values[~missing & ~moved], reference[~missing & ~moved])


def _sobel_x_reflect(x: np.ndarray) -> np.ndarray:
    """Cross-correlation with convcli's sobel-x (1 0 -1, 2 0 -2, 1 0 -1), reflect-101 border."""
    padded = np.pad(x, 1, mode="reflect")
    rows = padded[:-2] + 2 * padded[1:-1] + padded[2:]
    return rows[:, :-2] - rows[:, 2:]


@pytest.mark.parametrize("memory", [[], ["--memory", "64K"]], ids=["whole", "strips"])
def test_the_results_of_nodata_windows_are_said_missing_not_only_not_finite(tmp_path, memory):
    # "4 result values are not finite (overflow, or NaN/inf in the input)" for a GeoTIFF
    # whose input held no NaN: its nodata pixels, read as missing.
    bands = RNG.uniform(0, 900, (64, 48)).astype(np.float32)
    bands[10:14, 6:10] = -9999  # four 2x2 windows of nodata only
    tifffile.imwrite(tmp_path / "scene.tif", bands, extratags=GEO_TAGS)
    command = ("pool", "--mode", "average", "--format", "tiff", "-v", tmp_path / "scene.tif")
    result = ok(*command, "-o", tmp_path / "out", *memory)
    assert "4 result values are missing (windows of nodata pixels, -9999) or not" in result.stderr


@pytest.mark.parametrize(
    ("dtype", "note"),
    [
        (np.int32, "32-bit integer samples computed in float32"),
        (np.uint32, "32-bit integer samples computed in float32"),
        (np.float64, "float64 samples computed in float32"),
    ],
)
def test_samples_that_float32_rounds_are_said_whole_and_in_strips(
    tmp_path, small_strips, dtype, note
):
    """convcli computes in float32: a pad of 32-bit integers past 2**24, or of float64
    values, writes them rounded to float32, which is said from the file's layout (the same
    whole and in strips), not written silently."""
    values = np.random.default_rng(3).integers(2**24, 2**31 - 1, (300, 200)).astype(dtype)
    tifffile.imwrite(tmp_path / "wide.tif", values)
    for folder, extra in (("whole", []), ("strips", ["--memory", small_strips])):
        said = ok("pad", "--pad", "1", tmp_path / "wide.tif", "-o", tmp_path / folder, *extra)
        assert said.stderr.count(note) == 1, said.stderr
        written = tifffile.imread(tmp_path / folder / "wide_pad-constant-1-L.tiff")
        np.testing.assert_array_equal(written[1:-1, 1:-1], values.astype(np.float32))


@pytest.mark.parametrize(("photometric", "samples"), [("minisblack", 2), ("rgb", 4)])
def test_an_extra_sample_of_no_stated_meaning_is_left_out_and_said(tmp_path, photometric, samples):
    """Not alpha (TIFF's ExtraSamples 0): the grey or colour samples are read, and the one
    left out is said (libvips keeps it as a band, GDAL as an 'Undefined' one)."""
    stored = np.random.default_rng(6).integers(0, 256, (20, 30, samples), dtype=np.uint8)
    tifffile.imwrite(tmp_path / "x.tif", stored, photometric=photometric, extrasamples=[0])
    said = ok("pad", "--pad", "0", "--format", "tiff", tmp_path / "x.tif", "-o", tmp_path / "o")
    assert said.stderr.count("extra sample of no stated meaning not read") == 1, said.stderr
    (out,) = (tmp_path / "o").glob("*.tiff")
    np.testing.assert_array_equal(np.squeeze(tifffile.imread(out)), np.squeeze(stored[..., :-1]))


def test_a_multi_page_tiffs_layout_notes_are_said_for_its_stack(tmp_path):
    """Every page read as a frame says its layout's note, said once for the stack."""
    pages = np.random.default_rng(8).integers(2**24, 2**31 - 1, (3, 20, 30)).astype(np.int32)
    with tifffile.TiffWriter(tmp_path / "pages.tif") as tif:
        for page in pages:
            tif.write(page)
    for n, frames in enumerate(([], ["--frames", "all"], ["--frames", "1,2"], ["--frames", "0"])):
        said = ok("pad", "--pad", "1", tmp_path / "pages.tif", *frames, "-o", tmp_path / f"o{n}")
        assert said.stderr.count("32-bit integer samples computed in float32") == 1, frames
