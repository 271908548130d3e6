"""The tap engine's separable taps: a column pass then a row pass for kernels such as ``1 0 -1``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import conv_forward_loop, depthwise_conv_forward_loop

import convcli.layers._engine.depthwise as depthwise
from convcli import conv_forward, depthwise_conv_forward
from convcli.kernels import get_kernel
from convcli.layers._engine.depthwise import correlate_depthwise, separable_taps

# The numpy engines themselves (the native engine has tests/test_native.py).
pytestmark = pytest.mark.usefixtures("numpy_engine")

EPS32 = float(np.finfo(np.float32).eps)


def kernel(name: str, channels: int = 1) -> np.ndarray:
    w = get_kernel(name).weights.astype(np.float32)[:, :, None, None]
    return np.repeat(w, channels, axis=2)


@pytest.mark.parametrize("name", ["vertical", "horizontal", "prewitt-x", "sobel-x", "sobel-y"])
def test_edge_kernels_of_integer_columns_and_rows_are_separable(name):
    factors = separable_taps(kernel(name, 3), np.float32)
    assert factors is not None and len(factors) == 1
    column, row = factors[0]
    K = np.zeros(kernel(name).shape[:2])
    for i, wi in column:
        for j, wj in row:
            K[i, j] = wi * wj
    np.testing.assert_array_equal(K, kernel(name)[:, :, 0, 0])


@pytest.mark.parametrize("name", ["laplacian", "edge", "box-blur", "scharr-x", "identity"])
def test_other_kernels_keep_their_2d_taps(name):
    # Not rank 1; 1/9 weights (not a power of two); Scharr's 3 10 3 has no exact
    # integer factors through its weights; a single tap has nothing to separate.
    assert separable_taps(kernel(name), np.float32) is None


def test_a_kernel_that_differs_between_channels_keeps_its_2d_taps():
    W = kernel("vertical", 2)
    W[:, :, 1] *= 2
    assert separable_taps(W, np.float32) is None


@st.composite
def integer_rank_one_case(draw):
    f_h, f_w = draw(st.integers(2, 4)), draw(st.integers(2, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    u = rng.integers(-2, 3, f_h)
    v = rng.integers(-2, 3, f_w)
    u[rng.integers(f_h)] = 1  # never all zeros
    v[rng.integers(f_w)] = -1
    C, n_K = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    K = np.outer(u, v).astype(np.float32)
    W = np.stack([np.repeat(K[:, :, None], C, axis=2) * (k + 1) for k in range(n_K)], axis=3)
    pad, dilation = draw(st.integers(0, 2)), draw(st.integers(1, 2))
    H = draw(st.integers(dilation * (f_h - 1) + 1, 30))
    W_in = draw(st.integers(dilation * (f_w - 1) + 1, 30))
    A = rng.integers(0, draw(st.sampled_from([256, 766])), (draw(st.integers(1, 2)), H, W_in, C))
    b = rng.integers(-3, 4, (1, 1, 1, n_K * C)).astype(np.float32)
    return A, W, b, {"stride": 1, "pad": pad, "dilation": dilation}


@given(integer_rank_one_case())
@settings(max_examples=80, deadline=None)
def test_integer_samples_give_the_loops_values_bit_for_bit(case):
    """Integer samples and weights: every sum is exact in any order, so the separable
    passes give exactly what the loop (and the 2-D taps) give; also for uint8 and uint16
    inputs read in place, which must not wrap."""
    A, W, b, hp = case
    want = depthwise_conv_forward_loop(A.astype(np.float64), W, b, hp).astype(np.float32)
    unsigned = np.uint8 if A.max() < 256 else np.uint16
    for samples in (A.astype(np.float32), A.astype(unsigned)):
        Z, _ = depthwise_conv_forward(samples, W, b, hp)
        np.testing.assert_array_equal(Z, want)
    if A.shape[3] == 1 and W.shape[3] == 1:
        Z, _ = conv_forward(A.astype(np.float32), W, b[..., :1], hp)
        np.testing.assert_array_equal(
            Z, conv_forward_loop(A.astype(np.float64), W, b[..., :1], hp).astype(np.float32)
        )


def test_the_separable_passes_run_and_match_the_2d_taps(monkeypatch):
    """On a photo-sized channel in several row tiles, the tap engine takes the separable
    passes for ``vertical`` and Sobel, and their integer results are the 2-D taps'."""
    calls = []
    passes = depthwise._separable_pass
    monkeypatch.setattr(depthwise, "_separable_pass", lambda *a: calls.append(1) or passes(*a))
    A = np.random.default_rng(3).integers(0, 766, (1, 300, 411, 1)).astype(np.float32)
    bias = np.array([0.5], np.float32)
    for name in ("vertical", "sobel-x"):
        calls.clear()
        Z = correlate_depthwise(A, kernel(name), 1, 1, np.float32, bias)
        assert len(calls) > 1  # several row tiles
        with monkeypatch.context() as m:
            m.setattr(depthwise, "separable_taps", lambda *a: None)
            np.testing.assert_array_equal(
                Z, correlate_depthwise(A, kernel(name), 1, 1, np.float32, bias)
            )


