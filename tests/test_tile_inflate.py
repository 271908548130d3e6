"""Deflate TIFF segments inflated by ISA-L (convcli.io.tile_inflate) against tifffile's decoding.

Each segment of each layout is decoded both ways and compared value for value,
with where tifffile places it; pages the path does not take, and segments it
hands back to tifffile, are checked too.
"""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest
import tifffile
from helpers import engine

from convcli.io import tile_inflate
from convcli.io.images import ImageError
from convcli.io.regions import open_regions
from convcli.layers._engine import native

pytestmark = pytest.mark.skipif(native._native is None, reason="the C extension was not built")
SHAPE = (37, 45)  # tiles of 16 leave partial tiles on both edges; strips of 8, a short last one


def write(path, dtype, byteorder, samples, planar, tiled, predictor, compression="zlib"):
    """A TIFF of random values in this layout; its values (rows, columns[, samples])."""
    seed = zlib.crc32(repr((dtype, byteorder, samples, planar, tiled, predictor)).encode())
    rng = np.random.default_rng(seed)
    shape = SHAPE if samples == 1 else (*SHAPE, samples)
    values = rng.integers(0, np.iinfo(dtype).max + 1, shape).astype(dtype)
    layout = {"tile": (16, 16)} if tiled else {"rowsperstrip": 8}
    stored = np.moveaxis(values, -1, 0) if planar == "separate" else values  # planes first
    tifffile.imwrite(
        path,
        stored,
        byteorder=byteorder,
        compression=compression,
        predictor=predictor,
        photometric="rgb" if samples == 3 else "minisblack",
        planarconfig=planar if samples == 3 else None,
        **layout,
    )
    return values


LAYOUTS = [
    (dtype, byteorder, samples, planar, tiled, predictor)
    for dtype, byteorder, samples, tiled, predictor in itertools.product(
        ["uint8", "uint16"], "<>", [1, 3], [True, False], [False, True]
    )
    for planar in (["contig", "separate"] if samples == 3 else ["contig"])
]


class CountingPage:
    """A page whose ``decode`` counts its calls: the segments handed back to tifffile."""

    def __init__(self, page):
        self.page, self.calls = page, 0

    def __getattr__(self, name):
        return getattr(self.page, name)

    def decode(self, *args, **kwargs):
        self.calls += 1
        return self.page.decode(*args, **kwargs)


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: "-".join(map(str, layout)))
def test_every_segment_is_tifffiles(tmp_path, native_engine, layout):
    path = tmp_path / "a.tif"
    values = write(path, *layout)
    with tifffile.TiffFile(path) as tif:
        page = tif.pages[0]
        assert page.samplesperpixel == (values.shape[2] if values.ndim == 3 else 1)
        counting = CountingPage(page)
        decode = tile_inflate.deflate_decoder(counting)
        assert decode is not None
        indices = list(range(len(page.dataoffsets)))
        segments = tif.filehandle.read_segments(
            page.dataoffsets, page.databytecounts, indices=indices, length=len(indices)
        )
        for data, index in segments:
            ours, ours_place, ours_shape = decode(data, index)
            theirs, theirs_place, theirs_shape = page.decode(data, index)
            assert ours.shape == theirs.shape == ours_shape == theirs_shape
            np.testing.assert_array_equal(ours, theirs)
            assert ours.dtype.isnative and ours.dtype.itemsize == values.itemsize
            assert ours_place[0] == theirs_place[0] and ours_place[2:4] == theirs_place[2:4]
        assert counting.calls == 0  # every segment inflated here, none handed back
    with open_regions(path) as source:
        rows = source.read_rows(0, SHAPE[0])
    np.testing.assert_array_equal(rows.reshape(values.shape), values)


@pytest.mark.parametrize(
    "dtype, compression, predictor",
    [
        ("int16", "zlib", True),
        ("float32", "zlib", False),
        ("uint8", "lzw", False),
        ("uint8", "packbits", False),
    ],
)
def test_other_pages_are_left_to_tifffile(tmp_path, native_engine, dtype, compression, predictor):
    path = tmp_path / "a.tif"
    values = np.arange(np.prod(SHAPE)).reshape(SHAPE).astype(dtype)
    tifffile.imwrite(path, values, compression=compression, predictor=predictor, tile=(16, 16))
    with tifffile.TiffFile(path) as tif:
        assert tile_inflate.deflate_decoder(tif.pages[0]) is None


def test_the_numpy_engines_leave_every_page_to_tifffile(tmp_path, numpy_engine):
    path = tmp_path / "a.tif"
    write(path, "uint8", "<", 1, "contig", True, True)
    with tifffile.TiffFile(path) as tif:
        assert tile_inflate.deflate_decoder(tif.pages[0]) is None


def test_a_corrupt_segment_is_tifffiles_error(tmp_path, native_engine):
    path = tmp_path / "a.tif"
    write(path, "uint8", "<", 1, "contig", True, True)
    with tifffile.TiffFile(path) as tif:
        offset = tif.pages[0].dataoffsets[4]
    data = bytearray(path.read_bytes())
    data[offset + 2 : offset + 40] = bytes(38)  # the deflate stream of tile 4, broken
    path.write_bytes(bytes(data))
    messages = []
    for name in ("native", "numpy"):
        with engine(name), open_regions(path) as source, pytest.raises(ImageError) as caught:
            source.read_rows(0, SHAPE[0])
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert messages[0].startswith("cannot decode the image")
