"""The commands pad, conv, pool and kernels: outputs re-read and checked against the library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile
from helpers import (
    HEIGHT,
    MODES,
    WIDTH,
    engine,
    make_exif_rotated_jpeg,
    make_gif,
    make_image,
    make_multipage_tiff,
    ok,
    outputs_in,
    pixels,
    read,
    run,
)
from PIL import Image

from convcli import conv_forward, depthwise_conv_forward, pad_images, pool_forward
from convcli.choices import COMBINE_MODES, MAPPINGS, PAD_MODES
from convcli.cli.main import main
from convcli.io.image_files import save_levels
from convcli.kernels import get_kernel, list_kernels, load_kernel_file, parse_kernel_spec


def levels(x, method, top=255, white=255.0, margin=4):
    """The documented value mappings, written out independently."""
    x = np.asarray(x, np.float64)
    if method == "abs":
        frac = np.abs(x) / np.abs(x).max()
    elif method == "robust":  # the 99.5th percentile of |x| away from the border is white
        frac = np.abs(x) / np.percentile(np.abs(x[margin:-margin, margin:-margin]), 99.5)
    elif method == "minmax":
        frac = (x - x.min()) / (x.max() - x.min())
    elif method == "clip":
        frac = x / white
    else:
        frac = 0.5 + x / (2 * np.abs(x).max())
    return np.rint(np.clip(frac, 0, 1) * top)


def reflected(A, pad=1):
    """A padded as conv's default --border (reflect) pads it before conv_forward with pad 0."""
    return pad_images(A, pad, mode="reflect")


def weights(names, n_in):
    """W with W[:, :, k, c] = kernel c for every input channel k, as float32."""
    stack = np.stack([get_kernel(n).weights for n in names], axis=-1)
    return np.repeat(stack[:, :, None, :], n_in, axis=2).astype(np.float32)


# --- pad -------------------------------------------------------------------------------------


def test_pad_defaults_write_the_whole_image_alone_and_separate_adds_channels(photo, out):
    ok("pad", photo, "-o", out)
    assert {p.name for p in outputs_in(out)} == {"photo_pad-constant-2.png"}
    A = pixels(photo)
    expected = pad_images(A[None], 2, mode="constant", value=0)[0]
    np.testing.assert_array_equal(read(out / "photo_pad-constant-2.png"), expected)
    ok("pad", photo, "-o", out, "--separate")
    names = {p.name for p in outputs_in(out)}
    assert names == {f"photo_pad-constant-2{s}.png" for s in ("", "-R", "-G", "-B")}
    for c, name in enumerate("RGB"):
        np.testing.assert_array_equal(
            read(out / f"photo_pad-constant-2-{name}.png"), expected[:, :, c]
        )


@pytest.mark.parametrize("mode", PAD_MODES)
def test_pad_modes_npy_equals_library(photo, out, mode):
    ok("pad", photo, "-o", out, "--pad", 3, "--value", 50, "--mode", mode, "--format", "npy")
    tag = f"{mode}-3-v50" if mode == "constant" else f"{mode}-3"
    result = np.load(out / f"photo_pad-{tag}.npy")
    assert result.dtype == np.float32
    np.testing.assert_array_equal(
        result, pad_images(pixels(photo)[None], 3, mode=mode, value=50)[0]
    )


def test_pad_value_outside_the_range_is_clipped_in_images_kept_in_npy(photo, out):
    ok("pad", photo, "-o", out, "--value", 300, "--format", "png", "--separate")
    ok("pad", photo, "-o", out, "--value", 300, "--format", "npy")
    assert read(out / "photo_pad-constant-2-v300-R.png")[0, 0] == 255
    assert np.load(out / "photo_pad-constant-2-v300.npy")[0, 0, 0] == 300


@pytest.mark.parametrize("memory", [None, "1M"], ids=["whole", "strips"])
def test_pad_value_past_the_range_is_said_with_what_the_border_holds(
    tmp_path, out, small_strips, memory
):
    grey = np.random.default_rng(5).integers(0, 256, (1200, 1000), np.uint8)
    tifffile.imwrite(tmp_path / "grey.tif", grey)
    deep = tmp_path / "deep.png"
    Image.fromarray(np.full((20, 30), 1000, np.uint16)).save(deep)
    extra = ["--memory", memory] if memory else []
    result = ok("pad", tmp_path / "grey.tif", deep, "-o", out, "--value", -5, "-v", *extra)
    said = (
        "--value -5 is past the samples' range, 0 to 255: the border is 0 in image files "
        "(-5 in npy)"
    )
    assert f"grey.tif: done, 1 written ({'processed in strips' if memory else said}" in (
        result.stderr
    )
    assert said in result.stderr
    assert "deep.png: done, 1 written (--value -5 is past the samples' range, 0 to 65535: " in (
        result.stderr
    )
    padded = tifffile.imread(out / "grey_pad-constant-2-v-5-L.tiff")
    assert padded[0, 0] == 0 and np.array_equal(padded[2:-2, 2:-2], grey)
    with Image.open(out / "deep_pad-constant-2-v-5-L.png") as written:
        assert np.asarray(written)[0, 0] == 0  # -5 is past 16-bit's range too
    ok("pad", tmp_path / "grey.tif", "-o", out, "--value", -5, "--format", "npy", *extra)
    assert np.load(out / "grey_pad-constant-2-v-5.npy")[0, 0, 0] == -5  # as the note says
    ok("pad", deep, "-o", out, "--value", 300, "--overwrite")
    result = ok("pad", deep, "-o", out, "--value", 300, "--overwrite", "-v")
    assert "past the samples' range" not in result.stderr  # 300 is a 16-bit level
    with Image.open(out / "deep_pad-constant-2-v300-L.png") as written:
        assert np.asarray(written)[0, 0] == 300


