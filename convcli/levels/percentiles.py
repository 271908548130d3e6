"""A high percentile of |values| away from the border, exact: the top of the ``robust``
mapping's scale (:func:`robust_top`), and its pieces that :mod:`convcli.levels.stats`
shares when a map comes in strips. numpy, and the native engine's selection of ranks
(:func:`ranked`).
"""

from __future__ import annotations

import numpy as np

from ..layers._engine import native

ROBUST_PERCENTILE = 99.5
"""The percentile of |x| that ``robust`` maps to white (:func:`robust_top`)."""


def robust_top(
    values: np.ndarray, *, margin: int = 0, percentile: float = ROBUST_PERCENTILE
) -> float:
    """A high percentile of |values| counted away from the border: the top of a robust scale.

    Parameters
    ----------
    values : (H, W) or (H, W, C) ndarray
        Results; non-finite values are left out.
    margin : int
        Rows and columns left out on every side (where padding shapes the
        results), unless that leaves nothing.
    percentile : float
        Of |values|; a few extreme values (a bright frame, specular
        highlights) then no longer decide the scale.

    Returns
    -------
    float
        The percentile, or the largest |value| where that is 0 (sparse maps);
        1.0 where there are no finite values or all are 0.

    Examples
    --------
    >>> x = np.zeros((20, 20)); x[10, :] = 4.0; x[0, :] = 100.0
    >>> robust_top(x, margin=2)
    4.0
    """
    x = _inside(np.asarray(values), margin)
    if x.size and np.isfinite(x.min()) and np.isfinite(x.max()):  # no mask to build
        a = np.abs(x)
    else:
        a = np.abs(x[np.isfinite(x)])
    return _top_of_magnitudes(a, percentile)


def _inside(x: np.ndarray, margin: int) -> np.ndarray:
    """`x` without `margin` rows and columns on every side, unless that leaves nothing."""
    kept = _margin_left_out(x.shape, margin)
    return x[kept:-kept, kept:-kept] if kept else x


def _margin_left_out(shape: tuple[int, ...], margin: int) -> int:
    """The rows and columns :func:`_inside` leaves out on every side of a map of `shape`."""
    if margin > 0 and len(shape) >= 2 and min(shape[:2]) > 2 * margin:
        return margin
    return 0


def _top_of_magnitudes(a: np.ndarray, percentile: float) -> float:
    """:func:`robust_top` of finite magnitudes `a` (any shape, left unchanged)."""
    if not a.size:
        return 1.0
    return _top_or_largest(_high_percentile(a, percentile), a.max)


def _top_or_largest(top: float, largest) -> float:
    """The robust top from percentile `top`: the largest magnitude (``largest()``) where
    `top` is 0, and 1.0 where that is 0 too."""
    return top if top > 0 else float(largest()) or 1.0


def _high_percentile(a: np.ndarray, percentile: float) -> float:
    """``np.percentile(a, percentile)`` of an array of finite values, which is left unchanged.

    The same number, from the largest values only when the percentile is high:
    a strided sample gives a threshold below the two values numpy interpolates
    between, and only the values above it are partitioned (4 ms instead of
    42 ms for the 99.5th percentile of a 2400x1800 edge map). `a` may be a
    view with any strides (the inside of a map): nothing is copied whole.
    """
    n = a.size
    below, _ = _linear_rank(n, percentile)
    wanted = n - below  # the values from the lower of the two up
    if n < 1 << 16 or 16 * wanted > n or below >= n - 1:
        return _whole_percentile(a, percentile)
    sample = a[::64] if a.ndim == 1 else a[::8, ::8]
    rank = max(0, sample.size - 1 - 4 * (wanted * sample.size // n + 1))
    top = a[a >= ranked(sample, rank, rank)[0]]
    if top.size < wanted:  # an unlucky sample: the whole array then
        return _whole_percentile(a, percentile)
    return _percentile_of_largest(top, n, percentile)


def _whole_percentile(a: np.ndarray, percentile: float) -> float:
    """``np.percentile(a, percentile)`` from all of `a`, left unchanged (:func:`ranked`).

    The same number for float arrays, without ``np.percentile``'s first-call
    import of numpy.ma (8 ms of a small file's run); other types go to numpy.
    """
    if a.dtype.kind != "f":
        return float(np.percentile(a, percentile))
    return _percentile_of_largest(a.ravel(order="K"), a.size, percentile, in_place=False)


def _linear_rank(n: int, percentile: float) -> tuple[int, float]:
    """Where ``np.percentile`` of `n` values finds `percentile` ("linear" method).

    Returns ``(below, weight)``: it interpolates with `weight` between the
    values of ranks `below` and ``below + 1`` (the last rank where that is past it).
    """
    position = (n - 1) * (percentile / 100)
    below = int(position)
    return below, position - below


def _percentile_of_largest(
    top: np.ndarray, n: int, percentile: float, *, in_place: bool = True
) -> float:
    """``np.percentile`` of `n` values, from a 1-D array `top` of the largest of them.

    `top` holds at least the ``n - below`` largest (:func:`_linear_rank`); numpy's
    partition reorders it in place, unless not `in_place` (:func:`ranked`).
    """
    below, weight = _linear_rank(n, percentile)
    first = top.size - (n - below)
    upper = min(first + 1, top.size - 1)
    return _interpolate(*ranked(top, first, upper, in_place=in_place), weight)


def ranked(values: np.ndarray, first: int, second: int, *, in_place: bool = False) -> tuple:
    """The values of ranks `first` <= `second` (0: the smallest) of all of `values`, as
    ``np.partition`` puts them there (NaN last).

    Selected by the native engine for float32 (:func:`~convcli.layers._engine.native.select_ranks`:
    a fifth of the partition's time), `values` left as they are; else from numpy's
    partition of a copy, or of `values` themselves (1-D) where `in_place`.
    """
    if values.dtype == np.float32 and native.active():
        return native.select_ranks(values, first, second)
    if in_place:
        values.partition([first, second])
        return values[first], values[second]
    ordered = np.partition(values, [first, second], axis=None)
    return ordered[first], ordered[second]


def _interpolate(lower, upper, weight: float) -> float:
    """numpy's linear interpolation between two neighbouring values, in its arithmetic.

    As ``np.percentile`` does (its ``_lerp``), in the values' type with a
    Python float weight: ``lower + (upper - lower) * weight``, or from the
    upper value when the weight is at least 0.5. Written out, it costs
    microseconds where ``np.quantile`` on the pair took 0.1 ms (and 7 ms to
    import numpy.ma on its first call in a process).
    """
    diff = upper - lower
    if weight >= 0.5:
        return float(upper - diff * (1 - weight))
    return float(lower + diff * weight)
