"""The pixel decoders behind :meth:`convcli.io.images.ImageSource.read`.

simplejpeg for plain JPEGs, imagecodecs for 16-bit colour PNG and TIFF (the
``deep`` extra), Pillow's modes to arrays, the EXIF orientation applied, and
an APNG's frames counted from its chunks.
"""

from __future__ import annotations

import functools
import importlib
import io
import os
import re
import struct
import warnings

import numpy as np
from PIL import Image

from .avif import avif_bits, avif_samples
from .bands import unassociated
from .formats import file_head
from .geotags import pillow_geo
from .heif import deep_heif, heif_notes, is_deep_heif
from .png import FAST_CODECS_VARIABLE, fast_codecs_allowed

SIXTEEN_BIT_MODES = {"I;16", "I;16L", "I;16B", "I;16N"}
"""Pillow's modes of 16-bit grey."""

ORIENTATION = 0x0112  # the EXIF tag
EXTRA_SAMPLES = 338  # the TIFF tag; its value 1: associated (premultiplied) alpha
ASSOCIATED_ALPHA = 1


def apng_frame_controls(path: str) -> int:
    """The frame control chunks (fcTL) of an APNG: the frames it holds, whatever acTL says.

    Only the chunks' headers are read (a seek over each chunk's data); the
    walk stops at IEND, at the end of the file, or at a chunk that runs past it.
    """
    count = 0
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        position = 8  # past the signature
        while position + 12 <= size:
            fh.seek(position)
            length, kind = struct.unpack(">I4s", fh.read(8))
            if kind == b"IEND":
                break
            count += kind == b"fcTL"
            position += 12 + length
    return count


def fast_jpeg(im: Image.Image, path: str) -> np.ndarray | None:
    """The pixels of a plain RGB or grey JPEG decoded by simplejpeg, or None for Pillow.

    simplejpeg (a dependency, where it has a wheel) calls libjpeg-turbo with the settings
    Pillow uses (accurate DCT, smooth upsampling), so the pixels are the same
    (tests compare them), in 10 ms instead of Pillow's 16 for a 2400x1800
    photo. Anything else, and any file libjpeg-turbo warns about (``strict``),
    goes to Pillow, which then reads and reports it as it always has.
    """
    if im.format != "JPEG" or im.mode not in ("RGB", "L"):
        return None
    colorspace = "RGB" if im.mode == "RGB" else "GRAY"
    pixels = decoded_by(
        "simplejpeg",
        path,
        lambda simplejpeg, data: simplejpeg.decode_jpeg(data, colorspace=colorspace, strict=True),
    )
    width, height = im.size
    return pixels if pixels is not None and pixels.shape[:2] == (height, width) else None


DEEP_CHANNELS = (("L", "A"), ("R", "G", "B"), ("R", "G", "B", "A"))
"""The channels whose 16-bit samples Pillow reads at 8 bits, and imagecodecs at 16."""


def deep_colour(
    im: Image.Image, path: str, channels: tuple[str, ...], bits: int
) -> tuple[np.ndarray | None, float]:
    """The samples wider than 8 bits that Pillow would narrow, as (H, W, C), or None; and
    their white: 65535, or an AVIF's or HEIF file's own largest level (1023 for 10 bits).
    `bits` is the samples' bits (:func:`narrowed_bits`).

    imagecodecs (the ``deep`` extra) reads 16-bit grey + alpha, RGB and RGBA PNG and TIFF
    files with libpng and libtiff, JPEG 2000 and AVIF at full depth; pillow-heif a HEIF
    file's. The first page of a TIFF is the frame Pillow would use. Anything that does
    not come out as the header says (the channels, the size) is left to Pillow:
    :func:`narrow_note` says why.
    """
    if im.format not in ("AVIF", "HEIF"):
        return _sixteen_bits(im, path, channels, bits), 65535.0
    white = float(2**bits - 1)
    if im.format == "HEIF":
        return deep_heif(im, path, channels), white
    if getattr(im, "n_frames", 1) > 1:  # imagecodecs' first image of an animation: a crash
        return None, white
    pixels = decoded_by("imagecodecs", path, _first_avif_image)
    return avif_samples(pixels, im.size, channels), white