@given(st.integers(0, 2**32 - 1), st.sampled_from(["vertical", "horizontal", "sobel-y"]))
@settings(max_examples=30, deadline=None)
def test_float_samples_agree_within_float32_rounding(seed, name):
    rng = np.random.default_rng(seed)
    A = (rng.standard_normal((2, 23, 19, 2)) * 100).astype(np.float32)
    W, b = kernel(name, 2), rng.standard_normal((1, 1, 1, 2)).astype(np.float32)
    hp = {"stride": 1, "pad": 1}
    Z, _ = depthwise_conv_forward(A, W, b, hp)
    exact = depthwise_conv_forward_loop(A, W, b, hp)
    size = depthwise_conv_forward_loop(np.abs(A), np.abs(W), np.abs(b), hp)
    assert np.all(np.abs(Z - exact) <= EPS32 * 8 * size)


def test_rows_a_vertical_sum_overflows_are_the_2d_taps(monkeypatch):
    """Three rows of 1.5e38 in every other column overflow the column sums (inf - inf in
    the row pass), where the 2-D taps' alternating sum stays finite: those rows come from
    the 2-D taps, the others from the passes."""
    A = np.zeros((1, 12, 10, 1), np.float32)
    A[0, 5:8, 1::2] = 1.5e38
    A[0, :3, :, 0] = np.arange(10, dtype=np.float32)
    W, zero = kernel("vertical"), np.zeros(1, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        passes_alone = np.empty((1, 1, 10, 8), np.float32)
        depthwise._separable_pass(
            passes_alone,
            A,
            depthwise.tiles.Scratch(np.float32),
            separable_taps(W, np.float32),
            1,
            8,
        )
        Z = correlate_depthwise(A, W, 1, 0, np.float32, zero)
        monkeypatch.setattr(depthwise, "separable_taps", lambda *a: None)
        want = correlate_depthwise(A, W, 1, 0, np.float32, zero)
    assert not np.isfinite(passes_alone[0, 0, 5]).all()  # the case overflows the passes
    assert np.isfinite(want).all()
    np.testing.assert_array_equal(Z, want)


@pytest.mark.parametrize("layer", [conv_forward, depthwise_conv_forward])
def test_unsigned_samples_read_in_place_with_a_first_tap_of_minus_one(layer):
    """The first tap's -1 negates the samples in the result's type: uint8 200 is -200,
    not 56 (uint8 arithmetic wraps)."""
    A = np.full((1, 5, 5, 1), 200, np.uint8)
    W = np.array([[-1.0, 0, 1]] * 3)[:, :, None, None]
    b = np.zeros((1, 1, 1, 1))
    Z, _ = layer(A, W, b, {"stride": 1, "pad": 0})
    np.testing.assert_array_equal(Z, np.zeros((1, 3, 3, 1)))
