"""Figure grids: lazily imported matplotlib, Agg backend, atomic PNG files."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from PIL import Image


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=False
    )


def test_only_drawing_a_figure_imports_matplotlib_with_agg_and_no_pyplot(tmp_path):
    code = (
        "import sys\n"
        "import convcli, convcli.cli.main, convcli.app.process, convcli.io.images\n"
        "import convcli.io.figures\n"
        "assert 'matplotlib' not in sys.modules\n"
        "import numpy as np\n"
        "from convcli.io.figures import Panel, save_grid\n"
        "save_grid(sys.argv[1], [Panel('x', np.zeros((4, 4)))], ncols=1)\n"
        "import matplotlib\n"
        "assert matplotlib.get_backend().lower() == 'agg', matplotlib.get_backend()\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    result = _run(code, str(tmp_path / "grid.png"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "grid.png").stat().st_size > 0


def test_save_grid_writes_a_png_with_empty_cells(tmp_path):
    from convcli.io import figures

    g = np.random.default_rng(0)
    panels = [
        figures.Panel("original", g.random((30, 40, 3))),
        figures.Panel("signed", g.standard_normal((30, 40)), signed=True, vmax=1.0, colorbar=True),
        None,
        figures.Panel("grey", g.random((30, 40)) * 255, vmax=255.0, colorbar=True),
    ]
    path = tmp_path / "grid.png"
    assert figures.save_grid(path, panels, ncols=2, title="test")
    with Image.open(path) as im:
        assert im.format == "PNG"
        assert im.width == 2 * figures.MIN_PANEL_INCHES * figures.DPI  # small images
    before = path.read_bytes()
    assert not figures.save_grid(path, panels[:1], ncols=1)  # kept without overwrite
    assert path.read_bytes() == before
    assert figures.save_grid(path, panels[:1], ncols=1, overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["grid.png"]


def _panel_regions(panels, ncols, title, png_height):
    """Where each panel's image lies in the written PNG: (top, bottom, left, right) rows/cols.

    The grid is drawn again and its layout read from the image artists (the
    file itself was written at the same size and DPI).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from convcli.io import figures

    fig = figures.draw_grid(panels, ncols=ncols, title=title)
    FigureCanvasAgg(fig).draw()
    regions = []
    for ax in fig.axes:
        if not ax.images:
            continue  # an empty cell, or a colour bar
        box = ax.images[0].get_window_extent()
        # Display y grows upwards, PNG rows downwards; keep 2 pixels off every edge.
        regions.append(
            (
                ax.get_title(),
                int(png_height - box.y1) + 2,
                int(png_height - box.y0) - 2,
                int(box.x0) + 2,
                int(box.x1) - 2,
            )
        )
    return regions


def test_grid_panels_show_their_own_pixels_in_their_own_places(tmp_path):
    from convcli.io import figures

    h, w = 60, 80
    split = np.zeros((h, w))
    split[:, w // 2 :] = 200.0  # dark left half, bright right half on a 0..200 scale
    colour = np.zeros((h, w, 3))
    colour[..., 0] = 1.0  # pure red
    positive = np.full((h, w), 3.0)  # the top of a signed scale: the darkest red
    negative = np.full((h, w), -3.0)
    panels = [
        figures.Panel("red", colour),
        figures.Panel("split", split, vmax=200.0, colorbar=True),
        None,
        figures.Panel("plus", positive, signed=True, vmax=3.0, colorbar=True),
        figures.Panel("minus", negative, signed=True, vmax=3.0, colorbar=True),
    ]
    path = tmp_path / "grid.png"
    assert figures.save_grid(path, panels, ncols=2, title="t")
    with Image.open(path) as im:
        png = np.asarray(im.convert("RGB")).astype(int)
    regions = {
        t: (top, bottom, left, right)
        for t, top, bottom, left, right in _panel_regions(panels, 2, "t", png.shape[0])
    }
    assert list(regions) == ["red", "split", "plus", "minus"]

    def region(title):
        top, bottom, left, right = regions[title]
        assert bottom - top > 20 and right - left > 20  # drawn at a readable size
        return png[top:bottom, left:right]

    assert (np.abs(region("red") - [255, 0, 0]) <= 1).all()
    split_px = region("split")
    half = split_px.shape[1] // 2
    assert (split_px[:, : half - 2] <= 1).all()  # black
    assert (np.abs(split_px[:, half + 2 :] - 255) <= 1).all()  # white: 200 is the top
    plus, minus = region("plus"), region("minus")
    assert (plus[..., 0] > 90).all() and (plus[..., 2] < 60).all()  # red end of RdBu_r
    assert (minus[..., 2] > 90).all() and (minus[..., 0] < 60).all()  # blue end
    # Panels are laid out row by row: red | split, then (empty) | plus, then minus.
    assert regions["red"][2] < regions["split"][2] and regions["red"][0] == regions["split"][0]
    assert regions["plus"][0] > regions["red"][0] and regions["plus"][2] > regions["red"][2]
    assert regions["minus"][0] > regions["plus"][0]


def test_conv_figure_panels_hold_the_results_they_name():
    from convcli.app.ops import ConvOp
    from convcli.io.images import Picture
    from convcli.kernels import parse_kernel_spec

    g = np.random.default_rng(5)
    pixels = g.integers(0, 256, (12, 16, 3)).astype(np.float32)
    pic = Picture(pixels, ("R", "G", "B"), 255.0, 8)
    op = ConvOp((parse_kernel_spec("vertical"), parse_kernel_spec("edge")), channels="each")
    data = op.compute(pic)
    grid = op.figure(pic, data)
    assert grid.ncols == 4  # the original, then R, G and B of each kernel
    original, *first_row = grid.panels[:4]
    np.testing.assert_array_equal(original.image, pixels / 255.0)
    assert grid.panels[4] is None  # no original beside the second kernel
    second_row = grid.panels[5:]
    for k, (row, name) in enumerate(((first_row, "vertical"), (second_row, "edge"))):
        for c, panel in enumerate(row):
            assert panel.title == f"{name}: {'RGB'[c]}"
            np.testing.assert_array_equal(panel.image, data[:, :, 3 * k + c])
            assert panel.signed  # edge responses are negative somewhere


NAMES_WITH_DOLLARS = ["a$b{{c}}$.png", "$x^{$.png", "$" + "{" * 50 + "}" * 50 + "$.png"]


def test_figure_titles_are_plain_text_for_names_with_dollars(tmp_path, monkeypatch):
    from helpers import make_image, ok

    from convcli.io import figures

    titles = []
    draw_grid = figures.draw_grid

    def drawn(*args, **kwargs):  # the figure's title, as matplotlib will draw it
        fig = draw_grid(*args, **kwargs)
        titles.append((fig._suptitle.get_text(), fig._suptitle.get_parse_math()))
        return fig

    monkeypatch.setattr(figures, "draw_grid", drawn)
    (tmp_path / "in").mkdir()
    for name in NAMES_WITH_DOLLARS:
        make_image(tmp_path / "in" / name, "L")
    out = tmp_path / "out"
    ok("conv", "-k", "vertical", "--figure", "-j", "1", tmp_path / "in", "-o", out, "-q")
    for name in NAMES_WITH_DOLLARS:
        grid = out / f"{name[:-4]}_conv-vertical-sum_grid.png"
        with Image.open(grid) as figure:
            assert figure.size[0] > 100
    assert sorted(text.split(": ")[0] for text, _ in titles) == sorted(NAMES_WITH_DOLLARS)
    assert not any(parse_math for _, parse_math in titles)
