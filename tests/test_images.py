"""Reading images into float arrays, writing files."""

from __future__ import annotations

import struct
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import tifffile
from helpers import (
    HEIGHT,
    MODES,
    WIDTH,
    make_bomb_png,
    make_exif_rotated_jpeg,
    make_gif,
    make_image,
    make_multipage_tiff,
    make_truncated_png,
    run,
)
from PIL import Image, ImageOps

from convcli.choices import FORMAT_NAMES
from convcli.io import image_files, images
from convcli.io.image_files import save_levels, save_npy
from convcli.io.images import ImageError, PixelLimitError, open_image, read_image


def _pillow(path, mode=None):
    with Image.open(path) as im:
        im = im.convert(mode) if mode else im.copy()
    return np.asarray(im).astype(np.float32)


EXPECTED_CHANNELS = {
    "1": ("L",),
    "L": ("L",),
    "LA": ("L", "A"),
    "P": ("R", "G", "B"),
    "P+transparency": ("R", "G", "B", "A"),
    "RGB": ("R", "G", "B"),
    "RGBA": ("R", "G", "B", "A"),
    "CMYK": ("R", "G", "B"),
    "I;16": ("L",),
    "I": ("L",),
    "F": ("L",),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_every_mode_reads_as_float32_hwc_in_the_files_scale(tmp_path, mode):
    path = make_image(tmp_path / f"img.{MODES[mode]}", mode)
    pic = read_image(path)
    assert pic.channels == EXPECTED_CHANNELS[mode]
    assert pic.pixels.dtype == np.float32
    assert pic.pixels.shape == (HEIGHT, WIDTH, len(pic.channels))
    pillow_mode = {"1": "L", "P": "RGB", "P+transparency": "RGBA", "CMYK": "RGB"}.get(mode)
    expected = _pillow(path, pillow_mode)
    if expected.ndim == 2:
        expected = expected[:, :, None]
    np.testing.assert_array_equal(pic.pixels, expected)


def test_bilevel_is_0_or_255(tmp_path):
    pic = read_image(make_image(tmp_path / "b.png", "1"))
    assert set(np.unique(pic.pixels)) == {0.0, 255.0}
    assert (pic.white, pic.depth) == (255.0, 8)


def test_palette_transparency_becomes_alpha(tmp_path):
    path = make_image(tmp_path / "p.png", "P+transparency")
    with Image.open(path) as im:
        index = np.asarray(im)
    pic = read_image(path)
    assert pic.has_alpha and pic.colour_channels == 3
    np.testing.assert_array_equal(pic.pixels[:, :, 3] == 0, index == 0)


@pytest.mark.parametrize("mode", ["L", "RGB"])
def test_a_transparent_colour_becomes_alpha(tmp_path, mode):
    # A grey or RGB PNG's tRNS chunk: the pixels of that one colour are transparent.
    levels = np.arange(48, dtype=np.uint8).reshape(6, 8) * 5
    image = Image.fromarray(levels).convert(mode)
    image.save(tmp_path / "keyed.png", transparency=image.getpixel((1, 0)))
    pic = read_image(tmp_path / "keyed.png")
    assert pic.channels == (("L", "A") if mode == "L" else ("R", "G", "B", "A"))
    np.testing.assert_array_equal(pic.pixels[..., -1] == 0, levels == 5)
    np.testing.assert_array_equal(pic.pixels, _pillow(tmp_path / "keyed.png", mode + "A"))


def test_sixteen_bit_keeps_its_scale(tmp_path):
    path = make_image(tmp_path / "deep.png", "I;16")
    pic = read_image(path)
    assert (pic.white, pic.depth) == (65535.0, 16)
    assert pic.pixels.max() > 255


def test_int32_and_float_scales(tmp_path):
    pic = read_image(make_image(tmp_path / "i.tiff", "I"))
    assert pic.white == pic.pixels.max() > 65535 and pic.depth == 16
    pic = read_image(make_image(tmp_path / "f.tiff", "F"))
    assert pic.white == 1.0 and pic.pixels.max() <= 1.0


def test_exif_orientation_6_is_applied(tmp_path):
    make_exif_rotated_jpeg(tmp_path / "rot.jpg", orientation=6)
    pic = read_image(tmp_path / "rot.jpg")
    # Stored 40 wide x 30 high, white block top-left; shown rotated 90 degrees clockwise.
    assert pic.pixels.shape == (WIDTH, HEIGHT, 3)
    assert pic.pixels[:10, -10:].mean() > 240
    assert pic.pixels[:10, :10].mean() < 40
    with Image.open(tmp_path / "rot.jpg") as im:
        upright = np.asarray(ImageOps.exif_transpose(im)).astype(np.float32)
    np.testing.assert_array_equal(pic.pixels, upright)


def test_gif_first_frame_with_a_note(tmp_path):
    pic = read_image(make_gif(tmp_path / "anim.gif", frames=3))
    assert np.all(pic.pixels == 60)
    assert pic.notes == ("used the first of 3 frames",)


def test_multipage_tiff_first_page(tmp_path):
    path = make_multipage_tiff(tmp_path / "pages.tiff", pages=2)
    pic = read_image(path)
    with Image.open(path) as im:
        first = np.asarray(im.convert("RGB")).astype(np.float32)
    np.testing.assert_array_equal(pic.pixels, first)
    assert pic.notes == ("used the first of 2 frames",)


def test_header_is_checked_before_decoding(tmp_path):
    path = make_bomb_png(tmp_path / "bomb.png")
    with pytest.raises(ImageError, match=r"100000x100000 = 10,000,000,000 pixels, over the limit"):
        read_image(path)
    # The limit can be raised; the header is still read lazily.
    with open_image(path, max_pixels=0) as source:
        assert source.size == (100_000, 100_000)


def test_max_pixels_small_limit(tmp_path):
    path = make_image(tmp_path / "a.png", "RGB")
    with pytest.raises(ImageError, match="over the limit of 100"):
        read_image(path, max_pixels=100)
    assert read_image(path, max_pixels=WIDTH * HEIGHT).pixels.shape[:2] == (HEIGHT, WIDTH)


def test_pillow_limit_is_off_and_never_set_per_file(tmp_path):
    """Pillow's limit is one for the process: convcli switches it off once and checks its own."""
    read_image(make_image(tmp_path / "a.png"), max_pixels=5000)
    assert Image.MAX_IMAGE_PIXELS is None
    with pytest.raises(PixelLimitError):
        read_image(make_bomb_png(tmp_path / "bomb.png"))
    with open_image(make_image(tmp_path / "b.png"), max_pixels=WIDTH * HEIGHT) as source:
        assert Image.MAX_IMAGE_PIXELS is None
        source.read()
    assert Image.MAX_IMAGE_PIXELS is None


def test_pillow_decompression_bomb_warning_becomes_image_error():
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # as outside pytest: the handler must not rely on it
        with pytest.raises(ImageError, match="decompression-bomb"):
            with images._pillow_errors():
                raise Image.DecompressionBombWarning("Image size (9 pixels) exceeds limit")


def test_corrupt_and_non_image_files(tmp_path):
    with pytest.raises(ImageError, match="truncated"):
        read_image(make_truncated_png(tmp_path / "half.png"))
    (tmp_path / "notes.png").write_text("not a picture")
    with pytest.raises(ImageError, match="not an image file"):
        read_image(tmp_path / "notes.png")
    with pytest.raises(FileNotFoundError):
        read_image(tmp_path / "missing.png")


@pytest.mark.parametrize("plain", [False, True], ids=["P6", "P3"])
@pytest.mark.parametrize("maxval, bits", [(4095, 12), (65535, 16), (255, None)])
def test_a_wide_colour_ppm_read_at_8_bits_says_so(tmp_path, maxval, bits, plain):
    """Pillow reads a PPM's colour samples at 8 bits whatever its maxval: on the right scale
    (as ImageMagick does), with a note where the file holds more (a plain P3 file's too)."""
    samples = np.random.default_rng(7).integers(0, maxval + 1, (5, 7, 3))
    dtype = ">u2" if maxval > 255 else np.uint8
    data = samples.astype(dtype).tobytes()
    if plain:
        data = " ".join(map(str, samples.ravel())).encode() + b"\n"
    (tmp_path / "c.ppm").write_bytes(b"P%d\n7 5\n%d\n" % (3 if plain else 6, maxval) + data)
    pic = read_image(tmp_path / "c.ppm")
    assert (pic.white, pic.depth) == (255.0, 8)
    assert np.abs(pic.pixels - samples * 255 / maxval).max() <= 0.5 + 1e-9
    said = (f"{bits}-bit colour read as 8-bit (Pillow reads colour at 8 bits)",) if bits else ()
    assert pic.notes == said


def test_a_bmp_of_16_bits_a_pixel_is_not_said_to_lose_depth(tmp_path):
    """5, 6 and 5 bits of red, green and blue (BI_BITFIELDS): nothing read at 8 bits is lost."""
    width, height = 6, 3
    pixels = np.random.default_rng(3).integers(0, 65536, (height, width)).astype("<u2")
    rows = pixels[::-1].tobytes()  # bottom-up; 12 bytes a row, a multiple of 4
    header = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 16, 3, len(rows), 2835, 2835, 0, 0)
    masks = struct.pack("<III", 0xF800, 0x07E0, 0x001F)
    offset = 14 + len(header) + len(masks)
    (tmp_path / "565.bmp").write_bytes(
        b"BM" + struct.pack("<IHHI", offset + len(rows), 0, 0, offset) + header + masks + rows
    )
    pic = read_image(tmp_path / "565.bmp")
    assert (pic.channels, pic.depth, pic.notes) == (("R", "G", "B"), 8, ())
    red = (pixels >> 11) * 255 / 31
    assert np.abs(pic.pixels[:, :, 0] - red).max() <= 1


