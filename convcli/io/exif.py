"""EXIF blocks edited for an output: its resolution on the output's grid, its image size the
output's (:class:`convcli.io.carried.Carried`)."""

from __future__ import annotations

import struct

EXIF_IFD, GPS_IFD = 0x8769, 0x8825
"""The tags of the camera's (Exif) and the GPS blocks in the first directory."""


def exif_on_grid(exif: bytes, step: int) -> bytes | None:
    """EXIF bytes `exif` for an output with a pixel every `step` input pixels: its
    X/YResolution and its camera block's FocalPlaneX/YResolution (pixels a unit of the
    sensor) divided by `step`, as the output's resolution is."""

    def divide(tags) -> bool:
        found, blocks = 0, [(tags, (0x011A, 0x011B))]
        if EXIF_IFD in tags:  # not made where there is none
            blocks.append((tags.get_ifd(EXIF_IFD), (0xA20E, 0xA20F)))
        for block, codes in blocks:
            for code in [code for code in codes if code in block and float(block[code]) > 0]:
                block[code] = _divided(block[code], step)
                found += 1
        return bool(found)

    return _edited_exif(exif, divide)


def _divided(value, step: int):
    """A RATIONAL tag's `value` divided by `step`, still a rational: Pillow writes a float
    of a tag it does not know (FocalPlaneXResolution) as a DOUBLE, which EXIF readers take
    for a RATIONAL's bits (2000.0 read as 1084178432)."""
    from fractions import Fraction

    from PIL.TiffImagePlugin import IFDRational

    exact = Fraction(value.numerator, value.denominator) if isinstance(value, IFDRational) else None
    exact = (exact if exact is not None else Fraction(float(value))) / step
    if max(exact.numerator, exact.denominator) >= 2**32:  # a RATIONAL's two 32-bit numbers
        exact = exact.limit_denominator(2**32 - 1)
    return IFDRational(exact.numerator, exact.denominator)


def turned_focal_plane(tags) -> None:
    """Swap the FocalPlaneX/YResolution of the camera block of Pillow's EXIF `tags`, as
    for a picture turned a quarter: across is down."""
    block = tags.get_ifd(EXIF_IFD) if EXIF_IFD in tags else {}
    if 0xA20E in block and 0xA20F in block:
        block[0xA20E], block[0xA20F] = block[0xA20F], block[0xA20E]


def exif_dpi(exif: bytes | None) -> tuple[float, float] | None:
    """The resolution (dots per inch across and down) that EXIF bytes `exif` give in their
    X/YResolution and ResolutionUnit (2: inch, 3: centimetre), or None."""
    try:
        tags = exif_tags(exif) if exif is not None else {}
        x, y, per = tags.get(0x011A), tags.get(0x011B), {2: 1.0, 3: 2.54}.get(tags.get(0x0128, 2))
        if x is None or y is None or per is None or not (float(x) > 0 and float(y) > 0):
            return None
        return (float(x) * per, float(y) * per)
    except (OSError, ValueError, TypeError, KeyError, ZeroDivisionError, struct.error):
        return None


def dpi_or_exifs(dpi: tuple[float, float] | None, exif: bytes | None):
    """`dpi` where it is given, else the resolution EXIF bytes `exif` give (:func:`exif_dpi`):
    the resolution an XMP packet is written with."""
    return dpi if dpi is not None else exif_dpi(exif)


def exif_sized(exif: bytes, width: int, height: int) -> bytes | None:
    """EXIF bytes `exif` whose image size (PixelXDimension and PixelYDimension of its camera
    block, where it gives them) is `width` x `height`: an output's, not its input's."""

    def size(tags) -> bool:
        block = tags.get_ifd(EXIF_IFD)
        given = [(code, n) for code, n in ((0xA002, width), (0xA003, height)) if code in block]
        block.update(given)
        return bool(given)

    return _edited_exif(exif, size)


def _edited_exif(exif: bytes, edit) -> bytes | None:
    """EXIF bytes `exif` after ``edit(tags)`` on Pillow's tags, their camera and GPS blocks
    loaded (`exif` itself where it changed none); None where they cannot be written again."""
    try:
        tags = exif_tags(exif)
        return without_exif_header(exif_bytes(tags)) if edit(tags) else exif
    except (OSError, ValueError, TypeError, KeyError, ZeroDivisionError, struct.error):
        return None


def exif_tags(exif: bytes):
    """Pillow's tags of the EXIF bytes `exif`, their camera and GPS blocks loaded, so that
    they are written again with them."""
    from PIL import Image

    tags = Image.Exif()
    tags.load(exif)
    for ifd in (EXIF_IFD, GPS_IFD):
        if ifd in tags:
            tags.get_ifd(ifd)
    return tags


