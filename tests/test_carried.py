"""Outputs keep what their input carries: colour profile, resolution (scaled), EXIF."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pytest
import tifffile
from helpers import assert_same_file, manifest_records, ok, outputs_in
from PIL import Image, ImageCms

from convcli.io.iptc import photoshop_resources, png_iptc
from convcli.kernels import get_kernel

MAKE, ORIENTATION = 0x010F, 0x0112


@pytest.fixture(scope="module")
def profile() -> bytes:
    """An ICC profile other than Pillow's default: Lab-based, so no reader assumes it."""
    return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()


@pytest.fixture(scope="module")
def pixels():
    return np.random.default_rng(4).integers(0, 256, (120, 160, 3), np.uint8)


def _jpeg(path, pixels, profile, *, orientation=1):
    exif = Image.Exif()
    exif[MAKE], exif[ORIENTATION] = "Canon", orientation
    exif.get_ifd(0x8769)[0x9003] = "2024:01:02 03:04:05"  # DateTimeOriginal, in the Exif block
    Image.fromarray(pixels).save(
        path, icc_profile=profile, dpi=(300, 300), exif=exif.tobytes(), quality=95
    )
    return path


def _read(path):
    """Pillow's view: the profile, the dpi, the EXIF camera and orientation, the pixels."""
    with Image.open(path) as im:
        exif = im.getexif()
        return (
            im.info.get("icc_profile"),
            im.info.get("dpi"),
            exif.get(MAKE),
            exif.get(ORIENTATION),
            np.asarray(im),
        )


@pytest.mark.parametrize("fmt", ["png", "jpg"])
def test_pool_keeps_the_profile_the_exif_and_the_resolution_over_the_stride(
    tmp_path, pixels, profile, fmt
):
    source = _jpeg(tmp_path / "photo.jpg", pixels, profile)
    out = tmp_path / "out"
    result = ok("pool", "--format", fmt, source, "-o", out, "-v", "--separate")
    assert "kept: colour profile 'sRGB built-in', 150x150 dpi, EXIF" in result.stderr
    for name in ("photo_pool-max-f2-s2", "photo_pool-max-f2-s2-R"):
        icc, dpi, make, orientation, _ = _read(out / f"{name}.{fmt}")
        assert make == "Canon" and orientation == 1
        assert dpi == pytest.approx((150, 150), abs=0.02)  # PNG: pixels a metre, whole
        # the RGB profile goes with the colour image, not with one channel written grey
        assert icc == (profile if name.endswith("s2") else None)


@pytest.mark.parametrize("fmt", ["png", "jpg"])
@pytest.mark.parametrize("source", ["photo.jpg", "photo.png"])
def test_the_exif_resolution_is_divided_by_the_stride_too(tmp_path, pixels, fmt, source):
    # A camera gives its resolution in EXIF (X/YResolution, here in centimetres) as well as,
    # or instead of, JFIF's density: both say the output's, never one the input's.
    exif = Image.Exif()
    exif[MAKE], exif[0x011A], exif[0x011B], exif[0x0128] = "Canon", 240.0, 120.0, 3
    Image.fromarray(pixels).save(tmp_path / source, exif=exif.tobytes())
    ok("pool", "--size", "3", "--format", fmt, tmp_path / source, "-o", tmp_path / "out")
    with Image.open(tmp_path / "out" / f"photo_pool-max-f3-s3.{fmt}") as im:
        found = im.getexif()
    assert found[MAKE] == "Canon" and found[0x0128] == 3
    assert (float(found[0x011A]), float(found[0x011B])) == pytest.approx((80, 40))


def test_the_pixels_are_the_same_with_or_without_a_profile(tmp_path, pixels, profile):
    """Nothing is converted: the profile goes along, the levels are those of the file."""
    _jpeg(tmp_path / "with.jpg", pixels, profile)
    with Image.open(tmp_path / "with.jpg") as decoded:  # its levels, and nothing else
        Image.fromarray(np.asarray(decoded)).save(tmp_path / "without.png")
    ok(
        "pool",
        "--mode",
        "average",
        tmp_path / "with.jpg",
        tmp_path / "without.png",
        "-o",
        tmp_path / "out",
        "--format",
        "png",
    )
    with_profile = _read(tmp_path / "out" / "with_pool-average-f2-s2.png")
    without = _read(tmp_path / "out" / "without_pool-average-f2-s2.png")
    np.testing.assert_array_equal(with_profile[4], without[4])
    assert with_profile[0] == profile and without[0] is None


def test_maps_keep_the_resolution_and_no_profile_or_exif(tmp_path, pixels, profile):
    source = _jpeg(tmp_path / "photo.jpg", pixels, profile)
    ok("conv", "-k", "vertical", "--stride", "3", source, "-o", tmp_path / "out")
    icc, dpi, make, _, _ = _read(tmp_path / "out" / "photo_conv-vertical-s3-sum.png")
    assert icc is None and make is None
    assert dpi == pytest.approx((100, 100), abs=0.02)


def test_a_blur_by_channel_keeps_the_profile(tmp_path, pixels, profile):
    source = _jpeg(tmp_path / "photo.jpg", pixels, profile)
    ok("conv", "-k", "gaussian-3x3", "--channels", "each", source, "-o", tmp_path / "out")
    icc, dpi, _, _, _ = _read(tmp_path / "out" / "photo_conv-gaussian-3x3-each.png")
    assert icc == profile and dpi == pytest.approx((300, 300), abs=0.02)


def _grey_profile(profile: bytes) -> bytes:
    """`profile` said to be for grey pixels (its header's colour space GRAY)."""
    return profile[:16] + b"GRAY" + profile[20:]


@pytest.mark.parametrize("memory", [None, "1M"], ids=["whole", "strips"])
def test_a_profile_goes_only_on_pixels_of_its_colour_space(tmp_path, profile, memory):
    # An RGB profile in a grey PNG is an error to libpng ("RGB color space not permitted on
    # grayscale PNG"): the channels written grey keep none; a grey image keeps its grey one.
    colour = np.random.default_rng(6).integers(0, 256, (700, 600, 3), np.uint8)
    tifffile.imwrite(tmp_path / "rgb.tif", colour, photometric="rgb", iccprofile=profile)
    grey = _grey_profile(profile)
    tifffile.imwrite(tmp_path / "grey.tif", colour[..., 0], iccprofile=grey)
    extra = ["--memory", memory] if memory else []
    for command in (["pool", "--separate"], ["conv", "-k", "gaussian-3x3", "--channels", "each"]):
        out = tmp_path / command[0]
        args = [tmp_path / "rgb.tif", tmp_path / "grey.tif", "-o", out, "--format", "png"]
        ok(*command, *args, *extra)
        written = sorted(out.glob("*.png"))
        assert len(written) == 5  # rgb: the colour image and 3 channels; grey: one image
        for path in written:
            with Image.open(path) as im:
                icc = im.info.get("icc_profile")
                if path.name.startswith("grey_"):
                    assert im.mode == "L" and icc == grey
                elif im.mode == "L":
                    assert icc is None, path.name
                else:
                    assert icc == profile, path.name


def test_a_cmyk_profile_is_not_kept_on_the_rgb_it_is_read_as(tmp_path):
    cmyk = _grey_profile(ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes())
    cmyk = cmyk[:16] + b"CMYK" + cmyk[20:]
    Image.new("CMYK", (40, 30), (10, 200, 30, 0)).save(tmp_path / "print.jpg", icc_profile=cmyk)
    result = ok("pool", tmp_path / "print.jpg", "-o", tmp_path / "out", "-v")
    assert "kept: colour profile" not in result.stderr
    assert "read as RGB by Pillow's formula" in result.stderr  # a profile LittleCMS cannot use
    with Image.open(tmp_path / "out" / "print_pool-max-f2-s2.jpg") as im:
        assert im.mode == "RGB" and im.info.get("icc_profile") is None


def _with_chunks(path, pixels, chunks):
    """A PNG of `pixels` with `chunks` (kind, data) after its header, as a camera app or a
    renderer writes them."""
    import struct
    import zlib

    Image.fromarray(pixels).save(path)
    data = path.read_bytes()
    made = b"".join(
        struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d)) for k, d in chunks
    )
    path.write_bytes(data[:33] + made + data[33:])  # the signature and IHDR are 33 bytes
    return path


def test_a_pngs_gamma_and_chromaticities_go_with_its_levels(tmp_path, pixels):
    # A linear render (gAMA 1.0) and a wide-gamut file (cHRM) say their colour space in
    # chunks of their own, not as a profile: outputs of their levels keep them, maps do not.
    import struct

    chroma = struct.pack(">8I", 31270, 32900, 64000, 33000, 21000, 71000, 15000, 6000)
    source = _with_chunks(
        tmp_path / "linear.png",
        pixels,
        [(b"cHRM", chroma), (b"gAMA", struct.pack(">I", 100000))],
    )
    result = ok("pool", source, "-o", tmp_path / "out", "-v")
    assert "kept: cHRM and gAMA" in result.stderr
    ok("conv", "-k", "gaussian-3x3", "--channels", "each", source, "-o", tmp_path / "out")
    ok("conv", "-k", "vertical", source, "-o", tmp_path / "out")
    for name, kept in [
        ("linear_pool-max-f2-s2", True),
        ("linear_conv-gaussian-3x3-each", True),
        ("linear_conv-vertical-sum", False),
    ]:
        with Image.open(tmp_path / "out" / f"{name}.png") as im:
            assert im.info.get("gamma") == (1.0 if kept else None)
            assert im.info.get("chromaticity") == (
                (0.3127, 0.329, 0.64, 0.33, 0.21, 0.71, 0.15, 0.06) if kept else None
            )
    records = {r["output"]: r for r in manifest_records(tmp_path / "out")}
    assert records["linear_pool-max-f2-s2.png"]["kept"] == {"png_colour": ["cHRM", "gAMA"]}
    lost = ok("pool", "--format", "jpg", source, "-o", tmp_path / "jpg")
    assert "PNG gamma, chromaticities and sRGB not kept: jpg outputs hold none" in lost.stderr


