"""Kernels shown as text: the grid, and what ``convcli kernels --check`` says of one."""

from __future__ import annotations

import math

import numpy as np

from ..layers._engine.separable import rank_one_factors
from .kernel import Kernel, _checked_weights

# --- display --------------------------------------------------------------------------------


def _format_value(x: float) -> str:
    """The fewest digits that read back as exactly `x`, whole numbers without ``.0``."""
    if x == 0:
        return "0"
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


def format_kernel_grid(kernel) -> str:
    """The kernel's grid as right-aligned text, one row per line.

    Every weight is written in the fewest digits that read back exactly
    (``0.1111111111111111`` for 1/9), whole numbers without ``.0``; the text
    is itself a valid plain-text kernel file that gives the same weights.

    Parameters
    ----------
    kernel : Kernel or (f_h, f_w) array_like

    Examples
    --------
    >>> from convcli.kernels import get_kernel
    >>> print(format_kernel_grid(get_kernel("gaussian-3x3")))
    0.0625  0.125  0.0625
     0.125   0.25   0.125
    0.0625  0.125  0.0625
    """
    weights = kernel.weights if isinstance(kernel, Kernel) else _checked_weights(kernel, "kernel")
    cells = [[_format_value(x) for x in row] for row in weights]
    widths = [max(len(row[j]) for row in cells) for j in range(len(cells[0]))]
    return "\n".join(
        "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells
    )


# --- what a kernel does ---------------------------------------------------------------------


def _short_number(x: float) -> str:
    """`x` in at most 6 significant digits, whole numbers without ``.0``."""
    text = f"{float(x):.6g}"
    return "0" if text in ("0", "-0") else text


def _sum_line(weights: np.ndarray) -> str:
    total = float(np.sum(weights))
    scale = float(np.sum(np.abs(weights)))
    if math.isclose(total, 1.0, rel_tol=1e-9):
        return "sum: 1 (keeps levels: a flat area keeps its value, as a blur or sharpen does)"
    if abs(total) <= 1e-12 * scale:
        return "sum: 0 (shows edges: a flat area gives 0, changes give the values)"
    return (
        f"sum: {_short_number(total)} (neither: a flat area's value is multiplied by "
        f"{_short_number(total)})"
    )


def _separable_line(weights: np.ndarray) -> str:
    factors = rank_one_factors(weights)
    if factors is None:
        return "separable: no (rank above 1: runs as one 2-D pass)"
    column, row = factors
    nonzero = np.abs(column[column != 0])
    scale = float(nonzero.min()) * (1.0 if column[column != 0][0] > 0 else -1.0)
    column, row = column / scale, row * scale  # the column's smallest weight 1
    return (
        "separable: yes (rank 1: the column "
        + " ".join(map(_short_number, column))
        + " times the row "
        + " ".join(map(_short_number, row))
        + "; runs as two 1-D passes where that is faster)"
    )


def _symmetry_line(weights: np.ndarray) -> str:
    found = []
    for axis, name in ((1, "left-right"), (0, "top-bottom")):
        mirrored = np.flip(weights, axis)
        if np.array_equal(weights, mirrored):
            found.append(f"symmetric {name}")
        elif np.array_equal(weights, -mirrored):
            found.append(f"anti-symmetric {name} (the sign says which side is brighter)")
    h, w = weights.shape
    if h == w and h > 1 and np.array_equal(weights, weights.T):
        found.append("symmetric about the diagonal")
    return "symmetry: " + ("; ".join(found) if found else "none")


def _centre_line(weights: np.ndarray) -> str:
    h, w = weights.shape
    if h % 2 == 0 or w % 2 == 0:
        return f"centre: none (a {h}x{w} grid has an even side: run it with --pad valid or --pad N)"
    return (
        f"centre: row {h // 2 + 1}, column {w // 2 + 1} "
        f"(weight {_short_number(weights[h // 2, w // 2])})"
    )


def describe_kernel(kernel: Kernel) -> str:
    """What ``convcli kernels --check`` prints: size, sum, separable, symmetry, centre.

    >>> from convcli.kernels import get_kernel
    >>> print(describe_kernel(get_kernel("gaussian-3x3")))  # doctest: +NORMALIZE_WHITESPACE
    gaussian-3x3 (3x3)
    sum: 1 (keeps levels: a flat area keeps its value, as a blur or sharpen does)
    separable: yes (rank 1: the column 1 2 1 times the row 0.0625 0.125 0.0625;
        runs as two 1-D passes where that is faster)
    symmetry: symmetric left-right; symmetric top-bottom; symmetric about the diagonal
    centre: row 2, column 2 (weight 0.25)
    """
    weights = np.asarray(kernel.weights, np.float64)
    h, w = weights.shape
    return "\n".join(
        [
            f"{kernel.name} ({h}x{w})",
            _sum_line(weights),
            _separable_line(weights),
            _symmetry_line(weights),
            _centre_line(weights),
        ]
    )
