"""What ``convcli explain``'s scripts do where the image has alpha, as convcli computes it.

Each script reads the image into ``pixels`` (H, W, C) and pools or convolves it
into ``out``; for an image with alpha (C of 2 or 4) these lines go before and
after, so that the script gives convcli's values: :class:`convcli.app.pad_pool.PoolOp`
pools alpha as it is, the colours weighted by it (the largest visible one for
max); :class:`convcli.app.conv_op.ConvOp` convolves the colour as it shows over
black, or, for kernels that keep levels by channel, weighted by alpha with alpha
convolved too.
"""

from __future__ import annotations

ALPHA_POOL = {
    "average": (
        """\
# Alpha (the last of 2 or 4 channels) is pooled as it is, and weighs the colours: each
# window's colour is sum(colour * alpha) / sum(alpha), so that the colour under
# transparent pixels never shows (pooled with alpha / white as one more channel).
has_alpha = pixels.shape[2] in (2, 4)
if has_alpha:
    weight = pixels[:, :, -1:] / np.float32(65535.0 if raw.dtype == np.uint16 else 255.0)
    pixels = np.concatenate([pixels[:, :, :-1] * weight, weight, pixels[:, :, -1:]], axis=2)
""",
        """\
if has_alpha:
    total = out[:, :, -2:-1]
    colour = np.divide(out[:, :, :-2], total, out=np.zeros_like(out[:, :, :-2]),
                       where=total > 0)
    out = np.concatenate([colour, out[:, :, -1:]], axis=2)
""",
    ),
    "max": (
        """\
# Alpha (the last of 2 or 4 channels) is pooled as it is; each window's colour is the
# largest among its visible pixels (alpha above 0): the colour under transparent pixels
# never shows, and a window of transparent pixels alone has colour 0.
has_alpha = pixels.shape[2] in (2, 4)
if has_alpha:
    hidden = np.where(pixels[:, :, -1:] > 0, pixels[:, :, :-1], np.float32(-np.inf))
    pixels = np.concatenate([hidden, pixels[:, :, -1:]], axis=2)
""",
        """\
if has_alpha:
    colour = np.where(np.isneginf(out[:, :, :-1]), np.float32(0), out[:, :, :-1])
    out = np.concatenate([colour, out[:, :, -1:]], axis=2)
""",
    ),
}
"""What each pool script does before and after pooling where the image has alpha: as
:class:`convcli.app.pad_pool.PoolOp` pools it."""


CONV_COLOUR = """\
# Alpha (the last of 2 or 4 channels) is no colour: the colour is taken as it shows over
# black, weighted by alpha, so that the colour hidden under transparent pixels never counts.
has_alpha = pixels.shape[2] in (2, 4)
colour = pixels[:, :, :-1] if has_alpha else pixels
if has_alpha:
    weight = pixels[:, :, -1:] / np.float32(65535.0 if raw.dtype == np.uint16 else 255.0)
    colour = colour * weight
"""
"""The colour a conv script convolves: as it shows over black
(:func:`convcli.app.conv_pixels.over_black`)."""

ALPHA_CONV = (
    """\
# Kernels that keep levels, by channel, on an image with alpha: weighted by alpha, as
# ImageMagick convolves, and alpha convolved too (one more plane), both in whole levels
# (a blur's sums of sixteenths are then exact).
if has_alpha:
    alpha = pixels[:, :, -1]
    planes = [pixels[:, :, c] * alpha for c in range(pixels.shape[2] - 1)] + [alpha]
""",
    """\
if has_alpha:  # each kernel's colours conv(colour * alpha) / conv(alpha), then alpha
    # (colour 0 where conv(alpha) is 0.001 of white or less: a quarter of an 8-bit level)
    out = out.reshape(out.shape[:2] + (len(KERNELS), len(planes))) - np.float32(BIAS)
    total = out[:, :, :, -1:]
    white = np.float32(65535.0 if raw.dtype == np.uint16 else 255.0)
    colour = np.divide(out[:, :, :, :-1], total, out=np.zeros_like(out[:, :, :, :-1]),
                       where=total > 1e-3 * white) + np.float32(BIAS)
    out = np.concatenate([colour, total], axis=3).reshape(out.shape[:2] + (-1,))
""",
)
"""What a conv script does before and after convolving where the image has alpha and the
kernels all keep levels, by channel (:func:`convcli.app.conv_op.alpha_weighted`)."""
