"""The levels and figure of ``convcli conv``: how each map is shown.

Each function takes the operation (:class:`convcli.app.conv_op.ConvOp`) as
`op`; its methods ``mapping_for``, ``margin``, ``mappings`` and ``figure`` call them.
"""

from __future__ import annotations

import numpy as np

from ..io.figures import Grid, Panel
from ..kernels import Kernel
from ..levels.mapping import Mapping, robust_top
from .names import number
from .op_helpers import original_panel, pad_text


def auto_mapping(op, kernel: Kernel, n_summed: int, white: float) -> str:
    """The value mapping ``--normalize auto`` picks for one kernel.

    ``robust`` for a zero-sum kernel (edge detectors: edge strength, bright
    on black, scaled by a high percentile so that sparse edges show);
    ``clip`` for a kernel that keeps the level (weights summing to 1: blur,
    sharpen, identity), or whose results cannot leave 0..white: the picture
    as it is (a sum over `n_summed` channels is shown as their mean, see
    :func:`conv_mappings`); otherwise ``minmax`` (emboss, a bias ...).
    Any other ``--normalize`` of `op` is its own answer.
    """
    if op.normalize != "auto":
        return op.normalize
    w = kernel.weights
    total, size = float(w.sum()), float(np.abs(w).sum())
    if abs(total) <= 1e-9 * size:
        return "robust"
    lo = white * float(w[w < 0].sum()) + op.bias / n_summed
    hi = white * float(w[w > 0].sum()) + op.bias / n_summed
    if lo >= 0 and hi <= white * (1 + 1e-6):
        return "clip"
    if abs(total - 1) <= 1e-6 * size:
        return "clip"
    return "minmax"


def robust_margin(op) -> int:
    """Pixels on every side of a map left out of its robust scale: half the kernel, and 3."""
    half = max(max(op.span(k)) // 2 for k in op.kernels)
    return -(-(half + 3) // op.stride)


def conv_mappings(op, pic) -> list[Mapping]:
    """Each result channel's mapping; a channel sum keeping the level is shown as the mean.

    With ``--channels sum`` the result of a kernel whose weights sum to 1 is
    R + G + B of the blurred (sharpened ...) picture: ``clip`` at
    n_channels x white shows their mean, the picture as a grey photo.
    """
    names = op.channel_names(pic.channels)
    n_summed = pic.colour_channels if op.channels == "sum" else 1
    if op.combine is None:
        methods = [op.mapping_for(k, n_summed, pic.white) for k in op.kernels]
    elif op.normalize != "auto":
        methods = [op.normalize]
    else:
        edges = all(op.mapping_for(k, n_summed, pic.white) == "robust" for k in op.kernels)
        methods = ["robust" if edges else "minmax"]
    # The auto clip of a channel sum shows the mean; an explicit one, the values.
    mean = pic.white * n_summed if op.normalize == "auto" else pic.white
    margin = op.margin()
    return [Mapping(m, mean if m == "clip" else pic.white, margin) for m in methods for _ in names]


def conv_figure(op, pic, data: np.ndarray) -> Grid:
    """The figure of `pic` and `op`'s result `data`: the original, then each kernel's maps."""
    names = op.channel_names(pic.channels)
    per_kernel = len(names)
    titles = (
        [k.name for k in op.kernels]
        if op.combine is None
        else [" + ".join(k.name for k in op.kernels) + f" ({op.combine})"]
    )
    rows = [
        _kernel_row(op, data[:, :, k * per_kernel : (k + 1) * per_kernel], title, names)
        for k, title in enumerate(titles)
    ]
    original = original_panel(pic)
    if per_kernel == 1:  # one row: the original, then every kernel
        panels = [original] + [row[0] for row in rows]
        ncols = min(len(panels), 4)
    else:  # a row per kernel, the original above the first column
        panels = []
        for k, row in enumerate(rows):
            panels += [original if k == 0 else None] + row
        ncols = 1 + per_kernel
    title = f"conv, --channels {op.channels}, stride {op.stride}, pad {pad_text(op.pad)}"
    title += f", dilation {op.dilation}" if op.dilation != 1 else ""
    return Grid(panels, ncols, title)


def _kernel_row(op, chans: np.ndarray, title: str, names: list[str]) -> list[Panel]:
    """The panels of one kernel's maps `chans` (H, W, len(names)), on one scale."""
    finite = chans[np.isfinite(chans)]
    signed = bool(finite.size and finite.min() < 0)
    # A constant map has no scale to show: its value goes in the title instead.
    constant = bool(finite.size and finite.min() == finite.max())
    note = f" (all {number(float(finite[0]))})" if constant else ""
    del finite
    # One symmetric scale per kernel, so that its channels can be compared;
    # its top is the robust top of the image outputs (the 99.5th percentile
    # of |x| away from the border), so that a few extreme values (a
    # zero-padded frame, specular highlights) do not wash the map out.
    limit = robust_top(chans, margin=op.margin())
    return [
        Panel(
            f"{title}: {c}{note}",
            chans[:, :, i],
            signed=signed,
            vmax=limit or 1.0,
            colorbar=not constant,
        )
        for i, c in enumerate(names)
    ]