def _first_avif_image(codecs, data: bytes) -> np.ndarray:
    """The first image of the AVIF file `data`, decoded by imagecodecs (`codecs`)."""
    return codecs.avif_decode(data, index=0)


def _sixteen_bits(
    im: Image.Image, path: str, channels: tuple[str, ...], bits: int
) -> np.ndarray | None:
    """:func:`deep_colour`'s samples of a PNG, TIFF or JPEG 2000 file (of `bits`), or None."""
    if im.format not in _DEEP_DECODERS or channels not in DEEP_CHANNELS:
        return None
    name = _DEEP_DECODERS[im.format]
    pixels = decoded_by("imagecodecs", path, lambda codecs, data: getattr(codecs, name)(data))
    if im.format == "JPEG2000":
        return _jpeg2000_samples(pixels, bits, (im.size[1], im.size[0], len(channels)))
    width, height = im.size
    if (
        pixels is None
        or pixels.dtype != np.uint16
        or pixels.shape != (height, width, len(channels))
    ):
        return None
    if im.format == "TIFF" and tuple(im.tag_v2.get(EXTRA_SAMPLES, ())) == (ASSOCIATED_ALPHA,):
        return unassociated(pixels, 65535)
    return pixels


_DEEP_DECODERS = {"PNG": "png_decode", "TIFF": "tiff_decode", "JPEG2000": "jpeg2k_decode"}


def _jpeg2000_samples(pixels, bits: int, shape: tuple[int, int, int]) -> np.ndarray:
    """A JPEG 2000 file's colour samples of `bits` (more than 8), as imagecodecs decodes them,
    on 16 bits (a 12-bit sample shifted up, as Pillow reads 12-bit grey); where imagecodecs
    cannot, ImageError: Pillow wraps the brightest levels to 0 (65408 and up: black)."""
    if pixels is None or pixels.dtype != np.uint16 or pixels.shape != shape:
        from ..errors import ImageError

        why = deep_codecs_missing() or "imagecodecs did not read it"
        raise ImageError(
            f"cannot decode the image: {bits}-bit JPEG 2000 colour is read only with "
            f"imagecodecs, where Pillow turns its brightest levels black ({why})"
        )
    return pixels << np.uint16(16 - bits) if bits < 16 else pixels


def jpeg2000_bits(path: str) -> int | None:
    """The most bits a sample of the JPEG 2000 file `path` has (its JP2 header's, or its
    codestream's SIZ marker's), or None where neither is found in its first 4 KB."""
    head = file_head(path, 4096)
    at = head.find(b"ihdr")
    if at >= 0 and len(head) >= at + 15 and head[at + 14] != 0xFF:  # 0xFF: per component
        return (head[at + 14] & 0x7F) + 1
    at = head.find(b"\xff\x51")  # SIZ: 38 bytes, then 3 a component
    if at < 0 or len(head) < at + 40:
        return None
    count = int.from_bytes(head[at + 38 : at + 40], "big")
    sizes = head[at + 40 : at + 40 + 3 * count : 3]
    return max(((b & 0x7F) + 1 for b in sizes), default=None)


def frame_loss_note(im: Image.Image, own: tuple[str, ...], channels: tuple[str, ...]) -> tuple:
    """The note of a frame whose own channels (`own`) hold what a stack's, the first frame's
    (`channels`), cannot: a transparency it shows, or colour, read as grey; none else."""
    if "A" in own and "A" not in channels and im.convert("RGBA").getextrema()[3][0] < 255:
        return transparency_lost_note(channels)
    rgb = np.asarray(im.convert("RGB")) if "R" in own and "R" not in channels else None
    if rgb is not None and ((rgb[..., 0] != rgb[..., 1]) | (rgb[..., 1] != rgb[..., 2])).any():
        return (f"a frame's colours read as grey: {_first_frames(channels)}",)  # not grey ones
    return ()


