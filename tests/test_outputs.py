"""The shape of outputs: pad and pool write the image alone, in its input's format
(:func:`convcli.app.outputs.output_format`), the channels too with ``--separate``; maps are
PNG; ``--format`` overrides."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
from helpers import manifest_records, ok, outputs_in, run
from PIL import Image, ImageCms, JpegImagePlugin

from convcli import pad_images, pool_forward
from convcli.app.ops import ConvOp, PadOp, PoolOp
from convcli.app.outputs import output_format
from convcli.kernels import get_kernel

MAKE, ORIENTATION = 0x010F, 0x0112


def _scene(height=240, width=320, seed=3) -> np.ndarray:
    """A photo-like RGB picture: smooth gradients, a disc and mild seeded noise."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    rgb = np.stack(
        [x / width * 200 + 30, y / height * 180 + 40, (x + y) / (height + width) * 150 + 60],
        axis=-1,
    )
    rgb[np.hypot(y - height / 2, x - width / 3) < height / 5] = (220, 60, 40)
    rgb += np.random.default_rng(seed).normal(0, 3, rgb.shape)
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)


def _photo(path, *, quality=80, subsampling=2, orientation=1):
    """A JPEG as a camera writes one: a profile, 300 dpi, EXIF with the camera and a date."""
    exif = Image.Exif()
    exif[MAKE], exif[ORIENTATION] = "Canon", orientation
    exif.get_ifd(0x8769)[0x9003] = "2024:01:02 03:04:05"
    profile = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    Image.fromarray(_scene()).save(
        path,
        quality=quality,
        subsampling=subsampling,
        dpi=(300, 300),
        exif=exif.tobytes(),
        icc_profile=profile,
    )
    return path


def _decoded(path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"), dtype=np.float64)


def _psnr(a, b) -> float:
    mse = np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2)
    return 10 * np.log10(255.0**2 / mse)


def test_output_format_is_the_inputs_for_images_changed_and_png_for_maps():
    assert output_format(PoolOp(), "a/photo.JPEG", None) == "jpg"
    assert output_format(PadOp(), "scan.ome.tif", None) == "tiff"
    assert output_format(PoolOp(), "s3://b/scan.zarr/", None) == "zarr"
    assert output_format(PoolOp(), "anim.gif", None) == "png"
    assert output_format(PoolOp(), "/tmp/x/stdin", None) == "png"  # standard input
    assert output_format(ConvOp([get_kernel("edge")]), "photo.jpg", None) == "png"
    assert output_format(PoolOp(), "photo.jpg", "tiff") == "tiff"


@pytest.mark.parametrize(
    "command, expected",
    [
        (["pool"], lambda A: pool_forward(A[None], {"f": 2, "stride": 2}, "max")[0][0]),
        (
            ["pool", "--mode", "average", "--size", "3"],
            lambda A: pool_forward(A[None], {"f": 3, "stride": 3}, "average")[0][0],
        ),
        (
            ["pad", "--pad", "4", "--mode", "reflect"],
            lambda A: pad_images(A[None], 4, mode="reflect")[0],
        ),
    ],
)
def test_a_jpeg_stays_one_jpeg_at_its_quality_with_what_it_carries(tmp_path, command, expected):
    source = _photo(tmp_path / "photo.jpg", quality=80)
    out = tmp_path / "out"
    ok(*command, source, "-o", out)
    written = outputs_in(out)
    assert len(written) == 1 and written[0].suffix == ".jpg"
    want = np.clip(np.rint(expected(_decoded(source).astype(np.float32))), 0, 255)
    with Image.open(source) as before, Image.open(written[0]) as after:
        assert after.format == "JPEG" and after.mode == "RGB"
        assert after.size == (want.shape[1], want.shape[0])
        assert after.quantization == before.quantization  # the input's tables: its quality
        assert JpegImagePlugin.get_sampling(after) == JpegImagePlugin.get_sampling(before) == 2
        assert after.info["icc_profile"] == before.info["icc_profile"]
        step = 2 if command[0] == "pool" and len(command) == 1 else 3 if command[0] == "pool" else 1
        assert after.info["dpi"] == pytest.approx((300 / step, 300 / step), abs=0.01)
        exif = after.getexif()
        assert exif[MAKE] == "Canon" and exif[ORIENTATION] == 1
        assert exif.get_ifd(0x8769)[0x9003] == "2024:01:02 03:04:05"
        got = np.asarray(after, dtype=np.float64)
    assert abs(got.mean() - want.mean()) < 1.0
    assert _psnr(got, want) > 30
    assert manifest_records(out)[0]["kept"]["jpeg_quality"] == 80


def test_a_high_quality_jpeg_keeps_its_quality_and_full_colour(tmp_path):
    source = _photo(tmp_path / "fine.jpg", quality=97, subsampling=0)
    ok("pool", source, "-o", tmp_path / "out")
    with (
        Image.open(source) as before,
        Image.open(tmp_path / "out" / "fine_pool-max-f2-s2.jpg") as after,
    ):
        assert after.quantization == before.quantization
        assert JpegImagePlugin.get_sampling(after) == 0  # 4:4:4, as the input


