"""The robust scale's percentile: numpy's number, from the largest values only."""

from __future__ import annotations

import math

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


@pytest.mark.parametrize("engine", ["native_engine", "numpy_engine"])
@settings(max_examples=80, deadline=None)
@given(
    values=st.lists(
        st.floats(width=32, allow_nan=True, allow_infinity=True)
        | st.sampled_from([0.0, -0.0, 1.0, 255.0, math.nan, -math.nan]),  # ties, NaN of either sign
        min_size=1,
        max_size=3000,
    ),
    where=st.floats(0, 1),
    gap=st.sampled_from([0, 1, 2, 50]),
)
def test_ranked_values_are_the_partitions(request, engine, values, where, gap):
    """Both engines' values of two ranks are those np.partition puts there: negative
    values, ties, infinities and NaN (last) included; the values are left unchanged."""
    from convcli.layers._engine import native

    if engine == "native_engine" and native._native is None:
        pytest.skip("the C extension was not built")
    request.getfixturevalue(engine)
    a = np.array(values, np.float32)
    before = a.copy()
    first = int(where * (a.size - 1))
    second = min(first + gap, a.size - 1)
    expected = np.partition(a, [first, second])[[first, second]]
    got = np.array(percentiles.ranked(a, first, second), np.float32)
    np.testing.assert_array_equal(got, expected)  # equal values (0.0 == -0.0), NaN where NaN
    np.testing.assert_array_equal(a, before)


def test_ranked_values_of_a_large_map_take_every_pass(native_engine):
    """86,000 magnitudes, as a photo's candidates for its top: three passes of the radix
    selection, the second rank tied with the first or the next value above it."""
    g = np.random.default_rng(5)
    a = np.abs(g.standard_normal(86_000)).astype(np.float32)
    a[:501] = a[501]  # 502 equal values
    tie = int((a < a[501]).sum())  # the rank of the first of them
    for first in (0, 40_000, 85_998, tie + 10, tie + 501):  # the last two: tied, then above
        second = first + 1
        expected = np.partition(a, [first, second])[[first, second]]
        assert percentiles.ranked(a, first, second) == tuple(expected)
    assert (
        percentiles.ranked(a, tie + 10, tie + 11)[0] == percentiles.ranked(a, tie + 10, tie + 11)[1]
    )
    low, high = percentiles.ranked(a, tie + 501, tie + 502)
    assert low == a[501] < high
