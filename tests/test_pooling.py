"""Tests for convcli.layers.pooling: pool_forward/backward and the tutorial's two helpers."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from reference import (
    assert_matches,
    first_max_mask,
    numerical_gradient,
    pool_backward_loop,
    pool_backward_windows,
    pool_forward_loop,
    pool_forward_windows,
)

from convcli import (
    POOL_MODES,
    create_mask_from_window,
    distribute_value,
    pool_backward,
    pool_forward,
)
from convcli.layers.pooling import POOL_MODE_ALIASES, pool_mode

FLOATS = [np.float32, np.float64]
MODES = list(POOL_MODES)


def hp(f, stride):
    return {"f": f, "stride": stride}


def normal(seed, shape, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def quantised(seed, shape):
    """Values in {0, 1, 2, 3}: most windows hold tied maxima."""
    return np.round(np.random.default_rng(seed).random(shape) * 3)


def flat_uint8_image(seed, shape):
    """A uint8 batch with saturated and flat regions, like a photo's highlights."""
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, size=shape).astype(np.uint8)
    m, n_H, n_W, _ = shape
    image[:, : n_H // 2, : n_W // 2, :] = 255
    image[:, n_H // 2 :, n_W // 2 :, :] = 17
    image[:, :, -1, :] = 255
    return image


# --- published values ------------------------------------------------------------------------


def seed1_pool_input():
    np.random.seed(1)
    return np.random.randn(2, 5, 5, 3)


@pytest.mark.parametrize("mode", MODES)
def test_pool_forward_published_stride_1_case(mode):
    # The handout does not print A[1, 1] for this case: check the shape and the oracle.
    A_prev = seed1_pool_input()
    A, cache = pool_forward(A_prev, {"stride": 1, "f": 3}, mode=mode)
    assert A.shape == (2, 3, 3, 3)
    assert_matches(A, pool_forward_loop(A_prev, hp(3, 1), mode), np.float64)


def test_pool_forward_published_stride_2_case():
    A_prev = seed1_pool_input()
    hparameters = {"stride": 2, "f": 3}
    A, cache = pool_forward(A_prev, hparameters)
    assert A.shape == (2, 2, 2, 3)
    expected_max_0 = [
        [[1.74481176, 0.90159072, 1.65980218], [1.74481176, 1.6924546, 1.65980218]],
        [[1.13162939, 1.51981682, 2.18557541], [1.13162939, 1.6924546, 2.18557541]],
    ]
    np.testing.assert_allclose(A[0], expected_max_0, atol=5e-9)
    A, cache = pool_forward(A_prev, hparameters, mode="average")
    assert A.shape == (2, 2, 2, 3)
    expected_average_1 = [
        [[-0.17313416, 0.32377198, -0.34317572], [0.02030094, 0.14141479, -0.01231585]],
        [[0.42944926, 0.08446996, -0.27290905], [0.15077452, 0.28911175, 0.00123239]],
    ]
    np.testing.assert_allclose(A[1], expected_average_1, atol=5e-9)


def test_pool_forward_2017_edition_values():
    # The 2017 edition's write-up draws without reseeding; with np.random.seed(1)
    # before the draw its pool_forward output reproduces.
    np.random.seed(1)
    A_prev = np.random.randn(2, 4, 4, 3)
    hparameters = {"stride": 1, "f": 4}
    A, _ = pool_forward(A_prev, hparameters)
    np.testing.assert_allclose(
        A,
        [[[[1.74481176, 1.6924546, 2.10025514]]], [[[1.19891788, 1.51981682, 2.18557541]]]],
        atol=5e-9,
    )
    A, _ = pool_forward(A_prev, hparameters, mode="average")
    np.testing.assert_allclose(
        A,
        [[[[-0.09498456, 0.11180064, -0.14263511]]], [[[-0.09525108, 0.28325018, 0.33035185]]]],
        atol=5e-9,
    )


def seed1_pool_backward_case():
    np.random.seed(1)
    A_prev = np.random.randn(5, 5, 3, 2)
    hparameters = {"stride": 1, "f": 2}
    A, cache = pool_forward(A_prev, hparameters)
    dA = np.random.randn(5, 4, 2, 2)
    return A_prev, A, cache, dA


def test_pool_backward_published_values():
    A_prev, A, cache, dA = seed1_pool_backward_case()
    assert A.shape == (5, 4, 2, 2)
    assert cache[0].shape == (5, 5, 3, 2)
    assert np.isclose(np.mean(dA), 0.145713902729, rtol=1e-11)
    dA_prev1 = pool_backward(dA, cache, mode="max")
    assert type(dA_prev1) is np.ndarray
    assert dA_prev1.shape == (5, 5, 3, 2)
    np.testing.assert_allclose(
        dA_prev1[1, 1], [[0, 0], [5.05844394, -1.68282702], [0, 0]], atol=5e-9
    )
    dA_prev2 = pool_backward(dA, cache, mode="average")
    assert dA_prev2.shape == (5, 5, 3, 2)
    np.testing.assert_allclose(
        dA_prev2[1, 1],
        [[0.08485462, 0.2787552], [1.26461098, -0.25749373], [1.17975636, -0.53624893]],
        atol=5e-9,
    )


def test_pool_docstring_example():
    A = np.arange(16.0).reshape(1, 4, 4, 1)
    np.testing.assert_array_equal(pool_forward(A, hp(2, 2))[0][0, :, :, 0], [[5, 7], [13, 15]])


def test_cache_holds_the_objects_passed_in():
    A_prev = seed1_pool_input()
    hparameters = hp(2, 1)
    for mode in MODES:
        _, cache = pool_forward(A_prev, hparameters, mode)
        assert isinstance(cache, tuple) and len(cache) == 2
        assert cache[0] is A_prev
        assert cache[1] is hparameters


def test_modes_and_avg_alias():
    assert POOL_MODES == ("max", "average")
    A_prev, _, cache, dA = seed1_pool_backward_case()
    A_avg, _ = pool_forward(A_prev, hp(2, 1), mode="avg")
    A_average, _ = pool_forward(A_prev, hp(2, 1), mode="average")
    np.testing.assert_array_equal(A_avg, A_average)
    np.testing.assert_array_equal(
        pool_backward(dA, cache, mode="avg"), pool_backward(dA, cache, mode="average")
    )
    A_default, _ = pool_forward(A_prev, hp(2, 1))
    np.testing.assert_array_equal(A_default, pool_forward(A_prev, hp(2, 1), "max")[0])
    np.testing.assert_array_equal(pool_backward(dA, cache), pool_backward(dA, cache, "max"))


def test_pool_mode_names_every_mode_and_alias():
    assert [pool_mode(mode) for mode in POOL_MODES] == list(POOL_MODES)
    assert POOL_MODE_ALIASES == {"avg": "average"}
    for alias, mode in POOL_MODE_ALIASES.items():
        assert pool_mode(alias) == mode
    for bad in ("min", "Max", "", None, 1, ["max"]):
        with pytest.raises(ValueError, match=r"mode must be 'max' or 'average'.*'avg'"):
            pool_mode(bad)


# --- create_mask_from_window and distribute_value ------------------------------------------------


def test_create_mask_published_cases():
    np.random.seed(1)
    x = np.random.randn(2, 3)
    mask = create_mask_from_window(x)
    assert type(mask) is np.ndarray
    np.testing.assert_array_equal(mask, [[True, False, False], [False, False, False]])
    x = np.array([[-1, 2, 3], [2, -3, 2], [1, 5, -2]])
    y = np.array([[False, False, False], [False, False, False], [False, True, False]])
    mask = create_mask_from_window(x)
    assert mask.shape == x.shape
    np.testing.assert_array_equal(mask, y)
    np.testing.assert_array_equal(
        create_mask_from_window(np.array([[1, 3], [4, 2]])), [[False, False], [True, False]]
    )


@pytest.mark.parametrize(
    "x, expected",
    [
        ([[1, 3], [4, 4]], [[0, 0], [1, 0]]),
        ([[7, 7], [7, 7]], [[1, 0], [0, 0]]),
        ([[0, 2, 2], [2, 1, 2]], [[0, 1, 0], [0, 0, 0]]),
        ([[1, 0], [0, 1]], [[1, 0], [0, 0]]),
        ([[0, np.nan], [np.nan, 5]], [[0, 1], [0, 0]]),
        ([[-np.inf, -np.inf], [-np.inf, -np.inf]], [[1, 0], [0, 0]]),
        ([[255, 255, 255]], [[1, 0, 0]]),
    ],
)
def test_create_mask_ties_mark_only_the_first_maximum(x, expected):
    mask = create_mask_from_window(np.array(x, dtype=float))
    assert mask.dtype == bool
    np.testing.assert_array_equal(mask, np.array(expected, dtype=bool))


@given(
    shape=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    seed=st.integers(0, 2**32 - 1),
)
def test_create_mask_property_on_quantised_windows(shape, seed):
    x = quantised(seed, shape)
    x_copy = x.copy()
    mask = create_mask_from_window(x)
    assert mask.shape == x.shape and mask.dtype == bool
    assert mask.sum() == 1
    np.testing.assert_array_equal(mask, first_max_mask(x))
    assert x[mask][0] == x.max()
    np.testing.assert_array_equal(x, x_copy)


def test_create_mask_accepts_uint8_and_lists():
    np.testing.assert_array_equal(
        create_mask_from_window(np.array([[3, 255], [255, 0]], np.uint8)),
        [[False, True], [False, False]],
    )
    np.testing.assert_array_equal(create_mask_from_window([[1, 2], [0, 2]]), [[0, 1], [0, 0]])


def test_distribute_value_published_cases():
    a = distribute_value(2, (2, 2))
    assert type(a) is np.ndarray
    assert a.shape == (2, 2)
    np.testing.assert_array_equal(a, [[0.5, 0.5], [0.5, 0.5]])
    assert np.sum(a) == 2
    a = distribute_value(100, (10, 10))
    assert a.shape == (10, 10)
    assert np.sum(a) == 100


@pytest.mark.parametrize(
    "dz, shape, dtype",
    [
        (3, (1, 3), np.float64),
        (np.uint8(255), (3, 5), np.float64),
        (-1.5, [2, 3], np.float64),
        (np.float32(2.0), (4, 4), np.float32),
        (np.array([[6.0]]), (2, 3), np.float64),
        (np.float64(0.0), (1, 1), np.float64),
    ],
)
def test_distribute_value_cases(dz, shape, dtype):
    a = distribute_value(dz, shape)
    assert a.dtype == dtype
    assert a.shape == tuple(shape)
    value = float(np.asarray(dz).reshape(()))
    np.testing.assert_allclose(a, value / (shape[0] * shape[1]), rtol=1e-7)
    np.testing.assert_allclose(a.sum(), value, rtol=1e-6)


def test_pool_backward_equals_the_tutorials_loop_built_from_the_helpers():
    A_prev = quantised(3, (2, 6, 7, 2))
    hparameters = hp(3, 2)
    A, cache = pool_forward(A_prev, hparameters)
    dA = normal(4, A.shape)
    for mode in MODES:
        expected = np.zeros_like(A_prev)
        for i, h, w, c in np.ndindex(*A.shape):
            rows, cols = slice(2 * h, 2 * h + 3), slice(2 * w, 2 * w + 3)
            if mode == "max":
                mask = create_mask_from_window(A_prev[i, rows, cols, c])
                expected[i, rows, cols, c] += mask * dA[i, h, w, c]
            else:
                expected[i, rows, cols, c] += distribute_value(dA[i, h, w, c], (3, 3))
        np.testing.assert_allclose(pool_backward(dA, cache, mode), expected, rtol=1e-12)


# --- oracle ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("f", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("stride", [1, 2, 3])
def test_pool_matches_loop(stride, f, mode, dtype):
    A_prev = normal(10 * stride + f, (2, 7, 8, 3), dtype)
    A, cache = pool_forward(A_prev, hp(f, stride), mode)
    assert_matches(A, pool_forward_loop(A_prev, hp(f, stride), mode), dtype)
    dA = normal(f, A.shape, dtype)
    dA_prev = pool_backward(dA, cache, mode)
    assert_matches(dA_prev, pool_backward_loop(dA, A_prev, hp(f, stride), mode), dtype)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("m, n_C", [(1, 1), (4, 1), (1, 5), (3, 4)])
def test_pool_batch_and_channel_counts(m, n_C, mode):
    A_prev = normal(m + n_C, (m, 6, 5, n_C))
    A, cache = pool_forward(A_prev, hp(2, 2), mode)
    assert_matches(A, pool_forward_loop(A_prev, hp(2, 2), mode), np.float64)
    dA = normal(m, A.shape)
    dA_prev = pool_backward(dA, cache, mode)
    assert_matches(dA_prev, pool_backward_loop(dA, A_prev, hp(2, 2), mode), np.float64)


@pytest.mark.parametrize("mode", MODES)
def test_pool_non_contiguous_input(mode):
    big = normal(6, (2, 12, 7, 6))
    A_prev = big[:, ::-2, :, 1::2]
    dA_big = normal(7, (2, 4, 6, 6))
    A, cache = pool_forward(A_prev, hp(3, 2), mode)
    assert_matches(A, pool_forward_loop(A_prev, hp(3, 2), mode), np.float64)
    dA = np.asfortranarray(dA_big[:, :2, ::-2, ::2])
    dA_prev = pool_backward(dA, cache, mode)
    assert_matches(dA_prev, pool_backward_loop(dA, A_prev, hp(3, 2), mode), np.float64)


@st.composite
def pool_params(draw):
    f = draw(st.integers(1, 5))
    stride = draw(st.integers(1, 3))
    shape = (
        draw(st.integers(1, 3)),
        draw(st.integers(f, 10)),
        draw(st.integers(f, 10)),
        draw(st.integers(1, 3)),
    )
    seed = draw(st.integers(0, 2**32 - 1))
    kind = draw(st.sampled_from(["normal32", "normal64", "quantised", "uint8", "uint16"]))
    if kind.startswith("normal"):
        dtype = np.float32 if kind == "normal32" else np.float64
        A_prev = normal(seed, shape, dtype)
    elif kind == "quantised":
        dtype, A_prev = np.float64, quantised(seed, shape)
    elif kind == "uint8":
        dtype, A_prev = np.float64, flat_uint8_image(seed, shape)
    else:
        dtype = np.float64
        A_prev = (quantised(seed, shape) * 21845).astype(np.uint16)
    mode = draw(st.sampled_from([*POOL_MODES, *POOL_MODE_ALIASES]))
    return A_prev, hp(f, stride), mode, dtype, seed


@given(pool_params())
def test_pool_property_matches_loop(params):
    A_prev, hparameters, mode, dtype, seed = params
    A_copy = A_prev.copy()
    A, cache = pool_forward(A_prev, hparameters, mode)
    assert_matches(A, pool_forward_loop(A_prev, hparameters, mode), dtype)
    dA = normal(seed, A.shape, dtype)
    dA_copy = dA.copy()
    dA_prev = pool_backward(dA, cache, mode)
    assert_matches(dA_prev, pool_backward_loop(dA, A_prev, hparameters, mode), dtype)
    # The gradient is conserved: every window passes on all of its dA.
    np.testing.assert_allclose(dA_prev.sum(), dA.sum(dtype=np.float64), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(A_prev, A_copy)
    np.testing.assert_array_equal(dA, dA_copy)


@given(pool_params())
def test_pool_stride_is_subsampled_stride_1_and_max_bounds_average(params):
    A_prev, hparameters, mode, dtype, _ = params
    f, stride = hparameters["f"], hparameters["stride"]
    A, _ = pool_forward(A_prev, hparameters, mode)
    A1, _ = pool_forward(A_prev, hp(f, 1), mode)
    assert_matches(A, A1[:, ::stride, ::stride, :].astype(np.float64), dtype)
    A_max, _ = pool_forward(A_prev, hparameters, "max")
    A_avg, _ = pool_forward(A_prev, hparameters, "average")
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert np.all(A_max >= A_avg - tol * np.maximum(1, np.abs(A_avg)))


@given(pool_params())
def test_window_references_agree_with_the_loops(params):
    A_prev, hparameters, mode, _, seed = params
    A = pool_forward_loop(A_prev, hparameters, mode)
    np.testing.assert_allclose(pool_forward_windows(A_prev, hparameters, mode), A, atol=1e-12)
    dA = normal(seed, A.shape)
    np.testing.assert_allclose(
        pool_backward_windows(dA, A_prev, hparameters, mode),
        pool_backward_loop(dA, A_prev, hparameters, mode),
        atol=1e-12,
    )


LARGE_CASES = [
    # (shape, f, stride, data)
    ((1, 300, 310, 3), 2, 2, "uint8"),
    ((4, 101, 99, 2), 3, 1, "quantised"),
    ((200, 8, 9, 1), 3, 2, "normal64"),
    ((1, 256, 250, 4), 5, 3, "uint8"),
    ((2, 180, 170, 3), 4, 4, "normal32"),
    ((3, 64, 333, 1), 3, 2, "quantised"),
]


def _data(kind, seed, shape):
    if kind == "uint8":
        return flat_uint8_image(seed, shape), np.float64
    if kind == "quantised":
        return quantised(seed, shape), np.float64
    dtype = np.float32 if kind == "normal32" else np.float64
    return normal(seed, shape, dtype), dtype


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape, f, stride, kind", LARGE_CASES)
def test_pool_large_inputs_match_window_reference(shape, f, stride, kind, mode):
    A_prev, dtype = _data(kind, f * stride, shape)
    hparameters = hp(f, stride)
    A, cache = pool_forward(A_prev, hparameters, mode)
    assert_matches(A, pool_forward_windows(A_prev, hparameters, mode), dtype)
    dA = normal(f, A.shape, dtype)
    dA_prev = pool_backward(dA, cache, mode)
    assert_matches(dA_prev, pool_backward_windows(dA, A_prev, hparameters, mode), dtype)


# inf - inf and inf / n in the average are NaN or inf: numpy warns about the former.
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("f, stride", [(2, 2), (3, 1), (3, 2)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pool_non_finite_values_match_the_loop(seed, f, stride, mode):
    rng = np.random.default_rng(seed)
    A_prev = quantised(seed, (2, 9, 8, 3))
    specials = rng.choice([np.nan, np.inf, -np.inf], size=12)
    flat = A_prev.reshape(-1)
    flat[rng.choice(flat.size, size=12, replace=False)] = specials
    A, cache = pool_forward(A_prev, hp(f, stride), mode)
    expected = pool_forward_loop(A_prev, hp(f, stride), mode)
    # NaN matches NaN and inf matches inf of the same sign here.
    np.testing.assert_allclose(A, expected, rtol=1e-12, atol=1e-12)
    dA = normal(seed, A.shape)
    np.testing.assert_allclose(
        pool_backward(dA, cache, mode),
        pool_backward_loop(dA, A_prev, hp(f, stride), mode),
        rtol=1e-12,
        atol=1e-12,
    )


# --- numerical gradients ---------------------------------------------------------------------

GRAD_CASES = [
    # (f, stride, n_H, n_W)
    (2, 2, 4, 6),  # windows tile the input
    (3, 1, 5, 5),  # overlapping windows
    (3, 2, 6, 6),  # the last row and column are not covered
    (2, 3, 8, 7),  # gaps between windows
    (1, 1, 3, 4),
    (5, 2, 7, 5),
]


@pytest.mark.parametrize("f, stride, n_H, n_W", GRAD_CASES)
@pytest.mark.parametrize("mode", MODES)
def test_pool_backward_numerical_gradient(f, stride, n_H, n_W, mode):
    shape = (2, n_H, n_W, 2)
    rng = np.random.default_rng(f * 10 + stride)
    # Distinct values 0.1 apart, so every window has one maximum and the
    # centred difference never crosses a tie.
    A_prev = rng.permutation(np.prod(shape)).reshape(shape) * 0.1
    A, cache = pool_forward(A_prev, hp(f, stride), mode)
    G = rng.standard_normal(A.shape)

    def loss():
        return np.sum(pool_forward(A_prev, hp(f, stride), mode)[0] * G)

    numeric = numerical_gradient(loss, A_prev)
    dA_prev = pool_backward(G, cache, mode)
    np.testing.assert_allclose(dA_prev, numeric, rtol=1e-6, atol=1e-7)
    if (f, stride, n_H) == (3, 2, 6):
        np.testing.assert_array_equal(dA_prev[:, 5, :, :], 0)
        np.testing.assert_array_equal(dA_prev[:, :, 5, :], 0)
    if (f, stride) == (2, 3):
        np.testing.assert_array_equal(dA_prev[:, 2::3, :, :], 0)
        np.testing.assert_array_equal(dA_prev[:, :, 2::3, :], 0)


# --- max-pool ties ---------------------------------------------------------------------------

TIE_CASES = [
    ("quantised", 2, 2),
    ("quantised", 3, 1),
    ("quantised", 3, 2),
    ("uint8", 2, 2),
    ("uint8", 3, 1),
    ("uint8", 4, 3),
]


def _tie_input(kind, seed):
    shape = (2, 7, 8, 2)
    return quantised(seed, shape) if kind == "quantised" else flat_uint8_image(seed, shape)


@pytest.mark.parametrize("kind, f, stride", TIE_CASES)
def test_max_pool_tied_window_sends_its_gradient_to_the_first_maximum(kind, f, stride):
    A_prev = _tie_input(kind, f + stride)
    A, cache = pool_forward(A_prev, hp(f, stride), "max")
    values = normal(1, A.shape) + 2.0  # never zero
    windows_with_ties = 0
    for i, h, w, c in np.ndindex(*A.shape):
        dA = np.zeros(A.shape)
        dA[i, h, w, c] = values[i, h, w, c]
        dA_prev = pool_backward(dA, cache, "max")
        rows = slice(h * stride, h * stride + f)
        cols = slice(w * stride, w * stride + f)
        window = A_prev[i, rows, cols, c]
        windows_with_ties += np.count_nonzero(window == window.max()) > 1
        # Exactly one position receives all of the window's gradient ...
        assert np.count_nonzero(dA_prev) == 1
        assert dA_prev.sum() == values[i, h, w, c]
        # ... and it is the window's first maximum in row-major order.
        expected = np.zeros(A_prev.shape)
        expected[i, rows, cols, c] = first_max_mask(window) * values[i, h, w, c]
        np.testing.assert_array_equal(dA_prev, expected)
    assert windows_with_ties > A.size // 4  # the data really is full of ties


@pytest.mark.parametrize("kind, f, stride", TIE_CASES)
def test_max_pool_ties_conserve_the_gradient_and_match_the_loop(kind, f, stride):
    A_prev = _tie_input(kind, 10 + f)
    A, cache = pool_forward(A_prev, hp(f, stride), "max")
    dA = normal(2, A.shape)
    dA_prev = pool_backward(dA, cache, "max")
    assert dA_prev.dtype == np.float64
    assert_matches(dA_prev, pool_backward_loop(dA, A_prev, hp(f, stride), "max"), np.float64)
    np.testing.assert_allclose(dA_prev.sum(), dA.sum(), rtol=1e-12)
    # The tutorial's `x == max(x)` would pass on more than the window's dA.
    ones = pool_backward(np.ones(A.shape), cache, "max")
    assert ones.sum() == A.size


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("f", [2, 3, 4])
@pytest.mark.parametrize("n_C", [1, 3, 17])
@pytest.mark.parametrize("kind", ["quantised", "uint8", "non-finite"])
def test_max_pool_backward_when_windows_tile_the_input(f, n_C, kind):
    # f == stride, with rows and columns left over that no window covers.
    shape = (2, 3 * f + 1, 4 * f + f - 1, n_C)
    A_prev = flat_uint8_image(f, shape) if kind == "uint8" else quantised(f + n_C, shape)
    dA_shape = (2, 3, 4, n_C)
    dA = normal(n_C, dA_shape)
    if kind == "non-finite":
        rng = np.random.default_rng(f * n_C)
        flat = A_prev.reshape(-1)
        flat[rng.choice(flat.size, size=flat.size // 10, replace=False)] = np.nan
        flat[rng.choice(flat.size, size=flat.size // 10, replace=False)] = np.inf
        dA.reshape(-1)[rng.choice(dA.size, size=3, replace=False)] = [np.inf, -np.inf, np.nan]
    A, cache = pool_forward(A_prev, hp(f, f), "max")
    assert A.shape == dA_shape
    dA_prev = pool_backward(dA, cache, "max")
    np.testing.assert_array_equal(dA_prev, pool_backward_loop(dA, A_prev, hp(f, f), "max"))


def test_constant_image_gradient_goes_to_each_windows_top_left_corner():
    A_prev = np.full((1, 3, 3, 1), 4.0)
    A, cache = pool_forward(A_prev, hp(2, 1), "max")
    np.testing.assert_array_equal(A[0, :, :, 0], [[4, 4], [4, 4]])
    dA = np.array([1.0, 10.0, 100.0, 1000.0]).reshape(1, 2, 2, 1)
    dA_prev = pool_backward(dA, cache, "max")
    np.testing.assert_array_equal(dA_prev[0, :, :, 0], [[1, 10, 0], [100, 1000, 0], [0, 0, 0]])


def test_max_pool_with_nan_sends_the_gradient_to_the_first_nan():
    A_prev = np.array([[1.0, np.nan, 2.0, 3.0], [np.nan, 0.0, 5.0, 4.0]]).reshape(1, 2, 4, 1)
    A, cache = pool_forward(A_prev, hp(2, 2), "max")
    assert np.isnan(A[0, 0, 0, 0]) and A[0, 0, 1, 0] == 5.0
    dA_prev = pool_backward(np.array([2.0, 3.0]).reshape(1, 1, 2, 1), cache, "max")
    np.testing.assert_array_equal(dA_prev[0, :, :, 0], [[0, 2, 0, 0], [0, 0, 3, 0]])


# --- hand-computed cases and invariants ------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("f, stride", [(1, 1), (2, 2), (3, 1), (3, 2)])
def test_constant_image_pools_to_the_constant(mode, f, stride):
    A, _ = pool_forward(np.full((2, 6, 5, 3), -2.5), hp(f, stride), mode)
    np.testing.assert_array_equal(A, -2.5)


@pytest.mark.parametrize("mode", MODES)
def test_f1_stride1_is_identity_and_f1_stride2_subsamples(mode):
    A_prev = normal(0, (2, 5, 6, 3))
    A, cache = pool_forward(A_prev, hp(1, 1), mode)
    np.testing.assert_array_equal(A, A_prev)
    assert not np.shares_memory(A, A_prev)
    dA = normal(1, A.shape)
    np.testing.assert_array_equal(pool_backward(dA, cache, mode), dA)
    A2, _ = pool_forward(A_prev, hp(1, 2), mode)
    np.testing.assert_array_equal(A2, A_prev[:, ::2, ::2, :])


def test_average_backward_by_hand():
    A_prev = np.zeros((1, 3, 3, 1))
    _, cache = pool_forward(A_prev, hp(2, 1), "average")
    dA = np.array([4.0, 8.0, 12.0, 16.0]).reshape(1, 2, 2, 1)
    dA_prev = pool_backward(dA, cache, "average")
    np.testing.assert_array_equal(dA_prev[0, :, :, 0], [[1, 3, 2], [4, 10, 6], [3, 7, 4]])


def test_window_as_large_as_the_input():
    A_prev = normal(2, (2, 4, 4, 3))
    A, cache = pool_forward(A_prev, hp(4, 3), "max")
    assert A.shape == (2, 1, 1, 3)
    np.testing.assert_array_equal(A[:, 0, 0, :], A_prev.max(axis=(1, 2)))


def test_empty_batch_and_zero_channels():
    for shape in [(0, 5, 5, 2), (1, 5, 5, 0)]:
        for mode in MODES:
            A, cache = pool_forward(np.zeros(shape), hp(2, 2), mode)
            assert A.shape == (shape[0], 2, 2, shape[3])
            assert pool_backward(A, cache, mode).shape == shape


# --- dtypes and memory -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode", MODES)
def test_float_dtype_is_kept(dtype, mode):
    A_prev = normal(3, (2, 6, 6, 2), dtype)
    A, cache = pool_forward(A_prev, hp(2, 2), mode)
    assert A.dtype == dtype
    assert pool_backward(A, cache, mode).dtype == dtype


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16, np.int64, bool])
@pytest.mark.parametrize("mode", MODES)
def test_integer_input_pools_in_float64(dtype, mode):
    top = 1 if dtype is bool else np.iinfo(dtype).max
    A_prev = np.full((1, 6, 6, 2), top, dtype=dtype)
    A_prev[0, 0, 0, 0] = 0
    A, cache = pool_forward(A_prev, hp(3, 3), mode)
    assert A.dtype == np.float64
    if mode == "max":
        np.testing.assert_array_equal(A, float(top))
    else:
        np.testing.assert_allclose(A[0, 0, 0, 0], top * 8 / 9, rtol=1e-15)
        np.testing.assert_array_equal(A.ravel()[1:], float(top))
    dA_prev = pool_backward(np.full(A.shape, top, dtype=dtype), cache, mode)
    assert dA_prev.dtype == np.float64
    np.testing.assert_allclose(dA_prev.sum(), float(top) * A.size, rtol=1e-15)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("f, stride", [(1, 1), (2, 2), (3, 1)])
def test_inputs_not_modified_and_outputs_not_shared(mode, f, stride):
    A_prev = quantised(5, (2, 6, 6, 3))
    A_prev.flags.writeable = False
    A_copy = A_prev.copy()
    hparameters = hp(f, stride)
    A, cache = pool_forward(A_prev, hparameters, mode)
    dA = normal(6, A.shape)
    dA.flags.writeable = False
    dA_copy = dA.copy()
    dA_prev = pool_backward(dA, cache, mode)
    np.testing.assert_array_equal(A_prev, A_copy)
    np.testing.assert_array_equal(dA, dA_copy)
    assert hparameters == hp(f, stride)
    for out in (A, dA_prev):
        assert out.flags.writeable
        assert not np.shares_memory(out, A_prev) and not np.shares_memory(out, dA)


def test_helpers_do_not_modify_inputs():
    x = np.array([[1.0, 3.0], [3.0, 2.0]])
    x.flags.writeable = False
    create_mask_from_window(x)
    np.testing.assert_array_equal(x, [[1, 3], [3, 2]])
    dz = np.array(5.0)
    dz.flags.writeable = False
    out = distribute_value(dz, (2, 2))
    assert out.flags.writeable and dz == 5.0


# --- bad input -------------------------------------------------------------------------------

POOL_ERRORS = [
    # (A_prev shape, hparameters, mode, exception, match)
    ((5, 5, 3), hp(2, 2), "max", ValueError, "A_prev"),
    ((1, 1, 5, 5, 3), hp(2, 2), "max", ValueError, "A_prev"),
    ((1, 3, 5, 1), hp(4, 1), "max", ValueError, r"\bf\b"),
    ((1, 5, 3, 1), hp(4, 1), "average", ValueError, r"\bf\b"),
    ((1, 5, 5, 1), hp(0, 1), "max", ValueError, r"\bf\b"),
    ((1, 5, 5, 1), hp(-1, 1), "max", ValueError, r"\bf\b"),
    ((1, 5, 5, 1), hp(2, 0), "max", ValueError, "stride"),
    ((1, 5, 5, 1), hp(2, -3), "max", ValueError, "stride"),
    ((1, 5, 5, 1), hp(1.5, 1), "max", TypeError, r"\bf\b"),
    ((1, 5, 5, 1), hp("2", 1), "max", TypeError, r"\bf\b"),
    ((1, 5, 5, 1), hp(2, 1.5), "max", TypeError, "stride"),
    ((1, 5, 5, 1), hp(2, "1"), "max", TypeError, "stride"),
    ((1, 5, 5, 1), hp(2, None), "max", TypeError, "stride"),
    ((1, 5, 5, 1), hp(True, 1), "max", TypeError, r"\bf\b"),
    ((1, 5, 5, 1), {"stride": 1}, "max", ValueError, r"\bf\b"),
    ((1, 5, 5, 1), {"f": 2}, "max", ValueError, "stride"),
    ((1, 5, 5, 1), {}, "max", ValueError, "hparameters"),
    ((1, 5, 5, 1), {"F": 2, "stride": 1}, "max", ValueError, r"\bf\b"),
    ((1, 5, 5, 1), [2, 1], "max", TypeError, "hparameters"),
    ((1, 5, 5, 1), None, "max", TypeError, "hparameters"),
    ((1, 5, 5, 1), hp(2, 1), "min", ValueError, "mode"),
    ((1, 5, 5, 1), hp(2, 1), "Max", ValueError, "mode"),
    ((1, 5, 5, 1), hp(2, 1), "", ValueError, "mode"),
    ((1, 5, 5, 1), hp(2, 1), None, ValueError, "mode"),
    ((1, 5, 5, 1), hp(2, 1), 1, ValueError, "mode"),
    ((1, 5, 5, 1), hp(2, 1), ["max"], ValueError, "mode"),
]


@pytest.mark.parametrize("shape, hparameters, mode, exc, match", POOL_ERRORS)
def test_pool_forward_bad_input(shape, hparameters, mode, exc, match):
    with pytest.raises(exc, match=match):
        pool_forward(np.zeros(shape), hparameters, mode)


@pytest.mark.parametrize(
    "A_prev",
    [
        np.full((1, 4, 4, 1), "a"),
        np.zeros((1, 4, 4, 1), complex),
        np.zeros((1, 4, 4, 1), object),
        None,
        "image.png",
    ],
)
def test_pool_forward_non_numeric(A_prev):
    with pytest.raises(TypeError, match="A_prev"):
        pool_forward(A_prev, hp(2, 2))


def _backward_setup(mode="max"):
    A_prev = normal(0, (2, 6, 6, 3))
    return pool_forward(A_prev, hp(2, 2), mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "change",
    [
        lambda A: A[0],
        lambda A: A[None],
        lambda A: A[:, :-1],
        lambda A: A[:, :, 1:],
        lambda A: A[..., :-1],
        lambda A: A[:1],
        lambda A: np.float64(1.0),
    ],
)
def test_pool_backward_dA_wrong_shape(mode, change):
    A, cache = _backward_setup(mode)
    with pytest.raises(ValueError, match="dA"):
        pool_backward(change(A), cache, mode)


@pytest.mark.parametrize("mode", MODES)
def test_pool_backward_dA_non_numeric(mode):
    A, cache = _backward_setup(mode)
    for dA in [A.astype(complex), A.astype(str), np.full(A.shape, None)]:
        with pytest.raises(TypeError, match="dA"):
            pool_backward(dA, cache, mode)


@pytest.mark.parametrize("mode", ["min", None, "AVG"])
def test_pool_backward_unknown_mode(mode):
    A, cache = _backward_setup()
    with pytest.raises(ValueError, match="mode"):
        pool_backward(A, cache, mode)


def test_pool_backward_bad_cache():
    A, cache = _backward_setup()
    for bad in [None, list(cache), cache[:1], (*cache, None), cache[0]]:
        with pytest.raises(TypeError, match="cache"):
            pool_backward(A, bad)
    with pytest.raises(ValueError, match=r"\bf\b"):
        pool_backward(A, (cache[0], {"stride": 2}))
    with pytest.raises(ValueError, match="A_prev"):
        pool_backward(A, (cache[0][0], cache[1]))


@pytest.mark.parametrize(
    "x, exc",
    [
        (np.zeros((0, 2)), ValueError),
        (np.zeros((2, 0)), ValueError),
        (np.full((2, 2), "a"), TypeError),
        (np.zeros((2, 2), complex), TypeError),
        (None, TypeError),
    ],
)
def test_create_mask_bad_input(x, exc):
    with pytest.raises(exc, match=r"\bx\b"):
        create_mask_from_window(x)


@pytest.mark.parametrize(
    "dz, shape, exc, match",
    [
        (1.0, (2,), ValueError, "shape"),
        (1.0, (2, 2, 2), ValueError, "shape"),
        (1.0, 4, ValueError, "shape"),
        (1.0, "22", ValueError, "shape"),
        (1.0, (0, 2), ValueError, "shape"),
        (1.0, (2, -1), ValueError, "shape"),
        (1.0, (1.5, 2), TypeError, "shape"),
        (1.0, (2, "2"), TypeError, "shape"),
        (np.ones(2), (2, 2), ValueError, "dz"),
        (np.ones(0), (2, 2), ValueError, "dz"),
        ("1", (2, 2), TypeError, "dz"),
        (None, (2, 2), TypeError, "dz"),
        (1j, (2, 2), TypeError, "dz"),
    ],
)
def test_distribute_value_bad_input(dz, shape, exc, match):
    with pytest.raises(exc, match=match):
        distribute_value(dz, shape)


# --- empty inputs, absurd strides, non-finite values --------------------------------------------


def test_pool_input_without_rows_is_refused_naming_f():
    with pytest.raises(ValueError, match=r'hparameters\["f"\] = 1 is larger than the input size 0'):
        pool_forward(np.zeros((1, 0, 5, 1)), {"f": 1, "stride": 1})


@pytest.mark.parametrize("shape", [(1, 0, 5, 1), (2, 5, 0, 3), (1, 0, 0, 1)])
@pytest.mark.parametrize("mode", POOL_MODES)
def test_padded_pool_input_without_rows_or_columns_is_refused_naming_f(shape, mode):
    # Padding is never part of a window: a window over the padding alone would have
    # no pixels (a max of -inf, a mean of 0 / 0).
    with pytest.raises(ValueError, match=r'hparameters\["f"\] = 2 is larger than the input size 0'):
        pool_forward(np.zeros(shape), {"f": 2, "stride": 1, "pad": 1}, mode)
    with pytest.raises(ValueError, match=r'hparameters\["f"\] = 2'):
        pool_backward(np.ones((1, 1, 1, 1)), (np.zeros(shape), {"f": 2, "stride": 1, "pad": 1}))


@pytest.mark.parametrize("stride", [10**6, 2**63])
@pytest.mark.parametrize("mode", POOL_MODES)
def test_pool_huge_stride_takes_the_first_window(stride, mode):
    A = np.arange(16.0).reshape(1, 4, 4, 1)
    P, cache = pool_forward(A, {"f": 2, "stride": stride}, mode)
    assert P.shape == (1, 1, 1, 1)
    assert P[0, 0, 0, 0] == (5.0 if mode == "max" else 2.5)
    dA = pool_backward(np.ones_like(P), cache, mode)
    assert dA.shape == A.shape and dA.sum() == 1.0


@pytest.mark.parametrize("mode", POOL_MODES)
def test_pool_non_finite_input_emits_no_warnings(mode):
    A = np.zeros((1, 4, 4, 2))
    A[0, 0, 0, 0], A[0, 1, 1, 1], A[0, 3, 3, 0] = np.inf, -np.inf, np.nan  # warnings are errors
    P, cache = pool_forward(A, {"f": 2, "stride": 1}, mode)
    dA = pool_backward(np.full_like(P, np.inf), cache, mode)
    assert dA.shape == A.shape


# --- padding and ceil mode ---------------------------------------------------------------------


@st.composite
def padded_pool_params(draw):
    f, stride = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    pad, ceil_mode = draw(st.integers(0, f // 2)), draw(st.booleans())
    shape = (
        draw(st.integers(1, 2)),
        draw(st.integers(max(1, f - 2 * pad), 11)),
        draw(st.integers(max(1, f - 2 * pad), 11)),
        draw(st.integers(1, 3)),
    )
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # Few distinct values, negative ones included: ties, and windows whose real values
    # are all below the padding's zero.
    A = rng.integers(-3, 2, shape).astype(dtype)
    hparameters = {"f": f, "stride": stride, "pad": pad, "ceil_mode": ceil_mode}
    return A, hparameters, draw(st.sampled_from(POOL_MODES)), rng


@given(padded_pool_params())
def test_pad_and_ceil_mode_match_the_loops(params):
    A, hparameters, mode, rng = params
    out, cache = pool_forward(A, hparameters, mode)
    assert_matches(out, pool_forward_loop(A, hparameters, mode), A.dtype)
    dA = rng.standard_normal(out.shape).astype(A.dtype)
    dA_prev = pool_backward(dA, cache, mode)
    assert dA_prev.shape == A.shape
    assert_matches(dA_prev, pool_backward_loop(dA, A, hparameters, mode), A.dtype)
    if mode == "max":  # every window's gradient reaches one real pixel
        np.testing.assert_allclose(dA_prev.sum(), dA.sum(), rtol=1e-5, atol=1e-5)


def test_pad_and_ceil_hand_computed():
    A = np.arange(1.0, 10.0).reshape(1, 3, 3, 1) * -1  # all below the padding's zero
    hp = {"f": 2, "stride": 2, "pad": 1}
    out, _ = pool_forward(A, hp, "max")
    np.testing.assert_array_equal(out[0, :, :, 0], [[-1, -2], [-4, -5]])
    out, _ = pool_forward(A, hp, "average")  # the real pixels only
    np.testing.assert_array_equal(out[0, :, :, 0], [[-1, -2.5], [-5.5, -7]])
    out, _ = pool_forward(A, {"f": 2, "stride": 2, "ceil_mode": True}, "max")
    np.testing.assert_array_equal(out[0, :, :, 0], [[-1, -3], [-7, -9]])


def test_ceil_mode_last_window_starts_inside_the_input_or_left_pad():
    # 5 values, f 2, stride 3, pad 1: windows at -1, 2 and 5; the one at 5 starts in the
    # right padding, so ceil mode keeps 2 windows, as floor mode does.
    A = np.ones((1, 5, 5, 1))
    hp = {"f": 2, "stride": 3, "pad": 1}
    assert pool_forward(A, {**hp, "ceil_mode": True})[0].shape == (1, 2, 2, 1)
    assert pool_forward(A, {"f": 2, "stride": 2, "ceil_mode": True})[0].shape == (1, 3, 3, 1)


@pytest.mark.parametrize("value", [np.nan, -np.inf])
def test_padding_never_wins_a_max(value):
    A = np.full((1, 2, 2, 1), value)
    out, cache = pool_forward(A, {"f": 2, "stride": 2, "pad": 1}, "max")
    np.testing.assert_array_equal(np.isnan(out), np.isnan(value))
    if np.isnan(value):
        return
    np.testing.assert_array_equal(out, -np.inf)


def test_padded_max_window_of_minus_inf_sends_its_gradient_to_its_first_pixel():
    # Each window holds one pixel, all -inf: three windows start in the padding, the
    # last at its pixel; every one sends its gradient to its pixel, as PyTorch does.
    A = np.full((1, 2, 2, 1), -np.inf)
    _, cache = pool_forward(A, {"f": 2, "stride": 2, "pad": 1}, "max")
    dA = np.array([1.0, 2.0, 3.0, 4.0]).reshape(1, 2, 2, 1)
    np.testing.assert_array_equal(pool_backward(dA, cache, "max"), dA)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "f, stride, pad, ceil_mode",
    [(3, 1, 1, False), (2, 2, 1, True), (4, 3, 2, True), (5, 2, 2, False)],
)
def test_padded_max_pool_gradient_of_minus_inf_windows_is_conserved(
    f, stride, pad, ceil_mode, dtype
):
    rng = np.random.default_rng(f * 100 + stride * 10 + pad)
    A = rng.integers(-2, 2, (2, 9, 8, 3)).astype(dtype)
    A[:, :5, :4] = -np.inf  # whole windows of -inf, starting in the padding and not
    A[1, 6:, 5:, 1] = -np.inf
    hparameters = {"f": f, "stride": stride, "pad": pad, "ceil_mode": ceil_mode}
    out, cache = pool_forward(A, hparameters, "max")
    assert np.isneginf(out).any()
    dA = rng.standard_normal(out.shape).astype(dtype)
    dA_prev = pool_backward(dA, cache, "max")
    assert_matches(dA_prev, pool_backward_loop(dA, A, hparameters, "max"), dtype)
    np.testing.assert_allclose(dA_prev.sum(), dA.sum(), rtol=1e-5)


@pytest.mark.parametrize(
    "hparameters, error, message",
    [
        (
            {"f": 3, "stride": 1, "pad": 2},
            ValueError,
            r'hparameters\["pad"\] = 2 is more than half',
        ),
        ({"f": 2, "stride": 1, "pad": -1}, ValueError, r'hparameters\["pad"\]'),
        ({"f": 2, "stride": 1, "ceil_mode": "yes"}, TypeError, r'hparameters\["ceil_mode"\]'),
        ({"f": 9, "stride": 1, "pad": 1}, ValueError, r'hparameters\["f"\] = 9 is larger'),
    ],
)
def test_pad_and_ceil_mode_bad_values_name_the_key(hparameters, error, message):
    with pytest.raises(error, match=message):
        pool_forward(np.ones((1, 5, 5, 1)), hparameters)


try:
    import torch
    import torch.nn.functional as torch_functional
except ImportError:  # torch comes with the bench extra
    torch = None


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed (the bench extra)")
@pytest.mark.parametrize("mode", POOL_MODES)
@pytest.mark.parametrize(
    "f, stride, pad, ceil_mode",
    [(2, 2, 1, False), (3, 2, 1, True), (2, 3, 1, True), (3, 3, 0, True)],
)
def test_pad_and_ceil_mode_match_torch(mode, f, stride, pad, ceil_mode):
    A = np.random.default_rng(f * 10 + stride).standard_normal((2, 8, 7, 3))
    hparameters = {"f": f, "stride": stride, "pad": pad, "ceil_mode": ceil_mode}
    out, cache = pool_forward(A, hparameters, mode)
    x = torch.tensor(A.transpose(0, 3, 1, 2), requires_grad=True)
    if mode == "max":
        y = torch_functional.max_pool2d(x, f, stride, pad, ceil_mode=ceil_mode)
    else:
        y = torch_functional.avg_pool2d(x, f, stride, pad, ceil_mode, count_include_pad=False)
    np.testing.assert_allclose(y.detach().numpy().transpose(0, 2, 3, 1), out, rtol=1e-12)
    dA = np.random.default_rng(1).standard_normal(out.shape)
    y.backward(torch.tensor(dA.transpose(0, 3, 1, 2)))
    dA_prev = pool_backward(dA, cache, mode)
    np.testing.assert_allclose(x.grad.numpy().transpose(0, 2, 3, 1), dA_prev, rtol=1e-12)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "f, stride, pad, ceil_mode",
    [(2, 2, 1, False), (3, 2, 1, True), (2, 3, 0, True), (4, 3, 2, True)],
)
def test_pad_and_ceil_mode_numerical_gradient(mode, f, stride, pad, ceil_mode):
    shape = (2, 7, 6, 2)
    rng = np.random.default_rng(f * 10 + stride + pad)
    # Distinct negative values: every window has one maximum, below the padding's zero.
    A_prev = -1 - rng.permutation(np.prod(shape)).reshape(shape) * 0.1
    hparameters = {"f": f, "stride": stride, "pad": pad, "ceil_mode": ceil_mode}
    A, cache = pool_forward(A_prev, hparameters, mode)
    G = rng.standard_normal(A.shape)

    def loss():
        return np.sum(pool_forward(A_prev, hparameters, mode)[0] * G)

    numeric = numerical_gradient(loss, A_prev)
    np.testing.assert_allclose(pool_backward(G, cache, mode), numeric, rtol=1e-6, atol=1e-7)


# --- max pooling's claims kept in the cache ----------------------------------------------------


@pytest.mark.parametrize("f", [2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool_cache_is_the_tutorials_tuple_and_gives_the_same_gradient(f, dtype):
    rng = np.random.default_rng(f)
    A = rng.integers(0, 3, (2, 3 * f + 1, 4 * f + 2, 3)).astype(dtype)  # ties everywhere
    A[0, 1, 1, 0] = A[1, f, 2 * f, 2] = np.nan
    hparameters = {"f": f, "stride": f}
    out, cache = pool_forward(A, hparameters, "max")
    assert cache == (A, hparameters) and isinstance(cache, tuple) and len(cache) == 2
    A_cached, hp_cached = cache
    assert A_cached is A and hp_cached is hparameters
    dA = rng.standard_normal(out.shape).astype(dtype)
    kept = pool_backward(dA, cache, "max")  # from the claims found by pool_forward
    found = pool_backward(dA, (A, hparameters), "max")  # finds them again
    np.testing.assert_array_equal(kept, found)
    assert_matches(kept, pool_backward_loop(dA, A, hparameters, "max"), dtype)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(cache))[0], A)


def test_max_pool_claims_are_not_used_for_other_windows():
    A = np.random.default_rng(3).standard_normal((1, 8, 8, 2))
    _, cache = pool_forward(A, {"f": 2, "stride": 2}, "max")
    cache[1]["f"] = cache[1]["stride"] = 4  # the dict the caller passed, changed since
    out4, _ = pool_forward(A, cache[1], "max")
    dA = np.ones(out4.shape)
    np.testing.assert_array_equal(
        pool_backward(dA, cache, "max"), pool_backward_loop(dA, A, cache[1], "max")
    )
