"""Output files written row band by row band, never holding the whole image.

A result computed in row bands, top to bottom, is written as it comes:
:func:`open_row_writer` gives a writer whose ``write(rows)`` takes the next
rows, and the file appears under its final name only when every row is in
(through :func:`convcli.safeio.atomic_output`: a temporary name, then a rename;
an error or an interrupt leaves no file and no temporary behind).

=======  ==============================  =============================================
format   values                          the file
=======  ==============================  =============================================
npy      float32, (H, W, C)              what :func:`convcli.images.save_npy` writes,
                                         byte for byte
png      uint8 / uint16 levels, C 1..4   what :func:`convcli.png.write_png` writes
                                         (and so ``save_levels``), byte for byte
tiff     uint8 / uint16 levels, C 1..4;  a tiled BigTIFF (256 x 256 tiles, deflate,
         float32 raw values, C = 1       horizontal predictor for levels) with reduced
                                         levels as SubIFDs, each half the one above
zarr     uint8 / uint16 levels or        a folder: an OME-Zarr image with the same
         float32 values, C 1..4          reduced levels (:mod:`convcli.zarr_stores`;
                                         the ``zarr`` extra)
=======  ==============================  =============================================

JPEG is not offered: a JPEG is at most 65535 pixels a side, and a streamed
one would need libjpeg's row API, which Pillow does not expose.

The TIFF's reduced levels (the pyramid viewers such as QuPath, napari and
OpenSeadragon (through vips) open large images with) are 2 x 2 means of the
level above, rounded half up for levels, in float32 for raw values; an odd
last row or column is averaged with itself, so a level of odd size n has
ceil(n / 2). Levels are made until one fits in a tile. They are accumulated
while the rows arrive, in temporary files beside the output, and written
after the full-resolution image; the temporaries are removed at the end.
The full-size rows wait for their row of tiles in memory, or, where a band
of 256 rows is wider than :data:`convcli.spill.SPILL_BYTES`, in such files
too (:class:`RowBands`): tiles are made a column piece at a time, so that the
memory held does not grow with the image's width.
Deflate is TIFF's compression code 8 ("Adobe deflate", the one libtiff,
vips and every viewer read; code 32946 is the obsolete one), done by
Python's zlib where imagecodecs is missing.
"""

from __future__ import annotations

import os
import queue
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tifffile

from ._engine import tiles
from .images import MARKER, written_by_convcli
from .png import PngRowEncoder
from .safeio import atomic_output
from .spill import BandFile, piece_columns, spills

ROW_FORMATS = ("npy", "png", "tiff", "zarr")
"""The formats :func:`open_row_writer` writes."""

TILE = 256
"""The side of a TIFF output's tiles, and the size at which its reduced levels stop."""

_LEVEL_TYPES = (np.dtype(np.uint8), np.dtype(np.uint16))
_FLOAT = np.dtype(np.float32)
_DEFLATE = 8  # TIFF's Compression code for Adobe deflate


