"""The native kernels written with the CPU's vector instructions give the bits of their plain
loops (the baseline level's) and numpy's, at every vector level this CPU runs.

The channel sum of 3-channel pixels, the 8-bit levels and the values at a threshold have
loops of their own at the AVX2 level; these tests cover their ends of rows (the widths
around a vector's and the last pixels a vector loop leaves), NaN, inf and the capacity.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import built, vector_level

from convcli.layers._engine import native


def at_every_level(compute):
    """``compute()`` at each vector level, by level name."""
    results = {}
    for level in native.vector_levels():
        with vector_level(level):
            results[level] = compute()
    return results


@built
@pytest.mark.parametrize("rows", [1, 3])
def test_the_sum_of_three_channels_is_numpys_at_every_width_and_level(rows):
    rng = np.random.default_rng(rows)
    for width in [*range(41), 1023, 2400]:
        colour = rng.integers(0, 256, (1, rows, width, 3), dtype=np.uint8)
        colour[..., :5, :] = 255  # the largest sum, in the vector loop's first pixels
        expected = colour[0].sum(axis=2, dtype=np.int64)
        for level, out in at_every_level(lambda c=colour, w=width: _summed(c, w)).items():
            inside = out[0, 1 : 1 + rows, 2 : 2 + width, 0]
            np.testing.assert_array_equal(inside, expected, err_msg=f"{level}, width {width}")
            # Nothing written around it.
            assert (out[0, 0] == -7).all() and (out[0, 1 + rows :] == -7).all(), level
            assert (out[0, :, :2] == -7).all() and (out[0, :, 2 + width :] == -7).all(), level


def _summed(colour, width):
    _, rows, _, _ = colour.shape
    out = np.full((1, rows + 2, width + 5, 1), -7, np.float32)
    native.sum_channels(colour, out, top=1, left=2)
    return out


@built
def test_levels_are_numpys_at_every_level_with_nan_inf_and_halves():
    rng = np.random.default_rng(7)
    for n in [*range(70), 4099]:
        x = (rng.standard_normal(n) * rng.choice([1, 60, 1e4])).astype(np.float32)
        x[::7] = (rng.integers(0, 600, x[::7].size) + np.float32(0.5)) * rng.choice([1, -1])
        scale = np.float32(rng.choice([0.5, 1.0, 0.37]))
        expected = np.rint(np.clip(np.abs(x) * scale, 0, 255)).astype(np.uint8)
        for level, levels in at_every_level(
            lambda x=x, s=scale: native.levels_u8(x, s, 1e30)
        ).items():
            np.testing.assert_array_equal(levels, expected, err_msg=f"{level}, {n} values")
        for bad in (np.nan, np.inf, 2e30):  # anywhere: in a vector's values or the rest
            if n:
                spoiled = x.copy()
                spoiled[rng.integers(0, n)] = bad
                found = at_every_level(lambda v=spoiled, s=scale: native.levels_u8(v, s, 1e30))
                assert all(levels is None for levels in found.values()), (n, bad)


@built
@pytest.mark.parametrize("margin", [0, 1, 2])
def test_values_at_a_threshold_are_numpys_at_every_level(margin):
    rng = np.random.default_rng(margin)
    for trial in range(60):
        height, width = int(rng.integers(1, 40)), int(rng.integers(1, 90))
        x = (rng.standard_normal((height, width)) * 10).astype(np.float32)
        x[rng.integers(0, height), rng.integers(0, width)] = [np.nan, -np.inf, -0.0][trial % 3]
        threshold = float(rng.choice([0.0, 5.0, 15.0, 30.0]))
        inside = np.abs(x[margin : height - margin or None, margin : width - margin or None])
        if height <= 2 * margin or width <= 2 * margin:
            continue
        expected = inside[inside >= threshold]
        for capacity in (expected.size, max(expected.size - 1, 0), 10**6):
            found = at_every_level(
                lambda c=capacity, t=threshold, x=x: native.abs_at_least(x, margin, t, c)
            )
            for level, values in found.items():
                if capacity < expected.size:
                    assert values is None, (level, trial)
                else:
                    np.testing.assert_array_equal(values, expected, err_msg=f"{level}, {trial}")
