"""A PNG's transparent level or colour (its ``tRNS`` chunk) is alpha at every bit depth: 0
where a pixel holds exactly that level or colour, white elsewhere (as libvips, ImageMagick and
libpng read it)."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from helpers import run

from convcli.io.decoders import deep_codecs_missing
from convcli.io.images import read_image, read_stack

RNG = np.random.default_rng(31)


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _png(path, samples: np.ndarray, bits: int, colour_type: int, key: tuple[int, ...]):
    """A PNG of `samples` (rows, columns[, 3]) at `bits` per sample, its tRNS `key`."""
    height, width = samples.shape[:2]
    rows = samples.reshape(height, -1).astype(np.uint32)
    if bits < 8:  # packed, the first sample in the high bits
        per_byte = 8 // bits
        shifts = bits * np.arange(per_byte - 1, -1, -1)
        rows = (rows.reshape(height, -1, per_byte) << shifts).sum(axis=2)
        data = rows.astype(np.uint8)
    else:
        data = rows.astype(">u2" if bits == 16 else np.uint8).view(np.uint8)
    raw = b"".join(b"\0" + row.tobytes() for row in data)
    header = struct.pack(">IIBBBBB", width, height, bits, colour_type, 0, 0, 0)
    trns = b"".join(struct.pack(">H", k) for k in key)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"tRNS", trns)
        + _chunk(b"IDAT", zlib.compress(raw))
        + _chunk(b"IEND", b"")
    )
    return path


@pytest.mark.parametrize("bits", [2, 4])
def test_a_low_bit_grey_pngs_transparent_level_is_alpha(tmp_path, bits):
    top = 2**bits - 1
    levels = RNG.integers(0, top + 1, (9, 16))
    pic = read_image(_png(tmp_path / "g.png", levels, bits, 0, (1,)))
    assert pic.channels == ("L", "A")
    np.testing.assert_array_equal(pic.pixels[:, :, 0], levels * (255 // top))
    np.testing.assert_array_equal(pic.pixels[:, :, 1], np.where(levels == 1, 0, 255))


def test_a_16_bit_grey_pngs_transparent_level_is_alpha(tmp_path):
    levels = RNG.integers(0, 65536, (9, 14))
    levels[2, 3] = levels[5, 0] = 1234
    pic = read_image(_png(tmp_path / "g16.png", levels, 16, 0, (1234,)))
    assert (pic.channels, pic.white, pic.depth) == (("L", "A"), 65535.0, 16)
    np.testing.assert_array_equal(pic.pixels[:, :, 0], levels)
    np.testing.assert_array_equal(pic.pixels[:, :, 1], np.where(levels == 1234, 0, 65535))


def test_a_16_bit_rgb_pngs_transparent_colour_is_alpha(tmp_path, monkeypatch):
    colours = RNG.integers(0, 65536, (9, 14, 3))
    colours[4, 4] = (100, 200, 300)
    colours[6, 1] = (100, 200, 301)  # one sample off: opaque
    path = _png(tmp_path / "rgb16.png", colours, 16, 2, (100, 200, 300))
    pic = read_image(path)
    assert pic.channels == ("R", "G", "B", "A")
    alpha = np.where((colours == (100, 200, 300)).all(axis=2), 0, 65535)
    if deep_codecs_missing() is None:
        assert (pic.white, pic.depth) == (65535.0, 16)
        np.testing.assert_array_equal(pic.pixels, np.dstack([colours, alpha]))
    monkeypatch.setenv("CONVCLI_FAST_CODECS", "0")  # no imagecodecs: Pillow's 8 bits
    narrow = read_image(path)
    assert (narrow.channels, narrow.white, narrow.depth) == (("R", "G", "B", "A"), 255.0, 8)
    np.testing.assert_array_equal(narrow.pixels[:, :, 3], 255)
    assert narrow.notes[-1] == "its transparent colour (tRNS) not read at 8 bits: all opaque"
    result = run("pad", "--pad", "0", path, "-o", tmp_path / "out")
    assert result.exit_code == 0 and "all opaque" in result.stderr


def _apng_16_bit_rgb(path, frames: list[np.ndarray], key: tuple[int, int, int]):
    """An APNG of 16-bit RGB `frames` (each the whole canvas), its tRNS `key`."""
    height, width = frames[0].shape[:2]
    chunks = [
        (b"IHDR", struct.pack(">IIBBBBB", width, height, 16, 2, 0, 0, 0)),
        (b"acTL", struct.pack(">II", len(frames), 0)),
        (b"tRNS", struct.pack(">HHH", *key)),
    ]
    sequence = 0
    for n, frame in enumerate(frames):
        control = struct.pack(">IIIIIHHBB", sequence, width, height, 0, 0, 1, 10, 0, 0)
        chunks.append((b"fcTL", control))
        rows = frame.astype(">u2").reshape(height, -1).view(np.uint8)
        data = zlib.compress(b"".join(b"\0" + row.tobytes() for row in rows))
        chunks.append(
            (b"IDAT", data) if n == 0 else (b"fdAT", struct.pack(">I", sequence + 1) + data)
        )
        sequence += 1 if n == 0 else 2
    body = b"".join(_chunk(kind, data) for kind, data in [*chunks, (b"IEND", b"")])
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + body)
    return path


def test_a_16_bit_rgb_animations_frames_are_opaque_at_8_bits_and_say_so(tmp_path, monkeypatch):
    """Without imagecodecs an animation's colour frames are read at Pillow's 8 bits: the
    16-bit key cannot mark them (it marked the wrong pixels transparent); every pixel is
    opaque, and that is said."""
    monkeypatch.setenv("CONVCLI_FAST_CODECS", "0")
    frames = [np.full((4, 5, 3), 100 * 257), np.full((4, 5, 3), 200 * 257)]
    frames[0][0, 0] = (100, 100, 100)  # the key exactly: transparent at 16 bits
    stack = read_stack(_apng_16_bit_rgb(tmp_path / "a.png", frames, (100, 100, 100)))
    assert stack.channels == ("R", "G", "B", "A")
    np.testing.assert_array_equal(stack.pixels[..., 3], 255)
    assert "its transparent colour (tRNS) not read at 8 bits: all opaque" in stack.notes


def test_a_16_bit_rgb_animations_transparent_colour_is_alpha_at_16_bits(tmp_path):
    """With imagecodecs the frames are read at 16 bits: the key marks exactly its pixel."""
    frames = [np.full((4, 5, 3), 100 * 257), np.full((4, 5, 3), 200 * 257)]
    frames[0][0, 0] = (100, 100, 100)
    stack = read_stack(_apng_16_bit_rgb(tmp_path / "a.png", frames, (100, 100, 100)))
    assert stack.channels == ("R", "G", "B", "A") and stack.white == 65535
    alpha = np.full((2, 4, 5), 65535.0)
    alpha[0, 0, 0] = 0
    np.testing.assert_array_equal(stack.pixels[..., 3], alpha)
    np.testing.assert_array_equal(stack.pixels[1, ..., :3], 200 * 257)
    assert not any("8 bits" in note for note in stack.notes)