def _checked_layout(fmt: str, height: int, width: int, channels: int, dtype) -> np.dtype:
    """The output's dtype, after ValueError for a format, size or dtype it cannot take."""
    if fmt not in ROW_FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(ROW_FORMATS)}; got {fmt!r}")
    for name, value in (("height", height), ("width", width)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer; got {value!r}")
    if fmt == "npy":  # raw values: one channel per map, any number of maps
        if not isinstance(channels, (int, np.integer)) or channels < 1:
            raise ValueError(f"channels must be a positive integer; got {channels!r}")
    elif channels not in (1, 2, 3, 4):
        raise ValueError(f"channels must be 1, 2, 3 or 4; got {channels!r}")
    dtype = np.dtype(dtype)
    allowed = {"npy": (_FLOAT,), "png": _LEVEL_TYPES, "tiff": _LEVEL_TYPES + (_FLOAT,),
               "zarr": _LEVEL_TYPES + (_FLOAT,)}[fmt]
    if dtype not in allowed:
        raise ValueError(f"dtype for {fmt} must be one of "
                         f"{', '.join(str(d) for d in allowed)}; got {dtype}")
    if fmt == "tiff" and dtype == _FLOAT and channels != 1:
        raise ValueError(f"float32 TIFF output has one channel; got channels={channels}")
    return dtype


class RowWriter:
    """Takes an output's rows in order (made by :func:`open_row_writer`).

    Attributes
    ----------
    will_write : bool
        False where an existing file is kept (no `overwrite`): rows given to
        :meth:`write` are then checked and dropped, and the caller may skip
        computing them.
    written : bool
        After the ``with`` block: whether the file was written (False if it
        existed and was kept), as :func:`convcli.images.save_levels` returns.
    rows_written : int
    """

    def __init__(self, sink, shape: tuple[int, int, int], dtype: np.dtype):
        self._sink, self._shape, self._dtype = sink, shape, dtype
        self.will_write = sink is not None
        self.written = False
        self.rows_written = 0

    def write(self, rows: np.ndarray) -> None:
        """Add the next rows: (n, W, C), or (n, W) for one channel, of the writer's dtype.

        Rows of another dtype are converted only where no value changes kind
        (float64 to float32 for ``npy``); levels must be given as levels.
        """
        height, width, channels = self._shape
        band = np.asarray(rows)
        if band.ndim == 2 and channels == 1:
            band = band[:, :, None]
        if band.ndim != 3 or band.shape[1:] != (width, channels):
            raise ValueError(f"rows must be (n, {width}, {channels}); got {band.shape}")
        if not np.can_cast(band.dtype, self._dtype, "same_kind") or (
                self._dtype.kind == "u" and band.dtype != self._dtype):
            raise ValueError(f"rows must be {self._dtype}; got {band.dtype}")
        if self.rows_written + len(band) > height:
            raise ValueError(f"{self.rows_written + len(band)} rows for an image of {height}")
        self.rows_written += len(band)
        if self._sink is not None and len(band):
            self._sink.write(np.ascontiguousarray(band, self._dtype))

    def _finish(self) -> None:
        if self.rows_written != self._shape[0]:
            raise ValueError(f"{self.rows_written} rows written of {self._shape[0]}")
        if self._sink is not None:
            self._sink.close()


@contextmanager
def open_row_writer(path: str | os.PathLike, *, fmt: str, height: int, width: int,
                    channels: int, dtype, overwrite: bool = False, store_url: str | None = None,
                    storage_options: dict | None = None) -> Iterator[RowWriter]:
    """Write an image file from its rows, given in order in bands of any height.

    Parameters
    ----------
    path : str or path-like
        The final file name.
    fmt : {"npy", "png", "tiff", "zarr"}
        See the module docstring (a ``zarr`` output is a folder).
    height, width, channels : int
        The image's size; channels 1 (grey), 2 (grey + alpha), 3 (RGB), 4 (RGBA).
    dtype : numpy dtype
        float32 for ``npy``; uint8 or uint16 levels for ``png``; those or
        float32 (one channel) for ``tiff``; those or float32 for ``zarr``.
    overwrite : bool
        As :func:`convcli.images.save_levels`: replace a file only if convcli wrote it.
    store_url, storage_options : str and dict, optional
        ``zarr``: the object-storage prefix written in place (:func:`remote_store`);
        `path`, on this disk, stands for it in the checks above.

    Yields
    ------
    RowWriter
        Its ``written`` says, after the block, whether the file was written.

    Raises
    ------
    ValueError
        A bad argument, rows of the wrong shape or dtype, too many rows, or
        (when the block ends) too few: no file is left behind.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     with open_row_writer(Path(folder) / "out.npy", fmt="npy", height=4, width=3,
    ...                          channels=1, dtype=np.float32) as out:
    ...         for top in (0, 2):
    ...             out.write(np.full((2, 3, 1), top, np.float32))
    ...     out.written, np.load(Path(folder) / "out.npy")[:, 0, 0].tolist()
    (True, [0.0, 0.0, 2.0, 2.0])
    """
    dtype = _checked_layout(fmt, height, width, channels, dtype)
    shape = (int(height), int(width), int(channels))
    with atomic_output(path, overwrite=overwrite, replaceable=written_by_convcli,
                       folder=fmt == "zarr") as output:
        with ExitStack() as stack:
            sink = _open_sink(stack, output.temporary, fmt, shape, dtype, store_url,
                              storage_options)
            writer = RowWriter(sink, shape, dtype)
            try:
                yield writer
                writer._finish()
            except BaseException:
                if sink is not None:
                    sink.abort()
                raise
    writer.written = output.written


def _open_sink(stack: ExitStack, temporary: Path | None, fmt: str, shape: tuple[int, int, int],
               dtype: np.dtype, store_url: str | None, storage_options: dict | None):
    """The sink writing an output at `temporary` (or `store_url`); None where it is kept."""
    if temporary is None:
        return None
    if store_url is not None:
        location = store_location(stack, temporary, store_url, storage_options)
        return _zarr_sink(location, shape, dtype, storage_options)
    return _SINKS[fmt](temporary, shape, dtype)


def store_location(stack: ExitStack, temporary: Path, store_url: str | None,
                   storage_options: dict | None) -> str:
    """Where a Zarr output is written: `temporary`, or `store_url` on object storage.

    For a URL, `temporary` is made an empty folder that stands for the store
    on this disk, and the store is written in place for the life of `stack`
    (:func:`remote_store`: removed if the block raises).
    """
    if store_url is None:
        return str(temporary)
    temporary.mkdir()
    return stack.enter_context(remote_store(store_url, storage_options))


@contextmanager
def remote_store(url: str, storage_options: dict | None = None) -> Iterator[str]:
    """Write a Zarr store at the object-storage prefix `url` in the block; `url` is yielded.

    Objects cannot be renamed: a store there already (to be replaced, the
    checks done) is removed first, and a block that raises removes what it
    wrote. The group's attributes, with convcli's marker, are written last.
    """
    from .storage import remove_tree

    remove_tree(url, storage_options)
    try:
        yield url
    except BaseException:
        remove_tree(url, storage_options)
        raise


def save_rows(path: str | os.PathLike, image: np.ndarray, *, fmt: str,
              overwrite: bool = False, **store) -> bool:
    """Write a whole image through :func:`open_row_writer`, one band of :data:`TILE` rows at a time.

    Parameters
    ----------
    path : str or path-like
    image : (H, W) or (H, W, C) ndarray
        Levels (uint8, uint16) or float32 values, as `fmt` takes them.
    fmt : str
        One of :data:`ROW_FORMATS`.
    overwrite : bool
        As for :func:`open_row_writer`.
    **store
        ``store_url`` and ``storage_options``, as for :func:`open_row_writer`.

    Returns
    -------
    bool
        Whether the file was written (False: it existed and was kept).
    """
    values = image if image.ndim == 3 else image[:, :, None]
    height, width, channels = values.shape
    with open_row_writer(path, fmt=fmt, height=height, width=width, channels=channels,
                         dtype=values.dtype, overwrite=overwrite, **store) as writer:
        for top in range(0, height, TILE):
            writer.write(values[top:top + TILE])  # dropped where the file is kept
    return writer.written


class _NpySink:
    """An ``.npy`` file: the header ``np.save`` writes, then the rows' bytes."""

    def __init__(self, temporary: Path, shape: tuple[int, int, int], dtype: np.dtype):
        self._fh = open(temporary, "wb")  # noqa: SIM115 (closed by close or abort)
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                  "shape": shape}
        np.lib.format.write_array_header_1_0(self._fh, header)

    def write(self, rows: np.ndarray) -> None:
        self._fh.write(memoryview(rows).cast("B"))

    def close(self) -> None:
        self._fh.close()

    def abort(self) -> None:
        self._fh.close()


