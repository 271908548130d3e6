"""conv --dilation, pool --pad and --ceil: outputs re-read and checked against the library."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_image, names, ok, pixels, run

from convcli import conv_forward, depthwise_conv_forward, pad_images, pool_forward
from convcli.choices import POOL_MODES
from convcli.kernels import get_kernel


def vertical(n_in):
    return np.repeat(get_kernel("vertical").weights[:, :, None, None], n_in, axis=2)


# --- conv --dilation -------------------------------------------------------------------------


def test_conv_dilation_is_conv_forward_with_dilation(photo, out):
    ok("conv", photo, "-o", out, "-k", "vertical", "--dilation", 2, "--format", "npy")
    assert names(out) == ["photo_conv-vertical-d2-sum.npy"]
    Z = np.load(out / "photo_conv-vertical-d2-sum.npy")
    # --pad same pads a dilated 3x3 kernel (5x5 span) by 2, reflected by default.
    A = pad_images(pixels(photo)[None], 2, mode="reflect")
    hp = {"stride": 1, "pad": 0, "dilation": 2}
    expected, _ = conv_forward(A, vertical(3), np.zeros((1, 1, 1, 1)), hp)
    assert Z.shape == pixels(photo).shape[:2] + (1,)
    np.testing.assert_allclose(Z, expected[0], rtol=1e-5, atol=1e-3)


def test_conv_dilation_each_channel_and_options_in_the_name(photo, out):
    ok(
        "conv",
        photo,
        "-o",
        out,
        "-k",
        "vertical",
        "--dilation",
        3,
        "--stride",
        2,
        "--pad",
        1,
        "--border",
        "constant",
        "--channels",
        "each",
        "--format",
        "npy",
    )
    assert names(out) == ["photo_conv-vertical-s2-d3-p1-Bconstant-each.npy"]
    Z = np.load(out / names(out)[0])
    A = pixels(photo)[None]
    hp = {"stride": 2, "pad": 1, "dilation": 3}
    expected, _ = depthwise_conv_forward(A, vertical(3)[:, :, :, :1], np.zeros((1, 1, 1, 3)), hp)
    np.testing.assert_allclose(Z, expected[0], rtol=1e-5, atol=1e-3)


def test_conv_without_dilation_keeps_its_names(photo, out):
    ok("conv", photo, "-o", out, "-k", "vertical", "--dilation", 1)
    assert names(out) == ["photo_conv-vertical-sum.png"]


@pytest.mark.parametrize("value", [0, -1, "two"])
def test_conv_bad_dilation_is_one_line(photo, out, value):
    result = run("conv", photo, "-o", out, "--dilation", value)
    assert result.exit_code == 2
    assert "--dilation" in result.output and "Traceback" not in result.output


def test_conv_dilated_kernel_larger_than_the_image(tmp_path, out):
    small = make_image(tmp_path / "small.png", "RGB", size=(6, 6))
    result = run("conv", small, "-o", out, "-k", "vertical", "--dilation", 4, "--pad", "valid")
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "too small for the 3x3 kernel 'vertical' (dilation 4: 9x9)" in result.output
    assert not out.exists() or names(out) == []


# --- pool --pad and --ceil -------------------------------------------------------------------


@pytest.mark.parametrize("mode", POOL_MODES)
@pytest.mark.parametrize(
    "options, pad, ceil, tag",
    [
        ((), 0, False, "f3-s2"),
        (("--pad", 1), 1, False, "f3-s2-p1"),
        (("--ceil",), 0, True, "f3-s2-ceil"),
        (("--pad", 1, "--ceil"), 1, True, "f3-s2-p1-ceil"),
    ],
)
def test_pool_pad_and_ceil_are_pool_forward(photo, out, mode, options, pad, ceil, tag):
    ok(
        "pool",
        photo,
        "-o",
        out,
        "--mode",
        mode,
        "--size",
        3,
        "--stride",
        2,
        *options,
        "--format",
        "npy",
    )
    assert names(out) == [f"photo_pool-{mode}-{tag}.npy"]
    got = np.load(out / names(out)[0])
    hp = {"f": 3, "stride": 2, "pad": pad, "ceil_mode": ceil}
    expected, _ = pool_forward(pixels(photo)[None], hp, mode)
    np.testing.assert_array_equal(got, expected[0])


def test_pool_ceil_adds_the_partial_window(photo, out):
    H, W = pixels(photo).shape[:2]
    ok("pool", photo, "-o", out, "--size", 3, "--stride", 2, "--ceil", "--format", "npy")
    got = np.load(out / "photo_pool-max-f3-s2-ceil.npy")
    assert got.shape[:2] == (-(-(H - 3) // 2) + 1, -(-(W - 3) // 2) + 1)


def test_pool_pad_more_than_half_the_window_is_one_line(photo, out):
    result = run("pool", photo, "-o", out, "--size", 3, "--pad", 2)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "--pad" in result.output and "at most 1" in result.output
    assert not out.exists()
