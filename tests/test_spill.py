"""Bands too wide to hold, kept on disk (convcli.io.spill): the same files, less memory."""

from __future__ import annotations

import io
import os
import tracemalloc

import numpy as np
import pytest
import tifffile
from helpers import assert_same_file
from hypothesis import given, settings
from hypothesis import strategies as st

from convcli.io import spill
from convcli.io.regions import open_regions
from convcli.io.row_writers import TILE, open_row_writer
from convcli.io.spill import BandFile


@pytest.fixture
def spill_everything(monkeypatch):
    """Every band on disk, in pieces of one tile: the disk path wherever a band is."""
    monkeypatch.setattr(spill, "SPILL_BYTES", 0)
    monkeypatch.setattr(spill, "PIECE_BYTES", 1)


def _short_calls(call):
    """A band file's read or write call that moves 7 bytes of one buffer at most."""

    def short(self, offset, buffers, reading):
        return call(self, offset, [buffers[0][:7]], reading)

    return short


def _transfers(mode: str, patch: pytest.MonkeyPatch) -> None:
    """Band files read and write as `mode` says: ``vectored`` (as the system allows),
    ``plain`` (one buffer a call, as on Windows) or ``short`` (3 buffers a call and
    calls that stop short)."""
    if mode == "plain":
        patch.setattr(spill, "_VECTORED", False)
    elif mode == "short":
        patch.setattr(spill, "_IOV_MAX", 3)
        patch.setattr(BandFile, "_call", _short_calls(BandFile._call))


@pytest.mark.parametrize("transfers", ["vectored", "plain", "short"])
@given(
    data=st.data(),
    channels=st.sampled_from([1, 3]),
    dtype=st.sampled_from([np.uint8, np.uint16, np.float32]),
)
@settings(max_examples=30, deadline=None, derandomize=True)
def test_a_band_file_gives_back_the_rows_and_pieces_written(data, channels, dtype, transfers):
    with pytest.MonkeyPatch.context() as patch:
        _transfers(transfers, patch)
        _write_and_read_a_band_file(data, channels, dtype)


