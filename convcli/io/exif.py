"""EXIF blocks edited for an output: its resolution on the output's grid, its image size the
output's (:class:`convcli.io.carried.Carried`)."""

from __future__ import annotations

import struct

EXIF_IFD, GPS_IFD = 0x8769, 0x8825
"""The tags of the camera's (Exif) and the GPS blocks in the first directory."""


def exif_on_grid(exif: bytes, step: int) -> bytes | None:
    """EXIF bytes `exif` for an output with a pixel every `step` input pixels: its
    X/YResolution (in its own unit) divided by `step`, as the output's resolution is."""

    def divide(tags) -> bool:
        codes = [code for code in (0x011A, 0x011B) if code in tags and float(tags[code]) > 0]
        for code in codes:  # XResolution, YResolution
            tags[code] = float(tags[code]) / step
        return bool(codes)

    return _edited_exif(exif, divide)


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
        return without_exif_header(tags.tobytes()) if edit(tags) else exif
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


def without_exif_header(exif: bytes) -> bytes:
    """EXIF bytes as Pillow writes them, without the ``Exif\\0\\0`` header a JPEG's APP1
    segment starts with (:meth:`Carried.pillow_options` puts it back)."""
    return exif[6:] if exif.startswith(b"Exif\0\0") else exif
