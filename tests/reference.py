"""Plain nested-loop versions of the layers, used as oracles by the tests.

They follow the tutorial's loops, with its known mistakes corrected:

- the bias is added once per output value, not once per multiplied element;
- conv_backward unpads with ``dA_pad[pad:pad + n_H_prev]`` (``X[pad:-pad]`` is
  empty when pad is 0), and input rows or columns that no window covers get
  zero gradient;
- pool_backward reads ``dA[i, h, w, c]``, the gradient of the output position;
- a max-pool window with tied maxima sends its gradient to exactly one
  position, the first maximum in row-major window order (``np.argmax``).

Everything is computed in float64, one output value at a time.
"""

from __future__ import annotations

import numpy as np


def _as_f64(*arrays):
    return [np.asarray(a, dtype=np.float64) for a in arrays]


def pad_loop(X, top, bottom, left, right, mode="constant", value=0.0):
    """Pad the height and width of `X` by looking up every output pixel.

    Index rules for a source axis of length n and an out-of-range index j:
    ``edge`` clips j, ``wrap`` takes j mod n, ``symmetric`` folds j with
    period 2n (edge repeated), ``reflect`` with period 2(n - 1) (edge not
    repeated).
    """
    X = np.asarray(X)
    m, n_H, n_W, n_C = X.shape
    out = np.empty((m, n_H + top + bottom, n_W + left + right, n_C), dtype=X.dtype)

    def source(j, n):
        if 0 <= j < n:
            return j
        if mode == "constant":
            return None
        if mode == "edge":
            return min(max(j, 0), n - 1)
        if mode == "wrap":
            return j % n
        if mode == "symmetric":
            k = j % (2 * n)
            return k if k < n else 2 * n - 1 - k
        if mode == "reflect":
            if n == 1:
                return 0
            period = 2 * (n - 1)
            k = j % period
            return k if k < n else period - k
        raise ValueError(mode)

    for h in range(out.shape[1]):
        for w in range(out.shape[2]):
            sh, sw = source(h - top, n_H), source(w - left, n_W)
            if sh is None or sw is None:
                out[:, h, w, :] = value
            else:
                out[:, h, w, :] = X[:, sh, sw, :]
    return out


def conv_output_size(size, f, stride, pad):
    """``(size + 2 * pad - f) // stride + 1``."""
    return (size + 2 * pad - f) // stride + 1


def _conv_geometry(hparameters, f_h, f_w):
    """(stride, pad, dilation, kernel span), PyTorch's dilation: taps `dilation` apart."""
    d = hparameters.get("dilation", 1)
    return hparameters["stride"], hparameters["pad"], d, (d * (f_h - 1) + 1, d * (f_w - 1) + 1)


def _taps(start, span, dilation):
    """The input indices of one window's taps along one axis."""
    return slice(start, start + span, dilation)


def conv_forward_loop(A_prev, W, b, hparameters):
    """Convolution (cross-correlation) forward pass, one output value at a time."""
    A_prev, W, b = _as_f64(A_prev, W, b)
    m, n_H_prev, n_W_prev, _ = A_prev.shape
    f_h, f_w, _, n_C = W.shape
    stride, pad, d, (s_h, s_w) = _conv_geometry(hparameters, f_h, f_w)
    n_H = conv_output_size(n_H_prev, s_h, stride, pad)
    n_W = conv_output_size(n_W_prev, s_w, stride, pad)
    A_pad = pad_loop(A_prev, pad, pad, pad, pad)
    Z = np.zeros((m, n_H, n_W, n_C))
    for i in range(m):
        for h in range(n_H):
            for w in range(n_W):
                a_slice = A_pad[i, _taps(h * stride, s_h, d), _taps(w * stride, s_w, d), :]
                for c in range(n_C):
                    Z[i, h, w, c] = np.sum(a_slice * W[:, :, :, c]) + b[0, 0, 0, c]
    return Z


