"""Figure grids: the only module that imports matplotlib.

:class:`Panel` and :class:`Grid` describe a figure and cost nothing to import;
matplotlib is imported by :func:`save_grid` only, when a figure is drawn
(``--figure``), with the non-interactive Agg backend selected before anything
else of matplotlib's is loaded, so no display is needed. Figures are drawn on a
:class:`matplotlib.figure.Figure` directly (no pyplot state) and written through
:func:`convcli.io.safeio.write_atomic`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .formats import MARKER
from .image_files import written_by_convcli
from .safeio import write_atomic

DPI = 100
# A panel is as wide as its image at DPI (drawn pixel for pixel), within these bounds.
PANEL_INCHES = 3.2
MIN_PANEL_INCHES = 2.4
# Bounds that keep a figure's size, memory and time independent of the image's size and
# shape (a 1 x 5000 strip once made a figure 500,000 pixels tall):
MAX_FIGURE_PIXELS = 4000  # the longest side of a whole figure
MAX_CELL_ASPECT = 2.0  # a grid cell is at most twice as tall as it is wide
MAX_DRAWN_ASPECT = 8.0  # an image longer than 8 times its thickness is stretched across
# An image at least this many times longer than thick is a strip: wide strips are laid out
# one per row and tall ones all in one row, drawn up to STRIP_INCHES long.
STRIP_RATIO = 3.0
STRIP_INCHES = 10.0
SIGNED_CMAP = "RdBu_r"  # zero white, positive red, negative blue
# Titles are plain text: a file name such as "a$b$.png" is not read as mathtext or TeX.
PLAIN_TEXT = {"parse_math": False, "usetex": False}


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

    Each cell is about as many pixels wide as the first panel's image at
    :data:`DPI`, within :data:`MIN_PANEL_INCHES` and :data:`PANEL_INCHES`, and
    as tall as that image's aspect makes it, within ``1 / MAX_DRAWN_ASPECT`` and
    :data:`MAX_CELL_ASPECT` times its width. An image longer than
    :data:`MAX_DRAWN_ASPECT` times its thickness (a 1 x 5000 strip) is drawn as
    a strip that long, stretched across. A strip at least :data:`STRIP_RATIO`
    times longer than thick is laid out so that it reads: wide strips one per
    row, tall ones all in one row, up to :data:`STRIP_INCHES` long. The whole
    figure is scaled down to at most :data:`MAX_FIGURE_PIXELS` on its longest
    side, and an image much larger than its cell is reduced over blocks of
    pixels before it is drawn (colour averaged; a channel keeps each block's
    value of largest magnitude, so that thin edges stay visible), so time and
    memory do not grow with the image (photos of ordinary shapes are drawn as
    they always were).
    """
    first = next(p for p in panels if p is not None)
    h, w = first.image.shape[:2]
    aspect = h / w if w and h else 1.0
    cell_w = min(max(w / DPI, MIN_PANEL_INCHES), PANEL_INCHES)
    cell_h = cell_w * min(max(aspect, 1 / MAX_DRAWN_ASPECT), MAX_CELL_ASPECT)
    if aspect <= 1 / STRIP_RATIO:  # a wide strip: one panel per row, as long as fits
        panels, ncols = [p for p in panels if p is not None], 1
        cell_w = min(max(w / DPI, MIN_PANEL_INCHES), STRIP_INCHES)
        cell_h = cell_w * max(aspect, 1 / MAX_DRAWN_ASPECT) + 0.4  # and its title
    elif aspect >= STRIP_RATIO:  # a tall strip: every panel in one row
        panels = [p for p in panels if p is not None]
        ncols = len(panels)
        cell_h = min(max(h / DPI, MIN_PANEL_INCHES), STRIP_INCHES)
        cell_w = cell_h / min(aspect, MAX_DRAWN_ASPECT) + 1.0  # and a colour bar
    ncols = max(1, min(ncols, len(panels)))
    nrows = math.ceil(len(panels) / ncols)
    size = (cell_w * ncols, cell_h * nrows + 0.6)
    scale = min(1.0, MAX_FIGURE_PIXELS / (DPI * max(size)))
    figure = _figure_class()
    fig = figure(figsize=(size[0] * scale, size[1] * scale), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    cells = panels + [None] * (nrows * ncols - len(panels))
    cell_pixels = (cell_h * scale * DPI, cell_w * scale * DPI)
    for ax, panel in zip(axes.flat, cells, strict=True):
        ax.set_axis_off()
        if panel is None:
            continue
        _draw(fig, ax, panel, cell_pixels)
    if title:
        fig.suptitle(title, fontsize=11, **PLAIN_TEXT)
    return fig


def save_grid(
    path: str | os.PathLike,
    panels: list[Panel | None],
    *,
    ncols: int,
    title: str | None = None,
    overwrite: bool = False,
) -> bool:
    """Draw `panels` (see :func:`draw_grid`) and write a PNG at :data:`DPI`, atomically.

    Returns False if `path` existed and was kept (without `overwrite`). The PNG
    carries convcli's marker (:data:`convcli.io.formats.MARKER`); with `overwrite`
    only a file that carries it is replaced.
    """
    fig = draw_grid(panels, ncols=ncols, title=title)

    def write(tmp: Path) -> None:
        fig.savefig(tmp, format="png", dpi=DPI, metadata={"Software": MARKER})

    return write_atomic(path, write, overwrite=overwrite, replaceable=written_by_convcli)


_CHUNK_VALUES = 1 << 22  # values cast to float64 at a time by _block_means


def _blocks(n: int, cell: float) -> np.ndarray | None:
    """Start of each block along an axis of `n` pixels drawn in `cell` pixels, or None.

    An axis over 4 times its cell's size is cut into blocks that leave at least
    twice the cell's pixels (matplotlib's antialiasing does the rest).
    """
    cell = max(int(cell), 1)
    return None if n < 4 * cell else np.arange(0, n, n // (2 * cell))


def _block_peaks(image: np.ndarray, cell_pixels: tuple[float, float]) -> np.ndarray:
    """A channel reduced over blocks (see :func:`_blocks`) to each block's value of largest |x|.

    Averaging would wash out an edge map: its thin lines, positive beside
    negative, cancel. The same object is returned when no axis is reduced.
    """
    out = image
    for axis, cell in enumerate(cell_pixels):
        starts = _blocks(image.shape[axis], cell)
        if starts is None:
            continue
        top = np.maximum.reduceat(out, starts, axis=axis)
        bottom = np.minimum.reduceat(out, starts, axis=axis)
        out = np.where(-bottom > top, bottom, top)
    return out


def _block_means(image: np.ndarray, cell_pixels: tuple[float, float]) -> np.ndarray:
    """`image` averaged over blocks (see :func:`_blocks`) where it is over 4 times its cell.

    An axis under 4 times its cell's size is left alone, and so is the whole
    image (the same object is returned) when neither axis is reduced.
    """
    out = image
    for axis, cell in enumerate(cell_pixels):
        n = image.shape[axis]
        starts = _blocks(n, cell)
        if starts is None:
            continue
        block = int(starts[1] - starts[0]) if len(starts) > 1 else n
        counts = np.diff(np.append(starts, n)).reshape((-1,) + (1,) * (image.ndim - 1 - axis))
        # Summed in float64 a few blocks at a time: reduceat casts all its input at once.
        step = max(1, _CHUNK_VALUES // max(1, out.size // n * block))
        before = (slice(None),) * axis
        sums = [
            np.add.reduceat(
                out[(*before, slice(starts[i], starts[i] + step * block))],
                starts[i : i + step] - starts[i],
                axis=axis,
                dtype=np.float64,
            )
            for i in range(0, len(starts), step)
        ]
        out = np.concatenate(sums, axis=axis) / counts
    return out


def _draw(fig, ax, panel: Panel, cell_pixels: tuple[float, float]) -> None:
    image = np.asarray(panel.image)
    ax.set_title(panel.title, fontsize=10, **PLAIN_TEXT)
    h, w = image.shape[:2]
    placing = {}
    if h and w and not 1 / MAX_DRAWN_ASPECT <= h / w <= MAX_DRAWN_ASPECT:
        # A strip: drawn MAX_DRAWN_ASPECT times longer than thick, stretched across.
        placing["aspect"] = (MAX_DRAWN_ASPECT if h > w else 1 / MAX_DRAWN_ASPECT) * w / h
    shown_image = (
        _block_means(image, cell_pixels) if image.ndim == 3 else _block_peaks(image, cell_pixels)
    )
    if shown_image is not image:  # fewer pixels, over the same place
        placing["extent"] = (-0.5, w - 0.5, h - 0.5, -0.5)
    if image.ndim == 3:
        shown = ax.imshow(np.clip(shown_image, 0.0, 1.0), interpolation="antialiased", **placing)
    elif panel.signed:
        limit = panel.vmax if panel.vmax > 0 else 1.0
        shown = ax.imshow(
            shown_image,
            cmap=SIGNED_CMAP,
            vmin=-limit,
            vmax=limit,
            interpolation="antialiased",
            **placing,
        )
    else:
        shown = ax.imshow(
            shown_image,
            cmap="gray",
            vmin=0.0,
            vmax=panel.vmax or 1.0,
            interpolation="antialiased",
            **placing,
        )
    if panel.colorbar and image.ndim == 2:
        finite = np.isfinite(image)  # a mask, not a copy of the values
        over = bool(np.max(image, where=finite, initial=-np.inf) > panel.vmax)
        under = bool(panel.signed and np.min(image, where=finite, initial=np.inf) < -panel.vmax)
        # Arrows on the colour bar mark values beyond the scale (shown saturated).
        extend = {(True, True): "both", (True, False): "max", (False, True): "min"}.get(
            (over, under), "neither"
        )
        bar = fig.colorbar(shown, ax=ax, fraction=0.046, pad=0.02, extend=extend)
        bar.ax.tick_params(labelsize=8)


def _draw_kernel(fig, ax, weights: np.ndarray, title: str) -> None:
    """A kernel's grid as signed colours (zero white), each weight written in its cell."""
    top = float(np.abs(weights).max()) or 1.0
    image = ax.imshow(weights, cmap=SIGNED_CMAP, vmin=-top, vmax=top)
    ax.set_title(title, fontsize=9, **PLAIN_TEXT)
    ax.set_xticks([])
    ax.set_yticks([])
    size = 8 if max(weights.shape) <= 3 else 7
    for (i, j), value in np.ndenumerate(weights):
        text = f"{value:.3g}" if abs(value) > 1e-6 * top else "0"  # rounding noise shown as 0
        ax.text(
            j,
            i,
            text,
            ha="center",
            va="center",
            fontsize=size,
            color="white" if abs(value) > 0.6 * top else "black",
        )
    fig.colorbar(image, ax=ax, shrink=0.8)


def save_fit_figure(
    path: str | os.PathLike,
    weights: np.ndarray,
    losses: list[float],
    *,
    named: tuple[str, np.ndarray] | None,
    title: str,
    overwrite: bool = False,
) -> bool:
    """The learned kernel beside the closest named one, and the loss curve, as a PNG.

    Parameters
    ----------
    weights : (f_h, f_w) ndarray
        The learned grid.
    losses : list of float
        Relative error before the first step and after each (drawn on a log scale).
    named : (str, (f_h, f_w) ndarray) or None
        The closest named kernel's title and its grid, scaled to the learned one.
    title : str

    Returns False if `path` existed and was kept (without `overwrite`).
    """
    figure = _figure_class()
    ncols = 3 if named is not None else 2
    fig = figure(figsize=(3.4 * ncols, 3.2), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=True)
    _draw_kernel(fig, axes[0], np.asarray(weights, np.float64), "learned kernel")
    if named is not None:
        _draw_kernel(fig, axes[1], np.asarray(named[1], np.float64), named[0])
    ax = axes[-1]
    steps = np.arange(len(losses))
    ax.semilogy(steps, np.maximum(losses, 1e-17), marker=".", markersize=3)
    ax.set_xlabel("step")
    ax.set_ylabel("relative error ||Z - Y|| / ||Y||")
    ax.set_title("loss", fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    fig.suptitle(title, fontsize=10, **PLAIN_TEXT)

    def write(tmp: Path) -> None:
        fig.savefig(tmp, format="png", dpi=DPI, metadata={"Software": MARKER})

    return write_atomic(path, write, overwrite=overwrite, replaceable=written_by_convcli)
