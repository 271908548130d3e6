"""The zlib stream of a PNG's rows, deflated a block of rows at a time by the faster coder.

Up-filtered rows of an edge map hold few repeats: their deflate is mostly the
Huffman coding of single bytes, which the native engine writes
(``huffman_block`` in ``_native.c``) in 3 ms for a 2400x1800 edge map, where
ISA-L's level 1 takes 13 ms for a file 3% larger. Rows with long repeats (flat
areas, a photo's sky, a repeating pattern) deflate far smaller with the
library's match search. So the library deflates a sample of a block (up to
four slices of 4 KB), and the block gets the Huffman code where its size,
counted before it is written, is within ``HUFFMAN_SLACK`` of what the sample
says the library's would be; the library's deflate otherwise (ISA-L, or
Python's zlib where isal is missing), as it does without a sample for the few
blocks after one whose byte counts put the Huffman code far out of reach.

Every block ends on a byte boundary (the library's with a full flush, which
also forgets the rows before it), so blocks of either coder follow one another
in one standard zlib stream. Where the native engine is not active
(or the fast codecs are turned off, ``CONVCLI_FAST_CODECS=0``) the stream is
the library's alone, as one compressor object gives it.
"""

from __future__ import annotations

import zlib

import numpy as np

from ..layers._engine import native

# The Huffman code is taken where its estimated size is at most this much over the library's.
HUFFMAN_SLACK = 1.03
# The sample of a block coded both ways: this many slices of SLICE_BYTES, evenly spread.
SAMPLE_SLICES = 4
SLICE_BYTES = 4096
# Where a block's byte counts put the Huffman code this far over the library's size, the
# next UNSAMPLED_BLOCKS blocks go to the library unsampled: sampling every block of a photo's
# rows made their encoding 6% slower than the library's alone, 3% with this.
FAR_OFF = 1.1
UNSAMPLED_BLOCKS = 3
# The most bytes the native engine codes at once.
HUFFMAN_MAX_BYTES = 1 << 30
# A zlib stream's header (deflate, a 32 KB window, the fastest level) and its empty last block.
_ZLIB_HEADER = b"\x78\x01"
_LAST_EMPTY_BLOCK = b"\x03\x00"


def library(backend: str):
    """The zlib module of `backend`: ISA-L's ``isal_zlib`` (``"isal"``) or Python's ``zlib``,
    with the same functions (ISA-L's checksums are the same, and faster)."""
    if backend == "isal":
        from isal import isal_zlib

        return isal_zlib
    return zlib


def library_compressor(backend: str, *, raw: bool = False):
    """A compressor object at level 1: ISA-L's (`backend` ``"isal"``) or zlib's, run-length.

    `raw`: a bare deflate stream (no zlib header or checksum).
    """
    bits = -15 if raw else 15
    if backend == "isal":
        isal_zlib = library(backend)
        return isal_zlib.compressobj(1, isal_zlib.DEFLATED, bits)
    # Run-length matching suits Up-filtered rows: on a 2400x1800 edge map, 41 ms for
    # 2743 KB against 66 ms for 2963 KB with the default strategy (RGB photo: 105 ms
    # / 4826 KB against 123 ms / 5096 KB).
    return zlib.compressobj(1, zlib.DEFLATED, bits, 9, zlib.Z_RLE)


class ZlibStream:
    """A zlib stream made block by block: :meth:`compress` each block, then :meth:`finish`.

    Parameters
    ----------
    backend : {"isal", "zlib"}
        The library that deflates blocks with long repeats (all blocks where the
        native engine is not active).
    huffman : bool
        Whether blocks may get the native engine's Huffman code (where it is active).

    Examples
    --------
    >>> stream = ZlibStream("zlib")
    >>> data = stream.compress(bytes(range(256)) * 64) + stream.finish()
    >>> zlib.decompress(data) == bytes(range(256)) * 64
    True
    """

    def __init__(self, backend: str, *, huffman: bool = True):
        self._backend = backend
        self._mixed = huffman and native.active()
        if self._mixed:
            self._library = library_compressor(backend, raw=True)
            self._trial = library_compressor(backend, raw=True)  # for the samples
            self._adler32 = library(backend).adler32
            self._checksum = 1
            self._header = _ZLIB_HEADER  # not written yet
            self._unsampled = 0  # blocks left to give the library without a sample
        else:
            self._library = library_compressor(backend)

    def compress(self, block) -> bytes:
        """The stream's bytes for `block` (a C-contiguous buffer of bytes), maybe none yet."""
        if not self._mixed:
            return self._library.compress(block)
        head, self._header = self._header, b""  # before the stream's first bytes
        self._checksum = self._adler32(block, self._checksum)
        limit = None
        if len(block) > HUFFMAN_MAX_BYTES:
            pass  # a row over a gigabyte: the library's
        elif self._unsampled:  # the blocks before were far from the Huffman code's reach
            self._unsampled -= 1
        else:
            limit = self._huffman_limit(np.frombuffer(block, np.uint8))
        huffman = native.huffman_block(block, limit) if limit is not None else None
        if huffman is not None:
            return head + huffman
        return head + self._library.compress(block) + self._library.flush(zlib.Z_FULL_FLUSH)

    def finish(self) -> bytes:
        """The rest of the stream: the last block and the checksum."""
        if not self._mixed:
            return self._library.flush()
        head, self._header = self._header, b""  # before the stream's first bytes
        return head + _LAST_EMPTY_BLOCK + self._checksum.to_bytes(4, "big")

    def _huffman_limit(self, block: np.ndarray) -> int | None:
        """The most bytes the Huffman code of `block` may take: HUFFMAN_SLACK times the
        library's deflate of it, as the library's deflate of a sample of it says; None where
        the sample's byte counts already say that it cannot be that small."""
        sample = _sample(block)
        if not len(sample):
            return None
        sample_bytes = len(self._trial.compress(sample)) + len(self._trial.flush(zlib.Z_FULL_FLUSH))
        limit = HUFFMAN_SLACK * len(block) * sample_bytes / len(sample)
        # No prefix code beats the entropy of the bytes, nor takes under a bit a byte.
        shares = np.bincount(sample, minlength=256) / len(sample)
        shares = shares[shares > 0]
        bits_per_byte = max(1.0, -float(np.sum(shares * np.log2(shares))))
        floor_bytes = len(block) * bits_per_byte / 8
        if floor_bytes > limit:
            if floor_bytes > FAR_OFF * limit:
                self._unsampled = UNSAMPLED_BLOCKS
            return None
        return int(limit)


def _sample(block: np.ndarray) -> np.ndarray:
    """Up to SAMPLE_SLICES slices of SLICE_BYTES of `block`, evenly spread (all of a small one)."""
    if len(block) <= SAMPLE_SLICES * SLICE_BYTES:
        return block
    starts = np.linspace(0, len(block) - SLICE_BYTES, SAMPLE_SLICES).astype(np.intp)
    return np.concatenate([block[s : s + SLICE_BYTES] for s in starts])
