"""Convolution layers: forward and backward passes (numpy only).

The public functions validate their arguments and return the tutorial's
outputs and caches; the tiled work is done by ``convcli.layers._engine.correlate``.

"Convolution" here is cross-correlation, as in the tutorial, PyTorch and
TensorFlow: the kernel is slid over the image *without* being flipped, so
``Z[i, h, w, c] = sum(A_pad[i, h*s:h*s+f, w*s:w*s+f, :] * W[:, :, :, c]) + b[c]``.
(scipy.ndimage.correlate computes the same thing; scipy.ndimage.convolve and
ImageMagick's ``Convolve`` flip the kernel first.)

Two layers are provided:

- ``conv_forward`` / ``conv_backward``: the tutorial's layer. Every filter
  spans all input channels and their responses are summed.
- ``depthwise_conv_forward`` / ``depthwise_conv_backward``: each input
  channel is filtered separately (PyTorch's ``groups=n_C_prev``).
"""

from __future__ import annotations

import numpy as np

from ._engine import native
from ._engine.correlate import correlate, correlate_weights_grad
from ._engine.depthwise import correlate_depthwise, matmul_passes, tap_passes, taps_are_cheaper
from ._engine.separable import correlate_separable, passes, rank_one_factors
from ._engine.tiles import ceil_div, covered, window_slice
from .validation import (
    as_real_array,
    check_ndim,
    check_result_size,  # sizes are checked before anything is allocated
    compute_dtype,
    hparameter,
    output_size,
)

_LAYOUT = "(m, n_H, n_W, n_C)"


def conv_single_step(a_slice_prev, W, b):
    """Apply one filter to one slice of the input: one output value.

    Parameters
    ----------
    a_slice_prev : (f, f, n_C_prev) ndarray
        Slice of the input.
    W : (f, f, n_C_prev) ndarray
        Weights of one filter.
    b : (1, 1, 1) ndarray or scalar
        Bias of that filter, added once. A Python number takes the dtype
        of the slice and weights; an array or numpy scalar counts as input.

    Returns
    -------
    Z : numpy floating scalar
        ``sum(a_slice_prev * W) + b``; np.float64 for float64 (or integer)
        input, np.float32 for float32 input. Empty slices give ``b``; NaN
        and inf follow IEEE arithmetic, without warnings.

    Examples
    --------
    >>> import numpy as np
    >>> conv_single_step(np.ones((2, 2, 1)), np.full((2, 2, 1), 0.5), np.array([[[1.0]]]))
    np.float64(3.0)
    """
    # A Python number (not a numpy scalar, which np.float64 is too) has no dtype of its own.
    python_number = isinstance(b, (int, float)) and not isinstance(b, np.generic)
    a = as_real_array(a_slice_prev, "a_slice_prev")
    W = as_real_array(W, "W")
    b = as_real_array(b, "b")
    if a.shape != W.shape:
        raise ValueError(
            f"a_slice_prev and W must have the same shape, got {a.shape} and {W.shape}"
        )
    if b.size != 1:
        raise ValueError(f"b must hold exactly one value, got shape {b.shape}")
    dtype = compute_dtype(a, W) if python_number else compute_dtype(a, W, b)
    with np.errstate(invalid="ignore", over="ignore"):  # IEEE results, no warnings
        total = np.sum(np.multiply(a, W, dtype=dtype), dtype=dtype)
        return dtype.type(total + dtype.type(b.reshape(())))


