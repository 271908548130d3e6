"""PNG rows' zlib streams (convcli.io.zlib_stream) and the native Huffman blocks they mix in.

Every stream is checked by inflating it with Python's zlib (and the PNGs by
reading them back with Pillow); the Huffman blocks' sizes against the count
the encoder makes before it writes.
"""

from __future__ import annotations

import io
import zlib

import numpy as np
import pytest
from helpers import built
from helpers import engine as engine_of
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from convcli.io import png, zlib_stream
from convcli.layers._engine import native

LAST_EMPTY_BLOCK = b"\x03\x00"


def inflate_raw(blocks: bytes) -> bytes:
    """Bare deflate blocks, ended by an empty last block, inflated (checks the end is reached)."""
    inflater = zlib.decompressobj(-15)
    data = inflater.decompress(blocks + LAST_EMPTY_BLOCK)
    assert inflater.eof and not inflater.unused_data
    return data


def fibonacci_bytes(symbols: int, rng) -> bytes:
    """Bytes whose counts are Fibonacci numbers: an optimal prefix code over 14 bits deep."""
    counts = [1, 1]
    while len(counts) < symbols:
        counts.append(counts[-1] + counts[-2])
    data = np.repeat(np.arange(symbols, dtype=np.uint8), counts)
    rng.shuffle(data)
    return data.tobytes()


def sample_bytes(kind: str, size: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        return rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    if kind == "skewed":  # a few common values and a long tail, like Up-filtered rows
        return (rng.geometric(0.3, size) % 256).astype(np.uint8).tobytes()
    if kind == "one value":
        return bytes([int(rng.integers(256))]) * size
    if kind == "two values":
        return rng.choice(np.array([7, 200], np.uint8), size).tobytes()
    return fibonacci_bytes(25, rng)[:size]


@built
@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["uniform", "skewed", "one value", "two values", "fibonacci"]),
    size=st.one_of(st.integers(0, 70_000), st.integers(65_000, 300_000)),
    seed=st.integers(0, 2**16),
)
def test_a_huffman_block_inflates_to_its_bytes(kind, size, seed):
    """Blocks from 64 KiB on are coded from the counts of a quarter of their bytes."""
    data = sample_bytes(kind, size, seed)
    block = native.huffman_block(data)
    assert inflate_raw(block) == data
    assert block.endswith(b"\x00\x00\xff\xff")  # the empty stored block: on a byte boundary


@built
def test_codes_deeper_than_deflate_allows_are_shortened():
    # Fibonacci counts over 30 values: the optimal code is 29 bits deep.
    data = fibonacci_bytes(30, np.random.default_rng(3))
    assert len(data) > 2_000_000
    block = native.huffman_block(data)
    assert inflate_raw(block) == data
    assert len(block) < len(data) / 3  # still a good code: most bytes are the few common values


@built
def test_bytes_the_sampled_counts_never_saw_still_get_a_code():
    """From 64 KiB on, one KiB in four is counted: a byte value only in the others is coded."""
    data = bytearray(b"\x05" * 300_000)
    unseen = [1500, 70_000 + 2048, 299_000]  # none in a counted KiB (the first of each 4)
    assert all(position % 4096 >= 1024 for position in unseen)
    for position, value in zip(unseen, (77, 200, 0), strict=True):
        data[position] = value
    block = native.huffman_block(bytes(data))
    assert inflate_raw(block) == bytes(data)
    assert len(block) < len(data) / 6  # the common value keeps its short code


@built
@pytest.mark.parametrize("size", [50_000, 200_000])
@pytest.mark.parametrize("kind", ["uniform", "skewed", "one value", "fibonacci"])
def test_the_size_limit_is_the_blocks_exact_size(kind, size):
    """Counted whole (50 KB) or sampled (200 KB): the limit is against the size written."""
    data = sample_bytes(kind, size, 1)
    block = native.huffman_block(data)
    assert native.huffman_block(data, len(block)) == block
    assert native.huffman_block(data, len(block) - 1) is None


@built
def test_the_size_limit_holds_where_the_counted_slices_are_unlike_the_rest():
    """Noise in the counted KiB of every four, one value elsewhere: the sampled counts
    overstate the block's size more than twice; the limit is still its size written."""
    g = np.random.default_rng(0)
    data = np.full(200_000, 65, np.uint8)
    counted = (np.arange(data.size) % 4096) < 1024
    noisy = counted & (g.random(data.size) < 0.5)
    data[noisy] = g.integers(0, 256, data.size, dtype=np.uint8)[noisy]
    block = native.huffman_block(data.tobytes())
    assert inflate_raw(block) == data.tobytes()
    assert native.huffman_block(data.tobytes(), len(block)) == block
    assert native.huffman_block(data.tobytes(), len(block) - 1) is None


def edge_map() -> np.ndarray:
    """An 8-bit vertical edge map of a sample photo enlarged to 1200x2000 (2.4 MB, three
    blocks of rows): noisy levels, few repeats."""
    with Image.open("sample_images/chelsea.png") as im:
        grey = np.asarray(im.convert("L").resize((2001, 1200), Image.BICUBIC), np.int16)
    return np.clip(np.abs(np.diff(grey, axis=1)) * 4, 0, 255).astype(np.uint8)


