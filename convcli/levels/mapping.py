"""Result values to image levels, and colour to grey (numpy only).

:func:`map_levels` (and :func:`to_levels`) maps float results to the integer levels of an
8- or 16-bit image by one of :data:`MAPPINGS`; :func:`luminance` turns RGB into grey.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..choices import MAPPINGS
from ..layers._engine import native
from ..layers.validation import as_real_array
from .percentiles import (
    ROBUST_PERCENTILE,
    _inside,
    _linear_rank,
    _margin_left_out,
    _percentile_of_largest,
    _top_of_magnitudes,
    _top_or_largest,
    ranked,
    robust_top,
)


class LevelScale(NamedTuple):
    """How values became levels: ``level = scale * x + offset`` (``scale * |x| + offset``
    when `absolute`), before rounding and clipping to 0..top.

    The values are then ``(level - offset) / scale`` to within half a level
    (where the level was not clipped). ``none`` (float32 values written as they
    are) has scale 1 and offset 0.
    """

    mapping: str
    scale: float
    offset: float
    absolute: bool = False


def scale_fields(scale: LevelScale) -> dict:
    """What a manifest records of levels made with `scale`, to have the values back from
    them (:func:`values_from_levels`).

    >>> scale_fields(LevelScale("offset", 127.5, 127.5))
    {'mapping': 'offset', 'scale': 127.5, 'offset': 127.5, 'absolute': False}
    """
    return {
        "mapping": scale.mapping,
        "scale": scale.scale,
        "offset": scale.offset,
        "absolute": scale.absolute,
    }


def values_from_levels(fields: dict, levels: np.ndarray) -> np.ndarray:
    """The values that became `levels` (float64), from what :func:`scale_fields` recorded:
    one scale, or one a channel (lists, for the last axis of `levels`).

    ``(level - offset) / scale``: to within half a level, where the level was not cut off
    (:attr:`LevelRule.cuts`) and the mapping kept the sign (not ``absolute``).

    >>> values_from_levels({"scale": 2.0, "offset": 10.0}, np.array([10, 12, 30]))
    array([ 0.,  1., 10.])
    """
    scale = np.asarray(fields["scale"], dtype=np.float64)
    offset = np.asarray(fields["offset"], dtype=np.float64)
    return (np.asarray(levels, np.float64) - offset) / scale


def top_level(depth: int) -> int:
    """The largest level of a `depth`-bit image (8 or 16)."""
    return 255 if depth == 8 else 65535


def level_type(depth: int) -> type:
    """The samples of a `depth`-bit image's levels (8 or 16)."""
    return np.uint8 if depth == 8 else np.uint16


class Mapping(NamedTuple):
    """How one result channel becomes levels: the arguments of :func:`to_levels` besides depth,
    and the level of its missing values (NaN) where the output keeps GDAL's nodata value."""

    method: str
    white: float
    margin: int = 0
    missing: float | None = None


LUMA_WEIGHTS = (0.299, 0.587, 0.114)
"""ITU-R 601-2 luma weights of R, G and B, as Pillow's ``convert("L")``: :func:`luminance`."""


def count_not_finite(values: np.ndarray) -> int:
    """How many of `values` are NaN or infinite.

    None where the smallest and largest values are finite (numpy's min and
    max keep NaN): no mask is made then.

    >>> count_not_finite(np.array([1.0, np.nan, -np.inf], np.float32))
    2
    """
    if values.size and np.isfinite(values.min()) and np.isfinite(values.max()):
        return 0
    return values.size - int(np.count_nonzero(np.isfinite(values)))


