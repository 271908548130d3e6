"""What a file carries besides its pixels, which outputs may keep: colour profile, resolution,
EXIF, XMP, IPTC, PNG text, georeference, physical pixel size (:mod:`convcli.io.physical`).

Read from an image (:func:`from_pillow`, :func:`from_tiff_page`) into a
:class:`Carried`, and written by each output format as it can hold them: PNG
as ``iCCP``, ``pHYs``, ``eXIf`` and text chunks (:meth:`Carried.png_chunks`), JPEG
through Pillow (:meth:`Carried.pillow_options`), TIFF as the ICC profile tag,
X/YResolution, XMP, IPTC, GeoTIFF tags and OME-XML (:func:`tiff_options`). Which
output keeps what is the application's rule (:func:`convcli.app.outputs.carried_for`).
"""

from __future__ import annotations

import functools
import io
import struct
import zlib
from dataclasses import dataclass, replace

import numpy as np

from ..layers.validation import FLOAT32_MAX
from . import iptc as iim
from .exif import (
    EXIF_IFD,
    GPS_IFD,
    IMAGE_DESCRIPTION,
    TIFF_TEXT_TAGS,
    dpi_or_exifs,
    exif_bytes,
    exif_on_grid,
    exif_orientation,
    exif_sized,
    exif_tags,
    exif_text,
    tiff_exif_tags,
    turned_focal_plane,
    without_exif_header,
)
from .formats import MARKER
from .geotags import GeoTags, gdal_unkept, pillow_geo, pillow_tags
from .jpeg_coding import (
    COMMENT_BYTES,
    JpegCoding,
    comment_segments,
    comments_of,
    jfif_holds,
    jpeg_coding,
)
from .physical import PhysicalSize, physical_size, unitless_aspect
from .png_text import comment_chunks, keywords, pillow_text, tiff_tags
from .xmp import JPEG_XMP_BYTES, fits_jpeg, without_padding, xmp_packet, xmp_sized

METRES_PER_INCH = 0.0254
ORIENTATION = 0x0112
TURNS = (5, 6, 7, 8)
"""The EXIF orientations that turn the picture a quarter: its width is the file's height."""
XMP_TAG = 700
JPEG_EXIF_BYTES = 65527
"""The most EXIF bytes a JPEG holds: its APP1 segment's 64 KB, less its length and
``Exif\\0\\0``."""


