"""A pixel's size on the specimen (OME's PhysicalSizeX/Y, :class:`PhysicalSize`), read from
OME-XML (:func:`physical_size`), and OME's length units.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# OME's length units (UnitsLength) and the names OME-Zarr's axes give them (UDUNITS-2).
_UNIT_NAMES = {
    "Ym": "yottameter",
    "Zm": "zettameter",
    "Em": "exameter",
    "Pm": "petameter",
    "Tm": "terameter",
    "Gm": "gigameter",
    "Mm": "megameter",
    "km": "kilometer",
    "hm": "hectometer",
    "dam": "decameter",
    "m": "meter",
    "dm": "decimeter",
    "cm": "centimeter",
    "mm": "millimeter",
    "\u00b5m": "micrometer",
    "nm": "nanometer",
    "pm": "picometer",
    "fm": "femtometer",
    "am": "attometer",
    "zm": "zeptometer",
    "ym": "yoctometer",
    "\u00c5": "angstrom",
    "in": "inch",
    "ft": "foot",
    "yd": "yard",
    "mi": "mile",
    "pc": "parsec",
}
_UNIT_SYMBOLS = {name: symbol for symbol, name in _UNIT_NAMES.items()}
_MICRO = {"\u03bcm": "\u00b5m", "um": "\u00b5m", "\u212b": "\u00c5"}  # other spellings


def unit_symbol(unit: str) -> str:
    """OME's symbol of a length `unit`: an OME symbol, its other spellings ("um") or
    OME-Zarr's name ("micrometer").

    >>> unit_symbol("micrometer"), unit_symbol("um"), unit_symbol("nm")
    ('\u00b5m', '\u00b5m', 'nm')
    """
    return _UNIT_SYMBOLS.get(unit, _MICRO.get(unit, unit))


@dataclass(frozen=True)
class PhysicalSize:
    """The size of a pixel on the specimen, and where pixel (0, 0)'s centre lies.

    Attributes
    ----------
    x, y : float
        The size across and down (OME's PhysicalSizeX and PhysicalSizeY).
    x_unit, y_unit : str
        Their units, as OME's symbols ("\u00b5m", "nm", ...).
    origin : (float, float)
        The position (y, x) of pixel (0, 0)'s centre, in those units: 0 in the
        input, moved by the window offsets and padding of an operation.
    """

    x: float
    y: float
    x_unit: str = "\u00b5m"
    y_unit: str = "\u00b5m"
    origin: tuple[float, float] = (0.0, 0.0)

    def on_grid(self, step: int, top: float, left: float) -> PhysicalSize:
        """The same specimen for an output pixel grid (see
        :meth:`convcli.io.carried.Carried.on_grid`): pixels `step` times as large, pixel
        (0, 0)'s centre at input pixel centre ``(top + (step - 1) / 2, left + (step - 1) / 2)``."""
        oy, ox = self.origin
        return replace(
            self,
            x=self.x * step,
            y=self.y * step,
            origin=(oy + (top + (step - 1) / 2) * self.y, ox + (left + (step - 1) / 2) * self.x),
        )

    def text(self) -> str:
        """Said in a note: "0.5x0.5 \u00b5m" ("0.5 \u00b5m x 1 nm" in two units)."""
        if self.x_unit == self.y_unit:
            return f"{self.x:g}x{self.y:g} {self.x_unit}"
        return f"{self.x:g} {self.x_unit} x {self.y:g} {self.y_unit}"

    def record(self) -> dict:
        """What the manifest says: the size and units across and down, and the origin."""
        return {
            "x": self.x,
            "y": self.y,
            "unit": [self.x_unit, self.y_unit],
            "origin": list(self.origin),
        }

    def ome_metadata(self) -> dict:
        """tifffile's OME ``metadata`` that hold the size and units."""
        return {
            "PhysicalSizeX": self.x,
            "PhysicalSizeXUnit": self.x_unit,
            "PhysicalSizeY": self.y,
            "PhysicalSizeYUnit": self.y_unit,
        }

    def axis_units(self) -> tuple[str | None, str | None]:
        """OME-Zarr's names of the units down and across (None for a unit it has no name
        of: pixels, light years)."""
        return _UNIT_NAMES.get(self.y_unit), _UNIT_NAMES.get(self.x_unit)

    def transformations(self, level: int, channel: bool) -> list[dict]:
        """OME-Zarr's ``coordinateTransformations`` of pyramid level `level` (each half
        the size of the one above), with a first axis of channels where `channel`: the
        scale, and the translation of its pixel (0, 0)'s centre (half a pixel of the
        level above, over and over)."""
        factor, lead = 2**level, [1.0] * channel
        shift = (factor - 1) / 2
        return [
            {"type": "scale", "scale": lead + [self.y * factor, self.x * factor]},
            {
                "type": "translation",
                "translation": [0.0] * channel
                + [self.origin[0] + shift * self.y, self.origin[1] + shift * self.x],
            },
        ]


def physical_size(ome_xml: str) -> PhysicalSize | None:
    """The physical size of the first image of an OME-XML document, or None where it has
    none (or the document cannot be read)."""
    from xml.etree import ElementTree  # only for OME-XML (5 ms to load)

    try:
        root = ElementTree.fromstring(ome_xml)
    except (ElementTree.ParseError, ValueError):
        return None
    pixels = next((e for e in root.iter() if e.tag.rsplit("}", 1)[-1] == "Pixels"), None)
    if pixels is None:
        return None
    try:
        x, y = (float(pixels.get(f"PhysicalSize{a}", "nan")) for a in "XY")
    except ValueError:
        return None
    if not (x > 0 and y > 0):
        return None
    return PhysicalSize(
        x, y, *(unit_symbol(pixels.get(f"PhysicalSize{a}Unit", "\u00b5m")) for a in "XY")
    )


def unitless_aspect(im, quarter: bool = False) -> tuple[str, ...]:
    """What no output keeps of the Pillow image `im`'s resolution without a unit, in words:
    the shape of its pixels (a PNG's pHYs of unit 0, a JPEG's JFIF density of units 0, a
    TIFF's resolution of ResolutionUnit 1), where they are not square; across is down
    where the picture is turned a `quarter`."""
    density = None
    if im.format == "PNG":
        density = im.info.get("aspect")
    elif im.format == "JPEG" and im.info.get("jfif_unit") == 0:
        density = im.info.get("jfif_density")
    elif im.format == "TIFF" and im.tag_v2.get(296) == 1:  # ResolutionUnit: none
        density = (im.tag_v2.get(282), im.tag_v2.get(283))
    return aspect_unkept(density[::-1] if quarter and density else density)


def aspect_unkept(density) -> tuple[str, ...]:
    """The words for a resolution of no unit, (across, down) pixels a unit, where its pixels
    are not square: ``pixel aspect ratio 2:1 (width to height)`` for (1, 2), pixels twice as
    wide as tall; none else."""
    try:
        across, down = (float(value) for value in density)
    except (TypeError, ValueError, ZeroDivisionError):
        return ()
    if not (across > 0 and down > 0) or across == down:
        return ()
    return (f"pixel aspect ratio {down / across:.4g}:1 (width to height)",)


def ome_unkept(xml: str | None) -> tuple[str, ...]:
    """What no output keeps of an OME-TIFF's OME-XML, in words: the order of its planes in
    Z, C and T (an output holds them as separate images), its channels' names, its Z
    spacing (PhysicalSizeZ)."""
    import re

    pixels = re.search(r"<Pixels\b[^>]*>", xml or "")
    if pixels is None:
        return ()
    sizes = [f"{axis} {n}" for axis, n in re.findall(r'\bSize([CZT])="(\d+)"', pixels[0])]
    planes = [size for size in sizes if int(size.split()[1]) > 1]
    names = re.findall(r'<Channel\b[^>]*\bName="([^"]*)"', xml)
    found = [f"OME plane order ({', '.join(planes)})"] * bool(planes)
    if names:
        found.append(f"OME channel names ({', '.join(names[:4])}{', ...' * (len(names) > 4)})")
    return (*found, *["OME Z spacing"] * ("PhysicalSizeZ=" in pixels[0]))
