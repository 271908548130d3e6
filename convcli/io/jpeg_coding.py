"""How a JPEG was coded (:class:`JpegCoding`): a JPEG of its pixels is coded the same way, at
its quality (:mod:`convcli.io.carried`); and a JPEG's or a GIF's comments, which a JPEG of it
keeps as COM segments."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# fmt: off
_IJG_LUMINANCE = (  # 8 x 8, row by row
     16,  11,  10,  16,  24,  40,  51,  61,
     12,  12,  14,  19,  26,  58,  60,  55,
     14,  13,  16,  24,  40,  57,  69,  56,
     14,  17,  22,  29,  51,  87,  80,  62,
     18,  22,  37,  56,  68, 109, 103,  77,
     24,  35,  55,  64,  81, 104, 113,  92,
     49,  64,  78,  87, 103, 121, 120, 101,
     72,  92,  95,  98, 112, 100, 103,  99,
)
# fmt: on
"""The JPEG standard's luminance table (Annex K, natural order), which libjpeg scales by
its quality: :meth:`JpegCoding.quality`."""


@dataclass(frozen=True)
class JpegCoding:
    """How a JPEG was coded: its quantization tables (Pillow's ``quantization``, natural
    order) and chroma subsampling (Pillow's 0 4:4:4, 1 4:2:2, 2 4:2:0; -1 other)."""

    tables: tuple[tuple[int, ...], ...]
    subsampling: int = -1

    @property
    def quality(self) -> int:
        """The libjpeg quality (1-100) whose luminance table is nearest the first table,
        as ImageMagick's ``identify`` estimates it.

        >>> JpegCoding((tuple(max(1, (v * 34 + 50) // 100) for v in _IJG_LUMINANCE),)).quality
        83
        """
        table = np.asarray(self.tables[0][:64], dtype=np.int64)
        base = np.asarray(_IJG_LUMINANCE, dtype=np.int64)
        qualities = np.arange(1, 101)
        scales = np.where(qualities < 50, 5000 // qualities, 200 - 2 * qualities)
        scaled = np.clip((base[None, :] * scales[:, None] + 50) // 100, 1, 255)
        return int(qualities[np.argmin(np.abs(scaled - table[None, :]).sum(axis=1))])

    def pillow_options(self) -> dict:
        """Pillow ``save`` options that code a JPEG the same way (no ``quality``: Pillow
        would scale the tables by it)."""
        options: dict = {"qtables": [list(t) for t in self.tables]}
        if self.subsampling >= 0:
            options["subsampling"] = self.subsampling
        return options


JFIF_DENSITY_MAX = 65535
"""The largest density a JPEG's JFIF header holds (16 bits)."""


def jfif_holds(dpi: tuple[float, float] | None) -> bool:
    """Whether a JPEG's JFIF header holds the resolution `dpi` (x, y) as Pillow writes it:
    whole dots per inch, 1 to :data:`JFIF_DENSITY_MAX` (Pillow writes a larger one modulo
    65536, a smaller one as no density at all)."""
    return dpi is not None and all(1 <= round(d) <= JFIF_DENSITY_MAX for d in dpi)


def jpeg_coding(im) -> JpegCoding | None:
    """The coding of the Pillow JPEG `im`, or None (not a JPEG, or no tables read)."""
    tables = getattr(im, "quantization", None) if im.format == "JPEG" else None
    if not tables or any(len(t) != 64 for t in tables.values()):
        return None
    from PIL import JpegImagePlugin

    try:
        subsampling = JpegImagePlugin.get_sampling(im)
    except (AttributeError, TypeError, ValueError):
        subsampling = -1
    return JpegCoding(tuple(tuple(int(v) for v in tables[k]) for k in sorted(tables)), subsampling)


COMMENT_MARKER = b"\xff\xfe"
"""A JPEG's comment segment (COM)."""
COMMENT_BYTES = 65533
"""The most bytes one COM segment holds: 64 KB less its length."""


def comments_of(im, marker: bytes) -> tuple[bytes, ...] | None:
    """The comments of the Pillow image `im` but convcli's `marker`, in order: a JPEG's COM
    segments, a GIF's comment; None for none."""
    if im.format == "JPEG":
        found = tuple(data for kind, data in getattr(im, "applist", ()) if kind == "COM")
    elif im.format == "GIF" and isinstance(im.info.get("comment"), bytes):
        found = (im.info["comment"],)
    else:
        return None
    return tuple(data for data in found if data and data != marker) or None


def comment_segments(comments: tuple[bytes, ...]) -> bytes:
    """COM segments that hold `comments` (each at most 65533 bytes, as read from a segment).

    >>> comment_segments((b"Dawn",))
    b'\\xff\\xfe\\x00\\x06Dawn'
    """
    return b"".join(COMMENT_MARKER + (len(text) + 2).to_bytes(2, "big") + text for text in comments)
