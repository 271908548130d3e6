"""One TIFF read by regions: row bands decoded from only the tiles or strips that cover them.

An image larger than memory (a BigTIFF of 1 to 100 gigapixels) cannot go
through :func:`convcli.io.images.read_image`, which decodes the whole frame.
:func:`open_regions` opens such a file with tifffile, and
:meth:`RegionSource.read_rows` returns any band of rows, all columns, with
exactly the values ``read_image(path).pixels[r0:r1]`` would have: the same
channels, scale (``white``), output depth and notes. Only the segments (tiles
or strips) that hold the band are read and decoded, so a band costs about the
band itself plus one row of segments, whatever the size of the image.

What is read by regions
-----------------------
The first page (the frame Pillow reads; in an OME-TIFF the first plane of the first series
at full resolution), tiled or in strips, its samples contiguous or planar (configuration
"separate": each sample in segments of its own), TIFF or BigTIFF, either byte order,
uncompressed or compressed with deflate (both codes), LZW, PackBits, LZMA, Zstandard or
JPEG, with or without a predictor, as far as tifffile decodes them here (LZW, JPEG and the
floating-point predictor need imagecodecs), and these layouts (8-bit JPEG: grey, RGB, and
YCbCr read as RGB):

=========================================  ===========  ==============  =====
samples (PhotometricInterpretation)        channels     white           depth
=========================================  ===========  ==============  =====
1-bit, 8-bit grey (min-is-black or white)  L            255             8
8-bit grey + unassociated alpha            L A          255             8
16-bit grey + alpha of either kind         L A          65535           16
signed 8-bit grey                          L            255             8
16-bit unsigned grey (either)              L            65535           16
9- to 15-bit unsigned grey                 L            2**bits - 1     16
signed 16-bit, 32-bit integer grey         L            max(65535, m)   16
16-, 32-, 64-bit float grey                L            max(1, m)       16
8-bit RGB, RGB + unassociated alpha        R G B (A)    255             8
16-bit RGB, RGBA                           R G B (A)    65535 [1]       16
16-, 32-, 64-bit float RGB, RGBA [2]       R G B (A)    max(1, m)       16
=========================================  ===========  ==============  =====

An extra sample marked "unspecified" is dropped, and said. [1] with imagecodecs installed
and allowed (the ``deep`` extra, as ``read_image``); otherwise the high byte, white 255,
depth 8, with ``read_image``'s note. [2] the alpha unassociated. Where the white depends on
``m``, ``m`` is the largest finite value of the whole image (alpha included): the first use
of :attr:`RegionSource.white` reads the image once, band by band. Float samples are read as
float32 (64-bit values rounded, 16-bit ones exact), as tifffile's values converted.

Everything else returns None, and the caller reads the file whole (a page turned by its
Orientation with these layouts, upright: :mod:`convcli.io.tiff_pages`; the others with
Pillow): files that are not TIFF (PNG, JPEG, ...), palette, CMYK, YCbCr other than JPEG's,
CIELab and other colour spaces, old-style JPEG and other lossy compression, associated
(premultiplied) alpha other than 16-bit grey's (whose colours are divided by it, as
``read_image`` does 16-bit RGBA's), fill order 2, signed or 32-bit integers other than grey,
floats other than grey, RGB and RGBA, volumes (SGI ImageDepth), a compression or predictor
tifffile cannot decode here, and compressed segments of more than :data:`MAX_SEGMENT_PIXELS`
pixels (one strip holding the whole image would be a whole decode).
"""

from __future__ import annotations

import logging
import os
import stat
import struct
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

import numpy as np
import tifffile

from ..choices import DEFAULT_MAX_PIXELS
from ..errors import ImageError
from .bands import check_rows, float_white, unassociated
from .carried import Carried
from .decoders import deep_codecs_missing, narrow_note
from .formats import is_store_name, starts_as_tiff
from .spill import SegmentRows, SpillError
from .tiff_carried import from_tiff_page, orientation
from .tile_inflate import deflate_decoder, samples_per_segment
from .zarr_regions import StoreRegions, open_store_regions

MAX_SEGMENT_PIXELS = 1 << 24
"""The largest compressed tile or strip read by regions (pixels); larger ones are read whole."""