def transparency_lost_note(channels: tuple[str, ...]) -> tuple[str]:
    """The note of a frame whose transparency the stack's `channels` cannot hold."""
    return (f"a frame's transparency not kept: {_first_frames(channels)}",)


def _first_frames(channels: tuple[str, ...]) -> str:
    return f"every frame is read with the first frame's channels ({' '.join(channels)})"


def cmyk_note(im: Image.Image) -> tuple[str, ...]:
    """The note of a CMYK image read as RGB: through its own colour profile into sRGB (as
    :func:`to_array` reads it, and as ImageMagick and libvips convert it), or, without one
    that LittleCMS can use, by Pillow's formula, whose colours are only near."""
    if im.mode != "CMYK" or _cmyk_to_srgb(im.info.get("icc_profile")) is not None:
        return ()
    return (
        "CMYK read as RGB by Pillow's formula, with no colour profile of its own that LittleCMS "
        "can use: colours approximate",
    )


@functools.lru_cache(maxsize=4)
def _cmyk_to_srgb(profile: bytes | None):
    """LittleCMS's transform (Pillow's ImageCms) from the CMYK colour `profile` to sRGB, or
    None where there is no profile, or LittleCMS cannot read it or make the transform."""
    if not profile:
        return None
    from PIL import ImageCms

    try:
        source = ImageCms.ImageCmsProfile(io.BytesIO(profile))
        if source.profile.xcolor_space.strip() != "CMYK":
            return None
        # No cache of the last pixel in the transform: threads (Dask's) share it.
        srgb, flags = ImageCms.createProfile("sRGB"), ImageCms.Flags.NOCACHE
        return ImageCms.buildTransform(source, srgb, "CMYK", "RGB", flags=flags)
    except (OSError, ValueError, ImageCms.PyCMSError):
        return None


def deep_codecs_missing(*, allowed: bool = False) -> str | None:
    """Why imagecodecs cannot read 16-bit colour here, in a few words, or None where it can:
    it is not installed (the ``deep`` extra), or :data:`FAST_CODECS_VARIABLE` turns it off
    (unless `allowed`: tifffile's own use of it)."""
    if not (allowed or fast_codecs_allowed()):
        return f"{FAST_CODECS_VARIABLE}=0 turns imagecodecs off"
    try:
        import imagecodecs  # noqa: F401
    except ImportError:
        return "install convcli[deep] for 16"
    return None


def narrowed_by_pillow(im: Image.Image) -> tuple[str, ...]:
    """The notes of what Pillow leaves out of a file it reads: a PPM's or SGI file's colour
    (or an SGI file's grey) of samples wider than 8 bits, read at 8 bits (imagecodecs reads
    neither); a TIFF's extra samples beyond its alpha. Before load(), which forgets the
    file's layout."""
    if im.format == "HEIF":
        return heif_notes(im)
    if im.format == "TIFF":
        extras = im.tag_v2.get(EXTRA_SAMPLES, ())
        count = len(extras) if isinstance(extras, tuple) else 1
        unread = count - (im.mode[-1] in "Aa")  # "RGBA", "LA", "PA", "RGBa": one is alpha
        return (f"its {unread} extra sample(s) of no stated meaning not read",) * (unread > 0)
    sgi_grey = im.mode == "L" and im.format == "SGI"
    tile = im.tile[0] if im.tile and (im.mode == "RGB" or sgi_grey) else None
    if tile is None or im.format not in ("PPM", "SGI"):
        return ()
    args = tile.args if isinstance(tile.args, tuple) else ()
    maxval = args[1] if tile.codec_name in ("ppm", "ppm_plain") and len(args) > 1 else 255
    bits = 16 if tile.codec_name == "SGI16" else int(maxval).bit_length()
    what = "grey" if sgi_grey else "colour"
    return (f"{bits}-bit {what} read as 8-bit (Pillow reads {what} at 8 bits)",) * (bits > 8)


