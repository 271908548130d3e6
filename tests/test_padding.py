"""Tests for convcli.layers.padding: zero_pad and pad_images."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from reference import pad_loop

from convcli import PAD_MODES, pad_images, zero_pad
from convcli.layers.padding import (
    NP_PAD_ARGUMENTS,
    border_copies,
    border_terms,
    fill_border,
    pad_images_as,
)

# The row "a b c d" (here 1 2 3 4) padded by 2 on each side, by hand.
ROW_PADDED_BY_2 = {
    "constant": [0, 0, 1, 2, 3, 4, 0, 0],
    "edge": [1, 1, 1, 2, 3, 4, 4, 4],
    "reflect": [3, 2, 1, 2, 3, 4, 3, 2],
    "symmetric": [2, 1, 1, 2, 3, 4, 4, 3],
    "wrap": [3, 4, 1, 2, 3, 4, 1, 2],
}


def batch(seed, shape=(2, 4, 5, 3), dtype=np.float64):
    """A seeded random batch."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 10).astype(dtype)


# --- zero_pad: the tutorial's published cases ---------------------------------------------


def test_zero_pad_published_pad_2():
    np.random.seed(1)
    x = np.random.randn(4, 3, 3, 2)
    x_pad = zero_pad(x, 2)
    assert type(x_pad) is np.ndarray
    assert x.shape == (4, 3, 3, 2)
    assert x_pad.shape == (4, 7, 7, 2)
    np.testing.assert_allclose(
        x[1, 1],
        [[0.90085595, -0.68372786], [-0.12289023, -0.93576943], [-0.26788808, 0.53035547]],
        atol=5e-9,
    )
    np.testing.assert_array_equal(x_pad[1, 1], np.zeros((7, 2)))


def test_zero_pad_published_pad_3():
    np.random.seed(1)
    x = np.random.randn(4, 3, 3, 2)
    x_pad = zero_pad(x, 3)
    assert x_pad.shape == (4, 9, 9, 2)
    np.testing.assert_array_equal(x_pad[0, 0:2, :, 0], np.zeros((2, 9)))
    np.testing.assert_array_equal(x_pad[0, :, 7:9, 1].T, np.zeros((2, 9)))
    np.testing.assert_array_equal(x_pad[:, 3:6, 3:6, :], x)


def test_zero_pad_docstring_example():
    expected = [[0, 0, 0, 0], [0, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 0]]
    np.testing.assert_array_equal(zero_pad(np.ones((1, 2, 2, 1)), 1)[0, :, :, 0], expected)


@pytest.mark.parametrize("pad", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint8, np.uint16, np.int32])
def test_zero_pad_matches_np_pad_and_keeps_dtype(pad, dtype):
    x = np.abs(batch(pad, dtype=np.float64)).astype(dtype)
    out = zero_pad(x, pad)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0))))


def test_zero_pad_accepts_numpy_integer_pad():
    x = batch(0)
    np.testing.assert_array_equal(zero_pad(x, np.int64(2)), zero_pad(x, 2))


# --- pad_images: hand-written tiny cases ----------------------------------------------------


@pytest.mark.parametrize("mode", PAD_MODES)
def test_row_abcd_padded_by_2(mode):
    row = np.arange(1, 5).reshape(1, 1, 4, 1)
    out = pad_images(row, (0, 0, 2, 2), mode=mode)
    np.testing.assert_array_equal(out[0, 0, :, 0], ROW_PADDED_BY_2[mode])


@pytest.mark.parametrize("mode", PAD_MODES)
def test_column_abcd_padded_by_2(mode):
    column = np.arange(1, 5).reshape(1, 4, 1, 1)
    out = pad_images(column, (2, 2, 0, 0), mode=mode)
    np.testing.assert_array_equal(out[0, :, 0, 0], ROW_PADDED_BY_2[mode])


@pytest.mark.parametrize("mode", PAD_MODES)
def test_int_width_pads_all_four_sides(mode):
    row = np.arange(1, 5).reshape(1, 1, 4, 1)
    out = pad_images(row, 2, mode=mode)
    assert out.shape == (1, 5, 8, 1)
    expected_row = ROW_PADDED_BY_2[mode]
    if mode == "constant":
        np.testing.assert_array_equal(out[0, 2, :, 0], expected_row)
        np.testing.assert_array_equal(np.delete(out[0, :, :, 0], 2, axis=0), 0)
    else:
        # A single-row image repeats that row vertically in every non-constant mode.
        for h in range(5):
            np.testing.assert_array_equal(out[0, h, :, 0], expected_row)