def test_a_corrupt_header_of_a_known_format_is_said_as_such(tmp_path):
    """Pillow cannot identify a PNG whose header checksum is wrong: its PNG reader's own
    words are said, not "not an image file"."""
    data = bytearray(make_image(tmp_path / "ok.png", "L").read_bytes())
    data[29] ^= 0xFF  # the IHDR chunk's CRC
    (tmp_path / "crc.png").write_bytes(data)
    with pytest.raises(ImageError) as caught:
        read_image(tmp_path / "crc.png")
    assert str(caught.value) == (
        "cannot decode the image: a PNG file whose header Pillow cannot read "
        "(broken PNG file (bad header checksum in b'IHDR'))"
    )


@pytest.mark.parametrize("make, ext", [(make_gif, "gif"), (make_multipage_tiff, "tiff")])
def test_every_truncation_of_a_multi_frame_file_is_an_image_error(tmp_path, make, ext):
    """Counting the frames parses every frame header: a truncated one is a decode error."""
    data = make(tmp_path / f"full.{ext}").read_bytes()
    path = tmp_path / f"cut.{ext}"
    failures = set()
    for n in range(16, len(data), max(1, len(data) // 200)):
        path.write_bytes(data[:n])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Pillow warns about some corrupt TIFF tags
            try:
                read_image(path)
            except ImageError as exc:
                failures.add(str(exc).split(":")[0])
    assert failures <= {
        "cannot decode the image",
        "not an image file (Pillow cannot identify its format)",
    }
    assert "cannot decode the image" in failures


def test_truncated_gif_is_one_line_on_the_command_line(tmp_path):
    data = make_gif(tmp_path / "full.gif").read_bytes()
    cut = tmp_path / "cut.gif"
    cut.write_bytes(data[:100])  # inside the second frame's header
    result = run("pool", cut, "-o", tmp_path / "out")
    assert result.exit_code == 1, result.output
    assert "internal error" not in result.output
    assert f"{cut}: cannot decode the image" in result.stderr


@pytest.mark.parametrize(
    "name, expected",
    [
        ("a.png", True),
        ("A.JPG", True),
        ("b.Jpeg", True),
        ("c.tif", True),
        ("d.webp", True),
        ("e.bmp", True),
        ("f.gif", True),
        ("notes.txt", False),
        ("data.npy", False),
        ("noext", False),
        ("stub.h5", False),
    ],
)
def test_is_image_name(name, expected):
    assert images.is_image_name(name) is expected


def test_usual_image_names_load_no_other_pillow_plugin(monkeypatch):
    """JPEG, PNG, GIF, BMP, PPM names and names without an extension are told without
    ``Image.init`` (every plugin); the answer is the one the full table gives."""
    from PIL import Image

    inits = []
    monkeypatch.setattr(Image, "init", lambda: inits.append(1))
    monkeypatch.setattr(images, "image_extensions", lambda: inits.append(1) or frozenset())
    names = [
        "a.jpg",
        "B.JPEG",
        "c.jfif",
        "d.png",
        "e.apng",
        "f.gif",
        "g.bmp",
        "h.ppm",
        "i.pgm",
        "out",
        "folder/out",
    ]
    answers = [images.is_image_name(name) for name in names]
    assert inits == [] and answers == [True] * 9 + [False] * 2
    monkeypatch.undo()
    assert [
        name for name in names if Path(name).suffix.lower() in images.image_extensions()
    ] == names[:9]


# --- writing -------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt, ext", [("png", "png"), ("tiff", "tiff")])
def test_save_levels_lossless_round_trip_8_and_16_bit(tmp_path, fmt, ext):
    g = np.random.default_rng(2)
    for dtype, top in ((np.uint8, 255), (np.uint16, 65535)):
        levels = g.integers(0, top + 1, size=(7, 9)).astype(dtype)
        path = tmp_path / f"{dtype.__name__}.{ext}"
        assert save_levels(path, levels, fmt=fmt)
        with Image.open(path) as im:
            assert im.mode == ("L" if dtype == np.uint8 else "I;16")
            np.testing.assert_array_equal(np.asarray(im), levels)


def test_save_levels_colour_and_jpeg(tmp_path):
    rgba = np.random.default_rng(3).integers(0, 256, size=(8, 8, 4), dtype=np.uint8)
    save_levels(tmp_path / "c.png", rgba, fmt="png")
    with Image.open(tmp_path / "c.png") as im:
        assert im.mode == "RGBA"
    save_levels(tmp_path / "c.jpg", rgba, fmt="jpg")
    with Image.open(tmp_path / "c.jpg") as im:
        assert im.mode == "RGB"  # JPEG has no alpha
    deep = np.full((4, 4), 65535, np.uint16)
    save_levels(tmp_path / "d.jpg", deep, fmt="jpg")
    with Image.open(tmp_path / "d.jpg") as im:
        assert im.mode == "L" and np.asarray(im).min() >= 254


def test_writers_keep_existing_files_unless_overwrite(tmp_path):
    path = tmp_path / "x.png"
    assert save_levels(path, np.zeros((2, 2), np.uint8), fmt="png")
    assert not save_levels(path, np.full((2, 2), 255, np.uint8), fmt="png")
    with Image.open(path) as im:
        assert np.asarray(im).max() == 0
    assert save_levels(path, np.full((2, 2), 255, np.uint8), fmt="png", overwrite=True)
    arr = np.arange(6, dtype=np.float64).reshape(1, 2, 3)
    assert save_npy(tmp_path / "r.npy", arr)
    back = np.load(tmp_path / "r.npy")
    assert back.dtype == np.float32 and np.array_equal(back, arr)
    assert not save_npy(tmp_path / "r.npy", arr + 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.npy", "x.png"]  # no temp files


@pytest.mark.parametrize("fmt", [f for f in FORMAT_NAMES if f not in ("npy", "zarr")])
def test_written_images_carry_the_marker_and_only_marked_files_are_replaced(tmp_path, fmt):
    arr = np.arange(12 * 10, dtype=np.uint8).reshape(12, 10)
    path = tmp_path / f"a.{fmt}"
    assert save_levels(path, arr, fmt=fmt)
    assert image_files.written_by_convcli(path)
    if fmt != "jpg":  # the marker is metadata: the pixels are the levels given
        assert np.array_equal(np.asarray(Image.open(path)), arr)
    assert save_levels(path, arr[::-1], fmt=fmt, overwrite=True)  # convcli's own: replaced
    foreign = tmp_path / f"foreign.{fmt}"
    Image.fromarray(arr).save(foreign)
    before = foreign.read_bytes()
    assert not image_files.written_by_convcli(foreign)
    with pytest.raises(FileExistsError, match="not written by convcli and is kept"):
        save_levels(foreign, arr, fmt=fmt, overwrite=True)
    assert foreign.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_npy_is_replaced_only_over_a_valid_npy(tmp_path):
    path = tmp_path / "a.npy"
    assert save_npy(path, np.ones((2, 3)))
    assert save_npy(path, np.zeros((2, 3)), overwrite=True)
    assert np.array_equal(np.load(path), np.zeros((2, 3), np.float32))
    other = tmp_path / "other.npy"
    other.write_bytes(b"not an array")
    with pytest.raises(FileExistsError, match="not written by convcli"):
        save_npy(other, np.zeros(2), overwrite=True)
    assert other.read_bytes() == b"not an array"


# --- the fast JPEG path (simplejpeg) and its fallback, Pillow ---------------------------------


def _jpeg_variants(folder):
    """JPEGs of every kind the fast path must read as Pillow does, or leave to Pillow."""
    g = np.random.default_rng(11)
    rgb = g.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    paths = []
    for name, options in [
        ("plain", {}),
        ("progressive", {"progressive": True}),
        ("subsampled", {"subsampling": 2}),
        ("full", {"subsampling": 0}),
    ]:
        paths.append(folder / f"{name}.jpg")
        Image.fromarray(rgb).save(paths[-1], quality=90, **options)
    paths.append(folder / "grey.jpg")
    Image.fromarray(rgb[:, :, 0]).save(paths[-1], quality=90)
    paths.append(folder / "cmyk.jpg")
    Image.fromarray(rgb).convert("CMYK").save(paths[-1], quality=90)
    paths.append(folder / "icc.jpg")
    Image.fromarray(rgb).save(paths[-1], quality=90, icc_profile=b"\0" * 128)
    for orientation in range(1, 9):
        paths.append(folder / f"orientation{orientation}.jpg")
        make_exif_rotated_jpeg(paths[-1], orientation=orientation)
    return paths


def _as_pillow_reads(path) -> np.ndarray:
    with Image.open(path) as im:
        upright = ImageOps.exif_transpose(im)
        mode = "L" if upright.mode == "L" else "RGB"
        arr = np.asarray(upright.convert(mode)).astype(np.float32)
    return arr[:, :, None] if arr.ndim == 2 else arr


CMYK_NOTE = (
    "CMYK read as RGB by Pillow's formula, with no colour profile of its own that LittleCMS can "
    "use: colours approximate"
)


@pytest.mark.parametrize("fast", [True, False])
def test_jpeg_reads_as_pillow_with_and_without_the_fast_decoder(tmp_path, monkeypatch, fast):
    decoder = pytest.importorskip("simplejpeg") if fast else None
    calls = []
    if fast:
        decode = decoder.decode_jpeg
        monkeypatch.setattr(
            decoder, "decode_jpeg", lambda *a, **k: calls.append(1) or decode(*a, **k)
        )
    else:
        monkeypatch.setenv("CONVCLI_FAST_CODECS", "0")
    paths = _jpeg_variants(tmp_path)
    for path in paths:
        pic = read_image(path)
        expected = _as_pillow_reads(path)
        # Upright 8-bit samples stay integers until the float32 pixels are asked for.
        upright = not fast or "orientation" not in path.stem or path.stem == "orientation1"
        assert pic.samples.dtype == (np.uint8 if upright else np.float32), path.name
        assert pic.shape == expected.shape
        np.testing.assert_array_equal(pic.samples, expected, err_msg=path.name)
        assert pic.pixels.dtype == np.float32
        np.testing.assert_array_equal(pic.pixels, expected, err_msg=path.name)
        # A CMYK JPEG without a colour profile is read by Pillow's formula, and says so.
        said = (CMYK_NOTE,) if path.stem == "cmyk" else ()
        assert (pic.white, pic.depth, pic.notes) == (255.0, 8, said)
    # Every plain RGB or grey JPEG went through the fast decoder (CMYK did not).
    assert len(calls) == (len(paths) - 1 if fast else 0)


def test_jpeg_the_fast_decoder_refuses_goes_to_pillow(tmp_path, monkeypatch):
    decoder = pytest.importorskip("simplejpeg")

    def refuse(*args, **kwargs):
        raise ValueError("libjpeg-turbo warning")

    monkeypatch.setattr(decoder, "decode_jpeg", refuse)
    path = tmp_path / "r.jpg"
    make_exif_rotated_jpeg(path, orientation=6)
    np.testing.assert_array_equal(read_image(path).pixels, _as_pillow_reads(path))
    data = path.read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageError, match="cannot decode the image"):
        read_image(tmp_path / "cut.jpg")


@pytest.mark.parametrize("shape", [(24, 32), (24, 32, 3)])
def test_jpeg_is_written_at_quality_95(tmp_path, shape):
    levels = np.random.default_rng(30).integers(0, 256, size=shape, dtype=np.uint8)
    save_levels(tmp_path / "ours.jpg", levels, fmt="jpg")
    Image.fromarray(levels).save(tmp_path / "q95.jpg", quality=95)
    Image.fromarray(levels).save(tmp_path / "q94.jpg", quality=94)
    with (
        Image.open(tmp_path / "ours.jpg") as ours,
        Image.open(tmp_path / "q95.jpg") as q95,
        Image.open(tmp_path / "q94.jpg") as q94,
    ):
        assert ours.quantization == q95.quantization != q94.quantization
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(q95))


def test_jpeg_reads_as_pillow_where_simplejpeg_cannot_be_imported(tmp_path, monkeypatch):
    """simplejpeg is a dependency, but a platform without its wheel goes without: Pillow reads."""
    monkeypatch.setitem(sys.modules, "simplejpeg", None)  # import simplejpeg raises ImportError
    for path in _jpeg_variants(tmp_path)[:5]:  # plain, progressive, subsampled, full, grey
        pic = read_image(path)
        np.testing.assert_array_equal(pic.pixels, _as_pillow_reads(path), err_msg=path.name)
        assert (pic.white, pic.depth, pic.notes) == (255.0, 8, ())


@pytest.mark.parametrize("mode", ["L", "LA", "RGB", "RGBA"])
def test_every_tiff_written_is_deflated_with_the_predictor(tmp_path, mode):
    # Small --format tiff outputs were written uncompressed.
    import tifffile

    source = make_image(tmp_path / "a.png", mode)
    for fmt in ("tiff", "png"):
        result = run("pool", source, "-o", tmp_path / fmt, "--format", fmt, "-q")
        assert result.exit_code == 0, result.output
    written = sorted((tmp_path / "tiff").glob("*.tiff"))
    assert written
    for path in written:
        with tifffile.TiffFile(path) as tif:
            page = tif.pages[0]
            assert page.compression == tifffile.COMPRESSION.ADOBE_DEFLATE
            assert page.predictor == tifffile.PREDICTOR.HORIZONTAL
            assert page.tags["Software"].value == "convcli"
            values = page.asarray()
        with Image.open(tmp_path / "png" / path.with_suffix(".png").name) as png:
            np.testing.assert_array_equal(values, np.asarray(png))


CMYK_PROFILE = Path("/usr/share/color/icc/ghostscript/default_cmyk.icc")


def test_a_cmyk_jpeg_is_read_through_its_own_colour_profile(tmp_path):
    """A print-ready CMYK JPEG (SWOP profile) is read into sRGB through its profile by
    LittleCMS, as ImageMagick and libvips convert it, not by Pillow's formula (255 - C - K
    and the like), which put a pink of 237, 24, 126 at 255, 0, 218."""
    if not CMYK_PROFILE.exists():
        pytest.skip("no CMYK colour profile here (Ghostscript's, /usr/share/color/icc)")
    from PIL import ImageCms

    y, x = np.mgrid[0:32, 0:48]
    rgb = np.stack([x * 255 // 47, y * 255 // 31, np.full_like(x, 128)], -1).astype(np.uint8)
    swop = ImageCms.ImageCmsProfile(str(CMYK_PROFILE))
    cmyk = ImageCms.profileToProfile(
        Image.fromarray(rgb), ImageCms.createProfile("sRGB"), swop, outputMode="CMYK"
    )
    cmyk.save(tmp_path / "print.jpg", quality=95, icc_profile=swop.tobytes())
    pic = read_image(tmp_path / "print.jpg")
    back = ImageCms.profileToProfile(
        Image.open(tmp_path / "print.jpg"), swop, ImageCms.createProfile("sRGB"), outputMode="RGB"
    )
    assert pic.notes == ()
    np.testing.assert_array_equal(pic.pixels, np.asarray(back).astype(np.float32))
    # Near the picture it was made from (the SWOP gamut and JPEG aside), unlike the formula.
    assert np.abs(pic.pixels - rgb).mean() < 12
    assert np.abs(np.asarray(Image.open(tmp_path / "print.jpg").convert("RGB")) - rgb).mean() > 20


@pytest.mark.parametrize("height", [5, -5], ids=["bottom-up", "top-down"])
def test_an_8_bit_bmp_of_a_black_and_white_palette_is_read_a_byte_a_pixel(tmp_path, height):
    """Pillow writes a black and white P image as an 8-bit BMP of two colours, and reads
    that palette as a 1-bit image: its own file came back garbled (mostly black)."""
    white = np.random.default_rng(3).integers(0, 2, (5, 7)).astype(bool)
    im = Image.fromarray(white.astype(np.uint8), "P")
    im.putpalette([0, 0, 0, 255, 255, 255])
    path = tmp_path / "bw.bmp"
    im.save(path)
    if height < 0:  # the rows stored from the top: a negative height
        data = bytearray(path.read_bytes())
        offset = int.from_bytes(data[10:14], "little")
        rows = [data[offset + r * 8 : offset + (r + 1) * 8] for r in range(5)]
        data[offset:] = b"".join(reversed(rows))
        data[22:26] = (-5).to_bytes(4, "little", signed=True)
        path.write_bytes(bytes(data))
    picture = read_image(path)
    assert picture.channels == ("L",)
    np.testing.assert_array_equal(picture.pixels[..., 0], white * 255.0)


def test_a_16_bit_grey_sgi_file_read_at_8_bits_says_so(tmp_path):
    levels = np.random.default_rng(4).integers(0, 65536, (3, 5)).astype(">u2")
    header = struct.pack(">hbbHHHHii", 474, 0, 2, 2, 5, 3, 1, 0, 65535).ljust(512, b"\0")
    (tmp_path / "g.sgi").write_bytes(header + levels[::-1].tobytes())  # rows from the bottom
    picture = read_image(tmp_path / "g.sgi")
    assert picture.notes == ("16-bit grey read as 8-bit (Pillow reads grey at 8 bits)",)
    assert np.abs(picture.pixels[..., 0] - levels / 257).max() <= 1  # its high byte


def test_a_tiffs_extra_sample_beside_its_alpha_is_said_not_read(tmp_path):
    """RGB, alpha and a sample of no stated meaning: Pillow reads RGBA, the last left out."""
    samples = np.random.default_rng(5).integers(0, 256, (4, 5, 5), dtype=np.uint8)
    path = tmp_path / "x.tif"
    tifffile.imwrite(
        path,
        samples,
        photometric="rgb",
        planarconfig="contig",
        extrasamples=["unassalpha", "unspecified"],
    )
    picture = read_image(path)
    assert picture.channels == ("R", "G", "B", "A")
    assert picture.notes == ("its 1 extra sample(s) of no stated meaning not read",)


@pytest.mark.parametrize("attribute_bits", [0, 1])
def test_a_16_bit_tgas_top_bit_is_read_as_its_descriptor_says(tmp_path, attribute_bits):
    """Pillow read the top bit as alpha in every file, 1 transparent: pixels whose bit is
    set came out transparent. No attribute bit: RGB; one: alpha, 1 opaque."""
    red, green, blue, clear = 0x7C00 | 0x8000, 0x03E0 | 0x8000, 0x001F | 0x8000, 0x7FFF
    pixels = np.array([[red, green], [blue, clear]], "<u2")
    header = struct.pack("<BBBHHBHHHHBB", 0, 0, 2, 0, 0, 0, 0, 0, 2, 2, 16, 0x20 | attribute_bits)
    (tmp_path / "t.tga").write_bytes(header + pixels.tobytes())  # rows from the top
    picture = read_image(tmp_path / "t.tga")
    colours = [[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 255]]
    if attribute_bits:
        assert picture.channels == ("R", "G", "B", "A")
        expected = [c + [a] for c, a in zip(colours, [255, 255, 255, 0], strict=True)]
    else:
        assert picture.channels == ("R", "G", "B")
        expected = colours
    np.testing.assert_array_equal(picture.pixels.reshape(4, -1), expected)


def test_a_tgas_colour_map_of_32_bit_entries_gives_alpha(tmp_path):
    """Pillow reads the map's alpha into its palette; the picture was read as RGB without it."""
    entries = [(255, 0, 0, 255), (0, 255, 0, 0), (0, 0, 255, 128), (9, 9, 9, 255)]
    colour_map = b"".join(bytes([b, g, r, a]) for r, g, b, a in entries)  # BGRA
    header = struct.pack("<BBBHHBHHHHBB", 0, 1, 1, 0, 4, 32, 0, 0, 2, 2, 8, 0x20 | 8)
    (tmp_path / "m.tga").write_bytes(header + colour_map + bytes([0, 1, 2, 3]))
    picture = read_image(tmp_path / "m.tga")
    assert picture.channels == ("R", "G", "B", "A")
    np.testing.assert_array_equal(picture.pixels.reshape(4, 4), entries)


def test_a_tgas_colour_map_of_16_bit_entries_is_opaque_colour(tmp_path):
    """Pillow reads the entries' top bit as alpha, 1 transparent: set, as writers set it, it
    made the picture wholly transparent (libvips and ImageMagick read RGB)."""
    colours = [(0x7C00, (255, 0, 0)), (0x03E0, (0, 255, 0)), (0x001F, (0, 0, 255))]
    colour_map = b"".join(struct.pack("<H", bits | 0x8000) for bits, _ in colours)
    header = struct.pack("<BBBHHBHHHHBB", 0, 1, 1, 0, 3, 16, 0, 0, 3, 1, 8, 0x20)
    (tmp_path / "m.tga").write_bytes(header + colour_map + bytes([0, 1, 2]))
    picture = read_image(tmp_path / "m.tga")
    assert picture.channels == ("R", "G", "B")
    np.testing.assert_array_equal(picture.pixels.reshape(3, 3), [c for _, c in colours])