def test_a_pngs_srgb_chunk_is_kept(tmp_path, pixels):
    import struct

    source = _with_chunks(
        tmp_path / "web.png", pixels, [(b"sRGB", b"\x00"), (b"gAMA", struct.pack(">I", 45455))]
    )
    ok("pad", source, "-o", tmp_path / "out")
    with Image.open(tmp_path / "out" / "web_pad-constant-2.png") as im:
        assert (im.info.get("srgb"), im.info.get("gamma")) == (0, 0.45455)


def test_an_upright_photo_is_written_with_orientation_1_and_its_other_exif(
    tmp_path, pixels, profile
):
    source = _jpeg(tmp_path / "turned.jpg", pixels, profile, orientation=6)
    ok("pad", "--pad", "0", source, "-o", tmp_path / "out")
    path = tmp_path / "out" / "turned_pad-constant-0.jpg"  # a JPEG stays a JPEG
    _, _, make, orientation, written = _read(path)
    assert make == "Canon" and orientation == 1
    with Image.open(path) as im:
        assert im.getexif().get_ifd(0x8769)[0x9003] == "2024:01:02 03:04:05"
    assert written.shape[:2] == (160, 120)  # turned upright once, and said to be so


@pytest.mark.parametrize("memory", [None, "1M"], ids=["whole", "strips"])
def test_tiff_in_tiff_out_keeps_the_profile_and_the_resolution(tmp_path, profile, memory):
    values = np.random.default_rng(5).integers(0, 256, (700, 600, 3), np.uint8)
    tifffile.imwrite(
        tmp_path / "scan.tif",
        values,
        tile=(64, 64),
        photometric="rgb",
        resolution=(300, 300),
        resolutionunit="INCH",
        iccprofile=profile,
    )
    extra = ["--memory", memory] if memory else []
    result = ok(
        "pool",
        "--size",
        "3",
        tmp_path / "scan.tif",
        "-o",  # a TIFF stays a TIFF
        tmp_path / "out",
        "-v",
        "--separate",
        *extra,
    )
    assert ("processed in strips" in result.stderr) == bool(memory)
    for name in ("scan_pool-max-f3-s3.tiff", "scan_pool-max-f3-s3-G.tiff"):
        with tifffile.TiffFile(tmp_path / "out" / name) as tif:
            page = tif.pages[0]
            if name.endswith("-G.tiff"):  # one channel, grey: no RGB profile
                assert 34675 not in page.tags
            else:
                assert page.tags[34675].value == profile
            assert page.tags["ResolutionUnit"].value == 2  # inch
            x, y = page.tags["XResolution"].value, page.tags["YResolution"].value
            assert x[0] / x[1] == pytest.approx(100) and y[0] / y[1] == pytest.approx(100)


@pytest.mark.parametrize("memory", [None, "1M"], ids=["whole", "strips"])
def test_a_resolution_in_centimetres_stays_in_centimetres(tmp_path, memory):
    values = np.random.default_rng(7).integers(0, 256, (700, 600, 3), np.uint8)
    tifffile.imwrite(
        tmp_path / "scan.tif", values, resolution=(118.11, 118.11), resolutionunit="CENTIMETER"
    )
    extra = ["--memory", memory] if memory else []
    ok("pool", "--size", "2", tmp_path / "scan.tif", "-o", tmp_path / "out", *extra)
    with tifffile.TiffFile(tmp_path / "out" / "scan_pool-max-f2-s2.tiff") as tif:
        tags = tif.pages[0].tags
        assert tags["ResolutionUnit"].value == 3  # centimetre, as the input's
        x = tags["XResolution"].value
        assert x[0] / x[1] == pytest.approx(118.11 / 2, rel=1e-5)


def test_a_format_that_holds_none_of_it_says_so(tmp_path, pixels, profile):
    pytest.importorskip("zarr")
    values = np.random.default_rng(5).integers(0, 256, (70, 60), np.uint8)
    tifffile.imwrite(tmp_path / "scan.tif", values, resolution=(300, 300), resolutionunit="INCH")
    result = ok("pool", "--format", "zarr", tmp_path / "scan.tif", "-o", tmp_path / "out", "-v")
    assert "resolution not kept: zarr outputs hold none" in result.stderr


@pytest.mark.parametrize("memory", [None, "1M"], ids=["whole", "strips"])
@pytest.mark.parametrize(
    "command, reduce",
    [
        (
            ["pool", "--mode", "average", "--size", "2"],
            lambda z: z.reshape(150, 2, 100, 2).mean(axis=(1, 3), dtype=np.float64),
        ),
        (["pad", "--pad", "1", "--mode", "edge"], lambda z: np.pad(z, 1, mode="edge")),
    ],
)
def test_an_elevation_model_stays_float_with_its_negative_values(tmp_path, command, reduce, memory):
    """float32 -600 to 2800 m through pool --format tiff became uint16 levels, the 8,464
    negative pixels of 60,000 clipped to 0: the values are kept now, as float32."""
    z = np.random.default_rng(6).uniform(-600, 2800, (300, 200)).astype(np.float32)
    tifffile.imwrite(tmp_path / "dem.tif", z, tile=(64, 64))
    extra = ["--memory", memory] if memory else []
    result = ok(
        *command, "--format", "tiff", tmp_path / "dem.tif", "-o", tmp_path / "out", "-v", *extra
    )
    assert ("processed in strips" in result.stderr) == bool(memory)
    (written,) = (tmp_path / "out").glob("*.tiff")
    values = tifffile.imread(written)
    assert values.dtype == np.float32 and values.min() < -300  # no clip at 0
    np.testing.assert_allclose(values, reduce(z), rtol=1e-6, atol=1e-3)
    with Image.open(tmp_path / "dem.tif") as im:  # PNG holds levels: mapped as before
        assert im.mode == "F"


@pytest.mark.parametrize(
    ("normalize", "kernel"),
    [([], "box-blur"), (["--normalize", "clip"], "box-blur"), (["--normalize", "clip"], "sobel-x")],
)
def test_an_elevation_model_is_clipped_only_where_clip_is_asked_for(tmp_path, normalize, kernel):
    """A blur of float values keeps them (auto's clip is for levels); an explicit
    ``--normalize clip`` clips to 0..white and writes 16-bit levels, as its name says."""
    z = np.random.default_rng(7).uniform(-600, 2800, (60, 40)).astype(np.float32)
    tifffile.imwrite(tmp_path / "dem.tif", z)
    command = ("conv", "-k", kernel, *normalize, "--format", "tiff", "--border", "edge")
    ok(*command, tmp_path / "dem.tif", "-o", tmp_path / "out")
    (written,) = (tmp_path / "out").glob("*.tiff")
    record = json.loads((tmp_path / "out" / "convcli-manifest.jsonl").read_text())
    values = tifffile.imread(written)
    weights = np.float64(get_kernel(kernel).weights)
    padded = np.pad(np.float64(z), 1, mode="edge")
    expected = sum(
        weights[i, j] * padded[i : i + 60, j : j + 40] for i in range(3) for j in range(3)
    )
    if not normalize:
        assert record["mapping"] == "none" and values.dtype == np.float32
        np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-3)
        return
    white = float(z.max())
    assert ("-clip-" in written.name) and record["mapping"] == "clip"
    assert values.dtype == np.uint16 and record["scale"] == pytest.approx(65535 / white)
    levels = np.clip(expected, 0, white) * (65535 / white)
    assert np.abs(values - levels).max() <= 0.5 + 1e-3 * 65535 / white


# A north-up UTM 33N grid: 10 m pixels, the top-left corner at (500000, 4600000); PixelIsArea.
_GEO_KEYS = (1, 1, 0, 4, 1024, 0, 1, 1, 1025, 0, 1, 1, 3072, 0, 1, 32633, 3076, 0, 1, 9001)


def _geotiff(path, values):
    tifffile.imwrite(
        path,
        values,
        tile=(64, 64),
        extratags=[
            (33550, "d", 3, (10.0, 10.0, 0.0), True),
            (33922, "d", 6, (0.0, 0.0, 0.0, 500000.0, 4600000.0, 0.0), True),
            (34735, "H", len(_GEO_KEYS), _GEO_KEYS, True),
        ],
    )
    return path


def _corner_and_size(path) -> tuple[float, float, float]:
    """(x, y) of the top-left corner and the pixel size, from the file's GeoTIFF tags."""
    with tifffile.TiffFile(path) as tif:
        tags = tif.pages[0].tags
        scale, tie = tags[33550].value, tags[33922].value
        assert tags[34735].value == _GEO_KEYS  # the coordinate system as it was
    return tie[3] - tie[0] * scale[0], tie[4] + tie[1] * scale[1], scale[0]