def test_asymmetric_edge_pad_by_hand():
    image = np.array([[1, 2, 3], [4, 5, 6]]).reshape(1, 2, 3, 1)
    out = pad_images(image, (1, 0, 2, 1), mode="edge")[0, :, :, 0]
    expected = [
        [1, 1, 1, 2, 3, 3],
        [1, 1, 1, 2, 3, 3],
        [4, 4, 4, 5, 6, 6],
    ]
    np.testing.assert_array_equal(out, expected)


def test_asymmetric_wrap_pad_by_hand():
    image = np.array([[1, 2, 3], [4, 5, 6]]).reshape(1, 2, 3, 1)
    out = pad_images(image, (0, 1, 1, 0), mode="wrap")[0, :, :, 0]
    expected = [
        [3, 1, 2, 3],
        [6, 4, 5, 6],
        [3, 1, 2, 3],
    ]
    np.testing.assert_array_equal(out, expected)


def test_constant_fill_value():
    image = np.full((1, 2, 2, 3), 7, dtype=np.uint8)
    out = pad_images(image, 1, mode="constant", value=50)
    assert out.dtype == np.uint8
    assert out.shape == (1, 4, 4, 3)
    np.testing.assert_array_equal(out[0, 1:3, 1:3], 7)
    border = np.ones((4, 4), bool)
    border[1:3, 1:3] = False
    np.testing.assert_array_equal(out[0][border], 50)


def test_constant_fill_nan_in_float_image():
    out = pad_images(np.zeros((1, 1, 1, 1)), 1, value=np.nan)
    assert np.isnan(out).sum() == 8
    assert out[0, 1, 1, 0] == 0


def test_reflect_on_single_pixel_repeats_it():
    out = pad_images(np.full((1, 1, 1, 2), 5.0), 3, mode="reflect")
    np.testing.assert_array_equal(out, np.full((1, 7, 7, 2), 5.0))


def test_channels_and_batch_are_padded_independently():
    x = batch(3, shape=(3, 2, 2, 4))
    out = pad_images(x, 1, mode="edge")
    for i in range(3):
        for c in range(4):
            np.testing.assert_array_equal(out[i, :, :, c], np.pad(x[i, :, :, c], 1, mode="edge"))


def test_empty_image_constant_mode():
    out = pad_images(np.zeros((1, 0, 3, 1)), 1)
    np.testing.assert_array_equal(out, np.zeros((1, 2, 5, 1)))


# --- pad_images against np.pad and the loop oracle ------------------------------------------

WIDTHS = [(0, 0, 0, 0), (1, 0, 0, 0), (0, 2, 3, 0), (1, 2, 3, 4), (3, 1, 0, 2), (6, 0, 1, 7)]


@pytest.mark.parametrize("mode", PAD_MODES)
@pytest.mark.parametrize("width", WIDTHS)
def test_pad_images_matches_np_pad(mode, width):
    x = batch(sum(width))
    top, bottom, left, right = width
    expected = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), mode=mode)
    np.testing.assert_array_equal(pad_images(x, width, mode=mode), expected)
    np.testing.assert_array_equal(pad_images(x, width, mode=mode), pad_loop(x, *width, mode=mode))


@pytest.mark.parametrize(
    "width", [[1, 2, 3, 4], ((1, 2), (3, 4)), np.array([1, 2, 3, 4]), np.array([[1, 2], [3, 4]])]
)
def test_width_forms_are_equivalent(width):
    x = batch(5)
    np.testing.assert_array_equal(
        pad_images(x, width, mode="symmetric"), pad_images(x, (1, 2, 3, 4), mode="symmetric")
    )


