"""Zarr stores written: images as chunked arrays in a folder (``*.zarr``).

The only module that imports the ``zarr`` package, and only when a store is
met (the ``zarr`` extra); a missing one is one line,
:class:`convcli.errors.MissingExtra`, naming the extra.

Reading a store is :mod:`convcli.io.zarr_regions` (through :func:`require_zarr`).

Out
---
:class:`StoreSink` is the ``zarr`` sink of
:func:`convcli.io.row_writers.open_row_writer`: an OME-Zarr 0.4 image (Zarr
format 2), written into a temporary folder renamed into place at the end.
Dataset ``0`` is the image, (H, W) or (C, H, W) (OME-Zarr puts the channel
axis before y and x); ``1``, ``2`` ... are 2 x 2 means of the one above (as
the TIFF writer's reduced levels), until one fits in a 256 x 256 chunk.
Chunks are 256 x 256 (x C), Blosc zstd. The group's attributes carry
``"convcli": {"version": ...}``, so that ``--overwrite`` replaces only the
stores convcli wrote (:func:`store_marked`).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..errors import MissingExtra
from . import store_claims
from .carried import NOTHING, Carried
from .formats import store_attributes_marked
from .ome import ome_attributes
from .pyramid import TILE, RowBands, RowHalver, band_pieces


def require_zarr(need: str):
    """The ``zarr`` module; :class:`~convcli.errors.MissingExtra` naming `need` if missing."""
    try:
        import zarr
    except ImportError:
        raise MissingExtra(need, "zarr") from None
    return zarr


def store_marked(path) -> bool:
    """Whether the folder `path` is a Zarr group whose attributes carry convcli's marker.

    Read from the metadata file itself (``.zattrs``, or ``zarr.json`` for
    Zarr format 3), so the answer needs no ``zarr`` package.
    """
    folder = Path(path)
    for name, inside in ((".zattrs", ()), ("zarr.json", ("attributes",))):
        try:
            attrs = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for key in inside:
            attrs = attrs.get(key, {}) if isinstance(attrs, dict) else {}
        return store_attributes_marked(attrs)
    return False


def level_sizes(height: int, width: int) -> list[tuple[int, int]]:
    """The (H, W) of each level of a written store: the image, then halves until one fits a chunk.

    >>> level_sizes(1000, 300)
    [(1000, 300), (500, 150), (250, 75)]
    """
    sizes = [(int(height), int(width))]
    while max(sizes[-1]) > TILE:
        sizes.append((-(-sizes[-1][0] // 2), -(-sizes[-1][1] // 2)))
    return sizes


WRITE_PIECE_COLUMNS = 4096
"""The columns of a band on disk that one write into a store takes (zarr writes a call's
chunks concurrently: pieces of 512 columns took 30% longer)."""


class _ChunkFiles:
    """The chunks of a zarr array in a folder on this machine, written as files by this process.

    Each chunk is encoded by the array's own compressor and written where the
    array keeps it, the bytes zarr itself writes (an edge chunk whole, padded
    with the fill value). zarr's own writes cost about 1.2 ms a chunk in its
    event loop and threads: a 6000x6000 8-bit dataset of 256 x 256 chunks took
    0.61 s through ``array[...] = values``, 0.10 s so. Only whole chunks from
    a chunk's corner are written so (:meth:`write` says whether it could).
    """

    def __init__(self, array):
        self._folder = Path(array.store.root) / array.path
        self._codec = array.compressors[0]
        self._key = array.metadata.encode_chunk_key
        fill = array.metadata.fill_value
        self._fill = 0 if fill is None else fill  # an edge chunk's padding
        self._chunk = tuple(int(n) for n in array.chunks)
        self._shape = tuple(int(n) for n in array.shape)

    @classmethod
    def of(cls, array) -> _ChunkFiles | None:
        """The chunk files of `array`, or None where zarr must write them (object storage,
        filters, an order other than C)."""
        local = isinstance(array.store, require_zarr("--format zarr needs zarr").storage.LocalStore)
        plain = (
            len(array.compressors) == 1
            and not array.metadata.filters
            and array.metadata.order == "C"
        )
        return cls(array) if local and plain else None

    def write(self, top: int, left: int, piece: np.ndarray) -> bool:
        """Write `piece` (rows, columns, C) at (`top`, `left`) of the (H, W) or (C, H, W)
        array, if it covers whole chunks from a chunk's corner (or to the array's edge)."""
        (rows, columns), (height, width) = self._chunk[-2:], self._shape[-2:]
        bottom, right = top + piece.shape[0], left + piece.shape[1]
        if (
            top % rows
            or left % columns
            or (bottom % rows and bottom != height)
            or (right % columns and right != width)
        ):
            return False
        chunk = np.full(self._chunk, self._fill, piece.dtype)
        for r in range(top, bottom, rows):
            for c in range(left, right, columns):
                block = piece[r - top : r - top + rows, c - left : c - left + columns]
                chunk[...] = self._fill
                if chunk.ndim == 2:
                    chunk[: len(block), : block.shape[1]] = block[:, :, 0]
                else:
                    chunk[:, : len(block), : block.shape[1]] = np.moveaxis(block, 2, 0)
                index = (r // rows, c // columns)
                self._put(
                    self._key(index if chunk.ndim == 2 else (0, *index)), self._codec.encode(chunk)
                )
        return True

    def _put(self, key: str, data: bytes) -> None:
        path = self._folder / key
        try:
            path.write_bytes(data)
        except FileNotFoundError:  # the chunk's folders are made on its first chunk
            # One level at a time below the array's folder: never the array's own folder
            # again, nor the store's, where a failed write has removed them.
            for folder in reversed(path.relative_to(self._folder).parents[:-1]):
                (self._folder / folder).mkdir(exist_ok=True)
            path.write_bytes(data)


class _StoreLevel:
    """One dataset of a written store, filled a band of chunk rows at a time.

    The band is gathered by :class:`convcli.io.pyramid.RowBands` (on disk
    where it is wide) and written a column piece at a time: as files
    (:class:`_ChunkFiles`) in a folder on this machine, else through zarr.
    """

    def __init__(
        self,
        array,
        size: tuple[int, int],
        channels: int,
        dtype: np.dtype,
        top: int = 0,
        left: int = 0,
        spill_limit: int | None = None,
    ):
        self._array = array
        self._files = _ChunkFiles.of(array)
        rows = int(array.chunks[-2])
        self._bands = RowBands(
            rows,
            (0, size[1], channels),
            dtype,
            files=1,
            piece_bytes=(rows * WRITE_PIECE_COLUMNS * channels * np.dtype(dtype).itemsize),
            spill_limit=spill_limit,
        )
        self._top = top  # the band's first row in the image
        self._left = left  # its first column: `size` may be a column piece

    def add(self, rows: np.ndarray) -> None:
        for band in self._bands.add(rows):
            self._write(band)

    def flush(self) -> None:
        """Write the rows gathered; the files on disk are removed."""
        rest = self._bands.rest()
        if rest is not None:
            self._write(rest)
        self.discard()

    def discard(self) -> None:
        """Drop the rows gathered and remove their files on disk."""
        self._bands.close()

    def _write(self, band) -> None:
        left = self._left
        for piece in [band] if isinstance(band, np.ndarray) else band_pieces(band):
            rows = slice(self._top, self._top + len(piece))
            columns = slice(left, left + piece.shape[1])
            written = self._files is not None and self._files.write(self._top, left, piece)
            if not written and piece.shape[2] == 1:
                self._array[rows, columns] = piece[:, :, 0]
            elif not written:
                self._array[:, rows, columns] = np.moveaxis(piece, 2, 0)
            left += piece.shape[1]
        self._top += len(piece)


class _LevelRows:
    """Rows written into a store's level 0 and, halved as they come, its smaller levels.

    Where the store is on object storage, this run's claim on it
    (:mod:`convcli.io.store_claims`) is checked before each band of
    :data:`TILE` rows: ``claim`` is ``(url, token, storage options)``, or None.
    """

    def __init__(
        self,
        arrays,
        sizes,
        shape: tuple[int, int, int],
        dtype: np.dtype,
        top: int = 0,
        claim: tuple | None = None,
        spill_limit: int | None = None,
    ):
        """`arrays`: the levels' zarr arrays, of `sizes`; `top`: level 0's first row written;
        `spill_limit`: the largest band each level holds in memory (:func:`.spill.spill_limit`)."""
        self._levels = [
            _StoreLevel(array, size, shape[2], dtype, top=top >> k, spill_limit=spill_limit)
            for k, (array, size) in enumerate(zip(arrays, sizes, strict=True))
        ]
        self._halvers = [RowHalver(size, shape[2], dtype) for size in sizes[:-1]]
        self._empty = np.empty((0,) + shape[1:], dtype)
        self._claim, self._row, self._checked_to = claim, top, top

    def _check_claim(self) -> None:
        """Stop (:class:`StoreTaken`) where another run has claimed the store since."""
        if self._claim is not None:
            store_claims.check(*self._claim)

    def write(self, rows: np.ndarray) -> None:
        """Add the next rows: (n, W, C), or (n, W) for one channel, as the row writers take."""
        if rows.ndim == 2:
            rows = rows[:, :, None]
        if self._row >= self._checked_to:
            self._check_claim()
            self._checked_to = (self._row // TILE + 1) * TILE
        self._row += len(rows)
        self._levels[0].add(rows)
        for halver, level in zip(self._halvers, self._levels[1:], strict=True):
            rows = halver.add(rows)
            level.add(rows)

    def discard(self) -> None:
        """Drop what the levels hold (a failed write): their files on disk are removed."""
        for level in self._levels:
            level.discard()

    def _flush(self, last: bool) -> None:
        """Write what the levels hold; `last`: the image ends here (an odd row is halved alone)."""
        self._levels[0].flush()
        rows = self._empty
        for halver, level in zip(self._halvers, self._levels[1:], strict=True):
            rows = halver.finish(rows) if last else halver.add(rows)
            level.add(rows)
            level.flush()


class StoreSink(_LevelRows):
    """A ``zarr`` output of :func:`convcli.io.row_writers.open_row_writer` (module docstring).

    `temporary` is the folder to make (the writer renames it into place), or
    the URL of an object-storage prefix written in place.
    """

    def __init__(
        self,
        temporary: Path | str,
        shape: tuple[int, int, int],
        dtype: np.dtype,
        storage_options: dict | None = None,
        claim: str | None = None,
        *,
        carried: Carried = NOTHING,
        spill_limit: int | None = None,
    ):
        self._shape, self._carried, self._dtype = shape, carried, np.dtype(dtype)
        self._group, arrays = create_store(temporary, shape, dtype, storage_options)
        super().__init__(
            arrays,
            level_sizes(shape[0], shape[1]),
            shape,
            dtype,
            claim=(str(temporary), claim, storage_options) if claim else None,
            spill_limit=spill_limit,
        )

    def close(self) -> None:
        self._flush(last=True)
        self._check_claim()
        self._group.attrs.update(
            ome_attributes(self._shape, len(self._levels), self._carried, self._dtype)
        )
        if self._claim is not None:  # finished: the marker is there, the claim goes
            store_claims.release(self._claim[0], self._claim[2])

    def abort(self) -> None:
        """Drop the rows held: the writer removes the temporary folder."""
        self.discard()


def cancel_zarr_requests(seconds: float) -> None:
    """Cancel what runs in zarr's event loop, and wait up to `seconds` for it to end.

    A write stopped by Ctrl-C leaves its requests running there (zarr's
    ``sync`` stops waiting, not the work): chunks written after the store
    was removed were left behind, a store with neither claim nor marker.
    """
    import asyncio

    from zarr.core import sync

    loop = sync.loop[0]  # none yet: zarr has run nothing
    if loop is None or loop.is_closed():
        return

    async def cancel_all():
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=seconds)

    ended = asyncio.run_coroutine_threadsafe(cancel_all(), loop)
    try:
        ended.result(seconds + 1)
    except TimeoutError:  # a second Ctrl-C stops waiting at once
        pass


def _store(location, storage_options: dict | None = None):
    """The zarr store at `location`: a local folder, or an object-storage URL (fsspec)."""
    zarr = require_zarr("--format zarr needs zarr")
    text = str(location)
    if "://" in text:
        return zarr.storage.FsspecStore.from_url(text, storage_options=storage_options or {})
    return zarr.storage.LocalStore(text)


def create_store(
    location, shape: tuple[int, int, int], dtype: np.dtype, storage_options: dict | None = None
) -> tuple[object, list]:
    """A new store at `location` with an empty array for each level: the group and the arrays.

    The layout of :class:`StoreSink` (see the module docstring); the group's
    attributes are set once every level is written (:func:`finish_store`).
    """
    zarr = require_zarr("--format zarr needs zarr")
    from numcodecs import Blosc

    # On object storage the prefix holds this run's claim already, and nothing else but what
    # a run whose claim this one overwrote may still write there before it stops: replaced.
    remote = "://" in str(location)
    mode = "a" if remote else "w-"
    group = zarr.open_group(store=_store(location, storage_options), mode=mode, zarr_format=2)
    channels, arrays = shape[2], []
    # The fill value is what GDAL's Zarr driver takes for the nodata value: NaN for floats,
    # missing as NaN (GDAL's nodata pixels, read so), none for levels (0 made every 0.0,
    # and every black pixel, a nodata pixel). Every chunk is written (_every_chunk).
    fill = np.nan if np.dtype(dtype).kind == "f" else None
    for index, (height, width) in enumerate(level_sizes(shape[0], shape[1])):
        with _every_chunk():
            array = group.create_array(
                str(index),
                dtype=dtype,
                fill_value=fill,
                shape=(height, width) if channels == 1 else (channels, height, width),
                chunks=(TILE, TILE) if channels == 1 else (channels, TILE, TILE),
                compressors=Blosc(cname="zstd", clevel=5, shuffle=Blosc.SHUFFLE),
                chunk_key_encoding={"name": "v2", "separator": "/"},
                overwrite=remote,
            )
        arrays.append(array)
    return group, arrays


@contextmanager
def _every_chunk():
    """Arrays opened inside write every chunk, one that is all fill value too (zarr leaves
    those out): in the v2 format a chunk missing from an array with no fill value is
    undefined, and readers give whatever memory held."""
    with require_zarr("--format zarr needs zarr").config.set({"array.write_empty_chunks": True}):
        yield


def _level(group, index: int):
    """Level `index`'s array of a store, opened to write (every chunk: :func:`_every_chunk`)."""
    with _every_chunk():
        return group[str(index)]


