"""Pooling layers: max and average, forward and backward (numpy only).

Pooling slides an f x f window with the given stride over each channel
separately, with no padding: ``n_H = (n_H_prev - f) // stride + 1``.

Max-pool ties: when several positions of a window hold its maximum (flat
regions and saturated highlights in photos do this all the time), the
gradient of that window goes to exactly one of them, the first in row-major
window order, which is PyTorch's rule. The gradient is therefore conserved:
``dA_prev.sum() == dA.sum()``. A window holding NaN has NaN as its maximum
and sends its gradient to the first NaN.
"""

from __future__ import annotations

import numpy as np

from ._validate import as_int, as_real_array, check_ndim, compute_dtype, hparameter, output_size

POOL_MODES = ("max", "average")
_MODE_ALIASES = {"max": "max", "average": "average", "avg": "average"}


def _pool_mode(mode) -> str:
    try:
        return _MODE_ALIASES[mode]
    except (KeyError, TypeError):
        raise ValueError(
            f"mode must be 'max' or 'average' (or 'avg'), got {mode!r}"
        ) from None


def _pool_shapes(A_prev, hparameters):
    A = as_real_array(A_prev, "A_prev")
    check_ndim(A, "A_prev", 4, "(m, n_H_prev, n_W_prev, n_C_prev)")
    f = hparameter(hparameters, "f", minimum=1)
    stride = hparameter(hparameters, "stride", minimum=1)
    m, n_H_prev, n_W_prev, n_C = A.shape
    n_H = output_size(n_H_prev, f, stride, 'hparameters["f"] =')
    n_W = output_size(n_W_prev, f, stride, 'hparameters["f"] =')
    return A, f, stride, (m, n_H, n_W, n_C)


def _strided(X, axis, start, stride, count):
    """Slice `count` positions of axis 1 or 2 from `start`, `stride` apart."""
    index = [slice(None)] * 4
    index[axis] = slice(start, start + stride * (count - 1) + 1, stride)
    return X[tuple(index)]


def _window_reduce(X, axis, f, stride, count, reduce):
    """Reduce every window of f along `axis` with the binary ufunc `reduce`."""
    out = _strided(X, axis, 0, stride, count).copy()
    for d in range(1, f):
        reduce(out, _strided(X, axis, d, stride, count), out=out)
    return out


def pool_forward(A_prev, hparameters, mode="max"):
    """Forward pass of a pooling layer.

    Parameters
    ----------
    A_prev : (m, n_H_prev, n_W_prev, n_C_prev) ndarray
        Batch of inputs.
    hparameters : dict
        ``{"f": window size, "stride": step}``.
    mode : {"max", "average"}
        Pooling mode; ``"avg"`` is accepted for ``"average"``.

    Returns
    -------
    A : (m, n_H, n_W, n_C_prev) ndarray
        ``n_H = (n_H_prev - f) // stride + 1``, likewise n_W. float32 for
        float32 input, float64 for float64 or integer input.
    cache : tuple
        ``(A_prev, hparameters)``, the objects passed in, for pool_backward.

    Examples
    --------
    >>> import numpy as np
    >>> A = np.arange(16.0).reshape(1, 4, 4, 1)
    >>> pool_forward(A, {"f": 2, "stride": 2})[0][0, :, :, 0]
    array([[ 5.,  7.],
           [13., 15.]])
    """
    mode = _pool_mode(mode)
    A, f, stride, (m, n_H, n_W, n_C) = _pool_shapes(A_prev, hparameters)
    dtype = compute_dtype(A)
    X = A.astype(dtype, copy=False)
    reduce = np.maximum if mode == "max" else np.add
    # Separable: reduce the window along the width, then along the height.
    rows = _window_reduce(X, 2, f, stride, n_W, reduce)
    out = _window_reduce(rows, 1, f, stride, n_H, reduce)
    if mode == "average":
        out /= dtype.type(f * f)
    return out, (A_prev, hparameters)


def _unpack_pool_cache(cache):
    if not isinstance(cache, tuple) or len(cache) != 2:
        raise TypeError(
            "cache must be the tuple (A_prev, hparameters) returned by pool_forward"
        )
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
        (average mode). Positions no window covers get zero.
    """
    mode = _pool_mode(mode)
    A_prev, hparameters = _unpack_pool_cache(cache)
    A, f, stride, out_shape = _pool_shapes(A_prev, hparameters)
    dA = as_real_array(dA, "dA")
    if dA.shape != out_shape:
        raise ValueError(
            f"dA must have the forward output's shape {out_shape}, got {dA.shape}"
        )
    dtype = compute_dtype(A, dA)
    dA = dA.astype(dtype, copy=False)
    dA_prev = np.zeros(A.shape, dtype)
    _, n_H, n_W, _ = out_shape

    def region(X, di, dj):
        return _strided(_strided(X, 1, di, stride, n_H), 2, dj, stride, n_W)

    if mode == "average":
        share = dA / dtype.type(f * f)
        for di in range(f):
            for dj in range(f):
                region(dA_prev, di, dj)[...] += share
        return dA_prev

    X = A.astype(dtype, copy=False)
    maxima = _window_reduce(
        _window_reduce(X, 2, f, stride, n_W, np.maximum), 1, f, stride, n_H, np.maximum
    )
    has_nan = bool(np.isnan(maxima).any())
    unclaimed = np.ones(out_shape, bool)
    hit = np.empty(out_shape, bool)
    for di in range(f):
        for dj in range(f):
            window = region(X, di, dj)
            np.equal(window, maxima, out=hit)
            if has_nan:
                hit |= np.isnan(window) & np.isnan(maxima)
            hit &= unclaimed
            unclaimed &= ~hit
            region(dA_prev, di, dj)[...] += np.where(hit, dA, dtype.type(0))
    return dA_prev


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
    average = dtype.type(dz_arr.reshape(())) / dtype.type(n_H * n_W)
    return np.full((n_H, n_W), average, dtype=dtype)