@given(
    mode=st.sampled_from(PAD_MODES),
    shape=st.tuples(st.integers(1, 2), st.integers(1, 5), st.integers(1, 5), st.integers(1, 2)),
    width=st.tuples(*[st.integers(0, 9)] * 4),
    dtype=st.sampled_from([np.float32, np.float64, np.uint8, np.int16]),
    seed=st.integers(0, 2**32 - 1),
)
def test_pad_images_property(mode, shape, width, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 100, size=shape).astype(dtype)
    x_copy = x.copy()
    out = pad_images(x, width, mode=mode)
    top, bottom, left, right = width
    assert out.dtype == dtype
    assert out.shape == (shape[0], shape[1] + top + bottom, shape[2] + left + right, shape[3])
    np.testing.assert_array_equal(out[:, top : top + shape[1], left : left + shape[2]], x)
    np.testing.assert_array_equal(out, pad_loop(x, *width, mode=mode))
    np.testing.assert_array_equal(x, x_copy)


@given(
    mode=st.sampled_from(PAD_MODES),
    shape=st.tuples(st.integers(1, 2), st.integers(1, 5), st.integers(1, 5), st.integers(1, 2)),
    width=st.tuples(*[st.integers(0, 9)] * 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_pad_images_as_is_pad_images_of_the_converted_input(mode, shape, width, seed):
    """8-bit samples written straight into a float32 padded array: pad_images of their
    float32 copy, value for value, widths beyond the image included (fill_border's border)."""
    x = np.random.default_rng(seed).integers(0, 256, size=shape).astype(np.uint8)
    x_copy = x.copy()
    out = pad_images_as(x, width, np.float32, mode=mode, value=7)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, pad_loop(x.astype(np.float32), *width, mode=mode, value=7))
    np.testing.assert_array_equal(x, x_copy)


def test_fill_border_by_hand():
    row = np.full((1, 1, 9, 1), -1)
    row[0, 0, 2:6, 0] = [1, 2, 3, 4]  # 2 left, 3 right
    for mode, expected in {
        "reflect": [3, 2, 1, 2, 3, 4, 3, 2, 1],
        "symmetric": [2, 1, 1, 2, 3, 4, 4, 3, 2],
        "wrap": [3, 4, 1, 2, 3, 4, 1, 2, 3],
        "edge": [1, 1, 1, 2, 3, 4, 4, 4, 4],
        "constant": [5, 5, 1, 2, 3, 4, 5, 5, 5],
    }.items():
        out = fill_border(row.copy(), (0, 0, 2, 3), mode=mode, value=5)
        assert out[0, 0, :, 0].tolist() == expected, mode


def test_fill_border_refuses_what_it_cannot_fill():
    with pytest.raises(ValueError, match="no inside"):
        fill_border(np.zeros((1, 2, 2, 1)), 1, mode="reflect")
    with pytest.raises(ValueError, match="does not fit"):
        fill_border(np.zeros((1, 3, 3, 1), np.uint8), 1, value=300)
    with pytest.raises(ValueError, match="too large"):
        pad_images_as(np.zeros((1, 2, 2, 1), np.uint8), 2**31, np.float32)


# --- memory ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", PAD_MODES)
@pytest.mark.parametrize("width", [0, 2])
def test_input_not_modified_and_not_shared(mode, width):
    x = batch(11)
    x_copy = x.copy()
    x.flags.writeable = False
    out = pad_images(x, width, mode=mode)
    np.testing.assert_array_equal(x, x_copy)
    assert not np.shares_memory(out, x)
    out_zero = zero_pad(x, width)
    np.testing.assert_array_equal(x, x_copy)
    assert not np.shares_memory(out_zero, x)


def test_non_contiguous_input():
    x = batch(12, shape=(2, 8, 10, 3))
    view = x[:, ::2, ::-3, 1:]
    np.testing.assert_array_equal(
        pad_images(view, (1, 2, 2, 1), mode="reflect"),
        np.pad(view, ((0, 0), (1, 2), (2, 1), (0, 0)), mode="reflect"),
    )


def test_accepts_nested_lists():
    out = zero_pad([[[[1.0]]]], 1)
    assert isinstance(out, np.ndarray)
    assert out.shape == (1, 3, 3, 1)


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(3, 3), (2, 3, 3), (1, 2, 3, 3, 1)])
def test_wrong_ndim(shape):
    with pytest.raises(ValueError, match="X"):
        zero_pad(np.zeros(shape), 1)
    with pytest.raises(ValueError, match="X"):
        pad_images(np.zeros(shape), 1)


@pytest.mark.parametrize("pad", [-1, -3])
def test_negative_pad(pad):
    with pytest.raises(ValueError, match="pad"):
        zero_pad(np.zeros((1, 2, 2, 1)), pad)