def band_levels(band_rows: int, levels: int) -> int:
    """How many levels bands of `band_rows` rows (from a multiple of it) fill alone.

    Level ``k`` of such a band is whole chunk rows where `band_rows` is a
    multiple of ``256 * 2**k``: no two bands write one chunk.

    >>> band_levels(1024, 7), band_levels(768, 7), band_levels(1024, 2)
    (3, 1, 2)
    """
    count = 0
    while count < levels and band_rows % (TILE << count) == 0:
        count += 1
    return count


class StoreBand(_LevelRows):
    """Rows ``top ..`` of an image written into a store :func:`create_store` made (a task's band).

    Levels ``0 .. levels - 1`` are written (see :func:`band_levels`); `last`
    says the band ends the image (an odd last row is averaged with itself).
    Several processes write the bands of one store at once.
    """

    def __init__(
        self,
        location,
        shape: tuple[int, int, int],
        dtype: np.dtype,
        *,
        top: int,
        levels: int,
        last: bool,
        storage_options: dict | None = None,
        claim: str | None = None,
    ):
        zarr = require_zarr("--format zarr needs zarr")
        store_claims.check(str(location), claim, storage_options)  # a task of a run gone
        group = zarr.open_group(store=_store(location, storage_options), mode="r+")
        sizes = level_sizes(shape[0], shape[1])[:levels]
        arrays = [_level(group, k) for k in range(len(sizes))]
        super().__init__(
            arrays,
            sizes,
            shape,
            dtype,
            top,
            claim=(str(location), claim, storage_options) if claim else None,
        )
        self._last = last

    def close(self) -> None:
        self._check_claim()
        self._flush(self._last)


