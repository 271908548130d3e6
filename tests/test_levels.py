"""Result values to image levels, and colour to grey."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from convcli.levels.mapping import MAPPINGS, luminance, map_levels, to_levels


def test_luminance_matches_pillow_convert_l():
    rgb = np.random.default_rng(1).integers(0, 256, size=(5, 6, 3), dtype=np.uint8)
    ours = luminance(rgb.astype(np.float32))
    pillow = np.asarray(Image.fromarray(rgb).convert("L")).astype(np.float32)
    assert ours.shape == (5, 6, 1)
    assert np.abs(ours[:, :, 0] - pillow).max() <= 1.0


def test_to_levels_methods():
    x = np.array([[-510.0, 0.0, 255.0]])
    assert to_levels(x, "abs", white=255, depth=8).tolist() == [[255, 0, 128]]
    assert to_levels(x, "minmax", white=255, depth=8).tolist() == [[0, 170, 255]]
    assert to_levels(x, "clip", white=255, depth=8).tolist() == [[0, 0, 255]]
    assert to_levels(x, "offset", white=255, depth=8).tolist() == [[0, 128, 191]]
    sixteen = to_levels(x, "abs", white=65535, depth=16)
    assert sixteen.dtype == np.uint16 and sixteen.tolist() == [[65535, 0, 32768]]


def test_to_levels_constant_and_nan_input():
    zeros = np.zeros((2, 2))
    for method in MAPPINGS:
        levels = to_levels(zeros, method, white=255, depth=8)
        assert levels.dtype == np.uint8
    assert to_levels(zeros, "offset", white=255, depth=8)[0, 0] == 128
    assert to_levels(np.array([np.nan, 10.0]), "clip", white=255, depth=8).tolist() == [0, 10]
    with pytest.raises(ValueError, match="method"):
        to_levels(zeros, "gamma", white=255, depth=8)


@pytest.mark.parametrize("method", MAPPINGS)
@pytest.mark.parametrize("depth", [8, 16])
def test_to_levels_infinite_and_huge_values_emit_no_warnings(method, depth):
    x = np.array([[-np.inf, 0.0, np.inf, 1e300, np.nan]])  # warnings are errors here
    levels = to_levels(x, method, white=1e-300, depth=depth)
    top = 255 if depth == 8 else 65535
    assert levels.shape == x.shape
    assert levels[0, 4] == levels[0, 1]  # NaN is mapped to 0
    if method in ("abs", "minmax"):
        assert levels[0, 2] == top


def test_to_levels_and_luminance_refuse_bad_arguments():
    with pytest.raises(TypeError, match="values"):
        to_levels(np.array([1j]), "abs", white=255, depth=8)
    with pytest.raises(ValueError, match="depth"):
        to_levels(np.zeros(2), "abs", white=255, depth=12)
    with pytest.raises(TypeError, match="white"):
        to_levels(np.zeros(2), "clip", white="255", depth=8)
    with pytest.raises(ValueError, match="pixels"):
        luminance(np.zeros((2, 2, 0)))
    with pytest.raises(TypeError, match="pixels"):
        luminance(np.zeros((2, 2, 3), object))


def test_luminance_of_huge_values_is_inf_without_warnings():
    assert luminance(np.full((1, 1, 3), 1e300))[0, 0, 0] == np.inf


def test_robust_mapping_scales_by_a_percentile_away_from_the_border():
    from convcli.levels.mapping import robust_top

    x = np.zeros((50, 50))
    x[10:40, 25] = 10.0  # a sparse edge: 30 of 2500 pixels
    x[20, 30] = 1000.0  # one outlier
    x[0, :] = 500.0  # a bright frame row (2% of the pixels)
    assert robust_top(x) == 500.0  # counted over everything, the frame decides
    assert robust_top(x, margin=3) == 10.0
    levels = to_levels(x, "robust", white=255, depth=8, margin=3)
    assert levels[15, 25] == 255 and levels[20, 30] == 255 and levels[5, 5] == 0
    assert to_levels(-x, "robust", white=255, depth=8, margin=3)[15, 25] == 255  # |x|
    # Too small for the margin: counted over everything; all zeros: black.
    assert robust_top(np.array([[3.0, -4.0]]), margin=3) == pytest.approx(3.995)
    assert to_levels(np.zeros((3, 3)), "robust", white=255, depth=8).max() == 0
    assert robust_top(np.array([np.nan, np.inf])) == 1.0


@pytest.mark.parametrize("margin", [1, 2, 4])
@pytest.mark.parametrize("extra_columns", [0, 7])  # square maps, and maps wider than high
def test_robust_percentile_at_twice_the_margin_and_one_pixel_more(margin, extra_columns):
    from convcli.levels.mapping import map_levels, robust_top

    g = np.random.default_rng(20 + margin)
    rows = 2 * margin  # the margins would leave nothing: the whole map counts
    whole = g.normal(scale=10.0, size=(rows, rows + extra_columns))
    rows = 2 * margin + 1  # the margins leave one row: it alone counts
    one_row = g.normal(scale=10.0, size=(rows, rows + extra_columns))
    one_row[0, 0] = 1000.0  # a border value, which moves the whole map's percentile
    cases = [(whole, np.abs(whole)), (one_row, np.abs(one_row[margin, margin:-margin]))]
    for x, counted in cases:
        expected = np.percentile(counted, 99.5)
        assert robust_top(x, margin=margin) == pytest.approx(expected, rel=1e-12)
        assert robust_top(x[:, :, None], margin=margin) == pytest.approx(expected, rel=1e-12)
        _, scale = map_levels(x, "robust", white=255.0, depth=8, margin=margin)
        assert scale.scale == pytest.approx(255 / expected, rel=1e-6)
    assert np.percentile(np.abs(one_row), 99.5) > 2 * np.percentile(cases[1][1], 99.5)


@pytest.mark.parametrize("zero", [0.0, -0.0])
def test_minmax_offset_is_positive_zero_whichever_zero_is_the_minimum(zero):
    """numpy's min of 0.0 and -0.0 is either, by the layout: the offset does not show it."""
    x = np.array([[zero, 1.0, 2.0], [0.0, -0.0, 3.0]], np.float32)
    for values in (x, x.T.copy(), x[::-1].copy()):
        _, scale = map_levels(values, "minmax", white=255, depth=8)
        assert scale.offset == 0.0 and not np.signbit(scale.offset)


