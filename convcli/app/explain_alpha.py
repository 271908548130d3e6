"""What ``convcli explain``'s pool scripts do where the image has alpha, as convcli pools it.

Each script reads the image into ``pixels`` (H, W, C) and pools it into ``out``;
for an image with alpha (C of 2 or 4) these lines go before and after, so that
the script gives :class:`convcli.app.pad_pool.PoolOp`'s values: alpha pooled as
it is, the colours weighted by it (the largest visible one for max).
"""

from __future__ import annotations

ALPHA_POOL = {
    "average": ("""\
# Alpha (the last of 2 or 4 channels) is pooled as it is, and weighs the colours: each
# window's colour is sum(colour * alpha) / sum(alpha), so that the colour under
# transparent pixels never shows (pooled with alpha / white as one more channel).
has_alpha = pixels.shape[2] in (2, 4)
if has_alpha:
    weight = pixels[:, :, -1:] / np.float32(65535.0 if raw.dtype == np.uint16 else 255.0)
    pixels = np.concatenate([pixels[:, :, :-1] * weight, weight, pixels[:, :, -1:]], axis=2)
""", """\
if has_alpha:
    total = out[:, :, -2:-1]
    colour = np.divide(out[:, :, :-2], total, out=np.zeros_like(out[:, :, :-2]),
                       where=total > 0)
    out = np.concatenate([colour, out[:, :, -1:]], axis=2)
"""),
    "max": ("""\
# Alpha (the last of 2 or 4 channels) is pooled as it is; each window's colour is the
# largest among its visible pixels (alpha above 0): the colour under transparent pixels
# never shows, and a window of transparent pixels alone has colour 0.
has_alpha = pixels.shape[2] in (2, 4)
if has_alpha:
    hidden = np.where(pixels[:, :, -1:] > 0, pixels[:, :, :-1], np.float32(-np.inf))
    pixels = np.concatenate([hidden, pixels[:, :, -1:]], axis=2)
""", """\
if has_alpha:
    colour = np.where(np.isneginf(out[:, :, :-1]), np.float32(0), out[:, :, :-1])
    out = np.concatenate([colour, out[:, :, -1:]], axis=2)
"""),
}
"""What each pool script does before and after pooling where the image has alpha: as
:class:`convcli.app.pad_pool.PoolOp` pools it."""
