"""A GIF's frames are each disposed of as the file says: a frame whose disposal is 0
(unspecified) stays in place, as 1 says, whatever the frame before it said (Pillow kept the
disposal of the last frame that gave one)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from convcli.io.gif import disposals
from convcli.io.images import read_stack

PALETTE = np.array([(0, 0, 0), (255, 0, 0), (0, 255, 0), (0, 0, 255)], np.uint8)


def _lzw(indices: np.ndarray) -> bytes:
    """`indices` as GIF image data with a code size of 2: every index its own code, a clear
    code before the code table would grow to 4 bits, so no code is ever longer than 3 bits."""
    clear, end = 4, 5
    codes = [clear]
    for n, index in enumerate(indices.ravel().tolist()):
        if n and n % 2 == 0:
            codes.append(clear)
        codes.append(index)
    codes.append(end)
    bits = sum(code << (3 * n) for n, code in enumerate(codes))
    data = bits.to_bytes((3 * len(codes) + 7) // 8, "little")
    blocks = b"".join(
        bytes([len(data[i : i + 255])]) + data[i : i + 255] for i in range(0, len(data), 255)
    )
    return b"\x02" + blocks + b"\x00"


def _gif(path, size, frames):
    """A GIF of `size` (width, height) on PALETTE; `frames`: (indices, left, top, disposal)."""
    width, height = size
    out = bytearray(b"GIF89a" + struct.pack("<HHBBB", width, height, 0x81, 0, 0))
    out += PALETTE.tobytes()
    for indices, left, top, disposal in frames:
        out += b"\x21\xf9\x04" + struct.pack("<BHBB", disposal << 2, 10, 0, 0)
        rows, columns = indices.shape
        out += b"\x2c" + struct.pack("<HHHHB", left, top, columns, rows, 0) + _lzw(indices)
    path.write_bytes(bytes(out + b"\x3b"))
    return path


@pytest.mark.parametrize("before", [2, 3])
def test_a_frame_of_disposal_0_stays_after_one_disposed_of(tmp_path, before):
    red, green, blue = (
        np.full((h, w), c, np.uint8) for (h, w), c in (((9, 12), 1), ((3, 3), 2), ((3, 3), 3))
    )
    path = _gif(
        tmp_path / "a.gif",
        (12, 9),
        [(red, 0, 0, 1), (green, 0, 0, before), (blue, 6, 4, 0), (blue[:1, :1], 0, 8, 0)],
    )
    assert disposals(path.read_bytes()) == [1, before, 0, 0]
    frames = read_stack(path).pixels
    # Frame 3: frame 2's blue square left in place (disposal 0), over the canvas frame 1 left
    assert (frames[3, 4:7, 6:9] == (0, 0, 255)).all()
    assert (frames[2, 4:7, 6:9] == (0, 0, 255)).all()
    # Frame 1's green square disposed of after it: to the background, or back to red
    cleared = (0, 0, 0) if before == 2 else (255, 0, 0)
    assert (frames[2, 0:3, 0:3] == cleared).all() and (frames[3, 0:3, 0:3] == cleared).all()
    assert (frames[1, 0:3, 0:3] == (0, 255, 0)).all()
