"""HEIF images in (an iPhone's ``.heic`` photos), through pillow-heif (the ``heif`` extra).

Pillow does not read HEIF. Where Pillow cannot identify a file that is one,
:func:`opened` registers pillow-heif's reader with Pillow (once a process) and
opens it again, so that a run of JPEGs never loads it; without the extra the
file fails on one line naming it. libheif applies the file's rotation and
mirroring as it decodes, and pillow-heif sets the EXIF orientation to 1 to
match (the HEIF standard has the EXIF tag informative only, as libvips and
Apple read it). Samples of 10 and 12 bits keep their own scale (white 1023 for
10 bits), as a 12-bit TIFF's do, read by :func:`deep_heif`: Pillow holds colour at
8 bits, and pillow-heif's reader gives grey shifted up to 16.
"""

from __future__ import annotations

import functools
import os

import numpy as np
from PIL import Image, UnidentifiedImageError

from ..errors import MissingExtra
from .bands import unassociated
from .formats import file_head

HEIF_EXTENSIONS = frozenset({".heic", ".heif", ".hif"})
"""Extensions of HEIF files, which a folder lists as images with or without the extra."""

# The ftyp brands of HEVC-coded HEIF; mif1, msf1 and mif2 mark AVIF too, which Pillow reads.
_HEVC_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx"})
_AVIF_BRANDS = frozenset({b"avif", b"avis"})
_GENERAL_BRANDS = frozenset({b"mif1", b"msf1", b"mif2"})

# nclx colour descriptions that are sRGB or say nothing: BT.709 primaries (1) or
# unspecified (2); sRGB's (13), BT.709's (1) or an unspecified (2) transfer.
_SRGB_PRIMARIES = frozenset({1, 2})
_SRGB_TRANSFERS = frozenset({1, 2, 13})
_PRIMARIES_NAMES = {9: "BT.2020", 11: "DCI-P3", 12: "Display P3"}
_TRANSFER_NAMES = {8: "linear", 16: "PQ", 18: "HLG"}


def is_heif(path: str) -> bool:
    """Whether `path` starts as a HEIF file (an ``ftyp`` box) of HEVC images: its major brand
    a HEVC one, or a general one (``mif1``) beside a HEVC brand, or beside no AVIF brand
    (AVIF is Pillow's own)."""
    head = file_head(path, 1024)
    size = min(int.from_bytes(head[:4], "big"), len(head))
    if head[4:8] != b"ftyp" or size < 16:
        return False
    major, brands = head[8:12], {head[at : at + 4] for at in range(16, size - 3, 4)}
    if major in _HEVC_BRANDS or brands & _HEVC_BRANDS:
        return major not in _AVIF_BRANDS
    return major in _GENERAL_BRANDS and not brands & _AVIF_BRANDS


def opened(path) -> Image.Image:
    """``Image.open(path)``; a HEIF file Pillow cannot identify is opened with pillow-heif's
    reader, registered first.

    Raises
    ------
    MissingExtra
        `path` is a HEIF file and pillow-heif is not installed.
    """
    try:
        return Image.open(path)
    except UnidentifiedImageError:
        if not isinstance(path, (str, os.PathLike)) or not is_heif(os.fspath(path)):
            raise
    _register()
    return Image.open(path)


@functools.cache
def _register() -> None:
    """Register pillow-heif's reader with Pillow, without the thumbnails and depth maps
    it would otherwise parse for every file."""
    try:
        import pillow_heif
    except ImportError:
        raise MissingExtra("a HEIF image needs pillow-heif", "heif") from None
    pillow_heif.register_heif_opener(thumbnails=False, depth_images=False, aux_images=False)


def is_deep_heif(im: Image.Image) -> bool:
    """Whether `im` is a HEIF image of samples wider than 8 bits (colour, which Pillow holds at
    8 bits, or grey, which pillow-heif's reader gives shifted up to 16)."""
    deep = im.format == "HEIF" and im.info.get("bit_depth", 8) > 8
    return deep and im.mode in ("RGB", "RGBA", "RGBa", "I;16")


def deep_heif(im: Image.Image, path: str, channels: tuple[str, ...]) -> np.ndarray | None:
    """The 10 or 12-bit samples of the HEIF image `im` (the file's image ``im.tell()``), on
    their own scale (white 1023 for 10 bits), or None where pillow-heif does not give them."""
    import pillow_heif

    try:
        image = pillow_heif.open_heif(path, convert_hdr_to_8bit=False, hdr_to_16bit=False)
        image = image[im.tell()]
        pixels = np.asarray(image)
    except (OSError, ValueError, SyntaxError, RuntimeError, EOFError, IndexError):
        return None
    width, height = im.size
    shape = (height, width, len(channels))
    if pixels.dtype != np.uint16 or pixels.size != np.prod(shape):
        return None
    if image.mode.startswith("RGBa"):  # associated alpha, as Pillow's RGBa
        return unassociated(pixels, 2 ** im.info["bit_depth"] - 1)
    return pixels.reshape(shape)


def heif_notes(im: Image.Image) -> tuple[str, ...]:
    """What reading the HEIF image `im` leaves out: a colour space described by an nclx
    box, not sRGB, where there is no ICC profile to keep (its outputs would be taken as sRGB)."""
    nclx = im.info.get("nclx_profile")
    if im.format != "HEIF" or not nclx or im.info.get("icc_profile"):
        return ()
    primaries = nclx.get("color_primaries")
    transfer = nclx.get("transfer_characteristics")
    if primaries in _SRGB_PRIMARIES and transfer in _SRGB_TRANSFERS:
        return ()
    named = [_PRIMARIES_NAMES.get(primaries), _TRANSFER_NAMES.get(transfer)]
    named = " ".join(name for name in named if name)
    return (
        f"its colour space ({named + ', ' if named else ''}HEIF nclx primaries {primaries}, "
        f"transfer {transfer}) not kept: outputs hold no profile, and viewers take them as sRGB",
    )
