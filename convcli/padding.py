"""Padding of image batches (numpy only).

Border modes and their names in other libraries:

=============  =================  ==================  ======================  ===================
convcli        numpy ``np.pad``   scipy.ndimage       OpenCV ``BORDER_*``     PyTorch ``F.pad``
=============  =================  ==================  ======================  ===================
``constant``   ``constant``       ``constant``        ``CONSTANT``            ``constant``
``edge``       ``edge``           ``nearest``         ``REPLICATE``           ``replicate``
``reflect``    ``reflect``        ``mirror``          ``REFLECT_101``         ``reflect``
``symmetric``  ``symmetric``      ``reflect``         ``REFLECT``             (none)
``wrap``       ``wrap``           ``grid-wrap``       ``WRAP``                ``circular``
=============  =================  ==================  ======================  ===================

On the row ``a b c d``, padded by 2: ``constant`` gives ``0 0 | a b c d | 0 0``,
``edge`` ``a a | a b c d | d d``, ``reflect`` ``c b | a b c d | c b`` (the edge
value is not repeated), ``symmetric`` ``b a | a b c d | d c`` (it is), and
``wrap`` ``c d | a b c d | a b``.
"""

from __future__ import annotations

import numpy as np

from ._validate import as_int, as_real_array, check_ndim, check_result_size
from .choices import PAD_MODES

_LAYOUT = "(m, n_H, n_W, n_C)"


def pad_mode(mode) -> str:
    """`mode` itself if it is one of :data:`PAD_MODES`, else a ValueError naming them.

    Examples
    --------
    >>> pad_mode("reflect")
    'reflect'
    """
    if isinstance(mode, str) and mode in PAD_MODES:
        return mode
    raise ValueError(f"mode must be one of {', '.join(PAD_MODES)}; got {mode!r}")


def zero_pad(X, pad):
    """Pad with zeros all images of the batch `X`, on height and width.

    Parameters
    ----------
    X : (m, n_H, n_W, n_C) ndarray
        Batch of m images.
    pad : int
        Amount of padding around each image, on both spatial axes.

    Returns
    -------
    X_pad : (m, n_H + 2 * pad, n_W + 2 * pad, n_C) ndarray
        Padded batch, same dtype as `X`. An empty `X` (an axis of length 0)
        is padded like any other: ``zero_pad(np.zeros((1, 0, 2, 1)), 1)``
        has shape (1, 2, 4, 1), all zeros.

    Raises
    ------
    ValueError
        If `pad` is negative, or makes the result too large to allocate
        (more than 2**31 - 1 rows or columns, or more than the machine's
        memory).

    Examples
    --------
    >>> import numpy as np
    >>> zero_pad(np.ones((1, 2, 2, 1)), 1)[0, :, :, 0]
    array([[0., 0., 0., 0.],
           [0., 1., 1., 0.],
           [0., 1., 1., 0.],
           [0., 0., 0., 0.]])
    """
    pad = as_int(pad, "pad", minimum=0)
    return _pad(X, (pad,) * 4, "constant", 0, f"pad = {pad}")


def _pad_widths(width) -> tuple[int, int, int, int]:
    """Normalise `width` to (top, bottom, left, right)."""
    if isinstance(width, (tuple, list, np.ndarray)):
        flat = list(np.asarray(width, dtype=object).ravel())
        if len(flat) != 4:
            raise ValueError(
                f"width must be an int or 4 values (top, bottom, left, right), got {width!r}"
            )
        names = ("top", "bottom", "left", "right")
        return tuple(as_int(v, f"width ({n})", minimum=0) for v, n in zip(flat, names, strict=True))
    w = as_int(width, "width", minimum=0)
    return (w, w, w, w)


def pad_images(X, width, *, mode="constant", value=0):
    """Pad the height and width of a batch of images.

    Parameters
    ----------
    X : (m, n_H, n_W, n_C) ndarray
        Batch of m images.
    width : int or sequence of 4 ints
        The same padding on every side, or ``(top, bottom, left, right)``
        (``((top, bottom), (left, right))`` also works).
    mode : {"constant", "edge", "reflect", "symmetric", "wrap"}
        How the border is filled; see the module docstring for the same
        borders under their numpy, scipy, OpenCV and PyTorch names.
    value : float
        Fill value for ``mode="constant"``.

    Returns
    -------
    X_pad : (m, n_H + top + bottom, n_W + left + right, n_C) ndarray
        Padded batch with the dtype of `X`; `X` is not modified. An empty
        `X` is padded with `value` by ``mode="constant"``; the other modes
        repeat values and refuse an empty `X` (ValueError).

    Raises
    ------
    ValueError
        If a width is negative or makes the result too large to allocate
        (more than 2**31 - 1 rows or columns, or more than the machine's
        memory), or if `value` does not fit the dtype of `X` (70000 in
        float16, 300 in uint8, 0.5 in an integer array, 2 in a bool array).

    Examples
    --------
    >>> import numpy as np
    >>> row = np.arange(1, 5).reshape(1, 1, 4, 1)
    >>> pad_images(row, (0, 0, 2, 2), mode="reflect")[0, 0, :, 0]
    array([3, 2, 1, 2, 3, 4, 3, 2])
    """
    return _pad(X, _pad_widths(width), pad_mode(mode), value, f"width = {width!r}")


def _pad(X, widths, mode, value, cause):
    X = as_real_array(X, "X")
    check_ndim(X, "X", 4, _LAYOUT)
    top, bottom, left, right = widths
    m, n_H, n_W, n_C = X.shape
    shape = (m, n_H + top + bottom, n_W + left + right, n_C)
    check_result_size(shape, X.dtype, cause, "the padded input")
    pad_width = ((0, 0), (top, bottom), (left, right), (0, 0))
    if mode == "constant":
        value = _check_fill_value(value, X.dtype)
        return np.pad(X, pad_width, mode="constant", constant_values=value)
    if X.size == 0:
        raise ValueError(f"mode {mode!r} cannot pad an empty X, got shape {X.shape}")
    return np.pad(X, pad_width, mode=mode)


def _check_fill_value(value, dtype: np.dtype):
    """The constant fill value, checked to fit the dtype of the array."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"value must be a real number, got {value!r}")
    try:
        real = float(value)
    except OverflowError:  # a Python int beyond float64
        real = float("inf") if value > 0 else float("-inf")
    if not np.isfinite(real) and dtype.kind != "f":
        raise ValueError(f"value {value!r} cannot be stored in a {dtype} array")
    if dtype.kind == "b" and real not in (0.0, 1.0):
        raise ValueError(f"value {value!r} does not fit the input dtype bool (0 or 1)")
    largest = float(np.finfo(dtype).max) if dtype.kind == "f" else None
    if largest is not None and np.isfinite(real) and abs(real) > largest:
        raise ValueError(
            f"value {value!r} does not fit the input dtype {dtype} (largest {largest:g})"
        )
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not real.is_integer() or not info.min <= value <= info.max:
            raise ValueError(
                f"value {value!r} does not fit the input dtype {dtype} ({info.min}..{info.max})"
            )
    return value