def finish_store(
    location,
    shape: tuple[int, int, int],
    dtype: np.dtype,
    *,
    written: int,
    storage_options: dict | None = None,
    claim: str | None = None,
    carried: Carried = NOTHING,
) -> None:
    """Fill the levels from `written` on from level ``written - 1``, read back; set the attributes.

    The bands of a cluster's tasks write the first `written` levels
    (:class:`StoreBand`); the smaller levels are made here, a column piece of
    level ``written - 1`` at a time (each halved down through every level),
    so that the memory held does not grow with the image's width.
    """
    zarr = require_zarr("--format zarr needs zarr")

    group = zarr.open_group(store=_store(location, storage_options), mode="r+")
    sizes = level_sizes(shape[0], shape[1])
    if written < len(sizes):
        # Pieces of an even width at every level: a multiple of 2 ** (levels to make).
        step = -(-FINISH_PIECE_COLUMNS >> (len(sizes) - written)) << (len(sizes) - written)
        for c0 in range(0, sizes[written - 1][1], step):
            _halve_piece(group, sizes, written, c0, step, shape[2], dtype)
    store_claims.check(str(location), claim, storage_options)
    group.attrs.update(ome_attributes(shape, len(sizes), carried, dtype))
    if claim is not None:  # finished: the marker is there, the claim goes
        store_claims.release(str(location), storage_options)


