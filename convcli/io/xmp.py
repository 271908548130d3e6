"""A file's XMP packet, as an image of its pixels keeps it.

XMP (Adobe's Extensible Metadata Platform, RDF in XML) holds a photo's title,
caption, keywords, rating, creator and rights, and copies of some of its TIFF
and EXIF fields. An output keeps the packet as it is, but for the fields that
describe the pixels, each changed where the packet has it: ``tiff:Orientation``
(1: convcli reads the pixels upright), ``tiff:ImageWidth``/``ImageLength`` and
``exif:PixelXDimension``/``PixelYDimension`` (the output's size), and
``tiff:XResolution``/``YResolution`` (its resolution, in the packet's unit).
A field is found in either of RDF's forms, an attribute in an element's tag
(``tiff:Orientation="6"``) or an element's text
(``<tiff:Orientation>6</tiff:Orientation>``; not in a CDATA section), under
whatever prefix the packet gives the namespace; nothing is added or removed,
so the packet stays byte for byte what it was elsewhere. The orientation is set
where the pixels were turned upright: by EXIF's orientation, or by the packet's
own where Pillow reads it (``tiff:Orientation``, without EXIF's).
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache, partial

TIFF_NAMESPACE = b"http://ns.adobe.com/tiff/1.0/"
EXIF_NAMESPACE = b"http://ns.adobe.com/exif/1.0/"
JPEG_XMP_BYTES = 65504
"""The most XMP bytes a JPEG holds: its APP1 segment's 64 KB, less its length and XMP's
namespace name (an extended XMP, split over several segments, is not written)."""


JPEG_SIDE = 65535
"""The most pixels a JPEG has across or down."""


def upright_xmp(packet: bytes) -> bytes:
    """`packet` with its orientation, where it gives one, set to 1 (upright)."""
    return _set(packet, TIFF_NAMESPACE, b"Orientation", b"1")


def xmp_sized(
    packet: bytes, width: int, height: int, dpi: tuple[float, float] | None = None
) -> bytes:
    """`packet` with the size it gives set to `width` x `height`, and the resolution it
    gives to `dpi` (pixels per inch across and down; in pixels per centimetre where the
    packet's ``tiff:ResolutionUnit`` is 3), where `dpi` is known.

    >>> xmp_sized(b'<d xmlns:t="http://ns.adobe.com/tiff/1.0/" t:ImageWidth="640"/>', 32, 24)
    b'<d xmlns:t="http://ns.adobe.com/tiff/1.0/" t:ImageWidth="32"/>'
    """
    for namespace, across, down in (
        (TIFF_NAMESPACE, b"ImageWidth", b"ImageLength"),
        (EXIF_NAMESPACE, b"PixelXDimension", b"PixelYDimension"),
    ):
        packet = _set(packet, namespace, across, str(width).encode())
        packet = _set(packet, namespace, down, str(height).encode())
    if dpi is not None:
        per_cm = _values(packet, TIFF_NAMESPACE, b"ResolutionUnit") == [b"3"]
        for name, value in zip((b"XResolution", b"YResolution"), dpi, strict=True):
            ratio = Fraction(value / 2.54 if per_cm else value).limit_denominator(10000)
            packet = _set(packet, TIFF_NAMESPACE, name, f"{ratio.numerator}/{ratio.denominator}")
    return packet


def without_padding(packet: bytes) -> bytes:
    """`packet` without the blank padding XMP writers leave before its ``<?xpacket end``
    (room to edit it in place), for a JPEG segment it would overflow."""
    return re.sub(rb"\s+(?=<\?xpacket end)", b"\n", packet)


@lru_cache(maxsize=16)
def fits_jpeg(packet: bytes, dpi: tuple[float, float] | None) -> bool:
    """Whether `packet`, sized for an image of any size and of `dpi` (:func:`xmp_sized`)
    and its padding dropped where it must be, fits a JPEG's segment (JPEG_XMP_BYTES). Each
    size it gives is taken at its longest, a JPEG's 65535 pixels a side, so that the
    answer holds for every JPEG output. Asked each time a file's JPEG holdings are (4.7 ms
    for a 60 KB packet), it is answered once for each packet and resolution.

    >>> fits_jpeg(b'<d xmlns:t="http://ns.adobe.com/tiff/1.0/" t:ImageWidth="640"/>', None)
    True
    """
    widest = JPEG_SIDE
    return len(without_padding(xmp_sized(packet, widest, widest, dpi))) <= JPEG_XMP_BYTES


def _set(packet: bytes, namespace: bytes, name: bytes, value: bytes | str) -> bytes:
    """`packet` with field `name` of `namespace` set to `value` wherever it is given: in an
    element's opening tag (not in text or a comment), or as an element's text."""
    value = value.encode() if isinstance(value, str) else value
    for attribute, element in _patterns(packet, namespace, name):
        packet = _TAG.sub(partial(_set_in_tag, attribute, value), packet)
        packet = element.sub(lambda m: m[1] + value, packet)
    return packet


def _set_in_tag(attribute: re.Pattern, value: bytes, tag: re.Match) -> bytes:
    """The opening `tag` with the `attribute` it gives set to `value`."""
    return attribute.sub(lambda m: m[1] + m[2] + value + m[2], tag[0])


_TAG = re.compile(rb"<[^<>!?/][^<>]*>")
"""An element's opening tag (not a comment, a processing instruction or a closing tag)."""


def _values(packet: bytes, namespace: bytes, name: bytes) -> list[bytes]:
    """The values field `name` of `namespace` is given in `packet`, stripped."""
    found = []
    for attribute, element in _patterns(packet, namespace, name):
        found += [m[3].strip() for m in attribute.finditer(packet)]
        found += [m[2].strip() for m in element.finditer(packet)]
    return found


def _patterns(packet: bytes, namespace: bytes, name: bytes):
    """For each prefix `packet` binds to `namespace`: the patterns of field `name` as an
    attribute (groups: what comes before the value, its quote, the value) and as an
    element (groups: the opening tag, the value, and the closing tag)."""
    bound = rb"xmlns:([A-Za-z_][\w.-]*)\s*=\s*[\"']" + re.escape(namespace) + rb"[\"']"
    for prefix in sorted(set(re.findall(bound, packet))):
        field = re.escape(prefix + b":" + name)
        yield (
            re.compile(rb"(\s" + field + rb"\s*=\s*)([\"'])([^\"'<]*)\2"),
            re.compile(rb"(<" + field + rb"(?:\s[^>]*)?>)([^<]*)(?=</" + field + rb"\s*>)"),
        )


def xmp_packet(found, upright: bool = True) -> bytes | None:
    """The XMP packet `found` (bytes or text), its orientation 1 where the pixels are read
    `upright`; None for none."""
    if not found or not isinstance(found, str | bytes | bytearray):
        return None
    packet = found.encode() if isinstance(found, str) else bytes(found)
    return upright_xmp(packet) if upright else packet