def _conv_shapes(A_prev, W, b, hparameters, *, depthwise: bool):
    """Validate conv inputs; return arrays, dtype, stride, pad and output size."""
    A_prev = as_real_array(A_prev, "A_prev")
    W = as_real_array(W, "W")
    b = as_real_array(b, "b")
    check_ndim(A_prev, "A_prev", 4, "(m, n_H_prev, n_W_prev, n_C_prev)")
    check_ndim(W, "W", 4, "(f, f, n_C_prev, n_C)")
    stride = hparameter(hparameters, "stride", minimum=1)
    pad = hparameter(hparameters, "pad", minimum=0)
    dilation = hparameter(hparameters, "dilation", minimum=1) if "dilation" in hparameters else 1
    m, n_H_prev, n_W_prev, n_C_prev = A_prev.shape
    f_h, f_w, w_channels, n_filters = W.shape
    if w_channels != n_C_prev:
        raise ValueError(
            f"W has {w_channels} input channels (W.shape[2]) but A_prev has "
            f"{n_C_prev} (A_prev.shape[3])"
        )
    if f_h < 1 or f_w < 1 or n_filters < 1:
        raise ValueError(f"W must have a non-empty kernel and filter axis, got shape {W.shape}")
    n_out = n_filters * n_C_prev if depthwise else n_filters
    if b.shape != (1, 1, 1, n_out):
        raise ValueError(f"b must have shape (1, 1, 1, {n_out}), got {b.shape}")
    # A dilated kernel reads taps `dilation` apart: it spans d * (f - 1) + 1 values.
    span = (dilation * (f_h - 1) + 1, dilation * (f_w - 1) + 1)
    n_H = output_size(n_H_prev + 2 * pad, span[0], stride, _kernel_what("height", f_h, dilation))
    n_W = output_size(n_W_prev + 2 * pad, span[1], stride, _kernel_what("width", f_w, dilation))
    dtype = compute_dtype(A_prev, W, b)
    out_shape = (m, n_H, n_W, n_out)
    cause = f'hparameters = {{"stride": {stride}, "pad": {pad}'
    cause += f', "dilation": {dilation}}}' if dilation != 1 else "}"
    check_result_size(out_shape, dtype, cause, "the output")
    geometry = _Windows(A_prev.shape, span, stride, pad, (n_H, n_W))
    geometry.dilation = dilation
    check_result_size(geometry.shape, dtype, cause, "the padded input")
    return A_prev, W, b, dtype, geometry, pad, out_shape


def _kernel_what(side, f, dilation):
    """How an output_size error names the kernel's extent along one side."""
    if dilation == 1:
        return f"W's kernel {side} f ="
    return f'W\'s kernel {side} f = {f} with hparameters["dilation"] = {dilation} spans'


def _dilated(W, dilation):
    """The kernel W with `dilation - 1` zero taps between its taps (W itself for 1)."""
    if dilation == 1:
        return W
    f_h, f_w = W.shape[:2]
    spread = np.zeros((dilation * (f_h - 1) + 1, dilation * (f_w - 1) + 1) + W.shape[2:], W.dtype)
    spread[::dilation, ::dilation] = W
    return spread


