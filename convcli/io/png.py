"""PNG files written with numpy row filters and a fast deflate (no Pillow).

Pillow's PNG writer tries every row filter on every row and has no option to
choose one; that search took about half of its time on a 2400x1800 edge map
(110 ms in all). Here every row gets the Up filter (the row minus the row
above, byte by byte: one numpy subtraction), and the rows are deflated a
block at a time (:mod:`convcli.io.zlib_stream`): by the native engine's
Huffman code of single bytes where a sample of the block says it is about as
small, else by ISA-L (the ``isal`` package, a dependency) at level 1, or by
Python's zlib at level 1 with the run-length strategy where ISA-L is missing.
For that map: 5 ms, 14 ms or 41 ms, files within 7% of Pillow's
(``benchmarks/bench_batch.py`` compares the encoders). The stream is a
standard PNG: IHDR, the text chunks, IDAT, IEND.

:func:`write_apng` writes a stack of frames as an animated PNG (APNG): every
frame whole, drawn in place of the one before (no frame is merged, cropped or
left out, as Pillow's writer does with frames that repeat), each with its
duration, and the loop count.
"""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Iterable
from typing import BinaryIO

import numpy as np

from .formats import PNG_SIGNATURE
from .zlib_stream import ZlibStream, library

FAST_CODECS_VARIABLE = "CONVCLI_FAST_CODECS"
"""Set to ``0`` to use only Pillow, numpy and Python's zlib for images, even where ISA-L,
libjpeg-turbo, imagecodecs and the native engine's codecs could take part."""

_UP = 2  # the PNG filter type "Up"
# PNG colour types by the number of channels: grey, grey + alpha, RGB, RGBA.
_COLOUR_TYPES = {1: 0, 2: 4, 3: 2, 4: 6}
# Rows are filtered and deflated in blocks of about this many bytes, so that
# the filtered copy stays small (and in cache) whatever the image size.
_BLOCK_BYTES = 1 << 20


def fast_codecs_allowed() -> bool:
    """Whether the optional fast libraries may be used (:data:`FAST_CODECS_VARIABLE`)."""
    return os.environ.get(FAST_CODECS_VARIABLE, "1").strip() != "0"


@functools.cache
def deflate_backend() -> str:
    """``"isal"`` where ISA-L's zlib module can be imported (and is allowed), else ``"zlib"``."""
    if fast_codecs_allowed():
        try:
            from isal import isal_zlib  # noqa: F401
        except ImportError:
            pass
        else:
            return "isal"
    return "zlib"


def write_chunk(fh: BinaryIO, kind: bytes, data: bytes) -> None:
    """Write one PNG chunk to `fh`: its length, `kind`, `data` and their CRC."""
    fh.write(struct.pack(">I", len(data)))
    fh.write(kind)
    fh.write(data)
    crc32 = library(deflate_backend()).crc32
    fh.write(struct.pack(">I", crc32(data, crc32(kind))))


