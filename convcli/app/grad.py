"""The backward passes as pictures: input gradients of pooling and convolution (numpy only).

Each function runs a layer's forward pass, feeds its backward pass an upstream
gradient, and returns the gradient with respect to the layer's input, the
``dA_prev`` of the tutorial: where a pooling layer routes its gradient, and
which input pixels would most change a convolution's response.
"""

from __future__ import annotations

import numpy as np

from ..choices import LOSSES
from ..layers.conv import conv_backward, conv_forward
from ..layers.padding import border_terms, pad_mode
from ..layers.pooling import pool_backward, pool_forward


def pool_input_grad(
    A_prev: np.ndarray, *, f: int, stride: int, mode: str, pad: int = 0, ceil: bool = False
) -> np.ndarray:
    """dA_prev of :func:`convcli.pool_forward` for an upstream gradient of ones.

    Parameters
    ----------
    A_prev : (m, n_H_prev, n_W_prev, n_C) ndarray
    f, stride : int
        The pooling window and its step.
    mode : {"max", "average"}
    pad : int
        Padding on every side, never part of a window (``hparameters["pad"]``).
    ceil : bool
        A last, partial window (``hparameters["ceil_mode"]``).

    Returns
    -------
    dA_prev : (m, n_H_prev, n_W_prev, n_C) ndarray
        ``max``: 1 at the first maximum of each window (more where windows
        overlap and share it), 0 elsewhere. ``average``: for each window
        covering a pixel, one over the window's real pixels (``f * f`` for a
        window inside the image), summed.

    Examples
    --------
    >>> A = np.array([[1.0, 3.0], [3.0, 2.0]]).reshape(1, 2, 2, 1)
    >>> pool_input_grad(A, f=2, stride=2, mode="max")[0, :, :, 0]
    array([[0., 1.],
           [0., 0.]])
    """
    hparameters = {"f": f, "stride": stride}
    if pad or ceil:
        hparameters.update(pad=pad, ceil_mode=ceil)
    Z, cache = pool_forward(A_prev, hparameters, mode)
    return pool_backward(np.ones_like(Z), cache, mode)


def conv_grads(
    A_prev: np.ndarray,
    W: np.ndarray,
    b: np.ndarray,
    hparameters: dict,
    *,
    loss: str = "sum",
    finite_only: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """dA_prev and dW of :func:`convcli.conv_forward` for L = sum(Z) or L = sum(Z**2) / 2.

    Parameters
    ----------
    A_prev, W, b, hparameters
        As for :func:`convcli.conv_forward`.
    loss : {"sum", "energy"}
        ``sum``: dZ = 1, so dA_prev counts how much each pixel adds to all
        responses; ``energy``: dZ = Z, the pixels that would most change the
        response where it is strong.
    finite_only : bool
        L sums the finite responses alone: those whose windows hold a value
        that is not finite (a missing one, NaN: GDAL's nodata) are left out
        (dZ = 0, as ``numpy.nansum``'s gradient), and such a value's own
        gradient is NaN (missing). Otherwise NaN and inf spread as the
        arithmetic takes them (every dW NaN).

    Returns
    -------
    dA_prev : ndarray, the shape of `A_prev`
    dW : ndarray, the shape of `W`
    """
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    left_out = ~np.isfinite(A_prev) if finite_only else None
    if left_out is not None and left_out.any():
        reached = conv_forward(left_out.astype(A_prev.dtype), np.abs(W) + 1, b * 0, hparameters)[0]
        A_prev = np.where(left_out, 0, A_prev).astype(A_prev.dtype, copy=False)
    else:
        left_out = reached = None
    Z, cache = conv_forward(A_prev, W, b, hparameters)
    dZ = np.ones_like(Z) if loss == "sum" else Z
    if reached is not None:
        dZ = np.where(reached > 0, 0, dZ).astype(Z.dtype, copy=False)
    dA_prev, dW, _ = conv_backward(dZ, cache)
    if left_out is not None:
        dA_prev[left_out] = np.nan
    return dA_prev, dW


def unpad_grad(dA_padded: np.ndarray, pad, *, mode: str) -> np.ndarray:
    """The gradient through :func:`convcli.pad_images`: each border value adds to its source.

    Parameters
    ----------
    dA_padded : (m, n_H + top + bottom, n_W + left + right, n_C) ndarray
        Gradient with respect to the padded images.
    pad : int or (top, bottom, left, right)
    mode : {"constant", "edge", "reflect", "symmetric", "wrap"}
        The mode the images were padded with; ``constant`` border values come
        from no pixel and are dropped.

    Returns
    -------
    dA : (m, n_H, n_W, n_C) ndarray

    Examples
    --------
    >>> g = np.ones((1, 5, 5, 1))  # a 3x3 image padded by 1: its middle row and column
    >>> unpad_grad(g, 1, mode="reflect")[0, :, :, 0]  # are copied to both sides
    array([[1., 3., 1.],
           [3., 9., 3.],
           [1., 3., 1.]])
    """
    mode = pad_mode(mode)
    top, bottom, left, right = (pad,) * 4 if np.isscalar(pad) else pad
    return _fold(_fold(dA_padded, (top, bottom), mode, axis=1), (left, right), mode, axis=2)


def _fold(grad: np.ndarray, widths: tuple[int, int], mode: str, *, axis: int) -> np.ndarray:
    """Add the border values on the ends of `axis` (`widths` before and after) to the pixels
    they read, each times its weight (:func:`convcli.layers.padding.border_terms`): a copy
    adds to the pixel it copies, a fill value comes from no pixel and is dropped."""
    before, after = widths
    if before == after == 0:
        return grad
    n = grad.shape[axis] - before - after
    terms = border_terms(n, before, after, mode)
    inner = [slice(None)] * grad.ndim
    inner[axis] = slice(before, before + n)
    out = grad[tuple(inner)].copy()
    for border in (np.r_[0:before], np.r_[before + n : before + n + after]):
        for k in range(terms.sources.shape[1]):
            used = border[terms.sources[border, k] >= 0]
            if used.size == 0:
                continue
            where = [slice(None)] * grad.ndim
            where[axis] = terms.sources[used, k]
            values = [slice(None)] * grad.ndim
            values[axis] = used
            part = grad[tuple(values)]
            weight = terms.weights[used, k]
            if np.any(weight != 1):  # a computed border: each value times its weight
                shape = [1] * grad.ndim
                shape[axis] = weight.size
                part = part * weight.astype(grad.dtype).reshape(shape)
            # np.add.at: one position may receive several border values (wrap, narrow images).
            np.add.at(out, tuple(where), part)
    return out
