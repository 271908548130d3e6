"""A file's IPTC-IIM records (caption, keywords, credit, rights), as outputs keep them: a
TIFF's tag 33723, a JPEG's IPTC-NAA resource in a Photoshop segment (APP13) of its own, a
PNG's raw profile text (``Raw profile type iptc``, as ImageMagick writes and exiftool reads)."""

from __future__ import annotations

import zlib

import numpy as np

IPTC_TAG = 33723
IPTC_RESOURCE = 0x0404
"""The IPTC-NAA resource of a JPEG's Photoshop segment (APP13)."""
JPEG_IPTC_BYTES = 65506
"""The most IPTC bytes a JPEG's Photoshop segment holds: 64 KB, less its length, its name
and the resource's header (and a byte that pads an odd length)."""


def iptc_bytes(value, byte_order: str) -> bytes | None:
    """A TIFF's IPTC tag, or a JPEG's resource, as bytes: as they are, or packed back in the
    file's `byte_order` (``<``, ``>``) where the tag's type (LONG, as Photoshop writes it)
    had them read as numbers; None for none."""
    if isinstance(value, bytes | bytearray):
        return bytes(value) or None
    numbers = np.atleast_1d(np.asarray(value if value is not None else [], dtype=np.int64))
    if numbers.size == 0 or numbers.min() < 0 or numbers.max() > 0xFFFFFFFF:
        return None
    return numbers.astype(f"{byte_order}u4").tobytes()


PNG_IPTC_KEYWORD = "Raw profile type iptc"
"""The keyword of a PNG's text chunk that holds IPTC (ImageMagick's, which exiftool reads):
the records in a Photoshop resource block, written out in hex."""


def photoshop_resources(iptc: bytes) -> bytes:
    """A Photoshop resource block (``8BIM``, no name) that holds the IPTC-IIM records `iptc`."""
    header = b"8BIM" + IPTC_RESOURCE.to_bytes(2, "big") + b"\0\0" + len(iptc).to_bytes(4, "big")
    return header + iptc + b"\0" * (len(iptc) % 2)


def photoshop_segment(iptc: bytes) -> bytes:
    """A JPEG APP13 segment (Photoshop's) that holds the IPTC-IIM records `iptc` alone."""
    body = b"Photoshop 3.0\0" + photoshop_resources(iptc)
    return b"\xff\xed" + (len(body) + 2).to_bytes(2, "big") + body


def png_iptc_chunk(iptc: bytes) -> bytes:
    """The data of a PNG ``zTXt`` chunk that holds the IPTC-IIM records `iptc` as ImageMagick's
    raw profile text: a line break, the profile's name, its length in bytes, then its
    bytes in hex, 36 a line (:data:`PNG_IPTC_KEYWORD`)."""
    digits = photoshop_resources(iptc).hex()
    lines = "\n".join(digits[i : i + 72] for i in range(0, len(digits), 72))
    text = f"\niptc\n{len(digits) // 2:8d}\n{lines}\n".encode("ascii")
    return PNG_IPTC_KEYWORD.encode("ascii") + b"\0\0" + zlib.compress(text)


def png_iptc(text: str | None) -> bytes | None:
    """The IPTC-IIM records in a PNG's raw profile text `text` (:data:`PNG_IPTC_KEYWORD`), bare
    or in a Photoshop resource block; None where it holds none or cannot be read."""
    parts = (text or "").split(None, 2)  # its name, its length, its hex digits
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    try:
        data = bytes.fromhex("".join(parts[2].split()))[: int(parts[1])]
    except ValueError:
        return None
    if data[:1] == b"\x1c":  # a record's tag marker: the records themselves
        return data
    return _iptc_resource(data)


def _iptc_resource(block: bytes) -> bytes | None:
    """The IPTC-NAA resource (:data:`IPTC_RESOURCE`) of the Photoshop resource `block`."""
    at = 0
    while block[at : at + 4] == b"8BIM" and at + 7 <= len(block):
        name_bytes = 1 + block[at + 6]  # a Pascal string, padded to an even length
        start = at + 6 + name_bytes + name_bytes % 2
        size = int.from_bytes(block[start : start + 4], "big")
        if int.from_bytes(block[at + 4 : at + 6], "big") == IPTC_RESOURCE:
            return block[start + 4 : start + 4 + size] or None
        at = start + 4 + size + size % 2
    return None
