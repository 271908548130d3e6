"""The :class:`Kernel` value, :class:`KernelError`, and the checks on a kernel's weights.

A kernel's weights are a non-empty 2-D grid of finite real numbers within the
float32 range (images are convolved in float32). :func:`_checked_weights` turns
a grid of rows or an array into such a float64 array, or raises a one-line
:class:`KernelError` naming the cell at fault.
"""

from __future__ import annotations

import numbers
import re
import reprlib
from dataclasses import dataclass, field

import numpy as np

from ..layers.validation import FLOAT32_MAX

# The source of a shipped kernel, and what a kernel's label may not hold.
_BUILTIN = "builtin"
_LABEL_UNSAFE = re.compile(r"[^a-z0-9._-]+")

# Images are convolved in float32: larger weights would overflow to infinity.

# Values from a file shown in messages: short, and never recursing into nested lists or
# tables (TOML dotted keys a.a.a... = 1 make dicts thousands of levels deep with no
# recursion in the parser; repr() of one raises RecursionError).
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlevel = 3


def _short(value) -> str:
    return _SHORT.repr(value)


class KernelError(ValueError):
    """A kernel name, spec or file that cannot be used.

    The message is one line naming the file or the kernel name and the problem,
    ready to be shown to a user as it is.
    """


@dataclass(frozen=True)
class Kernel:
    """A named 2-D kernel, compared and hashed by value.

    Parameters
    ----------
    name : str
        The kernel's name (``"sobel-x"``; ``"sobel-x:90"`` once rotated).
    description : str
        One line, including the sign convention of a directional kernel.
    weights : (f_h, f_w) array_like
        The weights, scale already applied; stored as a read-only float64 copy.
    aliases : tuple of str
        Other names that look the kernel up.
    source : str
        The path of the file it was read from, or ``"builtin"`` for a shipped kernel.
    """

    name: str
    description: str
    weights: np.ndarray = field(compare=False)
    aliases: tuple[str, ...] = ()
    source: str = _BUILTIN
    # The weights as rows of floats: what equality and hashing compare.
    _rows: tuple[tuple[float, ...], ...] = field(init=False, repr=False, default=())

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise KernelError(f"a kernel needs a non-empty name, got {_short(self.name)}")
        where = f"kernel {self.name!r}"
        if not isinstance(self.description, str) or "\n" in self.description:
            raise KernelError(f"{where}: the description must be one line of text")
        aliases = tuple(self.aliases)
        if not all(isinstance(a, str) for a in aliases):
            raise KernelError(f"{where}: aliases must be strings, got {_short(aliases)}")
        weights = _checked_weights(self.weights, where)
        weights.flags.writeable = False
        object.__setattr__(self, "aliases", aliases)
        object.__setattr__(self, "weights", weights)
        object.__setattr__(self, "source", str(self.source))
        object.__setattr__(self, "_rows", tuple(map(tuple, weights.tolist())))

    @property
    def size(self) -> tuple[int, int]:
        """``(height, width)`` of the grid."""
        return self.weights.shape

    @property
    def centred(self) -> bool:
        """Whether the grid has a centre cell: an odd number of rows and of columns.

        ``--pad same`` needs this (a 1x3 or 3x5 kernel is centred, as scipy and
        OpenCV centre it); 2x2 kernels such as ``roberts-nw`` run with ``--pad 0``.
        """
        h, w = self.size
        return h % 2 == 1 and w % 2 == 1

    @property
    def label(self) -> str:
        """The name made safe for file names: only ``[a-z0-9._-]``.

        A rotation ``:90`` becomes ``_rot90``, so ``"sobel-x:90"`` gives ``"sobel-x_rot90"``.
        A kernel read from a file adds six hex digits of its weights' SHA-256
        (``k-3e8f1a``): a file edited, or another file of the same name (or a
        shipped kernel's), never takes the outputs of these weights for its own.
        """
        text = self.name.strip().lower().replace(":", "_rot")
        label = _LABEL_UNSAFE.sub("-", text).strip("-.") or "kernel"
        if self.source == _BUILTIN:
            return label
        import hashlib  # kernel files only: OpenSSL's start, 4 ms, spared the others

        grid = np.ascontiguousarray(self.weights, "<f8")
        digest = hashlib.sha256(repr(grid.shape).encode() + grid.tobytes()).hexdigest()
        return f"{label}-{digest[:6]}"


