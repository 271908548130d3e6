"""Output files written row band by row band, never holding the whole image.

A result computed in row bands, top to bottom, is written as it comes:
:func:`open_row_writer` gives a writer whose ``write(rows)`` takes the next
rows, and the file appears under its final name only when every row is in
(through :func:`convcli.io.safeio.atomic_output`: a temporary name, then a rename;
an error or an interrupt leaves no file and no temporary behind).

=======  ==============================  =============================================
format   values                          the file
=======  ==============================  =============================================
npy      float32, (H, W, C)              what :func:`convcli.io.image_files.save_npy` writes,
                                         byte for byte
png      uint8 / uint16 levels, C 1..4   what :func:`convcli.io.png.write_png` writes
                                         (and so ``save_levels``), byte for byte
tiff     uint8 / uint16 levels or        a tiled TIFF (256 x 256 tiles, deflate,
         float32 values, C 1..4          horizontal predictor for levels; a BigTIFF where
                                         it might pass 4 GiB) with reduced
                                         levels as SubIFDs, each half the one above
zarr     uint8 / uint16 levels or        a folder: an OME-Zarr image with the same
         float32 values, C 1..4          reduced levels (:mod:`convcli.io.zarr_stores`;
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
of 256 rows is larger than the writer's ``spill_limit`` (:func:`convcli.io.spill.spill_limit`),
in such files too (:class:`convcli.io.pyramid.RowBands`): tiles are made a column piece at a
time, so that the memory held does not grow with the image's width.
Deflate is TIFF's compression code 8 ("Adobe deflate", the one libtiff,
vips and every viewer read; code 32946 is the obsolete one), done by
Python's zlib where imagecodecs is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np

from . import store_claims
from .carried import NOTHING, Carried
from .formats import FORMATS, MARKER, load
from .image_files import written_by_convcli
from .png import PngRowEncoder
from .pyramid import TILE
from .safeio import atomic_output
from .spill import spills
from .storage import CANCEL_SECONDS, remove_tree
from .zarr_stores import StoreSink, cancel_zarr_requests

ROW_FORMATS = tuple(sorted(name for name, f in FORMATS.items() if f.strips))
"""The formats :func:`open_row_writer` writes (``npy``, ``png``, ``tiff``, ``zarr``)."""

_LEVEL_TYPES = (np.dtype(np.uint8), np.dtype(np.uint16))
_FLOAT = np.dtype(np.float32)


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
    allowed = {
        "npy": (_FLOAT,),
        "png": _LEVEL_TYPES,
        "tiff": _LEVEL_TYPES + (_FLOAT,),
        "zarr": _LEVEL_TYPES + (_FLOAT,),
    }[fmt]
    if dtype not in allowed:
        raise ValueError(
            f"dtype for {fmt} must be one of {', '.join(str(d) for d in allowed)}; got {dtype}"
        )
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
        existed and was kept), as :func:`convcli.io.image_files.save_levels` returns.
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
            self._dtype.kind == "u" and band.dtype != self._dtype
        ):
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
def open_row_writer(
    path: str | os.PathLike,
    *,
    fmt: str,
    height: int,
    width: int,
    channels: int,
    dtype,
    overwrite: bool = False,
    store_url: str | None = None,
    storage_options: dict | None = None,
    carried: Carried = NOTHING,
    spill_limit: int | None = None,
) -> Iterator[RowWriter]:
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
        float32 (``npy``); uint8 or uint16 levels (``png``), or float32 (``tiff``, ``zarr``).
    overwrite : bool
        Replace a file only if convcli wrote it (:func:`convcli.io.image_files.save_levels`).
    store_url, storage_options : str and dict, optional
        ``zarr``: the object-storage prefix written in place (:func:`remote_store`).
    carried : Carried
        What a ``png`` or ``tiff`` keeps of its input (:mod:`convcli.io.carried`).
    spill_limit : int, optional
        ``tiff``, ``zarr``: the largest band held in memory, bytes (:func:`.spill.spill_limit`).

    Yields
    ------
    RowWriter
        ``written`` says, after the block, whether the file was written.

    Raises
    ------
    ValueError
        A bad argument, rows of another shape or dtype, too many rows or too few: no file left.

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
    place = (path, fmt, (int(height), int(width), int(channels)), dtype, overwrite)
    with _written_rows(*place, store_url, storage_options, carried, spill_limit) as writer:
        yield writer


@contextmanager
def _written_rows(
    path: str | os.PathLike,
    fmt: str,
    shape: tuple[int, int, int],
    dtype: np.dtype,
    overwrite: bool,
    store_url: str | None,
    storage_options: dict | None,
    carried: Carried,
    spill_limit: int | None,
) -> Iterator[RowWriter]:
    """:func:`open_row_writer` of checked arguments: a :class:`RowWriter` into the sink of
    :func:`_open_sink` at the output's temporary place, finished after the block and put in
    place, or aborted where the block raises."""
    with atomic_output(
        path, overwrite=overwrite, replaceable=written_by_convcli, folder=fmt == "zarr"
    ) as output:
        with ExitStack() as stack:
            sink = _open_sink(
                stack,
                output.temporary,
                fmt,
                shape,
                dtype,
                store_url,
                storage_options,
                carried,
                spill_limit,
            )
            writer = RowWriter(sink, shape, dtype)  # `path` stands for a `store_url` here
            try:
                yield writer
                writer._finish()
            except BaseException:
                if sink is not None:
                    sink.abort()
                raise
    writer.written = output.written


def _open_sink(
    stack: ExitStack,
    temporary: Path | None,
    fmt: str,
    shape: tuple[int, int, int],
    dtype: np.dtype,
    store_url: str | None,
    storage_options: dict | None,
    carried: Carried = NOTHING,
    spill_limit: int | None = None,
):
    """The sink writing an output at `temporary` (or `store_url`); None where it is kept."""
    if temporary is None:
        return None
    if store_url is not None:
        location, claim = store_location(stack, temporary, store_url, storage_options)
        return StoreSink(
            location, shape, dtype, storage_options, claim, carried=carried, spill_limit=spill_limit
        )
    if FORMATS[fmt].by_rows:  # tiled: its rows wait in bands for their row of tiles
        return _sink(fmt)(temporary, shape, dtype, carried=carried, spill_limit=spill_limit)
    return _sink(fmt)(temporary, shape, dtype, carried=carried)


def store_location(
    stack: ExitStack, temporary: Path, store_url: str | None, storage_options: dict | None
) -> tuple[str, str | None]:
    """Where a Zarr output is written, and this run's claim on it (None on this disk).

    `temporary`, or `store_url` on object storage: `temporary` is then made an
    empty folder that stands for the store on this disk, and the store is
    written in place for the life of `stack` (:func:`remote_store`).
    """
    if store_url is None:
        return str(temporary), None
    temporary.mkdir()
    return store_url, stack.enter_context(remote_store(store_url, storage_options))


@contextmanager
def remote_store(url: str, storage_options: dict | None = None) -> Iterator[str]:
    """Write a Zarr store at the object-storage prefix `url` in the block; this run's claim
    on it is yielded (:mod:`convcli.io.store_claims`).

    Objects cannot be renamed: the store is claimed first, then what is there
    already (to be replaced, the checks done) is removed but the claim, the
    claim checked before and after: of two runs that start together, the one
    whose claim was overwritten stops (:class:`convcli.io.store_claims.StoreTaken`,
    one line), before removing anything where the other's claim came first.
    The group's attributes, with convcli's marker, are written last, and the
    claim then removed. A block that raises removes the store while the claim
    is its own: never what another run has claimed since.
    """
    claim = store_claims.claim(url, storage_options)
    store_claims.check(url, claim, storage_options)  # taken already: nothing removed
    remove_tree(url, storage_options, keep=store_claims.CLAIM_NAME)
    store_claims.check(url, claim, storage_options)
    try:
        yield claim
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):  # its writes still run in zarr's loop
            cancel_zarr_requests(CANCEL_SECONDS)
        _remove_own_store(url, claim, storage_options)
        raise


CLEANUP_SECONDS = 3.0
"""How long each request removing a failed or stopped store may take (reading its claim,
removing its objects); past it, the store stays claimed and the next run writes it again."""


def _remove_own_store(url: str, claim: str, storage_options: dict | None) -> None:
    """Remove the store `url` while `claim` is still its own, each request bounded by
    :data:`CLEANUP_SECONDS`. A request that fails leaves the store claimed and
    unfinished (never taken for an output); the error that ended the write goes
    on. A second Ctrl-C stops at once."""
    try:
        if store_claims.holder(url, storage_options, timeout=CLEANUP_SECONDS) == claim:
            remove_tree(url, storage_options, timeout=CLEANUP_SECONDS)
    except Exception:  # noqa: BLE001 - the store stays claimed: written again next time
        pass


def save_rows(
    path: str | os.PathLike, image: np.ndarray, *, fmt: str, overwrite: bool = False, **store
) -> bool:
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
    with open_row_writer(
        path,
        fmt=fmt,
        height=height,
        width=width,
        channels=channels,
        dtype=values.dtype,
        overwrite=overwrite,
        **store,
    ) as writer:
        for top in range(0, height, TILE):
            writer.write(values[top : top + TILE])  # dropped where the file is kept
    return writer.written


class _NpySink:
    """An ``.npy`` file: the header ``np.save`` writes, then the rows' bytes."""

    def __init__(
        self,
        temporary: Path,
        shape: tuple[int, int, int],
        dtype: np.dtype,
        *,
        carried: Carried = NOTHING,
    ):
        del carried  # raw values hold no profile, resolution or georeference
        self._fh = open(temporary, "wb")  # noqa: SIM115 (closed by close or abort)
        header = {
            "descr": np.lib.format.dtype_to_descr(dtype),
            "fortran_order": False,
            "shape": shape,
        }
        np.lib.format.write_array_header_1_0(self._fh, header)

    def write(self, rows: np.ndarray) -> None:
        self._fh.write(memoryview(rows).cast("B"))

    def close(self) -> None:
        self._fh.close()

    def abort(self) -> None:
        self._fh.close()


