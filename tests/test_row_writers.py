"""convcli.io.row_writers: files written from row bands equal the whole-array writers' files."""

from __future__ import annotations

import os
import tempfile
import tracemalloc
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest
import tifffile
from helpers import assert_same_file
from hypothesis import given, settings
from hypothesis import strategies as st

from convcli.io import formats, row_writers, tiff_writer
from convcli.io.image_files import save_levels, save_npy, written_by_convcli
from convcli.io.images import read_image
from convcli.io.regions import open_regions
from convcli.io.row_writers import (
    TILE,
    free_space_problem,
    open_row_writer,
    space_needed,
)


def _values(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return (rng.standard_normal(shape) * 100).astype(dtype)
    values = rng.integers(0, np.iinfo(dtype).max + 1, shape).astype(dtype)
    values[: shape[0] // 3] //= 16  # some smooth-ish rows, some noise
    return values


def _write(path, values, cuts, fmt, *, height=None, **options):
    """`values` (H, W, C) written by a row writer in the bands `cuts` gives."""
    rows, width, channels = values.shape
    with open_row_writer(
        path,
        fmt=fmt,
        height=height or rows,
        width=width,
        channels=channels,
        dtype=values.dtype,
        **options,
    ) as out:
        for band in np.split(values, sorted(cuts)):
            out.write(band)
    return out


def _band_cuts(height):
    return st.lists(st.integers(0, height), max_size=5)


@given(data=st.data(), channels=st.sampled_from([1, 3]))
@settings(max_examples=15)
def test_npy_bytes_are_save_npys(data, channels):
    height = data.draw(st.integers(1, 30), label="height")
    values = _values((height, 7, channels), np.float32, seed=height)
    cuts = data.draw(_band_cuts(height), label="cuts")
    with tempfile.TemporaryDirectory() as folder:
        banded, whole = Path(folder) / "banded.npy", Path(folder) / "whole.npy"
        assert _write(banded, values, cuts, "npy").written
        save_npy(whole, values)
        assert banded.read_bytes() == whole.read_bytes()
        assert (
            space_needed("npy", height=height, width=7, channels=channels, dtype=np.float32)
            == whole.stat().st_size
        )


@given(
    data=st.data(),
    channels=st.sampled_from([1, 2, 3, 4]),
    dtype=st.sampled_from([np.uint8, np.uint16]),
)
@settings(max_examples=15)
def test_png_bytes_are_save_levels(data, channels, dtype):
    height = data.draw(st.integers(1, 30), label="height")
    values = _values((height, 5, channels), dtype, seed=height)
    cuts = data.draw(_band_cuts(height), label="cuts")
    with tempfile.TemporaryDirectory() as folder:
        banded, whole = Path(folder) / "banded.png", Path(folder) / "whole.png"
        _write(banded, values, cuts, "png")
        save_levels(whole, values[:, :, 0] if channels == 1 else values, fmt="png")
        assert_same_file(banded, whole)
        assert written_by_convcli(banded)


def _halved(values):
    """A reduced level by another route: edge-padded to even, four strided slices added."""
    pad = [(0, values.shape[0] % 2), (0, values.shape[1] % 2), (0, 0)]
    even = np.pad(values, pad, mode="edge")
    wide = np.float64 if values.dtype.kind == "f" else np.uint32
    quads = [even[i::2, j::2].astype(wide) for i in (0, 1) for j in (0, 1)]
    total = quads[0] + quads[1] + quads[2] + quads[3]
    if values.dtype.kind == "f":
        return (total / 4).astype(values.dtype)
    return ((total + 2) // 4).astype(values.dtype)


def _tiff_levels(path):
    """Every level of a TIFF written here: the full size, then its SubIFDs."""
    with tifffile.TiffFile(path) as tif:
        page = tif.pages[0]
        levels = [page]
        for offset in page.subifds or ():
            tif.filehandle.seek(offset)
            levels.append(tifffile.TiffPage(tif, index=len(levels)))
        return [(level.tags, level.asarray()) for level in levels]


TiffCase = namedtuple("TiffCase", "shape dtype")
TIFF_CASES = [
    TiffCase((600, 300, 1), np.uint8),
    TiffCase((257, 513, 3), np.uint8),
    TiffCase((300, 40, 2), np.uint16),
    TiffCase((260, 270, 4), np.uint16),
    TiffCase((531, 270, 1), np.float32),
    TiffCase((270, 300, 3), np.float32),
    TiffCase((290, 260, 4), np.float32),
    TiffCase((1, 1, 1), np.uint8),
    TiffCase((700, 1, 1), np.uint8),
    TiffCase((1, 300, 3), np.uint8),
]


@pytest.mark.parametrize("case", TIFF_CASES, ids=str)
def test_tiff_holds_the_rows_and_a_pyramid_of_2x2_means(tmp_path, case):
    values = _values(case.shape, case.dtype, seed=sum(case.shape))
    path = tmp_path / "out.tif"
    cuts = np.random.default_rng(1).integers(0, case.shape[0], 6)
    assert _write(path, values, cuts, "tiff").written
    expected = values
    levels = _tiff_levels(path)
    for index, (tags, stored) in enumerate(levels):
        np.testing.assert_array_equal(stored.reshape(expected.shape), expected)
        assert (tags["TileWidth"].value, tags["TileLength"].value) == (TILE, TILE)
        assert tags["Compression"].value == 8
        if index:
            assert tags["NewSubfileType"].value == 1  # a reduced-resolution image
        expected = _halved(expected)
    last = levels[-1][1]
    assert max(last.shape[:2]) <= TILE
    assert len(levels) == 1 or max(levels[-2][1].shape[:2]) > TILE
    assert written_by_convcli(path)
    assert os.listdir(tmp_path) == ["out.tif"]  # the levels' temporaries are gone


@pytest.mark.parametrize("case", [TIFF_CASES[i] for i in (1, 3, 4)], ids=str)
def test_tiff_tiles_deflated_by_isal_are_zlib_streams_of_the_same_levels(
    tmp_path, case, monkeypatch
):
    """With python-isal the tiles come encoded (its deflate, the predictor applied here);
    without it tifffile deflates them: the same values at every level, the same tags."""
    import zlib

    pytest.importorskip("isal")
    values = _values(case.shape, case.dtype, seed=3)
    cuts = np.random.default_rng(2).integers(0, case.shape[0], 4)
    assert _write(tmp_path / "isal.tif", values, cuts, "tiff").written
    monkeypatch.setattr(tiff_writer, "_isal_zlib", lambda: None)
    assert _write(tmp_path / "zlib.tif", values, cuts, "tiff").written
    fast, plain = _tiff_levels(tmp_path / "isal.tif"), _tiff_levels(tmp_path / "zlib.tif")
    assert len(fast) == len(plain) > 1
    for (tags, stored), (plain_tags, plain_stored) in zip(fast, plain, strict=True):
        np.testing.assert_array_equal(stored, plain_stored)
        for name in ("Compression", "Predictor", "TileWidth", "ImageWidth", "SampleFormat"):
            assert tags.valueof(name) == plain_tags.valueof(name), name
    with tifffile.TiffFile(tmp_path / "isal.tif") as tif:  # each tile a zlib stream
        page = tif.pages[0]
        tif.filehandle.seek(page.dataoffsets[0])
        tile = zlib.decompress(tif.filehandle.read(page.databytecounts[0]))
        assert len(tile) == TILE * TILE * case.shape[2] * np.dtype(case.dtype).itemsize


@pytest.mark.parametrize(
    "case", [c for c in TIFF_CASES if c.shape[2] in (1, 3) and c.dtype == np.uint8], ids=str
)
def test_tiff_reads_back_through_pillow_and_by_regions(tmp_path, case):
    values = _values(case.shape, case.dtype, seed=3)
    path = tmp_path / "out.tif"
    _write(path, values, [5, 90], "tiff")
    picture = read_image(path)
    np.testing.assert_array_equal(picture.pixels, values)
    with open_regions(path) as source:
        np.testing.assert_array_equal(source.read_rows(0, source.height), values)


@pytest.mark.parametrize("case", TIFF_CASES[:4], ids=str)
def test_a_tiff_that_fits_in_4_gib_is_a_classic_tiff_and_a_larger_one_a_bigtiff(
    tmp_path, case, monkeypatch
):
    # Classic, as GDAL and libvips write it: the readers that open no BigTIFF open it.
    values = _values(case.shape, case.dtype, seed=5)
    _write(tmp_path / "classic.tif", values, [7], "tiff")
    monkeypatch.setattr(formats, "CLASSIC_TIFF_BYTES", 0)  # as if it might not fit
    _write(tmp_path / "big.tif", values, [7], "tiff")
    for name, big in (("classic.tif", False), ("big.tif", True)):
        with tifffile.TiffFile(tmp_path / name) as tif:
            assert tif.is_bigtiff is big
        expected = values
        for _, stored in _tiff_levels(tmp_path / name):  # the same pyramid in both
            np.testing.assert_array_equal(stored.reshape(expected.shape), expected)
            expected = _halved(expected)
        with open_regions(tmp_path / name) as source:
            np.testing.assert_array_equal(source.read_rows(0, source.height), values)


@pytest.mark.parametrize(
    "shape, dtype, big",
    [
        ((50000, 50000, 1), np.uint8, False),  # 2.5 GB and its levels, 0.8 GB: 3.4 GB
        ((60000, 60000, 1), np.uint8, True),  # 3.6 GB and 1.2 GB: 4.8 GB
        ((30000, 30000, 1), np.float32, True),  # 3.6 GB at full size
        ((24000, 24000, 3), np.uint16, True),  # 3.5 GB and 1.2 GB
        ((17000, 17000, 1), np.float32, False),  # 1.2 GB and 0.4 GB
        ((1, 1, 1), np.uint8, False),
    ],
)
def test_bigtiff_is_needed_where_tiles_of_every_level_might_pass_4_gib(shape, dtype, big):
    from convcli.io.carried import NOTHING

    assert tiff_writer.pyramid_bigtiff_needed(shape, np.dtype(dtype), NOTHING) is big


def test_what_a_tiff_carries_counts_toward_its_4_gib():
    from convcli.io.carried import NOTHING, Carried

    shape, dtype = (56000, 56000, 1), np.dtype(np.uint8)  # 3.1 GB and 1.0 GB: 4.2 GB
    assert not tiff_writer.pyramid_bigtiff_needed(shape, dtype, NOTHING)
    profile = bytes(100 << 20)  # an ICC profile of 100 MB (no real one is), on both pages
    assert tiff_writer.pyramid_bigtiff_needed(shape, dtype, Carried(icc_profile=profile))


def _failing_bands(values):
    yield values[:3]
    raise RuntimeError("the computation failed")


@pytest.mark.parametrize(
    "fmt, dtype", [("npy", np.float32), ("png", np.uint8), ("tiff", np.uint8), ("tiff", np.float32)]
)
def test_a_failure_leaves_no_file_and_no_temporary(tmp_path, fmt, dtype):
    values = _values((600, 300, 1), dtype)
    path = tmp_path / f"out.{fmt}"
    with pytest.raises(RuntimeError, match="the computation failed"):
        with open_row_writer(path, fmt=fmt, height=600, width=300, channels=1, dtype=dtype) as out:
            for band in _failing_bands(values):
                out.write(band)
    with pytest.raises(ValueError, match="3 rows written of 600"):
        _write(path, values[:3], [], fmt, height=600)
    assert os.listdir(tmp_path) == []


def test_a_failure_of_the_tiff_writing_thread_reaches_the_caller(tmp_path, monkeypatch):
    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tifffile.TiffWriter, "write", full_disk)
    with pytest.raises(OSError, match="No space left"):
        _write(tmp_path / "out.tif", _values((2000, 30, 1), np.uint8), range(0, 2000, 100), "tiff")
    assert os.listdir(tmp_path) == []


def _write_sized(path, values, fmt, **options):
    return _write(path, values, [], fmt, **options)


@pytest.mark.parametrize("fmt, dtype", [("npy", np.float32), ("png", np.uint8), ("tiff", np.uint8)])
def test_an_existing_file_is_kept_or_replaced_as_save_levels_does(tmp_path, fmt, dtype):
    path = tmp_path / f"out.{fmt}"
    path.write_bytes(b"someone else's")
    values = _values((4, 3, 1), dtype)
    out = _write_sized(path, values, fmt)
    assert (out.will_write, out.written) == (False, False)
    assert path.read_bytes() == b"someone else's"
    with pytest.raises(FileExistsError, match="not written by convcli"):
        _write_sized(path, values, fmt, overwrite=True)
    path.unlink()
    assert _write_sized(path, values, fmt).written
    assert _write_sized(path, values + 1, fmt, overwrite=True).written
    assert os.listdir(tmp_path) == [path.name]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"fmt": "jpg"}, "fmt must be one of npy, png, tiff"),
        ({"height": 0}, "height must be a positive integer"),
        ({"width": 2.5}, "width must be a positive integer"),
        ({"channels": 0}, "channels must be a positive integer"),
        ({"fmt": "png", "dtype": np.uint8, "channels": 5}, "channels must be 1, 2, 3 or 4"),
        ({"fmt": "png", "dtype": np.float32}, "dtype for png must be one of uint8, uint16"),
        ({"fmt": "tiff", "channels": 5}, "channels must be 1, 2, 3 or 4"),
    ],
)
def test_bad_arguments_name_themselves(tmp_path, options, message):
    arguments = {
        "fmt": "npy",
        "height": 4,
        "width": 3,
        "channels": 1,
        "dtype": np.float32,
        **options,
    }
    with pytest.raises(ValueError, match=message):
        with open_row_writer(tmp_path / "x", **arguments):
            pass
    assert os.listdir(tmp_path) == []


