"""HEIF images (an iPhone's .heic photos) read through pillow-heif, the ``heif`` extra.

Pillow does not read HEIF: a folder of phone photos gave "no input images", and a .heic
named on the command line "not an image file". The files are written here by
pillow-heif itself (x265, lossless where the values are compared), and convcli's
pixels are checked against pillow-heif's own decoding of the same file.
"""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
from helpers import ok, rng, run, run_without
from PIL import Image

from convcli.io.heif import is_heif
from convcli.io.images import is_image_name, read_image

pillow_heif = pytest.importorskip("pillow_heif")


def _heif(path, pixels: np.ndarray, mode: str, **info):
    """`pixels` saved as a lossless HEIF file (4:4:4) at `path`; `mode` is pillow-heif's."""
    height, width = pixels.shape[:2]
    heif = pillow_heif.from_bytes(mode=mode, size=(width, height), data=pixels.tobytes())
    heif.save(path, quality=-1, chroma=444, **info)
    return path


def _decoded(path, **options) -> np.ndarray:
    """pillow-heif's own decoding of the file's primary image."""
    heif = pillow_heif.open_heif(path, **options)
    return np.asarray(heif[heif.primary_index])


def _pooled(pixels: np.ndarray) -> np.ndarray:
    """Max-pool 2x2, stride 2, of (H, W, C) `pixels` (even sides)."""
    height, width, channels = pixels.shape
    return pixels.reshape(height // 2, 2, width // 2, 2, channels).max(axis=(1, 3))


def test_an_8_bit_photo_is_read_as_pillow_heif_decodes_it(tmp_path):
    path = _heif(tmp_path / "photo.heic", rng(1).integers(0, 256, (24, 32, 3), np.uint8), "RGB")
    expected = _decoded(path)
    picture = read_image(path)
    assert (picture.channels, picture.depth, picture.white) == (("R", "G", "B"), 8, 255.0)
    np.testing.assert_array_equal(picture.pixels, expected)
    ok("pool", "--size", 2, path, "-o", tmp_path / "out")
    with Image.open(tmp_path / "out" / "photo_pool-max-f2-s2.png") as im:
        np.testing.assert_array_equal(np.asarray(im), _pooled(expected))


def _levels(samples: np.ndarray, white: int) -> np.ndarray:
    """Samples of `white` on 16-bit levels, as convcli writes them (a 12-bit TIFF's too)."""
    return np.floor(samples * (65535 / white) + 0.5).astype(np.uint16)


def test_10_bit_colour_is_read_on_its_own_scale(tmp_path):
    levels = rng(2).integers(0, 1024, (24, 32, 3)).astype(np.uint16)
    levels[0, 0] = 1023
    path = _heif(tmp_path / "deep.heic", levels << 6, "RGB;16")
    expected = _decoded(path, convert_hdr_to_8bit=False, hdr_to_16bit=False)
    assert expected.dtype == np.uint16 and expected.max() == 1023  # 10 bits, all of them
    picture = read_image(path)
    assert (picture.depth, picture.white, picture.notes) == (16, 1023.0, ())
    np.testing.assert_array_equal(picture.pixels, expected)
    ok("pool", "--size", 2, "--format", "tiff", path, "-o", tmp_path / "out")
    written = tifffile.imread(tmp_path / "out" / "deep_pool-max-f2-s2.tiff")
    np.testing.assert_array_equal(written, _levels(_pooled(expected), 1023))  # white 65535


def test_10_bit_grey_and_alpha_keep_their_channels_and_depth(tmp_path):
    levels = rng(3).integers(0, 1024, (16, 20)).astype(np.uint16)
    grey = _heif(tmp_path / "g.heic", levels << 6, "L;16")
    picture = read_image(grey)
    assert (picture.channels, picture.depth, picture.white) == (("L",), 16, 1023.0)
    raw = _decoded(grey, convert_hdr_to_8bit=False, hdr_to_16bit=False)
    np.testing.assert_array_equal(picture.pixels[..., 0], raw)
    rgba = _heif(tmp_path / "a.heic", rng(4).integers(0, 256, (16, 20, 4), np.uint8), "RGBA")
    picture = read_image(rgba)
    assert picture.channels == ("R", "G", "B", "A")
    np.testing.assert_array_equal(picture.pixels, _decoded(rgba))


def test_10_bit_premultiplied_alpha_is_divided_out_at_10_bits(tmp_path):
    """Pillow's RGBa: read at 8 bits, unsaid, before."""
    samples = rng(12).integers(0, 1024, (6, 8, 4)).astype(np.int64)
    samples[..., :3] = samples[..., :3] * samples[..., 3:] // 1023  # associated
    path = _heif(tmp_path / "pm.heic", samples.astype(np.uint16) << 6, "RGBa;16")
    stored = _decoded(path, convert_hdr_to_8bit=False, hdr_to_16bit=False).astype(np.int64)
    alpha = stored[..., 3:]
    colour = np.minimum((stored[..., :3] * 2046 + alpha) // np.maximum(2 * alpha, 1), 1023)
    picture = read_image(path)
    assert (picture.channels, picture.white) == (("R", "G", "B", "A"), 1023.0)
    np.testing.assert_array_equal(picture.pixels[..., :3], np.where(alpha == 0, 0, colour))
    np.testing.assert_array_equal(picture.pixels[..., 3], stored[..., 3])


def test_exif_profile_and_xmp_are_kept_and_the_picture_is_turned_once(tmp_path):
    from PIL import ImageCms

    exif = Image.Exif()
    exif[0x010F], exif[0x0112] = "Apple", 6
    profile = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    xmp = b"<x:xmpmeta xmlns:x='adobe:ns:meta/'><rdf:RDF/></x:xmpmeta>"
    pixels = rng(5).integers(0, 256, (20, 30, 3), np.uint8)
    path = _heif(
        tmp_path / "p.heic", pixels, "RGB", exif=exif.tobytes(), icc_profile=profile, xmp=xmp
    )
    # pillow-heif writes orientation 6 as the file's own turn (irot), which libheif applies
    # as it decodes (a quarter turn clockwise, within the YCbCr rounding): not again by EXIF.
    picture = read_image(path)
    np.testing.assert_array_equal(picture.pixels, _decoded(path))
    turned = np.abs(picture.pixels - np.rot90(pixels, -1))
    assert picture.pixels.shape == (30, 20, 3) and turned.max() <= 1
    result = ok("pool", "--size", 2, path, "-o", tmp_path / "out", "-v")
    kept = result.stderr.split("(kept: ")[1].split(")")[0]
    assert all(what in kept for what in ("EXIF", "colour profile", "XMP")), kept
    with Image.open(tmp_path / "out" / "p_pool-max-f2-s2.png") as im:
        assert im.size == (10, 15)
        assert im.info["icc_profile"] == profile
        assert im.getexif()[0x010F] == "Apple"
        assert im.getexif().get(0x0112, 1) == 1
        assert "xmpmeta" in im.info["XML:com.adobe.xmp"]


def test_a_wide_gamut_colour_space_without_a_profile_is_said(tmp_path):
    pixels = rng(6).integers(0, 256, (16, 16, 3), np.uint8)
    p3 = {"color_primaries": 12, "transfer_characteristics": 13, "matrix_coefficients": 6}
    path = _heif(tmp_path / "p3.heic", pixels, "RGB", nclx_profile={**p3, "full_range_flag": 1})
    assert read_image(path).notes == (
        "its colour space (Display P3, HEIF nclx primaries 12, transfer 13) not kept: outputs "
        "hold no profile, and viewers take them as sRGB",
    )
    srgb = _heif(tmp_path / "s.heic", pixels, "RGB")  # pillow-heif writes sRGB's nclx
    assert read_image(srgb).notes == ()


def test_a_file_of_several_images_gives_its_primary_one(tmp_path):
    first, second = (rng(seed).integers(0, 256, (12, 16, 3), np.uint8) for seed in (7, 8))
    heif = pillow_heif.from_bytes(mode="RGB", size=(16, 12), data=first.tobytes())
    heif.add_frombytes("RGB", (16, 12), second.tobytes())
    heif.primary_index = 1
    path = tmp_path / "two.heic"
    heif.save(path, quality=-1, chroma=444)
    picture = read_image(path)
    assert picture.notes == ("used the primary image of 2",)
    np.testing.assert_array_equal(picture.pixels, _decoded(path))


def test_heif_files_are_listed_in_folders_and_avif_is_left_to_pillow(tmp_path):
    assert is_image_name("holiday/IMG_0001.HEIC") and is_image_name("x.hif")
    (tmp_path / "in").mkdir()
    pixels = rng(9).integers(0, 256, (8, 8, 3), np.uint8)
    assert is_heif(str(_heif(tmp_path / "in" / "IMG_0001.HEIC", pixels, "RGB")))
    ok("pool", "--size", 2, tmp_path / "in", "-o", tmp_path / "out")
    assert (tmp_path / "out" / "IMG_0001_pool-max-f2-s2.png").is_file()

    def ftyp(major: bytes, *brands: bytes) -> str:
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.bin"
        box = major + bytes(4) + b"".join(brands)
        path.write_bytes((8 + len(box)).to_bytes(4, "big") + b"ftyp" + box + bytes(32))
        return str(path)

    assert not is_heif(ftyp(b"avif", b"avif", b"mif1", b"miaf"))
    assert not is_heif(ftyp(b"mif1", b"mif1", b"avif"))
    assert is_heif(ftyp(b"heic", b"mif1", b"heic", b"avif"))  # a HEVC major brand decides
    assert is_heif(ftyp(b"mif1", *[b"miaf"] * 20, b"heic"))  # a box of 100 bytes


def test_without_the_extra_each_heif_file_fails_on_one_line_naming_it(tmp_path):
    path = _heif(tmp_path / "photo.heic", rng(10).integers(0, 256, (8, 8, 3), np.uint8), "RGB")
    result = run_without("pillow_heif", "pool", path, "-o", tmp_path / "out")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    first = result.stderr.splitlines()[0]
    assert first.endswith("photo.heic: a HEIF image needs pillow-heif: pip install 'convcli[heif]'")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("*.png"))


def test_a_heic_name_on_other_bytes_is_no_image(tmp_path):
    path = tmp_path / "fake.heic"
    path.write_bytes(b"\0\0\0\x10ftypheic" + bytes(8))
    result = run("pool", path, "-o", tmp_path / "out")
    assert result.exit_code == 1
    assert "fake.heic: " in result.stderr and "Traceback" not in result.output


def test_a_dry_run_without_the_extra_names_each_heif_file_as_the_run_would(tmp_path):
    path = _heif(tmp_path / "photo.heic", rng(11).integers(0, 256, (8, 8, 3), np.uint8), "RGB")
    result = run_without("pillow_heif", "pool", "--dry-run", path, "-o", tmp_path / "out")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "--help" not in result.stderr
    assert f"convcli: {path}: a HEIF image needs pillow-heif: pip install 'convcli[heif]'" in (
        result.stderr.splitlines()
    )
