"""convcli fit: kernels recovered from a photo and its convolution, against least squares."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import tifffile
import tomllib
from helpers import MANIFEST, assert_one_line_error, make_image, ok, pixels, run
from hypothesis import given, settings
from hypothesis import strategies as st

from convcli import conv_forward
from convcli.app.fit import closest_kernel, fit_kernel, kernel_toml
from convcli.kernels import get_kernel, list_kernels, load_kernel_file

SAMPLES = Path(__file__).resolve().parent.parent / "sample_images"


def sample_crop(name="camera.png", size=96):
    """A grey crop of a sample photo, float64 (1, size, size, 1)."""
    A = pixels(SAMPLES / name, "L").astype(np.float64)
    return A[100 : 100 + size, 150 : 150 + size][None]


def convolved(A, W, bias=0.0, stride=1):
    Z, _ = conv_forward(
        A, W[:, :, None, None], np.full((1, 1, 1, 1), bias), {"stride": stride, "pad": 0}
    )
    return Z


def im2col(A, f, stride=1):
    """Every f x f window of A (m, H, W, 1) as a row, with a 1 for the bias: a plain loop."""
    m, h, w, _ = A.shape
    rows = []
    for i in range(m):
        for r in range(0, h - f + 1, stride):
            for c in range(0, w - f + 1, stride):
                rows.append(np.append(A[i, r : r + f, c : c + f, 0].ravel(), 1.0))
    return np.array(rows)


def random_kernel(f, seed):
    return np.random.default_rng(seed).normal(size=(f, f))


KERNELS = [
    ("sobel-x", None),
    ("gaussian-5x5", None),
    ("log-5x5", None),
    ("sharpen", None),
    ("random", 3),
    ("random", 5),
]


# --- the solver ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, f", KERNELS)
def test_fit_recovers_a_kernel_exactly(name, f):
    W = random_kernel(f, seed=11) if name == "random" else get_kernel(name).weights
    A = sample_crop()
    Y = convolved(A, W, bias=7.5)
    fit = fit_kernel(A, Y, W.shape)
    assert fit.relative_error < 1e-9
    np.testing.assert_allclose(fit.weights, W, atol=1e-6 * np.abs(W).max())
    assert fit.bias == pytest.approx(7.5, abs=1e-4)
    assert fit.stopped == "converged"
    assert fit.losses[0] == pytest.approx(1.0)
    assert all(b <= a * (1 + 1e-9) for a, b in zip(fit.losses, fit.losses[1:], strict=False))


@pytest.mark.parametrize("stride", [1, 2])
def test_fit_equals_least_squares_when_no_kernel_explains_the_pair(stride):
    """A pair no kernel explains: the fit is numpy's least-squares solution on im2col."""
    A = sample_crop(size=48)
    rng = np.random.default_rng(12)
    Y = convolved(A, get_kernel("emboss").weights, stride=stride)
    Y = Y + rng.normal(scale=20.0, size=Y.shape)
    fit = fit_kernel(A, Y, (3, 3), stride=stride)
    X = im2col(A, 3, stride)
    solution, *_ = np.linalg.lstsq(X, Y.ravel(), rcond=None)
    np.testing.assert_allclose(fit.weights.ravel(), solution[:9], rtol=1e-6, atol=1e-6)
    assert fit.bias == pytest.approx(solution[9], rel=1e-6, abs=1e-4)
    best = np.linalg.norm(X @ solution - Y.ravel()) / np.linalg.norm(Y)
    assert fit.relative_error == pytest.approx(best, rel=1e-9)


def test_fit_learns_one_kernel_over_a_batch():
    A = np.concatenate([sample_crop("camera.png", 40), sample_crop("astronaut.png", 40)])
    W = random_kernel(3, seed=13)
    fit = fit_kernel(A, convolved(A, W), (3, 3))
    np.testing.assert_allclose(fit.weights, W, atol=1e-7)