def write_png(
    fh: BinaryIO,
    levels: np.ndarray,
    *,
    text: dict[str, str] | None = None,
    backend: str | None = None,
    chunks: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """Write `levels` to the open binary file `fh` as a PNG stream.

    Parameters
    ----------
    fh : binary file
        Written from its current position.
    levels : (H, W) or (H, W, C) uint8 or uint16 ndarray
        C in 1 (grey), 2 (grey + alpha), 3 (RGB), 4 (RGBA); uint16 gives a 16-bit PNG.
    text : dict, optional
        Latin-1 keywords and values, written as ``tEXt`` chunks before the pixels.
    backend : {"isal", "zlib"}, optional
        The deflate to use; :func:`deflate_backend` by default.
    chunks : iterable of (bytes, bytes)
        Further chunks (kind, data) before the pixels: ``iCCP``, ``pHYs``, ``eXIf``.

    See Also
    --------
    PngRowEncoder : the same stream, byte for byte, from rows that arrive in bands.

    Examples
    --------
    >>> import io
    >>> buf = io.BytesIO()
    >>> write_png(buf, np.zeros((2, 3), np.uint8), text={"Software": "convcli"})
    >>> buf.getvalue()[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
    True
    """
    arr = _checked_levels(levels)
    encoder = PngRowEncoder(
        fh, shape=arr.shape, dtype=arr.dtype, text=text, backend=backend, chunks=chunks
    )
    encoder.write(arr)
    encoder.close()


def _checked_levels(levels) -> np.ndarray:
    """`levels` as an (H, W, C) uint8 or uint16 array with C in 1..4 and H, W > 0, or ValueError."""
    arr = np.asarray(levels)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    _check_layout(arr.shape, arr.dtype)
    return arr


def _check_layout(shape: tuple[int, ...], dtype) -> None:
    """ValueError unless `shape` is (H, W, C) with C in 1..4, H, W > 0, and `dtype` uint8/16."""
    if len(shape) != 3 or shape[2] not in _COLOUR_TYPES:
        raise ValueError(f"levels must be (H, W) or (H, W, C) with C in 1..4, got {shape}")
    if np.dtype(dtype) not in (np.uint8, np.uint16):
        raise ValueError(f"levels must be uint8 or uint16, got {np.dtype(dtype)}")
    if shape[0] == 0 or shape[1] == 0:
        raise ValueError(f"levels must have at least one row and column, got {shape}")


class PngRowEncoder:
    """A PNG stream written to `fh` as its rows arrive, top to bottom, in bands of any height.

    The rows are Up-filtered and deflated in blocks of about ``_BLOCK_BYTES``,
    the blocks :func:`write_png` uses, so the file is the same, byte for byte,
    however the rows are cut; memory holds one block, whatever the height.

    Parameters
    ----------
    fh : binary file
        Written from its current position: the header at once, the rest as rows come.
    shape : (H, W, C) tuple
        The image's size and channels, C in 1..4.
    dtype : uint8 or uint16
    text, backend, chunks
        As for :func:`write_png`.

    Examples
    --------
    >>> import io
    >>> levels = np.arange(24, dtype=np.uint8).reshape(4, 6, 1)
    >>> whole, banded = io.BytesIO(), io.BytesIO()
    >>> write_png(whole, levels)
    >>> encoder = PngRowEncoder(banded, shape=levels.shape, dtype=np.uint8)
    >>> for band in (levels[:1], levels[1:4]):
    ...     encoder.write(band)
    >>> encoder.close()
    >>> banded.getvalue() == whole.getvalue()
    True
    """

    def __init__(
        self,
        fh: BinaryIO,
        *,
        shape: tuple[int, int, int],
        dtype,
        text: dict[str, str] | None = None,
        backend: str | None = None,
        chunks: Iterable[tuple[bytes, bytes]] = (),
    ):
        self._fh = fh
        self._open(shape, dtype, backend)
        _header(fh, self._shape, self._dtype, text, chunks=chunks)

    def _open(self, shape: tuple[int, int, int], dtype, backend: str | None) -> None:
        """The encoder's state for an image of `shape` and `dtype` (no bytes written)."""
        _check_layout(tuple(shape), dtype)
        self._shape, self._dtype = tuple(shape), np.dtype(dtype)
        height, width, channels = self._shape
        self._row_bytes = width * channels * self._dtype.itemsize
        self._block_rows = max(1, _BLOCK_BYTES // self._row_bytes)
        self._stream = ZlibStream(backend or deflate_backend(), huffman=fast_codecs_allowed())
        self._filtered = np.empty((min(self._block_rows, height), 1 + self._row_bytes), np.uint8)
        self._filtered[:, 0] = _UP
        self._previous = np.zeros((1, self._row_bytes), np.uint8)  # above the first row: zeros
        self._pending = np.empty((min(self._block_rows, height), width * channels), self._dtype)
        self._pending_rows = 0
        self._rows_written = 0

    def write(self, rows: np.ndarray) -> None:
        """Add the next `rows`: (n, W) or (n, W, C) of the encoder's dtype."""
        height, width, channels = self._shape
        band = np.asarray(rows)
        if band.ndim == 2 and channels == 1:
            band = band[:, :, None]
        if band.ndim != 3 or band.shape[1:] != (width, channels) or band.dtype != self._dtype:
            raise ValueError(
                f"rows must be (n, {width}, {channels}) {self._dtype}; "
                f"got {band.shape} {band.dtype}"
            )
        if self._rows_written + len(band) > height:
            raise ValueError(f"{self._rows_written + len(band)} rows for an image of {height}")
        self._rows_written += len(band)
        flat = band.reshape(len(band), width * channels)
        start = 0
        if self._pending_rows:  # complete the block begun by earlier rows first
            start = min(len(flat), self._block_rows - self._pending_rows)
            self._pending[self._pending_rows : self._pending_rows + start] = flat[:start]
            self._pending_rows += start
            if self._pending_rows < self._block_rows:
                return
            self._encode(self._pending)
            self._pending_rows = 0
        while len(flat) - start >= self._block_rows:
            self._encode(flat[start : start + self._block_rows])
            start += self._block_rows
        self._pending_rows = len(flat) - start
        self._pending[: self._pending_rows] = flat[start:]

    def close(self) -> None:
        """Write the last rows and the end of the stream; ValueError if rows are missing."""
        self._end_data()
        write_chunk(self._fh, b"IEND", b"")

    def _end_data(self) -> None:
        """Deflate the last rows and end the deflate stream; ValueError if rows are missing."""
        if self._rows_written != self._shape[0]:
            raise ValueError(f"{self._rows_written} rows written of {self._shape[0]}")
        if self._pending_rows:
            self._encode(self._pending[: self._pending_rows])
            self._pending_rows = 0
        self._data(self._stream.finish())

    def _data(self, data: bytes) -> None:
        """Write a piece of the deflate stream: an IDAT chunk."""
        write_chunk(self._fh, b"IDAT", data)

    def _encode(self, block: np.ndarray) -> None:
        """Up-filter and deflate `block` (rows, W * C); an IDAT chunk if the deflate gives bytes."""
        if self._dtype == np.uint16:  # samples big-endian in the file
            block = block.astype(self._dtype.newbyteorder(">"))
        raw = block.view(np.uint8).reshape(len(block), self._row_bytes)
        out = self._filtered[: len(raw)]
        # Up: each byte minus the byte above it, modulo 256.
        np.subtract(raw[:1], self._previous, out=out[:1, 1:])
        np.subtract(raw[1:], raw[:-1], out=out[1:, 1:])
        self._previous = raw[-1:].copy()
        data = self._stream.compress(out)
        if data:
            self._data(data)


_DEFAULT_DURATION_MS = 100  # where the input gives no duration (a TIFF's pages)


def write_apng(
    fh: BinaryIO,
    frames: np.ndarray,
    *,
    durations=None,
    loop: int | None = 0,
    text: dict[str, str] | None = None,
    backend: str | None = None,
) -> None:
    """Write the frames of `frames` to `fh` as an animated PNG.

    Parameters
    ----------
    fh : binary file
        Written from its current position.
    frames : (m, H, W) or (m, H, W, C) uint8 or uint16 ndarray
        The frames, as :func:`write_png` takes one.
    durations : sequence of (int or None), optional
        Each frame's time on screen in milliseconds; None (or a missing
        list) is 100 ms.
    loop : int or None
        How many times the animation plays; 0 or None: for ever.
    text, backend
        As for :func:`write_png`.

    Notes
    -----
    The default image (IDAT) is the first frame, so viewers without APNG
    support show it. Every frame covers the whole canvas, is drawn with
    ``APNG_BLEND_OP_SOURCE`` and disposed with ``APNG_DISPOSE_OP_NONE``:
    each shows exactly its own levels. Pillow reads the frames back (its
    ``seek``) level for level.

    Examples
    --------
    >>> import io
    >>> buf = io.BytesIO()
    >>> write_apng(buf, np.zeros((3, 2, 4), np.uint8), durations=[40, 40, 80])
    >>> b"acTL" in buf.getvalue()
    True
    """
    stack, durations = _frames_and_durations(frames, durations)
    writer = ApngWriter(
        fh,
        shape=stack.shape[1:],
        dtype=stack.dtype,
        count=len(stack),
        loop=loop,
        text=text,
        backend=backend,
    )
    for frame, duration in zip(stack, durations, strict=True):
        writer.add(frame, duration)
    writer.close()


def _frames_and_durations(frames, durations) -> tuple[np.ndarray, list]:
    """:func:`write_apng`'s frames as (m, H, W, C) and a duration for each (None: 100 ms);
    a ValueError for no frames, or a count of durations that is not theirs."""
    stack = np.asarray(frames)
    if stack.ndim == 3:
        stack = stack[..., None]
    if stack.ndim != 4 or len(stack) == 0:
        raise ValueError(f"frames must be (m, H, W) or (m, H, W, C) with m >= 1, got {stack.shape}")
    durations = list(durations) if durations is not None else [None] * len(stack)
    if len(durations) != len(stack):
        raise ValueError(f"{len(durations)} durations for {len(stack)} frames")
    return stack, durations


class ApngWriter:
    """An animated PNG written to `fh` a frame at a time (:func:`write_apng`'s stream).

    Parameters
    ----------
    fh : binary file
        Written from its current position: the header at once, each frame as it comes.
    shape : (H, W, C) tuple
        Every frame's size and channels, C in 1..4.
    dtype : uint8 or uint16
    count : int
        The frames to come (the file's header says how many).
    loop, text, backend
        As for :func:`write_apng`.
    chunks
        As for :func:`write_png`.
    """

    def __init__(
        self,
        fh: BinaryIO,
        *,
        shape: tuple[int, int, int],
        dtype,
        count: int,
        loop: int | None = 0,
        text: dict[str, str] | None = None,
        backend: str | None = None,
        chunks: Iterable[tuple[bytes, bytes]] = (),
    ):
        _check_layout(tuple(shape), dtype)
        self._fh, self._shape, self._dtype = fh, tuple(shape), np.dtype(dtype)
        self._count, self._backend = count, backend
        self._added = self._sequence = 0
        _header(fh, self._shape, dtype, text, frames=count, loop=loop, chunks=chunks)

    def add(self, frame: np.ndarray, duration=None) -> None:
        """Write the next frame, (H, W) or (H, W, C), shown `duration` ms (None: 100)."""
        arr = np.asarray(frame)
        if arr.ndim == 2:
            arr = arr[:, :, None]
        if arr.shape != self._shape or arr.dtype != self._dtype:
            raise ValueError(
                f"a frame must be {self._shape} {self._dtype}; got {arr.shape} {arr.dtype}"
            )
        if self._added == self._count:
            raise ValueError(f"more than the {self._count} frames announced")
        height, width = self._shape[:2]
        numerator, denominator = _delay(duration)
        write_chunk(
            self._fh,
            b"fcTL",
            struct.pack(
                ">IIIIIHHBB", self._sequence, width, height, 0, 0, numerator, denominator, 0, 0
            ),
        )
        self._sequence += 1
        frame_data = _FrameData(self._frame_data, self._shape, self._dtype, self._backend)
        frame_data.write(arr)
        frame_data._end_data()
        self._added += 1

    def _frame_data(self, data: bytes) -> None:
        """A piece of a frame's deflate stream: IDAT for the first frame, else numbered fdAT."""
        if self._added == 0:
            write_chunk(self._fh, b"IDAT", data)
        else:
            write_chunk(self._fh, b"fdAT", struct.pack(">I", self._sequence) + data)
            self._sequence += 1

    def close(self) -> None:
        """Write the end of the stream; ValueError if frames are missing."""
        if self._added != self._count:
            raise ValueError(f"{self._added} frames written of {self._count}")
        write_chunk(self._fh, b"IEND", b"")


def _header(
    fh: BinaryIO,
    shape: tuple[int, int, int],
    dtype,
    text: dict[str, str] | None,
    *,
    frames: int | None = None,
    loop: int | None = None,
    chunks: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """The signature, IHDR and text chunks of a PNG of `shape` (H, W, C); with `frames`, the
    acTL chunk of an animated PNG of that many frames (after IHDR, before the text); then
    `chunks` (kind, data), before the pixels."""
    height, width, channels = shape
    fh.write(PNG_SIGNATURE)
    write_chunk(
        fh,
        b"IHDR",
        struct.pack(
            ">IIBBBBB",
            width,
            height,
            8 * np.dtype(dtype).itemsize,
            _COLOUR_TYPES[channels],
            0,
            0,
            0,
        ),
    )
    if frames is not None:
        write_chunk(fh, b"acTL", struct.pack(">II", frames, int(loop or 0)))
    for key, value in (text or {}).items():
        write_chunk(fh, b"tEXt", key.encode("latin-1") + b"\0" + value.encode("latin-1"))
    for kind, data in chunks:
        write_chunk(fh, kind, data)


def _delay(duration) -> tuple[int, int]:
    """An APNG frame's delay fraction (seconds) for `duration` milliseconds (None: the default)."""
    ms = _DEFAULT_DURATION_MS if duration is None else max(0, int(round(duration)))
    if ms <= 0xFFFF:
        return ms, 1000
    return min(round(ms / 10), 0xFFFF), 100


class _FrameData(PngRowEncoder):
    """One APNG frame's image data: :class:`PngRowEncoder`'s deflate stream, each piece handed to
    `put` (no header, no end): the IDAT payloads :func:`write_png` writes for the frame."""

    def __init__(self, put, shape: tuple[int, int, int], dtype, backend: str | None):
        self._put = put
        self._open(shape, dtype, backend)

    def _data(self, data: bytes) -> None:
        self._put(data)