def _axis_windows(n_out, f, s, s2, size, pad):
    """One axis of :class:`_Windows`: (compact length, compact positions, image positions)."""
    if s2 == s:  # the padded axis up to the end of the last window
        length = covered(n_out, f, s)
        lo, hi = min(length, pad), min(length, pad + size)
        return length, slice(lo, max(lo, hi)), slice(lo - pad, max(lo, hi) - pad)
    # s > s2 >= f: window h reads padded values h*s .. h*s + f - 1, kept at h*s2 ..
    length = n_out * s2
    h_lo = max(0, ceil_div(pad - f + 1, s))  # the windows that reach the image
    h_hi = min(n_out, (size - 1 + pad) // s + 1)
    if size == 0 or h_hi <= h_lo:
        return length, np.zeros(0, np.intp), np.zeros(0, np.intp)
    h = np.arange(h_lo, h_hi)
    step = s if h_hi - h_lo > 1 else 0  # then s is small: (h_hi - h_lo - 1) * s < size + f
    image = ((h - h_lo) * step + (h_lo * s - pad))[:, None] + np.arange(s2)
    compact = (h * s2)[:, None] + np.arange(s2)
    inside = (image >= 0) & (image < size)
    return length, compact[inside], image[inside]


# Strides up to this keep the padded input whole (as far as the last window
# reaches); the rows and columns between windows then cost at most this many
# times the ones read. Larger strides (beyond the kernel) keep only the rows
# and columns that windows read.
COMPACT_STRIDE = 8


class _Windows:
    """The zero-padded input restricted to the values some window reads.

    With stride s <= max(F, COMPACT_STRIDE), F the larger kernel side, that
    is the padded input up to the last window's end. With a larger stride
    most padded rows and columns lie between windows and are never read:
    only the F rows and columns from each window's start are kept, and the
    windows move by F over them. So memory follows the input and the
    output, whatever the stride and pad.
    """

    def __init__(self, shape, kernel, stride, pad, out_hw):
        m, H, W, C = shape
        F = max(kernel)
        self.stride_in = stride
        self.stride = stride if stride <= max(F, COMPACT_STRIDE) else F
        self.rows = _axis_windows(out_hw[0], kernel[0], stride, self.stride, H, pad)
        self.cols = _axis_windows(out_hw[1], kernel[1], stride, self.stride, W, pad)
        self.shape = (m, self.rows[0], self.cols[0], C)

    def _index(self):
        (_, r_dst, r_src), (_, c_dst, c_src) = self.rows, self.cols
        if isinstance(r_dst, slice) and isinstance(c_dst, slice):
            return (slice(None), r_dst, c_dst), (slice(None), r_src, c_src)
        r_dst, r_src, c_dst, c_src = (
            np.arange(x.start, x.stop) if isinstance(x, slice) else x
            for x in (r_dst, r_src, c_dst, c_src)
        )
        return (slice(None), r_dst[:, None], c_dst), (slice(None), r_src[:, None], c_src)

    def gather(self, A, dtype):
        """The compact padded input, in `dtype`."""
        A_c = np.zeros(self.shape, dtype)
        dst, src = self._index()
        A_c[dst] = A[src]
        return A_c

    def scatter(self, dA_c, shape):
        """The gradient of the compact input, back on the input's `shape`."""
        dA = np.zeros(shape, dA_c.dtype)
        dst, src = self._index()
        dA[src] = dA_c[dst]
        return dA


def _window_view(A_pad, di, dj, stride, n_H, n_W):
    """The input values under kernel offset (di, dj) for every output position."""
    return A_pad[:, window_slice(di, n_H, stride), window_slice(dj, n_W, stride), :]


def conv_forward(A_prev, W, b, hparameters):
    """Forward pass of a convolution layer (cross-correlation, no kernel flip).

    Parameters
    ----------
    A_prev : (m, n_H_prev, n_W_prev, n_C_prev) ndarray
        Batch of inputs.
    W : (f, f, n_C_prev, n_C) ndarray
        Filters; ``W[:, :, k, c]`` is applied to input channel k for output
        channel c. Rectangular kernels ``(f_h, f_w, ...)`` also work.
    b : (1, 1, 1, n_C) ndarray
        One bias per filter, added once to each output value.
    hparameters : dict
        ``{"stride": int >= 1, "pad": int >= 0}``; the input is zero-padded.
        Optional ``"dilation": int >= 1`` (default 1): the kernel's taps are
        that many input values apart, as in PyTorch's ``dilation``, so an f x f
        kernel spans ``d * (f - 1) + 1`` values.

    Returns
    -------
    Z : (m, n_H, n_W, n_C) ndarray
        ``n_H = (n_H_prev + 2 * pad - d * (f - 1) - 1) // stride + 1``
        (d the dilation), likewise n_W. float32
        for float32 input, float64 for float64 or integer input.
    cache : tuple
        ``(A_prev, W, b, hparameters)``, the objects passed in, for conv_backward.

    Raises
    ------
    ValueError
        If the kernel is larger than the padded input (no window fits), or
        the stride and pad make the output too large to allocate (more than
        2**31 - 1 rows or columns, or more than the machine's memory); the
        message names `hparameters`. Any stride is fine otherwise: memory
        follows the input and the output, not the stride.

    Notes
    -----
    Empty inputs: an empty batch (m = 0) gives an empty Z; an input with no
    rows, columns or channels, padded, gives Z = b wherever a window fits.
    NaN and inf follow IEEE arithmetic, without warnings. A dilated kernel
    runs as the kernel with zeros between its taps: it costs as much as an
    undilated kernel of its span (NaN and inf between taps still reach no
    output).

    Examples
    --------
    >>> import numpy as np
    >>> A = np.arange(9.0).reshape(1, 3, 3, 1)
    >>> W = np.ones((2, 2, 1, 1))
    >>> Z, _ = conv_forward(A, W, np.zeros((1, 1, 1, 1)), {"stride": 1, "pad": 0})
    >>> Z[0, :, :, 0]
    array([[ 8., 12.],
           [20., 24.]])
    """
    with _ieee():  # NaN and inf follow IEEE arithmetic, without numpy warnings
        return _conv_forward(A_prev, W, b, hparameters)


def _conv_forward(A_prev, W, b, hparameters):
    A, Wa, ba, dtype, geometry, pad, out_shape = _conv_shapes(
        A_prev, W, b, hparameters, depthwise=False
    )
    bias = ba.astype(dtype, copy=False).reshape(-1)
    A, pads = _engine_input(A, geometry, pad, dtype)
    Z = _separable(A, Wa, geometry, pads, dtype, bias)
    if Z is None:
        Z = _native_direct(A, Wa, geometry, pads, dtype, bias, depthwise=False)
    if Z is not None:
        return Z, (A_prev, W, b, hparameters)
    d, s = geometry.dilation, geometry.stride
    if Wa.shape[2:] == (1, 1) and taps_are_cheaper(Wa):
        # One channel in and out is a depthwise correlation; with unit weights
        # (edge kernels) the tap engine's adds beat the matmul engine.
        Z = correlate_depthwise(A, Wa, s, pads[0], dtype, bias, dilation=d)
        return Z, (A_prev, W, b, hparameters)
    Wa = Wa.astype(dtype, copy=False)
    Z, not_finite = None, True  # taps far apart (_sparse): all of it tap by tap
    if not _sparse(Wa, d):
        Z, not_finite = correlate(A, _dilated(Wa, d), s, pads, dtype, bias, partial=True)
    if not_finite:  # those row tiles by the plain path
        plain = _conv_forward_plain(A, Wa, s, pads[0], out_shape, d)
        with np.errstate(invalid="ignore", over="ignore"):  # inf + -inf: NaN, no warning
            plain += bias
        if Z is None:
            return plain, (A_prev, W, b, hparameters)
        _replace_tiles(Z, plain, not_finite)
    return Z, (A_prev, W, b, hparameters)


def _separable(A, Wa, geometry, pads, dtype, bias, *, depthwise=False):
    """Z of one-channel rank-1 kernels by two 1-D passes, where that is cheaper; else None.

    Only for float32, stride 1, no dilation and one kernel per channel, and
    only when the kernel's two passes cost less than the 2-D engine
    (:func:`passes`, :func:`convcli.layers._engine.native.separable_is_cheaper`):
    the choice depends on the kernel alone, never on the image, so that bands
    of an image get its values. The numpy engine takes one channel; the
    native one each channel of a depthwise call (`depthwise`) alone, so that
    a channel gets the same values whatever channels come with it. The
    results equal the 2-D engines' within float32 rounding; rows that are
    not finite are those of the plain path.
    """
    f_h, f_w, C, n = Wa.shape
    if (
        n != 1
        or (C != 1 and not depthwise)
        or geometry.stride != 1
        or geometry.dilation != 1
        or dtype != np.float32
    ):
        return None
    if native.active():
        return _native_separable(A, Wa, pads, bias)
    if C != 1 or passes(f_h, f_w) >= min(tap_passes(Wa), matmul_passes(Wa)):
        return None
    factors = rank_one_factors(Wa[:, :, 0, 0])
    if factors is None:
        return None
    Z, rows = correlate_separable(A, *factors, pads, dtype, bias)
    return _plain_rows(Z, rows, A, Wa, pads, bias)


def _native_separable(A, Wa, pads, bias):
    """Each channel by the native separable passes where its kernel is rank 1 and cheaper so
    (:func:`~convcli.layers._engine.native.separable_factors`); else None.

    Channels with one kernel run together (interleaved, as each would alone);
    a channel whose kernel is not rank 1 takes the direct correlation.
    """
    C = Wa.shape[2]
    factors = [native.separable_factors(Wa[:, :, c, 0]) for c in range(C)]
    if all(f is None for f in factors):
        return None
    if C > 1 and np.all(Wa == Wa[:, :, :1]):  # one kernel for every channel
        Z, rows = native.correlate_separable(A, *factors[0], pads, bias)
        return _plain_rows(Z, rows, A, Wa, pads, bias)
    channels = []
    for c, f in enumerate(factors):
        A_c, W_c = A[..., c : c + 1], Wa[:, :, c : c + 1]
        if f is None:
            channels.append(native.correlate(A_c, W_c, 1, pads, bias[c : c + 1]))
        else:
            Z_c, rows = native.correlate_separable(A_c, *f, pads, bias[c : c + 1])
            channels.append(_plain_rows(Z_c, rows, A_c, W_c, pads, bias[c : c + 1]))
    return channels[0] if C == 1 else np.concatenate(channels, axis=3)


def _plain_rows(Z, rows, A, Wa, pads, bias):
    """Z with its ``(image, row)`` `rows` (not finite: NaN or inf met an engine's zeros) by
    the plain path, channel by channel: only a channel whose row is not finite, as that
    channel alone would be (`Wa` one kernel a channel, or one channel in and out)."""
    if rows:
        if Wa.shape[2] > 1:  # depthwise: each channel with its own kernel
            for c in range(Wa.shape[2]):
                _plain_rows(
                    Z[..., c : c + 1],
                    [(i, r) for i, r in rows if not np.isfinite(Z[i, r, :, c]).all()],
                    A[..., c : c + 1],
                    Wa[:, :, c : c + 1],
                    pads,
                    bias[c : c + 1],
                )
            return Z
        plain = _conv_forward_plain(A, Wa.astype(Z.dtype), 1, pads[0], Z.shape, 1)
        for i, r in rows:
            Z[i, r] = plain[i, r] + bias
    return Z


def _native_direct(A, Wa, geometry, pads, dtype, bias, *, depthwise):
    """Z by the native engine's direct correlation where it takes the call, else None.

    float32 only, and only for the channel counts it runs faster than the
    numpy engines (:func:`convcli.layers._engine.native.direct_takes`): the
    choice depends on the weights' shape alone, never on the image.
    """
    if dtype != np.float32 or not native.active():
        return None
    f_h, f_w, C, n = Wa.shape
    if not native.direct_takes(C, n, depthwise=depthwise):
        return None
    return native.correlate(
        A, Wa, geometry.stride, pads, bias, dilation=geometry.dilation, depthwise=depthwise
    )


def _replace_tiles(Z, other, tiles) -> None:
    """The rows of Z's row tiles ``(i0, i1, h0, h1)`` whose values are not finite, taken from
    `other`, a result of Z's shape.

    Row by row, not the whole tile: a row whose inputs hold no NaN or inf is finite
    and right in the engine's result (0 * inf, where NaN meets the engine's zeros,
    is not finite), so a row's value never depends on which rows share its tile,
    and a band of an image (convcli's strips, whose last tile may hold rows past
    the image's) gets the whole image's values.
    """
    for i0, i1, h0, h1 in tiles:
        block = Z[i0:i1, h0:h1]
        bad = ~np.isfinite(block).all(axis=(2, 3))  # (images, rows)
        block[bad] = other[i0:i1, h0:h1][bad]


def _ieee():
    return np.errstate(invalid="ignore", over="ignore", divide="ignore")


def _engine_input(A, geometry, pad, dtype):
    """What the engine correlates: A and its pads, or the compact padded input (large strides)."""
    if geometry.stride == geometry.stride_in:
        return A, (pad,) * 4
    return geometry.gather(A, dtype), (0,) * 4


def _padded(A, geometry, pad, dtype):
    """The zero-padded input as far as windows read (all of it for ordinary strides)."""
    if geometry.stride == geometry.stride_in:
        return _zero_padded(A, pad, dtype)
    return geometry.gather(A, dtype)


def _zero_padded(A, pad, dtype):
    m, H, W, C = A.shape
    A_pad = np.zeros((m, H + 2 * pad, W + 2 * pad, C), dtype)
    A_pad[:, pad : pad + H, pad : pad + W] = A
    return A_pad


def _conv_forward_plain(A, W, stride, pad, out_shape, dilation):
    """One matmul per tap of W (`dilation` values apart), for non-finite input and sparse
    kernels: NaN and inf reach exactly the outputs whose windows hold them (the engine's
    banded blocks also multiply neighbours by zero, and ``0 * inf`` is NaN)."""
    _, n_H, n_W, _ = out_shape
    A_pad = _zero_padded(A, pad, W.dtype)
    Z = np.zeros(out_shape, W.dtype)
    with np.errstate(invalid="ignore", over="ignore"):  # IEEE results, no warnings
        for i, j in np.ndindex(W.shape[:2]):
            Z += _window_view(A_pad, i * dilation, j * dilation, stride, n_H, n_W) @ W[i, j]
    return Z


def _backward_inputs(dZ, cache, *, depthwise: bool):
    """Checked (A, W, dZ, geometry, pad, out_shape) of a backward pass, in dZ's dtype."""
    A_prev, W, b, hparameters = _unpack_cache(cache)
    A, Wa, _, dtype, geometry, pad, out_shape = _conv_shapes(
        A_prev, W, b, hparameters, depthwise=depthwise
    )
    dZ = as_real_array(dZ, "dZ")
    if dZ.shape != out_shape:
        raise ValueError(f"dZ must have the forward output's shape {out_shape}, got {dZ.shape}")
    dZ = dZ.astype(compute_dtype(dZ, np.empty(0, dtype)), copy=False)
    return A, Wa.astype(dZ.dtype, copy=False), dZ, geometry, pad, out_shape


def _unpack_cache(cache, name="cache"):
    if not isinstance(cache, tuple) or len(cache) != 4:
        raise TypeError(
            f"{name} must be the tuple (A_prev, W, b, hparameters) returned by the forward pass"
        )
    return cache


def conv_backward(dZ, cache):
    """Backward pass of a convolution layer.

    Parameters
    ----------
    dZ : (m, n_H, n_W, n_C) ndarray
        Gradient of the cost with respect to the output Z of conv_forward.
    cache : tuple
        ``(A_prev, W, b, hparameters)`` as returned by conv_forward.

    Returns
    -------
    dA_prev : (m, n_H_prev, n_W_prev, n_C_prev) ndarray
        Gradient with respect to A_prev. Works with pad 0, and input rows or
        columns that no window covers (stride > 1) get zero gradient.
    dW : (f, f, n_C_prev, n_C) ndarray
        Gradient with respect to W.
    db : (1, 1, 1, n_C) ndarray
        Gradient with respect to b (dZ summed over batch, height and width).

    Notes
    -----
    dA_prev always has A_prev's shape, also when A_prev is empty and when
    every window lies in the padding (then it is all zeros).
    """
    with _ieee():  # NaN and inf follow IEEE arithmetic, without numpy warnings
        return _conv_backward(dZ, cache)


def _conv_backward(dZ, cache):
    A, Wc, dZ, geometry, pad, out_shape = _backward_inputs(dZ, cache, depthwise=False)
    dtype = dZ.dtype
    n_C = out_shape[3]
    db = _sum_pixels(dZ).reshape(1, 1, 1, n_C)
    if A.size == 0:  # no input values: nothing to correlate
        return np.zeros(A.shape, dtype), np.zeros(Wc.shape, dtype), db
    X, pads = _engine_input(A, geometry, pad, dtype)
    stride, pad_x, d = geometry.stride, pads[0], geometry.dilation
    dW = dX = None
    if not _sparse(Wc, d):
        Wd = _dilated(Wc, d)
        dW = correlate_weights_grad(X, dZ, Wd.shape[:2], stride, pads, dtype)
        dX = _conv_input_grad(dZ, Wd, X.shape, stride, pad_x) if dW is not None else None
        dW = np.ascontiguousarray(dW[::d, ::d]) if d > 1 and dX is not None else dW  # taps'
    if dX is None:
        dX, dW = _conv_backward_plain(X, dZ, Wc, stride, pad_x, d)
    if X is A:
        return dX, dW, db
    return geometry.scatter(dX, A.shape), dW, db


def _sum_pixels(dZ):
    """dZ summed over batch, height and width: whole rows first (long, fast loops)."""
    n_C = dZ.shape[3]
    if dZ.size == 0:
        return np.zeros(n_C, dZ.dtype)
    with np.errstate(invalid="ignore", over="ignore"):  # IEEE sums of NaN and inf
        return dZ.reshape(-1, dZ.shape[2] * n_C).sum(axis=0).reshape(-1, n_C).sum(axis=0)


def _conv_input_grad(dZ, Wc, A_shape, stride, pad):
    """dA_prev as a correlation of dZ with the flipped, transposed kernel (or None).

    For stride s > 1, dZ is first spread out with s - 1 zeros between
    values. Input rows and columns that no window covers get zero.
    """
    if not np.isfinite(Wc).all():
        return None  # the padding zeros would meet inf weights: 0 * inf
    m, n_H_prev, n_W_prev, _ = A_shape
    f_h, f_w = Wc.shape[:2]
    # Only the outputs whose windows reach the input send it gradient.
    h0, h1 = _reaching(dZ.shape[1], f_h, stride, n_H_prev, pad)
    w0, w1 = _reaching(dZ.shape[2], f_w, stride, n_W_prev, pad)
    if h1 <= h0 or w1 <= w0:
        return np.zeros((m, n_H_prev, n_W_prev, Wc.shape[2]), dZ.dtype)
    dZ = dZ[:, h0:h1, w0:w1]
    if stride > 1:
        n_H, n_W, n_C = dZ.shape[1:]
        spread = np.zeros((m, covered(n_H, 1, stride), covered(n_W, 1, stride), n_C), dZ.dtype)
        spread[:, ::stride, ::stride] = dZ
        dZ = spread
    top, left = f_h - 1 - pad + h0 * stride, f_w - 1 - pad + w0 * stride  # both >= 0
    pads = (
        top,
        n_H_prev - dZ.shape[1] - top + f_h - 1,
        left,
        n_W_prev - dZ.shape[2] - left + f_w - 1,
    )
    flipped = Wc[::-1, ::-1].transpose(0, 1, 3, 2)
    return correlate(dZ, flipped, 1, pads, dZ.dtype)


def _reaching(n_out, f, stride, size, pad):
    """The outputs lo .. hi - 1 along one axis whose windows overlap the input's `size` values."""
    return max(0, ceil_div(pad - f + 1, stride)), min(n_out, (size - 1 + pad) // stride + 1)


# A dilated kernel whose span is over this many times its taps goes tap by tap, forward and
# back: the engine's rows hold the whole span (3x3 taps 300 apart: 64 GiB for 24x32 outputs).
SPARSE_SPAN = 4


def _sparse(W, dilation: int) -> bool:
    spans = ((f - 1) * dilation + 1 for f in W.shape[:2])
    return next(spans) * next(spans) > SPARSE_SPAN * W.shape[0] * W.shape[1]


def _conv_backward_plain(A, dZ, W, stride, pad, dilation):
    """(dA_prev, dW) with one matmul per kernel tap (W's own, `dilation` values apart); the
    path for non-finite values, and for kernels dilated far past their taps."""
    _, n_H, n_W, n_C = dZ.shape
    m, n_H_prev, n_W_prev, n_C_prev = A.shape
    A_pad = _zero_padded(A, pad, W.dtype)
    dA_pad = np.zeros(A_pad.shape, W.dtype)
    dW = np.zeros(W.shape, W.dtype)
    dZ_rows = dZ.reshape(-1, n_C)
    with np.errstate(invalid="ignore", over="ignore"):  # IEEE results, no warnings
        for i, j in np.ndindex(W.shape[:2]):
            di, dj = i * dilation, j * dilation
            window = _window_view(A_pad, di, dj, stride, n_H, n_W)
            dW[i, j] = window.reshape(len(dZ_rows), n_C_prev).T @ dZ_rows
            _window_view(dA_pad, di, dj, stride, n_H, n_W)[...] += dZ @ W[i, j].T
    dA_prev = np.ascontiguousarray(dA_pad[:, pad : pad + n_H_prev, pad : pad + n_W_prev, :])
    return dA_prev, dW