def test_a_mapping_name_without_its_rule_fails_when_the_module_loads(monkeypatch):
    # A name added to the mappings alone fell into the clip and offset branches and
    # recorded an offset never applied.
    from convcli.levels import mapping

    monkeypatch.setattr(mapping, "MAPPINGS", (*mapping.MAPPINGS, "gamma"))
    with pytest.raises(ImportError, match=r"no rule for \['gamma'\]"):
        mapping._check_rules()
    monkeypatch.setattr(mapping, "MAPPINGS", tuple(m for m in mapping.MAPPINGS if m != "gamma"))
    monkeypatch.delitem(mapping.RULES, "offset")
    with pytest.raises(ImportError, match=r"no rule for \['offset'\]"):
        mapping._check_rules()


def test_every_mapping_records_the_offset_its_levels_add():
    from convcli.levels.mapping import MAPPINGS, map_levels

    x = np.array([[-3.0, 0.5, 2.0, 7.5]], np.float32)
    for method in MAPPINGS:
        levels, scale = map_levels(x, method, white=8.0, depth=8)
        base = np.abs(x) if scale.absolute else x
        expected = np.clip(np.rint(scale.scale * base.astype(np.float64) + scale.offset), 0, 255)
        np.testing.assert_allclose(levels, expected, atol=1, err_msg=method)