def test_fit_stops_at_steps_and_reports_progress():
    A = sample_crop(size=32)
    seen = []
    fit = fit_kernel(
        A,
        convolved(A, random_kernel(5, 14)),
        (5, 5),
        steps=3,
        progress=lambda step, error: seen.append((step, error)),
    )
    assert fit.stopped == "steps" and fit.steps == 3
    assert [s for s, _ in seen] == [1, 2, 3]
    assert [e for _, e in seen] == fit.losses[1:]


def test_fit_refuses_a_target_of_the_wrong_shape():
    with pytest.raises(ValueError, match="shape"):
        fit_kernel(np.ones((1, 8, 8, 1)), np.ones((1, 8, 8, 1)), (3, 3))


def test_closest_kernel_ignores_sign_and_scale():
    match = closest_kernel(-2.5 * get_kernel("sobel-y").weights, list_kernels())
    assert match.name == "sobel-y"
    assert match.scale == pytest.approx(-2.5)
    assert abs(match.cosine) == pytest.approx(1.0)
    # a 3x3 kernel inside a 5x5 grid is found too
    grid = np.pad(get_kernel("laplacian").weights, 1)
    assert closest_kernel(grid, list_kernels()).name == "laplacian"
    assert closest_kernel(np.zeros((3, 3)), list_kernels()) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=-1e30, max_value=1e30, width=64), min_size=9, max_size=9))
def test_kernel_file_gives_the_weights_back_exactly(tmp_path_factory, values):
    weights = np.array(values).reshape(3, 3)
    text = kernel_toml(weights, description='learned "here"', comments=["a note"])
    assert np.array(tomllib.loads(text)["weights"]).tobytes() == weights.tobytes()
    path = tmp_path_factory.mktemp("k") / "learned.toml"
    path.write_text(text)
    kernel = load_kernel_file(path)  # what conv -k reads
    assert kernel.weights.tobytes() == weights.tobytes()  # bit for bit, -0.0 included
    assert kernel.description == 'learned "here"'


# --- the command line ---------------------------------------------------------------------------


def test_fit_command_recovers_a_random_kernel_from_a_512_photo(tmp_path):
    """conv --format npy with a random 5x5 kernel file, then fit, then conv with the result."""
    src = SAMPLES / "astronaut.png"
    W = random_kernel(5, seed=15)
    kernel = tmp_path / "k.toml"
    kernel.write_text(kernel_toml(W, description="random", comments=[]))
    after = tmp_path / "after.npy"
    ok("conv", "-k", kernel, "--bias", "3", "--format", "npy", "-o", after, src)
    out = tmp_path / "learned.toml"
    result = ok("fit", src, after, "--size", "5", "-o", out)
    assert "relative error" in result.stderr
    assert "not" not in result.stderr.split("\n")[0]
    learned = load_kernel_file(out)
    np.testing.assert_allclose(learned.weights, W, atol=1e-4)
    bias = result.stderr.split("bias ")[1].split()[0]
    refit = tmp_path / "refit.npy"
    ok("conv", "-k", out, "--bias", bias, "--format", "npy", "-o", refit, src)
    Y, Z = np.load(after), np.load(refit)
    assert np.linalg.norm(Z - Y) / np.linalg.norm(Y) < 1e-3


@pytest.mark.parametrize("bias, printed", [("3", "3"), ("0", None), ("-0.123456", "-0.123")])
def test_fit_prints_the_bias_to_3_significant_digits_like_the_error(tmp_path, bias, printed):
    """The printed line rounds the bias as it rounds the error; the kernel file keeps it whole."""
    src = make_image(tmp_path / "photo.png", "L", seed=18, size=(48, 40))
    after = tmp_path / "after.npy"
    ok("conv", "-k", "sobel-x", "--bias", bias, "--format", "npy", "-o", after, src)
    out = tmp_path / "k.toml"
    first = ok("fit", src, after, "-o", out).stderr.splitlines()[0]
    match = re.fullmatch(
        r"convcli: relative error (\S+) after \d+ steps \(converged\); bias (\S+)", first
    )
    assert match, first
    error, shown = match.groups()
    assert error == f"{float(error):.3g}"
    assert shown == f"{float(shown):.3g}"
    if printed is not None:
        assert shown == printed
    full = re.search(r"--bias (\S+) ", out.read_text()).group(1)
    assert float(full) == pytest.approx(float(bias), abs=1e-4)


