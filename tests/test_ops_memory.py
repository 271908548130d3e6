"""Peak memory of the operations, as multiples of the picture's float32 size (tracemalloc).

numpy's allocations are traced by tracemalloc, so these figures are exact and do
not depend on the machine; the bounds leave room above what was measured.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from convcli import depthwise_conv_forward
from convcli.app.ops import ConvOp
from convcli.io.images import Picture
from convcli.kernels import parse_kernel_spec


def _picture(seed: int = 0, shape=(120, 160, 3)) -> Picture:
    pixels = np.random.default_rng(seed).integers(0, 256, shape).astype(np.float32)
    return Picture(pixels, ("R", "G", "B", "A")[: shape[2]], 255.0, 8)


def _peak(call) -> tuple[np.ndarray, int]:
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("specs", "options"),
    [
        (("vertical", "horizontal", "edge"), {}),
        (("sobel-x", "gaussian-5x5:90", "log-5x5", "box-blur"), {"bias": 0.3}),
        (("emboss", "sharpen", "edge"), {"stride": 3, "pad": 2, "bias": -7.5}),
        (("roberts-nw", "roberts-ne"), {"pad": "valid", "stride": 2}),
    ],
)
def test_channels_each_equals_one_depthwise_call_exactly(specs, options):
    # The per-channel computation must not change a single bit of the results.
    pic = _picture(1, (37, 53, 4))
    kernels = tuple(parse_kernel_spec(s) for s in specs)
    op = ConvOp(kernels, channels="each", border="constant", **options)
    out = op.compute(pic)
    expected = []
    # Its colour as it shows over black (edge kernels among these: alpha is not kept).
    colour = pic.pixels[None, :, :, :3] * (pic.pixels[None, :, :, 3:] / np.float32(255.0))
    for kernel in kernels:
        W = kernel.weights.astype(np.float32)[:, :, None, None].repeat(3, axis=2)
        b = np.full((1, 1, 1, 3), op.bias, np.float32)
        Z, _ = depthwise_conv_forward(
            colour, W, b, {"stride": op.stride, "pad": op.pad_for(kernel)}
        )
        expected.append(Z[0])
    expected = np.concatenate(expected, axis=2)
    assert out.dtype == np.float32 and out.shape == expected.shape
    np.testing.assert_array_equal(out, expected)


def test_channels_each_peak_memory_is_the_result_and_one_channel():
    # A picture large beside the matmul engine's tile buffers (under 1 MB), as photos are.
    pic = _picture(shape=(600, 800, 3))
    kernels = tuple(parse_kernel_spec(s) for s in ("vertical", "horizontal", "edge"))
    op = ConvOp(kernels, channels="each")
    result, peak = _peak(lambda: op.compute(pic))
    # The result alone is 3 x the picture (9 channels). One library call over every
    # kernel and channel peaked at 7 x (the result, its padded input and a product of
    # the result's size); one kernel on one channel at a time peaks at about 4 x.
    assert result.nbytes == 3 * pic.pixels.nbytes
    assert peak < 5 * pic.pixels.nbytes