# none, LZW, deflate, PackBits, deflate (old code), LZMA, Zstandard; and JPEG
_LOSSLESS = {1, 5, 8, 32773, 32946, 34925, 50000}
_JPEG = 7
_MINISWHITE, _MINISBLACK, _RGB, _YCBCR = 0, 1, 2, 6
_FLOAT = 3  # SampleFormat IEEEFP
_SEPARATE = 2  # PlanarConfiguration: each sample in segments of its own
_UNSPECIFIED, _ASSOCIATED, _UNASSOCIATED = 0, 1, 2  # ExtraSamples values


@dataclass(frozen=True)
class _Layout:
    """How a page's samples become ``read_image``'s values."""

    channels: tuple[str, ...]
    white: float | None  # None: the larger of least_white and the largest finite value
    depth: int
    convert: str = "same"  # or "inverted" (white - value), "high byte" (value >> 8)
    note: str | None = None
    least_white: float = 1.0
    signed: bool = False  # integers below 0: values, as float samples are, never levels
    associated: bool = False  # premultiplied alpha: the colours are divided by it

    @property
    def values(self) -> bool:
        """Whether the samples are read as values (floats, signed integers), not as levels."""
        return self.white is None or self.signed


# What a file's samples lose to convcli's float32, said for each file that stores them.
INT32_NOTE = "32-bit integer samples computed in float32: exact to +-16,777,216, rounded beyond"
FLOAT64_NOTE = "float64 samples computed in float32 (24 bits: about 7 significant digits)"
UNSPECIFIED_NOTE = "its extra sample of no stated meaning not read (TIFF ExtraSamples 0: not alpha)"

# Grey samples wider than 16 bits, and signed ones: (bits, SampleFormat) -> layout. Their values
# are kept as they are; the white follows Pillow's modes "I" (integers, at least 65535) and "F"
# (floats, at least 1). Signed 8-bit samples keep their sign (Pillow reads -57 as 199).
_WIDE_GREY = {
    (8, 2): _Layout(("L",), 255.0, 8, signed=True),
    (16, 2): _Layout(("L",), None, 16, least_white=65535.0),
    (32, 1): _Layout(("L",), None, 16, note=INT32_NOTE, least_white=65535.0),
    (32, 2): _Layout(("L",), None, 16, note=INT32_NOTE, least_white=65535.0),
    (16, 3): _Layout(("L",), None, 16),
    (32, 3): _Layout(("L",), None, 16),
    (64, 3): _Layout(("L",), None, 16, note=FLOAT64_NOTE),
}


def _uncompressed_strips(page) -> bool:
    """Whether `page`'s rows can be read straight from the file (uncompressed strips)."""
    return page.compression == 1 and not page.is_tiled and page.bitspersample in (8, 16, 32, 64)


def _colour_layout(page, colour: tuple[str, ...]) -> _Layout | None:
    """The layout of an 8- or 16-bit grey or RGB page with its extra sample, or None."""
    extras = tuple(page.extrasamples)
    if page.samplesperpixel != len(colour) + len(extras) or len(extras) > 1:
        return None
    deep_grey = colour == ("L",) and page.bitspersample == 16  # either alpha: tifffile's alone
    alpha = ("A",) if extras == (_UNASSOCIATED,) or (deep_grey and extras == (_ASSOCIATED,)) else ()
    if extras and not alpha and extras != (_UNSPECIFIED,):
        return None
    unread = UNSPECIFIED_NOTE if extras and not alpha else None
    if page.bitspersample == 8:
        return _Layout(colour + alpha, 255.0, 8, note=unread)
    why = None if deep_grey else deep_codecs_missing()  # as read_image reads it
    if why is None:
        associated = extras == (_ASSOCIATED,)
        return _Layout(colour + alpha, 65535.0, 16, note=unread, associated=associated)
    narrowed = "; ".join(filter(None, (narrow_note(colour + alpha, why), unread)))
    return _Layout(colour + alpha, 255.0, 8, "high byte", narrowed)


def _float_colour_layout(page) -> _Layout | None:
    """The layout of a float RGB page, with or without unassociated alpha, or None.

    Its white comes from its values, as a float grey page's does.
    """
    extras = tuple(page.extrasamples)
    note = FLOAT64_NOTE if page.bitspersample == 64 else None
    if page.samplesperpixel == 3 and not extras:
        return _Layout(("R", "G", "B"), None, 16, note=note)
    if page.samplesperpixel == 4 and extras == (_UNASSOCIATED,):
        return _Layout(("R", "G", "B", "A"), None, 16, note=note)
    return None


