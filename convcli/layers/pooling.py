"""Pooling layers: max and average, forward and backward, and the pool modes (numpy only).

Pooling slides an f x f window with the given stride over each channel
separately, by default with no padding: ``n_H = (n_H_prev - f) // stride + 1``
(optional padding and ceil mode as in PyTorch: see pool_forward). The
functions here validate their arguments and return the tutorial's outputs
and caches; the tiled work is done by ``convcli.layers._engine.pool``.

Max-pool ties: when several positions of a window hold its maximum (flat
regions and saturated highlights in photos do this all the time), the
gradient of that window goes to exactly one of them, the first in row-major
window order, which is PyTorch's rule. The gradient is therefore conserved:
``dA_prev.sum() == dA.sum()``. A window holding NaN has NaN as its maximum
and sends its gradient to the first NaN (PyTorch's goes to the last).
"""

from __future__ import annotations

import numpy as np

from ..choices import POOL_MODE_ALIASES, POOL_MODES
from ._engine.pool import pool_backward_tiles, pool_forward_tiles, pool_max_claims_tiles
from ._engine.tiles import covered
from .validation import (
    as_int,
    as_real_array,
    check_ndim,
    check_result_size,
    compute_dtype,
    hparameter,
    output_size,
)


def pool_mode(mode) -> str:
    """The pooling mode named by `mode`: one of POOL_MODES, or an alias of one.

    Parameters
    ----------
    mode : str
        ``"max"``, ``"average"``, or a key of POOL_MODE_ALIASES (``"avg"``).
        Names are case-sensitive.

    Returns
    -------
    mode : str
        The name in POOL_MODES.

    Raises
    ------
    ValueError
        If `mode` names no pooling mode.

    Examples
    --------
    >>> pool_mode("avg")
    'average'
    """
    if isinstance(mode, str):
        mode = POOL_MODE_ALIASES.get(mode, mode)
        if mode in POOL_MODES:
            return mode
    aliases = ", ".join(f"{alias!r} for {name!r}" for alias, name in POOL_MODE_ALIASES.items())
    modes = " or ".join(map(repr, POOL_MODES))
    raise ValueError(f"mode must be {modes} (or {aliases}), got {mode!r}")


class _Geometry:
    """Window size, stride, pad, and the padded extent the windows read (ceil mode included)."""

    def __init__(self, A, hparameters):
        self.f = f = hparameter(hparameters, "f", minimum=1)
        self.stride = stride = hparameter(hparameters, "stride", minimum=1)
        self.pad = pad = hparameter(hparameters, "pad", minimum=0) if "pad" in hparameters else 0
        ceil_mode = hparameters.get("ceil_mode", False)
        if not isinstance(ceil_mode, (bool, np.bool_)):
            raise TypeError(f'hparameters["ceil_mode"] must be True or False, got {ceil_mode!r}')
        if pad > f // 2:
            raise ValueError(
                f'hparameters["pad"] = {pad} is more than half the window '
                f'(hparameters["f"] = {f}): at most {f // 2}'
            )
        m, H, W, n_C = A.shape
        self.n_H = _pooled_size(H, f, stride, pad, ceil_mode)
        self.n_W = _pooled_size(W, f, stride, pad, ceil_mode)
        self.out_shape = (m, self.n_H, self.n_W, n_C)
        self.padded = pad > 0 or bool(ceil_mode)

    def padded_shape(self, shape):
        """The shape of the padded input, as far as the windows read."""
        m, _, _, n_C = shape
        f, s = self.f, self.stride
        return (m, covered(self.n_H, f, s), covered(self.n_W, f, s), n_C)

    def pad_input(self, X, fill):
        """X with `pad` values `fill` before and as many after as the last windows read."""
        out = np.full(self.padded_shape(X.shape), fill, X.dtype)
        p, (h, w) = self.pad, self._read(X.shape)
        out[:, p : p + h, p : p + w] = X[:, :h, :w]
        return out

    def _read(self, shape):
        """Rows and columns of an input of `shape` that some window reads (from the start)."""
        _, rows, cols, _ = self.padded_shape(shape)
        return min(shape[1], rows - self.pad), min(shape[2], cols - self.pad)

    def crop(self, dX, shape):
        """The gradient of the padded input back on the input's `shape` (zero where unread)."""
        p, (h, w) = self.pad, self._read(shape)
        dA_prev = np.zeros(shape, dX.dtype)
        dA_prev[:, :h, :w] = dX[:, p : p + h, p : p + w]
        return dA_prev

    def counts(self, H, W, dtype):
        """(n_H, n_W, 1) in `dtype`: the real pixels (not padding) in each window."""
        rows = _real_count(self.n_H, H, self.f, self.stride, self.pad)
        cols = _real_count(self.n_W, W, self.f, self.stride, self.pad)
        return (rows[:, None, None] * cols[None, :, None]).astype(dtype)


