"""A TIFF's pages read whole by the reader of its strips (:class:`TiffPages`).

The one reader of TIFF values: a whole read, a frame and a band of rows
decode a page by the same code (:class:`convcli.io.regions.RegionSource`).
"""

from __future__ import annotations

import functools
import struct
from dataclasses import replace

import numpy as np
import tifffile

from ..errors import ImageError
from .carried import TURNS
from .decoders import exif_upright
from .physical import ome_unkept
from .regions import (
    _JPEG,
    _LOSSLESS,
    _SEPARATE,
    RegionSource,
    _check_segments,
    _codecs_here,
    _decodable,
    _decode_errors,
    _Layout,
    _layout,
    _tifffile_quiet,
    _with_nodata_read,
)
from .tiff_carried import from_tiff_page, orientation, turned_note


class TiffPages:
    """A TIFF's pages read whole by the reader of its strips: the one reader of TIFF values.

    Made by :func:`open_tiff_pages`. Each page whose layout the strips read
    (the module docstring) is decoded by the same code as a band of rows of
    :class:`RegionSource`, so that a whole read, a frame and a strip give the
    same values, and a damaged file fails the same way. Pages of another
    layout (JPEG, palette, CMYK, ...) are left to Pillow: :meth:`read_page`
    returns None for them.

    Attributes
    ----------
    channels : tuple of str
        The first page's channels.
    size : (int, int)
        The first page's (width, height).
    frame_count : int
        The number of pages.
    sample_bytes : int
        Bytes of one of the first page's samples as stored.
    carried : Carried
        The first page's colour profile and resolution (:mod:`convcli.io.carried`).
    """

    def __init__(self, tif, layout: _Layout):
        self._tif = tif
        page = tif.pages[0]
        self.channels = layout.channels
        self.sample_bytes = max(1, np.dtype(page.dtype).itemsize) if page.dtype else 4
        self.carried = _with_nodata_read(from_tiff_page(page), layout, np.dtype(page.dtype))
        self.size = _upright_size(page)
        self.frame_count = len(tif.pages)
        self._last = (0, page)

    def page_size(self, k: int) -> tuple[int, int]:
        """(width, height) of page `k` upright, from its header."""
        return _upright_size(self._page(k))

    def page_bytes(self, k: int) -> tuple[int, int]:
        """Page `k`'s bytes of samples as its header declares them, and the bytes of image
        data it stores (its strips' or tiles' byte counts), for
        :func:`convcli.io.limits.check_stored`."""
        page = self._page(k)
        return int(page.nbytes), int(sum(page.databytecounts))

    def _page(self, k: int):
        """Page `k`, parsed once for the calls about it in a row (its size, then its values)."""
        if self._last[0] != k:
            with _tifffile_quiet(), _decode_errors():
                self._last = (k, self._tif.pages[k])
        return self._last[1]

    @functools.cached_property
    def _ome_unkept(self) -> tuple[str, ...]:
        """:func:`~convcli.io.physical.ome_unkept` of an OME-TIFF's OME-XML, found once for
        all its pages (the XML of a long acquisition runs to megabytes); () for another."""
        return ome_unkept(self._tif.ome_metadata) if self.carried.ome else ()

    def page_carried(self, k: int):
        """What page `k` carries, its own profile, resolution and tags (:attr:`carried` for
        the first: a fax's pages may each have a resolution of their own)."""
        if k == 0:
            return self.carried
        page = self._page(k)
        with _tifffile_quiet(), _decode_errors():
            layout, carried = _whole_layout(page), from_tiff_page(page)
        # An OME-TIFF's physical size is the file's, in its first page's OME-XML, as is
        # what no output keeps of it (its plane order, channel names, Z spacing)
        first, unkept = self.carried, carried.unkept + self._ome_unkept
        carried = replace(carried, physical=first.physical, ome=first.ome, unkept=unkept)
        return carried if layout is None else _with_nodata_read(carried, layout, page.dtype)

    def read_page(self, k: int) -> tuple[np.ndarray, float, int, bool, tuple[str, ...]] | None:
        """Page `k`'s samples (H, W, C), white, depth, whether it holds float samples, and
        the notes of its layout (samples read at a lower depth, or rounded); None where
        Pillow reads the page.

        The samples are uint8 where the page stores 8-bit values as they
        are read, else float32. An :class:`ImageError` for damaged data.
        """
        page = self._page(k)
        with _tifffile_quiet(), _decode_errors():
            layout = _whole_layout(page)
        if layout is None or layout.channels != self.channels:
            return None
        _check_segments(self._tif, page, close=False)
        source = RegionSource(self._tif, page, layout, ())
        # uint8 as stored, or float32 that holds missing values (NaN) where there may be some
        try:
            samples = source.read_samples(0, source.height)
        finally:
            source.kept_rows.forget()
        white, floats = layout.white, layout.values  # floats and signed integers: values
        if white is None:  # white from the values
            finite = samples[np.isfinite(samples)]
            white = max(layout.least_white, float(finite.max()) if finite.size else 0.0)
        if orientation(page) != 1:  # upright, as Pillow turns a picture
            samples = np.ascontiguousarray(exif_upright(samples, orientation(page)))
        notes = tuple(note for note in (layout.note, turned_note(page)) if note)
        return samples, white, layout.depth, floats, notes

    def close(self) -> None:
        self._tif.close()