@pytest.mark.parametrize(
    "value, level, what",
    [
        ("100.4", 100, "is no whole level"),
        ("101.5", 102, "is no whole level"),  # the even level at a half, as levels are made
        ("254.6", 255, "is no whole level"),
        ("255.4", 255, "is past the samples' range"),
    ],
)
def test_pad_value_between_levels_is_said_with_the_level_written(photo, out, value, level, what):
    result = ok("pad", photo, "-o", out, "--value", value)
    said = (
        f"--value {value} {what}, 0 to 255: the border is {level} in image files ({value} in npy)"
    )
    assert said in result.stderr
    assert read(out / f"photo_pad-constant-2-v{value}.png")[0, 0].tolist() == [level] * 3
    quiet = ok("pad", photo, "-o", out, "--value", "100", "-v")
    assert "whole level" not in quiet.stderr and "past the samples" not in quiet.stderr


def test_pad_alpha_border_is_opaque_in_constant_mode(tmp_path, out):
    src = make_image(tmp_path / "a.png", "RGBA")
    ok("pad", src, "-o", out, "--format", "npy", "--value", 7)
    result = np.load(out / "a_pad-constant-2-v7.npy")
    A = pixels(src, "RGBA")
    np.testing.assert_array_equal(result[:, :, :3], pad_images(A[None, :, :, :3], 2, value=7)[0])
    assert np.all(result[:2, :, 3] == 255) and np.all(result[:, :2, 3] == 255)
    np.testing.assert_array_equal(result[2:-2, 2:-2, 3], A[:, :, 3])
    ok("pad", src, "-o", out, "--value", 7)
    assert read(out / "a_pad-constant-2-v7.png").shape == (HEIGHT + 4, WIDTH + 4, 4)
    ok("pad", src, "-o", out, "--mode", "edge", "--format", "npy")
    edge = np.load(out / "a_pad-edge-2.npy")
    np.testing.assert_array_equal(edge, pad_images(A[None], 2, mode="edge")[0])


# --- conv ------------------------------------------------------------------------------------


def test_conv_default_kernels_sum_npy_is_conv_forward(photo, out):
    ok("conv", photo, "-o", out, "--format", "npy")
    assert [p.name for p in outputs_in(out)] == ["photo_conv-vertical+horizontal+edge-sum.npy"]
    Z = np.load(out / "photo_conv-vertical+horizontal+edge-sum.npy")
    A = pixels(photo)[None]
    expected, _ = conv_forward(
        reflected(A),
        weights(["vertical", "horizontal", "edge"], 3),
        np.zeros((1, 1, 1, 3), np.float32),
        {"stride": 1, "pad": 0},
    )
    assert Z.dtype == np.float32 and Z.shape == (HEIGHT, WIDTH, 3)
    np.testing.assert_array_equal(Z, expected[0])


def test_conv_png_default_mapping_is_robust_for_edge_kernels(photo, out):
    ok("conv", photo, "-o", out, "-k", "vertical")
    assert [p.name for p in outputs_in(out)] == ["photo_conv-vertical-sum.png"]
    Z, _ = conv_forward(
        reflected(pixels(photo)[None]),
        weights(["vertical"], 3),
        np.zeros((1, 1, 1, 1)),
        {"stride": 1, "pad": 0},
    )
    got = read(out / "photo_conv-vertical-sum.png")
    assert got.dtype == np.uint8 and got.shape == (HEIGHT, WIDTH)
    assert np.abs(got.astype(int) - levels(Z[0, :, :, 0], "robust")).max() <= 1


@pytest.mark.parametrize("method", MAPPINGS)
def test_conv_normalize_methods(photo, out, method):
    ok("conv", photo, "-o", out, "-k", "sobel-x", "--normalize", method)
    Z, _ = conv_forward(
        reflected(pixels(photo)[None]),
        weights(["sobel-x"], 3),
        np.zeros((1, 1, 1, 1)),
        {"stride": 1, "pad": 0},
    )
    # An explicit mapping is part of the image names (but not of the .npy's: raw values).
    got = read(out / f"photo_conv-sobel-x-{method}-sum.png")
    assert np.abs(got.astype(int) - levels(Z[0, :, :, 0], method)).max() <= 1


def test_conv_names_differ_by_bias_and_normalize_so_a_rerun_does_not_keep_stale_files(photo, out):
    ok("conv", photo, "-o", out, "-k", "vertical")
    result = ok("conv", photo, "-o", out, "-k", "vertical", "--bias", 100)
    assert "outputs exist" not in result.stderr
    result = ok("conv", photo, "-o", out, "-k", "vertical", "--normalize", "offset")
    assert "outputs exist" not in result.stderr
    ok("conv", photo, "-o", out, "-k", "vertical", "--normalize", "auto")  # the default: skipped
    ok("conv", photo, "-o", out, "-k", "vertical", "--bias", -0.5, "--format", "npy")
    ok(
        "conv",
        photo,
        "-o",
        out,
        "-k",
        "vertical",
        "--bias",
        -0.5,
        "--normalize",
        "minmax",
        "--format",
        "npy",
    )  # the .npy is the same raw result: skipped
    assert sorted(p.name for p in outputs_in(out)) == [
        "photo_conv-vertical-b-0.5-sum.npy",
        "photo_conv-vertical-b100-sum.png",
        "photo_conv-vertical-offset-sum.png",
        "photo_conv-vertical-sum.png",
    ]
    Z = np.load(out / "photo_conv-vertical-b-0.5-sum.npy")
    expected, _ = conv_forward(
        reflected(pixels(photo)[None]),
        weights(["vertical"], 3),
        np.full((1, 1, 1, 1), -0.5, np.float32),
        {"stride": 1, "pad": 0},
    )
    np.testing.assert_array_equal(Z, expected[0])