def _pooled_size(size, f, stride, pad, ceil_mode):
    """PyTorch's pooled size; in ceil mode the last window starts inside the input or left pad.

    An input with no rows (or columns) is refused whatever the pad, as PyTorch
    refuses it: padding is never part of a window, so a window would hold no pixel.
    """
    n = output_size(size + 2 * pad if size else 0, f, stride, 'hparameters["f"] =')
    if ceil_mode and (size + 2 * pad - f) % stride:
        n += 1
        if (n - 1) * stride >= size + pad:
            n -= 1
    return n


def _real_count(n_out, size, f, stride, pad):
    """Along one axis: the input values, padding excluded, that each of n_out windows covers."""
    start = np.arange(n_out) * stride - pad
    return np.minimum(start + f, size) - np.maximum(start, 0)


class _PoolCache(tuple):
    """The tutorial's cache ``(A_prev, hparameters)``, which max pooling also uses to keep
    its claims: ``claimed`` (see pool_max_claims_tiles), found for window f and stride f.

    It is a tuple, equal to and unpacked as the tutorial's; pool_backward uses
    the claims when the cache's window and stride are still the ones they were
    found for, and finds them again otherwise (or from a plain tuple).
    """

    def __new__(cls, A_prev, hparameters, claimed, f):
        cache = super().__new__(cls, (A_prev, hparameters))
        cache.claimed, cache.claimed_for = claimed, f
        return cache

    def __reduce__(self):
        # Pickled (or copied) as the plain tuple: the claims are found again.
        return tuple, (tuple(self),)


def _claims(cache, shape, geometry, mode):
    """The claims pool_forward kept in `cache`, if they still hold for this backward pass."""
    claimed = getattr(cache, "claimed", None)
    f = geometry.f
    if claimed is None or mode != "max" or geometry.padded or not geometry.stride == f:
        return None
    if cache.claimed_for != f or claimed.shape != geometry.padded_shape(shape):
        return None
    return claimed


def _pool_shapes(A_prev, hparameters):
    A = as_real_array(A_prev, "A_prev")
    check_ndim(A, "A_prev", 4, "(m, n_H_prev, n_W_prev, n_C_prev)")
    return A, _Geometry(A, hparameters)


def pool_forward(A_prev, hparameters, mode="max"):
    """Forward pass of a pooling layer.

    Parameters
    ----------
    A_prev : (m, n_H_prev, n_W_prev, n_C_prev) ndarray
        Batch of inputs.
    hparameters : dict
        ``{"f": window size, "stride": step}``, and optionally ``"pad"``
        (int, 0 to f // 2, default 0) and ``"ceil_mode"`` (bool, default
        False), as PyTorch's max_pool2d and avg_pool2d define them. Padding
        is never part of a window: max mode takes the maximum of the real
        pixels, and average mode their mean (PyTorch's
        ``count_include_pad=False``).
    mode : {"max", "average"}
        Pooling mode; ``"avg"`` is accepted for ``"average"``.

    Returns
    -------
    A : (m, n_H, n_W, n_C_prev) ndarray
        ``n_H = (n_H_prev + 2 * pad - f) / stride + 1``, rounded down, or up
        in ceil mode, where a last window that would start in the right
        padding is dropped; likewise n_W. float32 for float32 input, float64
        for float64 or integer input.
    cache : tuple
        ``(A_prev, hparameters)``, the objects passed in, for pool_backward.
        In max mode, when the windows tile the input (f == stride > 1), the
        tuple also carries where each window's first maximum is, found here,
        so that pool_backward only scatters dA (as PyTorch's backward pass
        does). Changing A_prev in place before pool_backward makes them
        stale: pass the plain tuple ``(A_prev, hparameters)`` then.

    Raises
    ------
    ValueError
        If the window is larger than the padded input (so an input with no
        rows or columns is refused, naming ``hparameters["f"]``), or the pad
        is more than half the window. An empty batch or zero channels give
        an empty result; any stride is fine.

    Examples
    --------
    >>> import numpy as np
    >>> A = np.arange(16.0).reshape(1, 4, 4, 1)
    >>> pool_forward(A, {"f": 2, "stride": 2})[0][0, :, :, 0]
    array([[ 5.,  7.],
           [13., 15.]])
    """
    mode = pool_mode(mode)
    A, geometry = _pool_shapes(A_prev, hparameters)
    with np.errstate(invalid="ignore", over="ignore"):  # IEEE results for NaN and inf
        out, claimed = _pooled(A, geometry, mode)
    if claimed is None:
        return out, (A_prev, hparameters)
    return out, _PoolCache(A_prev, hparameters, claimed, geometry.f)