@dataclass(frozen=True)
class Carried:
    """A file's colour profile, resolution and EXIF (each None where it has none).

    Attributes
    ----------
    icc_profile : bytes or None
        The ICC profile as the file holds it.
    dpi : (float, float) or None
        Pixels per inch across and down.
    exif : bytes or None
        The EXIF block (a TIFF structure, without JPEG's ``Exif\\0\\0``), its
        orientation set to 1: the pixels are read upright.
    geo : GeoTags or None
        A GeoTIFF's georeference, and GDAL's nodata value (:mod:`convcli.io.geotags`).
    physical : PhysicalSize or None
        An OME image's pixel size on the specimen (OME-XML's PhysicalSizeX/Y).
    ome : bool
        Whether a TIFF of it is an OME-TIFF (its input is one, or its name ends
        ``.ome.tif``/``.ome.tiff``).
    jpeg : JpegCoding or None
        A JPEG's quantization tables and chroma subsampling: a JPEG of it is
        written with them, at the input's quality.
    per_cm : bool
        Whether a TIFF gives its resolution in pixels a centimetre (ResolutionUnit 3), as
        a TIFF of it does then.
    png_colour : tuple of (bytes, bytes) or None
        A PNG's colour space in chunks (kind, data) of its own: ``cHRM``, ``gAMA`` and
        ``sRGB`` (a linear render's gamma 1), which the pixels' levels go with, as with a
        profile.
    xmp : bytes or None
        The XMP packet, its orientation set to 1 where the pixels are read upright; an
        image of them gets it with its own size and resolution (:mod:`convcli.io.xmp`).
    iptc : bytes or None
        The IPTC-IIM records (caption, keywords, credit), as the file holds them: a JPEG's
        IPTC-NAA resource, a TIFF's tag 33723.
    png_text : tuple of (bytes, bytes) or None
        A PNG's text chunks (kind, data) that a PNG of it keeps (:mod:`convcli.io.png_text`).
    tiff_text : tuple of (int, bytes) or None
        What a TIFF of it holds of its EXIF: the text tags (Make, Artist, ...) of the EXIF's
        first directory, as tags of its own (:func:`~convcli.io.exif.exif_text`).
    comments : tuple of bytes or None
        A JPEG's comments (COM segments) but convcli's marker, or a GIF's comment: a JPEG of
        it keeps them as COM segments, a PNG as ``Comment`` text.
    unkept : tuple of str
        What the file carries that convcli writes none of: a PNG's raw profile text, a
        JPEG's extended XMP.
    """

    icc_profile: bytes | None = None
    dpi: tuple[float, float] | None = None
    exif: bytes | None = None
    geo: GeoTags | None = None
    physical: PhysicalSize | None = None
    ome: bool = False
    jpeg: JpegCoding | None = None
    per_cm: bool = False
    png_colour: tuple[tuple[bytes, bytes], ...] | None = None
    xmp: bytes | None = None
    iptc: bytes | None = None
    png_text: tuple[tuple[bytes, bytes], ...] | None = None
    tiff_text: tuple[tuple[int, bytes], ...] | None = None
    comments: tuple[bytes, ...] | None = None
    unkept: tuple[str, ...] = ()

    def on_grid(self, step: int, top: float = 0.0, left: float = 0.0) -> Carried:
        """The same, for an output with a pixel every `step` input pixels, its pixel (0, 0)'s
        corner at input coordinates (`top`, `left`) (pixel corners)."""
        dpi = (
            self.dpi if self.dpi is None or step == 1 else (self.dpi[0] / step, self.dpi[1] / step)
        )
        geo = None if self.geo is None else self.geo.on_grid(step, top, left)
        physical = None if self.physical is None else self.physical.on_grid(step, top, left)
        exif = self.exif if self.exif is None or step == 1 else exif_on_grid(self.exif, step)
        return replace(self, dpi=dpi, exif=exif, geo=geo, physical=physical)

    def without_colour(self) -> Carried:
        """Resolution, georeference and physical size alone: for values that are no colours
        of the input's space (a map), which no JPEG coding of the input suits."""
        return Carried(
            dpi=self.dpi, geo=self.geo, physical=self.physical, ome=self.ome, per_cm=self.per_cm
        )

    def profile_name(self) -> str | None:
        """The profile's description ("Adobe RGB (1998)"), or None."""
        return None if self.icc_profile is None else _profile_description(self.icc_profile)

    def profile_space(self) -> str | None:
        """The colour space the profile is for, from its header ("RGB", "GRAY", "CMYK"), or
        None."""
        if self.icc_profile is None or len(self.icc_profile) < 20:
            return None
        return self.icc_profile[16:20].decode("latin-1").strip()

    def for_pixels(self, grey: bool) -> Carried:
        """The same, without a profile of another colour space than the pixels written:
        `grey` ones (one channel) keep a grey profile only, colour ones an RGB or grey one
        (never a CMYK file's, read as RGB)."""
        space = self.profile_space()
        if space is None or space == "GRAY" or (space == "RGB" and not grey):
            return self
        return replace(self, icc_profile=None)

    @property
    def nodata(self) -> float | None:
        """GDAL's nodata value, or None."""
        try:
            return float(self.geo.nodata) if self.geo is not None and self.geo.nodata else None
        except ValueError:
            return None

    def for_samples(self, dtype) -> Carried:
        """As written with samples of `dtype`: a nodata value they can hold, as GDAL's
        gdal_translate ``-ot`` clamps it. A float32 file holds a finite nodata value past its
        range (a Float64 file's -1.797e308) as its largest value of that sign (a value beyond
        it would be -inf there); integer levels hold the nearest one in their range (-9999
        as 0), and NaN as their lowest."""
        nodata, dtype = self.nodata, np.dtype(dtype)
        if nodata is None:
            return self
        if dtype.kind == "f":
            if dtype != np.float32 or not FLOAT32_MAX < abs(nodata) < np.inf:
                return self
            clamped = FLOAT32_MAX if nodata > 0 else -FLOAT32_MAX
            return self._with_geo(replace(self.geo, nodata=repr(clamped)))
        if dtype.kind not in "ui":
            return self.without_nodata()
        low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
        level = low if np.isnan(nodata) else round(min(max(nodata, low), high))
        return self if level == nodata else self._with_geo(replace(self.geo, nodata=str(level)))

    def without_nodata(self) -> Carried:
        """The same without GDAL's nodata value (a map's levels have no missing values)."""
        if self.geo is None or not self.geo.nodata:
            return self
        return self._with_geo(replace(self.geo, nodata=""))

    def without_band_values(self) -> Carried:
        """The same without GDAL's band scales and offsets (a map of other values)."""
        return self.with_band_values_of(())

    def with_band_values_of(self, bands: tuple[int | None, ...]) -> Carried:
        """The same with input band ``bands[k]``'s GDAL scale and offset given for the output's
        sample k (:meth:`GeoTags.for_bands`): each file of one band keeps that band's."""
        return self if self.geo is None else self._with_geo(self.geo.for_bands(bands))

    def _with_geo(self, geo: GeoTags) -> Carried:
        """The same with `geo`, where it holds anything."""
        return replace(self, geo=geo if geo.holds_anything else None)

    def held_by(self, fmt: str) -> Carried:
        """What an output of format `fmt` holds of it: PNG and JPEG no georeference or
        physical size (JPEG no EXIF, XMP or IPTC over 64 KB, XMP as sized for it; no dpi JFIF
        cannot hold), TIFF of its EXIF the text tags alone, Zarr the georeference and
        physical size, the others nothing; the JPEG coding JPEG alone; no format its
        :attr:`unkept`."""
        held = replace(self, unkept=())
        if fmt == "png":
            return replace(held, geo=None, physical=None, ome=False, jpeg=None)
        if fmt == "jpg":
            fits = self.xmp is not None and fits_jpeg(self.xmp, dpi_or_exifs(self.dpi, self.exif))
            return replace(
                held,
                dpi=tuple(float(round(d)) for d in self.dpi) if jfif_holds(self.dpi) else None,
                exif=_within(self.exif, JPEG_EXIF_BYTES),
                xmp=self.xmp if fits else None,
                iptc=_within(self.iptc, iim.JPEG_IPTC_BYTES),
                geo=None,
                physical=None,
                ome=False,
                png_colour=None,
                png_text=None,
                comments=_comments_within(self.comments),
            )
        if fmt == "tiff":
            kept = {"exif": None, "ome": self.ome_tiff, "jpeg": None, "tiff_text": _tiff_text(self)}
            return replace(held, png_colour=None, png_text=None, comments=None, **kept)
        if fmt == "zarr":  # in the group's attributes
            return Carried(geo=self.geo, physical=self.physical)
        return NOTHING

    def png_chunks(self, size: tuple[int, int] | None = None) -> list[tuple[bytes, bytes]]:
        """The PNG chunks (kind, data) that hold what is carried, to go before the pixels of
        an image of `size` (width, height), which its EXIF then gives (:meth:`exif_for`)."""
        chunks = [
            (kind, data)
            for kind, data in self.png_colour or ()
            if kind != b"sRGB" or self.icc_profile is None  # one or the other, never both
        ]
        if self.icc_profile is not None:
            name = (self.profile_name() or "ICC profile").encode("latin-1", "replace")[:79]
            chunks.append((b"iCCP", name + b"\0\0" + zlib.compress(self.icc_profile)))
        if self.dpi is not None:
            x, y = (max(1, round(d / METRES_PER_INCH)) for d in self.dpi)
            chunks.append((b"pHYs", struct.pack(">IIB", x, y, 1)))
        if self.exif is not None:
            chunks.append((b"eXIf", self.exif_for(size)))
        if self.xmp is not None:  # an iTXt chunk, uncompressed, of no language
            chunks.append((b"iTXt", b"XML:com.adobe.xmp\0\0\0\0\0" + self.xmp_for(size)))
        if self.iptc is not None:
            chunks.append((b"zTXt", iim.png_iptc_chunk(self.iptc)))
        return chunks + list(self.png_text or ()) + list(comment_chunks(self.comments or ()))

    def metadata_bytes(self) -> int:
        """The bytes of its profile, EXIF, XMP and IPTC: what a file that keeps them holds."""
        blobs = (self.icc_profile, self.exif, self.xmp, self.iptc)
        return sum(len(blob) for blob in blobs if blob is not None)

    def exif_for(self, size: tuple[int, int] | None) -> bytes | None:
        """The EXIF of an image of `size` (width, height), its image size that one (exif_sized)."""
        if self.exif is None or size is None:
            return self.exif
        return exif_sized(self.exif, *size) or self.exif

    def xmp_for(self, size: tuple[int, int] | None) -> bytes | None:
        """The XMP packet of an image of `size` (width, height) and its resolution (xmp_sized)."""
        if self.xmp is None or size is None:
            return self.xmp
        return xmp_sized(self.xmp, *size, dpi_or_exifs(self.dpi, self.exif))

    def pillow_options(self, size: tuple[int, int] | None = None) -> dict:
        """Pillow ``save`` options (JPEG) that hold what a JPEG of `size` holds of it
        (:meth:`held_by`)."""
        held, options = self.held_by("jpg"), {}
        if held.icc_profile is not None:
            options["icc_profile"] = held.icc_profile
        if held.dpi is not None:
            options["dpi"] = held.dpi
        if held.exif is not None:
            options["exif"] = b"Exif\0\0" + held.exif_for(size)
        if held.xmp is not None:
            sized = self.xmp_for(size)  # its resolution too, where no JFIF density holds it
            # Its size and resolution overflow: its padding goes (it then fits: fits_jpeg).
            options["xmp"] = sized if len(sized) <= JPEG_XMP_BYTES else without_padding(sized)
        if held.iptc is not None:
            options["extra"] = iim.photoshop_segment(held.iptc)
        if held.comments is not None:  # before convcli's own comment, its marker
            options["extra"] = options.get("extra", b"") + comment_segments(held.comments)
        if held.jpeg is not None:
            options.update(held.jpeg.pillow_options())
        return options

    @property
    def ome_tiff(self) -> bool:
        """Whether a TIFF of it is an OME-TIFF: :attr:`ome`, or a physical size to hold."""
        return self.ome or self.physical is not None

    def tiff_writer_options(self) -> dict:
        """tifffile ``TiffWriter`` options: an OME-TIFF where it is one (:attr:`ome_tiff`)."""
        return {"ome": True} if self.ome_tiff else {}


