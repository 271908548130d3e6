"""The OME-Zarr attributes of a written store, and the physical size an OME-Zarr image gives.

:func:`ome_attributes` writes OME-Zarr 0.4's ``multiscales`` (axes, with
units where the image has a physical size; each level's scale, and the
translation of its pixel (0, 0)'s centre) and ``omero`` (a colour image's
channels, their colours and windows); :func:`physical_of` reads the physical
size back from an input store's ``multiscales``.
"""

from __future__ import annotations

import numpy as np

from .._version import __version__
from .carried import NOTHING, Carried
from .physical import PhysicalSize, unit_symbol

OME_VERSION = "0.4"

_COLOURS = {"L": "FFFFFF", "A": "FFFFFF", "R": "FF0000", "G": "00FF00", "B": "0000FF"}
_CHANNELS = {2: "LA", 3: "RGB", 4: "RGBA"}
_WHITES = {np.dtype(np.uint8): 255, np.dtype(np.uint16): 65535}


def ome_attributes(
    shape: tuple[int, int, int], levels: int, carried: Carried = NOTHING, dtype=np.uint8
) -> dict:
    """The group attributes of a written store: OME-Zarr 0.4 ``multiscales``, ``omero`` for
    a colour image, and the marker.

    Parameters
    ----------
    shape : (int, int, int)
        The image's (H, W, C); the axes are y, x, and c first where C > 1.
    levels : int
        The datasets ``0`` .. ``levels - 1``, each half the size of the one above: level
        `k`'s scale ``2 ** k`` pixels of level 0, and its translation ``(2 ** k - 1) / 2``
        of them (where its pixel (0, 0)'s centre lies).
    carried : Carried
        A GeoTIFF's georeference on the output's grid, as ``"georeference"`` (its nodata
        value as the samples hold it: :meth:`~convcli.io.carried.Carried.for_samples`), and
        an OME image's physical size: the axes' units, the scales and translations in them;
        a Zarr store holds nothing else of it.
    dtype : numpy dtype
        The samples: the windows of ``omero``'s channels are 0 to 255, 0 to 65535, or 0
        to 1 for floats.
    """
    channel = shape[2] > 1
    grid = carried.physical or PhysicalSize(1.0, 1.0)
    units = grid.axis_units() if carried.physical is not None else (None, None)
    axes = ([{"name": "c", "type": "channel"}] if channel else []) + [
        {"name": name, "type": "space", **({"unit": unit} if unit else {})}
        for name, unit in zip("yx", units, strict=True)
    ]
    datasets = [
        {
            "path": str(level),
            "coordinateTransformations": [
                t
                for t in grid.transformations(level, channel)
                if t["type"] == "scale" or any(t["translation"])
            ],
        }
        for level in range(levels)
    ]
    attributes = {
        "multiscales": [
            {
                "version": OME_VERSION,
                "axes": axes,
                "datasets": datasets,
                "type": "mean",
                "metadata": {
                    "method": "2 x 2 means, the last odd row or column averaged with itself"
                },
            }
        ],
        "convcli": {"version": __version__},
    }
    if channel:
        attributes["omero"] = _omero(shape[2], dtype)
    if (geo := carried.for_samples(dtype).geo) is not None:  # a nodata value the samples hold
        attributes["georeference"] = geo.attributes()
    return attributes


def _omero(channels: int, dtype) -> dict:
    """OME-Zarr's ``omero`` of a colour image: each channel's name, colour and window (an
    alpha channel off)."""
    white = _WHITES.get(np.dtype(dtype), 1.0)
    return {
        "channels": [
            {
                "label": name,
                "color": _COLOURS[name],
                "active": name != "A",
                "coefficient": 1.0,
                "family": "linear",
                "inverted": False,
                "window": {"min": 0, "max": white, "start": 0, "end": white},
            }
            for name in _CHANNELS[channels]
        ],
        "rdefs": {"model": "color" if channels > 2 else "greyscale"},
    }


def physical_of(image: dict) -> PhysicalSize | None:
    """The physical size of an OME-Zarr image (one entry of ``multiscales``): its level 0's
    scale and translation on the y and x axes, then the image's own (applied after the
    level's, as OME-NGFF says), in their units; None where the axes have no units or the
    level no scale."""
    try:
        axes = [a if isinstance(a, dict) else {"name": a} for a in image["axes"]]
        names = [str(a.get("name", "")).lower() for a in axes]
        iy, ix = names.index("y"), names.index("x")
        found = _by_type(image["datasets"][0]["coordinateTransformations"])
        outer = _by_type(image.get("coordinateTransformations") or ())
        ones, zeros = [1.0] * len(names), [0.0] * len(names)
        outer_scale = [float(v) for v in outer.get("scale") or ones]
        outer_shift = [float(v) for v in outer.get("translation") or zeros]
        scale = [a * float(v) for a, v in zip(outer_scale, found.get("scale") or (), strict=False)]
        shift = zip(outer_scale, found.get("translation") or zeros, outer_shift, strict=False)
        origin = [a * float(v) + b for a, v, b in shift]
        y_unit, x_unit = axes[iy].get("unit"), axes[ix].get("unit")
    except (TypeError, KeyError, IndexError, ValueError, AttributeError):
        return None
    if not (y_unit and x_unit and len(scale) == len(origin) == len(names)):
        return None
    if not (scale[iy] > 0 and scale[ix] > 0):
        return None
    return PhysicalSize(
        scale[ix], scale[iy], unit_symbol(x_unit), unit_symbol(y_unit), (origin[iy], origin[ix])
    )


def _by_type(transformations) -> dict:
    """OME-NGFF coordinate transformations by type: ``{"scale": [...], "translation": [...]}``."""
    return {t.get("type"): t.get(t.get("type")) for t in transformations}