def _upright_size(page) -> tuple[int, int]:
    """(width, height) of `page` turned upright by its Orientation."""
    size = int(page.imagewidth), int(page.imagelength)
    return size[::-1] if orientation(page) in TURNS else size


# Compressions imagecodecs decodes for tifffile (JPEG 2000, LERC, WebP, PNG, JPEG XR, JPEG XL):
# read whole, never in strips, their layouts as the strips' (a YCbCr JPEG 2000 is Pillow's)
_BY_IMAGECODECS = {22610, 33004, 33005, 34712, 34887, 34927, 34933, 34934, 50001, 50002, 52546}


def _whole_layout(page) -> _Layout | None:
    """`page`'s layout where it is read by :class:`TiffPages`, else None (Pillow's).

    An :class:`ImageError` where the layout is one the TIFF reader reads but
    its compression or predictor needs imagecodecs, which is missing: Pillow
    would misread some of those (big-endian samples, PackBits with a predictor).
    """
    layout = _layout(page, lossy=page.compression in _BY_IMAGECODECS)
    if layout is None or 0 in page.shape:
        return None
    if not _codecs_here(page):
        tif = page.parent
        if page.compression == _JPEG and not (tif.is_bigtiff and tif.byteorder == ">"):
            return None  # Pillow's libtiff decodes JPEG alike; Pillow opens no big-endian BigTIFF
        raise _needs_codecs(page)
    return layout


def _name(kind, code: int) -> str:
    """The name tifffile gives `code` of enum `kind` ("JPEG"), or the number."""
    try:
        return kind(code).name
    except ValueError:
        return str(code)


def _needs_codecs(page) -> ImageError:
    """The error of a page whose compression or predictor tifffile decodes only with imagecodecs."""
    codec = _name(tifffile.COMPRESSION, page.compression)
    predictor = _name(tifffile.PREDICTOR, page.predictor)
    predictor = "" if page.predictor == 1 else f" or predictor ({predictor})"
    needs = f"its compression ({codec}){predictor} needs"
    if page.bitspersample not in (1, 8, 16, 32, 64):
        needs = f"its {page.bitspersample}-bit samples need"
    return ImageError(f"cannot decode the image: {needs} imagecodecs: pip install 'convcli[deep]'")


def open_tiff_pages(path: str) -> TiffPages | None:
    """`path`'s pages for whole reads (:class:`TiffPages`), or None where Pillow reads the file.

    None for a file tifffile cannot parse, or whose first page has a layout
    the strips do not read.
    """
    with _tifffile_quiet():
        try:
            tif = tifffile.TiffFile(path)
        except (tifffile.TiffFileError, ValueError, struct.error, OSError, IndexError, KeyError):
            return None
        try:
            layout = _whole_layout(tif.pages[0])
        except ImageError:
            tif.close()
            raise
        except Exception:  # a corrupt header: Pillow reports it
            layout = None
    if layout is None:
        tif.close()
        return None
    return TiffPages(tif, layout)