@pytest.mark.parametrize("memory", [None, "1M"], ids=["whole", "strips"])
@pytest.mark.parametrize(
    "command, corner, size",
    [
        (["pool", "--size", "2"], (500000, 4600000), 20),  # windows 0-1, 2-3 ...: corners kept
        (["pool", "--size", "3", "--stride", "2"], (500005, 4599995), 20),  # centre 1.5 px in
        (["conv", "-k", "vertical", "--pad", "same"], (500000, 4600000), 10),
        (["conv", "-k", "vertical", "--pad", "valid", "--stride", "2"], (500005, 4599995), 20),
        (["pad", "--pad", "5"], (499950, 4600050), 10),
    ],
)
def test_a_geotiff_keeps_its_place_on_the_ground(tmp_path, command, corner, size, memory):
    """Each output pixel where its window's centre is: hand-computed corners and sizes."""
    values = np.random.default_rng(7).uniform(0, 900, (400, 300)).astype(np.float32)
    source = _geotiff(tmp_path / "scene.tif", values)
    extra = ["--memory", memory] if memory else []
    result = ok(*command, "--format", "tiff", source, "-o", tmp_path / "out", "-v", *extra)
    assert "georeference" in result.stderr
    (written,) = (tmp_path / "out").glob("*.tiff")
    x, y, pixel = _corner_and_size(written)
    assert (x, y, pixel) == pytest.approx((*corner, size))


@pytest.mark.skipif(__import__("shutil").which("gdalinfo") is None, reason="GDAL's gdalinfo")
@pytest.mark.parametrize(
    "command",
    [["pool", "--size", "3", "--stride", "2"], ["conv", "-k", "gaussian-5x5", "--pad", "valid"]],
)
def test_gdal_puts_every_output_pixel_at_its_windows_centre(tmp_path, command):
    import json
    import subprocess

    def transform(path):
        info = json.loads(
            subprocess.run(
                ["gdalinfo", "-json", str(path)], check=True, capture_output=True, text=True
            ).stdout
        )
        assert "32633" in info["coordinateSystem"]["wkt"]
        return info["geoTransform"]

    source = _geotiff(
        tmp_path / "scene.tif",
        np.random.default_rng(8).uniform(0, 900, (90, 70)).astype(np.float32),
    )
    ok(*command, "--format", "tiff", source, "-o", tmp_path / "out")
    (written,) = (tmp_path / "out").glob("*.tiff")
    given, got = transform(source), transform(written)
    window, step = (3, 2) if command[0] == "pool" else (5, 1)
    for row, column in [(0, 0), (7, 11), (20, 30)]:
        centre_in = (column * step + window / 2, row * step + window / 2)  # input pixels
        want = (given[0] + centre_in[0] * given[1], given[3] + centre_in[1] * given[5])
        at = (got[0] + (column + 0.5) * got[1], got[3] + (row + 0.5) * got[5])
        assert at == pytest.approx(want)


def test_a_png_says_it_holds_no_georeference(tmp_path):
    source = _geotiff(
        tmp_path / "scene.tif", np.random.default_rng(9).integers(0, 255, (40, 30)).astype(np.uint8)
    )
    result = ok("pool", source, "-o", tmp_path / "out", "-v", "--format", "png")
    assert "georeference not kept: png outputs hold none" in result.stderr


def _not_kept(stderr: str) -> list[str]:
    """The lines of `stderr` that say a format cannot hold something."""
    return [line for line in stderr.splitlines() if "not kept" in line]


@pytest.mark.parametrize("memory", [None, "1M"], ids=["whole", "strips"])
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_folder_of_geotiffs_to_png_says_so_once(tmp_path, jobs, memory):
    # Said once a run, not once a file: worker processes' results are said in the run.
    folder = tmp_path / "scenes"
    folder.mkdir()
    rng = np.random.default_rng(13)
    for name in ("a", "b", "c"):
        _geotiff(folder / f"{name}.tif", rng.uniform(0, 900, (400, 300)).astype(np.float32))
    extra = ["--memory", memory] if memory else []
    result = ok("pool", folder, "-o", tmp_path / "out", "--format", "png", "-v", "-j", jobs, *extra)
    assert result.stderr.count("processed in strips") == (3 if memory else 0)
    assert result.stderr.count(": done, 1 written") == 3
    assert _not_kept(result.stderr) == [
        "convcli: georeference not kept: png outputs hold none (tiff and zarr outputs do)"
    ]


def test_photos_with_a_profile_to_zarr_say_so_once(tmp_path, profile):
    pytest.importorskip("zarr")
    folder = tmp_path / "photos"
    folder.mkdir()
    for k in range(3):
        Image.fromarray(np.full((40, 50, 3), 60 * k, np.uint8)).save(
            folder / f"p{k}.png", icc_profile=profile, dpi=(300, 300)
        )
    result = ok("pool", folder, "-o", tmp_path / "out", "--format", "zarr", "-v", "-j", "2")
    assert result.stderr.count(": done, 1 written") == 3
    assert sorted(_not_kept(result.stderr)) == [
        "convcli: colour profile not kept: zarr outputs hold none (png, jpg and tiff outputs do)",
        "convcli: resolution not kept: zarr outputs hold none (png, jpg and tiff outputs do)",
    ]
    quiet = ok("pool", folder, "-o", tmp_path / "quiet", "--format", "zarr", "-q")
    assert quiet.stderr == ""


def _shape_over_hidden_magenta(path):
    """An RGBA PNG: an opaque green disc, half-transparent ring, magenta where transparent."""
    y, x = np.mgrid[0:60, 0:80]
    r = np.hypot(y - 30, x - 40)
    rgba = np.zeros((60, 80, 4), np.uint8)
    rgba[...] = (255, 0, 255, 0)  # hidden
    rgba[r < 22] = (40, 160, 60, 128)
    rgba[r < 18] = (40, 160, 60, 255)
    Image.fromarray(rgba, "RGBA").save(path)
    return path


@pytest.mark.parametrize(
    "command",
    [
        ["pool", "--size", "3"],
        ["pool", "--mode", "average", "--size", "3"],
        ["pool", "--mode", "average", "--size", "4", "--stride", "3", "--pad", "1"],
        ["pad", "--pad", "4", "--mode", "reflect"],
        ["conv", "-k", "gaussian-5x5", "--channels", "each"],
        ["conv", "-k", "sharpen", "--channels", "each"],
        [
            "conv",
            "-k",
            "box-blur,gaussian-3x3",
            "--channels",
            "each",
            "--stride",
            "2",
            "--border",
            "constant",
        ],
    ],
)
def test_no_hidden_magenta_ever_shows(tmp_path, command):
    """Pooling and blurring weighted by alpha: every visible output pixel is the disc's
    green, whatever share of its window was transparent magenta (edge pixels were
    71/58/54, 312 of 312 of the max pool's edge pixels magenta; a blur by channel dropped
    alpha and showed the magenta everywhere around the disc)."""
    source = _shape_over_hidden_magenta(tmp_path / "disc.png")
    ok(*command, source, "-o", tmp_path / "out")
    wholes = [
        p for p in (tmp_path / "out").glob("*.png") if not p.stem.endswith(("-R", "-G", "-B", "-A"))
    ]
    assert len(wholes) == (2 if "box-blur,gaussian-3x3" in command else 1)
    for whole in wholes:
        with Image.open(whole) as im:
            assert im.mode == "RGBA"
            rgba = np.asarray(im).astype(int)
        visible = rgba[..., 3] > 0
        assert visible.sum() > 100 and (~visible).sum() > 100
        assert np.abs(rgba[visible][:, :3] - (40, 160, 60)).max() <= 1


@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize(
    "command", [["pool", "--mode", "average"], ["pool"], ["pad", "--mode", "edge"]]
)
def test_a_pngs_transparent_colour_is_alpha(tmp_path, mode, command):
    """A grey or RGB PNG whose tRNS chunk names a transparent colour (magenta here) has
    alpha, as a palette PNG's does: the magenta never shows, and the output keeps it."""
    y, x = np.mgrid[0:60, 0:80]
    disc = np.hypot(y - 30, x - 40) < 20
    rgb = np.where(disc[..., None], np.uint8([40, 160, 60]), np.uint8([255, 0, 255]))
    image = Image.fromarray(rgb.astype(np.uint8))
    key = (255, 0, 255) if mode == "RGB" else image.convert("L").getpixel((0, 0))
    image.convert(mode).save(tmp_path / "disc.png", transparency=key)
    ok(*command, tmp_path / "disc.png", "-o", tmp_path / "out")
    (written,) = (tmp_path / "out").glob("*.png")
    with Image.open(written) as im:
        assert im.mode == mode + "A"
        levels = np.asarray(im).astype(int)
    visible = levels[..., -1] > 0
    assert visible.sum() > 100 and (~visible).sum() > 100
    shown = [40, 160, 60] if mode == "RGB" else image.convert("L").getpixel((40, 30))
    assert np.abs(levels[visible][:, :-1] - shown).max() <= 1


