"""Helpers of the readers that read an image's rows band by band (TIFF, Zarr).

A source of rows has ``height``, ``width`` and ``read_rows(r0, r1)``, the
(r1 - r0, width, C) float32 rows (:class:`convcli.io.regions.RegionSource`,
:class:`convcli.io.zarr_regions.StoreRegions`).
"""

from __future__ import annotations

import numpy as np

_WHITE_BAND_PIXELS = 1 << 22  # pixels a band holds while the float white is searched


def float_white(source, least: float = 1.0) -> float:
    """The white of a float image read by rows: the larger of `least` and its largest finite value.

    `source` has ``height``, ``width`` and ``read_rows``; it is read once,
    band by band, as ``read_image`` finds the white of a float TIFF.
    """
    band = max(1, _WHITE_BAND_PIXELS // source.width)
    top = least
    for start in range(0, source.height, band):
        values = source.read_rows(start, min(start + band, source.height))
        finite = values[np.isfinite(values)]
        if finite.size:
            top = max(top, float(finite.max()))
    return top


def check_rows(r0, r1, height: int) -> None:
    """A ValueError unless rows `r0` to `r1` (excluded) are integers with
    ``0 <= r0 <= r1 <= height``: the rows ``read_rows`` may be asked for."""
    if not (
        isinstance(r0, (int, np.integer))
        and isinstance(r1, (int, np.integer))
        and 0 <= r0 <= r1 <= height
    ):
        raise ValueError(f"rows must satisfy 0 <= r0 <= r1 <= {height}; got r0={r0!r}, r1={r1!r}")