@functools.lru_cache(maxsize=16)
def _profile_description(icc_profile: bytes) -> str:
    """The description an ICC profile gives itself, read once for all the outputs that keep
    it (its chunks, the note, the manifest's records)."""
    try:
        from PIL import ImageCms

        profile = ImageCms.ImageCmsProfile(io.BytesIO(icc_profile))
        return ImageCms.getProfileDescription(profile).strip() or "unnamed"
    except (ImportError, OSError, ValueError, TypeError):
        return "unnamed"


NOTHING = Carried()
"""Nothing carried."""


def _tiff_text(carried: Carried) -> tuple[tuple[int, bytes], ...] | None:
    """The text tags of `carried`'s EXIF, else of its PNG text, that a TIFF of it holds: not
    its ImageDescription in an OME-TIFF, whose ImageDescription holds the OME-XML."""
    text = {
        **tiff_tags(carried.png_text),
        **dict(carried.tiff_text or exif_text(carried.exif) or ()),
    }
    ome = carried.ome_tiff
    kept = [(code, text[code]) for code in sorted(text) if not (ome and code == IMAGE_DESCRIPTION)]
    return tuple(kept) or None


def _comments_within(comments: tuple[bytes, ...] | None) -> tuple[bytes, ...] | None:
    """`comments` where a JPEG's COM segments hold each (65533 bytes), else None (a GIF's
    comment has no limit): all or none, so that a loss is said."""
    return comments if comments and max(map(len, comments)) <= COMMENT_BYTES else None


