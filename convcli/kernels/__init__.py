"""Named convolution kernels, kept as data: one readable file per kernel (numpy only).

The kernels that ship with convcli live in the project's ``kernels/`` folder, one
TOML file each, installed as the package ``convcli.kernel_files``. A kernel file
looks like this::

    # Sobel x-gradient.
    name = "sobel-x"
    description = "Sobel x-gradient (vertical edges); + where brighter on the left"
    aliases = ["sobel"]            # optional
    scale = 1                      # optional: a number, or a fraction such as "1/16"
    weights = [
        [1, 0, -1],
        [2, 0, -2],
        [1, 0, -1],
    ]

A kernel file given by path may also be a plain text grid: one row per line,
numbers separated by whitespace and/or commas, ``#`` starting a comment. A
value may be a fraction such as ``1/9`` or ``-1/8``, read as
``float(NUM) / float(DEN)``. Its name is the file's stem.

A kernel file holds at most :data:`MAX_KERNEL_SIDE` (255) rows and as many
columns, in at most :data:`MAX_KERNEL_FILE_BYTES` (2 MiB), enough for a
255 x 255 grid of 17-digit weights. The size is checked before the file is
parsed, so a larger file is refused at once (a 10000 x 10000 grid took minutes
and gigabytes to parse).

Sign conventions
----------------
convcli's "convolution" is cross-correlation (the kernel is not flipped; see
:mod:`convcli.layers.conv`), so a kernel's grid is laid over the image as written. A
kernel with positive weights on its left and negative on its right, such as the
tutorial's ``vertical`` ``[[1, 0, -1]] * 3``, responds *positively* where the
image is brighter on the left than on the right. Every directional kernel's
description says which side must be brighter for a positive response.

Rotation
--------
A spec ``NAME:ANGLE`` rotates a kernel *clockwise* as the grid is printed
(rows downward), by ``ANGLE`` degrees: a multiple of 90 for any kernel, or of
45 for a 3x3 kernel, whose 8 outer cells then move one place clockwise around
the centre per 45 degrees. This is ImageMagick's convention for
``-morphology Convolve Sobel:90`` (``RotateKernelInfo`` in MagickCore's
morphology.c), and convcli's ``sobel:90`` prints the same grid as ImageMagick's
``Sobel:90``: ``[[1, 2, 1], [0, 0, 0], [-1, -2, -1]]``, which is ``sobel-y``.
Rotating a kernel clockwise rotates its bright side clockwise too
(``vertical:90`` is ``horizontal``, ``kirsch-n:45`` is ``kirsch-ne``), and
``:180`` negates an antisymmetric kernel (``sobel-x:180`` responds where the
image is brighter on the *right*).

Where a name is also an ImageMagick kernel whose argument is not an angle there,
``NAME:ARG`` means what it means in ImageMagick or is an error saying so:
``laplacian:0``, ``:1`` and ``:15`` are ImageMagick's Laplacian types (``edge``,
``laplacian``, ``log-5x5``); ``gaussian:...``, ``log:...``, ``roberts:...`` and the
other Laplacian types are refused with what ImageMagick means by them.

Examples
--------
>>> k = parse_kernel_spec("Sobel-X:90")
>>> print(format_kernel_grid(k))
 1   2   1
 0   0   0
-1  -2  -1
>>> k.label
'sobel-x_rot90'
"""

from __future__ import annotations

import math
import numbers
import os
import re
import reprlib
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

from ..layers._engine.separable import rank_one_factors

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = [
    "MAX_KERNEL_FILE_BYTES",
    "MAX_KERNEL_SIDE",
    "Kernel",
    "KernelError",
    "describe_kernel",
    "format_kernel_grid",
    "get_kernel",
    "list_kernels",
    "load_kernel_file",
    "parse_kernel_spec",
    "parse_kernel_specs",
    "rotate_kernel",
]

# The package the shipped kernel files are installed as (the project's kernels/ folder).
_PACKAGE = "convcli.kernel_files"
_BUILTIN = "builtin"