FINISH_PIECE_COLUMNS = 4096
"""About the columns of level ``written - 1`` that :func:`finish_store` halves at a time."""


def _halve_piece(
    group, sizes, written: int, c0: int, step: int, channels: int, dtype: np.dtype
) -> None:
    """Columns `c0` to `c0` + `step` - 1 of level ``written - 1``, halved into every level below."""
    source = group[str(written - 1)]
    height, width = sizes[written - 1]
    above = (height, min(width, c0 + step) - c0)
    halvers, levels = [], []
    for depth, k in enumerate(range(written, len(sizes)), start=1):
        halvers.append(RowHalver(above, channels, dtype))
        above = halvers[-1].shape[:2]
        levels.append(_StoreLevel(_level(group, k), above, channels, dtype, left=c0 >> depth))
    for top in range(0, height, 2 * TILE):
        where = (slice(top, top + 2 * TILE), slice(c0, c0 + step))
        rows = source[where] if channels == 1 else source[(slice(None),) + where]
        rows = rows[:, :, None] if channels == 1 else np.moveaxis(rows, 0, 2)
        last = top + 2 * TILE >= height
        for halver, level in zip(halvers, levels, strict=True):
            rows = halver.finish(rows) if last else halver.add(rows)
            level.add(rows)
    for level in levels:
        level.flush()