def test_separate_adds_one_grey_file_per_channel_in_the_same_format(tmp_path):
    source = _photo(tmp_path / "photo.jpg")
    out = tmp_path / "out"
    ok("pool", source, "-o", out, "--separate")
    assert sorted(p.name for p in outputs_in(out)) == sorted(
        f"photo_pool-max-f2-s2{t}.jpg" for t in ("", "-R", "-G", "-B")
    )
    whole = _decoded(out / "photo_pool-max-f2-s2.jpg")
    with Image.open(out / "photo_pool-max-f2-s2-G.jpg") as green:
        assert green.mode == "L"
        assert _psnr(np.asarray(green, np.float64), whole[..., 1]) > 28


def test_figure_adds_the_grid_and_conv_maps_stay_png(tmp_path):
    source = _photo(tmp_path / "photo.jpg")
    out = tmp_path / "out"
    ok("pool", source, "-o", out, "--figure")
    assert sorted(p.name for p in outputs_in(out)) == [
        "photo_pool-max-f2-s2.jpg",
        "photo_pool-max-f2-s2_grid.png",
    ]
    ok("conv", "-k", "edge", source, "-o", out)
    assert (out / "photo_conv-edge-sum.png").exists()


def test_format_overrides_the_inputs(tmp_path):
    source = _photo(tmp_path / "photo.jpg")
    ok("pad", source, "-o", tmp_path / "out", "--format", "png")
    assert [p.name for p in outputs_in(tmp_path / "out")] == ["photo_pad-constant-2.png"]


def test_a_format_convcli_cannot_write_becomes_png_said_once(tmp_path):
    for name in ("a.webp", "b.webp", "c.bmp"):
        Image.fromarray(_scene(40, 60)).save(tmp_path / name)
    out = tmp_path / "out"
    result = ok(
        "pool", tmp_path / "a.webp", tmp_path / "b.webp", tmp_path / "c.bmp", "-o", out, "-j", "1"
    )
    assert sorted(p.name for p in outputs_in(out)) == [
        "a_pool-max-f2-s2.png",
        "b_pool-max-f2-s2.png",
        "c_pool-max-f2-s2.png",
    ]
    said = [line for line in result.stderr.splitlines() if "written as png" in line]
    assert said == [
        "convcli: .webp inputs are written as png: convcli does not write .webp "
        "files (--format names another)",
        "convcli: .bmp inputs are written as png: convcli does not write .bmp "
        "files (--format names another)",
    ]
    expected, _ = pool_forward(
        _decoded(tmp_path / "c.bmp")[None].astype(np.float32), {"f": 2, "stride": 2}
    )
    np.testing.assert_array_equal(_decoded(out / "c_pool-max-f2-s2.png"), expected[0])


@pytest.mark.parametrize("memory", [None, "strips"], ids=["whole", "strips"])
def test_a_tiff_stays_one_tiff_whole_or_in_strips(tmp_path, memory, small_strips):
    values = np.random.default_rng(5).integers(0, 256, (900, 700, 3), np.uint8)
    tifffile.imwrite(tmp_path / "scan.tif", values, tile=(64, 64), photometric="rgb")
    extra = ["--memory", small_strips] if memory else []
    result = ok("pool", tmp_path / "scan.tif", "-o", tmp_path / "out", "-v", *extra)
    assert ("processed in strips" in result.stderr) == bool(memory)
    assert [p.name for p in outputs_in(tmp_path / "out")] == ["scan_pool-max-f2-s2.tiff"]
    expected, _ = pool_forward(values[None].astype(np.float32), {"f": 2, "stride": 2})
    np.testing.assert_array_equal(
        tifffile.imread(tmp_path / "out" / "scan_pool-max-f2-s2.tiff"), expected[0].astype(np.uint8)
    )


def test_a_stack_is_written_whole_in_its_format(tmp_path):
    rng = np.random.default_rng(8)
    pages = [rng.integers(0, 256, (30, 40, 3), np.uint8) for _ in range(3)]
    tifffile.imwrite(tmp_path / "pages.tif", np.stack(pages), photometric="rgb")
    Image.fromarray(pages[0]).save(
        tmp_path / "anim.gif", save_all=True, append_images=[Image.fromarray(p) for p in pages[1:]]
    )
    out = tmp_path / "out"
    result = ok("pool", tmp_path / "pages.tif", tmp_path / "anim.gif", "-o", out, "--frames", "all")
    assert sorted(p.name for p in outputs_in(out)) == [
        "anim_pool-max-f2-s2.png",
        "pages_pool-max-f2-s2.tiff",
    ]
    assert "written as png" in result.stderr
    expected, _ = pool_forward(np.stack(pages).astype(np.float32), {"f": 2, "stride": 2})
    np.testing.assert_array_equal(
        tifffile.imread(out / "pages_pool-max-f2-s2.tiff"), expected.astype(np.uint8)
    )


def test_a_format_convcli_does_not_write_is_refused_naming_the_option(tmp_path):
    source = _photo(tmp_path / "photo.jpg")
    result = run("pool", source, "--format", "webp", "-o", tmp_path / "out")
    assert result.exit_code == 2 and "--format" in result.output
    assert "Traceback" not in result.output
