"""Figure grids: lazily imported matplotlib, Agg backend, atomic PNG files."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from PIL import Image


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)


def test_only_the_figure_module_imports_matplotlib_with_agg_and_no_pyplot():
    code = (
        "import sys\n"
        "import convcli, convcli.cli, convcli.pipeline, convcli.images\n"
        "assert 'matplotlib' not in sys.modules\n"
        "import convcli.figures, matplotlib\n"
        "assert matplotlib.get_backend().lower() == 'agg', matplotlib.get_backend()\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    result = _run(code)
    assert result.returncode == 0, result.stderr


def test_save_grid_writes_a_png_with_empty_cells(tmp_path):
    from convcli import figures

    g = np.random.default_rng(0)
    panels = [
        figures.Panel("original", g.random((30, 40, 3))),
        figures.Panel("signed", g.standard_normal((30, 40)), signed=True, vmax=1.0,
                      colorbar=True),
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
