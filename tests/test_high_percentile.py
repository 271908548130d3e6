"""The robust scale's percentile: numpy's number, from the largest values only."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convcli.levels import mapping as levels
from convcli.levels import percentiles
from convcli.levels.percentiles import _high_percentile, robust_top


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(1, 300_000),
    kind=st.sampled_from(["normal", "levels", "sparse", "heavy"]),
    percentile=st.sampled_from([99.5, 99.9, 99.0, 100.0, 97.0, 50.0, 0.0, 99.87, 99.95]),
    dtype=st.sampled_from([np.float32, np.float64]),
    inside=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_equals_numpy_percentile(size, kind, percentile, dtype, inside, seed):
    g = np.random.default_rng(seed)
    if kind == "normal":
        a = np.abs(g.standard_normal(size))
    elif kind == "levels":  # many ties
        a = g.integers(0, 4, size).astype(np.float64)
    elif kind == "sparse":  # mostly zeros, as edge maps of flat pictures
        a = np.zeros(size)
        a[g.integers(0, size, 1 + size // 1000)] = g.random(1 + size // 1000)
    else:
        a = np.abs(g.standard_cauchy(size))
    a = a.astype(dtype)
    if inside and size >= 100:  # the inside of a map: a strided view, as map_levels passes it
        width = max(1, int(np.sqrt(size)))
        a = a[: size - size % width].reshape(-1, width)[1:-1, 2:-3]
    before = a.copy()
    got = _high_percentile(a, percentile)
    want = np.percentile(a, percentile)
    assert got == want and type(got) is float
    np.testing.assert_array_equal(a, before)  # left unchanged


def test_an_unlucky_sample_falls_back_to_the_whole_array():
    """The sample holds the largest values: too few of them are above its threshold."""
    a = np.zeros(1 << 17, np.float32)
    a[::64] = np.linspace(1, 2, a[::64].size)  # the sample is a[::64]
    assert _high_percentile(a.copy(), 99.5) == np.percentile(a, 99.5)


def test_robust_top_of_a_large_map():
    x = np.random.default_rng(1).standard_normal((600, 500)).astype(np.float32)
    interior = np.abs(x[5:-5, 5:-5])
    assert robust_top(x, margin=5) == pytest.approx(float(np.percentile(interior, 99.5)), rel=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("percentile", [99.5, 99.9, 99.13, 98.0])
@pytest.mark.parametrize("kind", ["normal", "levels", "heavy"])
def test_large_maps_take_the_sample_and_equal_numpy(monkeypatch, dtype, percentile, kind):
    g = np.random.default_rng(int(percentile * 100))
    shape = (900, 1100)
    if kind == "normal":
        x = g.standard_normal(shape)
    elif kind == "levels":
        x = g.integers(-6, 7, shape).astype(np.float64)
    else:
        x = g.standard_cauchy(shape)
    a = np.abs(x.astype(dtype))[4:-4, 4:-4]  # the inside of a map: a view
    want = np.percentile(a, percentile)

    def whole_array(*args, **kwargs):  # the fallback: not expected here
        raise AssertionError("the whole array was taken")

    monkeypatch.setattr(percentiles, "_whole_percentile", whole_array)
    assert _high_percentile(a, percentile) == want


@settings(max_examples=40, deadline=None)
@given(
    shape=st.tuples(st.integers(260, 420), st.integers(300, 700)),
    kind=st.sampled_from(["normal", "levels", "sparse", "zeros", "heavy"]),
    bad=st.sampled_from([None, np.nan, np.inf, -np.inf, 1e38, -3e38]),
    bad_inside=st.booleans(),
    margin=st.integers(0, 6),
    rows_bytes=st.sampled_from([4, 1 << 12, 1 << 19]),
    seed=st.integers(0, 2**32 - 1),
)
def test_robust_levels_by_rows_are_the_whole_map_levels(
    shape, kind, bad, bad_inside, margin, rows_bytes, seed
):
    """8-bit robust levels a block of rows at a time: the whole-map passes' levels and scale;
    NaN, inf and huge values, inside or in the margin, are left to the whole-map passes."""
    g = np.random.default_rng(seed)
    x = {
        "normal": lambda: g.standard_normal(shape) * 40,
        "levels": lambda: g.integers(-3, 4, shape).astype(float),
        "sparse": lambda: np.where(g.random(shape) < 0.01, g.standard_normal(shape) * 90, 0),
        "zeros": lambda: np.zeros(shape),
        "heavy": lambda: g.standard_cauchy(shape),
    }[kind]().astype(np.float32)
    if bad is not None:
        x[(shape[0] // 2, shape[1] // 3) if bad_inside else (0, shape[1] - 1)] = bad
    before = x.copy()
    big = float(np.finfo(np.float32).max) / 4
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(levels, "_ROWS_BYTES", rows_bytes)
        by_rows = levels._robust_bytes_by_rows(x, margin, big)
        got = levels.map_levels(x, "robust", white=255, depth=8, margin=margin)
        patch.setattr(levels, "_robust_bytes_by_rows", lambda *args: None)
        want = levels.map_levels(x, "robust", white=255, depth=8, margin=margin)
    assert (by_rows is None) == (bad is not None)
    for levels_and_scale in [got] + ([by_rows] if by_rows is not None else []):
        np.testing.assert_array_equal(levels_and_scale[0], want[0])
        assert levels_and_scale[0].dtype == np.uint8 and levels_and_scale[1] == want[1]
    np.testing.assert_array_equal(x, before)
