"""Images processed in strips (--memory): the whole-image path's outputs, never the image held."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import tifffile
from helpers import assert_one_line_error, assert_same_file, names, run
from PIL import Image

SAMPLES = __import__("pathlib").Path(__file__).parents[1] / "sample_images"


@pytest.fixture(scope="module")
def tiffs(tmp_path_factory):
    """A tiled deflate RGB TIFF and a stripped grey one, larger than a 1 MB budget's work."""
    folder = tmp_path_factory.mktemp("tiffs")
    rgb = np.asarray(Image.open(SAMPLES / "astronaut.png").convert("RGB"))
    tifffile.imwrite(
        folder / "rgb.tif",
        np.tile(rgb, (1, 2, 1))[:700],
        tile=(256, 256),
        compression="zlib",
        photometric="rgb",
    )
    grey = np.asarray(Image.open(SAMPLES / "camera.png").convert("L"))
    tifffile.imwrite(folder / "grey.tif", np.tile(grey, (2, 1))[:900, :333], rowsperstrip=64)
    return folder


COMMANDS = [
    ["conv", "-k", "vertical"],
    ["conv", "-k", "sobel-x", "-k", "sobel-y", "--combine", "magnitude", "--stride", "2"],
    ["conv", "-k", "vertical,horizontal", "--channels", "each"],
    ["conv", "-k", "gaussian-5x5", "-k", "edge", "--channels", "gray", "--border", "wrap"],
    ["conv", "-k", "laplacian", "--normalize", "minmax", "--pad", "3,1,0,2"],
    ["conv", "-k", "edge", "--format", "npy", "--dilation", "2"],
    ["pool", "--mode", "average", "--size", "3", "--pad", "1", "--ceil"],
    ["pool", "--size", "4", "--stride", "3"],
    ["pad", "--pad", "7,2,3,1", "--mode", "symmetric"],
]


def _records(folder):
    lines = (folder / "convcli-manifest.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    for record in records:
        record.pop("command")
    return sorted(records, key=lambda r: r["output"])


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:3]))
@pytest.mark.parametrize("name", ["rgb.tif", "grey.tif"])
def test_strips_write_the_whole_image_paths_bytes(tiffs, tmp_path, command, name, small_strips):
    whole, strips = tmp_path / "whole", tmp_path / "strips"
    assert run(*command, tiffs / name, "-o", whole).exit_code == 0
    result = run(*command, tiffs / name, "-o", strips, "--memory", small_strips, "-v")
    assert result.exit_code == 0, result.output
    assert "processed in strips" in result.stderr
    assert names(strips) == names(whole)
    for output in names(whole):
        if output.endswith(".png"):  # the same levels (the deflate stream may differ)
            np.testing.assert_array_equal(
                np.asarray(Image.open(strips / output)),
                np.asarray(Image.open(whole / output)),
                output,
            )
        elif output != "convcli-manifest.jsonl":
            assert_same_file(strips / output, whole / output)
    assert _records(strips) == _records(whole)


def test_raw_values_become_a_tiled_tiff_with_reduced_levels(tiffs, tmp_path):
    command = ["conv", "-k", "vertical", "--normalize", "none", "--format", "tiff"]
    assert run(*command, tiffs / "rgb.tif", "-o", tmp_path / "whole").exit_code == 0
    result = run(*command, tiffs / "rgb.tif", "-o", tmp_path / "strips", "--memory", "1M")
    assert result.exit_code == 0, result.output
    (name,) = [n for n in names(tmp_path / "whole") if n.endswith(".tiff")]
    expected = tifffile.imread(tmp_path / "whole" / name)
    with tifffile.TiffFile(tmp_path / "strips" / name) as tif:
        page = tif.pages[0]
        assert page.is_tiled and page.compression == 8  # deflate
        assert not tif.is_bigtiff  # far under 4 GiB: a classic TIFF, as every reader opens
        np.testing.assert_array_equal(page.asarray().view(np.uint32), expected.view(np.uint32))
        levels = [level.shape for level in page.pages]
    assert levels[0] == (256, 512) and levels[-1][0] <= 256


def test_a_budget_large_enough_reads_the_image_whole(tiffs, tmp_path):
    result = run(
        "conv", "-k", "vertical", tiffs / "grey.tif", "-o", tmp_path, "-v", "--memory", "4G"
    )
    assert result.exit_code == 0 and "strips" not in result.stderr


def test_jpeg_is_not_written_in_strips(tiffs, tmp_path):
    jpg = run(
        "conv",
        "-k",
        "vertical",
        tiffs / "grey.tif",
        "-o",
        tmp_path / "j",
        "--format",
        "jpg",
        "--memory",
        "1M",
    )
    assert jpg.exit_code == 1
    assert "processed in strips, which write npy, png, tiff, zarr, not jpg" in jpg.stderr
    assert not any((tmp_path / "j").glob("*.jpg"))