@pytest.mark.parametrize("pad", [1.5, "1", None, True, [1]])
def test_non_integer_pad(pad):
    with pytest.raises(TypeError, match="pad"):
        zero_pad(np.zeros((1, 2, 2, 1)), pad)


@pytest.mark.parametrize("width", [(1, 2), (1, 2, 3), (1, 2, 3, 4, 5), ((1, 2, 3), (4, 5, 6))])
def test_width_of_wrong_length(width):
    with pytest.raises(ValueError, match="width"):
        pad_images(np.zeros((1, 2, 2, 1)), width)


def test_negative_width_entry():
    with pytest.raises(ValueError, match="width"):
        pad_images(np.zeros((1, 2, 2, 1)), (1, -1, 0, 0))


@pytest.mark.parametrize("width", [(1, 0.5, 0, 0), (1, "2", 0, 0)])
def test_non_integer_width_entry(width):
    with pytest.raises(TypeError, match="width"):
        pad_images(np.zeros((1, 2, 2, 1)), width)


@pytest.mark.parametrize("mode", ["zeros", "mirror", "", None, "REFLECT"])
def test_unknown_mode(mode):
    with pytest.raises(ValueError, match="mode"):
        pad_images(np.zeros((1, 2, 2, 1)), 1, mode=mode)


def test_mode_is_keyword_only():
    with pytest.raises(TypeError):
        pad_images(np.zeros((1, 2, 2, 1)), 1, "edge")


@pytest.mark.parametrize("value", ["0", None, [0], True])
def test_non_numeric_value(value):
    with pytest.raises(TypeError, match="value"):
        pad_images(np.zeros((1, 2, 2, 1)), 1, value=value)


@pytest.mark.parametrize("value", [256, -1, 0.5, np.nan, np.inf])
def test_value_that_does_not_fit_uint8(value):
    with pytest.raises(ValueError, match="value"):
        pad_images(np.zeros((1, 2, 2, 1), np.uint8), 1, value=value)


@pytest.mark.parametrize("mode", [m for m in PAD_MODES if m != "constant"])
def test_empty_image_non_constant_mode(mode):
    with pytest.raises(ValueError, match="empty"):
        pad_images(np.zeros((1, 0, 3, 1)), 1, mode=mode)


@pytest.mark.parametrize(
    "X", [np.full((1, 2, 2, 1), "a"), np.zeros((1, 2, 2, 1), complex), [[[["x"]]]], None]
)
def test_non_numeric_array(X):
    with pytest.raises(TypeError, match="X"):
        pad_images(X, 1)
    with pytest.raises(TypeError, match="X"):
        zero_pad(X, 1)


# --- absurd widths and fill values -------------------------------------------------------------


@pytest.mark.parametrize("pad", [2**31, 2**63, 10**6])
def test_zero_pad_refuses_results_too_large_naming_pad(pad):
    with pytest.raises(
        ValueError, match=rf"pad = {pad} makes the padded input .*(too large|more than)"
    ):
        zero_pad(np.zeros((1, 1, 1, 1)), pad)


def test_pad_images_refuses_results_too_large_naming_width():
    with pytest.raises(ValueError, match=r"width = \(0, 0, 0, 2147483648\) makes the padded input"):
        pad_images(np.zeros((1, 1, 1, 1)), (0, 0, 0, 2**31))
    with pytest.raises(ValueError, match=r"width = 536870912 .* more than this machine"):
        pad_images(np.zeros((1, 1, 1, 1)), 2**29)


@pytest.mark.parametrize(
    "dtype, value",
    [(np.float16, 70000), (np.float16, -1e10), (np.float32, 1e39), (bool, 2), (bool, 0.5)],
)
def test_pad_images_refuses_a_value_the_dtype_cannot_hold(dtype, value):
    X = np.ones((1, 1, 1, 1), dtype)
    with pytest.raises(ValueError, match=rf"value {re.escape(repr(value))} does not fit"):
        pad_images(X, 1, value=value)


def test_pad_images_float16_largest_value_and_infinity_are_kept():
    X = np.ones((1, 1, 1, 1), np.float16)
    assert pad_images(X, 1, value=65504)[0, 0, 0, 0] == 65504
    assert pad_images(X, 1, value=-np.inf)[0, 0, 0, 0] == -np.inf


