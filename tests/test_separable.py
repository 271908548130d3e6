"""Rank-1 kernels as two 1-D passes (convcli.layers._engine.separable); `kernels --check`."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
from helpers import run
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import conv_forward_loop, depthwise_conv_forward_loop

import convcli.layers.conv as conv_module
from convcli import conv_forward, depthwise_conv_forward
from convcli.kernels import get_kernel
from convcli.layers._engine import correlate, separable
from convcli.layers._engine.alignment import tile_rows
from convcli.layers._engine.separable import passes, rank_one_factors

# The numpy engines themselves (the native engine has tests/test_native.py).
pytestmark = pytest.mark.usefixtures("numpy_engine")

EPS32 = float(np.finfo(np.float32).eps)


@contextmanager
def always_separable():
    """The layers take the separable engine for every rank-1 kernel, small ones too.

    Yields the list of its calls (one entry each).
    """
    calls = []
    engine, cost = conv_module.correlate_separable, conv_module.passes
    conv_module.passes = lambda *_: 0
    conv_module.correlate_separable = lambda *a, **k: calls.append(1) or engine(*a, **k)
    try:
        yield calls
    finally:
        conv_module.correlate_separable, conv_module.passes = engine, cost


def rank_one_case(data, *, max_side=7, images=2):
    f_h = data.draw(st.integers(2, max_side), label="f_h")
    f_w = data.draw(st.integers(2, max_side), label="f_w")
    pad = data.draw(st.integers(0, 4), label="pad")
    H = data.draw(st.integers(max(1, f_h - 2 * pad), 24), label="H")
    W = data.draw(st.integers(max(1, f_w - 2 * pad), 24), label="W")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    u, v = rng.standard_normal(f_h), rng.standard_normal(f_w)
    K = np.outer(u, v).astype(np.float32)
    A = (rng.standard_normal((images, H, W, 1)) * 100).astype(np.float32)
    b = rng.standard_normal((1, 1, 1, 1)).astype(np.float32)
    return A, K[:, :, None, None], b, {"stride": 1, "pad": pad}


def within_float32_rounding(Z, A, W, b, hp, reference):
    """|Z - exact| within float32 rounding of the window's sum: eps * (f_h + f_w + 4) * sum|a w|."""
    exact = reference(A, W, b, hp)
    size = reference(np.abs(A), np.abs(W), np.abs(b), hp)
    bound = EPS32 * (W.shape[0] + W.shape[1] + 4) * size
    assert Z.shape == exact.shape and Z.dtype == np.float32
    assert np.all(np.abs(Z - exact) <= bound)


@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_conv_forward_by_two_passes_equals_the_loops(data):
    A, W, b, hp = rank_one_case(data)
    with always_separable() as calls:
        Z, cache = conv_forward(A, W, b, hp)
    assert calls  # the engine ran
    assert cache[0] is A and cache[1] is W
    within_float32_rounding(Z, A, W, b, hp, conv_forward_loop)


@given(data=st.data())
@settings(max_examples=30, deadline=None)
def test_depthwise_by_two_passes_equals_the_loops(data):
    A, W, b, hp = rank_one_case(data, images=1)
    with always_separable() as calls:
        Z, _ = depthwise_conv_forward(A, W, b, hp)
    assert calls
    within_float32_rounding(Z, A, W, b, hp, depthwise_conv_forward_loop)


def test_nan_and_inf_rows_are_the_plain_paths():
    rng = np.random.default_rng(5)
    A = rng.standard_normal((2, 30, 26, 1)).astype(np.float32)
    A[0, 12, 7, 0], A[1, 3, 20, 0], A[1, 25, 2, 0] = np.inf, np.nan, -np.inf
    W = np.outer([1.0, 2.0, 1.0, 0.5, 0.25], [1.0, -1.0, 0.0, 2.0, 1.0]).astype(np.float32)
    W = W[:, :, None, None]
    b = np.full((1, 1, 1, 1), 0.5, np.float32)
    hp = {"stride": 1, "pad": 2}
    with always_separable() as calls:
        Z, _ = conv_forward(A, W, b, hp)
    with np.errstate(invalid="ignore"):  # the loops' inf * 0
        exact = conv_forward_loop(A, W, b, hp)
    assert calls
    np.testing.assert_array_equal(np.isnan(Z), np.isnan(exact))
    np.testing.assert_array_equal(Z[np.isinf(exact)], exact[np.isinf(exact)])
    finite = np.isfinite(exact)
    assert np.isnan(exact).any() and np.isinf(exact).any() and finite.sum() > 1000
    np.testing.assert_allclose(Z[finite], exact[finite], rtol=1e-5, atol=1e-4)