@pytest.mark.parametrize("memory", [None, "1M"], ids=["whole", "strips"])
def test_the_manifest_says_what_each_output_kept(tmp_path, profile, memory):
    import json

    values = np.random.default_rng(10).integers(0, 255, (400, 300, 3)).astype(np.uint8)
    tifffile.imwrite(
        tmp_path / "scan.tif",
        values,
        tile=(64, 64),
        photometric="rgb",
        resolution=(300, 300),
        resolutionunit="INCH",
        iccprofile=profile,
        extratags=[
            (33550, "d", 3, (10.0, 10.0, 0.0), True),
            (33922, "d", 6, (0, 0, 0, 500000.0, 4600000.0, 0), True),
            (34735, "H", len(_GEO_KEYS), _GEO_KEYS, True),
        ],
    )
    extra = ["--memory", memory] if memory else []
    ok("pool", "--format", "tiff", tmp_path / "scan.tif", "-o", tmp_path / "out", *extra)
    records = {
        r["output"]: r
        for r in map(
            json.loads, (tmp_path / "out" / "convcli-manifest.jsonl").read_text().splitlines()
        )
    }
    kept = records["scan_pool-max-f2-s2.tiff"]["kept"]
    assert kept == {
        "colour_profile": "sRGB built-in",
        "dpi": [150.0, 150.0],
        "crs": "EPSG:32633",
        "pixel_size": [20.0, 20.0],
        "tiepoint": [0.0, 0.0, 0.0, 500000.0, 4600000.0, 0.0],
    }


@pytest.mark.parametrize("memory", [None, "1M"], ids=["whole", "strips"])
def test_gdal_nodata_is_missing_never_averaged_and_written_as_nodata(tmp_path, memory):
    z = np.random.default_rng(11).uniform(0, 900, (400, 300)).astype(np.float32)
    z[101:139, 51:89] = -9999  # a hole in the survey
    tifffile.imwrite(
        tmp_path / "dem.tif",
        z,
        tile=(64, 64),
        extratags=[
            (33550, "d", 3, (10.0, 10.0, 0.0), True),
            (33922, "d", 6, (0, 0, 0, 500000.0, 4600000.0, 0), True),
            (34735, "H", len(_GEO_KEYS), _GEO_KEYS, True),
            (42113, "s", 0, "-9999", True),
        ],
    )
    extra = ["--memory", memory] if memory else []
    ok(
        "pool",
        "--mode",
        "average",
        "--format",
        "tiff",
        tmp_path / "dem.tif",
        "-o",
        tmp_path / "out",
        *extra,
    )
    with tifffile.TiffFile(tmp_path / "out" / "dem_pool-average-f2-s2-L.tiff") as tif:
        assert tif.pages[0].tags[42113].value == "-9999"
        got = tif.pages[0].asarray()
    windows = z.reshape(200, 2, 150, 2).transpose(0, 2, 1, 3).reshape(200, 150, 4)
    lost = windows == -9999
    missing = lost.all(axis=2)
    assert missing.sum() == 18 * 18  # the windows of missing values alone, no others
    assert (lost.any(axis=2) & ~missing).sum() == 20 * 20 - 18 * 18  # half in the hole
    np.testing.assert_array_equal(got[missing], -9999)
    valid_mean = np.where(lost, 0, windows).sum(axis=2) / np.maximum((~lost).sum(axis=2), 1)
    np.testing.assert_allclose(got[~missing], valid_mean[~missing], rtol=1e-6)


def _byte_geotiff(path, values, nodata: int):
    """A Byte (uint8) or UInt16 GeoTIFF with GDAL's nodata value, as gdal_translate writes one
    (`path` a file, or a tifffile.TiffWriter: a page of it)."""
    write = path.write if isinstance(path, tifffile.TiffWriter) else partial(tifffile.imwrite, path)
    write(
        values,
        tile=(64, 64),
        photometric="rgb" if values.ndim == 3 else "minisblack",
        extratags=[
            (33550, "d", 3, (10.0, 10.0, 0.0), True),
            (33922, "d", 6, (0, 0, 0, 500000.0, 4600000.0, 0), True),
            (34735, "H", len(_GEO_KEYS), _GEO_KEYS, True),
            (42113, "s", 0, str(nodata), True),
        ],
    )
    return path


def _pooled_windows(values: np.ndarray, nodata: int):
    """Each 2x2 window's values (H/2, W/2, C, 4), and which of them are nodata."""
    h, w = values.shape[0] // 2, values.shape[1] // 2
    windows = values.reshape(h, 2, w, 2, -1).transpose(0, 2, 4, 1, 3).reshape(h, w, -1, 4)
    return windows.astype(np.float64), windows == nodata


@pytest.mark.parametrize("memory", [[], ["--memory", "64K"]], ids=["whole", "strips"])
@pytest.mark.parametrize(
    "dtype, nodata, channels", [(np.uint8, 0, 1), (np.uint8, 255, 3), (np.uint16, 65535, 1)]
)
def test_the_nodata_of_an_integer_geotiff_is_never_averaged_and_written_back(
    tmp_path, memory, dtype, nodata, channels
):
    """Byte and UInt16 GeoTIFFs: nodata pixels never reach a window's mean or maximum, a
    window of nodata alone is nodata, the levels stay the input's, and the tag is kept."""
    import json

    rng = np.random.default_rng(13)
    top = np.iinfo(dtype).max
    values = rng.integers(1, top, (160, 200, channels), dtype=dtype)
    values[41:80, 21:60] = nodata  # a hole whose edges cut windows in two
    values[rng.random(values.shape) < 0.1] = nodata  # and scattered samples, band by band
    source = _byte_geotiff(tmp_path / "scene.tif", values.squeeze(), nodata)
    windows, lost = _pooled_windows(values, nodata)
    missing, count = lost.all(axis=3), (~lost).sum(axis=3)
    assert missing.sum() >= 19 * 19 * channels and ((count > 0) & (count < 4)).sum() > 500
    name = "scene_pool-{}-f2-s2" + ("-L" if channels == 1 else "")
    for mode, expected in (
        ("average", np.rint(np.where(lost, 0, windows).sum(axis=3) / np.maximum(count, 1))),
        ("max", np.where(lost, -1, windows).max(axis=3)),
    ):
        result = ok("pool", "--mode", mode, source, "-o", tmp_path / "out", "-v", *memory)
        assert ("processed in strips" in result.stderr) == bool(memory)
        with tifffile.TiffFile(tmp_path / "out" / f"{name.format(mode)}.tiff") as tif:
            assert tif.pages[0].tags[42113].value == str(nodata)
            got = tif.pages[0].asarray().reshape(expected.shape)
        assert got.dtype == dtype  # the input's levels
        np.testing.assert_array_equal(got[missing], nodata)
        np.testing.assert_array_equal(got[~missing], expected[~missing])
    records = (tmp_path / "out" / "convcli-manifest.jsonl").read_text().splitlines()
    assert [json.loads(line)["kept"]["nodata"] for line in records] == [nodata, nodata]


@pytest.mark.parametrize("memory", [[], ["--memory", "64K"]], ids=["whole", "strips"])
def test_an_int8_geotiff_is_pooled_as_values_with_its_nodata(tmp_path, memory):
    """Signed 8-bit samples are values, as Int16's are: their negative means are kept (not
    clipped to 0 as levels), and the nodata value -128 never reaches a window's mean."""
    values = np.random.default_rng(14).integers(-127, 128, (160, 200), dtype=np.int8)
    values[41:80, 21:60] = -128
    source = _byte_geotiff(tmp_path / "scene.tif", values, -128)
    windows, lost = _pooled_windows(values[:, :, None], -128)
    missing, count = lost.all(axis=3), (~lost).sum(axis=3)
    expected = np.where(lost, 0, windows).sum(axis=3) / np.maximum(count, 1)
    result = ok("pool", "--mode", "average", source, "-o", tmp_path / "out", "-v", *memory)
    assert ("processed in strips" in result.stderr) == bool(memory)
    with tifffile.TiffFile(tmp_path / "out" / "scene_pool-average-f2-s2-L.tiff") as tif:
        assert tif.pages[0].tags[42113].value == "-128"
        got = tif.pages[0].asarray().reshape(expected.shape)
    assert got.dtype == np.float32 and missing.sum() == 19 * 19
    np.testing.assert_array_equal(got[missing], -128)
    np.testing.assert_allclose(got[~missing], expected[~missing], rtol=1e-6)
    assert (got[~missing] < 0).sum() > 3000


