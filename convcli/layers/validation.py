"""Argument checks shared by the layer functions (numpy only).

Every public function validates its inputs here first, so that bad input
raises a ``ValueError`` or ``TypeError`` naming the argument and the value
received, never an ``AssertionError``, ``IndexError`` or ``ZeroDivisionError``
from deep inside the arithmetic.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping

import numpy as np

from ..units import size_text
from ._engine.tiles import window_count


def as_real_array(x, name: str) -> np.ndarray:
    """Return `x` as an ndarray of real numbers, without copying."""
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a numeric array, got {type(x).__name__}") from exc
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    return arr


def check_ndim(arr: np.ndarray, name: str, ndim: int, layout: str) -> None:
    """Raise ValueError unless `arr` has `ndim` dimensions."""
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array {layout}, got shape {arr.shape}")


def compute_dtype(*arrays: np.ndarray) -> np.dtype:
    """The floating dtype a layer computes in.

    float32 and float64 are kept (float64 wins when mixed); float16 is
    computed in float32; integers and booleans are computed in float64,
    so uint8 and uint16 images never wrap around.
    """
    dtypes = []
    for arr in arrays:
        if arr.dtype.kind == "f":
            dtypes.append(np.float32 if arr.dtype.itemsize <= 4 else arr.dtype)
        else:
            dtypes.append(np.float64)
    return np.dtype(np.result_type(*dtypes))


def as_int(value, name: str, *, minimum: int) -> int:
    """Return `value` as a Python int, checking it is a whole number >= minimum."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if isinstance(value, numbers.Integral):
        result = int(value)
    elif float(value).is_integer():
        result = int(value)
    else:
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if result < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {result}")
    return result


def hparameter(hparameters, key: str, *, minimum: int) -> int:
    """Read integer hyperparameter `key` from the `hparameters` dict."""
    if not isinstance(hparameters, Mapping):
        raise TypeError(f"hparameters must be a dict, got {type(hparameters).__name__}")
    if key not in hparameters:
        raise ValueError(
            f"hparameters is missing the key {key!r} (got keys {sorted(map(str, hparameters))})"
        )
    return as_int(hparameters[key], f'hparameters["{key}"]', minimum=minimum)


def output_size(size: int, window: int, stride: int, what: str) -> int:
    """Number of window positions along one axis; ValueError if none fit."""
    if window > size:
        raise ValueError(f"{what} {window} is larger than the input size {size}")
    return window_count(size, window, stride)


# The largest length of one axis of a result, and the largest result in bytes:
# beyond them numpy fails with "array is too big" or a MemoryError (or takes
# the machine's memory); they are refused first, naming the argument.
MAX_AXIS = 2**31 - 1

FLOAT32_MAX = float(np.finfo(np.float32).max)
"""The largest float32: values beyond it cannot be results, nor float32 samples."""


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not on Linux
        return 2**40


MAX_BYTES = _memory_bytes()


def check_axes(shape, cause: str, what: str = "the result") -> None:
    """Raise ValueError where an axis of `shape` is longer than any array's can be
    (:data:`MAX_AXIS`), whatever the memory: `cause` and `what` as for
    :func:`check_result_size`."""
    if any(n > MAX_AXIS for n in shape):
        dims = " x ".join(map(str, shape))
        raise ValueError(f"{cause} makes {what} {dims}, too large (at most {MAX_AXIS} per axis)")


def check_result_size(shape, dtype, cause: str, what: str = "the result") -> None:
    """Raise ValueError when an array of `shape` could not be allocated.

    `cause` names the argument responsible (``'hparameters["pad"] = 5'``);
    `what` the array (``"the padded input"``).
    """
    check_axes(shape, cause, what)
    dims = " x ".join(map(str, shape))
    nbytes = np.dtype(dtype).itemsize
    for n in shape:
        nbytes *= n
    if nbytes > MAX_BYTES:
        raise ValueError(
            f"{cause} makes {what} {dims} ({size_text(nbytes)}), more than this machine's memory"
        )
