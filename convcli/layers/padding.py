"""Padding of image batches (numpy only).

Border modes: ``constant``, ``edge``, ``reflect``, ``symmetric`` and ``wrap``, numpy's
``np.pad`` names (their names in scipy, OpenCV, PyTorch and ImageMagick are tabled once,
in :data:`convcli.app.borders.BORDERS`; ``convcli explain pad --mode M`` prints them).
On the row ``a b c d``, padded by 2: ``constant`` gives ``0 0 | a b c d | 0 0``,
``edge`` ``a a | a b c d | d d``, ``reflect`` ``c b | a b c d | c b`` (the edge
value is not repeated), ``symmetric`` ``b a | a b c d | d c`` (it is), and
``wrap`` ``c d | a b c d | a b``.
"""

from __future__ import annotations

from functools import cache
from typing import NamedTuple

import numpy as np

from ..choices import PAD_MODES, keyed_by
from .validation import as_int, as_real_array, check_ndim, check_result_size

_LAYOUT = "(m, n_H, n_W, n_C)"

NP_PAD_ARGUMENTS = keyed_by(
    PAD_MODES,
    {
        "constant": {"mode": "constant"},
        "edge": {"mode": "edge"},
        "reflect": {"mode": "reflect"},
        "symmetric": {"mode": "symmetric"},
        "wrap": {"mode": "wrap"},
    },
    what="the border modes' np.pad arguments",
)
"""``np.pad``'s arguments for each border mode: the one definition of what a border holds.
:func:`border_terms` derives from it which pixels each border value reads, for padding, for
the gradient that goes back through a border and for the rows a strip reads beyond the image."""


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


def _pad(X, widths, mode, value, cause, dtype=None):
    """`X` padded by `widths` into a new array of `dtype` (`X`'s by default).

    The images are written once into their place, and :func:`fill_border`
    fills the border from them. `cause` names the argument in errors.
    """
    X = as_real_array(X, "X")
    check_ndim(X, "X", 4, _LAYOUT)
    top, bottom, left, right = widths
    m, n_H, n_W, n_C = X.shape
    dtype = X.dtype if dtype is None else np.dtype(dtype)
    shape = (m, n_H + top + bottom, n_W + left + right, n_C)
    check_result_size(shape, dtype, cause, "the padded input")
    if mode == "constant":
        _check_fill_value(value, dtype)
    elif X.size == 0:
        raise ValueError(f"mode {mode!r} cannot pad an empty X, got shape {X.shape}")
    X_pad = np.empty(shape, dtype)
    X_pad[:, top : top + n_H, left : left + n_W] = X
    return fill_border(X_pad, widths, mode=mode, value=value)


def pad_images_as(X, width, dtype, *, mode="constant", value=0) -> np.ndarray:
    """``pad_images(X.astype(dtype), width, mode=mode, value=value)`` without the unpadded copy.

    `X`'s values (8-bit integers, say) are written once, straight into the
    padded array of `dtype`: value for value the same result as converting
    first, with one array the size of the result instead of two.

    Examples
    --------
    >>> row = np.arange(1, 5, dtype=np.uint8).reshape(1, 1, 4, 1)
    >>> pad_images_as(row, (0, 0, 1, 1), np.float32, mode="reflect")[0, 0, :, 0]
    array([2., 1., 2., 3., 4., 3.], dtype=float32)
    """
    return _pad(X, _pad_widths(width), pad_mode(mode), value, f"width = {width!r}", dtype)


