"""Figure grids: lazily imported matplotlib, Agg backend, atomic PNG files."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from PIL import Image


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          check=False)


def test_only_drawing_a_figure_imports_matplotlib_with_agg_and_no_pyplot(tmp_path):
    code = (
        "import sys\n"
        "import convcli, convcli.cli, convcli.app.process, convcli.images, convcli.figures\n"
        "assert 'matplotlib' not in sys.modules\n"
        "import numpy as np\n"
        "from convcli.figures import Panel, save_grid\n"
        "save_grid(sys.argv[1], [Panel('x', np.zeros((4, 4)))], ncols=1)\n"
        "import matplotlib\n"
        "assert matplotlib.get_backend().lower() == 'agg', matplotlib.get_backend()\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    result = _run(code, str(tmp_path / "grid.png"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "grid.png").stat().st_size > 0


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
