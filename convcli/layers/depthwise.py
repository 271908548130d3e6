"""The depthwise convolution layer: each channel filtered on its own (numpy only).

:func:`depthwise_conv_forward` and :func:`depthwise_conv_backward` share
:mod:`convcli.layers.conv`'s checks and engines; with a few channels the
forward pass runs as one convolution with block-diagonal weights.
"""

from __future__ import annotations

import numpy as np

from ._engine.correlate import correlate
from ._engine.depthwise import correlate_depthwise, taps_are_cheaper
from .conv import (
    _backward_inputs,
    _conv_shapes,
    _engine_input,
    _ieee,
    _native_direct,
    _padded,
    _replace_tiles,
    _separable,
    _window_view,
)


def depthwise_conv_forward(A_prev, W, b, hparameters):
    """Forward pass of a depthwise convolution (each channel filtered alone).

    Parameters
    ----------
    A_prev : (m, n_H_prev, n_W_prev, n_C_prev) ndarray
        Batch of inputs; every channel is filtered on its own.
    W : (f, f, n_C_prev, n_K) ndarray
        ``W[:, :, c, k]`` is the k-th 2-D kernel for input channel c. To
        apply the same kernels to every channel, repeat them along axis 2.
    b : (1, 1, 1, n_K * n_C_prev) ndarray
        One bias per output channel.
    hparameters : dict
        ``{"stride": int >= 1, "pad": int >= 0}``, optional ``"dilation"``
        as for conv_forward.

    Returns
    -------
    Z : (m, n_H, n_W, n_K * n_C_prev) ndarray
        Kernel-major: output channel ``k * n_C_prev + c`` is kernel k applied
        to input channel c (so ``Z.reshape(m, n_H, n_W, n_K, n_C_prev)``
        separates them). PyTorch's ``groups=n_C_prev`` orders the same
        channels channel-major (``c * n_K + k``).
    cache : tuple
        ``(A_prev, W, b, hparameters)``, for depthwise_conv_backward.

    Empty inputs, absurd strides and pads, and NaN and inf are treated as by
    conv_forward.
    """
    with _ieee():  # NaN and inf follow IEEE arithmetic, without numpy warnings
        return _depthwise_conv_forward(A_prev, W, b, hparameters)


def _depthwise_conv_forward(A_prev, W, b, hparameters):
    A, Wa, ba, dtype, geometry, pad, out_shape = _conv_shapes(
        A_prev, W, b, hparameters, depthwise=True
    )
    A, pads = _engine_input(A, geometry, pad, dtype)
    bias = ba.astype(dtype, copy=False).reshape(-1)
    Z, not_finite = _separable(A, Wa, geometry, pads, dtype, bias, depthwise=True), []
    if Z is None:
        Z = _native_direct(A, Wa, geometry, pads, dtype, bias, depthwise=True)
    if Z is not None:
        return Z, (A_prev, W, b, hparameters)
    if (
        0 < Wa.shape[2] <= DENSE_DEPTHWISE_CHANNELS
        and geometry.dilation == 1
        and not taps_are_cheaper(Wa)
    ):
        Z, not_finite = correlate(
            A,
            _block_diagonal(Wa.astype(dtype, copy=False)),
            geometry.stride,
            pads,
            dtype,
            bias,
            partial=True,
        )
    if Z is None or not_finite:  # many channels, dilated, mostly unit taps: the tap engine
        taps = correlate_depthwise(
            A, Wa, geometry.stride, pads[0], dtype, bias, dilation=geometry.dilation
        )
        if Z is None:
            Z = taps
        else:  # the row tiles whose results are not finite
            _replace_tiles(Z, taps, not_finite)
    return Z, (A_prev, W, b, hparameters)


# Up to this many input channels, depthwise_conv_forward runs as conv_forward with
# block-diagonal weights: the matmul engine multiplies zeros for the other channels
# but, with few channels, still beats a multiply and an add per kernel tap (an
# 1800x2400 channel: 13 ms against 21 ms; three: 44 ms against 69 ms), unless
# most taps only add or subtract (taps_are_cheaper). The choice depends on the
# weights and channels alone, never on the image's size, so that a band of rows
# (convcli's strips) goes through the engine the whole image does, with its values.
DENSE_DEPTHWISE_CHANNELS = 4


def _block_diagonal(W):
    """(f_h, f_w, C, n_K * C) weights giving depthwise output channel k * C + c."""
    f_h, f_w, C, n_K = W.shape
    dense = np.zeros((f_h, f_w, C, n_K, C), W.dtype)
    for c in range(C):
        dense[:, :, c, :, c] = W[:, :, c, :]
    return dense.reshape(f_h, f_w, C, n_K * C)


def depthwise_conv_backward(dZ, cache):
    """Backward pass of depthwise_conv_forward.

    Parameters
    ----------
    dZ : (m, n_H, n_W, n_K * n_C_prev) ndarray
        Gradient with respect to the output of depthwise_conv_forward.
    cache : tuple
        ``(A_prev, W, b, hparameters)`` as returned by depthwise_conv_forward.

    Returns
    -------
    dA_prev : (m, n_H_prev, n_W_prev, n_C_prev) ndarray
        Always A_prev's shape (zeros where no window reads).
    dW : (f, f, n_C_prev, n_K) ndarray
    db : (1, 1, 1, n_K * n_C_prev) ndarray
    """
    with _ieee():  # NaN and inf follow IEEE arithmetic, without numpy warnings
        return _depthwise_conv_backward(dZ, cache)


def _depthwise_conv_backward(dZ, cache):
    A, Wa, dZ, geometry, pad, out_shape = _backward_inputs(dZ, cache, depthwise=True)
    dtype = dZ.dtype
    m, n_H, n_W, n_out = out_shape
    _, n_H_prev, n_W_prev, n_C_prev = A.shape
    n_K = Wa.shape[3]
    A_pad, stride, d = _padded(A, geometry, pad, dtype), geometry.stride, geometry.dilation
    Wk = np.swapaxes(Wa.astype(dtype, copy=False), 2, 3)
    dZ5 = dZ.reshape(m, n_H, n_W, n_K, n_C_prev)
    dA_pad = np.zeros(A_pad.shape, dtype)
    dWk = np.zeros(Wk.shape, dtype)
    with np.errstate(invalid="ignore", over="ignore"):  # IEEE results, no warnings
        for di in range(Wk.shape[0]):
            for dj in range(Wk.shape[1]):
                window = _window_view(A_pad, d * di, d * dj, stride, n_H, n_W)
                dWk[di, dj] = np.einsum("ihwkc,ihwc->kc", dZ5, window)
                _window_view(dA_pad, d * di, d * dj, stride, n_H, n_W)[...] += np.einsum(
                    "ihwkc,kc->ihwc", dZ5, Wk[di, dj]
                )
        db = dZ.sum(axis=(0, 1, 2), dtype=dtype).reshape(1, 1, 1, n_out)
    dW = np.ascontiguousarray(np.swapaxes(dWk, 2, 3))
    if stride != geometry.stride_in:
        return geometry.scatter(dA_pad, A.shape), dW, db
    dA_prev = np.ascontiguousarray(dA_pad[:, pad : pad + n_H_prev, pad : pad + n_W_prev, :])
    return dA_prev, dW, db