def fill_border(X_pad: np.ndarray, width, *, mode="constant", value=0) -> np.ndarray:
    """Fill the border of a padded batch in place from its inside, as :func:`pad_images` fills it.

    For a caller that writes the inside itself (a picture's channels summed
    straight into it): ``X_pad[:, top:-bottom, left:-right]`` holds the images,
    and afterwards `X_pad` equals ``pad_images`` of them, value for value.

    Parameters
    ----------
    X_pad : (m, top + n_H + bottom, left + n_W + right, n_C) ndarray
        Written in place outside the inside, which is read.
    width, mode, value
        As for :func:`pad_images`.

    Returns
    -------
    X_pad

    Examples
    --------
    >>> X_pad = np.zeros((1, 1, 8, 1), int)
    >>> X_pad[0, 0, 2:6, 0] = [1, 2, 3, 4]
    >>> fill_border(X_pad, (0, 0, 2, 2), mode="reflect")[0, 0, :, 0]
    array([3, 2, 1, 2, 3, 4, 3, 2])
    """
    top, bottom, left, right = _pad_widths(width)
    mode = pad_mode(mode)
    check_ndim(X_pad, "X_pad", 4, _LAYOUT)
    n_H, n_W = X_pad.shape[1] - top - bottom, X_pad.shape[2] - left - right
    if min(n_H, n_W) < 0 or (mode != "constant" and min(n_H, n_W) == 0):
        raise ValueError(f"X_pad of shape {X_pad.shape} has no inside for width = {width!r}")
    if mode == "constant":
        value = _check_fill_value(value, X_pad.dtype)
    # The rows of the inside columns first, then the columns of every row.
    _fill_axis(X_pad, border_terms(n_H, top, bottom, mode), 1, top, slice(left, left + n_W), value)
    _fill_axis(X_pad, border_terms(n_W, left, right, mode), 2, left, slice(None), value)
    return X_pad


def _fill_axis(X_pad, terms: BorderTerms, axis: int, before: int, rows, value) -> None:
    """Fill the border positions of `axis` (`before` of them first) as `terms` say, on the
    rows `rows` of axis 1 (for the columns: every row)."""
    n = len(terms.sources)
    border = np.r_[0:before, before + terms.inside : n]
    if border.size == 0:
        return

    def at(positions):
        where = [slice(None), rows, slice(None)]
        where[axis - 1] = positions
        return (slice(None), *where)

    sources, weights = terms.sources[border], terms.weights[border]
    inside = X_pad[at(slice(before, before + terms.inside))]
    X_pad[at(border)] = sum_of_terms(inside, sources, weights, axis=axis)
    empty = sources.max(axis=1) < 0
    if np.any(empty):
        X_pad[at(border[empty])] = value


def sum_of_terms(values: np.ndarray, sources, weights, *, axis: int) -> np.ndarray:
    """Each position's ``sum over k of weights[p, k] * values[sources[p, k]]`` along `axis`:
    a copy where the position reads one value with weight 1, as it is.

    `sources` and `weights` are (P, K), a source of -1 unused (:class:`BorderTerms`); a
    position with none holds ``values[0]`` (a copy) or 0 (a sum): the caller fills it.
    """
    read = sources >= 0
    if not read.any():  # only fills (an empty row, say: nothing to read)
        shape = list(values.shape)
        shape[axis] = len(sources)
        return np.zeros(shape, values.dtype)
    if sources.shape[1] == 1 and np.all(weights[read] == 1):  # copies: gathered
        return values[_along(axis, np.where(read[:, 0], sources[:, 0], 0))]
    shape = [1] * values.ndim
    shape[axis] = len(sources)
    total = None
    for k in range(sources.shape[1]):
        weight = np.where(read[:, k], weights[:, k], 0).astype(values.dtype).reshape(shape)
        taken = values[_along(axis, np.where(read[:, k], sources[:, k], 0))]
        # a term that reads nothing adds nothing (not 0 times an infinity)
        term = np.where(read[:, k].reshape(shape), weight * taken, 0).astype(values.dtype)
        total = term if total is None else total + term
    return total


def _along(axis: int, index: np.ndarray) -> tuple:
    """The index of positions `index` along `axis` (a view is gathered in place: np.take
    copies a strided view whole first)."""
    return (slice(None),) * axis + (index,)


