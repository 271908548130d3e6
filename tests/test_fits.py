"""FITS images of integers read as their header says: signed samples, BZERO and BSCALE.

Pillow reads a 16-bit FITS image's signed samples as unsigned, and leaves out BZERO and
BSCALE: the unsigned convention most cameras write (BZERO = 32768) came out with dark
and bright swapped about mid-grey, and -300 as 65236.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import ok

from convcli.io.images import read_image


def _card(keyword: str, value) -> bytes:
    return f"{keyword:<8}= {value:>20}".ljust(80).encode()


def _fits(path, stored: np.ndarray, bitpix: int, *cards):
    """A FITS file of one image HDU: `stored` (rows, columns) written as the file's rows, the
    first at the bottom of the picture (as FITS shows it, and Pillow reads it)."""
    height, width = stored.shape
    header = [_card("SIMPLE", "T"), _card("BITPIX", bitpix), _card("NAXIS", 2)]
    header += [_card("NAXIS1", width), _card("NAXIS2", height), *(_card(*c) for c in cards)]
    header = b"".join(header) + b"END".ljust(80)
    data = stored.astype(f">i{bitpix // 8}").tobytes()
    path.write_bytes(
        header.ljust(-(-len(header) // 2880) * 2880)
        + data.ljust(-(-len(data) // 2880) * 2880, b"\0")
    )
    return path


def test_the_unsigned_convention_gives_0_to_65535(tmp_path):
    physical = np.array([[0, 100, 32768, 65535], [1, 2, 3, 40000]])
    path = _fits(tmp_path / "u.fits", physical - 32768, 16, ("BZERO", 32768), ("BSCALE", 1))
    picture = read_image(path)
    assert (picture.white, picture.depth) == (65535.0, 16)
    np.testing.assert_array_equal(picture.pixels[..., 0], physical[::-1])  # first row at the bottom


def test_signed_samples_keep_their_sign(tmp_path):
    stored = np.array([[-300, 0, 300, 32767], [-32768, -1, 1, 2]])
    picture = read_image(_fits(tmp_path / "s.fits", stored, 16))
    assert picture.white == 65535.0  # as a TIFF of int16 samples
    np.testing.assert_array_equal(picture.pixels[..., 0], stored[::-1])


@pytest.mark.parametrize("bitpix", [16, 32])
def test_bscale_and_bzero_give_the_physical_values(tmp_path, bitpix):
    stored = np.array([[-1000, 0, 1000], [2000, 3000, -30000]])
    path = _fits(tmp_path / "p.fits", stored, bitpix, ("BZERO", 10), ("BSCALE", 0.5))
    picture = read_image(path)
    np.testing.assert_array_equal(picture.pixels[..., 0], (stored * 0.5 + 10)[::-1])
    assert picture.white == 1510.0  # their largest: not integers on a 16-bit scale


def test_a_pooled_fits_image_is_written_from_its_physical_values(tmp_path):
    physical = np.arange(16).reshape(4, 4) * 4000
    path = _fits(tmp_path / "u.fits", physical - 32768, 16, ("BZERO", 32768))
    ok("pool", "--size", "2", "--format", "npy", path, "-o", tmp_path / "o")
    written = np.load(tmp_path / "o" / "u_pool-max-f2-s2.npy")
    np.testing.assert_array_equal(written[..., 0], [[52000, 60000], [20000, 28000]])


def test_an_image_extension_after_an_empty_primary_header_is_read_by_its_own_header(tmp_path):
    """Pillow reads the first image with data; its BITPIX and BZERO are the extension's (the
    primary header's BITPIX 16 cut 32-bit values to 16 bits)."""
    stored = np.array([[2500000, 2600000], [-3, 4]])
    primary = b"".join([_card("SIMPLE", "T"), _card("BITPIX", 16), _card("NAXIS", 0)])
    primary = (primary + b"END".ljust(80)).ljust(2880)
    path = _fits(tmp_path / "x.fits", stored, 32, ("BZERO", "1.0D1"))  # D: a double's exponent
    extension = path.read_bytes().replace(_card("SIMPLE", "T"), _card("XTENSION", "'IMAGE   '"), 1)
    path.write_bytes(primary + extension)
    picture = read_image(path)
    np.testing.assert_array_equal(picture.pixels[..., 0], (stored + 10)[::-1])