def luminance(pixels: np.ndarray) -> np.ndarray:
    """Grey levels of an (H, W, 3) RGB array: ITU-R 601-2 luma, as Pillow's ``convert("L")``.

    Returns an (H, W, 1) float32 array in the same scale, not rounded (any
    leading axes, a batch say, are kept).
    """
    pixels = as_real_array(pixels, "pixels")
    if pixels.ndim == 0 or pixels.shape[-1] < 3:
        raise ValueError(f"pixels must have 3 channels (RGB) last, got shape {pixels.shape}")
    weights = np.array(LUMA_WEIGHTS, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # IEEE results for huge values
        return (pixels[..., :3] @ weights)[..., None].astype(np.float32, copy=False)


def map_levels(
    values: np.ndarray, method: str, *, white: float, depth: int, margin: int = 0
) -> tuple[np.ndarray, LevelScale]:
    """Map result values to the integer levels of an 8- or 16-bit image.

    Parameters
    ----------
    values : ndarray
        One channel (H, W), or several (H, W, C) mapped together.
    method : {"abs", "minmax", "clip", "offset", "robust"}
        ``abs``: |x| scaled so the largest is white (edge strength, sign dropped).
        ``robust``: |x| scaled so that :func:`robust_top` (the 99.5th percentile,
        counted `margin` pixels away from the border) is white; larger values
        saturate (edge maps: sparse edges stay visible).
        ``minmax``: the smallest value black, the largest white.
        ``clip``: values kept in the input's scale (0..`white`), the rest clipped.
        ``offset``: zero at mid-grey, the largest |x| at black or white (ImageMagick's
        50% bias, scaled symmetrically so nothing clips).
    white : float
        Full intensity in the input's scale (used by ``clip``).
    depth : {8, 16}
        Bits per sample of the result.
    margin : int
        For ``robust``: rows and columns on every side left out of the percentile.

    Returns
    -------
    levels : ndarray of uint8 or uint16
        NaN is mapped to 0 before anything else, +inf and -inf to the largest
        and smallest values (so ``abs`` maps them to white).
    scale : LevelScale
        The scale and offset used, so that the values can be had back.

    Examples
    --------
    >>> levels, scale = map_levels(np.array([-2.0, 0.0, 1.0]), "offset", white=255, depth=8)
    >>> levels, scale.scale, scale.offset
    (array([  0, 128, 191], dtype=uint8), 63.75, 127.5)
    """
    _check_mapping_arguments(method, white, depth)
    x = as_real_array(values, "values")
    real, big = _level_arithmetic(depth)
    if RULES[method].percentile and depth == 8:
        by_rows = _robust_bytes_by_rows(x, margin, big)
        if by_rows is not None:
            return by_rows
    x, lo, hi, magnitudes, robust = _finite_values(x, method, margin, big)
    scale, offset = _level_scale(
        method, lo, hi, robust, top=top_level(depth), white=white, big=big, real=real
    )
    levels = _rounded_levels(
        x.astype(real, copy=False), method, scale, offset, lo, magnitudes, depth=depth
    )
    return levels, _scale_record(method, scale, offset)


_ROWS_BYTES = 1 << 19
"""About the size of the blocks of rows :func:`_robust_bytes_by_rows` works on (in cache)."""


def _robust_bytes_by_rows(
    x: np.ndarray, margin: int, big: float
) -> tuple[np.ndarray, LevelScale] | None:
    """``robust`` 8-bit levels of a float32 map, a block of rows at a time; None where
    :func:`map_levels` works on the whole map instead.

    The same numbers as the whole-map passes (|x|, the sampled percentile of
    :func:`~convcli.levels.percentiles._high_percentile`, then scaled, clipped and rounded),
    each block's |x| made in a small buffer that stays in cache: no map-sized |x| or mask
    (17 MB and 4 MB for 2400x1800), and no pass for the range. None for a
    map with NaN, inf or values past +-`big` (found on the way), for
    several channels, and where the percentile is not taken from a sample.
    """
    if x.dtype != np.float32 or x.ndim != 2 or not x.size:
        return None
    rows = max(1, _ROWS_BYTES // (4 * x.shape[1]))
    buffer = np.empty((rows, x.shape[1]), np.float32)
    robust = _sampled_robust_top(x, margin, buffer)
    if robust is None:
        return None
    scale = np.float32(min(255 / robust, big))
    if native.active():  # the same levels in one pass
        levels = native.levels_u8(x, scale, big)
        return None if levels is None else (levels, _scale_record("robust", scale, 0.0))
    levels = np.empty(x.shape, np.uint8)
    with np.errstate(over="ignore"):
        for r in range(0, x.shape[0], rows):
            block = np.abs(x[r : r + rows], out=buffer[: min(rows, x.shape[0] - r)])
            if not block.max() <= big:  # NaN, inf or too large (the margin's)
                return None
            block *= scale
            np.clip(block, 0, 255, out=block)
            np.rint(block, out=block)
            levels[r : r + rows] = block
    return levels, _scale_record("robust", scale, 0.0)


def _sampled_robust_top(x: np.ndarray, margin: int, buffer: np.ndarray) -> float | None:
    """:func:`robust_top` of the float32 map `x` without `margin` rows and columns on every
    side (:func:`~convcli.levels.percentiles._inside`), as
    :func:`~convcli.levels.percentiles._high_percentile` samples it; None where it would not
    sample.

    |x| is made a block of whole rows of `buffer` at a time (contiguous, so
    faster than the inside's strided rows), with the left-out columns set to
    -1, which no threshold selects. None too where inf is among the largest;
    NaN and values too large are found by the caller's pass over every value.
    """
    inside, kept = _inside(x, margin), _margin_left_out(x.shape, margin)
    n = inside.size
    below, _ = _linear_rank(n, ROBUST_PERCENTILE)
    wanted = n - below
    if n < 1 << 16 or 16 * wanted > n or below >= n - 1:
        return None
    sample = np.abs(inside[::8, ::8])
    rank = max(0, sample.size - 1 - 4 * (wanted * sample.size // n + 1))
    threshold = ranked(sample, rank, rank)[0]
    top = native.abs_at_least(x, kept, threshold, n // 8) if native.active() else None
    if top is None:
        tops = []
        for r in range(kept, x.shape[0] - kept, len(buffer)):
            part = x[r : min(r + len(buffer), x.shape[0] - kept)]
            block = np.abs(part, out=buffer[: len(part)])
            if kept:
                block[:, :kept] = -1
                block[:, -kept:] = -1
            tops.append(block[block >= threshold])
        top = np.concatenate(tops)
    # An unlucky sample, or inf among the largest: the whole-map passes then.
    if top.size < wanted or not np.isfinite(top).all():
        return None
    return _top_or_largest(
        _percentile_of_largest(top, n, ROBUST_PERCENTILE), lambda: np.abs(inside).max()
    )


def map_frame_levels(
    frames: list[np.ndarray], method: str, *, white: float, depth: int, margin: int = 0
) -> tuple[list[np.ndarray], LevelScale]:
    """:func:`map_levels` of a stack of frames with one scale: no flicker from frame to frame.

    In memory; :mod:`convcli.app.stacks` takes the same scale from streamed
    statistics (:class:`convcli.levels.stats.StreamedMapping`), and its tests
    check the two agree.

    Parameters
    ----------
    frames : list of (H_i, W_i) ndarray
        One channel of each frame; the sizes may differ.
    method, white, depth
        As for :func:`map_levels`.
    margin : int
        For ``robust``: left out on every side of each frame.

    Returns
    -------
    levels : list of ndarray
        Each frame's levels, as :func:`map_levels` gives them for the scale
        that all frames' values decide together (one frame: its own).
    scale : LevelScale

    Examples
    --------
    >>> levels, scale = map_frame_levels([np.array([[0.0, 2.0]]), np.array([[4.0]])],
    ...                                  "minmax", white=255, depth=8)
    >>> [f.tolist() for f in levels], scale.scale
    ([[[0, 128]], [[255]]], 63.75)
    """
    if len(frames) == 1:
        levels, scale = map_levels(frames[0], method, white=white, depth=depth, margin=margin)
        return [levels], scale
    _check_mapping_arguments(method, white, depth)
    arrays = [as_real_array(f, "values") for f in frames]
    flat = np.concatenate([a.ravel() for a in arrays])
    real, big = _level_arithmetic(depth)
    x, lo, hi, magnitudes, robust = _finite_values(flat, method, 0, big)
    if RULES[method].percentile:  # of each frame's inside, together
        robust = robust_top(np.concatenate([_inside(a, margin).ravel() for a in arrays]))
    scale, offset = _level_scale(
        method, lo, hi, robust, top=top_level(depth), white=white, big=big, real=real
    )
    levels = _rounded_levels(
        x.astype(real, copy=False), method, scale, offset, lo, magnitudes, depth=depth
    )
    bounds = np.cumsum([a.size for a in arrays])[:-1]
    return (
        [part.reshape(a.shape) for part, a in zip(np.split(levels, bounds), arrays, strict=True)],
        _scale_record(method, scale, offset),
    )


def _level_arithmetic(depth: int) -> tuple[type, float]:
    """The float type levels are computed in, and the largest magnitude kept (``big``).

    In place, in float32 for 8-bit levels (float64 for 16-bit): a batch run
    spends its time here and in the encoder, not in the layers. Differences
    of values within +-big stay finite.
    """
    real = np.dtype(np.float32 if depth == 8 else np.float64).type
    return real, float(np.finfo(real).max) / 4


def _scale_record(method: str, scale, offset: float) -> LevelScale:
    """The :class:`LevelScale` of :func:`_level_scale`'s `scale` and `offset`."""
    return LevelScale(method, float(scale), float(offset), RULES[method].absolute)


def _rounded_levels(
    x: np.ndarray,
    method: str,
    scale,
    offset: float,
    lo: float,
    magnitudes: np.ndarray | None,
    *,
    depth: int,
) -> np.ndarray:
    """The integer levels of `x` (in the levels' float type): :func:`_scaled_levels`,
    clipped to 0..top and rounded."""
    top = top_level(depth)
    with np.errstate(over="ignore"):  # tiny ranges scale values past the top: clipped below
        levels = _scaled_levels(x, method, scale, offset, lo, magnitudes)
    np.clip(levels, 0, top, out=levels)
    np.rint(levels, out=levels)
    return levels.astype(level_type(depth))


def _check_mapping_arguments(method, white, depth) -> None:
    """:func:`map_levels`'s checks of its options, each naming the option and the value."""
    if not isinstance(method, str) or method not in MAPPINGS:
        raise ValueError(f"method must be one of {', '.join(MAPPINGS)}; got {method!r}")
    if isinstance(depth, bool) or depth not in (8, 16):
        raise ValueError(f"depth must be 8 or 16, got {depth!r}")
    if isinstance(white, bool) or not isinstance(white, numbers.Real):
        raise TypeError(f"white must be a real number, got {white!r}")


def _finite_values(x: np.ndarray, method: str, margin: int, big: float):
    """`x` ready to scale, its range, and for ``robust`` its |x| and :func:`robust_top`.

    Returns ``(x, lo, hi, magnitudes, robust)``. Where `x` holds NaN, inf or
    values beyond +-`big`, it becomes a float64 copy with NaN as 0 and the
    rest clipped to +-`big` (``robust`` takes its top from the finite values
    first); otherwise `x` is returned as it is. `magnitudes` is ``|x|``, kept
    for ``robust`` to scale in place, or None; `robust` is None for the
    other methods.
    """
    lo, hi = (float(x.min()), float(x.max())) if x.size else (0.0, 0.0)
    magnitudes = robust = None
    if not (np.isfinite(lo) and np.isfinite(hi)) or max(-lo, hi) > big:
        if RULES[method].percentile:  # of the finite values as they are
            robust = robust_top(x, margin=margin)
        x = _cleaned(x, big)
        lo, hi = (float(x.min()), float(x.max())) if x.size else (0.0, 0.0)
    elif RULES[method].percentile:
        # |x| once, for the percentile and then, scaled in place, the levels.
        magnitudes = np.abs(x)
        robust = _top_of_magnitudes(_inside(magnitudes, margin), ROBUST_PERCENTILE)
    return x, lo, hi, magnitudes, robust


def _cleaned(x: np.ndarray, big: float) -> np.ndarray:
    """A float64 copy of `x` with NaN as 0 and the rest (infinities too) clipped to +-`big`."""
    return np.clip(np.nan_to_num(x.astype(np.float64), nan=0.0), -big, big)


def _level_scale(
    method: str,
    lo: float,
    hi: float,
    robust: float | None,
    *,
    top: int,
    white: float,
    big: float,
    real: type,
) -> tuple[np.floating, float]:
    """``(scale, offset)`` of ``level = scale * x + offset`` (|x| for ``abs`` and ``robust``).

    `scale` is in the levels' float type `real`, at most `big`; `offset` is a float.
    """
    rule = RULES[method]
    scale = real(min(rule.scale(lo, hi, robust, top, white), big))
    return scale, rule.offset(scale, lo, top)


def _clip_scale(lo, hi, robust, top, white) -> float:
    return top / white if np.isfinite(white) and white > 0 else top


def _abs_scale(lo, hi, robust, top, white) -> float:
    peak = max(-lo, hi)
    return top / peak if peak > 0 else 0.0


def _robust_scale(lo, hi, robust, top, white) -> float:
    return top / robust


def _minmax_scale(lo, hi, robust, top, white) -> float:
    span = hi - lo
    return top / span if span > 0 else 0.0


def _offset_scale(lo, hi, robust, top, white) -> float:
    peak = max(-lo, hi)
    return top / (2.0 * peak) if peak > 0 else top


def _no_offset(scale, lo, top) -> float:
    return 0.0


def _minmax_offset(scale, lo, top) -> float:
    # 0.0 - ...: +0.0 where lo is 0, whichever zero (numpy's min of 0.0 and
    # -0.0 is either, by the array's layout).
    return 0.0 - float(scale) * lo


def _middle_offset(scale, lo, top) -> float:
    return top / 2


@dataclass(frozen=True)
class LevelRule:
    """How one mapping turns values into levels: ``level = scale * x + offset``.

    Attributes
    ----------
    scale : callable
        ``scale(lo, hi, robust, top, white)``: the scale, before it is bounded
        by the levels' float type (`lo`, `hi`: the values' range; `robust`:
        the high percentile of ``|x|``, for ``robust``; `top`: the top level).
    offset : callable
        ``offset(scale, lo, top)``: the offset the manifest records.
    absolute : bool
        Levels of ``|x|`` (``abs``, ``robust``).
    from_low : bool
        Levels computed as ``(x - lo) * scale`` (``minmax``).
    adds_offset : bool
        Levels computed as ``x * scale + offset`` (``offset``).
    percentile : bool
        The scale needs the high percentile of ``|x|`` (``robust``).
    from_values : bool
        The scale depends on the values (all but ``clip``, whose scale is the white's).
    cuts : bool
        Values beyond the levels are cut off to 0 or the top level (``clip``), so a
        level there may stand for a value further out.
    """

    scale: Callable
    offset: Callable = _no_offset
    absolute: bool = False
    from_low: bool = False
    adds_offset: bool = False
    percentile: bool = False
    from_values: bool = True
    cuts: bool = False


RULES: dict[str, LevelRule] = {
    "clip": LevelRule(_clip_scale, from_values=False, cuts=True),
    "abs": LevelRule(_abs_scale, absolute=True),
    "robust": LevelRule(_robust_scale, absolute=True, percentile=True),
    "minmax": LevelRule(_minmax_scale, _minmax_offset, from_low=True),
    "offset": LevelRule(_offset_scale, _middle_offset, adds_offset=True),
}
"""Each of :data:`convcli.choices.MAPPINGS` and its rule; checked when this module loads."""


def _check_rules() -> None:
    """An ImportError where a mapping name has no rule, or a rule no name."""
    if set(RULES) != set(MAPPINGS):
        missing = sorted(set(MAPPINGS) - set(RULES))
        extra = sorted(set(RULES) - set(MAPPINGS))
        raise ImportError(
            f"the mappings and their rules differ: no rule for {missing}, no name for {extra}"
        )


_check_rules()


def _scaled_levels(
    x: np.ndarray, method: str, scale, offset: float, lo: float, magnitudes: np.ndarray | None
) -> np.ndarray:
    """``scale * x + offset`` (|x| for ``abs`` and ``robust``) in x's type, before rounding.

    One new array at most: `magnitudes` (``|x|``) is scaled in place where it
    is in x's type, and the other methods scale a new array in place.
    """
    real = x.dtype.type
    rule = RULES[method]
    if rule.absolute:
        levels = magnitudes if magnitudes is not None and magnitudes.dtype == real else np.abs(x)
        levels *= scale
    elif rule.from_low:
        levels = x - real(lo)
        levels *= scale
    else:
        levels = x * scale
        if rule.adds_offset:
            levels += real(offset)
    return levels


def to_levels(
    values: np.ndarray, method: str, *, white: float, depth: int, margin: int = 0
) -> np.ndarray:
    """The levels of :func:`map_levels`, without the scale.

    Examples
    --------
    >>> to_levels(np.array([-2.0, 0.0, 1.0]), "offset", white=255, depth=8)
    array([  0, 128, 191], dtype=uint8)
    """
    return map_levels(values, method, white=white, depth=depth, margin=margin)[0]