def conv_backward_loop(dZ, A_prev, W, hparameters):
    """Convolution backward pass: (dA_prev, dW, db)."""
    dZ, A_prev, W = _as_f64(dZ, A_prev, W)
    m, n_H_prev, n_W_prev, _ = A_prev.shape
    f_h, f_w, _, n_C = W.shape
    stride, pad, d, (s_h, s_w) = _conv_geometry(hparameters, f_h, f_w)
    _, n_H, n_W, _ = dZ.shape
    A_pad = pad_loop(A_prev, pad, pad, pad, pad)
    dA_pad = np.zeros_like(A_pad)
    dW = np.zeros_like(W)
    db = np.zeros((1, 1, 1, n_C))
    for i in range(m):
        for h in range(n_H):
            for w in range(n_W):
                rows, cols = _taps(h * stride, s_h, d), _taps(w * stride, s_w, d)
                for c in range(n_C):
                    dA_pad[i, rows, cols, :] += W[:, :, :, c] * dZ[i, h, w, c]
                    dW[:, :, :, c] += A_pad[i, rows, cols, :] * dZ[i, h, w, c]
                    db[0, 0, 0, c] += dZ[i, h, w, c]
    dA_prev = dA_pad[:, pad : pad + n_H_prev, pad : pad + n_W_prev, :]
    return dA_prev, dW, db


def depthwise_conv_forward_loop(A_prev, W, b, hparameters):
    """Depthwise forward pass: output channel ``k * n_C_prev + c`` is W[:, :, c, k] on channel c."""
    A_prev, W, b = _as_f64(A_prev, W, b)
    m, n_H_prev, n_W_prev, n_C_prev = A_prev.shape
    f_h, f_w, _, n_K = W.shape
    stride, pad, d, (s_h, s_w) = _conv_geometry(hparameters, f_h, f_w)
    n_H = conv_output_size(n_H_prev, s_h, stride, pad)
    n_W = conv_output_size(n_W_prev, s_w, stride, pad)
    A_pad = pad_loop(A_prev, pad, pad, pad, pad)
    Z = np.zeros((m, n_H, n_W, n_K * n_C_prev))
    for i in range(m):
        for h in range(n_H):
            for w in range(n_W):
                rows, cols = _taps(h * stride, s_h, d), _taps(w * stride, s_w, d)
                for k in range(n_K):
                    for c in range(n_C_prev):
                        out = k * n_C_prev + c
                        Z[i, h, w, out] = (
                            np.sum(A_pad[i, rows, cols, c] * W[:, :, c, k]) + b[0, 0, 0, out]
                        )
    return Z


def depthwise_conv_backward_loop(dZ, A_prev, W, hparameters):
    """Depthwise backward pass: (dA_prev, dW, db)."""
    dZ, A_prev, W = _as_f64(dZ, A_prev, W)
    m, n_H_prev, n_W_prev, n_C_prev = A_prev.shape
    f_h, f_w, _, n_K = W.shape
    stride, pad, d, (s_h, s_w) = _conv_geometry(hparameters, f_h, f_w)
    _, n_H, n_W, n_out = dZ.shape
    A_pad = pad_loop(A_prev, pad, pad, pad, pad)
    dA_pad = np.zeros_like(A_pad)
    dW = np.zeros_like(W)
    db = np.zeros((1, 1, 1, n_out))
    for i in range(m):
        for h in range(n_H):
            for w in range(n_W):
                rows, cols = _taps(h * stride, s_h, d), _taps(w * stride, s_w, d)
                for k in range(n_K):
                    for c in range(n_C_prev):
                        g = dZ[i, h, w, k * n_C_prev + c]
                        dA_pad[i, rows, cols, c] += W[:, :, c, k] * g
                        dW[:, :, c, k] += A_pad[i, rows, cols, c] * g
                        db[0, 0, 0, k * n_C_prev + c] += g
    dA_prev = dA_pad[:, pad : pad + n_H_prev, pad : pad + n_W_prev, :]
    return dA_prev, dW, db


def pool_output_size(size, f, stride, pad=0, ceil_mode=False):
    """PyTorch's output size: ``(size + 2 pad - f) / stride + 1``, rounded down or up.

    Rounded up, the last window must start inside the input or its left padding.
    """
    span = size + 2 * pad - f
    n = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (n - 1) * stride >= size + pad:
        n -= 1
    return n


