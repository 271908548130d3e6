"""A file's IPTC-IIM records (caption, keywords, credit, rights), as outputs keep them: a
TIFF's tag 33723, a JPEG's IPTC-NAA resource in a Photoshop segment (APP13) of its own."""

from __future__ import annotations

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


def photoshop_segment(iptc: bytes) -> bytes:
    """A JPEG APP13 segment (Photoshop's) that holds the IPTC-IIM records `iptc` alone."""
    resource = b"8BIM" + IPTC_RESOURCE.to_bytes(2, "big") + b"\0\0" + len(iptc).to_bytes(4, "big")
    body = b"Photoshop 3.0\0" + resource + iptc + b"\0" * (len(iptc) % 2)
    return b"\xff\xed" + (len(body) + 2).to_bytes(2, "big") + body