# --- validation -----------------------------------------------------------------------------


def _row_column(i: int, j: int) -> str:
    return f"row {i + 1}, column {j + 1}"


def _checked_weights(weights, where: str, *, rows_named=None) -> np.ndarray:
    """Return `weights` as a new 2-D finite float64 array, or raise KernelError.

    `weights` is a list of rows (a TOML ``weights`` value, a Python grid) or an
    array. Messages name the cell ``row i, column j``; `rows_named` (file line
    numbers of a text grid) names rows as ``line N`` instead.
    """
    if rows_named is not None:

        def cell(i, j):
            return f"line {rows_named[i]}"
    else:
        cell = _row_column
    if not isinstance(weights, np.ndarray):
        _check_grid(weights, where, cell, rows_named)
    elif weights.dtype.kind not in "biuf":
        raise KernelError(f"{where}: the weights must be numbers, got dtype {weights.dtype}")
    out = np.array(weights, dtype=np.float64)
    if out.size == 0:
        raise KernelError(f"{where}: the kernel is empty (no weights)")
    if out.ndim != 2:
        raise KernelError(
            f"{where}: the weights must be a 2-D grid of rows, got {out.ndim} dimension(s)"
        )
    bad = np.argwhere(~np.isfinite(out))
    if bad.size:
        i, j = bad[0]
        if rows_named is not None:
            raise KernelError(
                f"{where}: {cell(i, j)}: {str(out[i, j])!r}; weights must be finite numbers"
            )
        raise KernelError(f"{where}: {cell(i, j)} is {out[i, j]}; weights must be finite numbers")
    big = np.argwhere(np.abs(out) > FLOAT32_MAX)
    if big.size:
        i, j = big[0]
        raise KernelError(
            f"{where}: {_row_column(i, j)} is {float(out[i, j])!r}: weights beyond "
            f"the float32 range (magnitude at most about 3.4e38) cannot be applied"
        )
    return out


def _check_grid(weights, where: str, cell, rows_named) -> None:
    """Raise KernelError unless `weights`, not an array, is a non-empty grid of rows of numbers.

    Each value must be a real number (not a bool), an integer within the
    float32 range, and every row as long as the first. `cell(i, j)` names a
    cell and `rows_named` the rows, as in :func:`_checked_weights`.
    """
    if not isinstance(weights, (list, tuple)):
        raise KernelError(
            f"{where}: 'weights' must be a list of rows, got {type(weights).__name__}"
        )
    if not weights:
        raise KernelError(f"{where}: the kernel is empty (no weights)")
    if not all(isinstance(row, (list, tuple)) for row in weights):
        raise KernelError(
            f"{where}: 'weights' must be a list of rows (a 2-D grid) "
            "such as [[1, 0, -1], [1, 0, -1]]"
        )
    for i, row in enumerate(weights):
        for j, value in enumerate(row):
            if not _is_number(value):
                raise KernelError(f"{where}: {cell(i, j)}: {_short(value)} is not a number")
            if isinstance(value, numbers.Integral) and abs(value) > FLOAT32_MAX:
                # Too large even for float64 conversion, possibly.
                raise KernelError(
                    f"{where}: {_row_column(i, j)} is an integer of "
                    f"{len(str(abs(int(value))))} digits: weights beyond the float32 "
                    "range (magnitude at most about 3.4e38) cannot be applied"
                )
    lengths = [len(row) for row in weights]
    if not any(lengths):
        raise KernelError(f"{where}: the kernel is empty (its rows have no values)")
    for i, length in enumerate(lengths):
        if length != lengths[0]:
            unit = "line" if rows_named is not None else "row"
            first = rows_named[0] if rows_named is not None else 1
            number = rows_named[i] if rows_named is not None else i + 1
            raise KernelError(
                f"{where}: ragged rows: {unit} {number} has {length} "
                f"value(s) but {unit} {first} has {lengths[0]}"
            )


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