@pytest.mark.parametrize(
    "options, kernel",
    [
        (["--channels", "each", "--border", "constant"], "gaussian-3x3"),
        (["--stride", "2", "--pad", "valid"], "kirsch-ne"),
        (["--channels", "gray", "--border", "wrap"], "emboss"),
        (["--dilation", "2", "--pad", "1,2,3,0"], "sobel-y"),
        (["--dilation", "3", "--stride", "2", "--border", "symmetric"], "laplacian"),
    ],
)
def test_fit_command_takes_convs_options(tmp_path, options, kernel):
    src = make_image(tmp_path / "photo.png", "RGB", seed=16, size=(48, 40))
    after = tmp_path / "after.npy"
    ok("conv", "-k", kernel, *options, "--format", "npy", "-o", after, src)
    out = tmp_path / "k.toml"
    result = ok("fit", src, after, *options, "-o", out)
    np.testing.assert_allclose(load_kernel_file(out).weights, get_kernel(kernel).weights, atol=1e-4)
    assert f"closest named kernel: {kernel} x 1 " in result.stderr


def test_fit_outputs_that_cannot_be_written_are_one_line(tmp_path, monkeypatch):
    """A file where the output's folder should be, and a full disk for the kernel file and
    for the figure: one line naming the output, exit 1, nothing left behind."""
    import errno
    from pathlib import Path

    from matplotlib.figure import Figure

    src = make_image(tmp_path / "photo.png", "L", seed=17)
    after = tmp_path / "after.npy"
    ok("conv", "-k", "sobel-x", "--format", "npy", "-o", after, src)
    (tmp_path / "afile").write_text("mine\n")
    blocked = tmp_path / "afile" / "k.toml"
    assert_one_line_error(run("fit", src, after, "-o", blocked), 1, f"{blocked}: cannot be written")

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    out = tmp_path / "out" / "k.toml"
    with monkeypatch.context() as patched:
        patched.setattr(Path, "write_text", full_disk)
        assert_one_line_error(
            run("fit", src, after, "-o", out), 1, f"{out}: cannot be written: No space left"
        )
    assert list((tmp_path / "out").iterdir()) == []
    monkeypatch.setattr(Figure, "savefig", full_disk)
    figure = tmp_path / "out" / "k_grid.png"
    result = run("fit", src, after, "-o", out, "--figure")
    assert_one_line_error(result, 1, f"{figure}: cannot be written: No space left")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["k.toml"]