def narrow_note(channels: tuple[str, ...], why: str | None = None, bits: int = 16) -> str:
    """The note of a file of `bits`-bit samples of `channels` (colour, grey + alpha, or an
    AVIF's grey) read at 8 bits, saying why: `why`, else :func:`deep_codecs_missing`'s
    reason, else that imagecodecs, there and allowed, did not read the file.

    >>> narrow_note(("R", "G", "B"), "imagecodecs is off")
    '16-bit colour read as 8-bit (Pillow reads colour at 8 bits; imagecodecs is off)'
    """
    what = {("L",): "grey", ("L", "A"): "grey + alpha"}.get(channels, "colour")
    why = why or deep_codecs_missing() or "imagecodecs did not read this file"
    return f"{bits}-bit {what} read as 8-bit (Pillow reads {what} at 8 bits; {why})"


def deep_note(im: Image.Image, channels: tuple[str, ...], bits: int) -> str:
    """:func:`narrow_note` of the file `im` of `bits`-bit samples read at 8 bits, where
    :func:`deep_colour` gave nothing: an AVIF animation for its being one."""
    animation = im.format == "AVIF" and getattr(im, "n_frames", 1) > 1
    why = "imagecodecs reads no AVIF animations" if animation else None
    return narrow_note(channels, why, bits)


def decoded_by(module: str, path: str, decode) -> np.ndarray | None:
    """``decode(module, file bytes)``, or None where the module is missing, off or fails.

    A failure leaves the file to Pillow, which then reads it, or reports
    why it cannot, as it always has.
    """
    if not fast_codecs_allowed():
        return None
    try:
        library = importlib.import_module(module)
    except ImportError:
        return None
    try:
        with open(path, "rb") as fh:
            return decode(library, fh.read())
    except Exception:  # the library's own error types too: Pillow decides
        return None


def exif_upright(pixels: np.ndarray, orientation) -> np.ndarray:
    """`pixels` (H, W, ...) turned upright from the EXIF orientation, as Pillow's exif_transpose."""
    if orientation in (5, 6, 7, 8):  # the ones that swap width and height
        pixels = np.swapaxes(pixels, 0, 1)  # orientation 5 (transpose)
        orientation = {5: 1, 6: 2, 7: 3, 8: 4}[orientation]
    if orientation == 2:
        return pixels[:, ::-1]
    if orientation == 3:
        return pixels[::-1, ::-1]
    if orientation == 4:
        return pixels[::-1]
    return pixels


def _raw_modes(im: Image.Image) -> list[str]:
    """The raw modes of `im`'s tiles: how its file stores the samples ("LA;16B"), before load()."""
    # A tile's arguments are its raw mode (PNG), or a tuple that starts with it (TIFF).
    args = [tile[3] if len(tile) > 3 else None for tile in getattr(im, "tile", ())]
    raw_modes = [a[0] if isinstance(a, tuple) and a else a for a in args]
    return [r for r in raw_modes if isinstance(r, str)]


def narrowed_bits(im: Image.Image) -> int:
    """The bits of the file's samples where Pillow reads 8 of them: 16, or a JPEG 2000, AVIF
    or HEIF file's own (10, 12); 8 where Pillow reads every bit (16-bit grey too)."""
    if im.format == "HEIF":
        return im.info.get("bit_depth", 8) if is_deep_heif(im) else 8
    if im.mode in SIXTEEN_BIT_MODES or im.mode in ("I", "F"):
        return 8
    if im.format == "JPEG2000":  # grey + alpha too: Pillow gives it as LA
        return jpeg2000_bits(im.filename) or 8 if im.mode in ("LA", "RGB", "RGBA") else 8
    if im.format == "AVIF":
        return avif_bits(im.filename) or 8 if im.mode in ("L", "RGB", "RGBA") else 8
    bits = im.info.get("bits") or getattr(im, "bits", 8)
    return 16 if any(_SIXTEEN_BIT_SAMPLES.search(r) for r in _raw_modes(im)) or bits == 16 else 8


