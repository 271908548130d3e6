"""AVIF files of 10 and 12-bit samples: read at full depth by imagecodecs, or said.

Pillow's AVIF reader gives 8 bits whatever the file holds, without a word: an HDR
photo's levels came out quantised to 256. With imagecodecs (the ``deep`` extra,
libavif) they are read on their own scale (white 1023 for 10 bits), as a 12-bit TIFF is.
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


@pytest.mark.parametrize(("bits", "channels"), [(10, 3), (12, 4), (10, 1), (10, 2)])
def test_deep_samples_are_read_on_their_own_scale(tmp_path, bits, channels):
    shape = (6, 10, channels) if channels > 1 else (6, 10)
    samples = np.random.default_rng(bits).integers(0, 2**bits, shape).astype(np.uint16)
    samples.flat[:2] = (0, 2**bits - 1)
    path = _avif(tmp_path / "deep.avif", samples, bits)
    assert avif_bits(str(path)) == bits
    picture = read_image(path)
    assert (picture.white, picture.depth, picture.notes) == (2.0**bits - 1, 16, ())
    expected = samples.reshape(6, 10, channels)
    if channels == 2:  # grey + alpha, which Pillow gives as RGBA
        expected = expected[..., [0, 0, 0, 1]]
    np.testing.assert_array_equal(picture.pixels, expected.astype(np.float32))


def test_a_pooled_10_bit_avif_is_written_at_16_bits_white_at_65535(tmp_path):
    samples = np.random.default_rng(3).integers(0, 1024, (6, 10, 3)).astype(np.uint16)
    samples[0, 0] = 1023
    path = _avif(tmp_path / "hdr.avif", samples, 10)
    ok("pool", "--size", 2, "--format", "tiff", path, "-o", tmp_path / "out")
    written = tifffile.imread(tmp_path / "out" / "hdr_pool-max-f2-s2.tiff")
    assert written.dtype == np.uint16 and written.max() == 65535
    pooled = samples.reshape(3, 2, 5, 2, 3).max(axis=(1, 3))
    np.testing.assert_array_equal(written, np.floor(pooled * (65535 / 1023) + 0.5))


def test_the_depth_is_the_files_boxes_not_text_that_spells_pixi(tmp_path):
    """An XMP packet naming pixiv.net gave an 8-bit AVIF a note of 252-bit colour."""
    levels = np.random.default_rng(5).integers(0, 256, (6, 10, 3)).astype(np.uint8)
    path = tmp_path / "x.avif"
    xmp = b"<x:xmpmeta xmlns:x='adobe:ns:meta/'>https://www.pixiv.net/pixi\x01\xfc</x:xmpmeta>"
    Image.fromarray(levels).save(path, xmp=xmp, quality=100)
    assert b"pixi\x01" in path.read_bytes()
    assert avif_bits(str(path)) == 8
    assert read_image(path).notes == ()


def test_a_10_bit_animation_is_read_by_pillow_and_said(tmp_path):
    """imagecodecs' first image of an animated AVIF ended the process (a segfault)."""
    frames = np.random.default_rng(6).integers(0, 1024, (2, 6, 10, 3)).astype(np.uint16)
    path = _avif(tmp_path / "anim.avif", frames, 10)
    result = ok("pool", "--size", 2, "-v", path, "-o", tmp_path / "out")
    assert (
        "10-bit colour read as 8-bit (Pillow reads colour at 8 bits; imagecodecs reads no AVIF "
        "animations)" in result.stderr
    )


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


def test_the_depth_is_found_past_properties_larger_than_what_is_read(tmp_path):
    """A large box among the properties (an ICC profile, item data) ran past the first 64 KB:
    the walk stopped there, and a 10-bit file was read at 8 bits unsaid."""
    samples = np.random.default_rng(7).integers(0, 1024, (6, 10, 3)).astype(np.uint16)
    data = bytearray(imagecodecs.avif_encode(samples, level=100, bitspersample=10))
    ipco = data.find(b"ipco") - 4
    filler = (70_008).to_bytes(4, "big") + b"free" + bytes(70_000)
    for kind in (b"meta", b"iprp", b"ipco"):  # each box that holds the filler grows by it
        at = data.find(kind) - 4
        data[at : at + 4] = (int.from_bytes(data[at : at + 4], "big") + len(filler)).to_bytes(
            4, "big"
        )
    end = ipco + int.from_bytes(data[ipco : ipco + 4], "big") - len(filler)
    path = tmp_path / "big.avif"
    path.write_bytes(bytes(data[:end]) + filler + bytes(data[end:]))
    assert avif_bits(str(path)) == 10