def _within(value: bytes | None, limit: int) -> bytes | None:
    """`value` where it is at most `limit` bytes (a JPEG segment's room), else None."""
    return value if value is not None and len(value) <= limit else None


def tiff_options(kept: Carried, size: tuple[int, int] | None = None) -> dict:
    """tifffile ``write`` options that hold what a TIFF of `size` (width, height) keeps
    (`kept`): the profile, the resolution, the XMP and IPTC, the georeference and, in an
    OME-TIFF (:meth:`Carried.tiff_writer_options`), the physical size."""
    options: dict = {}
    if kept.ome_tiff:
        options["metadata"] = {} if kept.physical is None else kept.physical.ome_metadata()
    if kept.icc_profile is not None:
        options["iccprofile"] = kept.icc_profile
    if kept.dpi is not None and kept.per_cm:
        options["resolution"] = (kept.dpi[0] / 2.54, kept.dpi[1] / 2.54)
        options["resolutionunit"] = "CENTIMETER"
    elif kept.dpi is not None:
        options["resolution"] = kept.dpi
        options["resolutionunit"] = "INCH"
    extratags = [] if kept.geo is None else kept.geo.extratags()
    if kept.xmp is not None:
        packet = kept.xmp_for(size)
        extratags.append((XMP_TAG, "B", len(packet), packet, True))
    if kept.iptc is not None:  # UNDEFINED: the records' bytes in any byte order
        extratags.append((iim.IPTC_TAG, 7, len(kept.iptc), kept.iptc, True))
    for code, text in _tiff_text(kept) or ():
        extratags.append((code, "s", 0, text, True))
    turned = exif_orientation(kept.exif)  # frames as stored (an animation's): viewers turn them
    if turned not in (None, 1):
        extratags.append((ORIENTATION, "H", 1, turned, True))
    if extratags:
        options["extratags"] = extratags
    return options