def exif_bytes(tags, encoding: str = "latin-1") -> bytes:
    """Pillow's `tags` as EXIF bytes, their text as the file had it.

    Pillow reads a tag's text as Latin-1 and writes text as ASCII, each other character as
    ``?``: a UTF-8 ``© Zoë`` would come out ``?? Zo??``. Text that is not ASCII is written
    as bytes in `encoding`: ``latin-1`` for text Pillow read (its own bytes again),
    ``utf-8`` for text read as text (tifffile's). `tags` are left as they were.
    """
    blocks = [tags.get_ifd(ifd) for ifd in (EXIF_IFD, GPS_IFD) if ifd in tags]
    texts = [
        (block, code, value)
        for block in (tags, *blocks)
        for code, value in list(block.items())
        if isinstance(value, str) and not value.isascii()
    ]
    try:
        for block, code, value in texts:
            block[code] = value.encode(encoding, "replace")
        return tags.tobytes()
    finally:
        for block, code, value in texts:
            block[code] = value


def without_exif_header(exif: bytes) -> bytes:
    """EXIF bytes as Pillow writes them, without the ``Exif\\0\\0`` header a JPEG's APP1
    segment starts with (:meth:`Carried.pillow_options` puts it back)."""
    return exif[6:] if exif.startswith(b"Exif\0\0") else exif


IMAGE_DESCRIPTION = 270
TIFF_TEXT_TAGS = {
    IMAGE_DESCRIPTION: "ImageDescription",
    271: "Make",
    272: "Model",
    306: "DateTime",
    315: "Artist",
    33432: "Copyright",
}
"""The text tags of an EXIF's first directory that a TIFF holds as tags of its own."""
_OF_THE_PIXELS = frozenset((256, 257, 274, 282, 283, 296, 305, 531, EXIF_IFD, GPS_IFD))
"""The tags of an EXIF's first directory that any output gives of its own pixels: their
size, orientation (written upright), resolution, software and chroma siting."""


def exif_text(exif: bytes | None) -> tuple[tuple[int, bytes], ...] | None:
    """The text tags (:data:`TIFF_TEXT_TAGS`) of the EXIF bytes `exif`, (tag, its bytes as
    the EXIF holds them) in order of tag; None for none."""
    if exif is None:
        return None
    try:
        tags = exif_tags(exif)
    except (OSError, ValueError, TypeError, KeyError, struct.error):
        return None
    found = []
    for code in sorted(TIFF_TEXT_TAGS):
        value = tags.get(code)
        if isinstance(value, str):  # Pillow's Latin-1 reading of the bytes
            value = value.encode("latin-1", "replace")
        if isinstance(value, bytes) and value.strip(b"\0 "):
            found.append((code, value.rstrip(b"\0")))
    return tuple(found) or None


def exif_beyond_text(exif: bytes) -> bool:
    """Whether the EXIF bytes `exif` hold more than their text tags and what any output gives
    of its own pixels: a camera or GPS block, or other tags of the first directory."""
    try:
        tags = exif_tags(exif)
    except (OSError, ValueError, TypeError, KeyError, struct.error):
        return True
    if any(len(tags.get_ifd(ifd)) for ifd in (EXIF_IFD, GPS_IFD) if ifd in tags):
        return True
    return any(code not in TIFF_TEXT_TAGS and code not in _OF_THE_PIXELS for code in tags)


TIFF_CAMERA_TAGS = (271, 272, 274, 306, 315, 33432)
"""The camera's tags of a TIFF's own directory that EXIF holds (Make, Model, Orientation,
DateTime, Artist, Copyright)."""


def tiff_exif_tags(description) -> tuple[int, ...]:
    """The tags of a TIFF's own directory that its EXIF takes: the camera's, and its
    ImageDescription where it describes the picture (:func:`is_description`)."""
    return TIFF_CAMERA_TAGS + ((IMAGE_DESCRIPTION,) if is_description(description) else ())


def is_description(value) -> bool:
    """Whether a TIFF's ImageDescription `value` is a description of the picture, not a
    program's metadata written there (tifffile's JSON, OME-XML, ImageJ's header)."""
    if not isinstance(value, str) or not value.strip("\0 "):
        return False
    text = value.lstrip()
    return not text.startswith(("{", "<?xml", "<OME", "ImageJ="))


def exif_orientation(exif: bytes | None) -> int | None:
    """The orientation (1 to 8) the EXIF bytes `exif` give, or None."""
    if exif is None:
        return None
    try:
        value = exif_tags(exif).get(0x0112)
    except (OSError, ValueError, TypeError, KeyError, struct.error):
        return None
    return int(value) if isinstance(value, int) and 1 <= value <= 8 else None