@pytest.mark.parametrize("memory", [[], ["--memory", "64K"]], ids=["whole", "strips"])
def test_a_float64_nodata_past_float32s_range_is_clamped_as_gdal_does(tmp_path, memory):
    """A Float64 GeoTIFF's nodata -1.797e308 (GDAL's usual one) is no float32: the float32
    output holds -3.4e38 for it, tag and pixels, as gdal_translate -ot Float32 writes it (it
    was -inf in the pixels, with numpy's overflow warning, and the tag kept -1.797e308)."""
    lowest = float(-np.finfo(np.float64).max)
    values = np.random.default_rng(15).normal(0, 100, (120, 160))
    values[:20, :20] = lowest
    write = partial(tifffile.imwrite, tmp_path / "dem.tif", values, tile=(64, 64))
    write(extratags=[(33550, "d", 3, (10.0, 10.0, 0.0), True), (42113, "s", 0, repr(lowest), True)])
    result = ok("pool", "--mode", "average", tmp_path / "dem.tif", "-o", tmp_path / "out", *memory)
    assert "RuntimeWarning" not in result.stderr
    assert "nodata -1.79769e+308 written as -3.40282e+38, float32's largest" in result.stderr
    with tifffile.TiffFile(tmp_path / "out" / "dem_pool-average-f2-s2-L.tiff") as tif:
        assert tif.pages[0].tags[42113].value == "-3.4028234663852886e+38"
        got = tif.pages[0].asarray()
    assert got.dtype == np.float32 and np.isfinite(got).all()
    assert (got[:10, :10] == -np.finfo(np.float32).max).all()
    expected = values[20:].reshape(50, 2, 80, 2).mean(axis=(1, 3))
    np.testing.assert_allclose(got[10:], expected, rtol=1e-6, atol=1e-4)  # float32 sums
    (record,) = manifest_records(tmp_path / "out")
    assert record["kept"]["nodata"] == float(-np.finfo(np.float32).max)  # as the file holds it


@pytest.mark.parametrize("memory", [[], ["--memory", "64K"]], ids=["whole", "strips"])
@pytest.mark.parametrize(
    ("nodata", "said"),
    [(-9999.0, "the nearest 16-bit level"), (np.nan, "the lowest 16-bit level")],
)
def test_levels_that_cannot_hold_the_nodata_value_hold_their_nearest(
    tmp_path, memory, nodata, said
):
    """``--normalize clip`` writes a float DEM as 16-bit levels, which hold no -9999 or NaN:
    its missing pixels take level 0, as gdal_translate -ot UInt16 clamps the nodata value,
    and no valid pixel does (it raised an OverflowError)."""
    values = np.random.default_rng(16).uniform(0, 500, (120, 160)).astype(np.float32)
    values[:8, :8] = nodata
    values[60:64, 60:64] = 0.0  # valid pixels of level 0
    extratags = [(33550, "d", 3, (10.0, 10.0, 0.0), True), (42113, "s", 0, f"{nodata:g}", True)]
    tifffile.imwrite(tmp_path / "dem.tif", values, tile=(64, 64), extratags=extratags)
    args = ["-k", "box", "--normalize", "clip", "--format", "tiff", tmp_path / "dem.tif"]
    result = ok("conv", *args, "-o", tmp_path / "o", *memory)
    assert f"nodata {nodata:g} written as 0, {said} (as gdal_translate -ot UInt16" in result.stderr
    (path,) = outputs_in(tmp_path / "o")
    with tifffile.TiffFile(path) as tif:
        assert tif.pages[0].tags[42113].value == "0"
        got = tif.pages[0].asarray()
    assert got.dtype == np.uint16
    missing = np.zeros(values.shape, bool)
    missing[:9, :9] = True  # the 3x3 windows that reach a missing pixel
    assert (got[missing] == 0).all() and (got[~missing] > 0).all()
    (record,) = manifest_records(tmp_path / "o")
    assert record["kept"]["nodata"] == 0.0


def test_a_store_of_levels_gives_the_nodata_value_its_levels_hold(tmp_path):
    pytest.importorskip("zarr")
    import zarr

    values = np.random.default_rng(18).uniform(0, 500, (40, 60)).astype(np.float32)
    values[:4, :4] = -9999.0
    extratags = [(33550, "d", 3, (10.0, 10.0, 0.0), True), (42113, "s", 0, "-9999", True)]
    tifffile.imwrite(tmp_path / "dem.tif", values, extratags=extratags)
    args = ["-k", "box", "--normalize", "clip", "--format", "zarr", tmp_path / "dem.tif"]
    ok("conv", *args, "-o", tmp_path / "o")
    (path,) = outputs_in(tmp_path / "o")
    group = zarr.open_group(str(path), mode="r")
    assert group.attrs["georeference"]["nodata"] == 0.0  # as the manifest and the message
    assert manifest_records(tmp_path / "o")[0]["kept"]["nodata"] == 0.0
    levels = np.asarray(group["0"])
    assert levels.dtype == np.uint16 and (levels[:5, :5] == 0).all() and (levels[6:] > 0).all()


def test_a_nan_nodata_kept_as_nan_is_not_said_clamped(tmp_path):
    values = np.random.default_rng(17).normal(0, 1, (40, 60)).astype(np.float32)
    values[:4, :4] = np.nan
    extratags = [(33550, "d", 3, (10.0, 10.0, 0.0), True), (42113, "s", 0, "nan", True)]
    tifffile.imwrite(tmp_path / "dem.tif", values, extratags=extratags)
    result = ok("pool", tmp_path / "dem.tif", "-o", tmp_path / "o")
    assert "written as" not in result.stderr
    with tifffile.TiffFile(tmp_path / "o" / "dem_pool-max-f2-s2-L.tiff") as tif:
        assert tif.pages[0].tags[42113].value == "nan"
        assert np.isnan(tif.pages[0].asarray()[:2, :2]).all()


def test_no_valid_integer_result_takes_the_nodata_value(tmp_path):
    """A mean of valid levels that rounds to the nodata value is written one level away, on
    its side; in strips the same bytes; a pad's border of the nodata value is nodata."""
    windows = [  # 2x2 windows, nodata 100: their valid means, and what is written
        ((99, 101, 100, 100), 101),  # 100 exactly: above
        ((99, 99, 101, 100), 99),  # 99.67: below
        ((101, 101, 99, 100), 101),  # 100.33: above
        ((100, 100, 100, 100), 100),  # nodata alone
        ((98, 100, 100, 100), 98),
    ]
    values = np.array([w for w, _ in windows] * 60, np.uint8).reshape(-1, 2, 2)
    values = np.tile(values.transpose(1, 0, 2).reshape(2, -1), (150, 1))  # 300 x 600
    source = _byte_geotiff(tmp_path / "mid.tif", values, 100)
    for memory in ([], ["--memory", "64K"]):
        out = tmp_path / f"out{len(memory)}"
        for command in (["pool", "--mode", "average"], ["pad", "--pad", "2", "--value", "100"]):
            result = ok(*command, source, "-o", out, "-v", *memory)
            assert ("processed in strips" in result.stderr) == bool(memory)
    for name in ("mid_pool-average-f2-s2-L.tiff", "mid_pad-constant-2-v100-L.tiff"):
        assert_same_file(tmp_path / "out0" / name, tmp_path / "out2" / name)
    pooled = tifffile.imread(tmp_path / "out0" / "mid_pool-average-f2-s2-L.tiff")
    assert pooled.shape == (150, 300)
    np.testing.assert_array_equal(pooled[:, :5], [[w for _, w in windows]] * 150)
    padded = tifffile.imread(tmp_path / "out0" / "mid_pad-constant-2-v100-L.tiff")
    assert (padded[:2] == 100).all() and (padded[2:-2, 2:-2] == values).all()


def test_the_pages_of_an_integer_geotiff_keep_its_nodata(tmp_path):
    """A stack of Byte pages pooled page by page: the same rule as one image."""
    pages = np.full((2, 40, 40), 200, np.uint8)
    pages[:, :20] = 0  # the top half of each page is nodata
    pages[1, 20:] = 50
    with tifffile.TiffWriter(tmp_path / "stack.tif") as tif:
        for page in pages:
            _byte_geotiff(tif, page, 0)
    ok("pool", "--mode", "average", "--frames", "all", tmp_path / "stack.tif", "-o", tmp_path)
    with tifffile.TiffFile(tmp_path / "stack_pool-average-f2-s2-L.tiff") as tif:
        assert [page.tags[42113].value for page in tif.pages] == ["0", "0"]
        pooled = np.stack([page.asarray() for page in tif.pages])
    assert pooled.dtype == np.uint8
    np.testing.assert_array_equal(pooled[:, :10], 0)
    np.testing.assert_array_equal(pooled[:, 10:], [[[200]], [[50]]] * np.ones((10, 20), int))


def _animation(path, count: int, profile: bytes, **options) -> None:
    """An APNG of `count` flat RGB frames with colour profile `profile`, 200 dpi and `options`."""
    frames = [Image.fromarray(np.full((40, 50, 3), 30 * k, np.uint8)) for k in range(count)]
    frames[0].save(
        path,
        save_all=True,
        append_images=frames[1:],
        icc_profile=profile,
        dpi=(200, 200),
        **options,
    )


def test_frames_of_an_animation_keep_its_profile_and_resolution(tmp_path, profile):
    _animation(tmp_path / "anim.png", 3, profile, duration=50)
    ok("pool", "--frames", "all", tmp_path / "anim.png", "-o", tmp_path / "out")
    with Image.open(tmp_path / "out" / "anim_pool-max-f2-s2.png") as im:
        assert getattr(im, "n_frames", 1) == 3
        assert im.info.get("icc_profile") == profile
        assert im.info.get("dpi") == pytest.approx((100, 100), abs=0.02)