def _write_and_read_a_band_file(data, channels, dtype):
    rows = data.draw(st.integers(1, 20), label="rows")
    width = data.draw(st.integers(1, 700), label="width")
    tile = data.draw(st.sampled_from([16, 64, 256]), label="tile")
    band_rows = data.draw(st.integers(1, rows), label="band_rows")
    values = np.random.default_rng(rows * width).integers(0, 200, (rows, width, channels))
    values = values.astype(dtype)
    band = BandFile(rows, width, channels, dtype, tile=tile, band_rows=band_rows)
    try:
        assert [c0 % tile for c0, _ in band.pieces] == [0] * len(band.pieces)
        assert band.pieces[0][0] == 0 and band.pieces[-1][1] == width
        cuts = sorted(data.draw(st.lists(st.integers(0, rows), max_size=4), label="cuts"))
        top = 0
        for part in np.split(values, cuts):
            band.write_rows(top, part)
            top += len(part)
        r0 = data.draw(st.integers(0, rows - 1), label="r0")
        r1 = data.draw(st.integers(r0 + 1, rows), label="r1")
        assert np.array_equal(band.read_rows(r0, r1), values[r0:r1])
        r1 = min(r1, (r0 // band_rows + 1) * band_rows)  # a piece is read within a band
        for index, (c0, c1) in enumerate(band.pieces):
            assert np.array_equal(band.read_piece(index, r0, r1), values[r0:r1, c0:c1])
    finally:
        band.close()


def _image(height, width, channels, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal((height, width, channels)).astype(dtype)
    values = rng.integers(0, 256, (height, width, channels)).astype(dtype)
    values[: height // 2] //= 8  # smooth rows and noisy rows
    return values


def _write(path, values, fmt, rows_per_write=37, **options):
    height, width, channels = values.shape
    with open_row_writer(
        path, fmt=fmt, height=height, width=width, channels=channels, dtype=values.dtype, **options
    ) as out:
        for top in range(0, height, rows_per_write):
            out.write(values[top : top + rows_per_write])


@pytest.mark.parametrize("channels, dtype", [(3, np.uint8), (1, np.float32), (2, np.uint16)])
def test_a_tiff_written_through_band_files_is_the_same_file(tmp_path, monkeypatch, channels, dtype):
    values = _image(3 * TILE + 41, 4 * TILE + 77, channels, dtype)
    _write(tmp_path / "memory.tif", values, "tiff")
    monkeypatch.setattr(spill, "SPILL_BYTES", 0)
    monkeypatch.setattr(spill, "PIECE_BYTES", 1)
    _write(tmp_path / "disk.tif", values, "tiff")
    assert_same_file(tmp_path / "disk.tif", tmp_path / "memory.tif")
    with tifffile.TiffFile(tmp_path / "disk.tif") as tif:
        page = tif.pages[0]
        assert np.array_equal(page.asarray().reshape(values.shape), values)
        assert len(page.subifds) == 3  # 1101 wide: 551, 276, 138


def _full_width_band_files(monkeypatch, width: int) -> list:
    """The band files of `width` columns and :data:`TILE` rows made from now on (those
    :class:`convcli.io.pyramid.RowBands` makes for the full size), as a list that grows."""
    made = []
    make = BandFile.__init__

    def counted(self, rows, columns, *args, **options):
        make(self, rows, columns, *args, **options)
        if (rows, columns) == (TILE, width):
            made.append(self)

    monkeypatch.setattr(BandFile, "__init__", counted)
    return made


@pytest.mark.parametrize("fmt, files", [("tiff", 2), ("zarr", 1)])  # the band files of one write
def test_a_budget_holds_wide_bands_in_memory_and_writes_the_same_output(
    tmp_path, monkeypatch, fmt, files
):
    if fmt == "zarr":
        zarr = pytest.importorskip("zarr")
    values = _image(2 * TILE + 30, 5200, 1, np.float32)  # a band of 5.3 MB: over SPILL_BYTES
    made = _full_width_band_files(monkeypatch, 5200)
    _write(tmp_path / f"default.{fmt}", values, fmt)
    assert len(made) == files
    _write(tmp_path / f"small.{fmt}", values, fmt, spill_limit=spill.spill_limit(60 << 20))
    assert len(made) == 2 * files  # a twelfth of 60 MB is 5 MB
    _write(tmp_path / f"budget.{fmt}", values, fmt, spill_limit=spill.spill_limit(64 << 20))
    assert len(made) == 2 * files  # 5.3 MB, held in memory
    if fmt == "tiff":
        assert_same_file(tmp_path / "budget.tiff", tmp_path / "default.tiff")
        with tifffile.TiffFile(tmp_path / "budget.tiff") as tif:
            assert np.array_equal(tif.pages[0].asarray(), values[:, :, 0])
        return
    default, budget = (zarr.open_group(tmp_path / f"{name}.zarr") for name in ("default", "budget"))
    assert sorted(budget.array_keys()) == sorted(default.array_keys()) == list("012345")
    for key in default.array_keys():
        assert np.array_equal(budget[key][:], default[key][:])
    assert np.array_equal(budget["0"][:].reshape(values.shape[:2]), values[:, :, 0])


def test_the_memory_budget_decides_where_the_bands_of_a_tiff_in_strips_wait(tmp_path, monkeypatch):
    from helpers import ok

    _tiled_tiff(tmp_path / "in.tif", 700, 9000)
    monkeypatch.setattr(spill, "BUDGET_SHARE", 1)  # a band of 9.2 MB under 10 MB
    made = _full_width_band_files(monkeypatch, 9000)
    outputs = {}
    for memory in ("8M", "10M"):
        out = tmp_path / memory
        ok("conv", "-k", "vertical", "--normalize", "none", "--format", "tiff",
           "--memory", memory, "-v", tmp_path / "in.tif", "-o", out)  # fmt: skip
        outputs[memory] = out / "in_conv-vertical-none-sum.tiff"
        assert len(made) == 2  # the smaller budget's two files, none for the larger one
    assert_same_file(outputs["8M"], outputs["10M"])
    # two outputs share the budget: 5 MB each, and their bands wait in files again
    ok("conv", "-k", "vertical,horizontal", "--normalize", "none", "--format", "tiff",
       "--memory", "10M", tmp_path / "in.tif", "-o", tmp_path / "two")  # fmt: skip
    assert len(made) == 2 + 2 * 2
    assert_same_file(tmp_path / "two" / "in_conv-vertical-none-sum.tiff", outputs["8M"])


def test_the_memory_budget_decides_where_the_rows_of_tiles_read_in_strips_wait(
    tmp_path, monkeypatch
):
    from helpers import ok

    _tiled_tiff(tmp_path / "in.tif", 2 * TILE + 44, 20000)  # rows of tiles of 5.1 MB
    monkeypatch.setattr(spill, "BUDGET_SHARE", 1)
    made = _full_width_band_files(monkeypatch, 20000)
    outputs = {}
    for memory, files in (("4M", 4), ("12M", 0)):  # a limit of 4 MB, then of 12 MB
        out = tmp_path / memory
        ok("conv", "-k", "vertical", "--format", "png", "--memory", memory, "-v",
           tmp_path / "in.tif", "-o", out)  # fmt: skip
        # two full rows of tiles, read by the statistics' pass and the writing one
        assert len(made) == files
        made.clear()
        outputs[memory] = out / "in_conv-vertical-sum.png"
    assert_same_file(outputs["4M"], outputs["12M"])


def test_a_zarr_store_written_through_band_files_holds_the_same_levels(tmp_path, monkeypatch):
    zarr = pytest.importorskip("zarr")
    values = _image(2 * TILE + 9, 5 * TILE + 3, 3, np.uint8, seed=3)
    _write(tmp_path / "memory.zarr", values, "zarr")
    from convcli.io import zarr_stores

    monkeypatch.setattr(spill, "SPILL_BYTES", 0)
    monkeypatch.setattr(zarr_stores, "WRITE_PIECE_COLUMNS", 1)  # a piece of a chunk's columns
    _write(tmp_path / "disk.zarr", values, "zarr")
    memory = zarr.open_group(tmp_path / "memory.zarr")
    disk = zarr.open_group(tmp_path / "disk.zarr")
    assert sorted(disk.array_keys()) == sorted(memory.array_keys()) == ["0", "1", "2", "3"]
    for key in memory.array_keys():
        assert np.array_equal(disk[key][:], memory[key][:])
    assert np.array_equal(np.moveaxis(disk["0"][:], 0, 2), values)


def _tiled_tiff(path, height, width, seed=0):
    values = _image(height, width, 1, np.uint8, seed)[:, :, 0]
    tifffile.imwrite(path, values, tile=(TILE, TILE), compression="zlib", bigtiff=True)
    return values


def test_a_wide_row_of_tiles_is_read_through_a_band_file_with_the_same_values(
    tmp_path, spill_everything
):
    values = _tiled_tiff(tmp_path / "in.tif", 2 * TILE + 30, 3 * TILE + 50)
    with open_regions(tmp_path / "in.tif") as source:
        for r0, r1 in [(0, 10), (5, 300), (250, 2 * TILE + 30), (0, 2 * TILE + 30)]:
            assert np.array_equal(source.read_rows(r0, r1)[:, :, 0], values[r0:r1])


def _peak(function) -> int:
    tracemalloc.start()
    try:
        function()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _write_in_strips(path, height, width):
    """A TIFF written as the strips path writes one: strips of fewer rows the wider it is
    (their work fits the memory budget)."""
    rows = max(1, 320_000 // width)
    strip = np.zeros((rows, width, 1), np.uint8)
    with open_row_writer(
        path, fmt="tiff", height=height, width=width, channels=1, dtype=np.uint8
    ) as out:
        for top in range(0, height, rows):
            strip[:] = (top // rows) % 251
            out.write(strip[: min(rows, height - top)])


def test_the_memory_of_a_tiff_written_in_strips_does_not_grow_with_its_width(tmp_path):
    # Tile rows of 5 MB and 20 MB: both on disk. Held in memory, they would be held a
    # few times over (filled, queued, tiled), and the wide one alone is 20 MB.
    _write_in_strips(tmp_path / "first.tif", 2 * TILE, 3000)  # the writers' imports
    narrow = _peak(lambda: _write_in_strips(tmp_path / "narrow.tif", 2 * TILE, 20000))
    wide = _peak(lambda: _write_in_strips(tmp_path / "wide.tif", 2 * TILE, 80000))
    # What is held is a few pieces (a piece padded to whole tiles, the one read next),
    # whatever the width.
    assert wide < narrow + 2 * spill.PIECE_BYTES
    assert wide < 4 * spill.PIECE_BYTES + (2 << 20)
    with tifffile.TiffFile(tmp_path / "wide.tif") as tif:
        assert tif.pages[0].asarray()[::4, ::7919].tolist() == [
            [top % 251] * 11 for top in range(2 * TILE // 4)
        ]


def test_the_memory_of_a_tiled_tiff_read_in_strips_does_not_grow_with_its_width(tmp_path):
    def read_strips(path):
        with open_regions(path) as source:
            rows = max(1, 640_000 // source.width)  # as the strips path's budget gives
            for top in range(0, source.height, rows):
                source.read_rows(top, min(source.height, top + rows + 2))

    _tiled_tiff(tmp_path / "narrow.tif", 2 * TILE, 20000)
    _tiled_tiff(tmp_path / "wide.tif", 2 * TILE, 60000)
    narrow = _peak(lambda: read_strips(tmp_path / "narrow.tif"))
    wide = _peak(lambda: read_strips(tmp_path / "wide.tif"))
    # A row of tiles is 5 MB and 15 MB as decoded; the strips are 2.6 and 2.9 MB of float32.
    assert wide < narrow + spill.PIECE_BYTES
    assert wide < 4 * spill.PIECE_BYTES + (4 << 20)


def test_a_wide_row_of_zarr_chunks_is_read_through_a_band_file_with_the_same_values(
    tmp_path, spill_everything
):
    zarr = pytest.importorskip("zarr")
    values = _image(2 * 64 + 10, 5 * 64 + 7, 3, np.uint16, seed=5)
    array = zarr.open_array(
        str(tmp_path / "in.zarr"),
        mode="w",
        shape=values.shape,
        chunks=(64, 64, 3),
        dtype=np.uint16,
        zarr_format=2,
    )
    array[:] = values
    with open_regions(tmp_path / "in.zarr") as source:
        for r0, r1 in [(0, 7), (60, 70), (100, 2 * 64 + 10), (0, 2 * 64 + 10)]:
            assert np.array_equal(source.read_rows(r0, r1), values[r0:r1].astype(np.float32))


@pytest.mark.parametrize("piece", [100, 4096])
def test_a_clusters_store_finished_in_column_pieces_holds_the_levels_of_one_writer(
    tmp_path, monkeypatch, piece
):
    pytest.importorskip("zarr")
    from convcli.io import zarr_stores
    from convcli.io.zarr_stores import StoreBand, create_store, finish_store

    monkeypatch.setattr(zarr_stores, "FINISH_PIECE_COLUMNS", piece)
    values = _image(700, 1101, 3, np.uint8, seed=7)
    _write(tmp_path / "whole.zarr", values, "zarr")
    create_store(tmp_path / "banded.zarr", values.shape, values.dtype)
    band = StoreBand(
        tmp_path / "banded.zarr", values.shape, values.dtype, top=0, levels=1, last=True
    )
    band.write(values)
    band.close()
    finish_store(tmp_path / "banded.zarr", values.shape, values.dtype, written=1)
    zarr = pytest.importorskip("zarr")
    whole = zarr.open_group(tmp_path / "whole.zarr", mode="r")
    banded = zarr.open_group(tmp_path / "banded.zarr", mode="r")
    assert sorted(banded.array_keys()) == sorted(whole.array_keys()) == ["0", "1", "2", "3"]
    for key in whole.array_keys():
        assert np.array_equal(banded[key][:], whole[key][:]), key
    assert dict(banded.attrs) == dict(whole.attrs)


@pytest.mark.parametrize(
    "command",
    [
        ["conv", "-k", "vertical", "--format", "tiff"],
        ["conv", "-k", "sobel-x", "--normalize", "none", "--format", "tiff", "--stride", "2"],
        ["pool", "--mode", "average", "--size", "3", "--format", "npy"],
    ],
    ids=lambda c: " ".join(c[:3]),
)
def test_strips_through_band_files_write_the_whole_image_paths_bytes(tmp_path, command):
    from helpers import names, run

    values = _image(600, 700, 3, np.uint8, seed=11)
    tifffile.imwrite(
        tmp_path / "in.tif", values, tile=(64, 64), compression="zlib", photometric="rgb"
    )
    assert run(*command, tmp_path / "in.tif", "-o", tmp_path / "whole").exit_code == 0
    with pytest.MonkeyPatch.context() as patch:  # every band on disk, in pieces of a tile
        patch.setattr(spill, "SPILL_BYTES", 0)
        patch.setattr(spill, "PIECE_BYTES", 1)
        result = run(
            *command, tmp_path / "in.tif", "-o", tmp_path / "strips", "--memory", "4M", "-v"
        )
    assert result.exit_code == 0 and "processed in strips" in result.stderr
    assert names(tmp_path / "strips") == names(tmp_path / "whole")
    for name in names(tmp_path / "whole"):
        strips, whole = tmp_path / "strips" / name, tmp_path / "whole" / name
        if name.endswith(".tiff"):  # whole: a plain TIFF; in strips: a tiled BigTIFF
            assert np.array_equal(tifffile.imread(strips), tifffile.imread(whole)), name
        elif not name.endswith(".jsonl"):
            assert_same_file(strips, whole)


class _FullDisk(io.FileIO):
    """A file whose writes find no space left, plain or vectored: the system's /dev/full."""

    def __init__(self):
        super().__init__("/dev/full", "r+")


_NO_FULL_DEVICE = pytest.mark.skipif(
    not os.path.exists("/dev/full"), reason="no /dev/full to stand for a full disk"
)


@_NO_FULL_DEVICE
def test_a_band_that_cannot_be_kept_on_disk_is_an_error_naming_the_folder(tmp_path):
    band = BandFile(4, 600, 1, np.uint8, folder=tmp_path)
    band._fh.close()
    band._fh = _FullDisk()
    with pytest.raises(
        spill.SpillError,
        match=f"cannot keep rows of 600 pixels on disk in {tmp_path}: No space left on device",
    ):
        band.write_rows(0, np.zeros((4, 600, 1), np.uint8))
    band.close()


@_NO_FULL_DEVICE
def test_a_full_temporary_folder_fails_the_file_on_one_line(tmp_path, monkeypatch):
    from helpers import assert_one_line_error, run

    _tiled_tiff(tmp_path / "in.tif", 300, 700)
    monkeypatch.setattr(spill, "SPILL_BYTES", 0)
    monkeypatch.setattr(spill.tempfile, "TemporaryFile", lambda **options: _FullDisk())
    result = run(
        "conv",
        "-k",
        "vertical",
        tmp_path / "in.tif",
        "-o",
        tmp_path / "out",
        "--memory",
        "1M",
        "-q",
    )
    assert_one_line_error(
        result, 1, "in.tif: cannot keep rows of 700 pixels on disk in ", "No space left on device"
    )
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_bands_whose_halo_reaches_back_decode_each_row_of_tiles_once(tmp_path, monkeypatch):
    from convcli.io.regions import RegionSource

    _tiled_tiff(tmp_path / "in.tif", 3 * TILE, 700)
    decoded = []
    decode = RegionSource._decode_tiles
    monkeypatch.setattr(
        RegionSource,
        "_decode_tiles",
        lambda self, k, c0, c1, out: (decoded.append(k), decode(self, k, c0, c1, out)),
    )
    with open_regions(tmp_path / "in.tif") as source:
        for top in range(0, 3 * TILE, 8):  # strips of 8 rows with a halo of one row each side
            source.read_rows(max(0, top - 1), min(3 * TILE, top + 9))
    assert decoded == [0, 1, 2]


@pytest.mark.parametrize("fmt", ["tiff", "zarr"])
def test_the_disk_space_asked_for_counts_the_bands_kept_on_disk(fmt):
    from convcli.io.row_writers import space_needed

    narrow = space_needed(fmt, height=300, width=10000, channels=1, dtype=np.uint8)
    wide = space_needed(fmt, height=30, width=100000, channels=1, dtype=np.uint8)
    # The same pixels; the wide image's bands of 256 rows (25.6 MB each) go to disk.
    assert wide - narrow >= 2 * TILE * 100000
