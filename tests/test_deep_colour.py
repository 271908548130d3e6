"""16-bit colour PNG and TIFF in and out at full depth (imagecodecs), and without it (Pillow)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from helpers import alpha_weighted_pool, ok, run, run_without
from PIL import Image

from convcli.io import image_files
from convcli.io.image_files import save_levels
from convcli.io.images import read_image

imagecodecs = pytest.importorskip("imagecodecs")

H, W = 6, 10


def deep_pixels(channels: int, seed: int = 0) -> np.ndarray:
    """16-bit values above 255 in every channel (and a few of the extremes)."""
    g = np.random.default_rng(seed)
    arr = g.integers(256, 65536, (H, W, channels)).astype(np.uint16)
    arr[0, 0] = 65535
    arr[-1, -1] = 256
    return arr


def write_deep(path, arr) -> None:
    """A 16-bit colour file written by libpng or libtiff (Pillow writes none)."""
    if path.suffix == ".png":
        path.write_bytes(imagecodecs.png_encode(arr))
    else:
        path.write_bytes(
            imagecodecs.tiff_encode(
                arr, photometric="rgb", extrasample="unassalpha" if arr.shape[2] == 4 else None
            )
        )


def decode(path) -> np.ndarray:
    data = path.read_bytes()
    return imagecodecs.png_decode(data) if path.suffix == ".png" else imagecodecs.tiff_decode(data)


CASES = [(ext, channels) for ext in ("png", "tiff") for channels in (3, 4)]


@pytest.mark.parametrize("ext, channels", CASES)
def test_deep_colour_is_read_at_full_depth(tmp_path, ext, channels):
    arr = deep_pixels(channels)
    path = tmp_path / f"deep.{ext}"
    write_deep(path, arr)
    with Image.open(path) as im:  # Pillow alone: 8 bits
        assert np.asarray(im).dtype == np.uint8
    pic = read_image(path)
    assert (pic.white, pic.depth, pic.notes) == (65535.0, 16, ())
    assert pic.channels == ("R", "G", "B", "A")[:channels]
    np.testing.assert_array_equal(pic.pixels, arr.astype(np.float32))


def _max_pool(arr: np.ndarray, f: int) -> np.ndarray:
    h, w = arr.shape[0] // f * f, arr.shape[1] // f * f
    return arr[:h, :w].reshape(h // f, f, w // f, f, -1).max(axis=(1, 3))


@pytest.mark.parametrize("ext, channels", CASES)
def test_pool_and_pad_write_16_bit_colour_with_the_exact_values(tmp_path, ext, channels):
    arr = deep_pixels(channels, seed=channels)
    src = tmp_path / f"deep.{ext}"
    write_deep(src, arr)
    out = tmp_path / "out"
    ok("pool", "--size", 2, src, "-o", out, "--format", ext, "--separate")
    pooled = decode(out / f"deep_pool-max-f2-s2.{ext}")
    assert pooled.dtype == np.uint16
    np.testing.assert_array_equal(pooled, _max_pool(arr, 2))
    # Each channel on its own: 16-bit grey.
    with Image.open(out / f"deep_pool-max-f2-s2-G.{ext}") as im:
        assert im.mode == "I;16"
        np.testing.assert_array_equal(np.asarray(im), _max_pool(arr, 2)[:, :, 1])

    ok("pad", "--pad", 2, "--value", 300, src, "-o", out, "--format", ext)
    padded = decode(out / f"deep_pad-constant-2-v300.{ext}")
    assert padded.dtype == np.uint16
    expected = np.pad(arr[:, :, :3], ((2, 2), (2, 2), (0, 0)), constant_values=300)
    if channels == 4:  # alpha is padded opaque
        alpha = np.pad(arr[:, :, 3:], ((2, 2), (2, 2), (0, 0)), constant_values=65535)
        expected = np.concatenate([expected, alpha], axis=2)
    np.testing.assert_array_equal(padded, expected)
    assert image_files.written_by_convcli(out / f"deep_pad-constant-2-v300.{ext}")


def test_16_bit_colour_outputs_are_replaced_only_with_overwrite(tmp_path):
    arr = deep_pixels(3)
    path = tmp_path / "a.tiff"
    assert save_levels(path, arr, fmt="tiff")
    assert not save_levels(path, arr[::-1], fmt="tiff")
    assert save_levels(path, arr[::-1], fmt="tiff", overwrite=True)  # convcli's own
    np.testing.assert_array_equal(decode(path), arr[::-1])


@pytest.mark.parametrize("ext", ["png", "tiff"])
def test_without_the_fast_codecs_deep_colour_is_read_at_8_bits_with_a_note(
    tmp_path, monkeypatch, ext
):
    monkeypatch.setenv("CONVCLI_FAST_CODECS", "0")
    arr = deep_pixels(3)
    path = tmp_path / f"deep.{ext}"
    write_deep(path, arr)
    pic = read_image(path)
    assert (pic.white, pic.depth) == (255.0, 8)
    # imagecodecs is installed: the note names what turned it off, not the extra
    assert pic.notes == (
        "16-bit colour read as 8-bit (Pillow reads colour at 8 bits; "
        "CONVCLI_FAST_CODECS=0 turns imagecodecs off)",
    )
    np.testing.assert_array_equal(pic.pixels, (arr >> 8).astype(np.float32))


def test_the_command_line_without_imagecodecs_says_8_bits(tmp_path):
    arr = deep_pixels(4)
    path = tmp_path / "deep.tiff"
    write_deep(path, arr)
    proc = run_without("imagecodecs", "pool", path, "-o", tmp_path / "out", "-j", 1)
    assert proc.returncode == 0, proc.stderr
    assert "16-bit colour read as 8-bit" in proc.stderr and "convcli[deep]" in proc.stderr
    with Image.open(tmp_path / "out" / "deep_pool-max-f2-s2.tiff") as im:  # a TIFF, as its input
        assert im.mode == "RGBA"
        np.testing.assert_array_equal(np.asarray(im), (_max_pool(arr, 2) >> 8).astype(np.uint8))


def test_16_bit_colour_tiff_output_needs_no_extra(monkeypatch, tmp_path):
    import sys

    import tifffile

    monkeypatch.setitem(sys.modules, "imagecodecs", None)
    levels = deep_pixels(3)
    assert image_files.save_levels(tmp_path / "deep.tif", levels, fmt="tiff")
    np.testing.assert_array_equal(tifffile.imread(tmp_path / "deep.tif"), levels)


def test_run_helper_reads_deep_colour(tmp_path):
    """The in-process command line (one job) notes nothing for a 16-bit colour file."""
    path = tmp_path / "deep.png"
    write_deep(path, deep_pixels(3))
    result = run("pool", path, "-o", tmp_path / "out", "-j", 1, "-v")
    assert result.exit_code == 0, result.output
    assert "8-bit" not in result.stderr


def write_grey_and_alpha(path, seed: int = 0) -> np.ndarray:
    """A 16-bit grey + alpha PNG (libpng's; Pillow opens it as 8-bit RGBA), some of it
    transparent: its samples."""
    arr = deep_pixels(2, seed)
    arr[..., 1][np.random.default_rng(seed).random((H, W)) < 0.3] = 0
    arr[:2, :2, 1] = 0  # a window of transparent pixels alone
    path.write_bytes(imagecodecs.png_encode(arr))
    return arr


def test_16_bit_grey_and_alpha_png_is_read_at_full_depth(tmp_path):
    path = tmp_path / "la.png"
    arr = write_grey_and_alpha(path)
    pic = read_image(path)
    assert (pic.channels, pic.white, pic.depth, pic.notes) == (("L", "A"), 65535.0, 16, ())
    np.testing.assert_array_equal(pic.pixels, arr.astype(np.float32))


@pytest.mark.parametrize("mode", ["max", "average"])
def test_pool_writes_16_bit_grey_and_alpha_png_weighing_the_grey_by_alpha(tmp_path, mode):
    src = tmp_path / "la.png"
    arr = write_grey_and_alpha(src, seed=5)
    result = ok("pool", "--mode", mode, "-v", src, "-o", tmp_path / "out", "-j", 1)
    assert "8-bit" not in result.stderr
    pooled = decode(tmp_path / "out" / f"la_pool-{mode}-f2-s2.png")
    assert pooled.dtype == np.uint16 and pooled.shape == (H // 2, W // 2, 2)
    expected = alpha_weighted_pool(arr, 2, mode, 65535.0)
    # the average grey within a level (float32), the rest exact
    atol = 1 if mode == "average" else 0
    np.testing.assert_allclose(pooled[..., 0], np.rint(expected[..., 0]), rtol=0, atol=atol)
    np.testing.assert_array_equal(pooled[..., 1], np.rint(expected[..., 1]))


@pytest.mark.parametrize(
    "off, why",
    [
        ("environment", "CONVCLI_FAST_CODECS=0 turns imagecodecs off"),
        ("missing", "install convcli[deep] for 16"),
    ],
)
def test_16_bit_grey_and_alpha_read_by_pillow_is_8_bit_saying_why(tmp_path, monkeypatch, off, why):
    if off == "environment":
        monkeypatch.setenv("CONVCLI_FAST_CODECS", "0")
    else:
        monkeypatch.setitem(sys.modules, "imagecodecs", None)
    path = tmp_path / "la.png"
    arr = write_grey_and_alpha(path)
    pic = read_image(path)
    assert (pic.channels, pic.white, pic.depth) == (("L", "A"), 255.0, 8)
    assert pic.notes == (
        f"16-bit grey + alpha read as 8-bit (Pillow reads grey + alpha at 8 bits; {why})",
    )
    np.testing.assert_array_equal(pic.pixels, (arr >> 8).astype(np.float32))


@pytest.mark.parametrize("channels", [2, 3, 4])
def test_a_16_bit_jpeg_2000s_colour_is_read_whole(tmp_path, channels):
    """Pillow reads it at 8 bits, rounding up past 255 to 0: 65408 and up came out black,
    and an opaque alpha transparent."""
    samples = deep_pixels(channels, seed=channels)
    samples[0, 1:4] = np.array([65407, 65408, 65535])[:, None]  # the levels that wrapped
    path = tmp_path / "deep.jp2"
    path.write_bytes(imagecodecs.jpeg2k_encode(samples, level=0, codecformat="jp2"))  # lossless
    picture = read_image(path)
    assert (picture.white, picture.depth, picture.notes) == (65535.0, 16, ())
    np.testing.assert_array_equal(picture.pixels, samples.astype(np.float32))


def test_a_12_bit_jpeg_2000s_colour_is_on_16_bits_as_its_grey_is_read(tmp_path):
    samples = np.random.default_rng(12).integers(0, 4096, (H, W, 3)).astype(np.uint16)
    path = tmp_path / "twelve.jp2"
    path.write_bytes(
        imagecodecs.jpeg2k_encode(samples, level=0, bitspersample=12, codecformat="jp2")
    )
    picture = read_image(path)
    assert picture.white == 65535.0
    np.testing.assert_array_equal(picture.pixels, (samples << 4).astype(np.float32))
    grey = tmp_path / "grey.jp2"
    grey.write_bytes(
        imagecodecs.jpeg2k_encode(samples[..., 0], level=0, bitspersample=12, codecformat="jp2")
    )
    np.testing.assert_array_equal(read_image(grey).pixels[..., 0], samples[..., 0] << 4)


def test_without_imagecodecs_a_16_bit_jpeg_2000s_colour_is_refused_in_one_line(tmp_path):
    path = tmp_path / "deep.jp2"
    path.write_bytes(imagecodecs.jpeg2k_encode(deep_pixels(3), level=0, codecformat="jp2"))
    refused = run_without("imagecodecs", "pool", path, "-o", tmp_path / "out")
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[0] == (
        f"convcli: {path}: cannot decode the image: 16-bit JPEG 2000 colour is read only with "
        "imagecodecs, where Pillow turns its brightest levels black (install convcli[deep] for 16)"
    )
    eight = tmp_path / "eight.jp2"  # 8 bits: Pillow's, as before
    levels = np.random.default_rng(1).integers(0, 256, (H, W, 3)).astype(np.uint8)
    eight.write_bytes(imagecodecs.jpeg2k_encode(levels, level=0, codecformat="jp2"))
    ok("pool", "--size", "1", "--format", "npy", eight, "-o", tmp_path / "e")
    np.testing.assert_array_equal(np.load(tmp_path / "e" / "eight_pool-max-f1-s1.npy"), levels)
