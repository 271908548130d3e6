"""Zarr stores in and out: images as chunked arrays in a folder (``*.zarr``).

The only module that imports the ``zarr`` package, and only when a store is
met (the ``zarr`` extra); a missing one is one line,
:class:`convcli.errors.MissingExtra`, naming the extra.

In
--
:func:`open_store_regions` opens a store as a source of row bands, like
:func:`convcli.io.regions.open_regions` for a TIFF; only the chunks that hold a
band are read. A store is either

- an array, (H, W) or (H, W, C), or
- an OME-Zarr image (a group with ``multiscales`` metadata, version 0.4, or
  0.5 under ``ome``): its first dataset, the full resolution, with axes
  among t, c, z, y, x; the first time point and plane are read, the channel
  axis moved last.

C is 1 to 4 (L, L A, R G B, R G B A); samples are uint8 (white 255, depth 8),
uint16 (65535, 16) or float32 (white the larger of 1 and the largest finite
value, depth 16, as for a float TIFF).

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
import os
from pathlib import Path

import numpy as np

from ..errors import ImageError, MissingExtra
from . import store_claims
from .bands import float_white
from .carried import NOTHING, Carried
from .formats import store_attributes_marked
from .ome import ome_attributes, physical_of
from .physical import PhysicalSize
from .pyramid import TILE, RowBands, RowHalver, band_pieces
from .spill import SegmentRows
from .storage import filesystem, is_url

CHANNEL_NAMES = {1: ("L",), 2: ("L", "A"), 3: ("R", "G", "B"), 4: ("R", "G", "B", "A")}
"""The channels of an image with 1 to 4 samples per pixel, as Pillow names them."""

_DEPTHS = {np.dtype(np.uint8): (255.0, 8), np.dtype(np.uint16): (65535.0, 16),
           np.dtype(np.float32): (None, 16)}  # white (None: from the values), depth
_AXES = frozenset("tczyx")


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


def open_store_regions(path, *, storage_options: dict | None = None) -> StoreRegions:
    """Open a Zarr store (a folder, or a URL through fsspec) for reading by row bands.

    Raises
    ------
    MissingExtra
        The ``zarr`` package (or the URL's fsspec backend) is not installed.
    ImageError
        Not a store convcli reads (see the module docstring), in one line.
    OSError
        The folder is missing or cannot be read.
    """
    zarr = require_zarr("reading .zarr needs zarr")
    shown = os.fspath(path)
    if is_url(shown):
        filesystem(shown, storage_options)  # a missing backend: MissingExtra
        store = zarr.storage.FsspecStore.from_url(shown, storage_options=storage_options,
                                                  read_only=True)
    else:
        if not os.path.isdir(shown):
            os.listdir(shown)  # the OSError of a missing folder, or of a file
        store = zarr.storage.LocalStore(shown, read_only=True)
    try:
        node = zarr.open(store=store, mode="r")
    except (FileNotFoundError, ValueError, KeyError, TypeError) as exc:
        raise ImageError(f"not a Zarr array or OME-Zarr image ({_first_line(exc)})") from None
    array, axes, physical = _full_resolution(zarr, node)
    return StoreRegions(array, axes, Carried(physical=physical) if physical else NOTHING)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _full_resolution(zarr, node) -> tuple[object, tuple[str, ...], PhysicalSize | None]:
    """The array to read, its axes' names and physical size: the node itself, or an OME
    image's level 0 (:func:`convcli.io.ome.physical_of`)."""
    if isinstance(node, zarr.Array):
        if node.ndim not in (2, 3):
            raise ImageError(f"a Zarr array of {node.ndim} dimensions: convcli reads "
                             "(height, width) or (height, width, channels)")
        return node, ("y", "x", "c")[:node.ndim], None
    attrs = dict(node.attrs)
    scales = attrs.get("multiscales") or (attrs.get("ome") or {}).get("multiscales")
    try:
        image = scales[0]
        array = node[str(image["datasets"][0]["path"])]
        axes = image.get("axes") or ("t", "c", "z", "y", "x")  # before OME-Zarr 0.4
        axes = tuple(str(a["name"] if isinstance(a, dict) else a).lower() for a in axes)
    except (TypeError, KeyError, IndexError, ValueError):
        raise ImageError("a Zarr group that is not an OME-Zarr image (no multiscales "
                         "metadata with a dataset)") from None
    if not isinstance(array, zarr.Array) or len(axes) != array.ndim or not (
            set(axes) <= _AXES and {"y", "x"} <= set(axes) and len(set(axes)) == len(axes)):
        raise ImageError(f"an OME-Zarr image with axes {', '.join(axes)}: convcli reads "
                         "t, c, z, y, x")
    return array, axes, physical_of(image)


class StoreRegions:
    """A Zarr array read band by band (made by :func:`open_store_regions`).

    Attributes as :class:`convcli.io.regions.RegionSource`: ``height``,
    ``width``, ``channels``, ``white``, ``depth``, ``notes``, ``dtype``, and
    ``carried`` (an OME image's physical size, :func:`convcli.io.ome.physical_of`).
    The last two rows of chunks read are kept (:class:`convcli.io.spill.SegmentRows`:
    on disk where wide), so that bands that overlap (a halo)
    read each chunk once when read top to bottom.
    """

    def __init__(self, array, axes: tuple[str, ...], carried: Carried = NOTHING):
        self._array, self._axes = array, axes
        size = dict(zip(axes, (int(n) for n in array.shape), strict=True))
        self.height, self.width = size["y"], size["x"]
        count = size.get("c", 1)
        if count not in CHANNEL_NAMES or 0 in array.shape:
            raise ImageError(f"a Zarr image of {count} channels, {self.width}x{self.height}: "
                             "convcli reads 1 to 4 channels")
        self.dtype = np.dtype(array.dtype)
        self.carried = carried  # an OME image's physical size
        self.floats = self.dtype.kind == "f"
        if self.dtype not in _DEPTHS:
            raise ImageError(f"a Zarr image of {self.dtype} samples: convcli reads uint8, "
                             "uint16 or float32")
        self.channels = CHANNEL_NAMES[count]
        self._white, self.depth = _DEPTHS[self.dtype]
        names = {"t": "time points", "z": "planes"}
        self.notes = tuple(f"used the first of {size[a]} {names[a]}" for a in "tz"
                           if size.get(a, 1) > 1)
        self._step = int(array.chunks[axes.index("y")])
        self._chunk_columns = int(array.chunks[axes.index("x")])
        self._kept = SegmentRows()

    def stored_bytes(self) -> tuple[int, int]:
        """The bytes of samples of the image read, and those the array stores (its chunks
        and metadata, of every plane): :func:`convcli.io.limits.check_stored`."""
        declared = self.height * self.width * len(self.channels) * self.dtype.itemsize
        return declared, int(self._array.nbytes_stored())

    @property
    def white(self) -> float:
        """The value of full intensity (for float32, read once from the values)."""
        if self._white is None:
            self._white = float_white(self)
        return self._white

    def read_rows(self, r0: int, r1: int) -> np.ndarray:
        """Rows `r0` to `r1` (excluded), all columns: (r1 - r0, width, C) float32.

        Raises ImageError for a chunk that cannot be read or decoded.
        """
        if not (isinstance(r0, (int, np.integer)) and isinstance(r1, (int, np.integer))
                and 0 <= r0 <= r1 <= self.height):
            raise ValueError(f"rows must satisfy 0 <= r0 <= r1 <= {self.height}; "
                             f"got r0={r0!r}, r1={r1!r}")
        out = np.empty((r1 - r0, self.width, len(self.channels)), np.float32)
        step = self._step
        for k in range(r0 // step, -(-r1 // step)):
            top = k * step
            lo, hi = max(r0, top), min(r1, top + step)
            shape = (min(step, self.height - top), self.width, len(self.channels))
            out[lo - r0:hi - r0] = self._kept.read(
                k, lo - top, hi - top, shape=shape, dtype=self.dtype, tile=self._chunk_columns,
                decode=lambda c0, c1, values, k=k: self._decode(k, c0, c1, values))
        return out

    def _decode(self, k: int, c0: int, c1: int, out: np.ndarray) -> None:
        """Chunk row `k`'s columns `c0` to `c1` - 1, as stored, into `out` (rows, c1 - c0, C)."""
        rows = slice(k * self._step, min((k + 1) * self._step, self.height))
        where = tuple(rows if a == "y" else slice(c0, c1) if a == "x" else 0 if a in "tz"
                      else slice(None) for a in self._axes)
        try:
            values = np.asarray(self._array[where])
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            raise ImageError(f"cannot decode the image: {_first_line(exc)}") from None
        kept = [a for a in self._axes if a not in "tz"]
        values = np.moveaxis(values, [kept.index(a) for a in "yx"], [0, 1])
        out[:] = values if values.ndim == 3 else values[:, :, None]

    def close(self) -> None:
        """Forget the kept chunks (a store holds no open file)."""
        self._kept.forget()

    def __enter__(self) -> StoreRegions:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


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
        self._fill = array.metadata.fill_value
        self._chunk = tuple(int(n) for n in array.chunks)
        self._shape = tuple(int(n) for n in array.shape)

    @classmethod
    def of(cls, array) -> _ChunkFiles | None:
        """The chunk files of `array`, or None where zarr must write them (object storage,
        filters, an order other than C)."""
        local = isinstance(array.store, require_zarr("--format zarr needs zarr").storage.LocalStore)
        plain = (len(array.compressors) == 1 and not array.metadata.filters
                 and array.metadata.order == "C")
        return cls(array) if local and plain else None

    def write(self, top: int, left: int, piece: np.ndarray) -> bool:
        """Write `piece` (rows, columns, C) at (`top`, `left`) of the (H, W) or (C, H, W)
        array, if it covers whole chunks from a chunk's corner (or to the array's edge)."""
        (rows, columns), (height, width) = self._chunk[-2:], self._shape[-2:]
        bottom, right = top + piece.shape[0], left + piece.shape[1]
        if top % rows or left % columns or (bottom % rows and bottom != height) \
                or (right % columns and right != width):
            return False
        chunk = np.full(self._chunk, self._fill, piece.dtype)
        for r in range(top, bottom, rows):
            for c in range(left, right, columns):
                block = piece[r - top:r - top + rows, c - left:c - left + columns]
                chunk[...] = self._fill
                if chunk.ndim == 2:
                    chunk[:len(block), :block.shape[1]] = block[:, :, 0]
                else:
                    chunk[:, :len(block), :block.shape[1]] = np.moveaxis(block, 2, 0)
                index = (r // rows, c // columns)
                self._put(self._key(index if chunk.ndim == 2 else (0, *index)),
                          self._codec.encode(chunk))
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

    def __init__(self, array, size: tuple[int, int], channels: int, dtype: np.dtype,
                 top: int = 0, left: int = 0):
        self._array = array
        self._files = _ChunkFiles.of(array)
        rows = int(array.chunks[-2])
        self._bands = RowBands(rows, (0, size[1], channels), dtype, files=1, piece_bytes=(
            rows * WRITE_PIECE_COLUMNS * channels * np.dtype(dtype).itemsize))
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

    def __init__(self, arrays, sizes, shape: tuple[int, int, int], dtype: np.dtype, top: int = 0,
                 claim: tuple | None = None):
        """`arrays`: the levels' zarr arrays, of `sizes`; `top`: level 0's first row written."""
        self._levels = [_StoreLevel(array, size, shape[2], dtype, top=top >> k)
                        for k, (array, size) in enumerate(zip(arrays, sizes, strict=True))]
        self._halvers = [RowHalver(size, shape[2], dtype) for size in sizes[:-1]]
        self._empty = np.empty((0,) + shape[1:], dtype)
        self._claim, self._row, self._checked_to = claim, top, top

    def _check_claim(self) -> None:
        """Stop (:class:`StoreTaken`) where another run has claimed the store since."""
        if self._claim is not None:
            store_claims.check(*self._claim)

    def write(self, rows: np.ndarray) -> None:
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

    def __init__(self, temporary: Path | str, shape: tuple[int, int, int], dtype: np.dtype,
                 storage_options: dict | None = None, claim: str | None = None, *,
                 carried: Carried = NOTHING):
        self._shape, self._carried, self._dtype = shape, carried, np.dtype(dtype)
        self._group, arrays = create_store(temporary, shape, dtype, storage_options)
        super().__init__(arrays, level_sizes(shape[0], shape[1]), shape, dtype,
                         claim=(str(temporary), claim, storage_options) if claim else None)

    def close(self) -> None:
        self._flush(last=True)
        self._check_claim()
        self._group.attrs.update(ome_attributes(self._shape, len(self._levels), self._carried,
                                                self._dtype))
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


def create_store(location, shape: tuple[int, int, int], dtype: np.dtype,
                 storage_options: dict | None = None) -> tuple[object, list]:
    """A new store at `location` with an empty array for each level: the group and the arrays.

    The layout of :class:`StoreSink` (see the module docstring); the group's
    attributes are set once every level is written (:func:`finish_store`).
    """
    zarr = require_zarr("--format zarr needs zarr")
    from numcodecs import Blosc
    # On object storage the prefix holds this run's claim already (and nothing else).
    mode = "a" if "://" in str(location) else "w-"
    group = zarr.open_group(store=_store(location, storage_options), mode=mode, zarr_format=2)
    channels, arrays = shape[2], []
    for index, (height, width) in enumerate(level_sizes(shape[0], shape[1])):
        arrays.append(group.create_array(
            str(index), dtype=dtype, fill_value=0,
            shape=(height, width) if channels == 1 else (channels, height, width),
            chunks=(TILE, TILE) if channels == 1 else (channels, TILE, TILE),
            compressors=Blosc(cname="zstd", clevel=5, shuffle=Blosc.SHUFFLE),
            chunk_key_encoding={"name": "v2", "separator": "/"}))
    return group, arrays


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

    def __init__(self, location, shape: tuple[int, int, int], dtype: np.dtype, *, top: int,
                 levels: int, last: bool, storage_options: dict | None = None,
                 claim: str | None = None):
        zarr = require_zarr("--format zarr needs zarr")
        store_claims.check(str(location), claim, storage_options)  # a task of a run gone
        group = zarr.open_group(store=_store(location, storage_options), mode="r+")
        sizes = level_sizes(shape[0], shape[1])[:levels]
        arrays = [group[str(k)] for k in range(len(sizes))]
        super().__init__(arrays, sizes, shape, dtype, top,
                         claim=(str(location), claim, storage_options) if claim else None)
        self._last = last

    def close(self) -> None:
        self._check_claim()
        self._flush(self._last)


def finish_store(location, shape: tuple[int, int, int], dtype: np.dtype, *, written: int,
                 storage_options: dict | None = None, claim: str | None = None,
                 carried: Carried = NOTHING) -> None:
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


def _halve_piece(group, sizes, written: int, c0: int, step: int, channels: int,
                 dtype: np.dtype) -> None:
    """Columns `c0` to `c0` + `step` - 1 of level ``written - 1``, halved into every level below."""
    source = group[str(written - 1)]
    height, width = sizes[written - 1]
    above = (height, min(width, c0 + step) - c0)
    halvers, levels = [], []
    for depth, k in enumerate(range(written, len(sizes)), start=1):
        halvers.append(RowHalver(above, channels, dtype))
        above = halvers[-1].shape[:2]
        levels.append(_StoreLevel(group[str(k)], above, channels, dtype, left=c0 >> depth))
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