def test_rows_of_the_wrong_shape_or_kind_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"rows must be \(n, 3, 1\)"):
        with open_row_writer(
            tmp_path / "x.png", fmt="png", height=4, width=3, channels=1, dtype=np.uint8
        ) as out:
            out.write(np.zeros((2, 4), np.uint8))
    with pytest.raises(ValueError, match="rows must be uint8; got uint16"):
        with open_row_writer(
            tmp_path / "x.png", fmt="png", height=4, width=3, channels=1, dtype=np.uint8
        ) as out:
            out.write(np.zeros((2, 3), np.uint16))
    with pytest.raises(ValueError, match="5 rows for an image of 4"):
        with open_row_writer(
            tmp_path / "x.npy", fmt="npy", height=4, width=3, channels=1, dtype=np.float32
        ) as out:
            out.write(np.zeros((5, 3)))  # float64 is taken as float32; too many rows are not
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "fmt, dtype", [("png", np.uint16), ("tiff", np.uint8), ("tiff", np.float32)]
)
def test_space_needed_bounds_incompressible_outputs(tmp_path, fmt, dtype):
    values = np.random.default_rng(7).integers(0, 65536, (300, 290, 1)).astype(dtype)
    path = tmp_path / f"out.{fmt}"
    _write_sized(path, values, fmt)
    bound = space_needed(fmt, height=300, width=290, channels=1, dtype=dtype)
    assert path.stat().st_size <= bound <= 3 * values.nbytes