def spy_on_huffman(monkeypatch) -> list[bool]:
    """Whether each call of native.huffman_block gave a block (True) or left it (False)."""
    coded = []
    huffman_block = native.huffman_block

    def spy(block, limit=-1):
        made = huffman_block(block, limit)
        coded.append(made is not None)
        return made

    monkeypatch.setattr(native, "huffman_block", spy)
    return coded


def encoded(levels: np.ndarray, engine: str) -> bytes:
    with engine_of(engine):
        buf = io.BytesIO()
        png.write_png(buf, levels)
        return buf.getvalue()


def read_back(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im)


@built
def test_an_edge_maps_rows_are_huffman_coded_and_read_back(monkeypatch):
    levels = edge_map()
    coded = spy_on_huffman(monkeypatch)
    ours = encoded(levels, "native")
    assert coded == [True, True, True]
    np.testing.assert_array_equal(read_back(ours), levels)
    library = encoded(levels, "numpy")
    np.testing.assert_array_equal(read_back(library), levels)
    assert len(ours) <= zlib_stream.HUFFMAN_SLACK * len(library)


@built
@pytest.mark.parametrize("picture", ["flat with lines", "repeating noise"])
def test_rows_with_long_repeats_keep_the_librarys_size(picture):
    rng = np.random.default_rng(5)
    if picture == "flat with lines":
        levels = np.zeros((900, 1600), np.uint8)
        levels[::50] = 255
    else:  # every row the same noise: Up-filtered, all zero but the first
        levels = np.tile(rng.integers(0, 256, (1, 1600), dtype=np.uint8), (900, 1))
    ours, library = encoded(levels, "native"), encoded(levels, "numpy")
    np.testing.assert_array_equal(read_back(ours), levels)
    # A Huffman code takes a bit a byte at least: 180 KB here; the library's match search
    # takes a few KB.
    assert len(ours) <= 1.1 * len(library) + 64
    assert len(ours) < 20_000


@built
def test_blocks_of_both_coders_make_one_stream(monkeypatch, native_engine):
    rng = np.random.default_rng(8)
    noisy = [(rng.geometric(0.2, 300_000) % 256).astype(np.uint8).tobytes() for _ in range(5)]
    flat = bytes(300_000)
    # A block far from the Huffman code's reach sends the next UNSAMPLED_BLOCKS to the
    # library unsampled: here the flat one, then noisy 1 to 3.
    assert zlib_stream.UNSAMPLED_BLOCKS == 3
    blocks = [noisy[0], flat, *noisy[1:]]
    coded = spy_on_huffman(monkeypatch)
    stream = zlib_stream.ZlibStream(png.deflate_backend())
    data = b"".join(stream.compress(block) for block in blocks) + stream.finish()
    assert coded == [True, True]  # noisy 0 and noisy 4; the flat block never reached it
    assert zlib.decompress(data) == b"".join(blocks)  # its checksum included


def test_without_the_native_engine_the_stream_is_the_librarys(numpy_engine):
    backend = png.deflate_backend()
    rows = np.random.default_rng(2).integers(0, 256, (3, 200_000), dtype=np.uint8)
    stream = zlib_stream.ZlibStream(backend)
    data = b"".join(stream.compress(row) for row in rows) + stream.finish()
    library = zlib_stream.library_compressor(backend)
    expected = b"".join(library.compress(row) for row in rows) + library.flush()
    assert data == expected
    assert zlib.decompress(data) == rows.tobytes()


@built
def test_an_empty_stream_is_a_valid_one(native_engine):
    assert zlib.decompress(zlib_stream.ZlibStream(png.deflate_backend()).finish()) == b""


def test_the_library_forgets_the_rows_before_a_huffman_block(monkeypatch, native_engine):
    # The same rows before and after a Huffman block: were the library's history kept, its
    # matches in the third block would point at the first, where the Huffman block now is.
    rng = np.random.default_rng(4)
    repeated = np.tile(rng.integers(0, 256, 64, dtype=np.uint8), 100).tobytes()
    noisy = (rng.geometric(0.2, 5_000) % 256).astype(np.uint8).tobytes()  # within 32 KB
    limits = iter([None, -1, None])  # library, Huffman (no limit), library
    monkeypatch.setattr(zlib_stream.ZlibStream, "_huffman_limit", lambda self, block: next(limits))
    coded = spy_on_huffman(monkeypatch)
    stream = zlib_stream.ZlibStream(png.deflate_backend())
    blocks = [repeated, noisy, repeated]
    data = b"".join(stream.compress(block) for block in blocks) + stream.finish()
    assert coded == [True]
    assert len(data) < len(noisy) + 2_000  # the repeated rows: a few hundred bytes each
    assert zlib.decompress(data) == b"".join(blocks)


def test_with_the_fast_codecs_off_a_png_is_the_librarys(monkeypatch, native_engine):
    levels = edge_map()
    monkeypatch.setenv(png.FAST_CODECS_VARIABLE, "0")
    png.deflate_backend.cache_clear()
    try:
        coded = spy_on_huffman(monkeypatch)
        off = encoded(levels, "native")
        assert coded == []
        assert off == encoded(levels, "numpy")  # one zlib compressor, as without the engine
        np.testing.assert_array_equal(read_back(off), levels)
    finally:
        monkeypatch.delenv(png.FAST_CODECS_VARIABLE)
        png.deflate_backend.cache_clear()
