"""The TIFF output written in row bands: a tiled, deflated TIFF with its reduced levels.

See :mod:`convcli.io.row_writers`, whose ``tiff`` format this is.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import tifffile

from ..layers._engine import tiles
from .carried import NOTHING, Carried, tiff_options
from .formats import bigtiff_needed, tiff_page_tags
from .nodata import missing_as_nodata
from .pyramid import TILE, RowBands, _ReducedLevel, band_pieces
from .spill import BandFile, piece_columns


def _tiles(bands: Iterator) -> Iterator[np.ndarray]:
    """The :data:`TILE`-square tiles of row `bands` (up to TILE rows each), row by row,
    the edge tiles padded with zeros (bands as :func:`band_pieces` takes them)."""
    for band in bands:
        for piece in band_pieces(band):
            rows, width, channels = piece.shape
            if rows < TILE or width % TILE:
                padded = np.zeros((TILE, -(-width // TILE) * TILE, channels), piece.dtype)
                padded[:rows, :width] = piece
                piece = padded
            for left in range(0, width, TILE):
                yield piece[:, left : left + TILE].copy()  # a tile of its own: changed in place


ISAL_LEVEL = 1
"""ISA-L's deflate level for TIFF tiles (0 to 3): its fastest but one, as small as level 2 here."""


def _isal_zlib():
    """python-isal's zlib module (ISA-L deflate, zlib streams), or None where it is missing."""
    try:
        from isal import isal_zlib
    except ImportError:
        return None
    return isal_zlib