def _layout(page, lossy: bool = False) -> _Layout | None:
    """What ``read_image`` makes of `page`'s samples, or None (any compression: `lossy`)."""
    if page.fillorder != 1 or page.imagedepth != 1:
        return None
    if page.compression == _JPEG:  # its YCbCr and subsampling are undone by the codec
        return _jpeg_layout(page)
    if page.is_subsampled or (page.compression not in _LOSSLESS and not lossy):
        return None
    bits, kind, photometric = page.bitspersample, page.sampleformat, page.photometric
    samples = page.samplesperpixel
    if bits == 1 and samples == 1 and photometric in (_MINISBLACK, _MINISWHITE):
        return _Layout(("L",), 255.0, 8, "same" if photometric else "inverted")
    if bits in (8, 16) and kind == 1 and samples == 1 and photometric == _MINISWHITE:
        return _Layout(("L",), 2.0**bits - 1, bits, "inverted")
    if 8 < bits < 16 and kind == 1 and samples == 1 and photometric == _MINISBLACK:
        return _Layout(("L",), 2.0**bits - 1, 16)  # 12-bit: its values, 4095 white
    if samples == 1 and photometric == _MINISBLACK and (bits, kind) in _WIDE_GREY:
        return _WIDE_GREY[bits, kind]
    if kind == _FLOAT and bits in (16, 32, 64) and photometric == _RGB:
        return _float_colour_layout(page)
    if bits not in (8, 16) or kind != 1:
        return None
    if photometric == _MINISBLACK:
        return _colour_layout(page, ("L",))
    if photometric == _RGB:
        return _colour_layout(page, ("R", "G", "B"))
    return None


def _jpeg_layout(page) -> _Layout | None:
    """The layout of an 8-bit JPEG-compressed grey, RGB or YCbCr page, or None."""
    if page.bitspersample != 8 or page.sampleformat != 1:
        return None
    if page.photometric == _YCBCR:  # decoded to RGB by the codec, samples contiguous only
        plain = page.samplesperpixel == 3 and page.planarconfig != _SEPARATE
        return _Layout(("R", "G", "B"), 255.0, 8) if plain else None
    if page.photometric in (_MINISBLACK, _RGB):
        return _colour_layout(page, ("L",) if page.photometric == _MINISBLACK else ("R", "G", "B"))
    return None


def _with_nodata_read(carried: Carried, layout: _Layout, dtype: np.dtype) -> Carried:
    """`carried` with GDAL's nodata value where its pixels are read as missing: float
    samples and signed integers (values), and integers read as stored (not inverted, 1-bit
    or narrowed) where the value is one of their levels (a whole number from 0 to the
    white), as outputs keep it."""
    nodata = carried.nodata
    if nodata is None or layout.values:
        return carried
    stored = layout.convert == "same" and dtype.kind in "ui" and nodata.is_integer()
    return carried if stored and 0 <= nodata <= layout.white else carried.without_nodata()


def _codecs_here(page) -> bool:
    """Whether tifffile decodes `page`'s compression, predictor and sample size here."""
    if page.bitspersample not in (1, 8, 16, 32, 64) and deep_codecs_missing(allowed=True):
        return False  # 12-bit integers, unpacked by imagecodecs
    try:
        if page.compression != 1:
            tifffile.TIFF.DECOMPRESSORS[page.compression]
        if page.predictor != 1:
            tifffile.TIFF.UNPREDICTORS[page.predictor]
    except KeyError:  # unknown, or needs imagecodecs
        return False
    return True


def _decodable(page) -> bool:
    """Whether tifffile decodes `page`'s compression and predictor here, in small segments."""
    if not _codecs_here(page):
        return False
    if _uncompressed_strips(page):
        return True  # rows are read straight from the file
    segment = page.chunks[-3:-1] if samples_per_segment(page) > 1 else page.chunks[-2:]
    return int(np.prod(segment)) <= MAX_SEGMENT_PIXELS


