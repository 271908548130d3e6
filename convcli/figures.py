"""Figure grids: the only module that imports matplotlib.

:class:`Panel` and :class:`Grid` describe a figure and cost nothing to import;
matplotlib is imported by :func:`save_grid` only, when a figure is drawn
(``--figure``), with the non-interactive Agg backend selected before anything
else of matplotlib's is loaded, so no display is needed. Figures are drawn on a
:class:`matplotlib.figure.Figure` directly (no pyplot state) and written through
:func:`convcli.safeio.write_atomic`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .safeio import write_atomic

DPI = 100
# A panel is as wide as its image at DPI (drawn pixel for pixel), within these bounds.
PANEL_INCHES = 3.2
MIN_PANEL_INCHES = 2.4
SIGNED_CMAP = "RdBu_r"  # zero white, positive red, negative blue


@dataclass(frozen=True)
class Panel:
    """One picture of a grid.

    Attributes
    ----------
    title : str
    image : (H, W) or (H, W, 3 | 4) ndarray
        A colour image with values in 0..1, or one channel.
    signed : bool
        Show a channel on a symmetric scale -vmax..vmax, zero white, with a diverging colour map.
    vmax : float
        Top of the scale (a grey channel is shown from 0 to vmax).
    colorbar : bool
        Draw a colour bar beside it.
    """

    title: str
    image: np.ndarray
    signed: bool = False
    vmax: float = 1.0
    colorbar: bool = False


@dataclass(frozen=True)
class Grid:
    """A figure: `panels` row by row, `ncols` per row (``None`` leaves a cell empty)."""

    panels: list[Panel | None]
    ncols: int
    title: str = ""


def _figure_class():
    """matplotlib's Figure, with the Agg backend (imported on first use)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure


def draw_grid(panels: list[Panel | None], *, ncols: int, title: str | None = None):
    """A matplotlib Figure of `panels` row by row, `ncols` per row (``None``: an empty cell).

    Each panel is drawn about as many pixels wide as its image at :data:`DPI`,
    within :data:`MIN_PANEL_INCHES` and :data:`PANEL_INCHES`.
    """
    ncols = max(1, min(ncols, len(panels)))
    nrows = math.ceil(len(panels) / ncols)
    first = next(p for p in panels if p is not None)
    h, w = first.image.shape[:2]
    aspect = h / w if w else 1.0
    panel = min(max(w / DPI, MIN_PANEL_INCHES), PANEL_INCHES)
    figure = _figure_class()
    fig = figure(figsize=(panel * ncols, panel * aspect * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    cells = panels + [None] * (nrows * ncols - len(panels))
    for ax, panel in zip(axes.flat, cells, strict=True):
        ax.set_axis_off()
        if panel is None:
            continue
        _draw(fig, ax, panel)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def save_grid(path: str | os.PathLike, panels: list[Panel | None], *, ncols: int,
              title: str | None = None, overwrite: bool = False) -> bool:
    """Draw `panels` (see :func:`draw_grid`) and write a PNG at :data:`DPI`, atomically.

    Returns False if `path` existed and was kept (without `overwrite`). The PNG
    carries convcli's marker (:data:`convcli.images.MARKER`); with `overwrite`
    only a file that carries it is replaced.
    """
    from .images import MARKER, written_by_convcli

    fig = draw_grid(panels, ncols=ncols, title=title)

    def write(tmp: Path) -> None:
        fig.savefig(tmp, format="png", dpi=DPI, metadata={"Software": MARKER})

    return write_atomic(path, write, overwrite=overwrite, replaceable=written_by_convcli)


def _draw(fig, ax, panel: Panel) -> None:
    image = np.asarray(panel.image)
    ax.set_title(panel.title, fontsize=10)
    if image.ndim == 3:
        shown = ax.imshow(np.clip(image, 0.0, 1.0), interpolation="antialiased")
    elif panel.signed:
        limit = panel.vmax if panel.vmax > 0 else 1.0
        shown = ax.imshow(image, cmap=SIGNED_CMAP, vmin=-limit, vmax=limit,
                          interpolation="antialiased")
    else:
        shown = ax.imshow(image, cmap="gray", vmin=0.0, vmax=panel.vmax or 1.0,
                          interpolation="antialiased")
    if panel.colorbar and image.ndim == 2:
        finite = image[np.isfinite(image)]
        over = bool(finite.size and finite.max() > panel.vmax)
        under = bool(panel.signed and finite.size and finite.min() < -panel.vmax)
        # Arrows on the colour bar mark values beyond the scale (shown saturated).
        extend = {(True, True): "both", (True, False): "max", (False, True): "min"}.get(
            (over, under), "neither"
        )
        bar = fig.colorbar(shown, ax=ax, fraction=0.046, pad=0.02, extend=extend)
        bar.ax.tick_params(labelsize=8)
