"""A GeoTIFF's georeference and GDAL's nodata value (:class:`GeoTags`), read from a TIFF
page's tags (:func:`geo_tags`) and written back for an output's pixel grid.

GeoTIFF places the pixel grid on the ground in one of three ways, all kept: a pixel scale
and one tiepoint (a north-up grid), a transformation matrix (ModelTransformationTag: a
rotated or sheared grid, as GDAL writes one), or tiepoints alone (ground control points).
The keys that name the coordinate system are kept as they are. GDAL's nodata value is kept
with them, or alone in a TIFF that has no georeference, and so are the scale, offset and
unit GDAL gives a band's values (GDAL_METADATA's items of those roles: a DEM of Int16
centimetres, scale 0.01), which say what the values are.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

# GeoTIFF's tags: ModelPixelScale, ModelTiepoint, ModelTransformation, GeoKeyDirectory,
# GeoDoubleParams, GeoAsciiParams; GDAL's nodata value.
PIXEL_SCALE, TIEPOINT, TRANSFORMATION, GEO_KEYS, GEO_DOUBLES, GEO_ASCII, GDAL_NODATA = (
    33550,
    33922,
    34264,
    34735,
    34736,
    34737,
    42113,
)
GDAL_METADATA = 42112
_RASTER_TYPE_KEY, _PIXEL_IS_POINT = 1025, 2
# GeoKeys: the model type (1 projected, 2 geographic), the systems' EPSG codes, and the
# code of a system the file defines itself.
_MODEL_TYPE, _PROJECTED, _GEODETIC_CRS, _PROJECTED_CRS, _USER_DEFINED = 1024, 1, 2048, 3072, 32767
_VALUE_ROLES = ("scale", "offset", "unittype")  # GDAL_METADATA's roles kept: what values are


@dataclass(frozen=True)
class GeoTags:
    """A GeoTIFF's georeference and GDAL's nodata value, as its tags give them.

    Attributes
    ----------
    scale : (float, float, float) or None
        ModelPixelScale: the pixel's size on the ground (with one tiepoint).
    tiepoint : tuple of float or None
        ModelTiepoint: (i, j, k, x, y, z) for each point, raster then ground.
    keys : tuple of int
        GeoKeyDirectory, kept as it is; empty for GDAL's nodata value alone.
    doubles, ascii
        GeoDoubleParams and GeoAsciiParams, kept as they are.
    nodata : str
        GDAL's nodata value, as written ("" for none).
    matrix : tuple of 16 float or None
        ModelTransformation, row by row: raster (i, j, k, 1) to the ground.
    values : tuple of (int, str, str)
        GDAL's scale, offset and unit of the bands' values: (sample, role, text) for each
        item of GDAL_METADATA whose role is ``scale``, ``offset`` or ``unittype``.
    """

    scale: tuple[float, float, float] | None = None
    tiepoint: tuple[float, ...] | None = None
    keys: tuple[int, ...] = ()
    doubles: tuple[float, ...] = ()
    ascii: str = ""
    nodata: str = ""
    matrix: tuple[float, ...] | None = None
    values: tuple[tuple[int, str, str], ...] = ()

    @property
    def placed(self) -> bool:
        """Whether it places the pixels on the ground (else: GDAL's nodata value alone)."""
        return bool(self.keys) or self.matrix is not None or self.tiepoint is not None

    def unplaced(self) -> GeoTags | None:
        """The same without its place on the ground (a grid of the pixels as stored, where
        they are read turned): GDAL's nodata value and band values alone, or None."""
        unplaced = GeoTags(nodata=self.nodata, values=self.values)
        return unplaced if unplaced.holds_anything else None

    @property
    def holds_anything(self) -> bool:
        """Whether it places the pixels, or gives a nodata value or band values."""
        return self.placed or bool(self.nodata) or bool(self.values)

    @property
    def pixel_is_point(self) -> bool:
        """Whether the raster coordinates name pixels' centres (GTRasterTypeGeoKey:
        PixelIsPoint)."""
        keys = self.keys
        for k in range(4, len(keys) - 3, 4):
            if keys[k] == _RASTER_TYPE_KEY and keys[k + 1] == 0:
                return keys[k + 3] == _PIXEL_IS_POINT
        return False

    @property
    def what(self) -> str:
        """What it is, in words: ``georeference``, or GDAL's ``nodata value``, and ``value
        scale and offset`` where it gives them (or them alone)."""
        first = "georeference" if self.placed else "nodata value" if self.nodata else ""
        return " and ".join(filter(None, [first, "value scale and offset" * bool(self.values)]))

    def kept_text(self) -> str:
        """What an output keeps of it, in words: ``georeference``, ``nodata -9999``, and
        ``value scale and offset``."""
        words = ["georeference"] if self.placed else [f"nodata {self.nodata}"] * bool(self.nodata)
        return ", ".join(words + ["value scale and offset"] * bool(self.values))

    def on_grid(self, step: int, top: float, left: float) -> GeoTags:
        """The same place on the ground for an output pixel grid (see
        :meth:`convcli.io.carried.Carried.on_grid`): output pixel (0, 0) at input raster
        coordinates (`top`, `left`), a pixel every `step` input pixels."""
        if self.pixel_is_point:  # centres: the first output pixel's centre, in pixel indices
            left, top = left + (step - 1) / 2, top + (step - 1) / 2
        if self.matrix is not None:  # ground = matrix @ (left + step * i, top + step * j, k, 1)
            m = np.array(self.matrix, dtype=np.float64).reshape(4, 4)
            m[:, 3] += m[:, 0] * left + m[:, 1] * top
            m[:, :2] *= step
            return replace(self, matrix=tuple(float(v) for v in m.ravel()))
        if self.tiepoint is None:
            return self
        if self.scale is None:  # control points: each at its place in the output's pixels
            points = np.array(self.tiepoint, dtype=np.float64).reshape(-1, 6)
            points[:, 0] = (points[:, 0] - left) / step
            points[:, 1] = (points[:, 1] - top) / step
            return replace(self, tiepoint=tuple(float(v) for v in points.ravel()))
        i, j, k, x, y, z = self.tiepoint
        sx, sy, sz = self.scale
        return replace(
            self,
            scale=(sx * step, sy * step, sz),
            tiepoint=(0.0, 0.0, k, x + (left - i) * sx, y - (top - j) * sy, z),
        )

    def for_bands(self, bands: tuple[int | None, ...]) -> GeoTags:
        """The same with the scale and offset of input band ``bands[k]`` given for sample k
        (none for a None).

        >>> scaled = GeoTags(values=((0, "scale", "0.01"), (2, "scale", "2")))
        >>> scaled.for_bands((2,)).values, scaled.for_bands((None,)).values
        (((0, 'scale', '2'),), ())
        """
        values = tuple(
            (sample, role, text)
            for sample, band in enumerate(bands)
            for given, role, text in self.values
            if band is not None and given == band
        )
        return replace(self, values=values)

    def _crs(self) -> str | None:
        """The EPSG code of the system the model type (GTModelTypeGeoKey) names: the projected
        one's (ProjectedCRSGeoKey) or the geographic one's (GeodeticCRSGeoKey), which a
        projected file gives too, as its projection's base; None for a user-defined system.

        >>> utm = (1, 1, 0, 3, 1024, 0, 1, 1, 2048, 0, 1, 4326, 3072, 0, 1, 32633)
        >>> GeoTags(keys=utm)._crs(), GeoTags(keys=utm[:4] + (1024, 0, 1, 2) + utm[8:])._crs()
        ('EPSG:32633', 'EPSG:4326')
        """
        codes = {
            self.keys[k]: self.keys[k + 3]
            for k in range(4, len(self.keys) - 3, 4)
            if self.keys[k + 1] == 0
        }
        model = codes.get(_MODEL_TYPE)
        if model == _PROJECTED or model is None:
            code = codes.get(_PROJECTED_CRS, codes.get(_GEODETIC_CRS))
        else:
            code = codes.get(_GEODETIC_CRS)
        return f"EPSG:{code}" if code and code != _USER_DEFINED else None

    def geotransform(self) -> list[float] | None:
        """GDAL's geotransform (x of the top-left corner, pixel width, row rotation, y of
        the corner, column rotation, pixel height), where the grid is affine; else None.

        Always of the top-left pixel's corner, as GDAL reads it: where the raster
        coordinates name pixels' centres (PixelIsPoint), half a pixel up and left of them.
        """
        if self.matrix is not None:
            m = self.matrix
            transform = [m[3], m[0], m[1], m[7], m[4], m[5]]
        elif self.scale is None or self.tiepoint is None:
            return None
        else:
            i, j, _, x, y, _ = self.tiepoint
            sx, sy = self.scale[:2]
            transform = [x - i * sx, sx, 0.0, y + j * sy, 0.0, -sy]
        if self.pixel_is_point:
            transform[0] -= (transform[1] + transform[2]) / 2
            transform[3] -= (transform[4] + transform[5]) / 2
        return transform

    def record(self) -> dict:
        """What the manifest says of it: the coordinate system (an EPSG code where the keys
        give one), the grid as the file gives it (pixel size and tiepoint, transformation
        matrix, or control points; ``"area_or_point": "Point"``, as GDAL says it, where its
        raster coordinates name pixels' centres) and GDAL's nodata value."""
        record: dict = {}
        if self.placed:
            record["crs"] = self._crs()
            if self.pixel_is_point:
                record["area_or_point"] = "Point"
        if self.matrix is not None:
            record["transformation"] = list(self.matrix)
        elif self.tiepoint is not None and self.scale is not None:
            record["pixel_size"] = list(self.scale[:2])
            record["tiepoint"] = list(self.tiepoint)
        elif self.tiepoint is not None:
            record["control_points"] = list(self.tiepoint)
        if self.nodata:
            record["nodata"] = number_or_text(self.nodata)
        if self.values:
            bands: dict[int, dict] = {}
            for sample, role, text in self.values:
                bands.setdefault(sample, {"band": sample})[role] = number_or_text(text)
            record["band_values"] = [bands[k] for k in sorted(bands)]
        return record

    def attributes(self) -> dict:
        """What a Zarr store's attributes say of it: :meth:`record` and, where the grid is
        affine, GDAL's geotransform."""
        transform = self.geotransform()
        return {**self.record(), **({"geotransform": transform} if transform else {})}

    def extratags(self) -> list[tuple]:
        """tifffile ``extratags`` that write it."""
        tags = []
        if self.scale is not None:
            tags.append((PIXEL_SCALE, "d", 3, self.scale, True))
        if self.tiepoint is not None:
            tags.append((TIEPOINT, "d", len(self.tiepoint), self.tiepoint, True))
        if self.matrix is not None:
            tags.append((TRANSFORMATION, "d", 16, self.matrix, True))
        if self.keys:
            tags.append((GEO_KEYS, "H", len(self.keys), self.keys, True))
        if self.doubles:
            tags.append((GEO_DOUBLES, "d", len(self.doubles), self.doubles, True))
        if self.ascii:
            tags.append((GEO_ASCII, "s", 0, self.ascii, True))
        if self.nodata:
            tags.append((GDAL_NODATA, "s", 0, self.nodata, True))
        if self.values:
            tags.append((GDAL_METADATA, "s", 0, _gdal_metadata(self.values), True))
        return tags


def geo_tags(tags) -> GeoTags | None:
    """The georeference and nodata value of a TIFF page's `tags` (tifffile's), or None.

    A grid is read where the tags give one: a transformation matrix of 16 values, or
    tiepoints (six values each) with or without a pixel scale; with a pixel scale, one
    tiepoint. Tags that give none (a pixel scale without a tiepoint, say) are no
    georeference: the keys are then not kept either, as they would name a system with
    no grid in it.
    """
    scale, tiepoint, matrix, keys = (
        tags.get(code) for code in (PIXEL_SCALE, TIEPOINT, TRANSFORMATION, GEO_KEYS)
    )
    doubles, ascii_, nodata = (tags.get(code) for code in (GEO_DOUBLES, GEO_ASCII, GDAL_NODATA))
    nodata_text = str(nodata.value).strip("\0 ") if nodata is not None else ""
    values = band_values(tags)
    points = _floats(tiepoint)
    grid = {}
    if matrix is not None and len(matrix.value) == 16:
        grid = {"matrix": _floats(matrix)}
    elif points and len(points) % 6 == 0 and (scale is None or len(points) == 6):
        grid = {"tiepoint": points, "scale": _floats(scale) if scale is not None else None}
    if grid and keys is not None:
        return GeoTags(
            keys=tuple(int(v) for v in keys.value),
            doubles=_floats(doubles) or (),
            ascii=str(ascii_.value) if ascii_ is not None else "",
            nodata=nodata_text,
            values=values,
            **grid,
        )
    return GeoTags(nodata=nodata_text, values=values) if nodata_text or values else None


TURNED_GEO_NOTE = (
    "its georeference not kept: it places the pixels as stored, which its Orientation turns"
)


def pillow_geo(im, turned: bool) -> tuple[GeoTags | None, tuple[str, ...]]:
    """The georeference and GDAL nodata value of the TIFF page Pillow's `im` reads (None
    for another format), and the notes of what of them is not kept: a grid, which places
    the pixels as stored, where they are `turned` upright; a palette's nodata index, where
    its colours are read."""
    geo = pillow_geo_tags(im.tag_v2) if im.format == "TIFF" else None
    notes: tuple[str, ...] = ()
    if geo is not None and geo.placed and turned:
        notes += (TURNED_GEO_NOTE,)
        geo = geo.unplaced()
    if geo is not None and geo.nodata and im.mode in _READ_AS:  # a value of other samples
        notes += (f"its nodata value not kept: its {_READ_AS[im.mode]}",)
        geo = replace(geo, nodata="")
    return (geo if geo is not None and geo.holds_anything else None), notes


# Pillow's modes whose samples are read as other values, in words.
_READ_AS = {
    "P": "palette is read as colours",
    "PA": "palette is read as colours",
    "CMYK": "CMYK is read as RGB",
    "YCbCr": "YCbCr is read as RGB",
    "LAB": "Lab is read as RGB",
    "1": "bilevel samples are read as 0 and 255",
}


def pillow_geo_tags(tags) -> GeoTags | None:
    """:func:`geo_tags` of a TIFF page's tags as Pillow gives them (``tag_v2``)."""
    return geo_tags(pillow_tags(tags))


def pillow_tags(tags):
    """A TIFF page's tags as Pillow gives them (``tag_v2``: values, a one-value tag's as a
    number) as tifffile's are read here: ``tags.get(code).value``, a tuple."""

    class Tag:
        def __init__(self, value):
            self.value = (value,) if isinstance(value, (int, float)) else value

    class Tags:
        def get(self, code):
            value = tags.get(code)
            return None if value is None else Tag(value)

    return Tags()


def band_values(tags) -> tuple[tuple[int, str, str], ...]:
    """The scale, offset and unit GDAL gives each band's values in a TIFF page's `tags`
    (the items of GDAL_METADATA with those roles), as (sample, role, text); none where
    the tag is missing or is not GDAL's XML."""
    found = []
    for item in _gdal_items(tags):
        role, sample, text = item.get("role"), item.get("sample", ""), (item.text or "").strip()
        if role in _VALUE_ROLES and sample.isdigit() and text:
            found.append((int(sample), role, text))
    return tuple(sorted(found))


def gdal_unkept(tags) -> tuple[str, ...]:
    """What of GDAL_METADATA in a TIFF page's `tags` no output keeps, in words (its items
    but a band's scale, offset and unit: a dataset's source, GDAL's copies of EXIF ...)."""
    names = [
        item.get("name", "?")
        for item in _gdal_items(tags)
        if not (item.get("role") in _VALUE_ROLES and item.get("sample", "").isdigit())
    ]
    if not names:
        return ()
    listed = ", ".join(dict.fromkeys(names[:4])) + (", ..." if len(names) > 4 else "")
    return (f"GDAL metadata ({listed})",)


def _gdal_items(tags) -> list:
    """The Item elements of GDAL_METADATA's XML in a TIFF page's `tags`; none where the tag
    is missing or is not GDAL's XML."""
    tag = tags.get(GDAL_METADATA)
    if tag is None or not isinstance(tag.value, str) or "<GDALMetadata" not in tag.value:
        return []
    from xml.etree import ElementTree  # only for GDAL's metadata

    try:
        return list(ElementTree.fromstring(tag.value.strip("\0 ")).iter("Item"))
    except (ElementTree.ParseError, ValueError):
        return []


def _gdal_metadata(values: tuple[tuple[int, str, str], ...]) -> str:
    """GDAL_METADATA's XML holding `values` (:attr:`GeoTags.values`)."""
    from xml.sax.saxutils import escape

    items = [
        f'  <Item name="{role.upper()}" sample="{sample}" role="{role}">{escape(text)}</Item>'
        for sample, role, text in values
    ]
    return "\n".join(["<GDALMetadata>", *items, "</GDALMetadata>"])


def _floats(tag) -> tuple[float, ...] | None:
    return None if tag is None else tuple(float(v) for v in tag.value)


def number_or_text(text: str) -> float | str:
    """`text` as a number, or as it is where it gives no finite one ("nan": JSON has none)."""
    try:
        number = float(text)
    except ValueError:
        return text
    return number if np.isfinite(number) else text