class _PngSink:
    """A PNG stream through :class:`convcli.png.PngRowEncoder`, marked as convcli's."""

    def __init__(self, temporary: Path, shape: tuple[int, int, int], dtype: np.dtype):
        self._fh = open(temporary, "wb")  # noqa: SIM115 (closed by close or abort)
        try:
            self._encoder = PngRowEncoder(self._fh, shape=shape, dtype=dtype,
                                          text={"Software": MARKER})
        except BaseException:
            self._fh.close()
            raise

    def write(self, rows: np.ndarray) -> None:
        self._encoder.write(rows)

    def close(self) -> None:
        with self._fh:
            self._encoder.close()

    def abort(self) -> None:
        self._fh.close()


def _mean_2x2(rows: np.ndarray) -> np.ndarray:
    """2 x 2 means of (2k, W, C) `rows`: (k, ceil(W / 2), C), an odd last column with itself.

    Levels are rounded half up; float32 values are summed in float64.
    """
    if rows.shape[1] % 2:
        rows = np.concatenate([rows, rows[:, -1:]], axis=1)
    wide = {np.dtype(np.uint8): np.uint16, np.dtype(np.uint16): np.uint32}.get(rows.dtype,
                                                                              np.float64)
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

    The rows go to a :class:`convcli.spill.BandFile` beside the output, in
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
        yield band[:, left:left + step]