def _pooled(A, geometry, mode):
    """pool_forward's result, and max mode's claims where the windows tile the input (else None).

    The engine is chosen by the geometry: windows over the input as it is,
    or over a padded copy (-inf for max mode, 0 for the sums of average mode,
    divided by each window's count of real pixels).
    """
    X = A.astype(compute_dtype(A), copy=False)
    f, stride = geometry.f, geometry.stride
    if not geometry.padded:
        if mode == "max" and stride == f > 1 and min(geometry.out_shape):
            # The windows tile the input: finding each window's first maximum
            # now makes the backward pass a scatter, as PyTorch's is.
            return pool_max_claims_tiles(X, f)
        return pool_forward_tiles(X, f, stride, mode), None
    if mode == "max":  # -inf padding never beats a pixel, -inf ones included
        return pool_forward_tiles(geometry.pad_input(X, -np.inf), f, stride, mode), None
    sums = pool_forward_tiles(geometry.pad_input(X, 0), f, stride, "sum")
    sums /= geometry.counts(*A.shape[1:3], sums.dtype)
    return sums, None


def _unpack_pool_cache(cache):
    if not isinstance(cache, tuple) or len(cache) != 2:
        raise TypeError("cache must be the tuple (A_prev, hparameters) returned by pool_forward")
    return cache


def pool_backward(dA, cache, mode="max"):
    """Backward pass of a pooling layer.

    Parameters
    ----------
    dA : (m, n_H, n_W, n_C) ndarray
        Gradient of the cost with respect to the output of pool_forward.
    cache : tuple
        ``(A_prev, hparameters)`` as returned by pool_forward.
    mode : {"max", "average"}
        The mode the forward pass used (``"avg"`` accepted).

    Returns
    -------
    dA_prev : (m, n_H_prev, n_W_prev, n_C) ndarray
        Gradient with respect to A_prev. Each output position (h, w) sends
        ``dA[i, h, w, c]`` back to its own window: all of it to the window's
        first maximum (max mode), or an equal share to every position
        (average mode: to the window's real pixels, padding excluded).
        Positions no window covers get zero. Always A_prev's shape. A max
        window whose real pixels are all -inf sends its gradient to the first
        of them, never to the padding (PyTorch's rule).

    Examples
    --------
    >>> import numpy as np
    >>> A = np.array([[1.0, 3.0], [3.0, 2.0]]).reshape(1, 2, 2, 1)
    >>> _, cache = pool_forward(A, {"f": 2, "stride": 2})
    >>> pool_backward(np.ones((1, 1, 1, 1)), cache)[0, :, :, 0]  # the first of the tied 3s
    array([[0., 1.],
           [0., 0.]])
    """
    mode = pool_mode(mode)
    A_prev, hparameters = _unpack_pool_cache(cache)
    A, geometry = _pool_shapes(A_prev, hparameters)
    out_shape = geometry.out_shape
    dA = as_real_array(dA, "dA")
    if dA.shape != out_shape:
        raise ValueError(f"dA must have the forward output's shape {out_shape}, got {dA.shape}")
    dA = dA.astype(compute_dtype(A, dA), copy=False)
    f, stride = geometry.f, geometry.stride
    with np.errstate(invalid="ignore", over="ignore"):  # IEEE results for NaN and inf
        if not geometry.padded:
            claimed = _claims(cache, A.shape, geometry, mode)
            return pool_backward_tiles(dA, A, f, stride, mode, claimed)
        if mode == "max":
            X = geometry.pad_input(A.astype(dA.dtype, copy=False), -np.inf)
            dA_prev = geometry.crop(pool_backward_tiles(dA, X, f, stride, mode), A.shape)
            if geometry.pad and np.isneginf(A).any():
                _minus_inf_windows(dA_prev, dA, X, geometry)
            return dA_prev
        # The sum mode reads no input values, only their shape.
        X = np.broadcast_to(np.zeros((), dA.dtype), geometry.padded_shape(A.shape))
        shares = dA / geometry.counts(*A.shape[1:3], dA.dtype)
        dX = pool_backward_tiles(shares, X, f, stride, "sum")
        return geometry.crop(dX, A.shape)