@pytest.mark.parametrize("modes", [(*PAD_MODES, "fake"), PAD_MODES[:-1]])
def test_a_mode_added_or_removed_in_choices_stops_the_import_by_name(monkeypatch, modes):
    # What every border holds is one table (np.pad's arguments): padding, the gradient's
    # fold and the strips' rows beyond the image all follow it.
    from helpers import import_afresh

    from convcli import choices

    odd = (set(modes) ^ set(PAD_MODES)).pop()
    monkeypatch.setattr(choices, "PAD_MODES", modes)
    with pytest.raises(LookupError, match=f"np.pad arguments .*{odd!r}"):
        import_afresh("convcli.layers.padding")


@pytest.mark.parametrize("mode", PAD_MODES)
@pytest.mark.parametrize(
    "n, before, after", [(1, 3, 2), (2, 5, 0), (4, 2, 3), (9, 2, 2), (30, 4, 1)]
)
def test_border_terms_give_what_np_pad_gives(mode, n, before, after):
    row = np.random.default_rng(n).standard_normal(n)
    terms = border_terms(n, before, after, mode)
    made = (np.where(terms.sources >= 0, row[terms.sources], 0) * terms.weights).sum(axis=1)
    np.testing.assert_array_equal(made, np.pad(row, (before, after), **NP_PAD_ARGUMENTS[mode]))


@pytest.mark.parametrize("widths", [(2, 1, 3, 0), (1, 1, 1, 1), (4, 0, 0, 5)])
def test_a_computed_border_pads_folds_and_streams_as_np_pad_makes_it(monkeypatch, widths):
    # A border whose values are computed from several pixels (numpy's odd reflection,
    # 2 * edge - mirrored, standing in for "reflect" here) needs nothing but its np.pad
    # arguments: padding, the gradient's fold and the strips' border rows follow them.
    from convcli.app.grad import unpad_grad
    from convcli.app.ops import PadOp
    from convcli.app.strips import PictureRows, _band, plan_strips, row_geometry
    from convcli.layers import padding

    odd = {"mode": "reflect", "reflect_type": "odd"}
    monkeypatch.setitem(padding.NP_PAD_ARGUMENTS, "reflect", odd)
    X = batch(7, (2, 6, 7, 3)).astype(np.float32)
    X[0, 0, 0, 0] = np.inf  # an infinity reaches only the values that read it
    top, bottom, left, right = widths
    expected = np.pad(X, ((0, 0), (top, bottom), (left, right), (0, 0)), **odd)
    padded = pad_images(X, widths, mode="reflect")
    np.testing.assert_array_equal(padded, expected)
    G = batch(8, padded.shape)
    back = unpad_grad(G, widths, mode="reflect")
    finite = np.isfinite(X)
    X_finite = np.where(finite, X, 0).astype(np.float64)
    dot_padded = np.sum(np.pad(X_finite, ((0, 0), (top, bottom), (left, right), (0, 0)), **odd) * G)
    assert np.isclose(dot_padded, np.sum(X_finite * back), rtol=1e-10)
    op = PadOp(pad=widths, mode="reflect")
    source = PictureRows(X[1], ("R", "G", "B"), 255.0, 8)
    geometry = row_geometry(op, 6, 7)
    for strip in plan_strips(geometry, 6, 2):
        band = _band(source, strip, "reflect", np.zeros(3, np.float32))
        np.testing.assert_array_equal(
            band, expected[1, strip.in0 + top : strip.in1 + top, left : left + 7]
        )


@pytest.mark.parametrize("mode", PAD_MODES)
def test_border_copies_are_the_border_terms_copies(mode):
    for n in range(1, 8):
        for before in range(0, 13, 3):
            for after in (0, 1, 5, 12):
                expected = border_terms(n, before, after, mode).copies()
                np.testing.assert_array_equal(border_copies(n, before, after, mode), expected)


def test_border_copies_follow_the_np_pad_arguments(monkeypatch):
    from convcli.layers import padding

    assert border_copies(5, 2, 2, "reflect") is not None  # kept for the next call
    monkeypatch.setitem(
        padding.NP_PAD_ARGUMENTS, "reflect", {"mode": "reflect", "reflect_type": "odd"}
    )
    assert border_copies(5, 2, 2, "reflect") is None  # a computed border: no copies
