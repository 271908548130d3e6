"""A GIF's frames as Pillow composites them, each disposed of as the file says.

Pillow keeps a frame's disposal method from the frame before it where the frame's own
Graphic Control Extension gives none (0, unspecified, which leaves the frame in place as 1
does): a frame after one disposed of to the background (2) or to the canvas before it (3)
was disposed of so too, and the next frame drawn over a cleared area. libvips,
ImageMagick's ``-coalesce`` and browsers leave it in place. :func:`frame_seeker` steps
Pillow's image frame by frame and drops such a stale disposal.
"""

from __future__ import annotations

from collections.abc import Callable

from PIL import Image

_EXTENSION, _IMAGE, _TRAILER, _CONTROL = 0x21, 0x2C, 0x3B, 0xF9


def disposals(data: bytes) -> list[int]:
    """The disposal method (0 to 7) of each frame of the GIF `data`, in order (0 where a frame
    has no Graphic Control Extension); as many as can be read where the file is cut short.

    >>> disposals(b"GIF89a" + bytes(7) + b"\\x21\\xf9\\x04\\x08\\0\\0\\0\\0" + b"\\x2c" + bytes(9)
    ...           + b"\\x02\\0" + b"\\x3b")
    [2]
    """
    found, pending = [], 0
    at = 13 + (3 << ((data[10] & 7) + 1) if len(data) > 10 and data[10] & 0x80 else 0)
    while at < len(data) and data[at] != _TRAILER:
        kind = data[at]
        if kind == _EXTENSION and at + 1 < len(data):
            if data[at + 1] == _CONTROL and at + 3 < len(data):
                pending = (data[at + 3] >> 2) & 7  # the packed fields of its one sub-block
            at = _after_blocks(data, at + 2)
        elif kind == _IMAGE and at + 9 < len(data):
            packed = data[at + 9]
            at += 10 + (3 << ((packed & 7) + 1) if packed & 0x80 else 0)  # its own palette
            at = _after_blocks(data, at + 1)  # after the LZW code size, its data
            found.append(pending)
            pending = 0
        else:
            break
    return found


def _after_blocks(data: bytes, at: int) -> int:
    """The offset after the data sub-blocks that start at `at` (each its size, then its
    bytes; a size of 0 ends them)."""
    while at < len(data) and data[at]:
        at += data[at] + 1
    return at + 1


def frame_seeker(im: Image.Image, path: str) -> Callable[[int], None]:
    """A function that moves the Pillow image `im` of the file `path` to a frame: ``im.seek``,
    but for a GIF of several frames, stepped frame by frame, each disposed of as it says."""
    if im.format != "GIF" or getattr(im, "n_frames", 1) < 2:
        return im.seek
    with open(path, "rb") as file:
        methods = disposals(file.read())

    def own(frame: int) -> None:  # the disposal Pillow made of frame `frame`, if stale
        if frame < len(methods) and methods[frame] == 0 and getattr(im, "disposal_method", 0):
            im.disposal_method, im.dispose = 0, None

    def seek(frame: int) -> None:
        if frame < im.tell():
            im.seek(0)
        while im.tell() < frame:
            im.seek(im.tell() + 1)
            own(im.tell())

    return seek