# Names and aliases declared in TOML files: lower-case, no ':' (it starts an angle)
# and no '.' or '/' (they mark a path in a kernel spec).
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]*")
_LABEL_UNSAFE = re.compile(r"[^a-z0-9._-]+")
_ANGLE_RE = re.compile(r"[+-]?\d+(\.0*)?")
_TOML_KEYS = ("name", "description", "aliases", "scale", "weights")

# Limits on kernel files (see the module docstring): rows and columns of the grid, and
# bytes read before parsing.
MAX_KERNEL_SIDE = 255
MAX_KERNEL_FILE_BYTES = 2 * 1024 * 1024

# Images are convolved in float32: larger weights would overflow to infinity.
_FLOAT32_MAX = float(np.finfo(np.float32).max)

# Values from a file shown in messages: short, and never recursing into nested lists or
# tables (TOML dotted keys a.a.a... = 1 make dicts thousands of levels deep with no
# recursion in the parser; repr() of one raises RecursionError).
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlevel = 3


def _short(value) -> str:
    return _SHORT.repr(value)


# The 8 outer cells of a 3x3 grid, in clockwise order from the top-left corner.
_RING = ((0, 0), (0, 1), (0, 2), (1, 2), (2, 2), (2, 1), (2, 0), (1, 0))


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
        """
        text = self.name.strip().lower().replace(":", "_rot")
        return _LABEL_UNSAFE.sub("-", text).strip("-.") or "kernel"


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
            raise KernelError(f"{where}: {cell(i, j)}: {str(out[i, j])!r}; "
                              "weights must be finite numbers")
        raise KernelError(f"{where}: {cell(i, j)} is {out[i, j]}; weights must be finite numbers")
    big = np.argwhere(np.abs(out) > _FLOAT32_MAX)
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
        raise KernelError(f"{where}: 'weights' must be a list of rows, "
                          f"got {type(weights).__name__}")
    if not weights:
        raise KernelError(f"{where}: the kernel is empty (no weights)")
    if not all(isinstance(row, (list, tuple)) for row in weights):
        raise KernelError(f"{where}: 'weights' must be a list of rows (a 2-D grid) "
                          "such as [[1, 0, -1], [1, 0, -1]]")
    for i, row in enumerate(weights):
        for j, value in enumerate(row):
            if not _is_number(value):
                raise KernelError(
                    f"{where}: {cell(i, j)}: {_short(value)} is not a number"
                )
            if isinstance(value, numbers.Integral) and abs(value) > _FLOAT32_MAX:
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
            raise KernelError(f"{where}: ragged rows: {unit} {number} has {length} "
                              f"value(s) but {unit} {first} has {lengths[0]}")


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _checked_name(value, where: str, what: str) -> str:
    if not isinstance(value, str):
        raise KernelError(f"{where}: {what} must be a string, got {_short(value)}")
    name = value.strip().lower()
    if not _NAME_RE.fullmatch(name):
        raise KernelError(
            f"{where}: {what} {_short(value)} may only use letters, digits, '-' and '_'"
        )
    return name


def _checked_scale(value, where: str) -> float:
    if isinstance(value, str):
        try:
            scale = float(Fraction(value.strip()))
        except (ValueError, ZeroDivisionError):
            raise KernelError(
                f'{where}: scale {_short(value)} is not a number or a fraction such as "1/16"'
            ) from None
        except OverflowError:  # "1000...0/1": beyond a float
            scale = math.inf
    elif _is_number(value):
        try:
            scale = float(value)
        except OverflowError:  # an integer beyond a float
            scale = math.inf
    else:
        raise KernelError(f"{where}: scale must be a number, got {_short(value)}")
    if not math.isfinite(scale) or scale == 0:
        raise KernelError(f"{where}: scale must be a finite non-zero number, got {_short(value)}")
    return scale


# --- reading files --------------------------------------------------------------------------


def _read_text(path: Path, shown: str) -> str:
    try:
        with path.open("rb") as file:
            data = file.read(MAX_KERNEL_FILE_BYTES + 1)
    except FileNotFoundError:
        raise KernelError(f"{shown}: no such kernel file") from None
    except IsADirectoryError:
        raise KernelError(f"{shown}: is a directory, not a kernel file") from None
    except OSError as exc:
        raise KernelError(f"{shown}: cannot read the file ({exc.strerror or exc})") from None
    if len(data) > MAX_KERNEL_FILE_BYTES:
        raise KernelError(
            f"{shown}: the file is larger than {MAX_KERNEL_FILE_BYTES // 2**20} MiB, the limit "
            f"for a kernel file (at most {MAX_KERNEL_SIDE} x {MAX_KERNEL_SIDE} weights)"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise KernelError(f"{shown}: not a text file (kernel files are UTF-8 text)") from None


def _check_side(count: int, what: str, unit: str, shown: str) -> None:
    """Refuse a grid with more than MAX_KERNEL_SIDE rows or columns: "<what> has N <unit>"."""
    if count > MAX_KERNEL_SIDE:
        raise KernelError(
            f"{shown}: {what} has {count} {unit}: a kernel file holds at most "
            f"{MAX_KERNEL_SIDE} x {MAX_KERNEL_SIDE} weights"
        )


def _looks_like_toml(text: str) -> bool:
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            return "=" in line
    return False


def _parse_toml(text: str, shown: str, default_name: str, *, strict: bool) -> Kernel:
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise KernelError(f"{shown}: invalid TOML: {exc}") from None
    except RecursionError:
        # tomllib parses nested arrays and inline tables recursively: a few hundred
        # levels of [[[...]]] exhaust Python's stack before any rule of ours applies.
        raise KernelError(
            f"{shown}: invalid TOML: arrays or inline tables nested too deeply"
        ) from None
    unknown = sorted(set(table) - set(_TOML_KEYS))
    if unknown:
        raise KernelError(
            f"{shown}: unknown key {unknown[0]!r} (a kernel file may have: {', '.join(_TOML_KEYS)})"
        )
    if "weights" not in table:
        raise KernelError(f"{shown}: no 'weights' (the kernel's grid of rows)")
    if "name" in table:
        name = _checked_name(table["name"], shown, "name")
    elif strict:
        raise KernelError(f"{shown}: no 'name'")
    else:
        name = default_name
    description = table.get("description", "")
    if not isinstance(description, str) or "\n" in description.strip():
        raise KernelError(f"{shown}: 'description' must be one line of text")
    if strict and not description.strip():
        raise KernelError(f"{shown}: no 'description'")
    aliases = table.get("aliases", [])
    if not isinstance(aliases, list):
        raise KernelError(f"{shown}: 'aliases' must be a list of names, got {_short(aliases)}")
    aliases = tuple(_checked_name(a, shown, "alias") for a in aliases)
    weights = table["weights"]
    if isinstance(weights, list):
        _check_side(len(weights), "'weights'", "rows", shown)
        for i, row in enumerate(weights):
            if isinstance(row, list):
                _check_side(len(row), f"row {i + 1}", "values", shown)
    weights = _checked_weights(weights, shown)
    if "scale" in table:
        with np.errstate(over="ignore"):
            weights = weights * _checked_scale(table["scale"], shown)
        weights = _checked_weights(weights, shown)  # an overflow to inf is an error
    return Kernel(name, description.strip(), weights, aliases, _BUILTIN if strict else shown)


# numpy.loadtxt's messages: a value that is not a number (row counted from 0 among the
# rows read), and a row of another length (counted from 1).
_LOADTXT_NOT_A_NUMBER = re.compile(r"could not convert string '(.*)' to \w+ at row (\d+)")
_LOADTXT_RAGGED = re.compile(r"number of columns changed from (\d+) to (\d+) at row (\d+)")


# One number as numpy.loadtxt reads it (ASCII digits, no '_'), or one side of a fraction.
_NUMBER_RE = re.compile(
    r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?|inf(?:inity)?|nan)", re.ASCII | re.IGNORECASE
)


def _grid_value(token: str, where: str) -> float:
    """One cell of a text grid: a number, or a fraction NUM/DEN as float(NUM) / float(DEN)."""
    parts = token.split("/")
    if len(parts) > 2 or not all(_NUMBER_RE.fullmatch(part) for part in parts):
        reason = "is not a number or a fraction such as 1/9" if "/" in token else "is not a number"
        raise KernelError(f"{where}: {_short(token)} {reason}")
    if len(parts) == 1:
        return float(token)
    numerator, denominator = (float(part) for part in parts)
    if denominator == 0:
        raise KernelError(f"{where}: {_short(token)} divides by zero")
    value = numerator / denominator
    if math.isinf(value) and math.isfinite(numerator):
        raise KernelError(f"{where}: {_short(token)} is too large for a float64 weight")
    return value


def _parse_fraction_rows(rows: list[str], line_numbers: list[int], shown: str) -> list:
    """Rows of a text grid holding fractions such as ``1/9``, cell by cell.

    Only grids with a ``/`` come here (numpy.loadtxt reads the others); the
    size limit checked before keeps this at most 255 x 255 cells.
    """
    return [
        [_grid_value(token, f"{shown}: line {number}") for token in row.split()]
        for row, number in zip(rows, line_numbers, strict=True)
    ]


def _loadtxt_rows(rows: list[str], line_numbers: list[int], shown: str) -> np.ndarray:
    """Rows of plain numbers, read by numpy.loadtxt; errors name the file's line."""
    try:
        return np.loadtxt(rows, dtype=np.float64, ndmin=2)
    except ValueError as exc:
        message = str(exc)
        if match := _LOADTXT_NOT_A_NUMBER.search(message):
            line = line_numbers[int(match.group(2))]
            raise KernelError(f"{shown}: line {line}: {_short(match.group(1))} is not a number"
                              ) from None
        if match := _LOADTXT_RAGGED.search(message):
            first, count, row = (int(g) for g in match.groups())
            raise KernelError(
                f"{shown}: ragged rows: line {line_numbers[row - 1]} has {count} value(s) "
                f"but line {line_numbers[0]} has {first}"
            ) from None
        raise KernelError(f"{shown}: {message}") from None