def test_bands_aligned_on_the_tiles_get_the_whole_images_rows(monkeypatch, numpy_engine):
    """Large images go in strips of rows aligned on the tiles: they get the values, bit for bit."""
    rng = np.random.default_rng(2)
    A = (rng.random((1, 90, 75, 1)) * 765).astype(np.float32)
    W = np.outer(rng.random(9), rng.random(7)).astype(np.float32)[:, :, None, None]
    b = np.zeros((1, 1, 1, 1), np.float32)
    n_W = 75 - 7 + 1
    monkeypatch.setattr(separable, "TILE_VALUES", 8 * (80 + 6))  # 8 rows a tile
    assert separable.tile_rows(n_W, 7) == 8
    assert tile_rows((1, 9, 75, 1), (9, 7), 1, (0, 0, 0, 0), 1) % 8 == 0  # what strips align on
    hp = {"stride": 1, "pad": 0}
    with always_separable() as calls:
        whole, _ = conv_forward(A, W, b, hp)  # 82 rows: tiles of 8, the last of 2
        band, _ = conv_forward(A[:, 16 : 16 + 24 + 8], W, b, hp)  # rows 16..39: 3 whole tiles
        end, _ = conv_forward(A[:, 72:], W, b, hp)  # rows 72..81: to the image's end
    assert len(calls) == 3
    np.testing.assert_array_equal(band, whole[:, 16:40])
    np.testing.assert_array_equal(end, whole[:, 72:])


def test_the_choice_follows_the_cost(monkeypatch):
    calls = []
    engine = conv_module.correlate_separable
    monkeypatch.setattr(
        conv_module,
        "correlate_separable",
        lambda *a, **k: calls.append(a[1].size) or engine(*a, **k),
    )
    A = np.random.default_rng(0).random((1, 40, 40, 1)).astype(np.float32)
    b = np.zeros((1, 1, 1, 1), np.float32)
    g = np.array([1, 4, 6, 4, 1], np.float32)
    for W in (
        get_kernel("gaussian-3x3").weights,
        get_kernel("vertical").weights,
        np.outer(g, g) / 256,
        np.ones((15, 15)) / 225,
    ):
        conv_forward(A, W.astype(np.float32)[:, :, None, None], b, {"stride": 1, "pad": 1})
    assert calls == [5, 15]  # 3x3 kernels stay 2-D; 5x5 and 15x15 go separable
    calls.clear()
    W = np.ones((5, 5, 1, 1), np.float32)
    conv_forward(A.astype(np.float64), W, b, {"stride": 1, "pad": 2})  # float64: 2-D
    conv_forward(A, W, b, {"stride": 2, "pad": 2})  # strided: 2-D
    conv_forward(A, W, b, {"stride": 1, "pad": 2, "dilation": 2})  # dilated: 2-D
    conv_forward(np.repeat(A, 2, axis=3), np.repeat(W, 2, axis=2), b, {"stride": 1, "pad": 2})
    assert calls == []
    assert passes(3, 3) >= 3 * 3 + 2 and passes(5, 5) < 5 * 5 + 2


@pytest.mark.parametrize(
    "weights, expected",
    [
        (np.outer([1, 2, 1], [1, 0, -1]), ([1, 2, 1], [1, 0, -1])),
        (np.ones((31, 31)) / 961, (np.ones(31), np.full(31, 1 / 961, np.float32))),
        # Exact float32 factors: integer levels are multiplied without rounding.
        (
            np.outer([1, 4, 6, 4, 1], [1, 4, 6, 4, 1]) / 256,
            ([1, 4, 6, 4, 1], np.array([1, 4, 6, 4, 1]) / 256),
        ),
        # None exact: the column through the largest weight, divided by it.
        (np.outer([1, 3, 1], [1, 1 / 3, 2]), ([1 / 3, 1, 1 / 3], [3, 1, 6])),
    ],
)
def test_rank_one_factors(weights, expected):
    u, v = rank_one_factors(weights)
    np.testing.assert_array_equal(u, expected[0])
    np.testing.assert_allclose(v, expected[1], rtol=1e-15)
    np.testing.assert_allclose(np.outer(u, v), weights, rtol=1e-7, atol=1e-18)


