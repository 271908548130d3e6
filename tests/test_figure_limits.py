"""Figures of any image shape stay within a bounded size, time and memory."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from convcli.io import figures
from convcli.io.figures import MAX_DRAWN_ASPECT, MAX_FIGURE_PIXELS, Panel


def _drawn(fig):
    """Render `fig` and return the window extents (width, height) of its images, in pixels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    return [
        (ax.images[0].get_window_extent().width, ax.images[0].get_window_extent().height)
        for ax in fig.axes
        if ax.images
    ]


@pytest.mark.parametrize(("h", "w"), [(5000, 1), (20_000, 3), (1, 5000), (3, 20_000)])
def test_a_strip_is_drawn_as_a_strip_within_the_figure_cap(h, w):
    g = np.random.default_rng(3)
    panels = [
        Panel("original", g.random((h, w, 3))),
        Panel("R", g.random((h, w)) * 255, vmax=255.0, colorbar=True),
    ]
    fig = figures.draw_grid(panels, ncols=2, title="strip")
    width, height = fig.get_size_inches() * figures.DPI
    assert max(width, height) <= MAX_FIGURE_PIXELS  # was 500,000 pixels tall for 1 x 5000
    for drawn_w, drawn_h in _drawn(fig):
        long, thick = max(drawn_w, drawn_h), min(drawn_w, drawn_h)
        assert (drawn_h > drawn_w) == (h > w)  # a tall strip stays tall, a wide one wide
        assert long / thick == pytest.approx(MAX_DRAWN_ASPECT, rel=0.02)
        assert thick >= 20  # readable, not one pixel thick


def test_many_rows_are_scaled_into_the_figure_cap():
    panels = [Panel(f"p{i}", np.full((300, 300), i / 40)) for i in range(40)]
    fig = figures.draw_grid(panels, ncols=2)
    width, height = fig.get_size_inches() * figures.DPI
    assert height == pytest.approx(MAX_FIGURE_PIXELS) and width < height


def test_block_means_average_what_is_far_larger_than_its_cell():
    g = np.random.default_rng(4)
    image = g.random((1001, 7, 3)).astype(np.float32)
    out = figures._block_means(image, (100.0, 100.0))  # rows: 10 x the cell; columns: small
    # Blocks of 1001 // 200 = 5 rows; the last block holds the one row left over.
    assert out.shape == (201, 7, 3)
    np.testing.assert_allclose(
        out[:200], image[:1000].reshape(200, 5, 7, 3).mean(axis=1), rtol=1e-6
    )
    np.testing.assert_allclose(out[200], image[1000], rtol=1e-6)
    small = g.random((399, 399))
    assert figures._block_means(small, (100.0, 100.0)) is small  # under 4 x: untouched


def test_block_means_sum_in_float64_a_few_blocks_at_a_time(monkeypatch):
    monkeypatch.setattr(figures, "_CHUNK_VALUES", 50)  # many chunks, uneven last one
    image = np.arange(2 * 1003, dtype=np.float32).reshape(2, 1003) + 1e7
    out = figures._block_means(image, (1.0, 10.0))
    expected = [
        np.mean(image[:, i : i + 50].astype(np.float64), axis=1) for i in range(0, 1003, 50)
    ]
    np.testing.assert_allclose(out, np.stack(expected, axis=1), rtol=1e-12)


# The command line on long strips, in a fresh interpreter whose peak memory is its own:
# VmHWM, not ru_maxrss, which keeps the peak of the forked test process across exec.
_PEAK = """
import json, sys
from convcli.cli.main import main
for args in json.loads(sys.argv[1]):
    try:
        main(args)
    except SystemExit as exc:
        assert not exc.code, (args, exc.code)
with open("/proc/self/status") as f:
    print(next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")))
"""


def test_figures_of_long_strips_take_bounded_memory(tmp_path):
    # The attack: pool --size 1 --figure on a 1 x 5000 PNG peaked at 8.7 GB, 3 x 20000 at 11.4 GB.
    g = np.random.default_rng(5)
    runs = []
    for w, h in ((1, 5000), (3, 20_000)):
        path = tmp_path / f"strip{w}x{h}.png"
        Image.fromarray(g.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)
        runs.append(
            ["pool", "--size", "1", "--figure", str(path), "-o", str(tmp_path / "pool"), "-q"]
        )
        runs.append(["conv", "--figure", str(path), "-o", str(tmp_path / "conv"), "-q"])
    result = subprocess.run(
        [sys.executable, "-c", _PEAK, json.dumps(runs)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    peak_mb = int(result.stdout) / 1024  # VmHWM is in KiB
    assert peak_mb < 600
    grids = sorted(tmp_path.glob("*/*_grid.png"))
    assert len(grids) == 4
    for grid in grids:
        with Image.open(grid) as im:
            assert max(im.size) <= MAX_FIGURE_PIXELS and im.height > im.width / 3  # drawn tall


def test_block_peaks_keep_each_blocks_value_of_largest_magnitude():
    g = np.random.default_rng(6)
    edges = g.normal(size=(1000, 40)).astype(np.float32)
    out = figures._block_peaks(edges, (100.0, 100.0))  # rows: blocks of 5; columns untouched
    blocks = edges.reshape(200, 5, 40)
    strongest = np.take_along_axis(blocks, np.abs(blocks).argmax(axis=1)[:, None], axis=1)[:, 0]
    np.testing.assert_array_equal(out, strongest)
    # A one-pixel line, positive beside negative, survives where a mean would cancel it.
    line = np.zeros((2000, 8), np.float32)
    line[1000], line[1001] = 9.0, -9.0
    assert np.abs(figures._block_peaks(line, (100.0, 100.0))).max() == 9.0
    assert np.abs(figures._block_means(line, (100.0, 100.0))).max() == 0.0


def _image_boxes(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    return [ax.images[0].get_window_extent() for ax in fig.axes if ax.images]


def test_a_wide_strip_figure_has_one_long_panel_per_row():
    g = np.random.default_rng(7)
    panels = [Panel("original", g.random((100, 10_000, 3)))] + [
        Panel(f"k{i}", g.normal(size=(100, 10_000)), signed=True, colorbar=True) for i in range(3)
    ]
    boxes = _image_boxes(figures.draw_grid(panels, ncols=4))
    assert len(boxes) == 4
    tops = [b.y0 for b in boxes]
    assert len({round(t) for t in tops}) == 4  # four rows
    assert all(b.width >= 700 for b in boxes)  # each strip as long as the figure allows


def test_a_tall_strip_figure_has_every_panel_in_one_row():
    g = np.random.default_rng(8)
    panels = [Panel("original", g.random((10_000, 100, 3))), None] + [
        Panel(f"k{i}", g.normal(size=(10_000, 100)), signed=True, colorbar=True) for i in range(3)
    ]
    boxes = _image_boxes(figures.draw_grid(panels, ncols=2))
    assert len(boxes) == 4 and len({round(b.y0) for b in boxes}) == 1
    assert all(b.height >= 600 for b in boxes)


def test_a_constant_map_is_titled_with_its_value_without_a_colour_bar():
    from convcli.app.ops import ConvOp
    from convcli.io.images import Picture
    from convcli.kernels import get_kernel

    pic = Picture(np.zeros((1, 1, 3), np.float32), ("R", "G", "B"), 255.0, 8)
    op = ConvOp((get_kernel("vertical"), get_kernel("edge")))
    grid = op.figure(pic, op.compute(pic))
    maps = grid.panels[1:]
    assert [p.title for p in maps] == ["vertical: sum (all 0)", "edge: sum (all 0)"]
    assert not any(p.colorbar for p in maps)