def _tiles(bands: Iterator) -> Iterator[np.ndarray]:
    """The :data:`TILE`-square tiles of row `bands` (up to TILE rows each), row by row,
    the edge tiles padded with zeros (bands as :func:`band_pieces` takes them)."""
    for band in bands:
        for piece in band_pieces(band):
            rows, width, channels = piece.shape
            padded = np.zeros((TILE, -(-width // TILE) * TILE, channels), piece.dtype)
            padded[:rows, :width] = piece
            for left in range(0, width, TILE):
                yield np.ascontiguousarray(padded[:, left:left + TILE])


ISAL_LEVEL = 1
"""ISA-L's deflate level for TIFF tiles (0 to 3): its fastest but one, as small as level 2 here."""


def _isal_zlib():
    """python-isal's zlib module (ISA-L deflate, zlib streams), or None where it is missing."""
    try:
        from isal import isal_zlib
    except ImportError:
        return None
    return isal_zlib


def _tile_data(bands: Iterator[np.ndarray], dtype: np.dtype) -> Iterator:
    """What tifffile writes of `bands`: their tiles, or each tile deflated by ISA-L.

    tifffile deflates with imagecodecs, or Python's zlib without it (50 times
    slower than ISA-L on a float32 map); where python-isal is installed the
    tiles go to tifffile already encoded, a zlib stream each as the TIFF's
    deflate holds (any deflate reader reads them), after the horizontal
    predictor for levels (each sample minus the one to its left, modulo 2**n).
    """
    isal_zlib = _isal_zlib()
    if isal_zlib is None:
        yield from _tiles(bands)
        return
    for tile in _tiles(bands):
        if dtype.kind == "u":
            tile[:, 1:] -= tile[:, :-1].copy()  # TIFF's predictor 2, wrapping as it does
        yield isal_zlib.compress(tile, ISAL_LEVEL)


def _tiff_options(shape: tuple[int, int, int], dtype: np.dtype) -> dict:
    """tifffile's ``write`` options for one level of `shape` (H, W, C)."""
    height, width, channels = shape
    options = {
        "shape": (height, width) if channels == 1 else shape, "dtype": dtype,
        "tile": (TILE, TILE), "compression": _DEFLATE, "planarconfig": "contig",
        "photometric": "rgb" if channels >= 3 else "minisblack", "metadata": None,
        "software": MARKER,
        # tifffile encodes tiles in passes of this many bytes: a row of tiles (or a
        # piece of one, as the bands on disk are), deflated on the layers' threads
        # (1.8 times as fast with 2 as with 1)
        "buffersize": TILE * channels * dtype.itemsize * min(
            -(-width // TILE) * TILE, piece_columns(TILE, channels * dtype.itemsize, TILE)),
        "maxworkers": tiles.THREADS,
    }
    if channels in (2, 4):
        options["extrasamples"] = ["unassalpha"]
    if dtype.kind == "u":
        options["predictor"] = 2  # horizontal differencing
    return options


def _reduced_levels(temporary: Path, shape: tuple[int, int, int],
                    dtype: np.dtype) -> list[_ReducedLevel]:
    """The pyramid's levels below full size, halving until one fits in a tile."""
    levels: list[_ReducedLevel] = []
    size = shape[:2]
    try:
        while max(size) > TILE:
            levels.append(_ReducedLevel(temporary.parent, size, shape[2], dtype))
            size = levels[-1].shape[:2]
    except BaseException:
        for level in levels:
            level.remove()
        raise
    return levels


class RowBands:
    """Rows gathered into bands of `rows` rows of the full width, as a tiled file writes them.

    A band that :func:`convcli.spill.spills` is kept on disk in
    :class:`convcli.spill.BandFile` s (`files` of them, reused), else in
    memory. :meth:`add` yields the bands it completes, each an array or a
    :class:`_FileRows` whose file goes back to the pool once it has been read
    (``done``); `wait` takes a file from the pool (a function of the pool's
    queue: it may check for its reader's failure while waiting). `piece_bytes`
    sizes the files' pieces (:class:`convcli.spill.BandFile`).
    """

    def __init__(self, rows: int, shape: tuple[int, int, int], dtype: np.dtype, *,
                 folder=None, files: int = 2, piece_bytes: int | None = None,
                 wait: Callable[[queue.Queue], BandFile] | None = None):
        self.rows, self._shape, self._dtype = rows, shape, dtype
        self._files: list[BandFile] = []
        self._free: queue.Queue | None = None
        if spills(rows, *shape[1:], dtype):
            self._free = queue.Queue()
            for _ in range(files):
                self._files.append(BandFile(rows, *shape[1:], dtype, tile=TILE, folder=folder,
                                            piece_bytes=piece_bytes))
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
                self._band = (self._wait(self._free) if self._free is not None
                              else np.empty((self.rows,) + self._shape[1:], self._dtype))
            take = min(self.rows - self._filled, len(rows) - start)
            if self._free is not None:
                self._band.write_rows(self._filled, rows[start:start + take])
            else:
                self._band[self._filled:self._filled + take] = rows[start:start + take]
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


class _Stop(Exception):
    """Raised in the writing thread's tile iterator when the writer is aborted."""


_END, _ABORT = "end", "abort"  # what the writing thread is told after the bands


class _TiffSink:
    """A tiled, deflated BigTIFF with its reduced levels as SubIFDs.

    tifffile pulls the full-size tiles from an iterator; the rows are pushed.
    So tifffile writes in a thread that takes each band of :data:`TILE` rows
    from a queue of one, while the caller computes the next (deflate runs
    without the GIL); the reduced levels follow from their files.
    """

    def __init__(self, temporary: Path, shape: tuple[int, int, int], dtype: np.dtype):
        self._shape, self._dtype = shape, dtype
        self._levels = _reduced_levels(temporary, shape, dtype)
        try:
            self._tiff = tifffile.TiffWriter(temporary, bigtiff=True)
        except BaseException:
            self._remove_levels()
            raise
        self._failure: BaseException | None = None
        try:
            self._gathered = RowBands(TILE, shape, dtype, folder=temporary.parent,
                                      wait=self._free_file)
        except BaseException:
            self._tiff.close()
            self._remove_levels()
            raise
        self._bands: queue.Queue = queue.Queue(maxsize=1)
        self._thread = threading.Thread(target=self._write_full_size, daemon=True,
                                        name="convcli-tiff-writer")
        self._thread.start()

    def _write_full_size(self) -> None:
        try:
            self._tiff.write(_tile_data(self._queued_bands(), self._dtype),
                             subifds=len(self._levels) or None,
                             **_tiff_options(self._shape, self._dtype))
        except BaseException as exc:  # handed to the caller's thread
            self._failure = exc

    def _queued_bands(self) -> Iterator[np.ndarray]:
        while True:
            band = self._bands.get()
            if isinstance(band, str):
                if band == _ABORT:
                    raise _Stop
                return
            yield band

    def _put(self, item) -> None:
        """Queue `item` for the writing thread; its error, if it has stopped on one."""
        while True:
            if self._failure is not None:
                raise self._failure
            if not self._thread.is_alive():
                if isinstance(item, str):
                    return
                raise RuntimeError("the TIFF writer stopped before the last rows")
            try:
                self._bands.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def _free_file(self, free: queue.Queue) -> BandFile:
        """A band file the writing thread is done with; its error, if it has stopped on one."""
        while True:
            if self._failure is not None:
                raise self._failure
            if not self._thread.is_alive():
                raise RuntimeError("the TIFF writer stopped before the last rows")
            try:
                return free.get(timeout=0.2)
            except queue.Empty:
                continue

    def write(self, rows: np.ndarray) -> None:
        carry = rows
        for level in self._levels:
            carry = level.add(carry)
        for band in self._gathered.add(rows):
            self._put(band)

    def close(self) -> None:
        try:
            rest = self._gathered.rest()
            if rest is not None:
                self._put(rest)
            self._put(_END)
            self._thread.join()
            if self._failure is not None:
                raise self._failure
            carry = np.empty((0,) + self._shape[1:], self._dtype)
            for level in self._levels:
                carry = level.finish(carry)
            for level in self._levels:
                self._tiff.write(_tile_data(level.bands(), self._dtype), subfiletype=1,
                                 **_tiff_options(level.shape, self._dtype))
            self._tiff.close()
        finally:
            self._remove_levels()

    def abort(self) -> None:
        try:
            if self._thread.is_alive() and self._failure is None:
                try:
                    self._put(_ABORT)
                except BaseException:  # noqa: BLE001 - it stopped on its own error meanwhile
                    pass
            self._thread.join()
            try:
                self._tiff.close()
            except Exception:  # the file is removed anyway
                pass
        finally:
            self._remove_levels()

    def _remove_levels(self) -> None:
        for level in self._levels:
            level.remove()
        if hasattr(self, "_gathered"):
            self._gathered.close()


def _zarr_sink(temporary: Path | str, shape: tuple[int, int, int], dtype: np.dtype,
               storage_options: dict | None = None):
    """A Zarr store (:class:`convcli.zarr_stores.StoreSink`), zarr imported only here."""
    from .zarr_stores import StoreSink

    return StoreSink(temporary, shape, dtype, storage_options)


_SINKS = {"npy": _NpySink, "png": _PngSink, "tiff": _TiffSink, "zarr": _zarr_sink}


def space_needed(fmt: str, *, height: int, width: int, channels: int, dtype) -> int:
    """Bytes an output may take on its disk while it is written, at most (temporaries included).

    ``npy``: its exact size. ``png`` and ``tiff``: the samples' bytes with
    deflate's worst case (incompressible data grows by well under 1%), for a
    TIFF plus its reduced levels (a third more), twice over while they are
    also in temporary files. ``zarr``: the samples' and the reduced levels'
    bytes with Blosc's worst case (16 bytes a chunk) and a file's block each.
    Both: and, where a band of :data:`TILE` rows is kept on disk while the rows
    wait for their row of tiles (:class:`RowBands`), two bands a level.
    """
    dtype = _checked_layout(fmt, height, width, channels, dtype)
    samples = height * width * channels * dtype.itemsize
    if fmt == "npy":
        return samples + 128  # np.save's header for an (H, W, C) float32 array
    bands = 0
    if spills(TILE, width, channels, dtype):
        bands = 2 * TILE * width * channels * dtype.itemsize * 4 // 3
    if fmt == "zarr":
        chunks = -(-height // TILE) * -(-width // TILE)
        return samples + samples // 3 + 2 * chunks * (16 + 4096) + (1 << 16) + bands
    stored = samples + height * (1 + width // 16384) * 8 + (1 << 16)
    stored += stored // 100
    if fmt == "png":
        return stored
    return stored + 2 * (stored // 3) + -(-height // TILE) * -(-width // TILE) * 16 + bands


def _in_units(count: int) -> str:
    """`count` bytes as a short size: 512 bytes, 3.2 GB, 1.5 TB (powers of 1000)."""
    if count < 1000:
        return f"{count} bytes"
    value = float(count)
    for unit in ("kB", "MB", "GB", "TB"):  # noqa: B007 (the last unit is used after the loop)
        value /= 1000
        if value < 1000:
            break
    return f"{value:.1f} {unit}"


def free_space_problem(path: str | os.PathLike, needed: int) -> str | None:
    """A one-line reason to refuse writing `path`, if its disk has less than `needed` bytes free.

    None where it fits (or where the free space cannot be found out: the
    write then reports a full disk itself).

    Examples
    --------
    >>> free_space_problem(".", 1) is None
    True
    >>> free_space_problem(".", 10**30)  # doctest: +ELLIPSIS
    'not enough free space for ...: it needs about 1000000000000000000.0 TB, ... free'
    """
    folder = Path(path).parent if not Path(path).is_dir() else Path(path)
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return None
    if needed <= free:
        return None
    return (f"not enough free space for {os.fspath(path)}: it needs about "
            f"{_in_units(needed)}, {_in_units(free)} free")