def _parse_text_grid(text: str, shown: str, name: str) -> Kernel:
    """A plain text grid: one row per line, numbers split by whitespace and/or commas."""
    rows, line_numbers = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].replace(",", " ").strip()
        if line:
            rows.append(line)
            line_numbers.append(number)
    if not rows:
        raise KernelError(f"{shown}: the kernel is empty (no rows of numbers)")
    _check_side(len(rows), "the grid", "rows", shown)
    for row, number in zip(rows, line_numbers, strict=True):
        _check_side(len(row.split()), f"line {number}", "values", shown)
    if any("/" in row for row in rows):
        weights = _parse_fraction_rows(rows, line_numbers, shown)
    else:
        weights = _loadtxt_rows(rows, line_numbers, shown)
    return Kernel(name, "", _checked_weights(weights, shown, rows_named=line_numbers), (), shown)


def load_kernel_file(path) -> Kernel:
    """Read one kernel file: TOML, or a plain text grid of numbers.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.toml`` file (or any file whose first statement is ``key = value``)
        in the format of the shipped kernels, where only ``weights`` is required;
        otherwise a text grid, one row per line, numbers (or fractions such as
        ``1/9``) separated by whitespace and/or commas, ``#`` comments allowed.

    Returns
    -------
    Kernel
        Named by the file's ``name``, else its stem; ``source`` is `path`.

    Raises
    ------
    KernelError
        Naming the file and the problem: missing, unreadable or binary file,
        a file over :data:`MAX_KERNEL_FILE_BYTES` (checked before parsing) or a
        grid over :data:`MAX_KERNEL_SIDE` rows or columns,
        invalid TOML (arrays or inline tables nested hundreds deep included),
        unknown keys, empty grid, ragged rows, a value that is not
        a number or a fraction, a zero denominator, NaN or infinity, a
        weight beyond the float32 range (after the scale), a zero scale.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "diff.txt"
    >>> _ = p.write_text("1, -1\\n")
    >>> load_kernel_file(p).weights
    array([[ 1., -1.]])
    """
    shown = os.fspath(path)
    if not isinstance(shown, str):
        shown = os.fsdecode(shown)
    file = Path(shown)
    text = _read_text(file, shown)
    if not text.strip():
        raise KernelError(f"{shown}: the file is empty (no kernel weights)")
    if file.suffix.lower() == ".toml" or _looks_like_toml(text):
        return _parse_toml(text, shown, file.stem, strict=False)
    return _parse_text_grid(text, shown, file.stem)


