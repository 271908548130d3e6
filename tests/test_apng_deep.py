"""Animated PNGs of 16-bit samples composited at 16 bits, as the APNG specification says.

Pillow reads their colour at 8 bits and, for every depth, pastes a frame blended "over"
through its alpha (a half-transparent frame over an opaque one came out half transparent).
convcli reads each frame's own pixels at 16 bits (grey by Pillow, the rest by imagecodecs)
and composites them itself; the expected canvases here are worked out by hand.
"""

from __future__ import annotations

import struct
import zlib

import imagecodecs
import numpy as np
import pytest
from helpers import ok, run_without

from convcli.io.apng import over

H, W = 6, 8
OPAQUE = 65535
GREY, RGB, GREY_ALPHA, RGBA = 0, 2, 4, 6  # PNG colour types
KEEP, BACKGROUND, PREVIOUS = 0, 1, 2  # dispose_op
SOURCE, OVER = 0, 1  # blend_op


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _apng(path, colour_type, frames, controls, *, transparent=None):
    """A 16-bit APNG: `frames` (h, w, samples) uint16, each placed and handled as its
    (x, y, dispose_op, blend_op) in `controls` says; `transparent`, a tRNS key's samples."""
    height, width = frames[0].shape[:2]
    header = struct.pack(">IIBBBBB", width, height, 16, colour_type, 0, 0, 0)
    out = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header)
    out += _chunk(b"acTL", struct.pack(">II", len(frames), 0))
    if transparent is not None:
        out += _chunk(b"tRNS", struct.pack(f">{len(transparent)}H", *transparent))
    sequence = 0
    for k, (frame, (x, y, dispose, blend)) in enumerate(zip(frames, controls, strict=True)):
        h, w = frame.shape[:2]
        control = struct.pack(">IIIIIHHBB", sequence, w, h, x, y, 5, 100, dispose, blend)
        out += _chunk(b"fcTL", control)
        rows = frame.astype(">u2").reshape(h, -1)
        data = zlib.compress(b"".join(b"\0" + row.tobytes() for row in rows))  # filter none
        if k == 0:
            out += _chunk(b"IDAT", data)
            sequence += 1
        else:
            out += _chunk(b"fdAT", struct.pack(">I", sequence + 1) + data)
            sequence += 2
    path.write_bytes(out + _chunk(b"IEND", b""))
    return path


def _filled(value, shape=(H, W)):
    return np.broadcast_to(np.asarray(value, np.uint16), (*shape, len(value))).copy()


def _stack(path, tmp_path, *, without=None):
    """The frames convcli reads from `path`: (m, H, W, C) float32, from an npy output."""
    out = tmp_path / f"o{len(list(tmp_path.iterdir()))}"
    options = ("pool", "--size", "1", "--format", "npy", "--frames", "all", path, "-o", out)
    if without:
        result = run_without(without, *options)
        assert result.returncode == 0, result.stderr
        stderr = result.stderr
    else:
        stderr = ok(*options).stderr
    return np.load(next(out.glob("*.npy"))), stderr


def test_a_half_transparent_16_bit_frame_over_an_opaque_one_is_opaque(tmp_path):
    """Blue at alpha 32768 over opaque red: red 65535 * 32767 / 65535, blue 32768, opaque
    (Pillow: 8-bit levels at alpha 191)."""
    red, blue = _filled([OPAQUE, 0, 0, OPAQUE]), _filled([0, 0, OPAQUE, 32768])
    path = _apng(tmp_path / "a.png", RGBA, [red, blue], [(0, 0, KEEP, SOURCE), (0, 0, KEEP, OVER)])
    stack, stderr = _stack(path, tmp_path)
    assert "8-bit" not in stderr
    np.testing.assert_array_equal(stack[0], red)
    np.testing.assert_array_equal(stack[1], _filled([32767, 0, 32768, OPAQUE]))


def test_grey_and_alpha_at_16_bits_blend_over_as_the_specification_says(tmp_path):
    """50000 at alpha 32768 over 1000: (50000 * 32768 + 1000 * 32767) / 65535 = 25500."""
    dark, light = _filled([1000, OPAQUE]), _filled([50000, 32768], (3, 4))
    controls = [(0, 0, KEEP, SOURCE), (2, 1, KEEP, OVER)]
    stack, _ = _stack(_apng(tmp_path / "g.png", GREY_ALPHA, [dark, light], controls), tmp_path)
    expected = dark.copy()
    expected[1:4, 2:6] = (25500, OPAQUE)
    np.testing.assert_array_equal(stack[1], expected)


def test_a_16_bit_region_disposed_to_the_previous_canvas_is_put_back(tmp_path):
    base = _filled([100, 200, 300, OPAQUE])
    band = _filled([40000, 40001, 40002, OPAQUE], (3, W))
    dot = _filled([OPAQUE, 1, 2, OPAQUE], (1, 1))
    controls = [(0, 0, KEEP, SOURCE), (0, 0, PREVIOUS, SOURCE), (0, 0, KEEP, OVER)]
    stack, _ = _stack(_apng(tmp_path / "p.png", RGBA, [base, band, dot], controls), tmp_path)
    np.testing.assert_array_equal(stack[1][:3], band)
    expected = base.copy()
    expected[0, 0] = dot[0, 0]
    np.testing.assert_array_equal(stack[2], expected)