def kept_text(kept: Carried) -> str:
    """What an output kept of what its input carries (`kept`), in words ("" for nothing)."""
    said = []
    if kept.icc_profile is not None:
        said.append(f"colour profile {kept.profile_name()!r}")
    if kept.png_colour is not None:
        kinds = [kind.decode() for kind, _ in kept.png_colour]  # "cHRM, gAMA and sRGB"
        said.append(" and ".join(filter(None, [", ".join(kinds[:-1]), kinds[-1]])))
    if kept.dpi is not None:
        said.append(f"{_number(kept.dpi[0])}x{_number(kept.dpi[1])} dpi")
    said += [
        name
        for name, held in (("EXIF", kept.exif), ("XMP", kept.xmp), ("IPTC", kept.iptc))
        if held is not None
    ]
    if kept.geo is not None:
        said.append(kept.geo.kept_text())
    if kept.physical is not None:
        said.append(f"pixel size {kept.physical.text()}")
    if kept.png_text is not None:
        said.append(f"PNG text ({', '.join(keywords(kept.png_text))})")
    if kept.comments is not None:
        said.append("comment")
    if kept.tiff_text is not None:
        said.append(f"TIFF tags ({', '.join(TIFF_TEXT_TAGS[code] for code, _ in kept.tiff_text)})")
    return ", ".join(said)  # not the JPEG coding: every JPEG has one, the manifest says it


def kept_record(kept: Carried) -> dict:
    """What the manifest says an output kept (`kept`): the profile's name, the dpi, EXIF,
    XMP and IPTC kept, the coordinate system and the output's grid on the ground, the physical
    pixel size."""
    record: dict = {}
    if kept.icc_profile is not None:
        record["colour_profile"] = kept.profile_name()
    if kept.png_colour is not None:
        record["png_colour"] = [kind.decode() for kind, _ in kept.png_colour]
    if kept.dpi is not None:
        record["dpi"] = [round(d, 6) for d in kept.dpi]
    record.update({"exif": True} if kept.exif is not None else {})
    record.update({"xmp": True} if kept.xmp is not None else {})
    record.update({"iptc": True} if kept.iptc is not None else {})
    if kept.geo is not None:
        record.update(kept.geo.record())
    if kept.physical is not None:
        record["physical_size"] = kept.physical.record()
    if kept.ome:
        record["ome"] = True
    if kept.jpeg is not None:
        record["jpeg_quality"] = kept.jpeg.quality
    if kept.png_text is not None:
        record["png_text"] = keywords(kept.png_text)
    record.update({"comment": True} if kept.comments is not None else {})
    if kept.tiff_text is not None:
        record["tiff_tags"] = [TIFF_TEXT_TAGS[code] for code, _ in kept.tiff_text]
    return record


