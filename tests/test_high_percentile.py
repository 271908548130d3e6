"""The robust scale's percentile: numpy's number, from the largest values only."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convcli.levels import _high_percentile, robust_top


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 300_000), kind=st.sampled_from(["normal", "levels", "sparse", "heavy"]),
       percentile=st.sampled_from([99.5, 99.9, 99.0, 100.0, 97.0, 50.0, 0.0]),
       seed=st.integers(0, 2**32 - 1))
def test_equals_numpy_percentile(size, kind, percentile, seed):
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
    a = a.astype(np.float32)
    assert _high_percentile(a.copy(), percentile) == np.percentile(a, percentile)


def test_an_unlucky_sample_falls_back_to_the_whole_array():
    """The sample holds the largest values: too few of them are above its threshold."""
    a = np.zeros(1 << 17, np.float32)
    a[::64] = np.linspace(1, 2, a[::64].size)  # the sample is a[::64]
    assert _high_percentile(a.copy(), 99.5) == np.percentile(a, 99.5)


def test_robust_top_of_a_large_map():
    x = np.random.default_rng(1).standard_normal((600, 500)).astype(np.float32)
    interior = np.abs(x[5:-5, 5:-5])
    assert robust_top(x, margin=5) == pytest.approx(float(np.percentile(interior, 99.5)), rel=0)