def open_regions(
    path: str | os.PathLike,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    storage_options: dict | None = None,
) -> RegionSource | StoreRegions | None:
    """Open a TIFF (or a Zarr store) for reading by row bands, or None where it must be read whole.

    Parameters
    ----------
    path : str or path-like
        The file.
    max_pixels : int
        Accepted as :func:`convcli.io.images.open_image` accepts it, and not
        applied here: the run checks the source's size against it
        (:func:`convcli.io.images.check_pixels`) before reading any band, as
        ``open_image`` does before a whole decode.
    storage_options : dict, optional
        fsspec options for a Zarr store named by a URL.

    Returns
    -------
    RegionSource or None
        None for a file that is not a TIFF, cannot be parsed by tifffile (the
        whole-image path then reports why), or has a layout listed in the
        module docstring as read whole. Close the source after use (it is a
        context manager). A path named ``*.zarr`` gives a
        :class:`convcli.io.zarr_regions.StoreRegions`, never None.

    Raises
    ------
    OSError
        The file cannot be opened (missing, no permission).
    ImageError, MissingExtra
        A Zarr store that is not an image convcli reads, or no ``zarr`` package.
    """
    del max_pixels  # see above: the run checks it against the source's size
    if is_store_name(path):
        return open_store_regions(path, storage_options=storage_options)
    shown = os.fspath(path)
    if not stat.S_ISREG(os.stat(shown).st_mode) or not starts_as_tiff(shown):
        return None
    with _tifffile_quiet():  # a file it cannot parse is the whole-image path's to report
        opened = _open_first_page(shown)
    if opened is None:
        return None
    tif, page, layout, frames = opened
    _check_segments(tif, page)
    notes = ([f"used the first of {frames} frames"] if frames > 1 else []) + (
        [layout.note] if layout.note else []
    )
    return RegionSource(tif, page, layout, tuple(notes))


def _check_segments(tif, page, *, close: bool = True) -> None:
    """An ImageError (`tif` closed, with `close`) where `page`'s tiles or strips are declared
    0 rows or columns, or it lists fewer than its size needs."""
    sides = (page.tilelength, page.tilewidth) if page.is_tiled else (page.rowsperstrip,)
    problem = None
    if min(sides) < 1:
        what = "tiles of" if page.is_tiled else "strips of"
        shown = " x ".join(str(side) for side in sides)
        problem = f"its {what} {shown} {'pixels' if page.is_tiled else 'rows'} hold nothing"
    else:
        needed = int(np.prod(page.chunked))
        listed = min(len(page.dataoffsets), len(page.databytecounts))
        if listed < needed:
            problem = (
                f"it lists {listed} tiles or strips where its {page.imagewidth} x "
                f"{page.imagelength} pixels need {needed}"
            )
    if problem is not None:
        if close:
            tif.close()
        raise ImageError(f"cannot decode the image: {problem}")


def _open_first_page(shown: str):
    """The open TiffFile, its first page, the page's layout and the page count; or None."""
    try:
        tif = tifffile.TiffFile(shown)
    except (tifffile.TiffFileError, ValueError, struct.error, OSError, IndexError, KeyError):
        return None  # IndexError: a SamplesPerPixel of 0, say
    try:
        page = tif.pages[0]
        layout = None if orientation(page) != 1 else _layout(page)  # turned: read whole
        if layout is None or not _decodable(page) or 0 in page.shape:
            tif.close()
            return None
        return tif, page, layout, len(tif.pages)
    except Exception:  # a corrupt header: the whole-image path reports it
        tif.close()
        return None


class _QuietThreads(logging.Filter):
    """Drops tifffile's log records in the threads probing a file (:func:`_tifffile_quiet`)."""

    def __init__(self):
        super().__init__()
        self.quiet = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(self.quiet, "on", False)


_QUIET = _QuietThreads()
logging.getLogger("tifffile").addFilter(_QUIET)


@contextmanager
def _tifffile_quiet() -> Iterator[None]:
    """tifffile's warnings about a file's tags unsaid in this thread inside the block.

    Reading a corrupt TIFF, tifffile logs what it could not parse; whether the
    file can be read by regions is only a question here, and the whole-image
    path reports a corrupt file in one line of its own.
    """
    _QUIET.quiet.on = True
    try:
        yield
    finally:
        _QUIET.quiet.on = False