@pytest.mark.parametrize("command", [["pool", "--size", "3"], ["conv", "-k", "sobel-x,sobel-y"]])
def test_the_figure_of_an_image_in_strips_is_an_overview(tiffs, tmp_path, command):
    from convcli.io.figures import MAX_FIGURE_PIXELS

    result = run(*command, tiffs / "rgb.tif", "-o", tmp_path, "--figure", "--memory", "8M", "-v")
    assert result.exit_code == 0, result.output
    (grid,) = tmp_path.glob("*_grid.png")
    with Image.open(grid) as im:
        assert max(im.size) <= MAX_FIGURE_PIXELS and im.getextrema() != ((255, 255),) * 4
    assert any(r["output"] == grid.name for r in _records(tmp_path))


def test_outputs_that_would_not_fit_the_disk_are_refused_before_writing(
    tiffs, tmp_path, monkeypatch
):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=1000))
    result = run(
        "conv",
        "-k",
        "vertical",
        "-j",
        "1",
        tiffs / "rgb.tif",
        "-o",
        tmp_path / "o",
        "--memory",
        "1M",
    )
    assert result.exit_code == 1
    assert "not enough free space for" in result.stderr and "1.0 kB free" in result.stderr
    assert not any((tmp_path / "o").glob("*.png"))


def test_a_bad_memory_size_is_a_usage_error(tiffs):
    assert_one_line_error(run("conv", tiffs / "grey.tif", "--memory", "lots"), 2, "--memory")
    assert_one_line_error(run("conv", tiffs / "grey.tif", "--memory", "0"), 2, "--memory")


def test_existing_outputs_are_skipped_without_reading_the_image(tiffs, tmp_path):
    command = ["conv", "-k", "vertical", tiffs / "grey.tif", "-o", tmp_path, "--memory", "1M"]
    assert run(*command).exit_code == 0
    again = run(*command, "-v")
    assert again.exit_code == 0 and "skipped" in again.stderr


def test_memory_stays_within_strips_of_a_large_image(tmp_path):
    import tracemalloc

    rng = np.random.default_rng(0)
    side = 3000  # 9 megapixels: 36 MB as float32, several times that for the whole path
    tifffile.imwrite(
        tmp_path / "big.tif",
        rng.integers(0, 256, (side, side), np.uint8),
        tile=(256, 256),
        compression="zlib",
    )
    tracemalloc.start()
    try:
        result = run(
            "conv",
            "-k",
            "sobel-x",
            "-j",
            "1",
            tmp_path / "big.tif",
            "-o",
            tmp_path / "out",
            "--memory",
            "24M",
            "-v",
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0 and "processed in strips" in result.stderr
    assert peak < 1.1 * (24 << 20), f"peak {peak / 1e6:.0f} MB"
    written = np.asarray(Image.open(tmp_path / "out" / "big_conv-sobel-x-sum.png"))
    assert written.shape == (side, side) and written.std() > 10


def test_outputs_in_place_before_a_later_one_fails_are_recorded(tiffs, tmp_path, monkeypatch):
    import errno

    from convcli.io import row_writers

    closed = []
    real_close = row_writers._PngSink.close

    def full_disk_on_the_second(self):
        closed.append(self)
        if len(closed) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_close(self)

    monkeypatch.setattr(row_writers._PngSink, "close", full_disk_on_the_second)
    result = run(
        "conv",
        "-k",
        "vertical",
        "--channels",
        "each",
        "-j",
        "1",
        tiffs / "rgb.tif",
        "-o",
        tmp_path,
        "--memory",
        "8M",
    )
    assert result.exit_code == 1 and "no space left" in result.stderr
    on_disk = sorted(p.name for p in tmp_path.glob("*.png"))
    recorded = sorted(r["output"] for r in _records(tmp_path))
    assert on_disk and recorded == on_disk


@pytest.mark.parametrize("memory", [[], ["--memory", "1M"]], ids=["whole", "strips"])
@pytest.mark.parametrize(("weight", "counted"), [("1", False), ("3e38", True)])
def test_an_8_bit_tiffs_results_are_counted_only_where_the_conv_can_overflow(
    tiffs, tmp_path, monkeypatch, small_strips, memory, weight, counted
):
    """A conv of 8-bit samples read as stored, whole or in strips, is finite by its kernel's
    bound (ConvOp.finite_results): no pass counts its values; 3e38 weights are counted."""
    from convcli.app import ops

    counts, count = [], ops.count_not_finite
    monkeypatch.setattr(
        ops, "count_not_finite", lambda data: counts.append(data.size) or count(data)
    )
    kernel = tmp_path / "k.txt"
    kernel.write_text(f"{weight} 0 -{weight}\n" * 3)
    command = ("conv", "-k", kernel, "--normalize", "none", "--format", "tiff", "-v", *memory)
    result = run(*command, tiffs / "grey.tif", "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert ("processed in strips" in result.stderr) is bool(memory)
    values = tifffile.imread(next((tmp_path / "out").glob("*.tif*")))
    assert values.dtype == np.float32 and values.shape == (900, 333)
    if counted:  # every value once: in one call whole, a call a strip in strips
        assert sum(counts) == values.size and (len(counts) > 1) is bool(memory)
        assert "result values are not finite" in result.stderr
    else:
        assert counts == [] and np.isfinite(values).all() and np.abs(values).max() <= 3 * 255
