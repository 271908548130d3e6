"""GDAL's nodata value in the float values a TIFF output holds (:func:`missing_as_nodata`)."""

from __future__ import annotations

import numpy as np

from ..layers.validation import FLOAT32_MAX


def missing_as_nodata(values: np.ndarray, nodata: float) -> np.ndarray:
    """Float `values` as a TIFF with GDAL's `nodata` value holds them: the missing ones (NaN)
    as that value, and no valid one equal to it.

    A valid value equal to `nodata` (a conv's 0 where the nodata value is 0)
    goes to the next float32 value above it (below, for the largest), as a
    Byte file's level does (:func:`convcli.app.outputs.kept_missing`), so that
    readers mask the missing pixels only.

    >>> values = np.array([np.nan, 0.0, 2.5], np.float32)
    >>> missing_as_nodata(values, 0.0).tolist()
    [0.0, 1.401298464324817e-45, 2.5]
    """
    marker = np.float32(nodata)
    written = np.where(np.isnan(values), marker, values).astype(np.float32, copy=False)
    clash = values == marker
    if clash.any():
        away = np.float32(-np.inf) if marker >= FLOAT32_MAX else np.float32(np.inf)
        written[clash] = np.nextafter(marker, away)
    return written