def _pool_geometry(hparameters):
    return (
        hparameters["f"],
        hparameters["stride"],
        hparameters.get("pad", 0),
        hparameters.get("ceil_mode", False),
    )


def _pool_window(h, size, f, stride, pad):
    """The input indices (real pixels only) of window h along one axis."""
    return slice(max(0, h * stride - pad), min(size, h * stride - pad + f))


def pool_forward_loop(A_prev, hparameters, mode="max"):
    """Max or average pooling, one window at a time."""
    (A_prev,) = _as_f64(A_prev)
    f, stride, pad, ceil_mode = _pool_geometry(hparameters)
    m, n_H_prev, n_W_prev, n_C = A_prev.shape
    n_H = pool_output_size(n_H_prev, f, stride, pad, ceil_mode)
    n_W = pool_output_size(n_W_prev, f, stride, pad, ceil_mode)
    A = np.zeros((m, n_H, n_W, n_C))
    # Padding is never part of a window: maxima and means of the real pixels.
    reduce = {"max": np.max, "average": np.mean, "avg": np.mean}[mode]
    for i in range(m):
        for h in range(n_H):
            for w in range(n_W):
                rows = _pool_window(h, n_H_prev, f, stride, pad)
                cols = _pool_window(w, n_W_prev, f, stride, pad)
                for c in range(n_C):
                    A[i, h, w, c] = reduce(A_prev[i, rows, cols, c])
    return A


def first_max_mask(window):
    """Boolean mask marking the first maximum of `window` in row-major order."""
    mask = np.zeros(window.shape, dtype=bool)
    mask.flat[np.argmax(window)] = True
    return mask


def pool_backward_loop(dA, A_prev, hparameters, mode="max"):
    """Pooling backward pass; max mode sends each gradient to the window's first maximum."""
    dA, A_prev = _as_f64(dA, A_prev)
    f, stride, pad, _ = _pool_geometry(hparameters)
    m, n_H, n_W, n_C = dA.shape
    dA_prev = np.zeros_like(A_prev)
    for i in range(m):
        for h in range(n_H):
            for w in range(n_W):
                rows = _pool_window(h, A_prev.shape[1], f, stride, pad)
                cols = _pool_window(w, A_prev.shape[2], f, stride, pad)
                count = (rows.stop - rows.start) * (cols.stop - cols.start)
                for c in range(n_C):
                    if mode == "max":
                        mask = first_max_mask(A_prev[i, rows, cols, c])
                        dA_prev[i, rows, cols, c] += mask * dA[i, h, w, c]
                    else:
                        dA_prev[i, rows, cols, c] += dA[i, h, w, c] / count
    return dA_prev


def numerical_gradient(func, x, eps=1e-6):
    """Centred-difference gradient of the scalar function `func` at float64 array `x`.

    `x` is perturbed in place one entry at a time and restored afterwards.
    """
    grad = np.zeros_like(x, dtype=np.float64)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        idx = it.multi_index
        old = x[idx]
        x[idx] = old + eps
        plus = func()
        x[idx] = old - eps
        minus = func()
        x[idx] = old
        grad[idx] = (plus - minus) / (2 * eps)
    return grad


def assert_matches(actual, expected, dtype):
    """Assert `actual` has `dtype` and equals the float64 `expected` within that dtype's rounding.

    The tolerance is relative to the largest magnitude in `expected`, since sums of
    products of mixed-sign values lose relative precision near zero.
    """
    actual = np.asarray(actual)
    assert actual.dtype == np.dtype(dtype), f"dtype {actual.dtype}, expected {np.dtype(dtype)}"
    assert actual.shape == expected.shape, f"shape {actual.shape}, expected {expected.shape}"
    scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    tol = 1e-4 if np.dtype(dtype) == np.float32 else 1e-11
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol * scale)