# PhotometricInterpretation in words (min-is-white and min-is-black both grey)
_PHOTOMETRIC_WORDS = {
    0: "grey",
    1: "grey",
    2: "RGB",
    3: "palette",
    4: "mask",
    5: "CMYK",
    6: "YCbCr",
    8: "CIELab",
}

# ExtraSamples in words
_EXTRA_WORDS = {0: "unspecified", 1: "premultiplied alpha", 2: "alpha"}


def unread_error(path: str, frame: int = 0) -> ImageError | None:
    """The one-line error of a TIFF whose page `frame` tifffile parses and whose layout
    neither the TIFF reader nor Pillow reads, saying what the page holds.

    For a file Pillow cannot open or decode for its layout: "a TIFF of 5
    float32 samples per pixel (grey, planar), which convcli does not read".
    None where tifffile cannot parse the page, or the TIFF reader reads its
    layout: Pillow's own error then stands.
    """
    with _tifffile_quiet():
        try:
            with tifffile.TiffFile(path) as tif:
                page = tif.pages[frame]
                if _layout(page) is not None:
                    return None if _codecs_here(page) else _needs_codecs(page)
                held = _held(page)
        except Exception:  # not a TIFF tifffile parses: Pillow's word stands
            return None
    return ImageError(f"{held}, which convcli does not read")


def whole_read_reason(path: str, frame: int = 0) -> str:
    """Why `path`, read whole, is not read in strips: a few words for a ``--memory`` refusal.

    "only TIFFs and Zarr stores are read in strips" for other files; for a
    TIFF, that its `frame` is not the first (the strips read the first only),
    or what in its first page keeps it whole.
    """
    other = "only TIFFs and Zarr stores are read in strips"
    with _tifffile_quiet():
        try:
            with tifffile.TiffFile(path) as tif:
                if frame:
                    return "only the first frame of a TIFF is read in strips"
                page = tif.pages[0]
                codec = _name(tifffile.COMPRESSION, page.compression)
                if page.compression not in _LOSSLESS and page.compression != _JPEG:
                    return f"its {codec} compression is never read in strips"
                if orientation(page) != 1:
                    return "a TIFF turned by its Orientation tag is never read in strips"
                if _layout(page) is None:
                    return f"{_held(page)} is never read in strips"
                if not _codecs_here(page):  # what needs them, as _needs_codecs says it
                    held = f"{codec} compression is"
                    if not _unpredicted_here(page):
                        predictor = _name(tifffile.PREDICTOR, page.predictor)
                        held = f"{codec} compression with predictor {predictor} is"
                    if page.bitspersample not in (1, 8, 16, 32, 64):
                        held = f"{page.bitspersample}-bit samples are"
                    return (
                        f"its {held} read in strips only with imagecodecs: "
                        "pip install 'convcli[deep]'"
                    )
                if not _decodable(page):
                    return "each of its tiles or strips holds too many pixels to be read by parts"
        except Exception:  # not a TIFF tifffile parses
            pass
    return other


def _unpredicted_here(page) -> bool:
    """Whether tifffile undoes `page`'s predictor here (some need imagecodecs)."""
    try:
        tifffile.TIFF.UNPREDICTORS[page.predictor]  # filled as it is asked
    except KeyError:
        return False
    return True


def _held(page) -> str:
    """What `page`'s samples are, in words: "a TIFF of 2 float32 samples per pixel (grey +
    alpha)"."""
    samples = int(page.samplesperpixel)
    kind = page.dtype.name if page.dtype is not None else f"{page.bitspersample}-bit"
    photometric = int(page.photometric)
    colour = _PHOTOMETRIC_WORDS.get(photometric, f"photometric {photometric}")
    extras = [_EXTRA_WORDS.get(int(extra), "unspecified") for extra in page.extrasamples]
    for word in dict.fromkeys(extras):  # in order, each once
        count = extras.count(word)
        colour += f" + {word}" if count == 1 else f" + {count} {word}"
    said = [colour]
    if page.planarconfig == _SEPARATE and samples > 1:
        said.append("planar")
    plural = "s" if samples != 1 else ""
    return f"a TIFF of {samples} {kind} sample{plural} per pixel ({', '.join(said)})"
