"""What a TIFF page read by tifffile carries (:func:`from_tiff_page`): its profile,
resolution, camera tags (as EXIF), XMP, IPTC, georeference and an OME-TIFF's physical
pixel size, as a :class:`~convcli.io.carried.Carried`."""

from __future__ import annotations

import struct

from . import iptc as iim
from .carried import ORIENTATION, TURNS, XMP_TAG, Carried, tiff_dpi
from .exif import (
    EXIF_IFD,
    GPS_IFD,
    IMAGE_DESCRIPTION,
    exif_bytes,
    tiff_exif_tags,
    without_exif_header,
)
from .geotags import TURNED_GEO_NOTE, gdal_unkept, geo_tags
from .physical import aspect_unkept, ome_unkept, physical_size
from .xmp import xmp_packet


def from_tiff_page(page) -> Carried:
    """What a tifffile page carries: its ICC profile, resolution, camera tags (as EXIF) and
    georeference, and the OME-XML's physical size of an OME-TIFF's first page."""
    tags = page.tags
    icc = tags.get(34675)
    dpi = None
    x, y, unit = tags.get("XResolution"), tags.get("YResolution"), tags.get("ResolutionUnit")
    if x is not None and y is not None and unit is not None:
        try:
            dpi = tiff_dpi(_ratio(x.value), _ratio(y.value), int(unit.value))
        except ZeroDivisionError:
            dpi = None
    turned = orientation(page)
    if dpi is not None and turned in TURNS:  # across is down
        dpi = (dpi[1], dpi[0])
    geo = geo_tags(tags)
    if geo is not None and geo.placed and turned != 1:  # GDAL's nodata value and scale kept
        geo = geo.unplaced()
    ome = page.index == 0 and bool(getattr(page.parent, "is_ome", False))
    return Carried(
        bytes(icc.value) if icc is not None else None,
        dpi,
        _tiff_exif(tags),
        geo,
        physical_size(page.parent.ome_metadata) if ome else None,
        ome,
        per_cm=dpi is not None and int(unit.value) == 3,
        xmp=xmp_packet(tags.valueof(XMP_TAG), upright=turned != 1),
        iptc=iim.iptc_bytes(tags.valueof(iim.IPTC_TAG), page.parent.byteorder),
        unkept=(
            gdal_unkept(tags)
            + _unitless_aspect(tags, unit, turned in TURNS)
            + (ome_unkept(page.parent.ome_metadata) if ome else ())
        ),
    )


def _unitless_aspect(tags, unit, quarter: bool) -> tuple[str, ...]:
    """:func:`~convcli.io.physical.aspect_unkept` of a page's resolution of ResolutionUnit 1,
    across and down swapped where the page is turned a `quarter`."""
    if unit is None or unit.value != 1:
        return ()
    try:
        density = [_ratio(tags[code].value) for code in (282, 283) if code in tags]
        return aspect_unkept(density[::-1] if quarter else density)
    except ZeroDivisionError:
        return ()


def orientation(page) -> int:
    """How `page`'s pixels are turned to be shown (its Orientation tag, 1 to 8; 1 for none
    or another value): :func:`convcli.io.tiff_pages.TiffPages.read_page` reads them so."""
    value = page.tags.valueof(274, 1)
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def turned_note(page) -> str | None:
    """What reading `page` upright loses, in words: the georeference of a page turned by
    its Orientation, which places the pixels as stored; else None."""
    geo = geo_tags(page.tags) if orientation(page) != 1 else None
    if geo is None or not geo.placed:
        return None
    return TURNED_GEO_NOTE


def _tiff_exif(tags) -> bytes | None:
    """A TIFF page's camera tags and EXIF and GPS directories, as EXIF bytes (as Pillow
    writes them, the orientation 1: the pixels are read upright); None where it has none,
    or they cannot be written again."""
    import tifffile
    from PIL import Image

    own = tiff_exif_tags(tags.valueof(IMAGE_DESCRIPTION))
    found = {code: tags[code].value for code in own if code in tags}
    directories = [
        (ifd, tags[code].value, registry)
        for code, ifd, registry in (
            (34665, EXIF_IFD, tifffile.TIFF.EXIF_TAGS),
            (34853, GPS_IFD, tifffile.TIFF.GPS_TAGS),
        )
        if code in tags and isinstance(tags[code].value, dict)
    ]
    if not found and not directories:
        return None
    try:
        exif = Image.Exif()
        for code, value in found.items():
            exif[code] = 1 if code == ORIENTATION else value
        for ifd, values, registry in directories:
            block = exif.get_ifd(ifd)
            for name, value in values.items():
                # tifffile names TIFF/EP's codes (0x920E) as EXIF's (0xA20E): EXIF's, the larger
                code = max(registry.getall(name)) if isinstance(name, str) else name
                if code == USER_COMMENT and isinstance(value, str):
                    value = _user_comment(value)
                block[code] = _rationals(value) if code in _RATIONAL_TAGS[ifd] else value
        data = exif_bytes(exif, "utf-8")  # tifffile's text: UTF-8 is how it reads it
    except (OSError, ValueError, TypeError, KeyError, struct.error):
        return None
    return without_exif_header(data)


# The tags of EXIF's and GPS's directories whose values are RATIONAL or SRATIONAL, which
# tifffile gives flat, (numerator, denominator, ...): written so, each would be two numbers.
_RATIONAL_TAGS = {
    EXIF_IFD: frozenset(
        (0x829A, 0x829D, 0x9102, 0x9201, 0x9202, 0x9203, 0x9204, 0x9205, 0x9206, 0x920A)
        + (0x9400, 0x9401, 0x9402, 0x9403, 0x9404, 0x9405, 0xA20B, 0xA20E, 0xA20F, 0xA215)
        + (0xA404, 0xA432, 0xA500)
    ),
    GPS_IFD: frozenset((2, 4, 6, 7, 11, 13, 15, 17, 20, 22, 24, 26, 31)),
}


USER_COMMENT = 0x9286


def _user_comment(text: str) -> bytes:
    """EXIF's UserComment of `text` (tifffile gives it without its 8-byte character code): ASCII,
    or UCS-2 in the big-endian order of the EXIF that Pillow writes.

    >>> _user_comment("Dawn"), _user_comment("Zo\u00eb")[:10]
    (b'ASCII\\x00\\x00\\x00Dawn', b'UNICODE\\x00\\x00Z')
    """
    if text.isascii():
        return b"ASCII\0\0\0" + text.encode("ascii")
    return b"UNICODE\0" + text.encode("utf-16-be", "replace")


def _rationals(value):
    """tifffile's flat (numerator, denominator, ...) as Pillow's rationals (one, or a tuple);
    any other value as it is."""
    from PIL.TiffImagePlugin import IFDRational

    if not (isinstance(value, tuple) and value and len(value) % 2 == 0):
        return value
    if not all(isinstance(v, int) for v in value):
        return value
    pairs = tuple(IFDRational(n, d) for n, d in zip(value[::2], value[1::2], strict=True))
    return pairs[0] if len(pairs) == 1 else pairs


def _ratio(value) -> float:
    return value[0] / value[1] if isinstance(value, tuple) else float(value)
