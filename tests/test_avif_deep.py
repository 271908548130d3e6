"""AVIF files of 10 and 12-bit samples: read at 16 bits by imagecodecs, or said.

Pillow's AVIF reader gives 8 bits whatever the file holds, without a word: an HDR
photo's levels came out quantised to 256. With imagecodecs (the ``deep`` extra,
libavif) they are read as a 12-bit JPEG 2000 is, shifted up to 16 bits.
"""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
from helpers import ok, run_without
from PIL import Image, features

from convcli.io.decoders import avif_bits
from convcli.io.images import read_image

imagecodecs = pytest.importorskip("imagecodecs")
pytestmark = pytest.mark.skipif(not features.check("avif"), reason="Pillow without AVIF")


def _avif(path, samples: np.ndarray, bits: int):
    """`samples` (0 .. 2**bits - 1) written losslessly at `bits` bits by libavif."""
    path.write_bytes(imagecodecs.avif_encode(samples, level=100, bitspersample=bits))
    return path


@pytest.mark.parametrize(("bits", "channels"), [(10, 3), (12, 4), (10, 1)])
def test_deep_samples_are_read_at_16_bits(tmp_path, bits, channels):
    shape = (6, 10, channels) if channels > 1 else (6, 10)
    samples = np.random.default_rng(bits).integers(0, 2**bits, shape).astype(np.uint16)
    samples.flat[:2] = (0, 2**bits - 1)
    path = _avif(tmp_path / "deep.avif", samples, bits)
    assert avif_bits(str(path)) == bits
    picture = read_image(path)
    assert (picture.white, picture.depth, picture.notes) == (65535.0, 16, ())
    shifted = (samples << (16 - bits)).reshape(6, 10, channels)
    np.testing.assert_array_equal(picture.pixels, shifted.astype(np.float32))


def test_a_pooled_10_bit_avif_is_written_at_16_bits(tmp_path):
    samples = np.random.default_rng(3).integers(0, 1024, (6, 10, 3)).astype(np.uint16)
    path = _avif(tmp_path / "hdr.avif", samples, 10)
    ok("pool", "--size", 2, "--format", "tiff", path, "-o", tmp_path / "out")
    written = tifffile.imread(tmp_path / "out" / "hdr_pool-max-f2-s2.tiff")
    assert written.dtype == np.uint16
    expected = (samples << 6).reshape(3, 2, 5, 2, 3).max(axis=(1, 3))
    np.testing.assert_array_equal(written, expected)


def test_8_bit_avif_stays_pillows_and_without_imagecodecs_10_bits_are_said(tmp_path):
    levels = np.random.default_rng(4).integers(0, 256, (6, 10, 3)).astype(np.uint8)
    eight = _avif(tmp_path / "eight.avif", levels, 8)
    assert avif_bits(str(eight)) == 8
    picture = read_image(eight)
    assert (picture.depth, picture.notes) == (8, ())
    with Image.open(eight) as im:
        np.testing.assert_array_equal(picture.pixels, np.asarray(im))
    deep = _avif(tmp_path / "deep.avif", levels.astype(np.uint16) << 2, 10)
    result = run_without("imagecodecs", "pool", "-v", deep, "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert "10-bit colour read as 8-bit (Pillow reads colour at 8 bits; " in result.stderr