def test_conv_auto_mapping_clip_for_identity_on_grey_mean_for_a_colour_blur(tmp_path, out):
    grey = make_image(tmp_path / "g.png", "L")
    ok("conv", grey, "-o", out, "-k", "identity")
    np.testing.assert_array_equal(read(out / "g_conv-identity-sum.png"), read(grey))
    colour = make_image(tmp_path / "c.png", "RGB")
    ok("conv", colour, "-o", out, "-k", "box-blur")
    Z, _ = conv_forward(
        reflected(pixels(colour)[None]),
        weights(["box-blur"], 3),
        np.zeros((1, 1, 1, 1)),
        {"stride": 1, "pad": 0},
    )
    got = read(out / "c_conv-box-blur-sum.png").astype(int)
    # R + G + B of the blurred picture, shown as their mean: the blurred photo in grey.
    assert np.abs(got - levels(Z[0, :, :, 0], "clip", white=3 * 255.0)).max() <= 1


def test_conv_kernel_specs_rotation_file_and_case(photo, out, tmp_path):
    kfile = tmp_path / "diag.txt"
    kfile.write_text("1 0 0\n0 0 0\n0 0 -1\n")
    ok(
        "conv",
        photo,
        "-o",
        out,
        "-k",
        "SOBEL-X:90",
        "-k",
        kfile,
        "-k",
        "Vertical",
        "--format",
        "npy",
    )
    (npy,) = outputs_in(out)
    diag = load_kernel_file(kfile).label  # "diag-" and six hex digits of its weights
    assert diag.startswith("diag-") and len(diag) == len("diag-") + 6
    assert npy.name == f"photo_conv-sobel-x_rot90+{diag}+vertical-sum.npy"
    Z = np.load(npy)
    A = pixels(photo)[None]
    stack = np.stack(
        [
            get_kernel("sobel-y").weights,
            load_kernel_file(kfile).weights,
            get_kernel("vertical").weights,
        ],
        axis=-1,
    )
    W = np.repeat(stack[:, :, None, :], 3, axis=2).astype(np.float32)
    expected, _ = conv_forward(
        reflected(A), W, np.zeros((1, 1, 1, 3), np.float32), {"stride": 1, "pad": 0}
    )
    np.testing.assert_array_equal(Z, expected[0])