# --- the shipped kernels ---------------------------------------------------------------------


def _build_registry(files: Iterable) -> tuple[tuple[Kernel, ...], dict[str, Kernel]]:
    """Load kernel files (Paths or importlib.resources Traversables) into a lookup table.

    Each must be a TOML file with a name equal to its stem and a description;
    names and aliases must be unique across the files.
    """
    kernels, lookup, owner = [], {}, {}
    for file in sorted(files, key=lambda f: f.name):
        shown = f"kernels/{file.name}"
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise KernelError(f"{shown}: cannot read the shipped kernel file ({exc})") from None
        stem = file.name.rsplit(".", 1)[0]
        kernel = _parse_toml(text, shown, stem, strict=True)
        if kernel.name != stem:
            raise KernelError(f"{shown}: name {kernel.name!r} differs from the file name")
        for key in (kernel.name, *kernel.aliases):
            if key in lookup:
                raise KernelError(f"{shown}: the name {key!r} is already used by {owner[key]}")
            lookup[key], owner[key] = kernel, shown
        kernels.append(kernel)
    return tuple(sorted(kernels, key=lambda k: k.name)), lookup


def _kernel_folder():
    """The folder of the shipped kernel files (an importlib.resources Traversable)."""
    try:
        return resources.files(_PACKAGE)
    except ModuleNotFoundError:
        # convcli imported straight from a source tree (not installed, or shadowing a
        # non-editable install): there the files are in the project's kernels/ folder.
        folder = Path(__file__).resolve().parent.parent / "kernels"
        if folder.is_dir():
            return folder
        raise