# --- Window-view references ------------------------------------------------------------------
# The same definitions computed over ``sliding_window_view``: fast enough for inputs large
# enough to span many of an optimised engine's tiles, and checked against the loops above on
# small inputs.


def _windows(A_pad, f_h, f_w, stride):
    """(m, n_H, n_W, C, f_h, f_w) view of every window."""
    view = np.lib.stride_tricks.sliding_window_view(A_pad, (f_h, f_w), axis=(1, 2))
    return view[:, ::stride, ::stride]


def conv_forward_windows(A_prev, W, b, hparameters):
    """Convolution forward pass with one einsum over all windows."""
    A_prev, W, b = _as_f64(A_prev, W, b)
    stride, pad = hparameters["stride"], hparameters["pad"]
    A_pad = np.pad(A_prev, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    windows = _windows(A_pad, W.shape[0], W.shape[1], stride)
    return np.einsum("ihwcpq,pqck->ihwk", windows, W) + b


def conv_backward_windows(dZ, A_prev, W, hparameters):
    """Convolution backward pass, one einsum per kernel offset."""
    dZ, A_prev, W = _as_f64(dZ, A_prev, W)
    stride, pad = hparameters["stride"], hparameters["pad"]
    m, n_H_prev, n_W_prev, _ = A_prev.shape
    f_h, f_w = W.shape[:2]
    _, n_H, n_W, n_C = dZ.shape
    A_pad = np.pad(A_prev, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    dA_pad = np.zeros_like(A_pad)
    dW = np.zeros_like(W)
    for di in range(f_h):
        for dj in range(f_w):
            rows = slice(di, di + stride * (n_H - 1) + 1, stride)
            cols = slice(dj, dj + stride * (n_W - 1) + 1, stride)
            dW[di, dj] = np.einsum("ihwc,ihwk->ck", A_pad[:, rows, cols], dZ)
            dA_pad[:, rows, cols] += np.einsum("ihwk,ck->ihwc", dZ, W[di, dj])
    db = dZ.sum(axis=(0, 1, 2)).reshape(1, 1, 1, n_C)
    return dA_pad[:, pad : pad + n_H_prev, pad : pad + n_W_prev], dW, db


def depthwise_conv_forward_windows(A_prev, W, b, hparameters):
    """Depthwise forward pass with one einsum over all windows."""
    A_prev, W, b = _as_f64(A_prev, W, b)
    stride, pad = hparameters["stride"], hparameters["pad"]
    A_pad = np.pad(A_prev, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    windows = _windows(A_pad, W.shape[0], W.shape[1], stride)
    Z = np.einsum("ihwcpq,pqck->ihwkc", windows, W)
    return Z.reshape(*Z.shape[:3], -1) + b


def pool_forward_windows(A_prev, hparameters, mode="max"):
    """Pooling forward pass: max or mean over the window axes of the view."""
    (A_prev,) = _as_f64(A_prev)
    f, stride = hparameters["f"], hparameters["stride"]
    windows = _windows(A_prev, f, f, stride)
    return windows.max(axis=(4, 5)) if mode == "max" else windows.mean(axis=(4, 5))


def pool_backward_windows(dA, A_prev, hparameters, mode="max"):
    """Pooling backward pass: a scatter-add of each window's gradient."""
    dA, A_prev = _as_f64(dA, A_prev)
    f, stride = hparameters["f"], hparameters["stride"]
    m, n_H, n_W, n_C = dA.shape
    dA_prev = np.zeros_like(A_prev)
    if mode != "max":
        for di in range(f):
            for dj in range(f):
                rows = slice(di, di + stride * (n_H - 1) + 1, stride)
                cols = slice(dj, dj + stride * (n_W - 1) + 1, stride)
                dA_prev[:, rows, cols] += dA / (f * f)
        return dA_prev
    windows = _windows(A_prev, f, f, stride).reshape(m, n_H, n_W, n_C, f * f)
    first = np.argmax(windows, axis=-1)  # first maximum in row-major window order
    i, h, w, c = np.indices(dA.shape)
    np.add.at(dA_prev, (i, h * stride + first // f, w * stride + first % f, c), dA)
    return dA_prev