def _number(value: float) -> str:
    """A dpi as said: to a tenth (PNG's pixels a metre make 96 dpi 96.012)."""
    return f"{round(value, 1):g}"


def from_pillow(im, *, upright: bool = True) -> Carried:
    """What the Pillow image `im` (opened, not necessarily loaded) carries: its profile and
    resolution (:func:`from_pillow_info`), its EXIF and a JPEG's coding.

    Raises OSError where reading a PNG's EXIF, which makes Pillow decode its pixels (an
    ``eXIf`` chunk may follow them), finds them corrupt: the pixels Pillow then keeps are
    what it decoded before the error. A chunk after the pixels cut short costs the EXIF
    alone.

    `upright`: its pixels are turned upright (a picture), so the EXIF's orientation is set
    to 1; else (the frames of a stack, as stored) it is kept.
    """
    header = from_pillow_info(im)
    try:
        found = im.getexif()
    except OSError as exc:
        # Pillow decodes a PNG to find its EXIF: its decoder's error ("... when reading image
        # file") is of the pixels; a chunk after them cut short (the pixels whole) is not.
        if im.format == "PNG" and str(exc).endswith("when reading image file"):
            raise
        return header
    except (ValueError, TypeError, KeyError, struct.error):
        return header
    dpi = header.dpi
    if im.format == "JPEG" and im.info.get("jfif_unit") not in (1, 2) and 0x011A not in found:
        dpi = None  # Pillow's 72 where the file gives an aspect ratio only, not a density
    if dpi is not None and upright and found.get(ORIENTATION) in TURNS:  # across is down
        dpi = (dpi[1], dpi[0])
    # A TIFF's EXIF is its own directory: its camera's tags alone, as tifffile's pages give
    kept_tags = tiff_exif_tags(found.get(IMAGE_DESCRIPTION)) + (EXIF_IFD, GPS_IFD)
    only = frozenset(kept_tags) if im.format == "TIFF" else None
    exif = _upright_exif(found, upright, only)
    # Its orientation fields are 1 where Pillow turned the pixels by an orientation, EXIF's
    # or its own (`tiff:Orientation="6"`); one Pillow does not read leaves them as they are.
    xmp = xmp_packet(im.info.get("xmp"), upright and found.get(ORIENTATION) is not None)
    png_text, unkept = pillow_text(im)
    if im.format == "JPEG" and xmp is not None and b"HasExtendedXMP" in xmp:  # more APP1s
        unkept += ("extended XMP",)
    unkept += gdal_unkept(pillow_tags(im.tag_v2)) if im.format == "TIFF" else ()
    unkept += unitless_aspect(im, upright and found.get(ORIENTATION) in TURNS)
    turned = upright and found.get(ORIENTATION) in range(2, 9)
    return replace(
        header,
        geo=pillow_geo(im, turned)[0],
        dpi=dpi,
        exif=exif,
        jpeg=jpeg_coding(im),
        xmp=xmp,
        iptc=_iptc(im),
        png_text=png_text,
        comments=comments_of(im, MARKER.encode()),
        unkept=unkept,
    )


def _iptc(im) -> bytes | None:
    """The IPTC-IIM records of the Pillow image `im`: a JPEG's IPTC-NAA resource, a TIFF's
    tag 33723, a PNG's raw profile text; None for none."""
    if im.format == "TIFF":
        return iim.iptc_bytes(im.tag_v2.get(iim.IPTC_TAG), getattr(im.tag_v2, "_endian", "<"))
    if im.format == "PNG":
        return iim.png_iptc(im.info.get(iim.PNG_IPTC_KEYWORD))
    found = (im.info.get("photoshop") or {}).get(iim.IPTC_RESOURCE)
    return iim.iptc_bytes(found, ">")


