"""Image files out: levels as PNG, JPEG or TIFF, stacks of frames, raw values, the marker.

:func:`save_levels` writes integer levels (made by
:func:`convcli.levels.mapping.to_levels`) as PNG (:mod:`convcli.io.png`), JPEG or TIFF and
:func:`save_npy` writes raw float32 arrays; every file goes through
:func:`convcli.io.safeio.write_atomic`. :func:`frame_writer` writes a file of frames a frame
at a time (an animated PNG, a multi-page TIFF, an (m, H, W, C) ``.npy``), and
:func:`save_frames` a stack of levels at once. :func:`written_by_convcli` says whether a
file carries convcli's :data:`~convcli.io.formats.MARKER` (``--overwrite`` replaces only
those).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from PIL import Image

from .carried import NOTHING, Carried, tiff_options
from .formats import FORMATS, MARKER, bigtiff_needed, load, tiff_page_tags
from .images import _pillow_limit_off
from .nodata import missing_as_nodata
from .ownership import marks_needed
from .png import ApngWriter, write_png
from .safeio import atomic_output, write_atomic

JPEG_QUALITY = 95

_PIL_FORMATS = {name: f.pillow for name, f in FORMATS.items() if f.pillow}


_TIFF_SOFTWARE = 305


def written_by_convcli(path: str | os.PathLike, *, marked: bool | None = None) -> bool:
    """Whether `path` is an image that carries convcli's :data:`MARKER`, or a valid ``.npy``
    convcli named.

    A folder is a Zarr store whose attributes carry ``"convcli"``
    (:func:`convcli.io.zarr_stores.store_marked`).

    Only the header is read, never the pixels. A ``.npy`` has no place for a
    mark: one with a valid header (``numpy.lib.format``) counts as convcli's
    where convcli chose its name (an output in a folder), never where the mark
    is needed, `marked` (by default: a file named with ``-o FILE``,
    :func:`convcli.io.ownership.writing_named`).
    """
    path = os.fspath(path)
    if os.path.isdir(path):  # a Zarr store: its group's attributes say
        return load("zarr stores").store_marked(path)
    if path.lower().endswith(".npy"):
        if marks_needed() if marked is None else marked:
            return False
        try:
            with open(path, "rb") as fh:
                version = np.lib.format.read_magic(fh)
                if version == (1, 0):
                    np.lib.format.read_array_header_1_0(fh)
                else:
                    np.lib.format.read_array_header_2_0(fh)
        except (OSError, ValueError):
            return False
        return True
    _pillow_limit_off()  # a large output is no bomb: only its header is read
    try:
        with Image.open(path) as im:
            if im.format == "TIFF":
                return im.tag_v2.get(_TIFF_SOFTWARE) == MARKER
            if im.format == "JPEG":
                return any(kind == "COM" and data == MARKER.encode() for kind, data in im.applist)
            return im.info.get("Software") == MARKER
    except Exception:  # anything Pillow raises on a file it cannot parse
        return _tiff_marked(path)


def _tiff_marked(path: str) -> bool:
    """Whether `path` is a TIFF Pillow cannot open (16-bit grey + alpha) that carries the marker."""
    try:
        import tifffile

        with tifffile.TiffFile(path) as tif:
            return tif.pages[0].tags.valueof(_TIFF_SOFTWARE) == MARKER
    except Exception:  # not a TIFF, or not one tifffile parses: not ours
        return False


def save_levels(
    path: str | os.PathLike,
    levels: np.ndarray,
    *,
    fmt: str,
    overwrite: bool = False,
    carried: Carried = NOTHING,
) -> bool:
    """Write integer levels as an image file, atomically.

    Parameters
    ----------
    path : str or path-like
        Final file name.
    levels : (H, W) or (H, W, C) uint8 or uint16 ndarray, C in 2, 3, 4
        Grey, grey + alpha, RGB or RGBA, 8- or 16-bit (16-bit grey + alpha: PNG
        only). 16-bit colour TIFF needs imagecodecs (the ``deep`` extra).
    fmt : {"png", "jpg", "tiff"}
        PNG through :func:`convcli.io.png.write_png` (Up-filtered rows, a fast
        deflate at level 1); JPEG at quality
        :data:`JPEG_QUALITY`, or coded as the input JPEG whose tables `carried` keeps
        (8-bit, alpha dropped); TIFF deflated with the
        horizontal predictor (:func:`write_tiff`).
    overwrite : bool
        Replace an existing file, if convcli wrote it (:func:`written_by_convcli`;
        otherwise ``FileExistsError``); without it an existing file is kept.
    carried : Carried
        The colour profile, resolution and EXIF the file keeps (:mod:`convcli.io.carried`;
        a TIFF keeps no EXIF).

    Returns
    -------
    bool
        True if written, False if the file existed and was kept.
    """
    if fmt not in _PIL_FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(_PIL_FORMATS)}; got {fmt!r}")
    arr = np.ascontiguousarray(levels)
    if fmt == "png":

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:
                chunks = carried.png_chunks(size=(arr.shape[1], arr.shape[0]))
                write_png(fh, arr, text={"Software": MARKER}, chunks=chunks)

        return write_atomic(path, write, overwrite=overwrite, replaceable=written_by_convcli)
    if fmt == "tiff":
        return write_atomic(
            path,
            lambda tmp: write_tiff(tmp, arr, carried),
            overwrite=overwrite,
            replaceable=written_by_convcli,
        )
    return _save_jpeg(path, arr, overwrite=overwrite, carried=carried)


def _save_jpeg(
    path: str | os.PathLike, arr: np.ndarray, *, overwrite: bool, carried: Carried
) -> bool:
    """:func:`save_levels` as a JPEG: 8-bit, alpha dropped, at :data:`JPEG_QUALITY` or with
    the tables of the input JPEG that `carried` keeps."""
    if arr.dtype == np.uint16:
        arr = np.rint(arr / 257.0).astype(np.uint8)
    if arr.ndim == 3 and arr.shape[2] in (2, 4):
        arr = np.ascontiguousarray(arr[:, :, :-1])  # JPEG has no alpha
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    im = Image.fromarray(arr)
    options = {"comment": MARKER, **carried.pillow_options(size=im.size)}
    if "qtables" not in options:  # an input's tables are its quality
        options["quality"] = JPEG_QUALITY

    def write(tmp: Path) -> None:
        im.save(tmp, format=_PIL_FORMATS["jpg"], **options)

    return write_atomic(path, write, overwrite=overwrite, replaceable=written_by_convcli)


def write_tiff(file, image: np.ndarray, carried: Carried = NOTHING) -> None:
    """Write `image` as one TIFF page to `file` (a path or a tifffile.TiffWriter), deflated.

    Levels or float32 values (grey, grey + alpha, RGB, RGBA; levels uint8 or
    uint16), with the tags of every TIFF convcli writes
    (:func:`convcli.io.formats.tiff_page_tags`) and the profile and resolution `carried`.
    """
    import tifffile  # only where a TIFF is written

    channels = image.shape[2] if image.ndim == 3 else 1
    data = image[:, :, 0] if image.ndim == 3 and channels == 1 else image
    carried = carried.for_samples(image.dtype)
    size = (image.shape[1], image.shape[0])
    options = {**tiff_page_tags(channels, image.dtype), **tiff_options(carried, size)}
    if carried.nodata is not None and data.dtype.kind == "f":  # missing values (NaN) as nodata
        data = missing_as_nodata(data, carried.nodata)
    if isinstance(file, tifffile.TiffWriter):
        file.write(data, **options)
    else:
        big = _strips_need_bigtiff(data.nbytes, 1, carried)
        tifffile.imwrite(file, data, bigtiff=big, **carried.tiff_writer_options(), **options)


def _strips_need_bigtiff(page_bytes: int, pages: int, carried: Carried) -> bool:
    """Whether `pages` pages of `page_bytes` of samples in strips, each page carrying what
    `carried` holds, might pass 4 GiB (:func:`~convcli.io.formats.bigtiff_needed`): a strip
    counted for every 8 KB, more than tifffile makes (about 256 KB each)."""
    strips = pages * -(-page_bytes // 8192)
    return bigtiff_needed(pages * page_bytes, strips, pages, carried.metadata_bytes())


def save_frames(
    path: str | os.PathLike,
    levels: np.ndarray,
    *,
    fmt: str,
    durations=None,
    loop: int | None = 0,
    overwrite: bool = False,
) -> bool:
    """Write a stack of integer levels as one animated PNG or multi-page TIFF, atomically.

    Parameters
    ----------
    path : str or path-like
        Final file name.
    levels : (m, H, W) or (m, H, W, C) uint8 or uint16 ndarray
        One frame per entry of the first axis, as :func:`save_levels` takes one.
    fmt : {"png", "tiff"}
        See :func:`frame_writer`.
    durations : sequence of (int or None), optional
        Each frame's time on screen (ms) in an animated PNG.
    loop : int or None
        How many times an animated PNG plays (0 or None: for ever).
    overwrite : bool
        As for :func:`save_levels`.

    Returns
    -------
    bool
        True if written, False if the file existed and was kept.
    """
    stack = np.asarray(levels)
    durations = list(durations) if durations is not None else [None] * len(stack)
    with frame_writer(path, fmt=fmt, count=len(stack), loop=loop, overwrite=overwrite) as writer:
        if writer is not None:
            for frame, duration in zip(stack, durations, strict=True):
                writer.add(frame, duration)
    return writer is not None


@contextmanager
def frame_writer(
    path: str | os.PathLike,
    *,
    fmt: str,
    count: int,
    loop: int | None = 0,
    overwrite: bool = False,
    carried: Carried = NOTHING,
) -> Iterator[FrameWriter | None]:
    """A file of `count` frames written a frame at a time; it appears whole or not at all.

    `fmt` is ``png`` (an animated PNG: :class:`convcli.io.png.ApngWriter`, with
    `loop`), ``tiff`` (one deflated page per frame of levels, or of
    float32 values) or ``npy`` (float32 values,
    ``(count, H, W, C)``, as :func:`numpy.save` writes them). Yields a
    :class:`FrameWriter`, or None where the file exists and is kept (see
    :func:`save_levels` for `overwrite`). The file gets its name when the
    block ends with every frame added; a block that raises leaves nothing. `carried`: as
    for :func:`save_levels`.
    """
    with atomic_output(path, overwrite=overwrite, replaceable=written_by_convcli) as output:
        if output.temporary is None:
            yield None
            return
        with open(output.temporary, "w+b") as fh:
            writer = FrameWriter(fh, fmt=fmt, count=count, loop=loop, carried=carried)
            yield writer
            writer.close()


class FrameWriter:
    """The frames of one file in :func:`frame_writer`'s format, written to `fh` as they come."""

    def __init__(
        self, fh, *, fmt: str, count: int, loop: int | None = 0, carried: Carried = NOTHING
    ):
        if fmt not in ("png", "tiff", "npy"):
            raise ValueError(f"fmt must be png, tiff or npy for frames; got {fmt!r}")
        self._fh, self._fmt, self._count, self._loop = fh, fmt, count, loop
        self._carried = carried
        self._added, self._writer = 0, None

    def add(self, frame: np.ndarray, duration=None, carried: Carried | None = None) -> None:
        """Write the next frame: levels (H, W[, C]), or float32 values (``npy``, ``F`` TIFF).

        `duration` (ms, None: 100) is that of an animated PNG's frame; `carried`, what a
        TIFF's page carries where it is not the file's (a PNG's is the file's).
        """
        if self._added == self._count:
            raise ValueError(f"more than the {self._count} frames announced")
        if self._fmt == "png":
            self._png(np.ascontiguousarray(frame), duration)
        elif self._fmt == "npy":
            self._npy(np.asarray(frame, np.float32))
        else:
            self._tiff(np.ascontiguousarray(frame), self._carried if carried is None else carried)
        self._added += 1

    def _png(self, frame: np.ndarray, duration) -> None:
        if self._writer is None:
            shape = frame.shape if frame.ndim == 3 else frame.shape + (1,)
            self._writer = ApngWriter(
                self._fh,
                shape=shape,
                dtype=frame.dtype,
                count=self._count,
                loop=self._loop,
                text={"Software": MARKER},
                chunks=self._carried.png_chunks(size=(shape[1], shape[0])),
            )
        self._writer.add(frame, duration)

    def _npy(self, frame: np.ndarray) -> None:
        if self._writer is None:  # the header of the whole (count, ...) array, as np.save's
            header = {
                "descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                "fortran_order": False,
                "shape": (self._count,) + frame.shape,
            }
            np.lib.format.write_array_header_1_0(self._fh, header)
            self._writer = frame.shape
        if frame.shape != self._writer:
            raise ValueError(f"a frame must be {self._writer}; got {frame.shape}")
        self._fh.write(np.ascontiguousarray(frame).tobytes())

    def _tiff(self, frame: np.ndarray, carried: Carried) -> None:
        import tifffile  # only where a TIFF is written

        if self._writer is None:  # a BigTIFF where all the frames might pass 4 GiB
            big = _strips_need_bigtiff(frame.nbytes, self._count, self._carried)
            options = self._carried.tiff_writer_options()
            self._writer = tifffile.TiffWriter(self._fh, bigtiff=big, **options)
        write_tiff(self._writer, frame, carried)

    def close(self) -> None:
        """Finish the file; ValueError if frames are missing."""
        if self._added != self._count:
            raise ValueError(f"{self._added} frames written of {self._count}")
        if self._fmt in ("png", "tiff"):
            self._writer.close()


def save_npy(path: str | os.PathLike, array: np.ndarray, *, overwrite: bool = False) -> bool:
    """Write `array` as float32 ``.npy``, atomically (see :func:`save_levels`).

    With `overwrite`, an existing file is replaced only if it is a valid ``.npy``
    (see :func:`written_by_convcli`).
    """
    data = np.asarray(array, dtype=np.float32)

    def write(tmp: Path) -> None:
        # An open file, so that np.save does not append ".npy" to the temporary name.
        with open(tmp, "wb") as fh:
            np.save(fh, data, allow_pickle=False)

    return write_atomic(path, write, overwrite=overwrite, replaceable=written_by_convcli)
