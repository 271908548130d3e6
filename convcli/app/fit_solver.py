"""The fit's solver: the f x f weights and bias that turn one image into another.

The loss ``L = sum((conv(A, W) + b - Y) ** 2) / 2`` is quadratic in (W, b), so
:func:`fit_kernel` minimises it by conjugate gradients with an exact line
search, preconditioned by the diagonal of the normal equations: each step
costs one :func:`convcli.conv_forward` (the response to the search
direction) and one :func:`convcli.conv_backward` (the gradient), the way a
convolution layer learns its kernel. The input is centred first (its mean
moved into the bias), which keeps the weights' sum and the bias from being
nearly the same direction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..layers.conv import conv_backward, conv_forward

GRADIENT_TOLERANCE = 1e-14
"""Converged when the (preconditioned) gradient is this fraction of the first one."""

UNEXPLAINED = 0.05
"""A relative error above this: the pair is not one kernel of that size (and a bias) apart."""


@dataclass
class Fit:
    """A learned kernel.

    Attributes
    ----------
    weights : (f_h, f_w) float64 ndarray
    bias : float
    losses : list of float
        The relative error ``||Z - Y|| / ||Y||`` before the first step and after each.
    steps : int
        Steps taken.
    stopped : str
        Why it stopped: ``"converged"`` (the gradient vanished, or the loss stopped
        improving) or ``"steps"``.
    """

    weights: np.ndarray
    bias: float
    losses: list[float] = field(default_factory=list)
    steps: int = 0
    stopped: str = "converged"

    @property
    def relative_error(self) -> float:
        return self.losses[-1]


def fit_kernel(
    A_prev: np.ndarray,
    Y: np.ndarray,
    size: tuple[int, int],
    *,
    stride: int = 1,
    dilation: int = 1,
    steps: int = 200,
    progress: Callable[[int, float], None] | None = None,
) -> Fit:
    """The kernel W and bias b whose conv_forward of `A_prev` (pad 0) is closest to `Y`.

    Parameters
    ----------
    A_prev : (m, n_H_prev, n_W_prev, 1) ndarray
        The layer's input, already padded (the pad is part of the input).
    Y : (m, n_H, n_W, 1) ndarray
        The wanted output: conv_forward's output shape for an f_h x f_w kernel.
    size : (f_h, f_w)
    stride, dilation : int
        As conv_forward's hparameters.
    steps : int
        At most this many conjugate-gradient steps.
    progress : callable, optional
        ``progress(step, relative_error)`` after each step.

    Returns
    -------
    Fit
        Least squares to float64 precision once converged (at most about
        ``f_h * f_w + 1`` steps in exact arithmetic; a few more in practice).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> A = rng.random((1, 20, 20, 1))
    >>> W = np.array([[1.0, 0, -1], [2, 0, -2], [1, 0, -1]])[:, :, None, None]
    >>> Y, _ = conv_forward(A, W, np.full((1, 1, 1, 1), 0.5), {"stride": 1, "pad": 0})
    >>> fit = fit_kernel(A, Y, (3, 3))
    >>> bool(np.allclose(fit.weights, W[:, :, 0, 0])), round(fit.bias, 6)
    (True, 0.5)
    """
    A = np.asarray(A_prev, np.float64)
    Y = np.asarray(Y, np.float64)
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    mean = float(A.mean()) if A.size else 0.0
    layer = _CentredLayer(A - mean, size, stride, dilation)
    if Y.shape != layer_output_shape(A.shape, size, stride, dilation):
        raise ValueError(
            f"Y has shape {Y.shape}, conv_forward gives "
            f"{layer_output_shape(A.shape, size, stride, dilation)}"
        )
    fit = _conjugate_gradients(layer, Y, size, steps, progress)
    # The bias of the input as given: conv(A - mean, W) + b = conv(A, W) + b - mean * sum(W).
    fit.bias -= mean * float(fit.weights.sum())
    return fit


class _CentredLayer:
    """The map the fit inverts: a convolution layer (pad 0, one kernel) on the centred input."""

    def __init__(self, A: np.ndarray, size: tuple[int, int], stride: int, dilation: int):
        self.A = A
        self.hparameters = {"stride": stride, "pad": 0, "dilation": dilation}
        self.zero_bias = np.zeros((1, 1, 1, 1))
        _, self.cache = conv_forward(A, np.zeros(size + (1, 1)), self.zero_bias, self.hparameters)

    def response(self, W: np.ndarray, b: float) -> np.ndarray:
        """conv_forward's output for the kernel `W` (f_h, f_w) and the bias `b`."""
        Z, _ = conv_forward(self.A, W[:, :, None, None], self.zero_bias, self.hparameters)
        Z += b
        return Z

    def gradient(self, R: np.ndarray, cache=None) -> tuple[np.ndarray, float]:
        """The loss's gradient (dW, db) for the residual ``R = Z - Y``."""
        _, dW, db = conv_backward(R, self.cache if cache is None else cache)
        return dW[:, :, 0, 0], float(db.sum())

    def diagonal(self, Y: np.ndarray) -> tuple[np.ndarray, float]:
        """The diagonal of the normal equations: each weight's input values squared, summed."""
        squares_cache = (np.square(self.A),) + self.cache[1:]
        diag_W, _ = self.gradient(np.ones_like(Y), squares_cache)
        return np.where(diag_W > 0, diag_W, 1.0), float(Y.size)


