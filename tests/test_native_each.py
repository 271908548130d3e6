"""``--channels each`` of 8-bit pictures in one native pass, against the float32 path.

:func:`convcli.app.conv_pixels.depthwise_maps` reads each 8-bit channel straight
from the pixels (:func:`convcli.layers._engine.native.sum_correlate_separable`
with ``channel``); these tests hold it to the bits of the path that pads a
float32 copy of the channel and calls depthwise_conv_forward.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import ONE_PASS_KERNELS, built, conv_options, engine, vector_level
from hypothesis import given, settings
from hypothesis import strategies as st

from convcli.app import conv_pixels
from convcli.layers._engine import native


def float32_path(op, colour):
    """depthwise_maps with the one pass turned away: each channel padded as float32."""
    with engine("native"), pytest.MonkeyPatch.context() as patch:
        patch.setattr(conv_pixels, "one_pass_arguments", lambda *_: None)
        return conv_pixels.depthwise_maps(op, colour)


def counted_passes(patch) -> list:
    """The channels each call of sum_correlate_separable reads, once patched to record them."""
    calls = []
    one_pass = native.sum_correlate_separable

    def recorded(*args, **kwargs):
        calls.append(kwargs.get("channel"))
        return one_pass(*args, **kwargs)

    patch.setattr(native, "sum_correlate_separable", recorded)
    return calls


@built
@given(
    seed=st.integers(0, 2**32 - 1),
    shape=st.tuples(st.integers(1, 2), st.integers(1, 19), st.integers(1, 41), st.integers(1, 4)),
    kernel=st.sampled_from(sorted(ONE_PASS_KERNELS)),
    widths=st.tuples(*[st.integers(0, 6)] * 4),
    border=st.sampled_from(["constant", "edge", "reflect", "symmetric", "wrap"]),
    bias=st.sampled_from([0.0, 0.5, -3.0]),
    streamed=st.booleans(),
)
@settings(max_examples=150, deadline=None)
def test_each_channel_read_from_its_8_bit_pixels_has_the_bits_of_its_float32_copy(
    seed, shape, kernel, widths, border, bias, streamed
):
    # Every vector level, the results stored past the caches (as a photo's are) or not;
    # 3 channels take the AVX2 shuffle, 1 the plain copy, 2 and 4 the loop over channels.
    rng = np.random.default_rng(seed)
    colour = rng.integers(0, 256, shape, dtype=np.uint8)
    weights = np.asarray(ONE_PASS_KERNELS[kernel], np.float32)
    top, bottom, left, right = widths
    if shape[1] + top + bottom < weights.shape[0] or shape[2] + left + right < weights.shape[1]:
        return  # no window fits
    op = conv_options([weights, weights[::-1, ::-1] * 2], widths, border, bias, channels="each")
    expected = float32_path(op, colour)
    for level in native.vector_levels():
        with engine("native"), vector_level(level), pytest.MonkeyPatch.context() as patch:
            patch.setattr(native, "STREAMED_BYTES", 0 if streamed else 1 << 62)
            calls = counted_passes(patch)
            got = conv_pixels.depthwise_maps(op, colour)
        # each border here copies pixels: only the kernel that is not rank 1 is turned away
        assert calls == ([] if kernel == "laplacian" else list(range(shape[3])) * 2)
        assert got.shape == expected.shape
        np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


@built
def test_a_photo_sized_channel_in_one_pass_has_the_bits_of_its_float32_copy():
    # Rows of thousands of pixels, as in a photo: the shuffle's blocks and the streamed
    # stores, for each of the three channels and kernels of two sizes.
    rng = np.random.default_rng(7)
    colour = rng.integers(0, 256, (1, 300, 2403, 3), dtype=np.uint8)
    op = conv_options([ONE_PASS_KERNELS["sobel"]], (1, 1, 1, 1), "reflect", 0.0, channels="each")
    with engine("native"), pytest.MonkeyPatch.context() as patch:
        calls = counted_passes(patch)
        got = conv_pixels.depthwise_maps(op, colour)
    assert calls == [0, 1, 2]
    expected = float32_path(op, colour)
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))
    # and against the definition: the sobel kernel's columns on the reflected channel
    padded = np.pad(colour[0].astype(np.float64), ((1, 1), (1, 1), (0, 0)), mode="reflect")
    rows = padded[:-2] + 2 * padded[1:-1] + padded[2:]
    np.testing.assert_array_equal(got[0], rows[:, :-2] - rows[:, 2:])


@built
def test_a_channel_whose_pass_overflows_takes_the_float32_path():
    # inf - inf in the passes: the channel's values are the plain path's, NaN where it has them.
    colour = np.full((1, 9, 11, 3), 255, np.uint8)
    op = conv_options(
        [np.outer([1, 1, 1], [3e38, 0, -3e38])], (1, 1, 1, 1), "reflect", 0.0, channels="each"
    )
    with engine("native"), pytest.MonkeyPatch.context() as patch:
        calls = counted_passes(patch)
        got = conv_pixels.depthwise_maps(op, colour)
    assert calls == [0, 1, 2]
    expected = float32_path(op, colour)
    assert not np.isfinite(expected).all()
    np.testing.assert_array_equal(got, expected)


@built
def test_a_result_array_that_is_not_contiguous_is_refused():
    colour = np.zeros((1, 4, 5, 3), np.uint8)
    rows, columns = np.arange(4), np.arange(5)
    one = np.ones(1, np.float32)
    out = np.zeros((1, 4, 10), np.float32)[:, :, ::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        native.sum_correlate_separable(colour, one, one, rows, columns, 0, 0.0, channel=1, out=out)
    written = np.zeros((1, 4, 5), np.float32)
    native.sum_correlate_separable(
        colour + 7, one, one, rows, columns, 0, 0.0, channel=1, out=written
    )
    assert (written == 7).all()


@built
def test_the_maps_start_on_a_cache_line_for_the_streamed_stores():
    # The passes stream 32-byte stores only to aligned addresses: a plane of 8k values
    # starts on one where the result does.
    # (Megabytes, as a photo's maps: memory of its own, where malloc's header comes first.)
    colour = np.random.default_rng(3).integers(0, 256, (1, 200, 2048, 3), dtype=np.uint8)
    op = conv_options([ONE_PASS_KERNELS["vertical"]], (1, 1, 1, 1), "reflect", 0.0, channels="each")
    with engine("native"):
        got = conv_pixels.depthwise_maps(op, colour)
    start = got.__array_interface__["data"][0]
    assert start % 64 == 0 and got.strides[3] == 200 * 2048 * 4  # (n, m, H, W) planes


@built
def test_a_kernel_larger_than_the_picture_is_said_by_the_layer():
    colour = np.zeros((1, 1, 5, 3), np.uint8)
    op = conv_options([ONE_PASS_KERNELS["sobel"]], (0, 0, 0, 0), "constant", 0.0, channels="each")
    with engine("native"), pytest.raises(ValueError, match="larger than the input"):
        conv_pixels.depthwise_maps(op, colour)