def test_fit_default_name_figure_and_overwrite_rules(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = make_image(tmp_path / "photo.png", "L", seed=17)
    after = tmp_path / "after.npy"
    ok("conv", "-k", "sobel-x", "--format", "npy", "-o", after, src)
    ok("fit", src, after, "--figure")
    kernel = tmp_path / "convcli-out" / "photo_fit-3x3.toml"
    figure = tmp_path / "convcli-out" / "photo_fit-3x3_grid.png"
    assert kernel.exists() and figure.exists()
    before = kernel.read_bytes()
    # never silently replaced; --overwrite replaces what fit wrote, never another file
    assert_one_line_error(run("fit", src, after), 1, "exists", "--overwrite")
    ok("fit", src, after, "--overwrite")
    assert kernel.read_bytes() == before
    mine = tmp_path / "mine.toml"
    mine.write_text("weights = [[1]]\n")
    assert_one_line_error(
        run("fit", src, after, "-o", mine, "--overwrite"), 1, "not written by convcli"
    )
    assert mine.read_text() == "weights = [[1]]\n"


def test_fit_with_an_empty_o_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an empty -o was taken as the default name
    src = make_image(tmp_path / "photo.png", "L", seed=17)
    after = tmp_path / "after.npy"
    ok("conv", "-k", "sobel-x", "--format", "npy", "-o", after, src)
    assert_one_line_error(run("fit", src, after, "-o", ""), 2, "'-o'", "empty")
    assert not (tmp_path / "convcli-out").exists()


def test_fit_says_when_no_kernel_explains_the_pair(tmp_path):
    src = make_image(tmp_path / "photo.png", "L", seed=18)
    other = make_image(tmp_path / "other.png", "L", seed=19)
    result = ok("fit", src, other, "-o", tmp_path / "k.toml", "-q")
    assert result.stderr == ""
    result = ok("fit", src, other, "-o", tmp_path / "k2.toml")
    assert "is not" in result.stderr and "one 3x3 kernel" in result.stderr
    assert "step 1:" not in result.stderr  # no progress when stderr is not a terminal


def test_fit_errors_are_one_line(tmp_path):
    src = make_image(tmp_path / "photo.png", "RGB", seed=20)
    after = tmp_path / "after.npy"
    ok("conv", "-k", "vertical", "--format", "npy", "-o", after, src)
    result = run("fit", src, after, "--pad", "valid", "-o", tmp_path / "k.toml")
    assert_one_line_error(result, 1, str(after), "30x40x1", "28x38x1")
    result = run("fit", src, src, "-o", tmp_path / "k.toml")
    assert_one_line_error(result, 1, "30x40x3", "--channels each")
    bad = tmp_path / "bad.npy"
    np.save(bad, np.full((30, 40, 1), np.nan, np.float32))
    assert_one_line_error(run("fit", src, bad, "-o", tmp_path / "k.toml"), 1, "not finite")
    assert_one_line_error(
        run("fit", src, tmp_path / "missing.png", "-o", tmp_path / "k.toml"), 1, "missing.png"
    )
    assert_one_line_error(run("fit", src, after, "--size", "4"), 2, "--pad")
    assert not (tmp_path / "k.toml").exists()
    # the inputs are left as they were
    assert np.load(after).shape == (30, 40, 1)


# --- AFTER as convcli wrote it: levels, not values ----------------------------------------------


@pytest.mark.parametrize(
    ("mapping", "channels", "kernel"),
    [
        ("offset", "sum", "sobel-x"),
        ("minmax", "each", "gaussian-3x3"),
        ("auto", "gray", "box-blur"),
    ],
)
def test_fit_undoes_the_levels_of_a_png_convcli_wrote(tmp_path, mapping, channels, kernel):
    """A signed mapping in the manifest is undone: the kernel comes back at its own scale."""
    src = make_image(tmp_path / "photo.png", "RGB", seed=21, size=(64, 48))
    out = tmp_path / "maps"
    ok("conv", "-k", kernel, "--normalize", mapping, "--channels", channels, src, "-o", out)
    (after,) = sorted(out.glob(f"*-{channels}.png"))
    result = ok("fit", src, after, "--channels", channels, "-o", tmp_path / "k.toml")
    assert f"{after}: holds levels convcli mapped" in result.stderr
    assert "--format npy keeps the raw values" in result.stderr
    assert re.search(f"closest named kernel: {kernel} x (1 |1.000|0.999)", result.stderr)
    np.testing.assert_allclose(
        load_kernel_file(tmp_path / "k.toml").weights, get_kernel(kernel).weights, atol=0.05
    )


def test_fit_refuses_the_magnitudes_convcli_wrote_and_notes_a_png_without_a_record(tmp_path):
    src = make_image(tmp_path / "photo.png", "L", seed=22)
    out = tmp_path / "maps"
    ok("conv", "-k", "sobel-x", src, "-o", out)  # robust: |x|
    (after,) = out.glob("*.png")
    result = run("fit", src, after, "-o", tmp_path / "k.toml")
    assert_one_line_error(
        result, 1, str(after), "|x|", "the sign is gone", "--format npy keeps the raw values"
    )
    assert not (tmp_path / "k.toml").exists()
    moved = tmp_path / "moved.png"
    after.replace(moved)  # no manifest beside it: fitted as it is, with a note
    result = ok("fit", src, moved, "-o", tmp_path / "k.toml")
    assert f"{moved}: written by convcli, so it holds levels mapped" in result.stderr


def test_fit_says_where_clip_may_have_cut_values(tmp_path):
    src = make_image(tmp_path / "photo.png", "L", seed=23)
    ok("conv", "-k", "sharpen", src, "-o", tmp_path / "maps")  # auto: clip, noise saturates
    (after,) = (tmp_path / "maps").glob("*.png")
    result = ok("fit", src, after, "-o", tmp_path / "k.toml")
    assert re.search(
        r"; \d+\.\d% of its levels are 0 or 255, where clip may have cut values", result.stderr
    )


# --- what fit writes: any file name stays text -------------------------------------------------

HOSTILE_FOLDER = 'dir\nscale = 1000\n"q\\'
HOSTILE_FILE = 'b\nx"y\r\x01z.png'


def _read_back(path: Path) -> np.ndarray:
    """The weights of a kernel file fit wrote: TOML with no key but description and weights."""
    text = path.read_text(encoding="utf-8")
    table = tomllib.loads(text)
    assert set(table) == {"description", "weights"}  # no scale: 1
    assert text.startswith("# convcli fit: ")
    assert all(line.startswith("# ") for line in text.split("\ndescription = ")[0].split("\n"))
    weights = load_kernel_file(path).weights
    assert weights.tobytes() == np.array(table["weights"], np.float64).tobytes()
    return weights


@pytest.mark.parametrize("default_name", [True, False])
def test_fit_writes_line_breaks_and_quotes_in_names_as_text(tmp_path, monkeypatch, default_name):
    """A line break in BEFORE's folder adds no key, one in its name leaves the file valid."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / HOSTILE_FOLDER
    folder.mkdir()
    src = make_image(folder / HOSTILE_FILE, "L", seed=21)
    after = folder / 'after\n"x.npy'
    ok("conv", "-k", "sobel-x", "--format", "npy", "-o", after, src)
    out = folder / 'k\n"]\nscale = 9.toml'
    ok("fit", src, after, *([] if default_name else ["-o", out]))
    if default_name:
        (out,) = (tmp_path / "convcli-out").iterdir()
    weights = _read_back(out)
    np.testing.assert_allclose(weights, get_kernel("sobel-x").weights, atol=1e-6)


def test_fit_fails_on_one_line_when_the_file_would_not_read_back(tmp_path, monkeypatch):
    from convcli.app import fit

    src = make_image(tmp_path / "photo.png", "L", seed=22)
    after = tmp_path / "after.npy"
    ok("conv", "-k", "sobel-x", "--format", "npy", "-o", after, src)
    for extra in ("scale = 2\n", "weights = 1\n"):
        monkeypatch.setattr(
            fit, "kernel_toml", lambda *a, extra=extra, **k: kernel_toml(*a, **k) + extra
        )
        out = tmp_path / "k.toml"
        assert_one_line_error(run("fit", src, after, "-o", out), 1, str(out), "read back")
        assert sorted(tmp_path.iterdir()) == sorted([after, src])  # no file, no temporary


@pytest.mark.parametrize(
    ("option", "value", "code"),
    [
        ("--pad", "100000", 1),
        ("--dilation", "100000", 1),
        ("--pad", str(10**12), 1),
        ("--dilation", str(10**12), 1),
        ("--dilation", "1e12", 2),
        ("--pad", "1e12", 2),
    ],
)
def test_fit_refuses_a_pad_too_large_on_one_line(tmp_path, option, value, code):
    src = make_image(tmp_path / "photo.png", "L", seed=23, size=(20, 20))
    after = tmp_path / "after.npy"
    ok("conv", "-k", "sobel-x", "--format", "npy", "-o", after, src)
    result = run("fit", src, after, option, value, "-o", tmp_path / "k.toml")
    assert_one_line_error(result, code, option)
    assert not (tmp_path / "k.toml").exists()


def test_fit_refuses_a_npy_whose_header_claims_more_than_the_file_holds(tmp_path):
    import numpy as np
    from helpers import make_image, run

    before = make_image(tmp_path / "before.png", "L")
    liar = tmp_path / "liar.npy"
    with open(liar, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (100000, 100000, 3)}
        )
        f.write(b"\0" * 16)
    result = run("fit", before, liar, "-o", tmp_path / "k.toml")
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = result.stderr.splitlines()
    assert str(liar) in line and "header claims" in line


def test_a_clipped_after_is_said_to_be_clipped_not_the_wrong_size(tmp_path):
    # fit on a clipped sharpen output advised "try another --size" when the cause is clipping.
    photo = Path(__file__).parents[1] / "sample_images" / "camera.png"
    ok("conv", "-k", "sharpen", "--channels", "each", photo, "-o", tmp_path / "sharp.png")
    result = run("fit", photo, tmp_path / "sharp.png", "--size", "3", "-o", tmp_path / "k.toml")
    assert result.exit_code == 0, result.output
    assert "of its levels are black or white" in result.stderr
    assert "clipped" in result.stderr and "try another --size" not in result.stderr
    ok("conv", "-k", "sharpen", "--channels", "each", photo, "-o", tmp_path / "sharp.npy")
    values = run("fit", photo, tmp_path / "sharp.npy", "--size", "3", "-o", tmp_path / "v.toml")
    assert "black or white" not in values.stderr


def test_a_float_tiff_after_holds_values_not_levels(tmp_path):
    """conv --normalize none --format tiff -o FILE writes raw float32 values and no manifest:
    fitted as they are, with no note of levels it cannot undo nor of clipped ones."""
    src = make_image(tmp_path / "photo.png", "L", seed=23)
    after = tmp_path / "after.tif"
    ok("conv", "-k", "sobel-x", "--normalize", "none", "--format", "tiff", src, "-o", after)
    assert tifffile.imread(after).dtype == np.float32 and not (tmp_path / MANIFEST).exists()
    result = ok("fit", src, after, "-o", tmp_path / "k.toml")
    assert "levels" not in result.stderr and "clipped" not in result.stderr
    assert "closest named kernel: sobel-x x 1 (cosine 1.0000)" in result.stderr
    weights = load_kernel_file(tmp_path / "k.toml").weights
    assert np.allclose(weights, get_kernel("sobel-x").weights, atol=1e-6)


@pytest.mark.parametrize("name", ["k.png", "k.npy", "k.tiff", "k.bmp", "k.gif", "k.webp"])
def test_fit_refuses_to_write_its_kernel_under_an_image_name(tmp_path, name):
    src = make_image(tmp_path / "photo.png", "L", seed=29)
    result = run("fit", src, src, "-o", tmp_path / name)
    assert_one_line_error(result, 2, "'-o'", f"{name}' names a", "kernel file")
    assert not (tmp_path / name).exists()


def test_fit_refuses_an_o_named_as_a_folder(tmp_path):
    # k.toml/ made a folder k.toml, then failed: "a folder has the output's name".
    src = make_image(tmp_path / "photo.png", "L", seed=31)
    result = run("fit", src, src, "-o", f"{tmp_path / 'k.toml'}/")
    assert_one_line_error(result, 2, "'-o'", "is a folder: -o names the kernel file")
    assert not (tmp_path / "k.toml").exists()


def test_fit_says_what_reading_its_images_lost(tmp_path):
    """BEFORE's and AFTER's read notes are said, each with its file (as conv says them)."""
    rng = np.random.default_rng(23)
    samples = rng.integers(0, 4096, (24, 30, 3))
    before = tmp_path / "wide.ppm"
    before.write_bytes(b"P6\n30 24\n4095\n" + samples.astype(">u2").tobytes())
    after = tmp_path / "edges.npy"
    ok("conv", "-k", "sobel-x", "--format", "npy", before, "-o", after)
    result = ok("fit", before, after, "-o", tmp_path / "k.toml")
    assert f"{before}: 12-bit colour read as 8-bit (Pillow reads colour at 8 bits)" in (
        result.stderr
    )