class RegionSource:
    """An open TIFF whose rows are read band by band (made by :func:`open_regions`).

    Attributes
    ----------
    height, width : int
        The image's size in pixels.
    channels : tuple of str
        As :attr:`convcli.io.images.Picture.channels`.
    depth : int
        As :attr:`convcli.io.images.Picture.depth`.
    notes : tuple of str
        As :attr:`convcli.io.images.Picture.notes`.
    dtype : numpy.dtype
        The samples as stored (bool for 1-bit files).
    carried : Carried
        Its colour profile and resolution (:mod:`convcli.io.carried`).
    floats : bool
        It holds float samples.
    nodata : float or None
        GDAL's nodata value where its pixels are read as missing (NaN).

    Notes
    -----
    The last two rows of segments decoded are kept in ``kept_rows``
    (:class:`convcli.io.spill.SegmentRows`: a wide row of tiles on disk, unless its
    ``spill_limit`` holds it in memory), so that bands that overlap (a halo) decode
    each segment once when read top to bottom. One source serves one thread at a time.
    """

    def __init__(self, tif, page, layout: _Layout, notes: tuple[str, ...]):
        self._tif, self._page, self._layout = tif, page, layout
        self.height, self.width = int(page.imagelength), int(page.imagewidth)
        self.channels = layout.channels
        self.depth = layout.depth
        self.notes = notes
        self.frame_count = len(tif.pages)  # the strips read the first
        self.dtype = np.dtype(page.dtype)
        self.floats = layout.values  # float samples, or signed integers
        self.carried = _with_nodata_read(from_tiff_page(page), layout, self.dtype)
        self.nodata = self.carried.nodata
        self._white = layout.white
        self._segment_rows = int(page.tilelength if page.is_tiled else page.rowsperstrip)
        self._segment_rows = min(self._segment_rows or self.height, self.height)
        self.kept_rows = SegmentRows()
        self._lock = threading.Lock()
        self._decode = deflate_decoder(page) or page.decode

    def stored_bytes(self) -> tuple[int, int]:
        """The bytes of samples the page declares, and those of image data it stores
        (its strips' or tiles'): :func:`convcli.io.limits.check_stored`."""
        return int(self._page.nbytes), int(sum(self._page.databytecounts))

    @property
    def white(self) -> float:
        """The value of full intensity, as :attr:`convcli.io.images.Picture.white`.

        For 32-bit float files, the larger of 1 and the largest finite value:
        found on first use by reading the whole image once, band by band.
        """
        if self._white is None:
            self._white = float_white(self, self._layout.least_white)
        return self._white

    @property
    def reads_as_stored(self) -> bool:
        """Whether the samples are 8-bit values read as stored (``read_image`` keeps uint8)."""
        return self.dtype == np.uint8 and self._layout.convert == "same" and self.nodata is None

    def read_samples(self, r0: int, r1: int) -> np.ndarray:
        """Rows `r0` to `r1` as ``read_image(path).samples[r0:r1]``: uint8 where
        :attr:`reads_as_stored`, else float32 (:meth:`read_rows`)."""
        return self.read_rows(r0, r1, np.uint8 if self.reads_as_stored else np.float32)

    def read_rows(self, r0: int, r1: int, dtype=np.float32) -> np.ndarray:
        """Rows `r0` to `r1` (excluded), all columns, as ``read_image(path).pixels[r0:r1]``.

        Parameters
        ----------
        r0, r1 : int
            ``0 <= r0 <= r1 <= height``.
        dtype : float32 or uint8
            uint8 only where :attr:`reads_as_stored` (:meth:`read_samples`).

        Returns
        -------
        (r1 - r0, width, C) ndarray of `dtype`

        Raises
        ------
        ImageError
            A truncated or corrupt segment.
        """
        check_rows(r0, r1, self.height)
        out = np.empty((r1 - r0, self.width, len(self.channels)), dtype)
        self._read_into(r0, out)
        return out

    def _read_into(self, r0: int, out: np.ndarray) -> None:
        """Rows `r0` to `r0` + ``len(out)`` converted into `out` (float32, or the stored uint8)."""
        r1 = r0 + len(out)
        with self._lock, _decode_errors():
            if self._reads_rows_directly():
                self._convert(self._file_rows(r0, r1), out)
                return
            step = self._segment_rows
            for k in range(r0 // step, -(-r1 // step)):
                top = k * step
                lo, hi = max(r0, top), min(r1, top + step)
                self._convert(self._segments(k, lo - top, hi - top), out[lo - r0 : hi - r0])

    def _convert(self, samples: np.ndarray, out: np.ndarray) -> None:
        """Write stored `samples` (rows, width, samples) into `out` in ``read_image``'s scale;
        GDAL's missing values (:attr:`nodata`) as NaN, never averaged in (not alpha's: a mask
        of its own)."""
        kept = samples[:, :, : out.shape[2]]  # an unspecified extra sample is dropped
        if self._layout.associated:
            kept = unassociated(kept, 65535)
        convert = self._layout.convert
        if convert == "high byte":
            kept = kept >> 8
        np.copyto(out, kept, casting="same_kind" if out.dtype == kept.dtype else "unsafe")
        if kept.dtype == bool:
            out *= 255.0
        if convert == "inverted":
            np.subtract(self._layout.white, out, out=out)
        if self.nodata is not None:  # alpha aside; integers kept only as stored (exact)
            colour = out[:, :, : len(self.channels) - (self.channels[-1] == "A")]
            colour[colour == self.nodata] = np.nan

    def _reads_rows_directly(self) -> bool:
        return _uncompressed_strips(self._page)

    def _file_rows(self, r0: int, r1: int) -> np.ndarray:
        """Rows of uncompressed strips, read straight from the file: (rows, width, samples)."""
        page, fh = self._page, self._tif.filehandle
        samples, per_strip = page.samplesperpixel, samples_per_segment(page)
        dtype = np.dtype(self._tif.byteorder + self.dtype.char)
        row_bytes = self.width * per_strip * dtype.itemsize
        rows = np.empty((r1 - r0, self.width, samples), dtype)
        step = self._segment_rows
        strips = -(-self.height // step)  # of each plane (one, where samples are contiguous)
        for first in range(0, samples, per_strip):  # the first sample of each plane
            for k in range(r0 // step, -(-r1 // step)):
                top, index = k * step, first * strips + k
                lo, hi = max(r0, top), min(r1, top + step)
                with fh.lock:
                    fh.seek(page.dataoffsets[index] + (lo - top) * row_bytes)
                    data = fh.read((hi - lo) * row_bytes)
                wanted = (hi - lo) * row_bytes
                if len(data) != wanted or page.databytecounts[index] < (hi - top) * row_bytes:
                    raise ImageError(f"cannot decode the image: strip {index} is truncated")
                rows[lo - r0 : hi - r0, :, first : first + per_strip] = np.frombuffer(
                    data, dtype
                ).reshape(hi - lo, self.width, per_strip)
        return rows

    def _segments(self, k: int, lo: int, hi: int) -> np.ndarray:
        """Rows `lo` to `hi` - 1 of segment row `k` (a row of tiles, or one strip), decoded:
        (rows, width, samples) as stored."""
        page = self._page
        top = k * self._segment_rows
        shape = (min(self._segment_rows, self.height - top), self.width, page.samplesperpixel)
        tile = int(page.tilewidth) if page.is_tiled else None
        decode = partial(self._decode_tiles, k)  # (c0, c1, out)
        return self.kept_rows.read(
            k, lo, hi, shape=shape, dtype=page.dtype, tile=tile, decode=decode
        )

    def _decode_tiles(self, k: int, c0: int, c1: int, out: np.ndarray) -> None:
        """Decode the segments of segment row `k` over columns `c0` to `c1` - 1 into `out`
        (every plane's, where each sample has segments of its own)."""
        page = self._page
        tile = int(page.tilewidth) if page.is_tiled else self.width
        across = -(-self.width // tile)
        plane = across * -(-self.height // self._segment_rows)  # segments of one plane
        planes = page.samplesperpixel // samples_per_segment(page)
        indices = [
            p * plane + i
            for p in range(planes)
            for i in range(k * across + c0 // tile, k * across + -(-c1 // tile))
        ]
        offsets = [page.dataoffsets[i] for i in indices]
        counts = [page.databytecounts[i] for i in indices]
        tables = {"jpegtables": page.jpegtables} if page.compression == _JPEG else {}
        for data, index in self._tif.filehandle.read_segments(
            offsets, counts, indices=indices, length=len(indices), sort=True
        ):
            segment, (first, _, _, left, _), _ = self._decode(data, index, **tables)
            if segment is None:
                continue  # a segment the file does not hold: left at 0, as tifffile does
            block = segment[0, : len(out), : c1 - left]
            out[:, left - c0 : left - c0 + block.shape[1], first : first + block.shape[2]] = block

    def close(self) -> None:
        """Close the file (and forget the kept segments)."""
        self.kept_rows.forget()
        self._tif.close()

    def __enter__(self) -> RegionSource:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


@contextmanager
def _decode_errors() -> Iterator[None]:
    """Turn tifffile's and the codecs' errors about bad data into one-line :class:`ImageError`."""
    try:
        yield
    except (ImageError, SpillError, FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except (
        tifffile.TiffFileError,
        ValueError,
        OSError,
        EOFError,
        zlib.error,
        struct.error,
        NotImplementedError,
        RuntimeError,
    ) as exc:
        lines = str(exc).strip().splitlines()
        raise ImageError(
            f"cannot decode the image: {lines[0] if lines else type(exc).__name__}"
        ) from None