@pytest.mark.parametrize("frame", ["0", "1"])
def test_one_frame_picked_keeps_the_profile_resolution_and_exif(tmp_path, profile, frame):
    # Frame 0 is read as a one-frame file, turned upright (orientation 1); another frame as
    # stored, so it keeps the animation's orientation, as the frames of a stack do.
    exif = Image.Exif()
    exif[MAKE], exif[ORIENTATION] = "Canon", 6
    _animation(tmp_path / "anim.png", 2, profile, exif=exif)
    result = ok("pool", "--frames", frame, tmp_path / "anim.png", "-o", tmp_path / "out", "-v")
    assert "kept: colour profile 'sRGB built-in', 100x100 dpi, EXIF" in result.stderr
    icc, dpi, make, orientation, levels = _read(
        tmp_path / "out" / f"anim_pool-max-f2-s2-frames{frame}.png"
    )
    assert icc == profile and dpi == pytest.approx((100, 100), abs=0.02) and make == "Canon"
    assert (orientation, levels.shape) == ((1, (25, 20, 3)) if frame == "0" else (6, (20, 25, 3)))
    assert levels.mean() == 30 * int(frame)


def test_frames_say_what_they_keep_and_what_their_format_cannot_hold(tmp_path, profile):
    frames = [Image.fromarray(np.full((40, 50, 3), 30 * k, np.uint8)) for k in range(2)]
    frames[0].save(
        tmp_path / "anim.png", save_all=True, append_images=frames[1:], icc_profile=profile
    )
    kept = ok("pool", tmp_path / "anim.png", "-o", tmp_path / "a", "-v")
    assert "done, 1 written (2 frames; kept: colour profile 'sRGB built-in')" in kept.stderr
    lost = ok("pool", "--format", "npy", tmp_path / "anim.png", "-o", tmp_path / "b")
    assert "colour profile not kept: npy outputs hold none" in lost.stderr


def test_animations_whose_format_cannot_hold_their_profile_say_so_once(tmp_path, profile):
    frames = [Image.fromarray(np.full((40, 50, 3), 30 * k, np.uint8)) for k in range(2)]
    for name in ("a", "b", "c"):
        frames[0].save(
            tmp_path / f"{name}.png", save_all=True, append_images=frames[1:], icc_profile=profile
        )
    sources = [tmp_path / f"{name}.png" for name in ("a", "b", "c")]
    result = ok("pool", "--format", "npy", *sources, "-o", tmp_path / "out", "-v", "-j", "2")
    assert result.stderr.count("done, 1 written (2 frames)") == 3
    assert sorted(_not_kept(result.stderr)) == [
        "convcli: colour profile not kept: npy outputs hold none (png, jpg and tiff outputs do)",
        "convcli: frame durations not kept: npy outputs hold none (png outputs do)",
    ]


@pytest.mark.parametrize("memory", [None, "1M"], ids=["whole", "strips"])
def test_a_zarr_store_of_a_geotiff_holds_its_transform(tmp_path, memory):
    zarr = pytest.importorskip("zarr")
    source = _geotiff(
        tmp_path / "scene.tif",
        np.random.default_rng(12).uniform(0, 900, (400, 300)).astype(np.float32),
    )
    extra = ["--memory", memory] if memory else []
    result = ok(
        "pool",
        "--size",
        "3",
        "--stride",
        "2",
        "--format",
        "zarr",
        source,
        "-o",
        tmp_path / "out",
        "-v",
        *extra,
    )
    assert "kept: georeference" in result.stderr
    group = zarr.open_group(str(tmp_path / "out" / "scene_pool-max-f3-s2-L.zarr"), mode="r")
    geo = group.attrs["georeference"]
    assert geo["crs"] == "EPSG:32633"
    assert geo["geotransform"] == pytest.approx([500005.0, 20.0, 0.0, 4599995.0, 0.0, -20.0])
    assert group.attrs["convcli"]["version"]


@pytest.mark.parametrize("kernel", ["gaussian-5x5", "sharpen"])
def test_a_blur_weighted_by_alpha_is_the_same_in_strips(tmp_path, small_strips, kernel):
    """An RGBA TIFF blurred by channel whole and in strips: the same values, no magenta."""
    y, x = np.mgrid[0:900, 0:700]
    rgba = np.zeros((900, 700, 4), np.uint8)
    rgba[...] = (255, 0, 255, 0)
    rgba[np.hypot(y - 450, x - 350) < 300] = (40, 160, 60, 255)
    tifffile.imwrite(
        tmp_path / "disc.tif", rgba, tile=(64, 64), photometric="rgb", extrasamples=["unassalpha"]
    )
    results = []
    for extra in ([], ["--memory", small_strips]):
        out = tmp_path / f"out{len(results)}"
        result = ok(
            "conv",
            "-k",
            kernel,
            "--channels",
            "each",
            "--format",
            "npy",
            tmp_path / "disc.tif",
            "-o",
            out,
            "-v",
            *extra,
        )
        assert ("processed in strips" in result.stderr) == bool(extra)
        results.append(np.load(out / f"disc_conv-{kernel}-each.npy"))
    np.testing.assert_array_equal(results[0], results[1])
    visible = np.rint(results[0][..., 3]) > 0
    assert np.abs(results[0][visible][:, :3] - (40, 160, 60)).max() < 0.5


def test_what_is_kept_is_said_with_v_and_what_is_lost_always(tmp_path, pixels, profile):
    # A folder of photos says nothing per photo by default; -v names what each keeps;
    # what a format cannot hold is said without -v.
    source = _jpeg(tmp_path / "photo.jpg", pixels, profile)
    quiet = ok("pool", source, "-o", tmp_path / "a")
    (line,) = quiet.stderr.splitlines()  # the summary alone
    assert line.startswith("convcli: 1 processed, 0 skipped, 0 failed in ")
    verbose = ok("pool", source, "-o", tmp_path / "b", "-v")
    assert "done, 1 written (kept: colour profile 'sRGB built-in', 150x150 dpi, EXIF)" in (
        verbose.stderr
    )
    lost = ok("pool", source, "-o", tmp_path / "c", "--format", "npy")
    assert "not kept: npy outputs hold none" in lost.stderr


def test_a_multi_page_tiff_keeps_its_camera_tags_in_each_frame(tmp_path):
    # tifffile reads the pages; their Make, Model and DateTime go to the frames' EXIF.
    frames = [Image.fromarray(np.full((8, 6, 3), 40 * i, np.uint8)) for i in range(2)]
    exif = Image.Exif()
    exif[271], exif[272], exif[306] = "Canon", "EOS R5", "2026:11:27 10:00:00"
    source = tmp_path / "pages.tif"
    frames[0].save(source, save_all=True, append_images=frames[1:], exif=exif)
    ok("pool", "--format", "jpg", source, "-o", tmp_path / "out")
    for k in range(2):
        with Image.open(tmp_path / "out" / f"pages_pool-max-f2-s2_f{k}.jpg") as im:
            found = im.getexif()
            assert (found[271], found[272], found[306]) == (
                "Canon",
                "EOS R5",
                "2026:11:27 10:00:00",
            )
            assert np.asarray(im).mean() == pytest.approx(40 * k, abs=2)


@pytest.mark.parametrize("orientation", [1, 6], ids=["tifffile", "turned-by-pillow"])
def test_a_tiffs_exif_keeps_its_rationals_and_none_of_its_structure(tmp_path, orientation):
    # Read by tifffile (upright) or by Pillow (turned): the same camera EXIF comes out, its
    # rationals as rationals, and no width, strips or profile of the TIFF it was read from.
    from PIL.TiffImagePlugin import IFDRational

    exif = Image.Exif()
    exif[MAKE], exif[ORIENTATION] = "Canon", orientation
    exif.get_ifd(0x8769)[0x829A] = IFDRational(1, 250)  # ExposureTime
    gps = exif.get_ifd(0x8825)
    gps[1], gps[2] = "N", (IFDRational(48), IFDRational(51), IFDRational(30))
    source = tmp_path / "camera.tif"
    Image.fromarray(np.full((40, 60, 3), 90, np.uint8)).save(source, exif=exif.tobytes())
    ok("pool", "--format", "jpg", source, "-o", tmp_path / "out")
    with Image.open(tmp_path / "out" / "camera_pool-max-f2-s2.jpg") as im:
        found = im.getexif()
        assert found[MAKE] == "Canon" and found[ORIENTATION] == 1
        assert float(found.get_ifd(0x8769)[0x829A]) == pytest.approx(1 / 250)
        assert [float(v) for v in found.get_ifd(0x8825)[2]] == [48, 51, 30]
        assert not {256, 257, 273, 279, 34675} & set(found)  # ImageWidth ... a profile


@pytest.mark.parametrize("mode", ["P", "CMYK"])
def test_a_tiff_without_camera_tags_has_no_exif_to_keep(tmp_path, mode):
    # Pillow reads these TIFFs: their own tags (width, strips, compression) are no EXIF, and
    # no EXIF of an orientation alone is made up for them, nor said to be lost.
    source = tmp_path / "plain.tif"
    Image.fromarray(np.full((20, 30, 3), 90, np.uint8)).convert(mode).save(source)
    kept = ok("pool", source, "-o", tmp_path / "tiff", "-v")
    assert "EXIF" not in kept.stderr
    png = ok("pool", "--format", "png", source, "-o", tmp_path / "png", "-v")
    assert "EXIF" not in png.stderr
    with Image.open(tmp_path / "png" / "plain_pool-max-f2-s2.png") as im:
        assert "exif" not in im.info and not im.getexif()
    (record,) = manifest_records(tmp_path / "png")
    assert "exif" not in record.get("kept", {})


