"""Bands of rows too wide to hold in memory, kept on disk in column pieces (numpy only).

A tiled TIFF is read and written a row of tiles at a time: 256 rows of the
full width, 8 MB for a grey image 32,000 pixels wide, 100 MB in float32 at
100,000. The strips of an image processed in strips hold only a few rows
each, so such a band is the one thing whose memory would grow with the
image's width. A :class:`BandFile` keeps it in a temporary file instead, laid
out as column pieces one after another, each with its rows contiguous, so
that a piece (a group of whole tiles) and the rows of a strip are each read
or written with one call per piece. The operating system's file cache keeps
the recent pieces; the process holds one piece at a time.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

SPILL_BYTES = 4 << 20
"""A band larger than this is kept in a :class:`BandFile` rather than in memory, where no
``--memory`` budget allows more (:func:`spill_limit`); 0 keeps every band on disk."""

BUDGET_SHARE = 12
"""A band of rows is kept in memory where it takes at most this share of the ``--memory``
budget (of an output's part of it, where there are several): a tiled writer holds three at
once (filled, queued, written), in a quarter of it."""

HELD_BAND_BYTES = 64 << 20
"""The largest band kept in memory whatever the budget: beyond it the bands' memory would
grow with the image's width, for the same gain (the bands' copies through the file cache)."""

_VECTORED = hasattr(os, "preadv") and hasattr(os, "pwritev")
"""Whether the system reads and writes lists of buffers in one call (not Windows)."""


def _iov_max() -> int:
    """The most buffers the system takes in one vectored call (1024 at most)."""
    try:
        return max(1, min(1024, os.sysconf("SC_IOV_MAX")))
    except (AttributeError, ValueError, OSError):  # no such setting: POSIX's least
        return 16


_IOV_MAX = _iov_max()

PIECE_BYTES = 2 << 20
"""About the bytes of one column piece of a :class:`BandFile` (at least one tile wide)."""


class SpillError(OSError):
    """A band could not be kept on disk (its folder full or not writable): one line says where."""


def piece_columns(rows: int, pixel_bytes: int, tile: int, piece_bytes: int | None = None) -> int:
    """The columns of a column piece of `rows` rows: whole tiles, about `piece_bytes`
    (:data:`PIECE_BYTES` by default), one tile at least.

    >>> piece_columns(256, 4, 256), piece_columns(256, 4, 256, piece_bytes=1)
    (2048, 256)
    """
    piece_bytes = PIECE_BYTES if piece_bytes is None else piece_bytes
    return max(1, piece_bytes // max(1, rows * pixel_bytes * tile)) * tile


def spill_limit(budget: int | None = None) -> int:
    """The bytes of the largest band of rows kept in memory under a ``--memory`` `budget`
    (bytes; None: no budget said): :data:`SPILL_BYTES`, or a :data:`BUDGET_SHARE` of the
    budget where that is more, up to :data:`HELD_BAND_BYTES`.

    >>> spill_limit() >> 20, spill_limit(100 << 20) >> 20, spill_limit(600 << 20) >> 20
    (4, 8, 50)
    """
    if budget is None or not SPILL_BYTES:
        return SPILL_BYTES
    return max(SPILL_BYTES, min(budget // BUDGET_SHARE, HELD_BAND_BYTES))


def spills(rows: int, width: int, channels: int, dtype, limit: int | None = None) -> bool:
    """Whether a band of this size is kept on disk: larger than `limit` bytes
    (:func:`spill_limit`; :data:`SPILL_BYTES` by default)."""
    limit = spill_limit() if limit is None else limit
    return rows * width * channels * np.dtype(dtype).itemsize > limit


class BandFile:
    """A (rows, width, channels) image on disk, in bands of rows, each in column pieces.

    Parameters
    ----------
    rows, width, channels : int
    dtype : numpy dtype
    tile : int
        Pieces are a multiple of this many columns wide (the last takes the rest).
    band_rows : int, optional
        The rows of a band (all of them by default): each band is stored as its
        pieces one after another, and a piece is read or written within a band.
    piece_bytes : int, optional
        About the bytes of a piece in a band (:data:`PIECE_BYTES` by default).
    folder : path-like, optional
        Where the file goes (the system's temporary folder by default). It has
        no name where the system allows it, and is removed on :meth:`close`.

    Examples
    --------
    >>> band = BandFile(4, 600, 1, np.uint8, tile=256, piece_bytes=1024)
    >>> band.pieces
    [(0, 256), (256, 512), (512, 600)]
    >>> band.write_rows(0, np.arange(2400, dtype=np.uint8).reshape(4, 600, 1))
    >>> band.read_rows(1, 3)[:, 598:, 0].tolist()
    [[174, 175], [6, 7]]
    >>> band.read_piece(2, 0, 1).shape
    (1, 88, 1)
    >>> band.close()
    """

    def __init__(
        self,
        rows: int,
        width: int,
        channels: int,
        dtype,
        *,
        tile: int = 256,
        band_rows: int | None = None,
        piece_bytes: int | None = None,
        folder: str | os.PathLike | None = None,
    ):
        self.shape = (int(rows), int(width), int(channels))
        self.dtype = np.dtype(dtype)
        self.band_rows = int(band_rows or rows)
        pixel = channels * self.dtype.itemsize
        step = piece_columns(self.band_rows, pixel, tile, piece_bytes)
        self.pieces = [(c0, min(width, c0 + step)) for c0 in range(0, width, step)]
        self._pixel = pixel
        self._folder = tempfile.gettempdir() if folder is None else os.fspath(folder)
        with self._errors():
            self._fh = tempfile.TemporaryFile(dir=folder, buffering=0)

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """An OSError of the file as a :class:`SpillError` naming its folder."""
        try:
            yield
        except SpillError:
            raise
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise SpillError(
                f"cannot keep rows of {self.shape[1]} pixels on disk in {self._folder}: {reason}"
            ) from None

    def _offset(self, index: int, r0: int) -> int:
        """The byte where row `r0` of piece `index` starts."""
        top = r0 // self.band_rows * self.band_rows
        rows = min(self.band_rows, self.shape[0] - top)
        c0, c1 = self.pieces[index]
        return (top * self.shape[1] + rows * c0 + (r0 - top) * (c1 - c0)) * self._pixel

    def _within_bands(self, r0: int, r1: int):
        """The runs of rows ``r0 .. r1 - 1`` that lie in one band each."""
        while r0 < r1:
            end = min(r1, (r0 // self.band_rows + 1) * self.band_rows)
            yield r0, end
            r0 = end

    def _transfer(self, offset: int, buffers: list, *, reading: bool) -> None:
        """Write `buffers` (byte memoryviews) to the file one after another from byte
        `offset`, or fill them from there: one vectored call per :data:`_IOV_MAX` of
        them where the system has it, as many as short writes or reads take."""
        with self._errors():
            if not _VECTORED:  # one buffer of them all (a copy), as a plain call takes it
                whole = bytearray(sum(buffer.nbytes for buffer in buffers))
                if not reading:
                    whole[:] = b"".join(buffers)
                buffers, joined = [memoryview(whole)], buffers
            index = 0
            while index < len(buffers):
                done = self._call(offset, buffers[index : index + _IOV_MAX], reading)
                if not done:  # (buffers of no bytes are never given)
                    raise OSError("the file was cut short" if reading else "no byte was written")
                offset += done
                while index < len(buffers) and done >= buffers[index].nbytes:
                    done -= buffers[index].nbytes
                    index += 1
                if done:  # a buffer done in part: the rest of it next
                    buffers[index] = buffers[index][done:]
            if not _VECTORED and reading:
                start = 0
                for buffer in joined:
                    buffer[:] = whole[start : start + buffer.nbytes]
                    start += buffer.nbytes

    def _call(self, offset: int, buffers: list, reading: bool) -> int:
        """One read or write of `buffers` at `offset`: the bytes it moved."""
        if _VECTORED:
            call = os.preadv if reading else os.pwritev
            return call(self._fh.fileno(), buffers, offset)
        self._fh.seek(offset)
        return (self._fh.readinto if reading else self._fh.write)(buffers[0]) or 0

    def _piece_rows(self, flat: memoryview, r0: int, r1: int, index: int) -> list:
        """Piece `index` of rows `r0` to `r1` - 1 of `flat`, the bytes of (n, width,
        channels) rows from row 0: one byte memoryview a row, left to right."""
        c0, c1 = self.pieces[index]
        row = self.shape[1] * self._pixel
        first, last = c0 * self._pixel, c1 * self._pixel
        return [flat[r * row + first : r * row + last] for r in range(r0, r1)]

    def write_piece(self, index: int, r0: int, values: np.ndarray) -> None:
        """Rows ``r0 ..`` of piece `index`, within one band: `values` (n, c1 - c0, channels)."""
        values = np.ascontiguousarray(values, self.dtype)
        if values.size:
            self._transfer(self._offset(index, r0), [memoryview(values).cast("B")], reading=False)

    def read_piece(self, index: int, r0: int, r1: int) -> np.ndarray:
        """Rows `r0` to `r1` - 1 of piece `index`, within one band: (r1 - r0, c1 - c0, channels)."""
        c0, c1 = self.pieces[index]
        out = np.empty((r1 - r0, c1 - c0, self.shape[2]), self.dtype)
        if out.size:
            self._transfer(self._offset(index, r0), [memoryview(out).cast("B")], reading=True)
        return out

    def write_rows(self, r0: int, values: np.ndarray) -> None:
        """Rows ``r0 ..``, all columns: `values` (n, width, channels); each piece's rows
        written from where they lie in `values`, in one call."""
        values = np.ascontiguousarray(values, self.dtype)
        if not values.size:
            return
        flat = memoryview(values).cast("B")
        for a, b in self._within_bands(r0, r0 + len(values)):
            for index in range(len(self.pieces)):
                rows = self._piece_rows(flat, a - r0, b - r0, index)
                self._transfer(self._offset(index, a), rows, reading=False)

    def read_rows(self, r0: int, r1: int) -> np.ndarray:
        """Rows `r0` to `r1` - 1, all columns; each piece's rows read to where they lie in
        the rows returned, in one call."""
        out = np.empty((r1 - r0,) + self.shape[1:], self.dtype)
        if not out.size:
            return out
        flat = memoryview(out).cast("B")
        for a, b in self._within_bands(r0, r1):
            for index in range(len(self.pieces)):
                rows = self._piece_rows(flat, a - r0, b - r0, index)
                self._transfer(self._offset(index, a), rows, reading=True)
        return out

    def close(self) -> None:
        """Close and remove the file."""
        self._fh.close()


class SegmentRows:
    """The last rows of segments (a file's tiles or chunks) decoded, kept for the next reads.

    Each is kept in memory, or in a :class:`BandFile` where it :func:`spills`
    and can be decoded a piece of whole segments at a time. Bands read top to
    bottom whose halos overlap then decode each segment once, even where a
    band's halo reaches back into the row of segments above.

    Parameters
    ----------
    kept : int
        How many rows of segments are kept (the first decoded goes first): two,
        so that a band whose halo reaches back into the row above finds it.
    spill_limit : int, optional
        The bytes of the largest row of segments kept in memory
        (:func:`spill_limit`; the attribute may be set, for the rows decoded next).
    """

    def __init__(self, kept: int = 2, spill_limit: int | None = None):
        self.kept, self.spill_limit = kept, spill_limit
        self._rows: dict[int, np.ndarray | BandFile] = {}

    def read(
        self,
        k: int,
        lo: int,
        hi: int,
        *,
        shape: tuple[int, int, int],
        dtype,
        tile: int | None,
        decode,
    ) -> np.ndarray:
        """Rows `lo` to `hi` - 1 of segment row `k`, decoded if it is not kept.

        `shape` is the row of segments' (rows, width, channels) and `dtype` its
        samples'; ``decode(c0, c1, out)`` fills `out` with its columns `c0` to
        `c1` - 1. `tile` is the segments' width, or None where a row of
        segments is decoded whole (strips): it is then kept in memory.
        """
        if k not in self._rows:
            while len(self._rows) >= self.kept:
                self.forget(next(iter(self._rows)))
            self._rows[k] = _decoded(shape, dtype, tile, decode, self.spill_limit)
        rows = self._rows[k]
        return rows.read_rows(lo, hi) if isinstance(rows, BandFile) else rows[lo:hi]

    def forget(self, k: int | None = None) -> None:
        """Drop segment row `k`, or all of them (their files removed)."""
        for row in list(self._rows) if k is None else [k]:
            rows = self._rows.pop(row)
            if isinstance(rows, BandFile):
                rows.close()


def _decoded(shape: tuple[int, int, int], dtype, tile: int | None, decode, limit: int | None):
    """A row of segments decoded: in memory, or on disk a piece at a time where it spills
    (over `limit` bytes)."""
    if tile is None or not spills(*shape, dtype, limit):
        rows = np.zeros(shape, dtype)
        decode(0, shape[1], rows)
        return rows
    band = BandFile(*shape, dtype, tile=tile)
    try:
        for index, (c0, c1) in enumerate(band.pieces):
            piece = np.zeros((shape[0], c1 - c0, shape[2]), dtype)
            decode(c0, c1, piece)
            band.write_piece(index, 0, piece)
    except BaseException:
        band.close()
        raise
    return band