@pytest.mark.parametrize("without", [None, "imagecodecs"])
def test_a_16_bit_grey_animation_is_read_whole_with_its_transparent_level(tmp_path, without):
    """Grey is read by Pillow at 16 bits, with or without imagecodecs: the tRNS level 777
    is alpha 0; a frame disposed to the background leaves transparent black."""
    rng = np.random.default_rng(4)
    first = rng.integers(0, 65536, (H, W, 1), dtype=np.uint16)
    first[0, :3] = 777
    second = rng.integers(0, 65536, (2, 3, 1), dtype=np.uint16)
    controls = [(0, 0, KEEP, SOURCE), (4, 3, BACKGROUND, SOURCE)]
    path = _apng(tmp_path / "k.png", GREY, [first, second], controls, transparent=[777])
    stack, stderr = _stack(path, tmp_path, without=without)
    assert "8-bit" not in stderr
    alpha = np.where(first == 777, 0, OPAQUE)
    grey = np.where(alpha == 0, 0, first)  # pooling weighs levels by alpha: none under 0
    np.testing.assert_array_equal(stack[0], np.concatenate([grey, alpha], axis=2))
    opaque = np.full_like(second, OPAQUE)
    np.testing.assert_array_equal(stack[1][3:5, 4:7], np.concatenate([second, opaque], axis=2))


def test_16_bit_colour_frames_are_written_back_at_16_bits(tmp_path):
    rng = np.random.default_rng(9)
    frames = [rng.integers(0, 65536, (H, W, 3), dtype=np.uint16) for _ in range(3)]
    controls = [(0, 0, KEEP, SOURCE)] * 3
    path = _apng(tmp_path / "c.png", RGB, frames, controls)
    stack, _ = _stack(path, tmp_path)
    np.testing.assert_array_equal(stack, np.stack(frames))
    ok("pad", "--pad", "1", path, "-o", tmp_path / "png")
    written = (tmp_path / "png" / "c_pad-constant-1.png").read_bytes()
    first = imagecodecs.png_decode(written)  # the default image: the first frame
    assert first.dtype == np.uint16
    np.testing.assert_array_equal(first[1:-1, 1:-1], frames[0])


def test_without_imagecodecs_16_bit_colour_is_composited_at_8_bits_and_said(tmp_path):
    """The 8-bit levels Pillow gives are blended as the specification says (opaque, not
    alpha 191) and the loss of depth is said."""
    red, blue = _filled([OPAQUE, 0, 0, OPAQUE]), _filled([0, 0, OPAQUE, 32768])
    path = _apng(tmp_path / "a.png", RGBA, [red, blue], [(0, 0, KEEP, SOURCE), (0, 0, KEEP, OVER)])
    stack, stderr = _stack(path, tmp_path, without="imagecodecs")
    assert "16-bit colour read as 8-bit" in stderr
    expected = over(np.array([0, 0, 255, 128], np.uint8), np.array([255, 0, 0, 255], np.uint8))
    np.testing.assert_array_equal(stack[1], np.broadcast_to(expected, (H, W, 4)))
    assert expected[3] == 255


def test_over_at_16_bits_matches_the_formula_in_floats():
    rng = np.random.default_rng(2)
    source = rng.integers(0, 65536, (500, 4), dtype=np.uint16)
    below = rng.integers(0, 65536, (500, 4), dtype=np.uint16)
    a, b = source[:, 3:] / OPAQUE, below[:, 3:] / OPAQUE
    alpha = a + (1 - a) * b
    colour = (source[:, :3] * a + below[:, :3] * (1 - a) * b) / np.where(alpha > 0, alpha, 1)
    blended = over(source, below).astype(np.float64)
    assert np.abs(blended[:, 3:] - alpha * OPAQUE).max() <= 0.5 + 1e-6
    assert np.abs(blended[:, :3] - colour).max() <= 0.5 + 1e-6


@pytest.mark.parametrize("without", [None, "imagecodecs"])
@pytest.mark.parametrize("damage", ["cut", "corrupt"])
def test_a_damaged_16_bit_colour_animation_is_one_line_naming_its_frame(tmp_path, without, damage):
    rng = np.random.default_rng(3)
    frames = [rng.integers(0, 65536, (H, W, 3), dtype=np.uint16) for _ in range(3)]
    path = _apng(tmp_path / "d.png", RGB, frames, [(0, 0, KEEP, SOURCE)] * 3)
    data = bytearray(path.read_bytes())
    at = data.rindex(b"fdAT")
    if damage == "cut":
        data = data[: at + 20]
    else:  # the last frame's deflate data garbled, its checksum made right
        length = struct.unpack(">I", data[at - 4 : at])[0]
        body = bytes(data[at + 4 : at + 8]) + b"\xff" * (length - 4)
        data[at + 4 : at + 8 + length] = body + struct.pack(">I", zlib.crc32(b"fdAT" + body))
    path.write_bytes(bytes(data))
    options = ("pool", "--size", "1", "--frames", "all", path, "-o", tmp_path / "o")
    result = run_without(without or "no-such-module", *options)
    lines = result.stderr.splitlines()
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert lines[0].startswith(f"convcli: {path}: frame 2 of 3: cannot decode the image: ")
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").glob("*.png"))
