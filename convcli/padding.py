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

from ._validate import as_int, as_real_array, check_ndim

PAD_MODES = ("constant", "edge", "reflect", "symmetric", "wrap")

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
        Padded batch, same dtype as `X`.

    Examples
    --------
    >>> import numpy as np
    >>> zero_pad(np.ones((1, 2, 2, 1)), 1)[0, :, :, 0]
    array([[0., 0., 0., 0.],
           [0., 1., 1., 0.],
           [0., 1., 1., 0.],
           [0., 0., 0., 0.]])
    """
    return pad_images(X, as_int(pad, "pad", minimum=0), mode="constant", value=0)


def _pad_widths(width) -> tuple[int, int, int, int]:
    """Normalise `width` to (top, bottom, left, right)."""
    if isinstance(width, (tuple, list, np.ndarray)):
        flat = list(np.asarray(width, dtype=object).ravel())
        if len(flat) != 4:
            raise ValueError(
                "width must be an int or 4 values (top, bottom, left, right), "
                f"got {width!r}"
            )
        names = ("top", "bottom", "left", "right")
        return tuple(
            as_int(v, f"width ({n})", minimum=0) for v, n in zip(flat, names, strict=True)
        )
    w = as_int(width, "pad", minimum=0)
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
        Padded batch with the dtype of `X`; `X` is not modified.

    Examples
    --------
    >>> import numpy as np
    >>> row = np.arange(1, 5).reshape(1, 1, 4, 1)
    >>> pad_images(row, (0, 0, 2, 2), mode="reflect")[0, 0, :, 0]
    array([3, 2, 1, 2, 3, 4, 3, 2])
    """
    X = as_real_array(X, "X")
    check_ndim(X, "X", 4, _LAYOUT)
    top, bottom, left, right = _pad_widths(width)
    mode = pad_mode(mode)
    pad_width = ((0, 0), (top, bottom), (left, right), (0, 0))
    if mode == "constant":
        value = _check_fill_value(value, X.dtype)
        return np.pad(X, pad_width, mode="constant", constant_values=value)
    if X.size == 0:
        raise ValueError(f"mode {mode!r} cannot pad an empty image, got shape {X.shape}")
    return np.pad(X, pad_width, mode=mode)


def _check_fill_value(value, dtype: np.dtype):
    """The constant fill value, checked to fit the dtype of the array."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"value must be a number, got {value!r}")
    if not np.isfinite(value) and dtype.kind != "f":
        raise ValueError(f"value {value!r} cannot be stored in a {dtype} array")
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not float(value).is_integer() or not info.min <= value <= info.max:
            raise ValueError(
                f"value {value!r} does not fit the input dtype {dtype} "
                f"({info.min}..{info.max})"
            )
    return value