def test_rank_one_within_float32_rounding_and_no_further():
    g = np.exp(-(np.linspace(-2, 2, 9) ** 2))
    K32 = np.outer(g, g).astype(np.float32).astype(np.float64)  # rounded: rank 1 within eps
    assert rank_one_factors(K32) is not None
    nudged = K32.copy()
    nudged[4, 4] *= 1 + 1e-4  # far beyond rounding
    assert rank_one_factors(nudged) is None
    for weights in (
        get_kernel("laplacian").weights,
        get_kernel("emboss").weights,
        np.zeros((3, 3)),
        np.ones((1, 5)),
        [[1.0, np.nan], [1.0, 1.0]],
    ):
        assert rank_one_factors(weights) is None


def test_rank_one_factors_kept_for_the_next_call_are_not_shared():
    weights = np.outer([1.0, 2.0, 1.0], [1.0, 0.0, -1.0])
    u, v = rank_one_factors(weights)
    u[:] = 7  # the caller's copy
    again = rank_one_factors(weights)
    np.testing.assert_array_equal(np.outer(*again), weights)
    big = np.outer(np.arange(1.0, 70.0), np.ones(70))  # past the kept size: the same rule
    assert big.size > separable.CACHED_KERNEL_WEIGHTS
    np.testing.assert_array_equal(np.outer(*rank_one_factors(big)), big)


# --- convcli kernels --check ----------------------------------------------------------------


def test_kernels_check_says_what_a_kernel_does():
    result = run("kernels", "--check", "sobel-x")
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout.splitlines() == [
        "sobel-x (3x3)",
        "sum: 0 (shows edges: a flat area gives 0, changes give the values)",
        "separable: yes (rank 1: the column 1 2 1 times the row 1 0 -1; runs as two 1-D "
        "passes where that is faster)",
        "symmetry: anti-symmetric left-right (the sign says which side is brighter); "
        "symmetric top-bottom",
        "centre: row 2, column 2 (weight 0)",
    ]


def test_kernels_check_of_a_file(tmp_path):
    path = tmp_path / "blur.txt"
    path.write_text("1/16 1/8 1/16\n1/8 1/4 1/8\n1/16 1/8 1/16\n")
    lines = run("kernels", "--check", path).stdout.splitlines()
    assert lines[0] == "blur (3x3)"
    assert lines[1].startswith("sum: 1 (keeps levels")
    assert lines[2].startswith(
        "separable: yes (rank 1: the column 1 2 1 times the row 0.0625 0.125 0.0625"
    )
    path.write_text("1 2 3\n4 5 6\n")
    assert run("kernels", "--check", path).stdout.splitlines()[1:] == [
        "sum: 21 (neither: a flat area's value is multiplied by 21)",
        "separable: no (rank above 1: runs as one 2-D pass)",
        "symmetry: none",
        "centre: none (a 2x3 grid has an even side: run it with --pad valid or --pad N)",
    ]


def test_kernels_check_without_a_kernel_is_a_usage_error():
    result = run("kernels", "--check")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.count("\n") == 1 and "--check needs a kernel" in result.stderr


@pytest.mark.parametrize("border", ["constant", "reflect"])
@pytest.mark.parametrize("channels", ["sum", "each"])
def test_a_photo_in_strips_with_a_separable_kernel(monkeypatch, border, channels):
    """The command line's strips (large images) with the separable engine: the whole result."""
    from pathlib import Path

    from test_strips import assert_strips_equal_whole

    from convcli.app import ops
    from convcli.io.images import read_image
    from convcli.kernels import Kernel

    pic = read_image(Path(__file__).parents[1] / "sample_images" / "camera.png")
    g = np.array([1, 4, 6, 4, 1, 4, 6, 4, 1], np.float64)
    op = ops.ConvOp(
        (Kernel("g9", "rank 1", np.outer(g, g) / g.sum() ** 2),), border=border, channels=channels
    )
    monkeypatch.setattr(separable, "TILE_VALUES", 1 << 16)  # tiles of 64 rows
    monkeypatch.setattr(correlate, "TILE_VALUES", 1 << 7)  # 2-D engine's tiles of 1 row
    with always_separable() as calls:
        for rows in (5, 64):
            assert_strips_equal_whole(op, pic, rows)
    assert calls
