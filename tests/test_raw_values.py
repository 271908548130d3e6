"""--normalize none: raw float32 values in TIFF (issue: scale thrown away), and --pad T,B,L,R."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    HEIGHT,
    WIDTH,
    assert_one_line_error,
    assert_same_file,
    imagemagick,
    names,
    ok,
    pixels,
    run,
)
from PIL import Image
from reference import conv_forward_loop, pad_loop

from convcli.io.row_writers import save_rows


@pytest.fixture
def photo_seed():
    """The ``photo`` fixture (tests/conftest.py) draws its picture with seed 6 here."""
    return 6


def _float_tiff(path) -> np.ndarray:
    with Image.open(path) as im:
        assert im.mode == "F"
        return np.asarray(im)


@pytest.mark.parametrize(
    ("args", "tiffs"),
    [
        (["-k", "sobel-x"], ["sobel-x-none-sum"]),
        (["-k", "edge", "--bias", "-300"], ["edge-b-300-none-sum"]),
        (
            ["-k", "laplacian", "--channels", "each", "--stride", "2"],
            ["laplacian-s2-none-R", "laplacian-s2-none-G", "laplacian-s2-none-B"],
        ),
    ],
)
def test_none_writes_the_npy_values_as_float_tiffs(tmp_path, photo, args, tiffs):
    out = tmp_path / "out"
    ok("conv", *args, "--normalize", "none", "--format", "tiff", photo, "-o", out)
    ok("conv", *args, "--format", "npy", photo, "-o", out)
    (npy,) = [n for n in names(out) if n.endswith(".npy")]
    raw = np.load(out / npy)
    # One TIFF per channel, no colour image of the channels (8-bit levels).
    assert [n for n in names(out) if n.endswith(".tiff")] == sorted(
        f"photo_conv-{tag}.tiff" for tag in tiffs
    )
    for c, tag in enumerate(tiffs):
        np.testing.assert_array_equal(_float_tiff(out / f"photo_conv-{tag}.tiff"), raw[:, :, c])
    assert raw.min() < 0  # signed values kept


def test_float_tiffs_read_back_in_tifffile_and_imagemagick(tmp_path):
    values = np.array([[0.25, 0.5, 0.125], [1.0, 0.0, 0.75]], np.float32)
    path = tmp_path / "v.tiff"
    assert save_rows(path, values, fmt="tiff")  # as convcli writes --normalize none
    np.testing.assert_array_equal(_float_tiff(path), values)
    tifffile = pytest.importorskip("tifffile")
    np.testing.assert_array_equal(tifffile.imread(path), values)
    magick = shutil.which("magick") or shutil.which("identify")
    if magick is None:
        pytest.skip("ImageMagick is not installed")
    command = [magick, "identify"] if magick.endswith("magick") else [magick]
    text = subprocess.run(
        [*command, "-format", "%w %h %z %[fx:mean]", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    width, height, depth, mean = text.split()
    assert (width, height, depth) == ("3", "2", "32")
    assert abs(float(mean) - values.mean()) < 1e-4  # ImageMagick reads floats on a 0-1 scale


def test_the_readme_says_how_imagemagick_reads_a_raw_tiff_right(tmp_path):
    """ImageMagick 6 clips floats to 0..1: the README's command gives the values' range."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    (line,) = [x for x in readme.splitlines() if x.startswith("convert -define quantum:minimum")]
    lo, hi = (float(x.split("=")[1]) for x in shlex.split(line) if x.startswith("quantum:m"))
    program = imagemagick()
    if program is None:
        pytest.skip("ImageMagick is not installed")
    photo = Path(__file__).resolve().parent.parent / "sample_images" / "camera.png"
    ok(
        "conv",
        "-k",
        "sobel-x",
        "--normalize",
        "none",
        "--format",
        "tiff",
        photo,
        "-o",
        tmp_path / "map.tiff",
    )
    words = [str(tmp_path / w) if w.startswith("map.") else w for w in shlex.split(line)[1:]]
    subprocess.run([program, *words], check=True, capture_output=True)
    values = _float_tiff(tmp_path / "map.tiff").astype(np.float64)
    assert values.min() < 0 and values.max() > 255  # not within ImageMagick's 0-1 scale
    levels = np.asarray(Image.open(tmp_path / "map.png")).astype(np.float64)
    np.testing.assert_allclose(levels, (values - lo) / (hi - lo) * 65535, atol=1)


@pytest.mark.parametrize("fmt", [["--format", "png"], ["--format", "jpg"], ["-o", "x.png"]])
def test_none_with_an_eight_or_sixteen_bit_format_is_a_usage_error(
    tmp_path, photo, fmt, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    result = run("conv", "-k", "sobel-x", "--normalize", "none", photo, *fmt)
    assert_one_line_error(result, 2, "--normalize", "tiff or npy")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["photo.png"]


# --- --pad T,B,L,R ----------------------------------------------------------------------------


def test_conv_pad_per_side_is_conv_forward_on_the_padded_picture(tmp_path, photo):
    out = tmp_path / "out"
    for border in ("constant", "wrap"):
        ok(
            "conv",
            "-k",
            "sobel-x",
            "--pad",
            "1,0,2,3",
            "--border",
            border,
            "--stride",
            "2",
            "--format",
            "npy",
            photo,
            "-o",
            out,
        )
    A = pixels(photo).sum(axis=2)[None, :, :, None]
    W = np.array([[1, 0, -1], [2, 0, -2], [1, 0, -1]], np.float64)[:, :, None, None]
    for border, tag in (("constant", "-Bconstant"), ("wrap", "-Bwrap")):
        padded = pad_loop(A, 1, 0, 2, 3, mode=border)
        expected = conv_forward_loop(padded, W, np.zeros((1, 1, 1, 1)), {"stride": 2, "pad": 0})
        got = np.load(out / f"photo_conv-sobel-x-s2-p1-0-2-3{tag}-sum.npy")
        np.testing.assert_allclose(got, expected[0], rtol=1e-5, atol=1e-3)


def test_pad_per_side_and_equal_sides_keep_the_single_number_names(tmp_path, photo):
    out = tmp_path / "out"
    ok("pad", "--pad", "1,2,3,4", "--value", "9", "--format", "npy", photo, "-o", out)
    padded = np.load(out / "photo_pad-constant-1-2-3-4-v9.npy")
    assert padded.shape == (HEIGHT + 1 + 2, WIDTH + 3 + 4, 3)
    assert np.all(padded[0] == 9) and np.all(padded[:, -4:] == 9)
    ok("conv", "-k", "vertical", "--pad", "2,2,2,2", photo, "-o", tmp_path / "a")
    ok("conv", "-k", "vertical", "--pad", "2", photo, "-o", tmp_path / "b")
    assert names(tmp_path / "a") == names(tmp_path / "b") == ["photo_conv-vertical-p2-sum.png"]
    assert_same_file(
        tmp_path / "a" / "photo_conv-vertical-p2-sum.png",
        tmp_path / "b" / "photo_conv-vertical-p2-sum.png",
    )


@pytest.mark.parametrize("command", ["conv", "pad"])
@pytest.mark.parametrize("value", ["1,2,3", "1,-2,3,4", "a,b,c,d", "1,2,3,4,5", "1.5,1,1,1"])
def test_a_bad_pad_is_one_line_naming_pad(tmp_path, photo, command, value):
    result = run(command, "--pad", value, photo, "-o", tmp_path / "out")
    assert_one_line_error(result, 2, "--pad")
    assert not (tmp_path / "out").exists()
