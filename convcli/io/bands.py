"""Helpers of the readers that read an image's rows band by band (TIFF, Zarr), and of associated
alpha undone a band at a time (:func:`unassociated`).

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


def unassociated(samples: np.ndarray, top: int) -> np.ndarray:
    """Integer `samples` (rows, width, C) whose last channel is associated (premultiplied)
    alpha, each colour divided by it: ``round(c * top / alpha)``, at most `top`, and 0 where
    alpha is 0, as Pillow reads an 8-bit ``RGBa`` TIFF as ``RGBA`` (it cuts where this rounds).

    >>> unassociated(np.array([[[13107, 32768], [100, 0], [65535, 65535]]], np.uint16), 65535)
    array([[[26214, 32768],
            [    0,     0],
            [65535, 65535]]], dtype=uint16)
    """
    result = np.empty_like(samples)
    row_size = int(np.prod(samples.shape[1:]))
    rows = max(1, (1 << 20) // max(1, row_size))  # int64 blocks of about 8 MB
    for r in range(0, len(samples), rows):
        block = samples[r : r + rows].astype(np.int64)
        alpha = block[..., -1:]
        colour = (block[..., :-1] * (2 * top) + alpha) // np.maximum(2 * alpha, 1)
        result[r : r + rows, ..., :-1] = np.where(alpha == 0, 0, np.minimum(colour, top))
        result[r : r + rows, ..., -1] = block[..., -1]
    return result