def test_exif_too_large_for_a_jpeg_is_left_out_and_said(tmp_path, pixels):
    # A JPEG's EXIF segment holds 64 KB: a larger EXIF (a raw converter's maker notes) is
    # kept by PNG, and left out of a JPEG, which is written all the same.
    exif = Image.Exif()
    exif[MAKE] = "Canon"
    exif.get_ifd(0x8769)[0x927C] = bytes(range(256)) * 400  # MakerNote, 100 KB
    Image.fromarray(pixels).save(tmp_path / "raw.png", exif=exif.tobytes())
    result = ok("pool", "--format", "jpg", tmp_path / "raw.png", "-o", tmp_path / "jpg", "-v")
    assert "EXIF over 64 KB not kept: jpg outputs hold none (png outputs do)" in result.stderr
    with Image.open(tmp_path / "jpg" / "raw_pool-max-f2-s2.jpg") as im:
        assert im.size == (80, 60) and not im.getexif()
    (record,) = manifest_records(tmp_path / "jpg")
    assert "exif" not in record.get("kept", {})
    ok("pool", "--format", "png", tmp_path / "raw.png", "-o", tmp_path / "png")
    with Image.open(tmp_path / "png" / "raw_pool-max-f2-s2.png") as im:
        assert im.getexif()[MAKE] == "Canon"
        assert len(im.getexif().get_ifd(0x8769)[0x927C]) == 102400


def test_alpha_that_a_jpeg_drops_is_said_once(tmp_path):
    """A JPEG has no alpha: the colours (weighted by alpha) are written alone, and the run
    says so once, naming the formats that keep it; --separate writes alpha as a file."""
    pixels = np.zeros((64, 48, 4), np.uint8)
    pixels[..., 0], pixels[:, 24:, 3] = 255, 255  # red, the left half transparent
    for k in range(2):
        Image.fromarray(pixels).save(tmp_path / f"clear{k}.png")
    result = ok("pool", "--format", "jpg", tmp_path, "-o", tmp_path / "out")
    lost = "convcli: alpha not kept: jpg outputs hold none (png, tiff, npy and zarr outputs do)"
    assert result.stderr.splitlines().count(lost) == 1
    with Image.open(tmp_path / "out" / "clear0_pool-max-f2-s2.jpg") as im:
        assert im.mode == "RGB"
        left, right = np.asarray(im)[:, :10], np.asarray(im)[:, -10:]
    assert left.max() <= 3 and abs(int(right[..., 0].mean()) - 255) <= 3  # transparent: black
    kept = ok("pool", "--format", "png", tmp_path, "-o", tmp_path / "png")
    assert "alpha not kept" not in kept.stderr
    split = ok("pool", "--format", "jpg", "--separate", tmp_path, "-o", tmp_path / "sep")
    assert "alpha not kept" not in split.stderr
    assert (tmp_path / "sep" / "clear0_pool-max-f2-s2-A.jpg").is_file()


def _sized_exif(width: int, height: int) -> bytes:
    """A camera's EXIF that gives the image's size (PixelXDimension, PixelYDimension)."""
    exif = Image.Exif()
    exif[MAKE] = "Canon"
    exif.get_ifd(0x8769).update({0xA002: width, 0xA003: height, 0x9003: "2024:01:02 03:04:05"})
    return exif.tobytes()


def _exif_size(path) -> tuple[int, int, tuple[int, int]]:
    """The EXIF's image size, and the pixels' (width, height), as Pillow reads them."""
    with Image.open(path) as im:
        block = im.getexif().get_ifd(0x8769)
        assert block[0x9003] == "2024:01:02 03:04:05"  # the rest of the block kept
        return block[0xA002], block[0xA003], im.size


@pytest.mark.parametrize("fmt", ["png", "jpg"])
@pytest.mark.parametrize(
    "command", [("pool", "--size", "2"), ("pad", "--pad", "3"), ("conv", "-k", "box", "--pad", "0")]
)
def test_the_exif_image_size_is_the_outputs(tmp_path, pixels, fmt, command):
    # A camera's EXIF gives the image's size: an output's file gives the output's, never the
    # input's (exiftool's ExifImageWidth and ExifImageHeight).
    source = tmp_path / "photo.jpg"
    Image.fromarray(pixels).save(source, exif=_sized_exif(160, 120))
    ok(*command, "--format", fmt, source, "-o", tmp_path / "out")
    (written,) = (tmp_path / "out").glob(f"*.{fmt}")
    width, height, size = _exif_size(written)
    assert (width, height) == size != (160, 120)


def test_the_exif_image_size_of_frames_and_strips_is_the_outputs(tmp_path, profile):
    _animation(tmp_path / "anim.png", 3, profile, exif=_sized_exif(50, 40))
    ok("pool", "--frames", "all", tmp_path / "anim.png", "-o", tmp_path / "out")
    assert _exif_size(tmp_path / "out" / "anim_pool-max-f2-s2.png") == (25, 20, (25, 20))
    scan = np.random.default_rng(6).integers(0, 256, (700, 600, 3), np.uint8)
    Image.fromarray(scan).save(tmp_path / "scan.tif", exif=_sized_exif(600, 700))
    result = ok(
        "pool",
        "--size",
        "3",
        "--format",
        "png",
        tmp_path / "scan.tif",
        "-o",
        tmp_path / "s",
        "-v",
        "--memory",
        "1M",
    )
    assert "processed in strips" in result.stderr
    assert _exif_size(tmp_path / "s" / "scan_pool-max-f3-s3.png") == (200, 233, (200, 233))


_XMP = (
    b'<?xpacket begin=""?><x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf='
    b'"http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description xmlns:dc='
    b'"http://purl.org/dc/elements/1.1/"><dc:creator>Jane</dc:creator></rdf:Description>'
    b'</rdf:RDF></x:xmpmeta><?xpacket end="w"?>'
)


def test_png_text_xmp_and_iptc_are_kept_by_images_of_the_inputs_colours(tmp_path):
    """An image of its input's colours (pool) keeps a PNG's text, the XMP and a JPEG's IPTC
    (in a Photoshop segment of its own), and says no loss; an edge map keeps none of what
    its input carries (EXIF, profile, XMP, IPTC, text) and says none of it."""
    from PIL import PngImagePlugin

    pixels = np.random.default_rng(0).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "a.jpg", xmp=_XMP)
    data = (tmp_path / "a.jpg").read_bytes()
    records = b"\x1c\x02\x50\0\x04Jane"
    iptc = b"Photoshop 3.0\0" + b"8BIM\x04\x04\0\0\0\0\0\x09" + records + b"\0"  # even
    iptc += b"8BIM\x04\x0c\0\0\0\0\0\x02\xff\xd8"  # a thumbnail's resource: not kept
    app13 = b"\xff\xed" + (len(iptc) + 2).to_bytes(2, "big") + iptc
    (tmp_path / "b.jpg").write_bytes(data[:2] + app13 + data[2:])  # after the SOI marker
    info = PngImagePlugin.PngInfo()
    info.add_text("Author", "Jane")
    info.add_itxt("Copyright", "(c) Jane")
    Image.fromarray(pixels).save(tmp_path / "c.png", pnginfo=info)
    with Image.open(tmp_path / "b.jpg") as im:
        assert [marker for marker, _ in im.applist].count("APP13") == 1
    inputs = [tmp_path / name for name in ("a.jpg", "b.jpg", "c.png")]
    pooled = ok("pool", *inputs, "-o", tmp_path / "pooled").stderr.splitlines()
    assert not any("XMP" in line or "IPTC" in line for line in pooled)
    assert not any("not kept" in line for line in pooled)
    with Image.open(tmp_path / "pooled" / "c_pool-max-f2-s2.png") as im:
        assert (im.text["Author"], im.text["Copyright"]) == ("Jane", "(c) Jane")
    with Image.open(tmp_path / "pooled" / "b_pool-max-f2-s2.jpg") as im:
        assert im.info["photoshop"] == {0x0404: records}
    edges = ok("conv", "-k", "vertical", *inputs, "-o", tmp_path / "edges").stderr
    assert "not kept" not in edges
    with Image.open(tmp_path / "edges" / "b_conv-vertical-sum.png") as im:
        assert "photoshop" not in im.info


@pytest.mark.parametrize("byte_order", ["<", ">"])
def test_a_tiffs_iptc_is_kept_by_tiffs_jpegs_and_pngs(tmp_path, byte_order):
    """Photoshop writes the IPTC tag as LONG: its numbers are packed back in the file's byte
    order, so that the records come out as they were. A PNG holds them as ImageMagick's raw
    profile text, which exiftool reads."""
    records = b"\x1c\x02\x78\0\x07Harbour"  # an odd length: a LONG tag pads it
    padded = records + b"\0" * (-len(records) % 4)
    longs = np.frombuffer(padded, dtype=f"{byte_order}u4")
    pixels = np.random.default_rng(2).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    tifffile.imwrite(
        tmp_path / "x.tif",
        pixels,
        photometric="rgb",
        byteorder=byte_order,
        extratags=[(33723, "I", len(longs), tuple(int(v) for v in longs), True)],
    )
    for fmt in ("tiff", "jpg", "png"):
        said = ok("pool", tmp_path / "x.tif", "--format", fmt, "-o", tmp_path / fmt, "-v").stderr
        (out,) = sorted((tmp_path / fmt).glob("x_*"))
        if fmt == "tiff":
            with tifffile.TiffFile(out) as tif:
                assert bytes(tif.pages[0].tags.valueof(33723)) == padded
        elif fmt == "jpg":
            with Image.open(out) as im:
                assert im.info["photoshop"] == {0x0404: padded}
        else:
            with Image.open(out) as im:
                text = im.info["Raw profile type iptc"]
            assert text.split()[:2] == ["iptc", str(12 + len(padded))]  # in an 8BIM resource
            assert png_iptc(text) == padded
        assert "IPTC not kept" not in said
        assert "IPTC" in said.split("kept: ")[1].split(")")[0]


