"""Reduced levels of an image given in row bands: the pyramids of TIFF and Zarr outputs.

:class:`RowHalver` makes the 2 x 2 means of rows as they come (an odd last
row or column averaged with itself); :class:`RowBands` gathers rows into
bands of the full width, on disk where a band is too wide to hold
(:func:`convcli.io.spill.spills`); :func:`band_pieces` cuts a band into
column pieces a whole number of tiles wide.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..layers._engine.native import mean_2x2
from .spill import BandFile, piece_columns, spills

TILE = 256
"""The side of a TIFF or Zarr output's tiles, and the size at which its reduced levels stop."""

_FLOAT = np.dtype(np.float32)


def _mean_2x2(rows: np.ndarray) -> np.ndarray:
    """2 x 2 means of (2k, W, C) `rows`: (k, ceil(W / 2), C), an odd last column with itself.

    Levels are rounded half up; float32 values are summed in float64.
    """
    if rows.dtype == _FLOAT:
        native = mean_2x2(rows)  # the same bits, without float64 copies
        if native is not None:
            return native
    if rows.shape[1] % 2:
        rows = np.concatenate([rows, rows[:, -1:]], axis=1)
    wide = {np.dtype(np.uint8): np.uint16, np.dtype(np.uint16): np.uint32}.get(
        rows.dtype, np.float64
    )
    pairs = rows[0::2].astype(wide)  # row pairs first: whole rows, contiguous
    pairs += rows[1::2]
    total = pairs[:, 0::2]
    total += pairs[:, 1::2]
    if rows.dtype == _FLOAT:
        total /= 4
    else:
        total += 2
        total >>= 2
    return total.astype(rows.dtype)