# 16 bits a sample, in either byte order ("RGB;16B"); not a BMP's 16 bits a pixel ("BGR;16")
_SIXTEEN_BIT_SAMPLES = re.compile(r";16[BLN]")


def is_deep_grey_alpha(im: Image.Image) -> bool:
    """Whether the file stores 16-bit grey + alpha, which Pillow reads as 8-bit RGBA (a PNG)."""
    return im.mode == "RGBA" and any(r.startswith("LA;16") for r in _raw_modes(im))


def channels_for(im: Image.Image) -> tuple[str, ...]:
    """A transparent level or colour (a PNG's tRNS) of a palette, grey or RGB image is alpha,
    at any depth (a 2- or 4-bit grey one put on Pillow's 0-255 first: :func:`grey_key`)."""
    mode, keyed = im.mode, "transparency" in im.info
    grey = mode in ("1", "L") or mode in SIXTEEN_BIT_MODES
    if mode in ("LA", "La") or (grey and keyed) or is_deep_grey_alpha(im):
        return ("L", "A")
    if grey or mode in ("I", "F"):
        return ("L",)
    if mode in ("RGBA", "RGBa", "PA") or (mode in ("P", "RGB") and keyed):
        return ("R", "G", "B", "A")
    return ("R", "G", "B")


def grey_key(im: Image.Image) -> None:
    """Put a 2- or 4-bit grey PNG's transparent level (tRNS) on the scale of the levels Pillow
    gives (0-255): Pillow gives it on the file's, where it marks no pixel. Before load()."""
    bits = {"L;2": 2, "L;4": 4}.get(next(iter(_raw_modes(im)), ""))
    key = im.info.get("transparency")
    if im.mode == "L" and bits and isinstance(key, int) and key < 2**bits:  # not put already
        im.info["transparency"] = key * (255 // (2**bits - 1))


def mend_pillow(im: Image.Image) -> None:
    """Put right, before load(), what Pillow's reading of some headers gets wrong: a 2- or
    4-bit grey PNG's transparent level (:func:`grey_key`), an 8-bit BMP of a black and white
    palette (:func:`bmp_two_colours`), a 16-bit TGA's attribute bit (:func:`tga_attribute`),
    a TGA's colour map of alpha (:func:`tga_map_alpha`)."""
    grey_key(im)
    bmp_two_colours(im)
    tga_attribute(im)
    tga_map_alpha(im)


def tga_map_alpha(im: Image.Image) -> None:
    """Take a TGA's colour map of 32-bit entries as a palette with alpha (their alpha made
    its transparency, as a PNG's tRNS of a palette), which Pillow keeps in the palette and
    convcli read as RGB. Not a map of 16-bit entries, whose top bit Pillow also reads as
    alpha, 1 transparent: it is no alpha (libvips and ImageMagick read RGB)."""
    if im.format != "TGA" or im.mode != "P" or getattr(im.palette, "mode", "") != "RGBA":
        return
    if file_head(im.filename, 8)[7:8] == bytes([32]):  # the map's entries: 32 bits
        im.info["transparency"] = bytes(im.palette.palette[3::4])


def tga_attribute(im: Image.Image) -> None:
    """Read a 16-bit TGA's top bit as its header says: alpha (1 opaque) where its descriptor
    gives one attribute bit, nothing where it gives none. Pillow reads the bit as alpha in
    every file, 1 transparent: a picture of set bits came out wholly transparent (libvips
    and ImageMagick show it opaque)."""
    if im.format != "TGA" or im.mode != "RGBA" or len(im.tile) != 1:
        return
    tile = im.tile[0]
    if not (isinstance(tile.args, tuple) and tile.args and tile.args[0] == "BGRA;15Z"):
        return
    descriptor = file_head(im.filename, 18)[17:18]
    if not descriptor:
        return
    if descriptor[0] & 0x0F:  # its attribute bit: alpha
        _unpacked_as(im, "BGRA;15")
    else:
        im._mode = "RGB"  # an unused bit: Pillow's own plugins set the mode so
        _unpacked_as(im, "BGR;15")


def bmp_two_colours(im: Image.Image) -> None:
    """Read an 8-bit BMP of a black and white palette (as Pillow writes one) a byte a pixel:
    Pillow takes such a palette for a 1-bit image and unpacks 8 pixels a byte, a picture of
    garbled rows (mostly black). Before load()."""
    if im.format != "BMP" or im.mode != "1" or len(im.tile) != 1 or im.tile[0][0] != "raw":
        return
    head = file_head(im.filename, 30)
    header_size = int.from_bytes(head[14:18], "little")
    at = 24 if header_size == 12 else 28  # BITMAPCOREHEADER, or the later ones
    if int.from_bytes(head[at : at + 2], "little") == 8:
        _unpacked_as(im, "1;8")  # a byte, not 0 is white


def _unpacked_as(im: Image.Image, raw_mode: str) -> None:
    """Have Pillow unpack the one tile of `im` from `raw_mode` (before load())."""
    tile = im.tile[0]
    im.tile = [tile._replace(args=(raw_mode, *tile.args[1:]))]


def pillow_geo_notes(im: Image.Image) -> tuple[str, ...]:
    """:func:`~convcli.io.geotags.pillow_geo`'s notes of the Pillow image `im`, before
    ``load()`` (which turns a TIFF upright and forgets its Orientation); none for other
    formats."""
    if im.format != "TIFF":
        return ()
    return pillow_geo(im, im.getexif().get(ORIENTATION) in range(2, 9))[1]


def narrow_key(im: Image.Image) -> tuple[str, ...]:
    """The note of a 16-bit RGB image's transparent colour (tRNS), which Pillow's 8 bits cannot
    mark exactly: dropped, every pixel opaque (with imagecodecs it is alpha)."""
    if im.mode != "RGB" or "transparency" not in im.info:
        return ()
    del im.info["transparency"]
    return (KEY_NOT_READ,)


KEY_NOT_READ = "its transparent colour (tRNS) not read at 8 bits: all opaque"
"""The note of a 16-bit transparent colour dropped (:func:`narrow_key`)."""


def sample_bytes_for(mode: str) -> int:
    """Bytes of one decoded sample of a Pillow `mode`: 4 for 32-bit, 2 for 16-bit, else 1."""
    if mode in ("I", "F"):
        return 4
    return 2 if mode in SIXTEEN_BIT_MODES else 1


def stored_size(im: Image.Image) -> tuple[int, int]:
    """(width, height) of `im` as its file stores it: a TIFF's from its tags, as Pillow gives
    the size of a TIFF turned by its Orientation (5 to 8) turned already."""
    if im.format == "TIFF":
        return im.tag_v2.get(256, im.size[0]), im.tag_v2.get(257, im.size[1])
    return im.size


def unidentified_reason(path: str) -> str | None:
    """Why Pillow cannot open `path`, where its first bytes are those of a format Pillow
    reads: that format's reader's own words (``broken PNG file``), which ``Image.open``
    drops, saying only that it cannot identify the file. None where no reader knows them."""
    with open(path, "rb") as file:
        prefix = file.read(16)
    Image.init()  # every reader: this is the path of a file that failed already
    for name in Image.ID:
        factory, accept = Image.OPEN[name]
        try:
            known = accept is not None and accept(prefix) is True
        except Exception:  # a reader's check of a start too short for it
            known = False
        if not known:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                factory(path).close()
        except Exception as exc:  # the reader's own exception, whatever its type
            lines = str(exc).strip().splitlines()
            why = lines[0] if lines else type(exc).__name__
            return f"a {name} file whose header Pillow cannot read ({why})"
    return None


def stack_samples(pictures, depth: int, floats: bool = False) -> np.ndarray:
    """The samples of `pictures` (frames of one size) as one (m, H, W, C) array, on one scale.

    `depth` and `floats` are the whole stack's. In a 16-bit stack of integer
    samples, an 8-bit frame's levels are widened to 16 bits (times 257: 255
    becomes 65535), as a 16-bit file of the same picture holds them; other
    frames keep their samples as decoded (8-bit integers stay uint8).
    """
    widen = depth == 16 and not floats
    return np.stack(
        [
            p.samples.astype(np.float32) * np.float32(257) if widen and p.depth == 8 else p.samples
            for p in pictures
        ]
    )


def to_array(
    im: Image.Image, channels: tuple[str, ...], *, integers: bool = False
) -> tuple[np.ndarray, float, int]:
    """Pixels as float32 (H, W, C), the value of white, and the output bit depth.

    With `integers`, 8-bit pixels come as they are (uint8).
    """
    mode = im.mode
    if im.format == "FITS" and mode in ("I;16", "I"):
        return fits_values(im)
    if mode in SIXTEEN_BIT_MODES:
        arr = np.asarray(im).astype(np.float32)[:, :, None]
        if channels == ("L", "A"):  # its transparent level (tRNS): alpha 0
            alpha = np.where(arr == im.info.get("transparency"), 0, 65535).astype(np.float32)
            arr = np.concatenate([arr, alpha], axis=2)
        return arr, 65535.0, 16
    if mode in ("I", "F"):
        arr = np.asarray(im).astype(np.float32)
        finite = arr[np.isfinite(arr)]
        top = float(finite.max()) if finite.size else 0.0
        white = 65535.0 if mode == "I" else 1.0
        return arr[:, :, None], max(white, top), 16
    target = {("L",): "L", ("L", "A"): "LA", ("R", "G", "B"): "RGB"}.get(channels, "RGBA")
    transform = _cmyk_to_srgb(im.info.get("icc_profile")) if mode == "CMYK" else None
    if transform is not None and target == "RGB":  # through its own profile (cmyk_note)
        im = transform.apply(im)
    elif mode != target:
        im = im.convert(target)
    arr = np.asarray(im)
    if not (integers and arr.dtype == np.uint8):
        arr = arr.astype(np.float32)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    return arr, 255.0, 8


def fits_values(im: Image.Image) -> tuple[np.ndarray, float, int]:
    """A FITS image of integers as :func:`to_array` gives pixels: its values as its header
    says, BZERO + BSCALE x the stored ones (signed: Pillow reads 16-bit ones unsigned, so
    that -1 was 65535 and the unsigned convention's BZERO = 32768 turned dark and bright
    about), on a white of 65535 or their largest, as an integer TIFF's."""
    cards = _fits_cards(im.filename)
    stored = np.asarray(im)
    if cards.get("BITPIX") == "16":
        stored = stored.astype(np.uint16).view(np.int16)
    try:  # FITS writes a double's exponent with D too
        scale, zero = (float(cards.get(k, d).upper().replace("D", "E")) for k, d in _SCALING)
    except ValueError:
        scale, zero = 1.0, 0.0
    values = (stored * scale + zero).astype(np.float32)
    finite = values[np.isfinite(values)]
    top = float(finite.max()) if finite.size else 0.0
    whole = scale == int(scale) and zero == int(zero)  # integers: a 16-bit white at least
    return values[:, :, None], max(65535.0 if whole else 1.0, top), 16


_SCALING = (("BSCALE", "1"), ("BZERO", "0"))


def _fits_cards(path: str) -> dict[str, str]:
    """The keywords and values of the header of a FITS file's image that Pillow reads, the
    first whose NAXIS is not 0 (a primary header of no data goes before extensions): its
    80-character cards up to END, the values as written, without their comments."""
    cards: dict[str, str] = {}
    try:
        with open(path, "rb") as fh:
            while len(block := fh.read(2880)) == 2880:
                for start in range(0, 2880, 80):
                    card = block[start : start + 80].decode("ascii", "replace")
                    keyword = card[:8].strip()
                    if keyword == "END" and cards.get("NAXIS", "0") != "0":
                        return cards
                    if keyword == "END":  # no data: the next header follows
                        cards = {}
                        break
                    if card[8:10] == "= ":
                        cards.setdefault(keyword, card[10:].split("/")[0].strip())
    except OSError:
        pass
    return cards