@pytest.mark.parametrize("wrapped", [True, False], ids=["8BIM", "bare"])
def test_a_pngs_raw_iptc_profile_is_read_and_kept_not_said_lost_as_png_text(tmp_path, wrapped):
    # ImageMagick and exiftool write a PNG's IPTC as hex text; some writers leave out the
    # Photoshop resource around the records.
    from PIL import PngImagePlugin

    records = b"\x1c\x02\x19\0\x06harbor\x1c\x02\x78\0\x05Boats"
    block = photoshop_resources(records) if wrapped else records
    digits = block.hex()
    lines = "\n".join(digits[i : i + 72] for i in range(0, len(digits), 72))
    info = PngImagePlugin.PngInfo()
    info.add_text("Raw profile type iptc", f"\niptc\n{len(block):8d}\n{lines}\n", zip=True)
    pixels = np.random.default_rng(4).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "in.png", pnginfo=info)
    for fmt in ("png", "jpg", "tiff"):
        said = ok("pool", tmp_path / "in.png", "--format", fmt, "-o", tmp_path / fmt, "-v")
        assert "not kept" not in said.stderr, said.stderr
        (out,) = sorted((tmp_path / fmt).glob("in_*"))
        with Image.open(out) as im:
            if fmt == "png":
                assert png_iptc(im.info["Raw profile type iptc"]) == records
            elif fmt == "jpg":
                assert im.info["photoshop"] == {0x0404: records}
            else:
                assert bytes(im.tag_v2[33723]) == records


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "iptc",
        "\niptc\n  many\n1c02",
        "\niptc\n 4\nzz11",  # not hex
        "\niptc\n 12\n" + (b"8BIM\x04\x0c\0\0\0\0\0\x02\xff\xd8").hex(),  # a thumbnail alone
        "\niptc\n 9\n" + b"8BIM\x04\x04\0".hex(),  # cut short
        "\niptc\n 0\n",
    ],
)
def test_a_raw_iptc_profile_without_records_gives_none(text):
    assert png_iptc(text) is None


def test_a_tiffs_xmp_is_kept_and_a_photoshop_block_without_iptc_is_not_said(tmp_path):
    pixels = np.random.default_rng(1).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    tifffile.imwrite(
        tmp_path / "x.tif", pixels, photometric="rgb", extratags=[(700, "B", len(_XMP), _XMP, True)]
    )
    Image.fromarray(pixels).save(tmp_path / "p.jpg")
    data = (tmp_path / "p.jpg").read_bytes()
    resolution = b"Photoshop 3.0\0" + b"8BIM\x03\xed\0\0\0\0\0\x10" + bytes(16)  # 1005 alone
    app13 = b"\xff\xed" + (len(resolution) + 2).to_bytes(2, "big") + resolution
    (tmp_path / "p.jpg").write_bytes(data[:2] + app13 + data[2:])
    said = ok("pool", tmp_path / "x.tif", tmp_path / "p.jpg", "-o", tmp_path / "o").stderr
    assert "XMP" not in said and "IPTC" not in said
    with tifffile.TiffFile(tmp_path / "o" / "x_pool-max-f2-s2.tiff") as tif:
        assert bytes(tif.pages[0].tags.valueof(700)) == _XMP


def test_an_input_carrying_only_what_no_output_keeps_records_no_kept(tmp_path):
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text("Raw profile type exif", "\nexif\n       6\n457869660000\n")
    Image.new("RGB", (20, 10), (1, 2, 3)).save(tmp_path / "t.png", pnginfo=info)
    said = ok("pool", tmp_path / "t.png", "-o", tmp_path / "o").stderr
    assert "PNG text (Raw profile type exif) not kept: convcli writes none" in said
    (record,) = manifest_records(tmp_path / "o")
    assert "kept" not in record


def test_a_resolution_no_jfif_header_holds_is_said_not_wrapped_around(tmp_path):
    # An electron micrograph at 0.05 um a pixel: 508,000 dpi, 254,000 once pooled. Pillow
    # would write 254000 modulo 65536 (57392) into the JPEG's 16-bit JFIF density.
    pixels = np.random.default_rng(5).integers(0, 256, (40, 60, 3), dtype=np.uint8)
    xmp = (  # its XMP gives the resolution too, per centimetre: that of the output
        b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/'
        b'22-rdf-syntax-ns#"><rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/" '
        b'tiff:XResolution="200000/1" tiff:YResolution="200000/1" tiff:ResolutionUnit="3"/>'
        b"</rdf:RDF></x:xmpmeta>"
    )
    tifffile.imwrite(
        tmp_path / "em.tif",
        pixels,
        photometric="rgb",
        resolution=(200000, 200000),
        resolutionunit="CENTIMETER",
        extratags=[(700, "B", len(xmp), xmp, True)],
    )
    jpg = ok("pool", tmp_path / "em.tif", "--format", "jpg", "-o", tmp_path / "j").stderr
    said = "254000x254000 dpi not kept: a jpg's JFIF header holds 1 to 65535 dpi"
    assert f"{said} (png and tiff outputs do)" in jpg
    with Image.open(tmp_path / "j" / "em_pool-max-f2-s2.jpg") as im:
        assert im.info["jfif_unit"] == 0 and im.info["jfif_density"] == (1, 1)  # no density
        assert b'tiff:XResolution="100000/1"' in im.info["xmp"]
    png = ok("pool", tmp_path / "em.tif", "-o", tmp_path / "p", "-v").stderr
    assert "not kept" not in png and "kept: 254000x254000 dpi" in png
    with tifffile.TiffFile(tmp_path / "p" / "em_pool-max-f2-s2.tiff") as tif:
        x, unit = tif.pages[0].tags["XResolution"].value, tif.pages[0].tags["ResolutionUnit"]
        assert x[0] / x[1] == 100000 and unit.value == 3  # a centimetre's pixels


@pytest.mark.parametrize(
    "dpi, held",
    [
        ((1, 1), True),
        ((72, 300), True),
        ((65535, 65535), True),
        ((0.4, 300), False),
        ((300, 65535.6), False),
        ((254000, 254000), False),
        (None, False),
    ],
)
def test_jfif_holds_whole_dpi_from_1_to_65535(dpi, held):
    from convcli.io.jpeg_coding import jfif_holds

    assert jfif_holds(dpi) is held


@pytest.mark.parametrize("name", ["png", "jpg", "tif"])
def test_a_resolution_of_no_unit_that_makes_pixels_oblong_is_said(tmp_path, name):
    """A PNG's pHYs of unit 0, a JPEG's JFIF density of units 0, a TIFF's ResolutionUnit 1:
    1 pixel a unit across and 2 down are pixels twice as wide as tall, dropped unsaid."""
    import struct
    import zlib

    path = tmp_path / f"a.{name}"
    if name == "tif":
        tifffile.imwrite(path, np.zeros((4, 6), np.uint8), resolution=(1, 2), resolutionunit=1)
    else:
        Image.new("L", (6, 4), 90).save(path)
        data = bytearray(path.read_bytes())
        if name == "png":
            body = b"pHYs" + struct.pack(">IIB", 1, 2, 0)
            at = data.find(b"IDAT") - 4
            chunk = struct.pack(">I", 9) + body + struct.pack(">I", zlib.crc32(body))
            data[at:at] = chunk
        else:
            at = data.find(b"JFIF\0")
            data[at + 7 : at + 12] = b"\0" + struct.pack(">HH", 1, 2)
        path.write_bytes(bytes(data))
    result = ok("pool", "--size", "2", path, "-o", tmp_path / "out", "-v")
    assert "pixel aspect ratio 2:1 (width to height) not kept: convcli writes none" in result.stderr


def test_a_turned_pictures_unitless_aspect_ratio_is_said_as_it_is_shown(tmp_path):
    """1 pixel a unit across and 2 down, turned a quarter (EXIF orientation 6): the pixels
    shown are twice as tall as wide, 0.5:1 (it said 2:1, of the stored pixels)."""
    import struct

    exif = Image.Exif()
    exif[274] = 6
    path = tmp_path / "a.jpg"
    Image.new("L", (6, 4), 90).save(path, exif=exif.tobytes())
    data = bytearray(path.read_bytes())
    at = data.find(b"JFIF\0")
    data[at + 7 : at + 12] = b"\0" + struct.pack(">HH", 1, 2)
    path.write_bytes(bytes(data))
    result = ok("pool", "--size", "1", path, "-o", tmp_path / "out", "-v")
    assert "pixel aspect ratio 0.5:1 (width to height) not kept" in result.stderr
