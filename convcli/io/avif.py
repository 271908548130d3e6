"""AVIF files of 10 and 12-bit samples, which Pillow reads at 8 bits: their depth, from the
file's own boxes, and their samples as imagecodecs (libavif, the ``deep`` extra) decodes
them, on their own scale (white 1023 for 10 bits), as a 12-bit TIFF's are read."""

from __future__ import annotations

import numpy as np

from .formats import file_head

_HEAD_BYTES = 1 << 16  # where an AVIF's meta box is (libavif writes it before the data)
_PROPERTIES = (b"meta", b"iprp", b"ipco")  # the boxes that hold the images' properties


def avif_bits(path: str) -> int | None:
    """The most bits a sample of the AVIF file `path` has: its pixi properties', else its AV1
    configurations', or None where neither is within its first 64 KB."""
    head = file_head(path, _HEAD_BYTES)
    span = _nested(head, _PROPERTIES)
    if span is None:
        return None
    pixi, av1c = [], []
    for kind, start, end in _boxes(head, *span):
        if kind == b"pixi" and end - start >= 5:  # version and flags, a count, a size each
            pixi += head[start + 5 : min(end, start + 5 + head[start + 4])]
        elif kind == b"av1C" and end - start >= 3:  # high_bitdepth (0x40), twelve_bit (0x20)
            flags = head[start + 2]
            av1c.append(12 if flags & 0x60 == 0x60 else 10 if flags & 0x40 else 8)
    return max((bits for bits in pixi or av1c if 1 <= bits <= 16), default=None)


def avif_samples(pixels, size: tuple[int, int], channels: tuple[str, ...]) -> np.ndarray | None:
    """`pixels` as imagecodecs decodes an AVIF image of `size` (width, height), as (H, W, C)
    samples of the picture's `channels`: grey + alpha given as RGBA, as Pillow reads it;
    None where they are not the picture's."""
    width, height = size
    if pixels is None or pixels.dtype != np.uint16 or pixels.shape[:2] != (height, width):
        return None
    pixels = pixels.reshape(height, width, -1)
    if pixels.shape[2] == 2 and len(channels) == 4:
        pixels = pixels[..., [0, 0, 0, 1]]
    return pixels if pixels.shape[2] == len(channels) else None


def _boxes(data: bytes, start: int, end: int):
    """(kind, start, end) of each ISO BMFF box within ``data[start:end]``, their contents'
    bounds; a box that runs past `end` (the bytes read) is the last, cut at `end`."""
    at = start
    while at + 8 <= end:
        size, kind, header = int.from_bytes(data[at : at + 4], "big"), data[at + 4 : at + 8], 8
        if size == 1 and at + 16 <= end:  # a 64-bit size
            size, header = int.from_bytes(data[at + 8 : at + 16], "big"), 16
        elif size == 0:  # to the end
            size = end - at
        if size < header:
            return
        yield kind, at + header, min(at + size, end)
        at += size


def _nested(data: bytes, kinds: tuple[bytes, ...]) -> tuple[int, int] | None:
    """The contents' bounds of the box reached through `kinds` from the top, or None."""
    start, end = 0, len(data)
    for kind in kinds:
        found = next(((s, e) for k, s, e in _boxes(data, start, end) if k == kind), None)
        if found is None:
            return None
        start, end = found
        start += 4 * (kind == b"meta")  # a full box: its version and flags first
    return start, end