def _minus_inf_windows(dA_prev, dA, X, geometry):
    """Add to `dA_prev` the gradient of each max window that starts in the padding and holds
    only -inf: the -inf padding X holds ties with its pixels and comes first, so the
    window's first maximum was padding; its first pixel gets the gradient instead.
    """
    f, s, p = geometry.f, geometry.stride, geometry.pad
    rows, cols = np.arange(geometry.n_H) * s - p, np.arange(geometry.n_W) * s - p
    in_padding = (rows[:, None] < 0) | (cols[None, :] < 0)
    lost = (pool_forward_tiles(X, f, s, "max") == -np.inf) & in_padding[None, :, :, None]
    i, h, w, c = np.nonzero(lost)
    np.add.at(dA_prev, (i, np.maximum(rows[h], 0), np.maximum(cols[w], 0), c), dA[lost])


def create_mask_from_window(x):
    """Mark the maximum of a window: the position max-pool backward uses.

    Parameters
    ----------
    x : (f, f) ndarray
        One pooling window.

    Returns
    -------
    mask : (f, f) ndarray of bool
        True at exactly one position: the first maximum of `x` in row-major
        order (the first NaN if `x` holds any). With ties this differs from
        the tutorial's ``x == np.max(x)``, which marks every tied position and
        so multiplies the gradient.

    Examples
    --------
    >>> import numpy as np
    >>> create_mask_from_window(np.array([[1, 3], [4, 4]]))
    array([[False, False],
           [ True, False]])
    """
    x = as_real_array(x, "x")
    if x.size == 0:
        raise ValueError(f"x must be a non-empty window, got shape {x.shape}")
    mask = np.zeros(x.shape, dtype=bool)
    mask.flat[np.argmax(x)] = True
    return mask


def distribute_value(dz, shape):
    """Spread `dz` evenly over a window: the average-pool backward share.

    Parameters
    ----------
    dz : float
        Gradient of one output value.
    shape : tuple of 2 ints
        ``(n_H, n_W)`` of the window.

    Returns
    -------
    a : (n_H, n_W) ndarray
        Every entry is ``dz / (n_H * n_W)``; the entries sum to `dz`.

    Examples
    --------
    >>> distribute_value(2, (2, 2))
    array([[0.5, 0.5],
           [0.5, 0.5]])
    """
    dz_arr = as_real_array(dz, "dz")
    if dz_arr.size != 1:
        raise ValueError(f"dz must be a single value, got shape {dz_arr.shape}")
    if not isinstance(shape, (tuple, list)) or len(shape) != 2:
        raise ValueError(f"shape must be a pair (n_H, n_W), got {shape!r}")
    n_H = as_int(shape[0], "shape[0]", minimum=1)
    n_W = as_int(shape[1], "shape[1]", minimum=1)
    dtype = compute_dtype(dz_arr)
    check_result_size((n_H, n_W), dtype, f"shape = {shape!r}", "the window")
    average = dtype.type(dz_arr.reshape(())) / dtype.type(n_H * n_W)
    return np.full((n_H, n_W), average, dtype=dtype)