def _tile_data(
    bands: Iterator[np.ndarray], dtype: np.dtype, channels: int, nodata: float | None = None
) -> Iterator:
    """What tifffile writes of `bands`: their tiles, or each tile deflated by ISA-L; with
    `nodata`, a GeoTIFF's missing values (NaN) written as that value (:func:`missing_as_nodata`).

    tifffile deflates with imagecodecs, or Python's zlib without it (50 times
    slower than ISA-L on a float32 map); where python-isal is installed the
    tiles go to tifffile already encoded, a zlib stream each as the TIFF's
    deflate holds (any deflate reader reads them), after the horizontal
    predictor for levels (each sample minus the one to its left, modulo 2**n).
    """
    isal_zlib = _isal_zlib()
    squares = _tiles(bands)
    if isal_zlib is None:
        yield from squares if nodata is None else (missing_as_nodata(t, nodata) for t in squares)
        return

    def deflated(group: list[np.ndarray]) -> list[bytes]:
        encoded = []
        for tile in group:
            if nodata is not None:
                tile = missing_as_nodata(tile, nodata)
            if dtype.kind == "u":
                tile[:, 1:] -= tile[:, :-1].copy()  # TIFF's predictor 2, wrapping as it does
            encoded.append(isal_zlib.compress(tile, ISAL_LEVEL))
        return encoded

    # ISA-L deflates without the GIL: the full size beside the computation, and the reduced
    # levels, written once the full size is, on every core. A task takes up to 256 KiB of
    # tiles (four 8-bit grey tiles, one float32 tile): handing one to a thread costs as much
    # as deflating 10 KB, and the tasks queued hold no more than one float32 tile each did.
    tile_bytes = TILE * TILE * np.dtype(dtype).itemsize * channels
    for group in tiles.map_in_order(deflated, _groups(squares, max(1, (1 << 18) // tile_bytes))):
        yield from group


def _groups(items: Iterator, size: int) -> Iterator[list]:
    """Lists of `size` of `items` in turn (the last one shorter)."""
    while group := list(itertools.islice(items, size)):
        yield group


def _tiff_options(shape: tuple[int, int, int], dtype: np.dtype) -> dict:
    """tifffile's ``write`` options for one level of `shape` (H, W, C)."""
    height, width, channels = shape
    return {
        **tiff_page_tags(channels, dtype),
        "shape": (height, width) if channels == 1 else shape,
        "dtype": dtype,
        "tile": (TILE, TILE),
        # tifffile encodes tiles in passes of this many bytes: a row of tiles (or a
        # piece of one, as the bands on disk are), deflated on the layers' threads
        # (1.8 times as fast with 2 as with 1)
        "buffersize": TILE
        * channels
        * dtype.itemsize
        * min(-(-width // TILE) * TILE, piece_columns(TILE, channels * dtype.itemsize, TILE)),
        "maxworkers": tiles.THREADS,
    }


def pyramid_bigtiff_needed(shape: tuple[int, int, int], dtype: np.dtype, carried: Carried) -> bool:
    """Whether the tiled TIFF of `shape` with its reduced levels (:func:`_reduced_levels`)
    might pass 4 GiB (:func:`~convcli.io.formats.bigtiff_needed`): every level's tiles
    counted whole."""
    height, width, channels = shape
    tiles, pages, size = 0, 0, (height, width)
    while True:
        tiles, pages = tiles + -(-size[0] // TILE) * -(-size[1] // TILE), pages + 1
        if max(size) <= TILE:
            break
        size = (-(-size[0] // 2), -(-size[1] // 2))
    tile_bytes = TILE * TILE * channels * np.dtype(dtype).itemsize
    return bigtiff_needed(tiles * tile_bytes, tiles, pages, carried.metadata_bytes())


def _reduced_levels(
    temporary: Path, shape: tuple[int, int, int], dtype: np.dtype
) -> list[_ReducedLevel]:
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


class _Stop(Exception):
    """Raised in the writing thread's tile iterator when the writer is aborted."""


_END, _ABORT = "end", "abort"  # what the writing thread is told after the bands


class TiffSink:
    """A tiled, deflated TIFF with its reduced levels as SubIFDs: a BigTIFF where it might
    pass 4 GiB (:func:`pyramid_bigtiff_needed`).

    tifffile pulls the full-size tiles from an iterator; the rows are pushed.
    So tifffile writes in a thread that takes each band of :data:`TILE` rows
    from a queue of one, while the caller computes the next (deflate runs
    without the GIL); the reduced levels follow from their files.
    """

    def __init__(
        self,
        temporary: Path,
        shape: tuple[int, int, int],
        dtype: np.dtype,
        *,
        carried: Carried = NOTHING,
        spill_limit: int | None = None,
    ):
        self._shape, self._dtype = shape, dtype
        self._carried = carried.for_samples(dtype)
        # GDAL's nodata value where the values are missing (NaN: read from nodata pixels).
        self._nodata = self._carried.nodata if np.dtype(dtype).kind == "f" else None
        self._levels = _reduced_levels(temporary, shape, dtype)
        try:
            self._tiff = tifffile.TiffWriter(
                temporary,
                bigtiff=pyramid_bigtiff_needed(shape, dtype, self._carried),
                **self._carried.tiff_writer_options(),
            )
        except BaseException:
            self._remove_levels()
            raise
        self._failure: BaseException | None = None
        try:
            self._gathered = RowBands(
                TILE,
                shape,
                dtype,
                folder=temporary.parent,
                wait=self._free_file,
                spill_limit=spill_limit,
            )
        except BaseException:
            self._tiff.close()
            self._remove_levels()
            raise
        self._bands: queue.Queue = queue.Queue(maxsize=1)
        self._thread = threading.Thread(
            target=self._write_full_size, daemon=True, name="convcli-tiff-writer"
        )
        self._thread.start()

    def _write_full_size(self) -> None:
        try:
            self._write_level(
                self._queued_bands(),
                subifds=len(self._levels) or None,
                **{
                    **_tiff_options(self._shape, self._dtype),
                    **tiff_options(self._carried, (self._shape[1], self._shape[0])),
                },
            )
        except BaseException as exc:  # handed to the caller's thread
            self._failure = exc

    def _level_carried(self, shape: tuple[int, ...]) -> Carried:
        """What a reduced level of `shape` holds, as libvips writes its levels: the colour
        profile (a viewer showing a level manages its colours), and the resolution of its
        pixels. The rest is the full size's alone."""
        kept = self._carried
        step = round(self._shape[1] / shape[1])
        held = replace(NOTHING, icc_profile=kept.icc_profile, dpi=kept.dpi, per_cm=kept.per_cm)
        return held.on_grid(step)

    def _write_level(self, bands: Iterator[np.ndarray], **options) -> None:
        """tifffile writes one level's tiles, from `bands`, with `options`."""
        data = _tile_data(bands, self._dtype, self._shape[2], self._nodata)
        try:
            self._tiff.write(data, **options)
        finally:
            data.close()  # its deflate threads end here, also where tifffile stopped early

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
                self._write_level(
                    level.bands(),
                    subfiletype=1,
                    **_tiff_options(level.shape, self._dtype),
                    **tiff_options(self._level_carried(level.shape)),
                )
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