def _upright_exif(found, upright: bool = True, only=None) -> bytes | None:
    """Pillow's EXIF `found`, with its camera (dates, exposure) and GPS blocks and orientation
    1 (or as it is, not `upright`), as bytes; None where there is none, or it cannot be
    written again. `only`: the tags of its first directory to keep (all where None)."""
    if not len(found):
        return None
    try:
        tags = exif_tags(exif_bytes(found))  # a copy: Pillow's own turns the pixels upright
        for code in [code for code in tags if only is not None and code not in only]:
            del tags[code]  # the width, strips and compression of the file read, not of ours
        if not len(tags):
            return None  # a TIFF's structure alone: no EXIF, not even an orientation
        if upright and tags.get(ORIENTATION) in TURNS:  # the resolution across is down
            if 282 in tags and 283 in tags:
                tags[282], tags[283] = tags[283], tags[282]
            turned_focal_plane(tags)
        if upright:
            tags[ORIENTATION] = 1
        exif = exif_bytes(tags)
    except (OSError, ValueError, TypeError, KeyError, struct.error):
        return None
    return without_exif_header(exif)


def from_pillow_info(im) -> Carried:
    """The colour profile, resolution and an OME-TIFF's physical size of the Pillow image
    `im`, read from its header alone (no EXIF: the frames of a stack have no orientation of
    their own)."""
    # A TIFF's page's own: Pillow keeps an earlier page's profile in `info` past a page without
    icc = (im.tag_v2.get(34675) if im.format == "TIFF" else im.info.get("icc_profile")) or None
    description = im.tag_v2.get(270) if im.format == "TIFF" else None  # ImageDescription
    ome = (
        isinstance(description, str)
        and description.lstrip().startswith("<?xml")
        and "<OME" in description
    )
    return Carried(
        bytes(icc) if icc else None,
        _pillow_tiff_dpi(im.tag_v2) if im.format == "TIFF" else dpi_of(im.info.get("dpi")),
        physical=physical_size(description) if ome else None,
        ome=ome,
        per_cm=im.format == "TIFF" and im.tag_v2.get(296) == 3,  # ResolutionUnit
        png_colour=_png_colour(im.info) if im.format == "PNG" else None,
    )


def _pillow_tiff_dpi(tags) -> tuple[float, float] | None:
    """A TIFF page's dpi from its own tags (Pillow keeps an earlier page's in ``info`` past a
    page that gives none): no unit is inches, as Pillow reads it."""
    x, y = tags.get(282), tags.get(283)
    return None if x is None or y is None else tiff_dpi(float(x), float(y), tags.get(296, 2))


def tiff_dpi(x: float, y: float, unit) -> tuple[float, float] | None:
    """Dots per inch from a TIFF's X/YResolution in its ResolutionUnit (2: inch, 3:
    centimetre); None in any other unit, or none."""
    if unit not in (2, 3):
        return None
    per_unit = 1.0 if unit == 2 else 2.54
    return dpi_of([x * per_unit, y * per_unit])


def _png_colour(info: dict) -> tuple[tuple[bytes, bytes], ...] | None:
    """A PNG's cHRM, gAMA and sRGB chunks (kind, data) from Pillow's `info`, or None."""
    chunks = []
    try:
        if info.get("chromaticity") is not None:
            points = [round(v * 100000) for v in info["chromaticity"]]
            chunks.append((b"cHRM", struct.pack(">8I", *points)))
        if info.get("gamma"):
            chunks.append((b"gAMA", struct.pack(">I", round(info["gamma"] * 100000))))
        if info.get("srgb") is not None:
            chunks.append((b"sRGB", struct.pack(">B", info["srgb"])))
    except (TypeError, ValueError, struct.error):
        return None  # out of range for its chunk: a file that is not as the format says
    return tuple(chunks) or None


def dpi_of(value) -> tuple[float, float] | None:
    """Pixels per inch from Pillow's ``dpi`` (None, or 0 and 1 where the file has none)."""
    try:
        x, y = (float(v) for v in value)
    except (TypeError, ValueError):
        return None
    return (x, y) if x > 1 and y > 1 else None