def test_free_space_problem_names_the_sizes(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(row_writers.shutil, "disk_usage", lambda folder: usage(0, 0, 2_500_000))
    assert free_space_problem(tmp_path / "out.tif", 2_400_000) is None
    assert free_space_problem(tmp_path / "out.tif", 3_100_000_000) == (
        f"not enough free space for {tmp_path / 'out.tif'}: it needs about 3.1 GB, 2.5 MB free"
    )


def _peak_while_writing(path, height, width):
    """tracemalloc's peak while a constant-banded uint8 TIFF is written in bands of TILE rows."""
    band = np.zeros((TILE, width, 1), np.uint8)
    tracemalloc.start()
    try:
        with open_row_writer(
            path, fmt="tiff", height=height, width=width, channels=1, dtype=np.uint8
        ) as out:
            for top in range(0, height, TILE):
                rows = min(TILE, height - top)
                band[:rows] = top % 251
                out.write(band[:rows])
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_wide_tiff_is_written_with_memory_for_a_few_bands_whatever_its_height(tmp_path):
    width = 20000
    band_bytes = TILE * width
    short = _peak_while_writing(tmp_path / "short.tif", 1024, width)
    tall = _peak_while_writing(tmp_path / "tall.tif", 8192, width)
    # A band is 5 MB, held a few times over (being filled, queued, tiled, encoded),
    # with the reduced levels' rows; the tall image is 164 MB. How many bands are
    # in flight at the peak depends on the writing thread's pace.
    assert tall < 8 * band_bytes
    assert tall < short + 2 * band_bytes
    with tifffile.TiffFile(tmp_path / "tall.tif") as tif:
        page = tif.pages[0]
        assert page.shape == (8192, width) and len(page.subifds) == 7
        assert page.asarray()[::TILE, ::4999].tolist() == [
            [top % 251] * 5 for top in range(0, 8192, TILE)
        ]


def test_files_compared_by_content_differ_in_nothing_but_their_deflate_streams(tmp_path):
    # The file comparison of these tests (helpers.content) lets deflate choose its stream
    # and nothing else: not a sample, not a tag, not a chunk.
    from helpers import content
    from PIL import Image

    values = np.random.default_rng(4).integers(0, 256, (300, 270, 3)).astype(np.uint8)
    other = values.copy()
    other[299, 269, 2] ^= 1
    for name, data, level in (("a", values, 1), ("b", values, 9), ("c", other, 1)):
        tifffile.imwrite(
            tmp_path / f"{name}.tif",
            data,
            tile=(256, 256),
            compression="zlib",
            compressionargs={"level": level},
        )
        Image.fromarray(data).save(tmp_path / f"{name}.png", compress_level=level)
    for suffix in ("tif", "png"):
        a, b, c = (tmp_path / f"{n}.{suffix}" for n in "abc")
        assert a.read_bytes() != b.read_bytes()
        assert content(a) == content(b) != content(c)


def test_a_tiff_write_that_fails_leaves_no_deflate_threads(tmp_path, monkeypatch):
    # tifffile stopping on an error (a full disk) left the tile iterator, and its deflate
    # threads, waiting until the writer was collected.
    import threading

    import tifffile

    from convcli.layers._engine import tiles

    monkeypatch.setattr(tiles, "THREADS", 4)
    real = tifffile.TiffWriter.write

    def full_disk(self, data, *args, **kwargs):
        if hasattr(data, "__next__"):
            for _ in range(3):
                next(data)
            raise OSError(28, "No space left on device")
        return real(self, data, *args, **kwargs)

    monkeypatch.setattr(tifffile.TiffWriter, "write", full_disk)
    options = {"fmt": "tiff", "height": 600, "width": 700, "channels": 1, "dtype": np.float32}
    with pytest.raises(OSError):
        with open_row_writer(tmp_path / "out.tiff", **options) as out:
            for _ in range(6):
                out.write(np.ones((100, 700), np.float32))
    assert not [t for t in threading.enumerate() if t.name.startswith("convcli-codec")]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("stack", [False, True], ids=["image", "stack"])
def test_a_whole_tiff_and_a_stacks_tiff_are_bigtiffs_where_they_might_pass_4_gib(
    tmp_path, monkeypatch, stack
):
    # A stack of many frames passes 4 GiB page by page: a classic TIFF stops there with
    # "data too large for non-BigTIFF file". The rule of the tiled outputs decides it.
    from convcli.io.image_files import save_frames, save_levels

    rng = np.random.default_rng(8)
    levels = rng.integers(0, 256, (3, 20, 30) if stack else (20, 30, 3), dtype=np.uint8)

    def written(name):
        path = tmp_path / name
        if stack:
            assert save_frames(path, levels, fmt="tiff")
        else:
            assert save_levels(path, levels, fmt="tiff")
        with tifffile.TiffFile(path) as tif:
            np.testing.assert_array_equal(tif.asarray(), levels)
            return tif.is_bigtiff

    assert written("classic.tif") is False
    monkeypatch.setattr(formats, "CLASSIC_TIFF_BYTES", levels.nbytes)  # its samples alone
    assert written("big.tif") is True


def test_bigtiff_is_needed_past_4_gib_with_deflates_worst_case_and_the_tags():
    fits = formats.CLASSIC_TIFF_BYTES
    assert not formats.bigtiff_needed(3 << 30, 1000, 2000, 0)  # 3 GiB in 2000 pages
    assert formats.bigtiff_needed(fits, 0, 0, 0)  # as many samples as fit, stored whole
    assert formats.bigtiff_needed(fits - fits // 2000, 0, 0, 0)  # with deflate's 0.1%
    assert formats.bigtiff_needed(3 << 30, 0, 100_000, 10_000)  # the metadata of each page
    assert not formats.bigtiff_needed(3 << 30, 0, 100_000, 0)


def test_each_reduced_level_holds_the_colour_profile_and_its_own_resolution(tmp_path):
    """A viewer (libvips' thumbnail) that shows a reduced level found no profile there, and
    a resolution of 1 a pixel: every level now holds the profile, as libvips writes them."""
    from helpers import ok
    from PIL import ImageCms

    profile = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    source = tmp_path / "photo.tif"
    values = np.random.default_rng(2).integers(0, 256, (1200, 1600, 3), dtype=np.uint8)
    tifffile.imwrite(
        source,
        values,
        photometric="rgb",
        resolution=(300, 300),
        resolutionunit="INCH",
        iccprofile=profile,
    )
    ok("pool", "--size", "2", "--format", "tiff", source, "-o", tmp_path / "out")
    with tifffile.TiffFile(tmp_path / "out" / "photo_pool-max-f2-s2.tiff") as tif:
        levels = [tif.pages[0]]
        for offset in tif.pages[0].subifds:
            tif.filehandle.seek(offset)
            levels.append(tifffile.TiffPage(tif, index=len(levels)))
        assert [level.shape[1] for level in levels] == [800, 400, 200]
        for index, level in enumerate(levels):
            assert level.tags["InterColorProfile"].value == profile
            numerator, denominator = level.tags["XResolution"].value
            assert numerator / denominator == pytest.approx(150 / 2**index)
            assert level.tags["ResolutionUnit"].value == 2  # inch