class BorderTerms(NamedTuple):
    """The values of a row of n padded by a border mode, each a weighted sum of its pixels.

    ``padded[p] = sum over k of weights[p, k] * row[sources[p, k]]``, for the
    ``before + n + after`` positions p; a term whose source is -1 is unused,
    and a position with none holds the constant fill.
    """

    sources: np.ndarray
    """(before + n + after, K) int64: the pixels each position reads; -1 where unused."""
    weights: np.ndarray
    """(before + n + after, K) float64: their weights; 0 where unused."""
    inside: int
    """n, the row's own pixels, from position ``before`` on."""

    def copies(self) -> np.ndarray | None:
        """Where every position copies one pixel or holds the fill: the pixel each copies
        (-1: the fill); else None (a computed border)."""
        used = self.sources >= 0
        if np.all(used.sum(axis=1) <= 1) and np.all(self.weights[used] == 1):
            return np.where(used.any(axis=1), self.sources.max(axis=1), -1)
        return None


def border_terms(n: int, before: int, after: int, mode: str) -> BorderTerms:
    """Each of the ``before + n + after`` positions of a row of `n` padded by `mode`, as a
    weighted sum of the row's pixels (:class:`BorderTerms`): :data:`NP_PAD_ARGUMENTS` of the
    identity, so that a border is whatever ``np.pad`` makes of it.

    Examples
    --------
    >>> border_terms(4, 2, 1, "reflect").sources[:, 0].tolist()
    [2, 1, 0, 1, 2, 3, 2]
    >>> terms = border_terms(3, 1, 0, "constant")
    >>> terms.sources.tolist(), terms.weights.tolist()
    ([[-1], [0], [1], [2]], [[0.0], [1.0], [1.0], [1.0]])
    """
    mode = pad_mode(mode)
    reach = max(before, after)
    # np.pad reads at most `reach` + 1 pixels at each end where it reflects once: the
    # border of a long row is that of its two ends side by side.
    ends = n > 2 * reach + 2
    index = np.r_[0 : reach + 1, n - reach - 1 : n] if ends else np.arange(n)
    padded = np.pad(np.eye(index.size), ((before, after), (0, 0)), **NP_PAD_ARGUMENTS[mode])
    border = np.r_[0:before, before + index.size : before + index.size + after]
    counts = np.count_nonzero(padded[border], axis=1)
    width = max(1, int(counts.max(initial=0)))
    sources = np.full((before + n + after, width), -1, np.int64)
    weights = np.zeros(sources.shape)
    sources[before : before + n, 0], weights[before : before + n, 0] = np.arange(n), 1.0
    for row, position in zip(border, np.r_[0:before, before + n : before + n + after], strict=True):
        read = np.flatnonzero(padded[row])
        sources[position, : read.size] = index[read]
        weights[position, : read.size] = padded[row, read]
    return BorderTerms(sources, weights, n)


def border_copies(n: int, before: int, after: int, mode: str) -> np.ndarray | None:
    """``border_terms(n, before, after, mode).copies()``, without the terms: the pixel each
    of the ``before + n + after`` positions copies (-1: the fill), None where `mode`'s border
    is computed. ``np.pad`` of the pixels' numbers (one more, so the fill 0 becomes -1):
    20 microseconds, where the terms of a 2400-pixel row took 0.2 ms.

    Examples
    --------
    >>> border_copies(4, 2, 1, "reflect").tolist()
    [2, 1, 0, 1, 2, 3, 2]
    >>> border_copies(3, 1, 1, "constant").tolist()
    [-1, 0, 1, 2, -1]
    """
    if not copies_pixels(mode):
        return None
    numbers = np.arange(1, n + 1, dtype=np.int64)
    return np.pad(numbers, (before, after), **NP_PAD_ARGUMENTS[mode]) - 1


def copies_pixels(mode: str) -> bool:
    """Whether `mode`'s border values are copies of pixels (or its fill), not computed from
    several: then padding commutes with any operation on each pixel's values.

    >>> copies_pixels("wrap")
    True
    """
    mode = pad_mode(mode)
    return _copies_pixels(mode, tuple(sorted(NP_PAD_ARGUMENTS[mode].items())))


@cache
def _copies_pixels(mode: str, arguments: tuple) -> bool:
    """:func:`copies_pixels` of a mode of :data:`PAD_MODES` whose ``np.pad`` `arguments` are
    these (sorted items): kept for the next call."""
    return border_terms(3, 2, 2, mode).copies() is not None


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