class RowHalver:
    """Halves an image given in row bands: 2 x 2 means of its rows as they come.

    Parameters
    ----------
    above : (int, int)
        The height and width of the image halved.
    channels : int
    dtype : numpy dtype
        uint8, uint16 (rounded half up) or float32.

    Attributes
    ----------
    shape : (int, int, int)
        The halved image's (ceil(H / 2), ceil(W / 2), C).
    """

    def __init__(self, above: tuple[int, int], channels: int, dtype: np.dtype):
        self.shape = (-(-above[0] // 2), -(-above[1] // 2), channels)
        self.dtype = dtype
        self._unpaired: np.ndarray | None = None

    def add(self, rows: np.ndarray) -> np.ndarray:
        """Take the image's next `rows` (n, W, C); return the halved image's new rows."""
        if self._unpaired is not None:
            rows = np.concatenate([self._unpaired, rows])
            self._unpaired = None
        if len(rows) % 2:
            self._unpaired = rows[-1:].copy()
            rows = rows[:-1]
        halved = _mean_2x2(rows)
        if len(halved):
            self._keep(halved)
        return halved

    def finish(self, rows: np.ndarray) -> np.ndarray:
        """Take the image's last `rows`; an odd last row is averaged with itself."""
        halved = [self.add(rows)]
        if self._unpaired is not None:
            last, self._unpaired = self._unpaired, None
            halved.append(self.add(np.concatenate([last, last])))  # paired with itself
        return np.concatenate(halved)

    def _keep(self, halved: np.ndarray) -> None:
        """What a subclass does with the new rows (nothing here)."""


class _ReducedLevel(RowHalver):
    """One level of the pyramid: 2 x 2 means of the level above's rows, kept on disk.

    The rows go to a :class:`convcli.io.spill.BandFile` beside the output, in
    column pieces, so that its tiles are read back a piece at a time.
    """

    def __init__(self, folder: Path, above: tuple[int, int], channels: int, dtype: np.dtype):
        super().__init__(above, channels, dtype)
        self._file = BandFile(*self.shape, dtype, tile=TILE, band_rows=TILE, folder=folder)
        self._rows = 0

    def _keep(self, halved: np.ndarray) -> None:
        self._file.write_rows(self._rows, halved)
        self._rows += len(halved)

    def bands(self) -> Iterator[_FileRows]:
        """This level's rows on disk, :data:`TILE` rows at a time."""
        height = self.shape[0]
        for top in range(0, height, TILE):
            yield _FileRows(self._file, top, min(height, top + TILE))

    def remove(self) -> None:
        self._file.close()


@dataclass(frozen=True)
class _FileRows:
    """Rows `r0` to `r1` - 1 of a band on disk; `done` is called once they have been read."""

    file: BandFile
    r0: int
    r1: int
    done: Callable[[BandFile], None] | None = None


def band_pieces(band) -> Iterator[np.ndarray]:
    """A band's column pieces, each a whole number of tiles wide but the last.

    `band` is an array of rows or a :class:`_FileRows`; a piece bounds the
    memory of the tiles made of it, whatever the image's width.
    """
    if isinstance(band, _FileRows):
        for index in range(len(band.file.pieces)):
            yield band.file.read_piece(index, band.r0, band.r1)
        if band.done is not None:
            band.done(band.file)
        return
    rows, width, channels = band.shape
    step = piece_columns(TILE, channels * band.dtype.itemsize, TILE)
    for left in range(0, width, step):
        yield band[:, left : left + step]


class RowBands:
    """Rows gathered into bands of `rows` rows of the full width, as a tiled file writes them.

    A band that :func:`convcli.io.spill.spills` is kept on disk in
    :class:`convcli.io.spill.BandFile` s (`files` of them, reused), else in
    memory. :meth:`add` yields the bands it completes, each an array or a
    :class:`_FileRows` whose file goes back to the pool once it has been read
    (``done``); `wait` takes a file from the pool (a function of the pool's
    queue: it may check for its reader's failure while waiting). `piece_bytes`
    sizes the files' pieces (:class:`convcli.io.spill.BandFile`); `spill_limit`
    is the largest band held in memory (:func:`convcli.io.spill.spill_limit`).
    """

    def __init__(
        self,
        rows: int,
        shape: tuple[int, int, int],
        dtype: np.dtype,
        *,
        folder=None,
        files: int = 2,
        piece_bytes: int | None = None,
        wait: Callable[[queue.Queue], BandFile] | None = None,
        spill_limit: int | None = None,
    ):
        self.rows, self._shape, self._dtype = rows, shape, dtype
        self._files: list[BandFile] = []
        self._free: queue.Queue | None = None
        if spills(rows, *shape[1:], dtype, spill_limit):
            self._free = queue.Queue()
            for _ in range(files):
                self._files.append(
                    BandFile(
                        rows, *shape[1:], dtype, tile=TILE, folder=folder, piece_bytes=piece_bytes
                    )
                )
                self._free.put(self._files[-1])
        self._wait = wait or (lambda free: free.get())
        self._band = None
        self._filled = 0

    def add(self, rows: np.ndarray) -> Iterator:
        """Take the next `rows`, yielding each band they complete as soon as it is (a
        generator: the caller hands a band on before the next is gathered)."""
        start = 0
        while start < len(rows):
            if self._band is None:
                self._band = (
                    self._wait(self._free)
                    if self._free is not None
                    else np.empty((self.rows,) + self._shape[1:], self._dtype)
                )
            take = min(self.rows - self._filled, len(rows) - start)
            if self._free is not None:
                self._band.write_rows(self._filled, rows[start : start + take])
            else:
                self._band[self._filled : self._filled + take] = rows[start : start + take]
            self._filled += take
            start += take
            if self._filled == self.rows:
                yield self._hand_off()

    def rest(self):
        """The last band, not full, or None."""
        return self._hand_off() if self._filled else None

    def _hand_off(self):
        band, filled = self._band, self._filled
        self._band, self._filled = None, 0  # the band is its reader's now
        if self._free is None:
            return band[:filled]
        return _FileRows(band, 0, filled, done=self._free.put)

    def close(self) -> None:
        """Remove the files on disk."""
        for file in self._files:
            file.close()
