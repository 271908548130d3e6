"""convcli grad pool|conv: input gradients against nested loops, PyTorch and the files written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import (
    assert_one_line_error,
    make_image,
    manifest_records,
    ok,
    outputs_in,
    pixels,
    read,
    run,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import (
    conv_backward_loop,
    conv_forward_loop,
    numerical_gradient,
    pad_loop,
    pool_backward_loop,
)

from convcli import choices, conv_forward, pad_images
from convcli.app.grad import conv_grads, pool_input_grad, unpad_grad
from convcli.app.names import earlier_outputs
from convcli.app.ops import OPERATION_NAMES
from convcli.choices import PAD_MODES, POOL_MODES
from convcli.kernels import get_kernel

SAMPLES = Path(__file__).resolve().parent.parent / "sample_images"


# --- the library pieces against nested loops ---------------------------------------------------


@pytest.mark.parametrize("mode", POOL_MODES)
@pytest.mark.parametrize("f, stride", [(2, 2), (3, 1), (3, 2), (2, 3)])
def test_pool_grad_equals_the_loop(mode, f, stride):
    rng = np.random.default_rng(3)
    A = rng.integers(0, 4, size=(2, 7, 8, 3)).astype(np.float64)  # many ties
    got = pool_input_grad(A, f=f, stride=stride, mode=mode)
    hp = {"f": f, "stride": stride}
    n_H, n_W = (7 - f) // stride + 1, (8 - f) // stride + 1
    expected = pool_backward_loop(np.ones((2, n_H, n_W, 3)), A, hp, mode)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_max_routing_is_one_pixel_per_window_the_first_maximum():
    A = np.array([[5, 5, 1, 2], [0, 1, 2, 2], [3, 0, 0, 9], [0, 3, 1, 0]], np.float64).reshape(
        1, 4, 4, 1
    )
    got = pool_input_grad(A, f=2, stride=2, mode="max")[0, :, :, 0]
    # Ties go to the first maximum in row-major order (5 at the top-left, 2 at the top).
    np.testing.assert_array_equal(got, [[1, 0, 0, 1], [0, 0, 0, 0], [1, 0, 0, 1], [0, 0, 0, 0]])


def test_average_counts_the_windows_sharing_a_pixel():
    A = np.zeros((1, 5, 5, 1))
    got = pool_input_grad(A, f=3, stride=1, mode="average")[0, :, :, 0] * 9
    row = np.array([1, 2, 3, 2, 1])
    np.testing.assert_allclose(got, np.outer(row, row))


@pytest.mark.parametrize("loss", choices.LOSSES)
@pytest.mark.parametrize("stride, pad", [(1, 0), (1, 1), (2, 1), (2, 0)])
def test_conv_grads_equal_the_loop(loss, stride, pad):
    rng = np.random.default_rng(4)
    A = rng.normal(size=(2, 6, 7, 1))
    W = rng.normal(size=(3, 3, 1, 1))
    b = np.full((1, 1, 1, 1), 0.25)
    hp = {"stride": stride, "pad": pad}
    dA, dW = conv_grads(A, W, b, hp, loss=loss)
    Z = conv_forward_loop(A, W, b, hp)
    dZ = np.ones_like(Z) if loss == "sum" else Z
    dA_loop, dW_loop, _ = conv_backward_loop(dZ, A, W, hp)
    np.testing.assert_allclose(dA, dA_loop, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(dW, dW_loop, rtol=1e-10, atol=1e-10)


def test_conv_grads_match_centred_differences():
    rng = np.random.default_rng(5)
    A = rng.normal(size=(1, 5, 5, 1))
    W = rng.normal(size=(3, 3, 1, 1))
    b = np.zeros((1, 1, 1, 1))
    hp = {"stride": 2, "pad": 1}
    dA, dW = conv_grads(A, W, b, hp, loss="energy")

    def loss():
        Z, _ = conv_forward(A, W, b, hp)
        return 0.5 * float(np.sum(Z * Z))

    np.testing.assert_allclose(dA, numerical_gradient(loss, A), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(dW, numerical_gradient(loss, W), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("loss", choices.LOSSES)
@pytest.mark.parametrize("stride, pad, dilation", [(1, 0, 1), (1, 1, 1), (2, 1, 1), (1, 2, 2)])
def test_finite_only_grads_leave_out_the_responses_that_missing_values_reach(
    loss, stride, pad, dilation
):
    """With missing values (NaN, GDAL's nodata) L sums the responses whose windows hold
    none: the loop's gradients with dZ = 0 where a window holds one, and NaN at each missing
    value; a numerical gradient of that L agrees."""
    rng = np.random.default_rng(8)
    A = rng.normal(size=(2, 9, 8, 1))
    A[0, 2, 3, 0] = A[1, 7, 0, 0] = np.nan
    A[1, 4, 6, 0] = np.inf
    W = rng.normal(size=(3, 3, 1, 1))
    b = np.full((1, 1, 1, 1), 0.25)
    hp = {"stride": stride, "pad": pad, "dilation": dilation}
    dA, dW = conv_grads(A, W, b, hp, loss=loss, finite_only=True)
    missing = ~np.isfinite(A)
    filled = np.where(missing, 0.0, A)
    reached = np.isnan(conv_forward_loop(np.where(missing, np.nan, 0.0), W, b, hp))
    assert reached.any() and not reached.all()
    Z = conv_forward_loop(filled, W, b, hp)
    dZ = np.where(reached, 0.0, np.ones_like(Z) if loss == "sum" else Z)
    dA_loop, dW_loop, _ = conv_backward_loop(dZ, filled, W, hp)
    dA_loop[missing] = np.nan
    np.testing.assert_allclose(dA, dA_loop, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(dW, dW_loop, rtol=1e-10, atol=1e-10)

    def finite_loss():
        Z = conv_forward(filled, W, b, hp)[0][~reached]
        return float(Z.sum()) if loss == "sum" else 0.5 * float(np.sum(Z * Z))

    np.testing.assert_allclose(dW, numerical_gradient(finite_loss, W), rtol=1e-6, atol=1e-6)


def test_conv_grads_refuse_an_unknown_loss():
    with pytest.raises(ValueError, match="loss"):
        conv_grads(
            np.ones((1, 3, 3, 1)),
            np.ones((3, 3, 1, 1)),
            np.zeros((1, 1, 1, 1)),
            {"stride": 1, "pad": 0},
            loss="mean",
        )


@settings(max_examples=60, deadline=None)
@given(
    mode=st.sampled_from(PAD_MODES),
    h=st.integers(1, 6),
    w=st.integers(1, 6),
    widths=st.one_of(st.integers(0, 4), st.tuples(*[st.integers(0, 4)] * 4)),
    seed=st.integers(0, 2**16),
)
def test_unpad_grad_is_the_adjoint_of_padding(mode, h, w, widths, seed):
    """<pad(A), G> = <A, unpad(G)> for every A and G: the gradient through pad_images.

    For one width on every side and for four (``--pad T,B,L,R``).
    """
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(2, h, w, 2))
    try:
        padded = pad_images(A, widths, mode=mode)
    except ValueError:
        return  # a border the image is too small for
    G = rng.normal(size=padded.shape)
    # The loop oracle pads the same way: the padding itself is checked elsewhere.
    sides = (widths,) * 4 if isinstance(widths, int) else widths
    np.testing.assert_allclose(padded, pad_loop(A, *sides, mode), atol=0)
    back = unpad_grad(G, widths, mode=mode)
    assert back.shape == A.shape
    assert np.isclose(np.sum(padded * G), np.sum(A * back), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", ["fake", None, "Reflect"])
def test_unpad_grad_refuses_a_mode_it_cannot_fold(mode):
    with pytest.raises(ValueError, match=f"mode must be one of .*{mode!r}"):
        unpad_grad(np.ones((1, 4, 4, 1)), 0, mode=mode)


# --- PyTorch's input gradients on real photos ------------------------------------------------


def _photo(name="camera.png", mode="L"):
    return pixels(SAMPLES / name, mode).astype(np.float64)


@pytest.mark.parametrize(
    "mode, f, stride, pad, ceil",
    [
        ("max", 2, 2, 0, False),
        ("max", 3, 2, 0, False),
        ("average", 3, 1, 0, False),
        ("max", 3, 2, 1, True),
        ("average", 4, 3, 2, True),
        ("average", 3, 2, 1, False),
    ],
)
def test_pool_grad_equals_torch_on_a_photo(mode, f, stride, pad, ceil):
    torch = pytest.importorskip("torch")
    A = _photo("chelsea.png", "RGB")[None]
    got = pool_input_grad(A, f=f, stride=stride, mode=mode, pad=pad, ceil=ceil)
    x = torch.tensor(A.transpose(0, 3, 1, 2), requires_grad=True)
    if mode == "max":
        Z = torch.nn.functional.max_pool2d(x, f, stride, padding=pad, ceil_mode=ceil)
    else:
        Z = torch.nn.functional.avg_pool2d(
            x, f, stride, padding=pad, ceil_mode=ceil, count_include_pad=False
        )
    Z.sum().backward()
    expected = x.grad.numpy().transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("loss", choices.LOSSES)
@pytest.mark.parametrize(
    "kernel, stride, pad", [("sobel-x", 1, 1), ("edge", 2, 1), ("log-5x5", 1, 0)]
)
def test_conv_grad_equals_torch_on_a_photo(loss, kernel, stride, pad):
    torch = pytest.importorskip("torch")
    A = _photo()[None]
    W = get_kernel(kernel).weights[:, :, None, None]
    hp = {"stride": stride, "pad": pad}
    dA, dW = conv_grads(A, W, np.zeros((1, 1, 1, 1)), hp, loss=loss)
    x = torch.tensor(A.transpose(0, 3, 1, 2), requires_grad=True)
    k = torch.tensor(W.transpose(3, 2, 0, 1), requires_grad=True)
    Z = torch.nn.functional.conv2d(x, k, stride=stride, padding=pad)
    (Z.sum() if loss == "sum" else 0.5 * (Z * Z).sum()).backward()
    scale = float(np.abs(dA).max())
    np.testing.assert_allclose(
        dA, x.grad.numpy().transpose(0, 2, 3, 1), rtol=1e-9, atol=1e-12 * scale
    )
    np.testing.assert_allclose(dW, k.grad.numpy().transpose(2, 3, 1, 0), rtol=1e-9)


# --- the command line --------------------------------------------------------------------------


def test_grad_pool_writes_the_routing_map(tmp_path):
    src = make_image(tmp_path / "photo.png", "RGB", seed=1)
    out = tmp_path / "out"
    ok("grad", "pool", src, "-o", out, "--format", "npy")
    data = np.load(out / "photo_grad-pool-max-f2-s2.npy")
    A = pixels(src)[None]
    np.testing.assert_array_equal(data, pool_input_grad(A, f=2, stride=2, mode="max")[0])
    # One pixel per 2x2 window (40x30: every pixel is in a window).
    assert data.sum() == 20 * 15 * 3
    ok("grad", "pool", src, "-o", out)
    grey = read(out / "photo_grad-pool-max-f2-s2-G.png")
    np.testing.assert_array_equal(grey, np.where(data[:, :, 1] > 0, 255, 0))


def test_grad_conv_writes_da_prev_and_prints_dw(tmp_path):
    src = make_image(tmp_path / "photo.png", "L", seed=2)
    out = tmp_path / "out"
    result = ok(
        "grad",
        "conv",
        "-k",
        "vertical",
        "--loss",
        "energy",
        "--border",
        "constant",
        src,
        "-o",
        out,
        "--format",
        "npy",
    )
    data = np.load(out / "photo_grad-conv-vertical-Bconstant-energy-sum.npy")
    A = pixels(src, "L").astype(np.float64)[None]
    W = get_kernel("vertical").weights[:, :, None, None]
    dA, dW = conv_grads(A, W, np.zeros((1, 1, 1, 1)), {"stride": 1, "pad": 1}, loss="energy")
    np.testing.assert_allclose(data, dA[0], rtol=1e-4, atol=1e-3 * np.abs(dA).max())
    assert "dW of vertical" in result.stderr
    printed = np.array(
        [[float(x) for x in line.split()] for line in result.stderr.splitlines()[1:4]]
    )
    np.testing.assert_allclose(printed, dW[:, :, 0, 0], rtol=1e-5)
    quiet = run("grad", "conv", "-k", "vertical", src, "-o", tmp_path / "q", "-q")
    assert quiet.exit_code == 0 and quiet.stderr == ""
    # The manifest records the convolution inside the gradient's options.
    line = manifest_records(out)[0]
    assert line["output"] == "photo_grad-conv-vertical-Bconstant-energy-sum.npy"
    assert line["options"]["loss"] == "energy"
    conv = line["options"]["conv"]
    assert conv["operation"] == "conv" and conv["options"]["border"] == "constant"
    assert conv["options"]["kernels"][0]["weights"] == W[:, :, 0, 0].tolist()


def test_grad_conv_of_a_dem_with_nodata_leaves_its_missing_pixels_out(tmp_path):
    """GDAL's nodata pixels are missing: the responses they reach are left out of L, dW is
    finite (it was NaN, and refused as a kernel), and dA_prev is missing at them."""
    import tifffile

    values = np.random.default_rng(9).uniform(100, 200, (20, 24)).astype(np.float32)
    values[5:7, 9] = -9999.0
    tifffile.imwrite(tmp_path / "dem.tif", values, extratags=[(42113, "s", 0, "-9999", True)])
    args = ["--loss", "energy", "--border", "constant", "--format", "npy"]
    result = ok("grad", "conv", "-k", "vertical", *args, tmp_path / "dem.tif", "-o", tmp_path / "o")
    data = np.load(tmp_path / "o" / "dem_grad-conv-vertical-Bconstant-energy-sum.npy")
    A = np.where(values == -9999.0, np.nan, values).astype(np.float64)[None, :, :, None]
    W = get_kernel("vertical").weights[:, :, None, None]
    hp = {"stride": 1, "pad": 1}
    dA, dW = conv_grads(A, W, np.zeros((1, 1, 1, 1)), hp, loss="energy", finite_only=True)
    assert np.isfinite(dW).all() and np.isnan(dA).sum() == 2
    np.testing.assert_array_equal(np.isnan(data), np.isnan(dA[0]))
    np.testing.assert_allclose(data, dA[0], rtol=1e-4, atol=1e-3 * np.nanmax(np.abs(dA)))
    lines = result.stderr.splitlines()
    printed = np.array([[float(x) for x in line.split(";")[0].split()] for line in lines[1:4]])
    tolerance = 1e-5 * np.abs(dW).max()  # float32 sums of large terms of both signs
    np.testing.assert_allclose(printed, dW[:, :, 0, 0], rtol=1e-5, atol=tolerance)


def test_grad_pool_takes_pool_pad_and_ceil(tmp_path):
    src = make_image(tmp_path / "photo.png", "L", seed=5, size=(11, 8))
    out = tmp_path / "out"
    ok(
        "grad",
        "pool",
        "--mode",
        "average",
        "--size",
        "3",
        "--stride",
        "2",
        "--pad",
        "1",
        "--ceil",
        src,
        "-o",
        out,
        "--format",
        "npy",
    )
    data = np.load(out / "photo_grad-pool-average-f3-s2-p1-ceil.npy")
    A = pixels(src, "L").astype(np.float64)[None]
    expected = pool_input_grad(A, f=3, stride=2, mode="average", pad=1, ceil=True)[0]
    np.testing.assert_allclose(data, expected, rtol=1e-6)
    assert_one_line_error(
        run("grad", "pool", "--size", "3", "--pad", "2", src, "-o", out), 2, "--pad"
    )


def test_grad_conv_takes_a_pad_per_side(tmp_path):
    """--pad T,B,L,R: the border's gradient folds back onto the pixels each side copies."""
    src = make_image(tmp_path / "photo.png", "L", seed=4, size=(11, 8))
    out = tmp_path / "out"
    ok(
        "grad",
        "conv",
        "-k",
        "sobel-x",
        "--pad",
        "2,0,1,3",
        "--loss",
        "energy",
        src,
        "-o",
        out,
        "--format",
        "npy",
    )
    (written,) = [p for p in outputs_in(out) if p.suffix == ".npy"]
    A = pixels(src, "L").astype(np.float64)[None]
    W = get_kernel("sobel-x").weights[:, :, None, None]
    padded = pad_images(A, (2, 0, 1, 3), mode="reflect")
    dA, _ = conv_grads(padded, W, np.zeros((1, 1, 1, 1)), {"stride": 1, "pad": 0}, loss="energy")
    expected = unpad_grad(dA, (2, 0, 1, 3), mode="reflect")[0]
    np.testing.assert_allclose(
        np.load(written), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max()
    )


def test_grad_conv_pads_a_kernel_that_is_not_square_by_side(tmp_path):
    """--pad same with a 1x3 kernel: (0, 0, 1, 1), as --pad 0,0,1,1 gives."""
    src = make_image(tmp_path / "photo.png", "L", seed=4, size=(11, 8))
    row = tmp_path / "row.txt"
    row.write_text("1 2 -1\n")
    written = []
    for pad in ("same", "0,0,1,1"):
        out = tmp_path / pad
        ok(
            "grad",
            "conv",
            "-k",
            row,
            "--pad",
            pad,
            "--loss",
            "energy",
            src,
            "-o",
            out,
            "--format",
            "npy",
        )
        (npy,) = [p for p in outputs_in(out) if p.suffix == ".npy"]
        written.append(np.load(npy))
    assert written[0].shape == (8, 11, 1)
    np.testing.assert_array_equal(written[0], written[1])


@pytest.mark.parametrize("border", PAD_MODES)
def test_grad_conv_folds_the_border_back(tmp_path, border):
    """With a border, each border value's gradient goes to the pixel it copies."""
    src = make_image(tmp_path / "photo.png", "RGB", seed=3, size=(9, 7))
    out = tmp_path / "out"
    ok(
        "grad",
        "conv",
        "-k",
        "sobel-x",
        "--channels",
        "each",
        "--border",
        border,
        "--loss",
        "energy",
        src,
        "-o",
        out,
        "--format",
        "npy",
    )
    tag = "" if border == "reflect" else f"-B{border}"
    data = np.load(out / f"photo_grad-conv-sobel-x{tag}-energy-each.npy")
    W = get_kernel("sobel-x").weights[:, :, None, None]
    for c in range(3):
        channel = pixels(src)[None, :, :, c : c + 1].astype(np.float64)

        def loss(channel=channel):
            Z, _ = conv_forward(
                pad_images(channel, 1, mode=border),
                W,
                np.zeros((1, 1, 1, 1)),
                {"stride": 1, "pad": 0},
            )
            return 0.5 * float(np.sum(Z * Z))

        expected = numerical_gradient(loss, channel, eps=1e-3)[0, :, :, 0]
        np.testing.assert_allclose(
            data[:, :, c], expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max()
        )


def test_grad_figure_and_offset_mapping(tmp_path):
    src = make_image(tmp_path / "photo.png", "L", seed=4)
    out = tmp_path / "out"
    ok("grad", "conv", "-k", "edge", "--loss", "energy", src, "-o", out, "--figure")
    assert (out / "photo_grad-conv-edge-energy-sum_grid.png").exists()
    levels = read(out / "photo_grad-conv-edge-energy-sum.png").astype(float)
    ok("grad", "conv", "-k", "edge", "--loss", "energy", src, "-o", out, "--format", "npy")
    raw = np.load(out / "photo_grad-conv-edge-energy-sum.npy")[:, :, 0]
    np.testing.assert_allclose(levels, np.rint(127.5 + raw / np.abs(raw).max() * 127.5), atol=1)


def test_grad_outputs_are_earlier_outputs(tmp_path):
    names = [
        "photo.png",
        "photo_grad-pool-max-f2-s2-R.png",
        "photo_grad-conv-vertical-sum-sum.npy",
        "photo_grad-conv-edge-energy-sum_grid.png",
    ]
    assert "grad" in OPERATION_NAMES
    assert earlier_outputs(names, OPERATION_NAMES) == set(names[1:])
    # and a run into its own input folder takes only the photo
    folder = tmp_path / "photos"
    folder.mkdir()
    make_image(folder / "photo.png", "L", seed=5)
    ok("grad", "pool", folder, "-o", folder)
    again = ok("grad", "pool", folder, "-o", folder, "-v")
    assert "1 skipped" in again.stderr


def test_grad_commands_take_the_common_options():
    from convcli.cli.main import main

    common = {
        "out_dir",
        "fmt",
        "figure",
        "recursive",
        "quiet",
        "overwrite",
        "max_pixels",
        "jobs",
        "scheduler",
    }
    grad = main.commands["grad"]
    assert {name: cmd.callback.__name__ for name, cmd in grad.commands.items()} == {
        "pool": "grad_pool_cmd",
        "conv": "grad_conv_cmd",
    }
    for cmd in grad.commands.values():
        assert common <= {p.name for p in cmd.params}


def test_grad_usage_errors(tmp_path):
    src = make_image(tmp_path / "photo.png", "L", seed=6)
    result = run(
        "grad", "conv", "-k", "vertical,horizontal", "--combine", "max", src, "-o", tmp_path / "o"
    )
    assert_one_line_error(result, 2, "--combine")
    result = run("grad", "pool", "--size", "50", src, "-o", tmp_path / "o2")
    assert result.exit_code == 1
    assert "too small" in result.stderr


def test_grad_conv_each_of_a_blur_on_rgba_writes_one_map_per_colour(tmp_path):
    """Alpha is no input of the layer grad conv differentiates: a blur's maps, as an edge
    kernel's, are of the colours over black, named R, G and B (it failed on a 4th map, A)."""
    src = make_image(tmp_path / "photo.png", "RGBA", seed=7, size=(9, 7))
    out = tmp_path / "out"
    for kernel in ("box", "sobel-x"):
        ok("grad", "conv", "-k", kernel, "--channels", "each", src, "-o", out)
        ok("grad", "conv", "-k", kernel, "--channels", "each", src, "-o", out, "--format", "npy")
    names = [p.name for p in outputs_in(out)]
    for label in ("box-blur", "sobel-x"):
        assert [n for n in names if label in n and n.endswith(".png")] == [
            f"photo_grad-conv-{label}-energy-{c}.png" for c in "BGR"
        ]
    rgba = pixels(src, "RGBA").astype(np.float64)
    over_black = rgba[None, :, :, :3] * rgba[None, :, :, 3:] / 255
    W = get_kernel("box").weights[:, :, None, None]
    data = np.load(out / "photo_grad-conv-box-blur-energy-each.npy")
    assert data.shape == (7, 9, 3)
    for c in range(3):
        channel = pad_images(over_black[..., c : c + 1], 1, mode="reflect")
        hp = {"stride": 1, "pad": 0}
        dA, _ = conv_grads(channel, W, np.zeros((1, 1, 1, 1)), hp, loss="energy")
        expected = unpad_grad(dA, 1, mode="reflect")[0, :, :, 0]
        np.testing.assert_allclose(data[:, :, c], expected, rtol=1e-4, atol=1e-3)