class _PngSink:
    """A PNG stream through :class:`convcli.io.png.PngRowEncoder`, marked as convcli's."""

    def __init__(
        self,
        temporary: Path,
        shape: tuple[int, int, int],
        dtype: np.dtype,
        *,
        carried: Carried = NOTHING,
    ):
        self._fh = open(temporary, "wb")  # noqa: SIM115 (closed by close or abort)
        try:
            self._encoder = PngRowEncoder(
                self._fh,
                shape=shape,
                dtype=dtype,
                text={"Software": MARKER},
                chunks=carried.png_chunks(size=(shape[1], shape[0])),
            )
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


_SINKS = {"npy": _NpySink, "png": _PngSink, "tiff": None, "zarr": StoreSink}
"""The sink of each format; the TIFF's (tifffile's) is loaded on first use: :func:`_sink`."""


def _sink(fmt: str):
    """The class that writes `fmt` (:data:`_SINKS`)."""
    return _SINKS[fmt] or load("tiff writer").TiffSink


def space_needed(
    fmt: str, *, height: int, width: int, channels: int, dtype, spill_limit: int | None = None
) -> int:
    """Bytes an output may take on its disk while it is written, at most (temporaries included).

    ``npy``: its exact size. ``png`` and ``tiff``: the samples' bytes with
    deflate's worst case (incompressible data grows by well under 1%), for a
    TIFF plus its reduced levels (a third more), twice over while they are
    also in temporary files. ``zarr``: the samples' and the reduced levels'
    bytes with Blosc's worst case (16 bytes a chunk) and a file's block each.
    Both: and, where a band of :data:`TILE` rows is kept on disk while the rows
    wait for their row of tiles (:class:`convcli.io.pyramid.RowBands`), two bands a level
    (none under a `spill_limit` that holds them, as :func:`open_row_writer` takes it).
    """
    dtype = _checked_layout(fmt, height, width, channels, dtype)
    samples = height * width * channels * dtype.itemsize
    if fmt == "npy":
        return samples + 128  # np.save's header for an (H, W, C) float32 array
    bands = 0
    if spills(TILE, width, channels, dtype, spill_limit):
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
    return (
        f"not enough free space for {os.fspath(path)}: it needs about "
        f"{_in_units(needed)}, {_in_units(free)} free"
    )