def _conjugate_gradients(
    layer: _CentredLayer,
    Y: np.ndarray,
    size: tuple[int, int],
    steps: int,
    progress: Callable[[int, float], None] | None,
) -> Fit:
    """:func:`fit_kernel` on the centred input, from zero weights and bias.

    Preconditioned by :meth:`_CentredLayer.diagonal`, with an exact line
    search; the residual is recomputed every ``f_h * f_w + 1`` steps.
    """
    diag_W, diag_b = layer.diagonal(Y)
    norm_Y = float(np.linalg.norm(Y)) or 1.0
    W, b = np.zeros(size), 0.0
    R = -Y  # the residual Z - Y
    losses = [float(np.linalg.norm(R)) / norm_Y]
    g_W, g_b = layer.gradient(R)
    d_W, d_b = -g_W / diag_W, -g_b / diag_b
    gMg = float(np.sum(g_W * g_W / diag_W) + g_b * g_b / diag_b)
    first = gMg
    restart = W.size + 1
    stopped, step = "steps", 0
    for step in range(1, steps + 1):
        Q = layer.response(d_W, d_b)
        qq = float(np.vdot(Q, Q))
        if qq == 0.0 or gMg <= GRADIENT_TOLERANCE**2 * first:
            step -= 1
            stopped = "converged"
            break
        alpha = -float(np.sum(g_W * d_W) + g_b * d_b) / qq
        W, b = W + alpha * d_W, b + alpha * d_b
        if step % restart == 0:  # start afresh from the exact residual, as rounding builds up
            R = layer.response(W, b) - Y
        else:
            R += alpha * Q
        losses.append(float(np.linalg.norm(R)) / norm_Y)
        if progress is not None:
            progress(step, losses[-1])
        g_W, g_b = layer.gradient(R)
        new_gMg = float(np.sum(g_W * g_W / diag_W) + g_b * g_b / diag_b)
        beta = 0.0 if step % restart == 0 else new_gMg / gMg
        gMg = new_gMg
        d_W, d_b = -g_W / diag_W + beta * d_W, -g_b / diag_b + beta * d_b
        if _stalled(losses):
            stopped = "converged"
            break
    return Fit(W, b, losses, step, stopped)


def _stalled(losses: list[float], *, window: int = 5, gain: float = 1e-13) -> bool:
    """Whether the last `window` steps improved the loss by less than `gain` of itself."""
    if losses[-1] <= 1e-12:  # float64 rounding: nothing left to learn
        return True
    if len(losses) <= window:
        return False
    return losses[-window - 1] - losses[-1] <= gain * losses[-window - 1]


def layer_output_shape(
    shape: tuple[int, ...], size: tuple[int, int], stride: int, dilation: int = 1
) -> tuple[int, ...]:
    m, h, w, c = shape
    span_h, span_w = (dilation * (n - 1) + 1 for n in size)
    return (m, (h - span_h) // stride + 1, (w - span_w) // stride + 1, c)