@lru_cache(maxsize=1)
def _registry() -> tuple[tuple[Kernel, ...], dict[str, Kernel]]:
    folder = _kernel_folder()
    files = [f for f in folder.iterdir() if f.name.endswith(".toml") and f.is_file()]
    return _build_registry(files)


def list_kernels() -> list[Kernel]:
    """All shipped kernels, sorted by name.

    Examples
    --------
    >>> [k.name for k in list_kernels()][:3]
    ['box-blur', 'edge', 'emboss']
    """
    return list(_registry()[0])


def _registered(name: str) -> Kernel | None:
    """The shipped kernel named or aliased `name` (any case), or None.

    A kernel's own name is its file's stem: that file alone is read (a run
    with ``-k vertical`` reads one file, not all of them: 8 ms of its start);
    an alias needs them all.
    """
    key = name.strip().lower()
    if _registry.cache_info().currsize == 0 and _KERNEL_NAME.fullmatch(key):
        kernel = _shipped_file(key)
        if kernel is not None:
            return kernel
    return _registry()[1].get(key)


_KERNEL_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


@lru_cache(maxsize=32)
def _shipped_file(name: str) -> Kernel | None:
    """The shipped kernel of file ``<name>.toml``, named `name`; None where there is none."""
    file = _kernel_folder() / f"{name}.toml"
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    kernel = _parse_toml(text, f"kernels/{name}.toml", name, strict=True)
    return kernel if kernel.name == name else None


