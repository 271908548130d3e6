"""Kernel files: reading one, TOML or a plain text grid, within size limits.

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
"""

from __future__ import annotations

import functools
import math
import os
import re
import sys
from pathlib import Path

import numpy as np

from .kernel import _BUILTIN, Kernel, KernelError, _checked_weights, _is_number, _short

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

# Names and aliases declared in TOML files: lower-case, no ':' (it starts an angle)
# and no '.' or '/' (they mark a path in a kernel spec).
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]*")
_TOML_KEYS = ("name", "description", "aliases", "scale", "weights")

# Limits on kernel files (see the module docstring): rows and columns of the grid, and
# bytes read before parsing.
MAX_KERNEL_SIDE = 255
MAX_KERNEL_FILE_BYTES = 2 * 1024 * 1024


# --- the values of a TOML file --------------------------------------------------------------


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
        from fractions import Fraction  # only for a scale written as text (5 ms to load)

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
        table = tomllib.loads(text, parse_float=functools.partial(_toml_float, shown=shown))
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


def _toml_float(text: str, *, shown: str) -> float:
    """One float of a TOML kernel file, from its text: a number past float64's range
    (``1e400``) is refused as written, where its value would be quoted as 'inf'."""
    value = float(text)
    if math.isinf(value) and "inf" not in text:
        raise KernelError(f"{shown}: {_short(text)} is too large for a float64 number")
    return value


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
            raise KernelError(
                f"{shown}: line {line}: {_short(match.group(1))} is not a number"
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
    _check_past_float64(weights, rows, line_numbers, shown)
    return Kernel(name, "", _checked_weights(weights, shown, rows_named=line_numbers), (), shown)


def _check_past_float64(weights, rows: list[str], line_numbers: list[int], shown: str) -> None:
    """A KernelError naming the number as written where one past float64's range (``1e400``)
    was read as an infinity, which the finite check would quote as 'inf'."""
    for i, row in enumerate(weights):  # rows of any lengths: a ragged grid is said later
        infinite = [j for j, value in enumerate(row) if math.isinf(value)]
        token = rows[i].split()[infinite[0]] if infinite else "inf"
        if "inf" not in token.lower():
            raise KernelError(
                f"{shown}: line {line_numbers[i]}: {_short(token)}: weights beyond the float32 "
                "range (magnitude at most about 3.4e38) cannot be applied"
            )


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
