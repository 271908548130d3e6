"""What the operations share: picture shapes, pads in names, option checks, a figure's first panel.

The operations themselves are in :mod:`convcli.app.ops` (and the modules it
gathers): the checks here raise :class:`OptionError` naming the option.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..errors import OptionError
from ..io.figures import Panel
from ..layers.validation import FLOAT32_MAX, check_result_size
from .names import number


def as_batch(pixels: np.ndarray) -> np.ndarray:
    """A picture's (H, W, C) pixels as the layers' (1, H, W, C); a stack's (m, H, W, C) as it is."""
    return pixels if pixels.ndim == 4 else pixels[None]


def channels_as_images(A: np.ndarray, dtype=None) -> np.ndarray:
    """(m, H, W, C) as (m*C, H, W, 1), contiguous: each channel of each frame an image, frame-major.

    >>> channels_as_images(np.arange(12).reshape(1, 2, 2, 3))[:, :, :, 0].tolist()
    [[[0, 3], [6, 9]], [[1, 4], [7, 10]], [[2, 5], [8, 11]]]
    """
    return np.ascontiguousarray(A.transpose(0, 3, 1, 2).reshape((-1,) + A.shape[1:3] + (1,)), dtype)


def like_picture(result: np.ndarray, pic) -> np.ndarray:
    """A layer's (m, H', W', C') `result` shaped as `pic`'s pixels: (H', W', C') for one picture."""
    return result if len(pic.shape) == 4 else result[0]


def frame_size(pic) -> tuple[int, int]:
    """(height, width) of `pic`'s frames: its pixels are (H, W, C) or a stack (m, H, W, C)."""
    return pic.shape[-3:-1]


def side_widths(pad) -> tuple[int, int, int, int] | int:
    """A pad of four widths (top, bottom, left, right), or one number when all are equal.

    One number keeps the output names of a single ``--pad N``.

    >>> side_widths((1, 1, 1, 1)), side_widths([0, 2, 1, 1])
    (1, (0, 2, 1, 1))
    """
    widths = tuple(pad)
    whole = all(isinstance(w, (int, np.integer)) and not isinstance(w, bool) for w in widths)
    if len(widths) != 4 or not whole or min(widths) < 0:
        raise OptionError(
            f"needs 4 whole numbers >= 0 (top, bottom, left, right), got {pad!r}", "--pad"
        )
    widths = tuple(int(w) for w in widths)
    return widths[0] if len(set(widths)) == 1 else widths


def check_padded_size(shape, widths, cause: str) -> None:
    """A ValueError naming the option (`cause`, ``"--pad 30"``) where the image of `shape`
    (m, H, W, C), padded by `widths` (top, bottom, left, right), would not fit this
    machine's memory in float32, before anything is made."""
    m, h, w, c = shape
    top, bottom, left, right = widths
    padded_shape = (m, h + top + bottom, w + left + right, c)
    check_result_size(padded_shape, np.float32, cause, "the padded image")


def pad_text(pad) -> str:
    """A pad for names and titles: ``2``, or ``0-2-1-1`` for top, bottom, left and right."""
    return "-".join(map(str, pad)) if isinstance(pad, tuple) else str(pad)


def pad_option(pad) -> str:
    """A pad as ``--pad`` takes it: ``same``, ``2``, or ``1,1,2,2`` (top, bottom, left, right)."""
    return ",".join(map(str, pad)) if isinstance(pad, tuple) else str(pad)


def finite_option(value: float, option: str) -> float:
    """`value` if it is a finite real number; else an OptionError naming `option`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise OptionError(f"must be a finite number, got {value!r}", option)
    return value


def float32_option(value: float, option: str) -> float:
    """`value` if it is a finite number that float32 results can hold (a fill value, a
    bias); else an OptionError naming `option`."""
    finite_option(value, option)
    if abs(value) > FLOAT32_MAX:
        raise OptionError(
            f"{number(value)} is beyond the float32 range of the results "
            "(magnitude at most about 3.4e38)",
            option,
        )
    return value


def whole_option(value, option: str, *, minimum: int) -> int:
    """`value` as an int if it is a whole number >= `minimum`; else an OptionError."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise OptionError(f"must be a whole number >= {minimum}, got {value!r}", option)
    return int(value)


def one_of(names: tuple[str, ...], value, option: str) -> str:
    """`value` if it is one of `names`; else an OptionError naming `option`."""
    if not (isinstance(value, str) and value in names):
        raise OptionError(
            f"{option.lstrip('-')} must be one of {', '.join(names)}; got {value!r}", option
        )
    return value


def mode_option(check, value, option: str) -> str:
    """``check(value)`` (:func:`pad_mode`, :func:`pool_mode`), its ValueError an OptionError."""
    try:
        return check(value)
    except ValueError as exc:
        raise OptionError(str(exc), option) from None


def original_panel(pic) -> Panel:
    """The input as the first panel of a figure: colour, or grey (alpha left out)."""
    white = pic.white if pic.white > 0 else 1.0
    original = pic.pixels / white
    np.clip(original, 0.0, 1.0, out=original)  # in place: one copy of the picture, not two
    if original.shape[2] == 2:  # grey + alpha: show the grey
        original = original[:, :, :1]
    return Panel("original", original[:, :, 0] if original.shape[2] == 1 else original)