def get_kernel(name: str) -> Kernel:
    """Look up a shipped kernel by name or alias, ignoring case.

    Raises
    ------
    KernelError
        For an unknown name, listing close matches.

    Examples
    --------
    >>> get_kernel("Laplacian8").name
    'edge'
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {type(name).__name__}")
    kernel = _registered(name)
    if kernel is not None:
        return kernel
    key = name.strip().lower()
    kernels, lookup = _registry()
    import difflib  # only for an unknown name

    close = difflib.get_close_matches(key, lookup, n=4, cutoff=0.6)
    close += [k for k in sorted(lookup) if key and k.startswith(key) and k not in close]
    if close:
        hint = f"did you mean {', '.join(close[:5])}?"
    else:
        hint = f"known kernels: {', '.join(k.name for k in kernels)}"
    raise KernelError(f"unknown kernel {name!r}; {hint}")


# --- rotation and specs ---------------------------------------------------------------------


def rotate_kernel(weights, angle) -> np.ndarray:
    """Rotate a kernel grid clockwise by `angle` degrees, as ImageMagick does.

    Parameters
    ----------
    weights : (f_h, f_w) array_like
        The grid, rows downward as printed.
    angle : int or float
        Degrees clockwise (negative: anticlockwise): a multiple of 90 for any
        kernel, or of 45 for a 3x3 kernel, whose 8 outer cells move one place
        clockwise around the centre per 45 degrees.

    Returns
    -------
    (f_h, f_w) or (f_w, f_h) ndarray
        A new float64 array.

    Examples
    --------
    >>> rotate_kernel([[1, 0, -1]] * 3, 90)
    array([[ 1.,  1.,  1.],
           [ 0.,  0.,  0.],
           [-1., -1., -1.]])
    >>> rotate_kernel([[1, 0, -1]] * 3, 45)
    array([[ 1.,  1.,  0.],
           [ 1.,  0., -1.],
           [ 0., -1., -1.]])
    """
    w = _checked_weights(weights, "weights")
    if not _is_number(angle) or not math.isfinite(angle) or not float(angle).is_integer():
        raise KernelError(
            f"cannot rotate by {angle!r} degrees: use a multiple of 90 (or of 45 for a 3x3 kernel)"
        )
    degrees = int(angle) % 360
    if degrees % 90 == 0:
        return np.ascontiguousarray(np.rot90(w, k=-(degrees // 90)))
    if degrees % 45 != 0:
        raise KernelError(
            f"cannot rotate by {angle} degrees: use a multiple of 90 (or of 45 for a 3x3 kernel)"
        )
    if w.shape != (3, 3):
        h, wd = w.shape
        raise KernelError(
            f"cannot rotate a {h}x{wd} kernel by {angle} degrees: "
            "45-degree steps need a 3x3 kernel (use a multiple of 90)"
        )
    rows, cols = zip(*_RING, strict=True)
    out = w.copy()
    out[rows, cols] = np.roll(w[rows, cols], degrees // 45)
    return out


def _rotated(kernel: Kernel, angle_text: str) -> Kernel:
    angle = int(float(angle_text))
    degrees = angle % 360
    weights = rotate_kernel(kernel.weights, angle)
    if degrees == 0:
        return kernel
    description = f"{kernel.name} rotated {degrees} degrees clockwise"
    if kernel.description:
        description += f"; unrotated: {kernel.description}"
    return Kernel(f"{kernel.name}:{degrees}", description, weights, (), kernel.source)


# Names that are also ImageMagick kernels (``-morphology Convolve Name:ARG``) but whose ARG is
# not an angle there. Sobel, Prewitt and Kirsch take an angle in ImageMagick as here, and give
# the same grids at every angle; these take a type, a size or a sigma.
_IMAGEMAGICK_LAPLACIANS = {0: "edge", 1: "laplacian", 15: "log-5x5"}
_IMAGEMAGICK_MEANINGS = {
    "gaussian": ("Gaussian:RADIUSxSIGMA is a sampled Gaussian of that radius and sigma",
                 "gaussian (the 3x3 binomial, sigma about 0.71) or gaussian-5x5, with no "
                 "number, or the grid in a kernel file"),
    "log": ("LoG:RADIUS,SIGMA is a Laplacian of Gaussian of that radius and sigma",
            "log (ImageMagick's Laplacian:15) with no number, or the grid in a kernel file"),
    "roberts": ("Roberts:ANGLE is a 3x3 kernel of two neighbouring cells turned by ANGLE",
                "roberts-nw or roberts-ne (the 2x2 Roberts cross, run with --pad 0), "
                "NAME:90 to turn them"),
}


def _imagemagick_kernel(name: str, arg: str, spec: str) -> Kernel | None:
    """The kernel ImageMagick means by ``NAME:ARG`` where ARG is not an angle there, else None.

    ``Laplacian:TYPE`` gives the shipped Laplacian of that type (0 ``edge``,
    1 ``laplacian``, 15 ``log-5x5``); any other Laplacian type, and any
    ``Gaussian:``, ``LoG:`` or ``Roberts:`` argument, raise a KernelError saying
    what ImageMagick means and what to write here.
    """
    key = name.strip().lower()
    if key == "laplacian":
        if _ANGLE_RE.fullmatch(arg.strip()) and int(float(arg)) in _IMAGEMAGICK_LAPLACIANS:
            return get_kernel(_IMAGEMAGICK_LAPLACIANS[int(float(arg))])
        raise KernelError(
            f"kernel spec {spec!r}: in ImageMagick the number after Laplacian: is a type, "
            "not an angle: Laplacian:0 is edge here, Laplacian:1 laplacian and Laplacian:15 "
            "log-5x5; its types 2, 3, 5, 7 and 19 are not shipped (write the grid in a kernel file)"
        )
    if key in _IMAGEMAGICK_MEANINGS:
        meaning, instead = _IMAGEMAGICK_MEANINGS[key]
        raise KernelError(f"kernel spec {spec!r}: in ImageMagick {meaning}; write {instead}")
    return None


def _looks_like_path(text: str) -> bool:
    """Whether a spec is written as a path: a separator, or a '.' in its last component.

    Shipped names never contain ``/``, ``.`` or a separator, so such a spec is never a name.
    """
    separators = {"/", os.sep, os.altsep} - {None}
    return any(s in text for s in separators) or "." in Path(text).name


def _exists(text: str) -> bool:
    return os.path.isfile(text) or os.path.isdir(text)  # False for a name too long


def _not_a_file(text: str) -> str:
    """What `text` names, where it exists but is neither a file nor a folder (never opened)."""
    try:
        mode = os.stat(text).st_mode
    except OSError as exc:  # a link to nothing, or a loop of links
        return f"a link that leads nowhere ({exc.strerror or exc})"
    return "a FIFO" if stat.S_ISFIFO(mode) else "a device" if (
        stat.S_ISCHR(mode) or stat.S_ISBLK(mode)) else "a socket or other special file"


def _load_named(text: str) -> Kernel:
    """A kernel name, else a kernel file (no angle): a shipped name always wins."""
    kernel = _registered(text)
    if kernel is not None:
        return kernel
    if _exists(text):
        return load_kernel_file(text)
    if os.path.lexists(text):
        raise KernelError(f"{text}: {_not_a_file(text)}, not a kernel file")
    if _looks_like_path(text):
        raise KernelError(f"{text}: no such kernel file")
    return get_kernel(text)  # unknown: the message suggests close names


def _spec_text(spec) -> str:
    text = os.fspath(spec)
    if not isinstance(text, str):
        raise TypeError(f"spec must be a string or a path, got {type(spec).__name__}")
    if not text.strip():
        raise KernelError("empty kernel spec: give a kernel name, NAME:ANGLE or a file path")
    return text


def parse_kernel_spec(spec) -> Kernel:
    """Resolve a ``--kernel`` value: a name, ``NAME:ANGLE``, or a kernel file's path.

    Parameters
    ----------
    spec : str or os.PathLike
        A shipped kernel's name or alias (any case); ``NAME:ANGLE`` for that
        kernel rotated clockwise by ANGLE degrees (see :func:`rotate_kernel`);
        or the path of a kernel file, optionally followed by ``:ANGLE``.

        A shipped name, with or without an angle, always wins: files and
        folders in the working directory never hide it. A spec is a file's path
        when it contains a path separator (``./sobel-y``, ``dir/k``) or a ``.``
        in its last component (``my.txt``), or when it is no shipped name but
        an existing file has that name (an extension-less ``mykernel``). A
        path that exists is taken whole, even with a ``:`` in its name.

    Returns
    -------
    Kernel
        A rotated kernel is named ``"NAME:DEGREES"`` with DEGREES in 0..359.

    Raises
    ------
    KernelError
        One line: an unknown name (with close matches), ``"<spec>: no such
        kernel file"`` for a missing path, a bad angle, or the file's problem.

    Examples
    --------
    >>> parse_kernel_spec("vertical:90").weights.tolist()
    [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [-1.0, -1.0, -1.0]]
    """
    text = _spec_text(spec)
    base, sep, angle_text = text.rpartition(":")
    rotated = bool(sep and base.strip())
    if _registered(base if rotated else text) is None and _exists(text):
        return load_kernel_file(text)
    if not rotated:
        return _load_named(text.strip())
    imagemagick = _imagemagick_kernel(base, angle_text, text)
    if imagemagick is not None:
        return imagemagick
    if not _ANGLE_RE.fullmatch(angle_text.strip()):
        raise KernelError(
            f"kernel spec {text!r}: the angle {angle_text!r} is not a whole number of "
            "degrees (write NAME:90, for example)"
        )
    return _rotated(_load_named(base.strip()), angle_text.strip())


def parse_kernel_specs(spec) -> list[Kernel]:
    """Resolve a comma-separated list of ``--kernel`` specs, in order.

    Parameters
    ----------
    spec : str or os.PathLike
        Specs as :func:`parse_kernel_spec` reads them, separated by commas
        (``"sobel-x:90, edge"``); whitespace around each is ignored. An
        existing file written as a path (see :func:`parse_kernel_spec`),
        optionally followed by ``:ANGLE``, is taken whole even when its name
        holds a comma.

    Returns
    -------
    list of Kernel
        One per spec, in the order given.

    Raises
    ------
    KernelError
        For an empty item (``"a,,b"``, a trailing comma), naming the whole
        spec, or the first spec that cannot be resolved.

    Examples
    --------
    >>> [k.name for k in parse_kernel_specs("sobel-x, sobel-x:90")]
    ['sobel-x', 'sobel-x:90']
    """
    text = _spec_text(spec)
    base, sep, angle_text = text.rpartition(":")
    whole = [text, base] if sep and _ANGLE_RE.fullmatch(angle_text.strip()) else [text]
    if "," not in text or any(_looks_like_path(t) and _exists(t) for t in whole):
        return [parse_kernel_spec(text)]
    items = [item.strip() for item in text.split(",")]
    for number, item in enumerate(items, start=1):
        if not item:
            raise KernelError(
                f"kernel spec {text!r}: item {number} of {len(items)} is empty "
                "(separate kernels with single commas, no trailing comma)"
            )
    return [parse_kernel_spec(item) for item in items]


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
    return (f"sum: {_short_number(total)} (neither: a flat area's value is multiplied by "
            f"{_short_number(total)})")


def _separable_line(weights: np.ndarray) -> str:
    factors = rank_one_factors(weights)
    if factors is None:
        return "separable: no (rank above 1: runs as one 2-D pass)"
    column, row = factors
    nonzero = np.abs(column[column != 0])
    scale = float(nonzero.min()) * (1.0 if column[column != 0][0] > 0 else -1.0)
    column, row = column / scale, row * scale  # the column's smallest weight 1
    return ("separable: yes (rank 1: the column " + " ".join(map(_short_number, column))
            + " times the row " + " ".join(map(_short_number, row))
            + "; runs as two 1-D passes where that is faster)")


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
        return (f"centre: none (a {h}x{w} grid has an even side: run it with --pad valid "
                "or --pad N)")
    return (f"centre: row {h // 2 + 1}, column {w // 2 + 1} "
            f"(weight {_short_number(weights[h // 2, w // 2])})")


def describe_kernel(kernel: Kernel) -> str:
    """What ``convcli kernels --check`` prints: size, sum, separable, symmetry, centre.

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
    return "\n".join([f"{kernel.name} ({h}x{w})", _sum_line(weights), _separable_line(weights),
                      _symmetry_line(weights), _centre_line(weights)])