def test_conv_stride_pad_and_bias(photo, out):
    ok(
        "conv",
        photo,
        "-o",
        out,
        "-k",
        "edge",
        "--stride",
        2,
        "--pad",
        "valid",
        "--bias",
        10,
        "--format",
        "npy",
    )
    Z = np.load(out / "photo_conv-edge-s2-p0-b10-sum.npy")
    expected, _ = conv_forward(
        pixels(photo)[None],
        weights(["edge"], 3),
        np.full((1, 1, 1, 1), 10, np.float32),
        {"stride": 2, "pad": 0},
    )
    assert Z.shape == ((HEIGHT - 3) // 2 + 1, (WIDTH - 3) // 2 + 1, 1)
    np.testing.assert_array_equal(Z, expected[0])
    ok("conv", photo, "-o", out, "-k", "edge", "--pad", 4)
    assert read(out / "photo_conv-edge-p4-sum.png").shape == (HEIGHT + 6, WIDTH + 6)


def usage_error(result, *needles):
    """Exit 2 with one line on stderr holding every needle, and nothing written."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_conv_even_kernel_with_pad_same(photo, out):
    # --pad same (the default) needs a centre cell: a 2x2 kernel is a usage error.
    usage_error(
        run("conv", photo, "-o", out, "-k", "roberts-nw"),
        "--pad",
        "kernel 'roberts-nw' is 2x2",
        "--pad valid",
    )
    usage_error(
        run("conv", photo, "-o", out, "-k", "vertical", "-k", "roberts-nw:90", "--pad", "same"),
        "kernel 'roberts-nw:90' is 2x2",
    )
    assert not out.exists()


def test_conv_even_kernel_with_pad_valid_or_n(photo, out):
    ok("conv", photo, "-o", out, "-k", "roberts-nw", "--pad", "valid", "--format", "npy")
    Z = np.load(out / "photo_conv-roberts-nw-p0-sum.npy")
    expected, _ = conv_forward(
        pixels(photo)[None],
        weights(["roberts-nw"], 3),
        np.zeros((1, 1, 1, 1)),
        {"stride": 1, "pad": 0},
    )
    assert Z.shape == (HEIGHT - 1, WIDTH - 1, 1)
    np.testing.assert_array_equal(Z, expected[0])
    ok("conv", photo, "-o", out, "-k", "roberts-ne", "--pad", 1, "--format", "npy")
    assert np.load(out / "photo_conv-roberts-ne-p1-sum.npy").shape == (HEIGHT + 1, WIDTH + 1, 1)


@pytest.mark.parametrize("grid, size", [("1 0\n0 -1\n", "2x2"), ("1 2 0\n-2 -1 0\n", "2x3")])
def test_conv_even_sided_kernel_file_with_pad_same_names_the_file(photo, out, tmp_path, grid, size):
    kfile = tmp_path / "k.txt"
    kfile.write_text(grid)
    usage_error(
        run("conv", photo, "-o", out, "-k", kfile),
        f"kernel 'k' ({kfile}) is {size}",
        "--pad same",
        "--pad valid",
    )
    ok("conv", photo, "-o", out, "-k", kfile, "--pad", "valid", "--format", "npy")
    kernel = load_kernel_file(kfile)
    h, w = kernel.size
    written = np.load(out / f"photo_conv-{kernel.label}-p0-sum.npy")
    assert written.shape == (HEIGHT - h + 1, WIDTH - w + 1, 1)


def test_conv_pad_same_keeps_the_size_with_an_odd_kernel_that_is_not_square(photo, out, tmp_path):
    kfile = tmp_path / "k.txt"
    kfile.write_text("1 2 0 -2 -1\n")
    ok("conv", photo, "-o", out, "-k", kfile, "--format", "npy")
    ok("conv", photo, "-o", out, "-k", kfile, "--pad", "0,0,2,2", "--format", "npy")
    label = load_kernel_file(kfile).label
    same = np.load(out / f"photo_conv-{label}-sum.npy")
    assert same.shape == (HEIGHT, WIDTH, 1)
    np.testing.assert_array_equal(same, np.load(out / f"photo_conv-{label}-p0-0-2-2-sum.npy"))


def test_conv_channels_each_is_depthwise_kernel_major(photo, out):
    ok(
        "conv",
        photo,
        "-o",
        out,
        "-k",
        "vertical",
        "-k",
        "horizontal",
        "--channels",
        "each",
        "--format",
        "npy",
    )
    Z = np.load(out / "photo_conv-vertical+horizontal-each.npy")
    A = pixels(photo)[None]
    expected, _ = depthwise_conv_forward(
        reflected(A),
        weights(["vertical", "horizontal"], 3),
        np.zeros((1, 1, 1, 6), np.float32),
        {"stride": 1, "pad": 0},
    )
    np.testing.assert_array_equal(Z, expected[0])
    # Kernel-major: channel k * 3 + c is kernel k on input channel c alone.
    for k, name in enumerate(["vertical", "horizontal"]):
        for c in range(3):
            alone, _ = conv_forward(
                reflected(A[:, :, :, c : c + 1]),
                weights([name], 1),
                np.zeros((1, 1, 1, 1)),
                {"stride": 1, "pad": 0},
            )
            np.testing.assert_allclose(Z[:, :, k * 3 + c], alone[0, :, :, 0], atol=1e-3)
    ok("conv", photo, "-o", out, "-k", "vertical", "--channels", "each")
    assert {p.name for p in out.glob("*.png")} == {
        f"photo_conv-vertical-{c}.png" for c in ("R", "G", "B", "each")
    }


def test_conv_channels_gray_uses_luminance(photo, out):
    ok("conv", photo, "-o", out, "-k", "laplacian", "--channels", "gray", "--format", "npy")
    Z = np.load(out / "photo_conv-laplacian-gray.npy")
    rgb = pixels(photo)
    grey = (0.299 * rgb[:, :, 0] + 0.587 * rgb[:, :, 1] + 0.114 * rgb[:, :, 2])[None, :, :, None]
    expected, _ = conv_forward(
        reflected(grey), weights(["laplacian"], 1), np.zeros((1, 1, 1, 1)), {"stride": 1, "pad": 0}
    )
    np.testing.assert_allclose(Z, expected[0], atol=1e-3)


def test_edge_maps_of_rgba_see_the_colour_as_it_shows_over_black(tmp_path, out):
    src = make_image(tmp_path / "a.png", "RGBA")
    ok("conv", src, "-o", out, "-k", "vertical", "--format", "npy")
    Z = np.load(out / "a_conv-vertical-sum.npy")
    rgba = pixels(src, "RGBA")[None]
    assert (rgba[..., 3] == 0).any() and (rgba[..., 3] == 255).any()
    A = rgba[..., :3] * (rgba[..., 3:] / np.float32(255))
    expected, _ = conv_forward(
        reflected(A),
        weights(["vertical"], 3),
        np.zeros((1, 1, 1, 1), np.float32),
        {"stride": 1, "pad": 0},
    )
    np.testing.assert_allclose(Z, expected[0], rtol=0, atol=1e-3)
    ok("conv", src, "-o", out, "-k", "vertical", "--channels", "each")
    assert {p.name for p in out.glob("*.png")} == {
        f"a_conv-vertical-{c}.png" for c in ("R", "G", "B", "each")
    }


def alpha_weighted_blur(rgba: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Nested loops over the kernel's taps (border reflect): colour sum(w c a) / sum(w a),
    0 where sum(w a) is not above 0.001; alpha sum(w alpha)."""
    f = kernel.shape[0]
    padded = np.pad(
        rgba.astype(np.float64), ((f // 2, f // 2), (f // 2, f // 2), (0, 0)), mode="reflect"
    )
    h, w = rgba.shape[:2]
    colour, total = np.zeros((h, w, 3)), np.zeros((h, w, 1))
    for i in range(f):
        for j in range(f):
            window = padded[i : i + h, j : j + w]
            weight = window[..., 3:] / 255
            colour += kernel[i, j] * window[..., :3] * weight
            total += kernel[i, j] * weight
    with np.errstate(invalid="ignore", divide="ignore"):
        colour = np.where(total > 1e-3, colour / total, 0)
    return np.concatenate([colour, total * 255], axis=2)


@pytest.mark.parametrize("kernel", ["gaussian-3x3", "sharpen"])
def test_blur_and_sharpen_by_channel_are_weighted_by_alpha_and_keep_it(tmp_path, out, kernel):
    src = make_image(tmp_path / "a.png", "RGBA")
    ok("conv", src, "-o", out, "-k", kernel, "--channels", "each", "--format", "npy")
    got = np.load(out / f"a_conv-{kernel}-each.npy")
    rgba = pixels(src, "RGBA")
    want = alpha_weighted_blur(rgba, get_kernel(kernel).weights.astype(np.float64))
    assert got.shape == rgba.shape
    stable = np.abs(want[..., 3]) > 10  # away from a nearly empty weight, where it is ill-posed
    np.testing.assert_allclose(got[stable], want[stable], rtol=1e-5, atol=2e-3)
    np.testing.assert_allclose(got[..., 3], want[..., 3], rtol=0, atol=2e-3)
    ok("conv", src, "-o", out, "-k", kernel, "--channels", "each")
    assert {p.name for p in out.glob("*.png")} == {
        f"a_conv-{kernel}-{c}.png" for c in ("R", "G", "B", "A", "each")
    }
    written = read(out / f"a_conv-{kernel}-each.png")
    assert written.shape == rgba.shape
    np.testing.assert_array_equal(written, np.clip(np.rint(got), 0, 255))


@pytest.mark.parametrize("kernel", ["gaussian-3x3", "gaussian-5x5"])
def test_a_blurred_alpha_is_exact_and_rounds_its_halves_to_even_on_both_engines(tmp_path, kernel):
    """A blur's weights are sixteenths or 256ths: its alpha, of whole levels, is exact in
    float32, so both engines give the same levels, an exact half rounded to even."""
    rgba = np.random.default_rng(1).integers(0, 256, (60, 50, 4), dtype=np.uint8)
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
    weights = get_kernel(kernel).weights.astype(np.float64)
    f = len(weights)
    alpha = np.pad(rgba[..., 3].astype(np.float64), f // 2, mode="reflect")
    want = sum(  # exact: whole levels times sixteenths or 256ths
        weights[i, j] * alpha[i : i + 60, j : j + 50] for i in range(f) for j in range(f)
    )
    assert np.any(want % 1 == 0.5)  # ties to round
    for name in ("native", "numpy"):
        with engine(name):
            for fmt in ([], ["--format", "npy"]):  # the levels, and the values
                args = ("-k", kernel, "--channels", "each", *fmt, "-o", tmp_path / name)
                ok("conv", tmp_path / "a.png", *args)
        values = np.load(tmp_path / name / f"a_conv-{kernel}-each.npy")[..., 3]
        np.testing.assert_array_equal(values, want)
        for written in (
            read(tmp_path / name / f"a_conv-{kernel}-A.png"),
            read(tmp_path / name / f"a_conv-{kernel}-each.png")[..., 3],
        ):
            np.testing.assert_array_equal(written, np.clip(np.rint(want), 0, 255))


def test_conv_16_bit_in_16_bit_out(tmp_path, out):
    src = make_image(tmp_path / "deep.png", "I;16")
    ok("conv", src, "-o", out, "-k", "vertical")
    with Image.open(out / "deep_conv-vertical-sum.png") as im:
        assert im.mode == "I;16"
        got = np.asarray(im)
    Z, _ = conv_forward(
        reflected(pixels(src, None)[None]),
        weights(["vertical"], 1),
        np.zeros((1, 1, 1, 1)),
        {"stride": 1, "pad": 0},
    )
    assert np.abs(got.astype(int) - levels(Z[0, :, :, 0], "robust", top=65535)).max() <= 1
    ok("conv", src, "-o", out, "-k", "vertical", "--format", "tiff")
    with Image.open(out / "deep_conv-vertical-sum.tiff") as im:
        assert im.mode == "I;16"
    ok("conv", src, "-o", out, "-k", "vertical", "--format", "jpg")
    with Image.open(out / "deep_conv-vertical-sum.jpg") as im:
        assert im.mode == "L"  # JPEG is 8-bit


# --- pool ------------------------------------------------------------------------------------


def test_pool_defaults_max_2x2(photo, out):
    ok("pool", photo, "-o", out, "--separate")
    expected, _ = pool_forward(pixels(photo)[None], {"f": 2, "stride": 2}, mode="max")
    np.testing.assert_array_equal(read(out / "photo_pool-max-f2-s2.png"), expected[0])
    for c, name in enumerate("RGB"):
        np.testing.assert_array_equal(
            read(out / f"photo_pool-max-f2-s2-{name}.png"), expected[0, :, :, c]
        )


@pytest.mark.parametrize("mode", ["average", "avg", "AVG"])
def test_pool_average_size_stride(photo, out, mode):
    ok("pool", photo, "-o", out, "--mode", mode, "--size", 5, "--stride", 3, "--format", "npy")
    A = np.load(out / "photo_pool-average-f5-s3.npy")
    expected, _ = pool_forward(pixels(photo)[None], {"f": 5, "stride": 3}, mode="average")
    np.testing.assert_array_equal(A, expected[0])
    ok("pool", photo, "-o", out, "--mode", mode, "--size", 5, "--stride", 3, "--separate")
    got = read(out / "photo_pool-average-f5-s3-G.png")
    np.testing.assert_array_equal(got, np.rint(expected[0, :, :, 1]))


def visible_max_pool(A: np.ndarray, f: int, stride: int) -> np.ndarray:
    """Nested loops: alpha (last) pooled as it is, each colour the largest among the visible
    pixels of its window (alpha above 0), 0 where none is visible."""
    rows, cols = (A.shape[0] - f) // stride + 1, (A.shape[1] - f) // stride + 1
    out = np.zeros((rows, cols, A.shape[2]), np.float32)
    for i in range(rows):
        for j in range(cols):
            window = A[i * stride : i * stride + f, j * stride : j * stride + f].reshape(
                -1, A.shape[2]
            )
            out[i, j, -1] = window[:, -1].max()
            seen = window[window[:, -1] > 0]
            if len(seen):
                out[i, j, :-1] = seen[:, :-1].max(axis=0)
    return out


def test_pool_pools_alpha(tmp_path, out):
    src = make_image(tmp_path / "a.png", "RGBA")
    ok("pool", src, "-o", out, "--size", 3, "--format", "npy")
    A = pixels(src, "RGBA")
    assert (A[..., 3] == 0).any()  # some pixels are transparent: their colour is left out
    expected = visible_max_pool(A, 3, 3)[None]
    np.testing.assert_array_equal(np.load(out / "a_pool-max-f3-s3.npy"), expected[0])
    ok("pool", src, "-o", out, "--size", 3, "--separate")
    assert read(out / "a_pool-max-f3-s3.png").shape[2] == 4
    np.testing.assert_array_equal(read(out / "a_pool-max-f3-s3-A.png"), expected[0, :, :, 3])


def test_average_pooling_weighs_colours_by_alpha(tmp_path, out):
    src = make_image(tmp_path / "a.png", "RGBA")
    ok("pool", src, "-o", out, "--mode", "average", "--size", 2, "--format", "npy")
    A = pixels(src, "RGBA").astype(np.float64)
    got = np.load(out / "a_pool-average-f2-s2.npy")
    for i in range(got.shape[0]):
        for j in range(got.shape[1]):
            window = A[2 * i : 2 * i + 2, 2 * j : 2 * j + 2].reshape(-1, 4)
            alpha = window[:, 3]
            assert got[i, j, 3] == pytest.approx(alpha.mean(), abs=1e-4)
            want = (window[:, :3] * alpha[:, None]).sum(0) / alpha.sum() if alpha.sum() else 0
            np.testing.assert_allclose(got[i, j, :3], want, rtol=1e-5, atol=1e-4)


def test_pool_16_bit(tmp_path, out):
    src = make_image(tmp_path / "deep.png", "I;16")
    ok("pool", src, "-o", out, "--format", "tiff")
    with Image.open(out / "deep_pool-max-f2-s2-L.tiff") as im:
        assert im.mode == "I;16"
        expected, _ = pool_forward(pixels(src, None)[None], {"f": 2, "stride": 2})
        np.testing.assert_array_equal(np.asarray(im), expected[0, :, :, 0])


# --- images in -------------------------------------------------------------------------------


EXPECTED_CHANNELS = {
    "1": "L",
    "L": "L",
    "LA": "LA",
    "P": "RGB",
    "P+transparency": "RGBA",
    "RGB": "RGB",
    "RGBA": "RGBA",
    "CMYK": "RGB",
    "I;16": "L",
    "I": "L",
    "F": "L",
}


@pytest.mark.parametrize("mode", list(MODES))
def test_every_mode_through_pool_and_conv(tmp_path, out, mode):
    src = make_image(tmp_path / f"m.{MODES[mode]}", mode)
    ok("pool", src, "-o", out, "--format", "npy")
    pillow_mode = {"1": "L", "P": "RGB", "P+transparency": "RGBA", "CMYK": "RGB"}.get(mode)
    A = pixels(src, pillow_mode)
    if EXPECTED_CHANNELS[mode].endswith("A"):  # colours of visible pixels only
        expected = visible_max_pool(A, 2, 2)[None]
    else:
        expected, _ = pool_forward(A[None], {"f": 2, "stride": 2})
    np.testing.assert_array_equal(np.load(out / "m_pool-max-f2-s2.npy"), expected[0])
    ok("conv", src, "-o", out, "-k", "vertical", "--channels", "each")
    colour = EXPECTED_CHANNELS[mode].replace("A", "")
    colour_image = {"m_conv-vertical-each.png"} if len(colour) > 1 else set()
    assert {p.name for p in out.glob("*.png")} == {
        f"m_conv-vertical-{c}.png" for c in colour
    } | colour_image


def test_exif_orientation_is_applied(tmp_path, out):
    make_exif_rotated_jpeg(tmp_path / "rot.jpg", orientation=6)
    ok("pool", tmp_path / "rot.jpg", "-o", out, "--format", "npy")
    result = np.load(out / "rot_pool-max-f2-s2.npy")
    assert result.shape == (WIDTH // 2, HEIGHT // 2, 3)  # upright: 30 wide, 40 high
    assert result[:5, -5:].mean() > 240  # the stored top-left block is now top-right


def test_gif_and_multipage_tiff_with_frames_first_use_the_first_frame_and_say_so(tmp_path, out):
    gif = make_gif(tmp_path / "anim.gif", frames=3)
    tif = make_multipage_tiff(tmp_path / "pages.tiff", pages=2)
    result = ok("pool", gif, tif, "-o", out, "--format", "npy", "--frames", "first")
    assert f"{gif}: used the first of 3 frames" in result.stderr
    assert f"{tif}: used the first of 2 frames" in result.stderr
    assert np.all(np.load(out / "anim_pool-max-f2-s2-frames0.npy") == 60)
    quiet = ok("pool", gif, "-o", tmp_path / "q", "-q", "--frames", "first")
    assert quiet.stderr == ""


def test_gif_and_multipage_tiff_give_every_frame_by_default(tmp_path, out):
    gif = make_gif(tmp_path / "anim.gif", frames=3)
    tif = make_multipage_tiff(tmp_path / "pages.tiff", pages=2)
    result = ok("pool", gif, tif, "-o", out, "--format", "npy")
    assert f"{gif}: 3 frames" in result.stderr
    stack = np.load(out / "anim_pool-max-f2-s2.npy")
    assert stack.shape == (3, HEIGHT // 2, WIDTH // 2, 3)  # a GIF is read as RGB
    assert [np.unique(frame).tolist() for frame in stack] == [[60], [120], [180]]
    assert np.load(out / "pages_pool-max-f2-s2.npy").shape[0] == 2


# --- figures ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command, grid_name",
    [
        (["conv"], "photo_conv-vertical+horizontal+edge-sum_grid.png"),
        (["conv", "--channels", "each"], "photo_conv-vertical+horizontal+edge-each_grid.png"),
        (["pool"], "photo_pool-max-f2-s2_grid.png"),
        (["pad"], "photo_pad-constant-2_grid.png"),
    ],
)
def test_figure_grid_is_written_beside_the_outputs(photo, out, command, grid_name):
    ok(*command, photo, "-o", out, "--figure")
    grid = out / grid_name
    with Image.open(grid) as im:
        assert im.format == "PNG" and im.width > 300 and im.height > 100


def test_figure_with_npy_output(photo, out):
    ok("conv", photo, "-o", out, "--figure", "--format", "npy", "-k", "vertical")
    assert sorted(p.name for p in outputs_in(out)) == [
        "photo_conv-vertical-sum.npy",
        "photo_conv-vertical-sum_grid.png",
    ]


def test_importing_the_cli_does_not_import_matplotlib():
    code = "import sys, convcli.cli.main; sys.exit('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# --- kernels ---------------------------------------------------------------------------------


def test_kernels_lists_every_kernel_on_stdout():
    result = run("kernels")
    assert result.exit_code == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert len(lines) == len(list_kernels())
    for line, kernel in zip(lines, list_kernels(), strict=True):
        assert line.split()[:2] == [kernel.name, f"{kernel.size[0]}x{kernel.size[1]}"]
        assert kernel.description in line


def test_pad_value_beyond_float32_is_a_usage_error(photo, out):
    # Needs the CLI to turn PadOp's OptionError into a usage error.
    usage_error(run("pad", photo, "-o", out, "--value", "1e40"), "--value", "float32")
    assert not out.exists()


@pytest.mark.parametrize("command", [["conv"], ["grad", "conv"]])
def test_a_bias_beyond_float32_is_a_usage_error(photo, out, command):
    # 1e300 made every result infinite, written as a map of non-finite values, exit 0.
    result = run(*command, "-k", "vertical", "--bias", "1e300", photo, "-o", out)
    usage_error(result, "--bias", "1e+300 is beyond the float32 range")
    assert not out.exists()


@pytest.mark.parametrize("spec", ["sobel-x", "Vertical", "sobel-x:90", "edge", "box", "gaussian5"])
def test_kernels_name_prints_a_grid_that_is_a_kernel_file(tmp_path, spec):
    result = run("kernels", spec)
    assert result.exit_code == 0 and result.stderr == ""
    kernel = parse_kernel_spec(spec)
    assert result.stdout.startswith(f"# {kernel.name} ({kernel.size[0]}x{kernel.size[1]}): ")
    saved = tmp_path / "k.txt"
    saved.write_text(result.stdout)
    np.testing.assert_array_equal(load_kernel_file(saved).weights, kernel.weights)  # exactly


# --- help ------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["pad", "conv", "pool", "kernels"])
def test_help_has_examples(command):
    result = run(command, "--help")
    assert result.exit_code == 0
    assert "Examples:" in result.stdout and f"convcli {command}" in result.stdout


def test_command_functions_and_common_options():
    assert {name: cmd.callback.__name__ for name, cmd in main.commands.items()} == {
        "pad": "pad_cmd",
        "conv": "conv_cmd",
        "pool": "pool_cmd",
        "kernels": "kernels_cmd",
        "grad": "grad_cmd",
        "fit": "fit_cmd",
        "explain": "explain_cmd",
    }
    common = {"out_dir", "fmt", "figure", "recursive", "quiet", "overwrite", "max_pixels"}
    for name in ("pad", "conv", "pool"):
        assert common <= {p.name for p in main.commands[name].params}


def test_python_dash_m_and_version():
    result = subprocess.run(
        [sys.executable, "-m", "convcli", "--version"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0 and "convcli" in result.stdout


def test_readme_setup_command_runs_on_the_sample_images(tmp_path):
    samples = Path(__file__).resolve().parent.parent / "sample_images"
    result = ok("conv", "--kernel", "vertical", samples, "-o", tmp_path, "-q")
    assert result.stderr == ""
    assert len(list(tmp_path.glob("*_conv-vertical-sum.png"))) == 4


def test_overwrite_in_the_input_folder_keeps_a_real_image_with_an_output_name(tmp_path):
    folder = tmp_path / "pics"
    folder.mkdir()
    make_image(folder / "a.png", "RGB")
    real = make_image(folder / "a_conv-vertical-sum.png", "L", seed=3)
    before = real.read_bytes()
    result = run(
        "conv",
        "-k",
        "vertical",
        "-k",
        "edge",
        "-j",
        "1",
        "--overwrite",
        "--figure",
        folder / "a.png",
        "-o",
        folder,
    )
    assert result.exit_code == 1, result.output
    assert f"{real}: the existing file was not written by convcli and is kept" in result.stderr
    assert real.read_bytes() == before
    # convcli's own outputs are replaced by a re-run with --overwrite.
    ok("conv", "-k", "edge", "--overwrite", "--figure", folder / "a.png", "-o", folder)
    edge = folder / "a_conv-edge-sum.png"
    good = pixels(edge, "L")
    assert good.any()
    save_levels(edge, np.zeros((2, 2), np.uint8), fmt="png", overwrite=True)  # a stale output
    ok("conv", "-k", "edge", "--overwrite", "--figure", folder / "a.png", "-o", folder)
    assert np.array_equal(pixels(edge, "L"), good)
    assert real.read_bytes() == before
    assert pixels(edge, "L").shape == (HEIGHT, WIDTH, 1)


# --- borders, colour results and combined maps (issue 9) -------------------------------------


def test_conv_border_constant_is_conv_forwards_zero_padding(photo, out):
    ok("conv", photo, "-o", out, "-k", "edge", "--border", "constant", "--format", "npy")
    Z = np.load(out / "photo_conv-edge-Bconstant-sum.npy")
    expected, _ = conv_forward(
        pixels(photo)[None],
        weights(["edge"], 3),
        np.zeros((1, 1, 1, 1), np.float32),
        {"stride": 1, "pad": 1},
    )
    np.testing.assert_array_equal(Z, expected[0])
    ok("conv", photo, "-o", out, "-k", "edge", "--border", "WRAP", "--format", "npy")
    Z = np.load(out / "photo_conv-edge-Bwrap-sum.npy")
    expected, _ = conv_forward(
        pad_images(pixels(photo)[None], 1, mode="wrap"),
        weights(["edge"], 3),
        np.zeros((1, 1, 1, 1), np.float32),
        {"stride": 1, "pad": 0},
    )
    np.testing.assert_array_equal(Z, expected[0])
    usage_error(run("conv", photo, "-o", out, "--border", "mirror"), "--border")


@pytest.mark.parametrize("kernel", ["gaussian-3x3", "sobel-x"])
def test_conv_channels_each_also_writes_the_colour_image(photo, out, kernel):
    ok("conv", photo, "-o", out, "-k", kernel, "--channels", "each")
    with Image.open(out / f"photo_conv-{kernel}-each.png") as im:
        assert im.mode == "RGB"
        colour = np.asarray(im)
    for c, name in enumerate("RGB"):
        per_channel = read(out / f"photo_conv-{kernel}-{name}.png")
        np.testing.assert_array_equal(colour[:, :, c], per_channel)


def test_conv_combine_magnitude_max_and_sum_from_the_separate_results(photo, out):
    ok("conv", photo, "-o", out, "-k", "sobel-x", "-k", "sobel-y", "--format", "npy")
    separate = np.load(out / "photo_conv-sobel-x+sobel-y-sum.npy")
    x, y = separate[:, :, 0], separate[:, :, 1]
    combined = {"magnitude": np.sqrt(x**2 + y**2), "max": np.maximum(x, y), "sum": x + y}
    assert tuple(combined) == COMBINE_MODES
    for combine, expected in combined.items():
        ok(
            "conv",
            photo,
            "-o",
            out,
            "-k",
            "sobel-x",
            "-k",
            "sobel-y",
            "--combine",
            combine,
            "--format",
            "npy",
        )
        Z = np.load(out / f"photo_conv-sobel-x+sobel-y-{combine}-sum.npy")
        assert Z.shape == (HEIGHT, WIDTH, 1)
        np.testing.assert_allclose(Z[:, :, 0], expected, rtol=1e-6)
    ok("conv", photo, "-o", out, "-k", "sobel-x", "-k", "sobel-y", "--combine", "magnitude")
    got = read(out / "photo_conv-sobel-x+sobel-y-magnitude-sum.png").astype(int)
    assert np.abs(got - levels(np.sqrt(x**2 + y**2), "robust")).max() <= 1


def test_a_blur_of_colour_pictures_summed_says_once_that_each_keeps_colour(tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    for seed in range(3):
        make_image(folder / f"p{seed}.png", "RGB", seed=seed)
    make_image(folder / "grey.png", "L", seed=9)
    hint = (
        "gaussian-3x3, sharpen on colour pictures with --channels sum: one grey map of "
        "R + G + B; --channels each gives the colour result"
    )
    result = ok("conv", "-k", "gaussian-3x3,sharpen,edge", folder, "-o", tmp_path / "a", "-j", 2)
    assert result.stderr.count(hint) == 1
    assert result.stderr.count("--channels each") == 1
    for args in (
        ["-k", "gaussian-3x3", "--channels", "each"],
        ["-k", "edge"],
        ["-k", "gaussian-3x3", folder / "grey.png", "-o", tmp_path / "g.png"],
    ):
        args = args if "-o" in args else [*args, folder, "-o", tmp_path / "b", "--overwrite"]
        assert "--channels each" not in ok("conv", *args).stderr


def test_another_kernel_file_of_the_same_name_writes_files_of_its_own(photo, out, tmp_path):
    """-k a/k.txt, then -k b/k.txt (or the file edited, or a file named as a shipped kernel)
    into one folder: each run writes its own values, none is skipped for another's file."""
    runs = {"a/k.txt": "1 0 -1\n", "b/k.txt": "0 1 0\n", "edge": "-1 -1 -1\n-1 8 -1\n-1 -1 -1\n"}
    expected = {}
    for name, grid in runs.items():
        kfile = tmp_path / name
        kfile.parent.mkdir(exist_ok=True)
        kfile.write_text(grid)
        result = ok("conv", photo, "-o", out, "-k", kfile, "--format", "npy", "-v")
        assert "1 processed, 0 skipped" in result.stderr
        expected[load_kernel_file(kfile).label] = load_kernel_file(kfile).weights
    result = ok("conv", photo, "-o", out, "-k", "edge", "--format", "npy", "-v")
    assert "1 processed, 0 skipped" in result.stderr
    A = pixels(photo)[None].sum(axis=3, keepdims=True)
    for label, weights in expected.items():
        written = np.load(out / f"photo_conv-{label}-sum.npy")
        np.testing.assert_allclose(written, _correlate_same(A, weights), rtol=1e-5, atol=1e-3)
    assert len(list(out.glob("*.npy"))) == 4


def _correlate_same(A: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(H, W, 1) cross-correlation of (1, H, W, 1) `A` by an odd kernel, reflect-101 border."""
    h, w = weights.shape
    padded = np.pad(A[0, :, :, 0].astype(np.float64), ((h // 2,) * 2, (w // 2,) * 2), "reflect")
    rows, cols = A.shape[1:3]
    total = sum(
        weights[i, j] * padded[i : i + rows, j : j + cols] for i in range(h) for j in range(w)
    )
    return total[:, :, None]
