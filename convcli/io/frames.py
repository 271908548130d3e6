"""Which frames of a multi-frame file are processed: ``--frames first|all|LIST`` (numpy-free).

The frames of a multi-page TIFF, an animated GIF, WebP or PNG are the batch
axis m of the layers' ``(m, H, W, C)`` arrays. :func:`parse_frames` checks the
option's text once, for the run; :func:`select_frames` picks the frames of one
file, once its frame count is known.
"""

from __future__ import annotations

import re

FRAME_WORDS = ("first", "all")
DEFAULT_FRAMES = "all"
# Frames a LIST may name: each is held in every task, so ``0-99999999`` is refused, not expanded.
MAX_LISTED_FRAMES = 1 << 20

_PART = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?")


def parse_frames(text: str) -> str | tuple[int, ...]:
    """``"first"``, ``"all"``, or the frame numbers a LIST names, in order, each once.

    A LIST is numbers from 0 and ranges ``a-b`` (both ends included), joined
    by commas. A ValueError says what is wrong.

    Examples
    --------
    >>> parse_frames("all"), parse_frames("0,2-4,2")
    ('all', (0, 2, 3, 4))
    """
    if not isinstance(text, str):
        raise ValueError(f"must be first, all or a list such as 0,2-5; got {text!r}")
    word = text.strip().lower()
    if word in FRAME_WORDS:
        return word
    ranges = [_frame_range(part, text) for part in text.split(",")]
    named = sum(numbers.stop - numbers.start for numbers in ranges)
    if named > MAX_LISTED_FRAMES:
        raise ValueError(
            f"a list may name at most {MAX_LISTED_FRAMES} frames (use all); "
            f"got {text!r}, {named} frames"
        )
    picked: dict[int, None] = {}
    for numbers in ranges:
        picked.update(dict.fromkeys(numbers))
    return tuple(picked)


def _frame_range(part: str, text: str) -> range:
    """The frame numbers of one comma-separated `part` of the LIST `text`."""
    match = _PART.fullmatch(part)
    if match is None:
        raise ValueError(
            f"must be first, all or a list such as 0,2-5 (frames numbered from 0); got {text!r}"
        )
    start = int(match.group(1))
    stop = int(match.group(2)) if match.group(2) is not None else start
    if stop < start:
        raise ValueError(f"the range {start}-{stop} runs backwards; got {text!r}")
    return range(start, stop + 1)


class FramesPastEnd(ValueError):
    """A frame that ``--frames`` picks is past the end of a file: a usage error (exit 2)."""


def select_frames(frames: str | tuple[int, ...], count: int) -> tuple[int, ...]:
    """The frame numbers of a file of `count` frames that `frames` (:func:`parse_frames`) picks.

    A number past the end is a :class:`FramesPastEnd` that gives the file's frame count.

    Examples
    --------
    >>> select_frames("all", 3), select_frames("first", 3), select_frames((2, 0), 3)
    ((0, 1, 2), (0,), (2, 0))
    >>> select_frames((1, 4), 3)
    Traceback (most recent call last):
    ...
    convcli.io.frames.FramesPastEnd: --frames: frame 4 is past the end: the file has 3 frames (0-2)
    """
    if frames == "all":
        return tuple(range(count))
    if frames == "first":
        return (0,)
    past = [k for k in frames if k >= count]
    if past:
        have = "1 frame (0)" if count == 1 else f"{count} frames (0-{count - 1})"
        raise FramesPastEnd(f"--frames: frame {past[0]} is past the end: the file has {have}")
    return tuple(frames)


def frame_label(number: int, count: int) -> str:
    """The tag of frame `number` of `count` in per-frame output names: ``f07``.

    Zero-padded to the digits of the last frame, so the names sort in order.

    >>> frame_label(7, 24), frame_label(7, 8)
    ('f07', 'f7')
    """
    return f"f{number:0{len(str(max(count - 1, 0)))}d}"


def chosen_image(im, frames: int) -> str:
    """Put the Pillow image `im` of `frames` images (more than one) at the one a plain read
    decodes, and say which: a HEIF file's primary image (pillow-heif opens it there), an
    APNG's default image where it is no frame of the animation, any other file's first."""
    if im.format == "HEIF":
        if not im.info.get("primary"):
            for index in range(frames):
                im.seek(index)
                if im.info.get("primary"):
                    break
        return f"used the primary image of {frames}"
    im.seek(0)
    if im.format == "PNG" and im.info.get("default_image"):
        return f"used its default image, no frame of its {frames - 1}-frame animation"
    return f"used the first of {frames} frames"
