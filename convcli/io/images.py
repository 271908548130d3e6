"""Image files in and out: the only module that imports Pillow.

Reading
-------
:func:`open_image` opens a file lazily (only the header is parsed), checks its
pixel count against a limit *before* decoding, and ``read()`` then returns the
pixels as a float32 ``(H, W, C)`` array in the file's own scale (0-255 for 8-bit
files, 0-65535 for 16-bit ones), upright (the EXIF orientation is applied): a
:class:`Picture`, which keeps 8-bit samples as they were decoded until its
float32 ``pixels`` are first asked for.

=====================================  ==================  ================
file mode (Pillow)                     channels            scale ("white")
=====================================  ==================  ================
``1``, ``L``                           ``L``               255
``LA``                                 ``L A``             255
``P`` (palette)                        ``R G B``           255
``P`` with transparency, ``PA``        ``R G B A``         255
``RGB``, ``CMYK``, ``YCbCr``, ...      ``R G B``           255
``RGBA``                               ``R G B A``         255
16-bit RGB, RGBA (PNG, TIFF)           ``R G B (A)``       65535 (``deep`` extra), else 255
``I;16`` (16-bit grey)                 ``L``               65535
``I`` (32-bit integer)                 ``L``               65535, or the maximum if larger
``F`` (32-bit float)                   ``L``               1.0, or the maximum if larger
=====================================  ==================  ================

Animated GIFs, WebPs and PNGs, multi-page TIFFs and other multi-frame files:
``read()`` decodes the first frame and :attr:`Picture.notes` says so;
:meth:`ImageSource.read_frames` decodes any of them (:attr:`ImageSource.frame_count`),
the composited canvas of an animation, and :func:`read_stack` all of them as
one (m, H, W, C) picture. Where the optional libraries are
installed, plain JPEGs are decoded by simplejpeg (a dependency) and 16-bit
colour PNG and TIFF by imagecodecs (the ``deep`` extra), with the same results
as Pillow's (at full depth for 16-bit colour); ``CONVCLI_FAST_CODECS=0`` in the
environment leaves every file to Pillow.

Writing
-------
:func:`save_levels` writes integer levels (made by
:func:`convcli.levels.mapping.to_levels`) as PNG (:mod:`convcli.io.png`), JPEG or TIFF and
:func:`save_npy` writes raw float32 arrays; every file goes through
:func:`convcli.io.safeio.write_atomic`. :func:`frame_writer` writes a file of frames a frame
at a time (an animated PNG, a multi-page TIFF, an (m, H, W, C) ``.npy``),
and :func:`save_frames` a stack of levels at once.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import os
import shutil
import stat
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import (
    Image,
    ImageFile,
    ImageOps,
    TiffImagePlugin,
    UnidentifiedImageError,
)

from ..choices import DEFAULT_MAX_PIXELS
from ..errors import ImageError, PixelLimitError
from .formats import MARKER, TIFF_SIGNATURES, load
from .png import ApngWriter, fast_codecs_allowed, write_png
from .safeio import atomic_output, write_atomic
from .zarr_stores import store_marked

JPEG_QUALITY = 95

_PIL_FORMATS = {"png": "PNG", "jpg": "JPEG", "tiff": "TIFF"}
_SIXTEEN_BIT_MODES = {"I;16", "I;16L", "I;16B", "I;16N"}
# Formats Pillow registers but cannot decode without extra software.
_UNDECODABLE = {"MPEG"}


STACK_FORMATS = frozenset({"TIFF", "GIF", "WEBP", "PNG"})
"""The formats (Pillow's names) whose frames are the batch axis m: multi-page TIFF,
animated GIF, WebP and PNG."""


@functools.cache
def image_extensions() -> frozenset[str]:
    """Lower-case extensions (with the dot) of the formats Pillow can decode here.

    Found on first use: loading every Pillow plugin takes time that a run on
    named files does not need (``Image.open`` loads the plugin it needs).
    """
    Image.init()
    skip = set(_UNDECODABLE)
    if shutil.which("gs") is None:  # what EpsImagePlugin needs, without running it
        skip.add("EPS")
    exts = set()
    for ext, fmt in Image.registered_extensions().items():
        if fmt not in Image.OPEN or fmt in skip:
            continue
        factory = Image.OPEN[fmt][0]
        if inspect.isclass(factory) and issubclass(factory, ImageFile.StubImageFile):
            continue  # HDF5, GRIB, BUFR, WMF: need a handler installed by the user
        exts.add(ext.lower())
    return frozenset(exts)


def is_image_name(path: str | os.PathLike) -> bool:
    """Whether `path` has the extension of an image format Pillow reads (any case).

    The usual formats (JPEG, PNG, GIF, BMP, PPM) are known from the plugins
    ``Image.open`` loads first, a name without an extension is none: neither
    loads every Pillow plugin (about 25 ms, before a run can start its workers).

    Examples
    --------
    >>> is_image_name("holiday/IMG_0001.JPG"), is_image_name("notes.txt")
    (True, False)
    """
    suffix = Path(path).suffix.lower()
    if not suffix:
        return False
    Image.preinit()
    if Image.EXTENSION.get(suffix) in _FIRST_FORMATS:
        return True
    return suffix in image_extensions()


_FIRST_FORMATS = frozenset({"BMP", "DIB", "GIF", "JPEG", "PNG", "PPM"})
"""The formats of the plugins ``Image.preinit`` loads: all decodable, none a stub."""


@dataclass(frozen=True)
class Picture:
    """A decoded image.

    Made as ``Picture(samples, channels, white, depth, notes)``.

    Attributes
    ----------
    samples : (H, W, C) ndarray
        The values as decoded, upright: float32, or the 8-bit integers (uint8)
        of a file read by :meth:`ImageSource.read`, which become float32 when
        :attr:`pixels` is first asked for (a convolution of the channels' sum
        reads them as they are: :meth:`integer_samples`). (m, H, W, C) for
        the frames of a stack (:func:`read_stack`).
    pixels : (H, W, C) float32 ndarray
        The samples as float32, in the file's own scale.
    channels : tuple of str
        Channel names, ``("L",)``, ``("L", "A")``, ``("R", "G", "B")`` or ``("R", "G", "B", "A")``.
    white : float
        The value of full intensity: 255, 65535, or see the module docstring.
    depth : int
        Bits per sample for output files: 8 or 16.
    notes : tuple of str
        Things the user should know, such as "used the first of 3 frames".
    """

    samples: np.ndarray
    channels: tuple[str, ...]
    white: float
    depth: int
    notes: tuple[str, ...] = ()

    @property
    def pixels(self) -> np.ndarray:
        samples = self.samples
        if samples.dtype != np.float32:
            # Converted once; the integers are let go, as when they were converted at once.
            samples = samples.astype(np.float32)
            object.__setattr__(self, "samples", samples)
        return samples

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of :attr:`pixels`, without converting the samples."""
        return self.samples.shape

    def integer_samples(self) -> np.ndarray | None:
        """The samples as decoded where they are still integers (uint8), else None."""
        samples = self.samples
        return samples if samples.dtype == np.uint8 else None

    @property
    def has_alpha(self) -> bool:
        return self.channels[-1] == "A"

    @property
    def colour_channels(self) -> int:
        """Number of channels that are not alpha."""
        return len(self.channels) - int(self.has_alpha)


def _channels_for(im: Image.Image) -> tuple[str, ...]:
    mode = im.mode
    if mode in ("1", "L", "I", "F") or mode in _SIXTEEN_BIT_MODES:
        return ("L",)
    if mode in ("LA", "La"):
        return ("L", "A")
    if mode in ("RGBA", "RGBa", "PA"):
        return ("R", "G", "B", "A")
    if mode == "P" and "transparency" in im.info:
        return ("R", "G", "B", "A")
    return ("R", "G", "B")


class ImageSource:
    """An opened image file whose pixels have not been decoded yet.

    Made by :func:`open_image`; :attr:`size` and :attr:`channels` come from the
    header, :meth:`read` decodes, if the frame it decodes is within `max_pixels`.
    """

    def __init__(self, im: Image.Image, path: str, max_pixels: int = DEFAULT_MAX_PIXELS):
        self._im = im
        self.path = path
        self.max_pixels = max_pixels
        self.channels = _channels_for(im)
        self.size = im.size  # (width, height) before the EXIF orientation

    @property
    def frame_count(self) -> int:
        """The frames of the file: pages of a TIFF, frames of a GIF, WebP or APNG.

        1 for the other formats, whose further images are no frames of a
        stack (the preview or depth map of a phone's MPO JPEG, the sizes of
        an icon): ``read()`` takes their first, as it always has. An APNG's
        default image, which is no frame of its animation, is not counted.
        """
        if self._im.format not in STACK_FORMATS:
            return 1
        with _pillow_errors(parsing=True):
            count = getattr(self._im, "n_frames", 1)
        if self._im.format == "PNG" and count > 1:  # acTL's count is only the file's word
            count = min(count, self._first_frame + _apng_frame_controls(self.path))
        return count - self._first_frame

    @property
    def _first_frame(self) -> int:
        """Pillow's index of frame 0: 1 past an APNG's default image, else 0."""
        return int(bool(self._im.format == "PNG" and self._im.info.get("default_image")))

    @property
    def loop(self) -> int | None:
        """How many times an animation plays (0: for ever), or None where the file does not say."""
        loop = self._im.info.get("loop")
        return int(loop) if isinstance(loop, (int, np.integer)) else None

    def frame_sizes(self, frames: tuple[int, ...]) -> list[tuple[int, int]]:
        """(width, height) of each of `frames`: a TIFF's own pages, an animation's canvas.

        Only the headers are read.
        """
        if self._im.format != "TIFF":
            return [self.size] * len(frames)
        sizes = []
        for k in frames:
            with _frame_errors(k, self.frame_count):
                self._im.seek(k)
                sizes.append(self._im.size)
        return sizes

    def read_frames(self, frames: tuple[int, ...]) -> Iterator[tuple[Picture, int | None]]:
        """Decode `frames`, in order: each a :class:`Picture` and its duration (ms) or None.

        A GIF's, APNG's or WebP's frame is the canvas a viewer shows: the
        frames before it drawn, disposed and blended as the file says
        (Pillow composites them). Every frame has the channels of the file's
        first (:attr:`channels`), and is read by Pillow (8 bits for colour);
        the EXIF orientation is not applied. An error names the frame.
        """
        count = self.frame_count
        for k in frames:
            with _frame_errors(k, count):
                self._im.seek(k + self._first_frame)
                check_pixels(self._im.size, self.max_pixels)
                self._im.load()
                duration = self._im.info.get("duration")
                pixels, white, depth = _to_array(self._im, self.channels)
            yield (Picture(pixels, self.channels, white, depth),
                   int(duration) if isinstance(duration, (int, float)) else None)

    @property
    def upright_size(self) -> tuple[int, int]:
        """(width, height) of the picture :meth:`read` gives: the EXIF orientation applied."""
        width, height = self.size
        with _pillow_errors(parsing=True):
            orientation = self._im.getexif().get(_ORIENTATION, 1)
        return (height, width) if orientation in (5, 6, 7, 8) else (width, height)

    def read(self) -> Picture:
        """Decode the first frame into a :class:`Picture`.

        Raises
        ------
        ImageError
            If the file is truncated or corrupt; :class:`PixelLimitError` if the
            frame is over the pixel limit (a GIF's first frame may be larger
            than its header says).
        """
        im = self._im
        notes = []
        # Everything that makes Pillow parse the file is guarded: counting the
        # frames reads every frame header (a truncated GIF or TIFF fails there).
        with _pillow_errors(parsing=True):
            frames = getattr(im, "n_frames", 1)
            if frames > 1:
                im.seek(0)
                notes.append(f"used the first of {frames} frames")
            check_pixels(im.size, self.max_pixels)  # a GIF's first frame may outgrow its header
            decoded, white, depth = None, 255.0, 8
            if _is_deep_colour(im):  # before load(), which forgets the file's layout
                decoded, white, depth = _deep_colour(im, self.path, self.channels), 65535.0, 16
                if decoded is None:
                    notes.append("16-bit colour read as 8-bit (Pillow reads colour at 8 bits; "
                                 "install convcli[deep] for 16)")
            elif frames == 1:
                decoded = _fast_jpeg(im, self.path)
            if decoded is not None:
                upright = _exif_upright(decoded, im.getexif().get(_ORIENTATION, 1))
                if upright.dtype == np.uint8 and upright.flags.c_contiguous:
                    samples = upright.reshape(upright.shape[:2] + (-1,))  # kept as integers
                else:
                    samples = upright.astype(np.float32).reshape(upright.shape[:2] + (-1,))
                return Picture(samples, self.channels, white, depth, tuple(notes))
            im.load()
            ImageOps.exif_transpose(im, in_place=True)  # no copy when upright
        with _pillow_errors():
            samples, white, depth = _to_array(im, self.channels, integers=True)
        return Picture(samples, self.channels, white, depth, tuple(notes))


_ORIENTATION = 0x0112  # the EXIF tag


def _apng_frame_controls(path: str) -> int:
    """The frame control chunks (fcTL) of an APNG: the frames it holds, whatever acTL says.

    Only the chunks' headers are read (a seek over each chunk's data); the
    walk stops at IEND, at the end of the file, or at a chunk that runs past it.
    """
    count = 0
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        position = 8  # past the signature
        while position + 12 <= size:
            fh.seek(position)
            length, kind = struct.unpack(">I4s", fh.read(8))
            if kind == b"IEND":
                break
            count += kind == b"fcTL"
            position += 12 + length
    return count


def _fast_jpeg(im: Image.Image, path: str) -> np.ndarray | None:
    """The pixels of a plain RGB or grey JPEG decoded by simplejpeg, or None for Pillow.

    simplejpeg (a dependency, where it has a wheel) calls libjpeg-turbo with the settings
    Pillow uses (accurate DCT, smooth upsampling), so the pixels are the same
    (tests compare them), in 10 ms instead of Pillow's 16 for a 2400x1800
    photo. Anything else, and any file libjpeg-turbo warns about (``strict``),
    goes to Pillow, which then reads and reports it as it always has.
    """
    if im.format != "JPEG" or im.mode not in ("RGB", "L"):
        return None
    colorspace = "RGB" if im.mode == "RGB" else "GRAY"
    pixels = _decoded_by("simplejpeg", path, lambda simplejpeg, data: simplejpeg.decode_jpeg(
        data, colorspace=colorspace, strict=True))
    width, height = im.size
    return pixels if pixels is not None and pixels.shape[:2] == (height, width) else None


def _deep_colour(im: Image.Image, path: str, channels: tuple[str, ...]) -> np.ndarray | None:
    """The 16-bit RGB or RGBA pixels of a PNG or TIFF file read by imagecodecs, or None.

    imagecodecs (the ``deep`` extra) reads them with libpng and libtiff at full
    depth, where Pillow keeps 8 bits. The first page of a TIFF is the frame
    Pillow would use. Anything that does not come out as the header says
    (the channels, the size) is left to Pillow.
    """
    if im.format not in ("PNG", "TIFF") or channels[:3] != ("R", "G", "B"):
        return None
    name = "png_decode" if im.format == "PNG" else "tiff_decode"
    pixels = _decoded_by("imagecodecs", path, lambda codecs, data: getattr(codecs, name)(data))
    width, height = im.size
    if pixels is None or pixels.dtype != np.uint16 or pixels.shape != (height, width,
                                                                          len(channels)):
        return None
    return pixels


def _decoded_by(module: str, path: str, decode) -> np.ndarray | None:
    """``decode(module, file bytes)``, or None where the module is missing, off or fails.

    A failure leaves the file to Pillow, which then reads it, or reports
    why it cannot, as it always has.
    """
    if not fast_codecs_allowed():
        return None
    try:
        library = importlib.import_module(module)
    except ImportError:
        return None
    try:
        with open(path, "rb") as fh:
            return decode(library, fh.read())
    except Exception:  # the library's own error types too: Pillow decides
        return None


def _exif_upright(pixels: np.ndarray, orientation) -> np.ndarray:
    """`pixels` (H, W, ...) turned upright from the EXIF orientation, as Pillow's exif_transpose."""
    if orientation in (5, 6, 7, 8):  # the ones that swap width and height
        pixels = np.swapaxes(pixels, 0, 1)  # orientation 5 (transpose)
        orientation = {5: 1, 6: 2, 7: 3, 8: 4}[orientation]
    if orientation == 2:
        return pixels[:, ::-1]
    if orientation == 3:
        return pixels[::-1, ::-1]
    if orientation == 4:
        return pixels[::-1]
    return pixels


def _is_deep_colour(im: Image.Image) -> bool:
    """Whether the file stores more than 8 bits per colour sample (Pillow keeps 8)."""
    if im.mode in _SIXTEEN_BIT_MODES or im.mode in ("I", "F"):
        return False
    # A tile's arguments are its raw mode (PNG), or a tuple that starts with it (TIFF).
    args = [tile[3] if len(tile) > 3 else None for tile in getattr(im, "tile", ())]
    raw_modes = [a[0] if isinstance(a, tuple) and a else a for a in args]
    bits = im.info.get("bits") or getattr(im, "bits", 8)
    return any(isinstance(r, str) and ";16" in r for r in raw_modes) or bits == 16


def _to_array(im: Image.Image, channels: tuple[str, ...], *, integers: bool = False
              ) -> tuple[np.ndarray, float, int]:
    """Pixels as float32 (H, W, C), the value of white, and the output bit depth.

    With `integers`, 8-bit pixels come as they are (uint8).
    """
    mode = im.mode
    if mode in _SIXTEEN_BIT_MODES:
        arr = np.asarray(im).astype(np.float32)
        return arr[:, :, None], 65535.0, 16
    if mode in ("I", "F"):
        arr = np.asarray(im).astype(np.float32)
        finite = arr[np.isfinite(arr)]
        top = float(finite.max()) if finite.size else 0.0
        white = 65535.0 if mode == "I" else 1.0
        return arr[:, :, None], max(white, top), 16
    target = {("L",): "L", ("L", "A"): "LA", ("R", "G", "B"): "RGB"}.get(channels, "RGBA")
    if mode != target:
        im = im.convert(target)
    arr = np.asarray(im)
    if not (integers and arr.dtype == np.uint8):
        arr = arr.astype(np.float32)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    return arr, 255.0, 8


# What Pillow's plugins raise, besides OSError and friends, when they parse a
# corrupt or truncated header (a GIF's frame blocks, a TIFF's tags): only
# caught around Pillow's parsing, where they cannot come from convcli's own code.
_PARSING_ERRORS = (IndexError, KeyError, TypeError, struct.error)


@contextmanager
def _pillow_errors(*, parsing: bool = False) -> Iterator[None]:
    """Turn Pillow's errors about bad files into ImageError (one line each).

    With `parsing`, also the errors in :data:`_PARSING_ERRORS` that Pillow's
    plugins let through from a corrupt header.
    """
    try:
        yield
    except ImageError:
        raise  # convcli's own, such as the pixel limit
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageError(f"image too large (Pillow's decompression-bomb check): {exc}") from None
    except UnidentifiedImageError:
        raise ImageError("not an image file (Pillow cannot identify its format)") from None
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except (OSError, SyntaxError, EOFError, ValueError) as exc:
        # Pillow reports truncated and corrupt data with these.
        raise ImageError(f"cannot decode the image: {_reason(exc)}") from None
    except _PARSING_ERRORS as exc:
        if not parsing:
            raise
        raise ImageError(f"cannot decode the image: {_reason(exc)}") from None


@contextmanager
def _frame_errors(frame: int, count: int) -> Iterator[None]:
    """:func:`_pillow_errors` of one frame's decoding, the message naming the frame."""
    try:
        with _pillow_errors(parsing=True):
            yield
    except ImageError as exc:
        raise type(exc)(f"frame {frame} of {count}: {exc}") from None


def _reason(exc: BaseException) -> str:
    """The first line of an exception's message, or its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@functools.cache
def _pillow_limit_off() -> None:
    """Switch Pillow's decompression-bomb check off, once: :func:`check_pixels` stands for it.

    Pillow's limit is one global for the process; convcli's is each file's
    own, so that threads (a Dask worker's) may read files with different
    limits at once.
    """
    Image.MAX_IMAGE_PIXELS = None


def check_pixels(size: tuple[int, int], max_pixels: int) -> None:
    """Raise :class:`PixelLimitError` if an image of `size` (width, height) is over `max_pixels`.

    0 means no limit.

    Examples
    --------
    >>> check_pixels((640, 480), 0)
    >>> check_pixels((640, 480), 1000)
    Traceback (most recent call last):
    ...
    convcli.errors.PixelLimitError: image is 640x480 = 307,200 pixels, over the limit of 1,000
    """
    width, height = size
    if max_pixels > 0 and width * height > max_pixels:
        raise PixelLimitError(
            f"image is {width}x{height} = {width * height:,} pixels, over the limit of "
            f"{max_pixels:,}"
        )


@contextmanager
def open_image(path: str | os.PathLike, *, max_pixels: int = DEFAULT_MAX_PIXELS):
    """Open an image file lazily and check its size before anything is decoded.

    Parameters
    ----------
    path : str or path-like
        The file.
    max_pixels : int
        Refuse images with more pixels (width x height from the header);
        0 means no limit. The limit is checked again before decoding, for the
        frame decoded (its size may differ from the header's). This is the only
        pixel limit: Pillow's own (``Image.MAX_IMAGE_PIXELS``, one for the
        process) is switched off by the first call, for good, so that runs with
        different limits can share a process.

    Yields
    ------
    ImageSource
        Call its ``read()`` to decode.

    Raises
    ------
    ImageError
        Not an image, or corrupt; :class:`PixelLimitError` over the pixel limit.
    OSError
        The file cannot be opened (missing, no permission), or it is a folder
        that cannot be listed.
    """
    shown = os.fspath(path)
    info = os.stat(shown)  # FileNotFoundError and friends name the file themselves
    if stat.S_ISDIR(info.st_mode):
        # A folder named as an image is one that could not be listed: say why.
        with os.scandir(shown):
            pass
        raise ImageError("not a regular file (a folder)")
    if not stat.S_ISREG(info.st_mode):
        raise ImageError("not a regular file (a folder, pipe or device)")
    if info.st_size == 0:
        raise ImageError("empty file (0 bytes)")
    pages = _tiff_pages(shown)
    if pages is not None:
        with contextlib.closing(TiffSource(pages, shown, max_pixels)) as source:
            check_pixels(pages.size, max_pixels)
            yield source
        return
    _pillow_limit_off()
    with _pillow_errors():
        im = Image.open(shown)
    with im:
        check_pixels(im.size, max_pixels)
        yield ImageSource(im, shown, max_pixels)


def _tiff_pages(path: str):
    """The TIFF reader's pages of `path` (:class:`convcli.io.regions.TiffPages`), or None.

    The TIFF reader (tifffile) is loaded only for a file that starts as a TIFF does.
    """
    with open(path, "rb") as fh:
        if fh.read(4) not in TIFF_SIGNATURES:
            return None
    return load("region reader").open_tiff_pages(path)


class TiffSource:
    """A TIFF opened by :func:`open_image`, with :class:`ImageSource`'s attributes and methods.

    Its pages are read by the TIFF reader of the strips
    (:class:`convcli.io.regions.TiffPages`), which gives a whole read, a frame
    and a band of rows the same values; a page of a layout that reader leaves
    (JPEG, palette, CMYK, ...) is read by Pillow, as the file's other frames
    would be. TIFF pages have no duration and no EXIF orientation other than
    top-left (other orientations are Pillow's).
    """

    loop = None

    def __init__(self, pages, path: str, max_pixels: int = DEFAULT_MAX_PIXELS):
        self._pages = pages
        self._pillow_source: ImageSource | None = None
        self.path = path
        self.max_pixels = max_pixels
        self.channels = pages.channels
        self.size = self.upright_size = pages.size
        self.frame_count = pages.frame_count

    def frame_sizes(self, frames: tuple[int, ...]) -> list[tuple[int, int]]:
        """(width, height) of each of `frames`, from their headers."""
        sizes = []
        for k in frames:
            with _frame_errors(k, self.frame_count):
                sizes.append(self._pages.page_size(k))
        return sizes

    def read_frames(self, frames: tuple[int, ...]) -> Iterator[tuple[Picture, int | None]]:
        """As :meth:`ImageSource.read_frames`; every frame has the first page's channels."""
        for k in frames:
            with _frame_errors(k, self.frame_count):
                check_pixels(self._pages.page_size(k), self.max_pixels)
                read = self._pages.read_page(k)
            if read is None:
                yield next(self._pillow().read_frames((k,)))
                continue
            samples, white, depth = read
            yield Picture(samples, self.channels, white, depth), None

    def read(self) -> Picture:
        """Decode the first page into a :class:`Picture`, as :meth:`ImageSource.read`."""
        count = self.frame_count
        notes = ((f"used the first of {count} frames",) if count > 1 else ()) + self._pages.notes
        read = self._pages.read_page(0)
        samples, white, depth = read
        return Picture(samples, self.channels, white, depth, notes)

    def _pillow(self) -> ImageSource:
        """The file opened by Pillow, for the pages the TIFF reader leaves to it."""
        if self._pillow_source is None:
            with _pillow_errors():
                im = Image.open(self.path)
            self._pillow_source = ImageSource(im, self.path, self.max_pixels)
            self._pillow_source.channels = self.channels
        return self._pillow_source

    def close(self) -> None:
        self._pages.close()
        if self._pillow_source is not None:
            self._pillow_source._im.close()


def read_image(path: str | os.PathLike, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> Picture:
    """Open, check and decode an image file in one call (see :func:`open_image`)."""
    with open_image(path, max_pixels=max_pixels) as source:
        return source.read()


def read_stack(path: str | os.PathLike, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> Picture:
    """Every frame of a file as one picture whose pixels are (m, H, W, C); a one-frame file's
    picture as :func:`read_image` gives it, (H, W, C).

    The frames are read as :meth:`ImageSource.read_frames` reads them; an
    ImageError if they differ in size.
    """
    with open_image(path, max_pixels=max_pixels) as source:
        count = source.frame_count
        if count == 1:
            return source.read()
        frames = [pic for pic, _ in source.read_frames(tuple(range(count)))]
    if len({f.pixels.shape for f in frames}) > 1:
        raise ImageError(f"its {count} frames differ in size: a stack needs frames of one size")
    return Picture(np.stack([f.pixels for f in frames]), frames[0].channels,
                   max(f.white for f in frames), max(f.depth for f in frames),
                   (f"{count} frames",))


# --- files out ----------------------------------------------------------------------------


_TIFF_SOFTWARE = 305


def written_by_convcli(path: str | os.PathLike) -> bool:
    """Whether `path` is an image that carries convcli's :data:`MARKER`, or a valid ``.npy``.

    A folder is a Zarr store whose attributes carry ``"convcli"``
    (:func:`convcli.io.zarr_stores.store_marked`).

    Only the header is read, never the pixels. A ``.npy`` is never an image
    input, so any file with a valid ``.npy`` header (``numpy.lib.format``) may
    be replaced by an ``.npy`` output.
    """
    path = os.fspath(path)
    if os.path.isdir(path):  # a Zarr store: its group's attributes say

        return store_marked(path)
    if path.lower().endswith(".npy"):
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
                return im.info.get("comment") in (MARKER.encode(), MARKER)
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


def save_levels(path: str | os.PathLike, levels: np.ndarray, *, fmt: str,
                overwrite: bool = False) -> bool:
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
        :data:`JPEG_QUALITY` (8-bit, alpha dropped); TIFF uncompressed.
    overwrite : bool
        Replace an existing file, if convcli wrote it (:func:`written_by_convcli`;
        otherwise ``FileExistsError``); without it an existing file is kept.

    Returns
    -------
    bool
        True if written, False if the file existed and was kept.
    """
    if fmt not in _PIL_FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(_PIL_FORMATS)}; got {fmt!r}")
    arr = np.ascontiguousarray(levels)
    if fmt == "jpg":
        if arr.dtype == np.uint16:
            arr = np.rint(arr / 257.0).astype(np.uint8)
        if arr.ndim == 3 and arr.shape[2] in (2, 4):
            arr = np.ascontiguousarray(arr[:, :, :-1])  # JPEG has no alpha
        if arr.ndim == 3 and arr.shape[2] == 1:
            arr = arr[:, :, 0]
    if fmt == "png":
        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:
                write_png(fh, arr, text={"Software": MARKER})

        return write_atomic(path, write, overwrite=overwrite, replaceable=written_by_convcli)
    if fmt == "tiff" and arr.dtype == np.uint16 and arr.ndim == 3 and arr.shape[2] in (3, 4):
        encoded = _deep_tiff(arr)
        return write_atomic(path, lambda tmp: tmp.write_bytes(encoded), overwrite=overwrite,
                            replaceable=written_by_convcli)
    im = Image.fromarray(arr)
    options = ({"quality": JPEG_QUALITY, "comment": MARKER} if fmt == "jpg" else
               {"tiffinfo": _marked_tiff_info()})

    def write(tmp: Path) -> None:
        im.save(tmp, format=_PIL_FORMATS[fmt], **options)

    return write_atomic(path, write, overwrite=overwrite, replaceable=written_by_convcli)


def _marked_tiff_info() -> TiffImagePlugin.ImageFileDirectory_v2:
    """TIFF tags for Pillow's writer: the Software tag that marks convcli's files."""
    tags = TiffImagePlugin.ImageFileDirectory_v2()
    tags[_TIFF_SOFTWARE] = MARKER
    return tags


def _deep_tiff(levels: np.ndarray) -> bytes:
    """16-bit RGB or RGBA `levels` as an uncompressed TIFF, by imagecodecs.

    Pillow writes no 16-bit colour TIFF; imagecodecs (the ``deep`` extra, which
    reads such files) does, with the Software tag that marks convcli's files
    (Pillow reads the tag back, see :func:`written_by_convcli`).
    """
    try:
        import imagecodecs
    except ImportError:
        raise ValueError("16-bit colour TIFF output needs imagecodecs: pip install "
                         "'convcli[deep]'") from None
    return bytes(imagecodecs.tiff_encode(
        levels, photometric="rgb", planarconfig="contig",
        extrasample="unassalpha" if levels.shape[2] == 4 else None, software=MARKER))


def save_frames(path: str | os.PathLike, levels: np.ndarray, *, fmt: str,
                durations=None, loop: int | None = 0, overwrite: bool = False) -> bool:
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
    with frame_writer(path, fmt=fmt, count=len(stack), loop=loop,
                      overwrite=overwrite) as writer:
        if writer is not None:
            for frame, duration in zip(stack, durations, strict=True):
                writer.add(frame, duration)
    return writer is not None


@contextmanager
def frame_writer(path: str | os.PathLike, *, fmt: str, count: int, loop: int | None = 0,
                 overwrite: bool = False) -> Iterator[FrameWriter | None]:
    """A file of `count` frames written a frame at a time; it appears whole or not at all.

    `fmt` is ``png`` (an animated PNG: :class:`convcli.io.png.ApngWriter`, with
    `loop`), ``tiff`` (one uncompressed page per frame of levels, or of
    float32 values, mode ``F``; no 16-bit colour) or ``npy`` (float32 values,
    ``(count, H, W, C)``, as :func:`numpy.save` writes them). Yields a
    :class:`FrameWriter`, or None where the file exists and is kept (see
    :func:`save_levels` for `overwrite`). The file gets its name when the
    block ends with every frame added; a block that raises leaves nothing.
    """
    with atomic_output(path, overwrite=overwrite, replaceable=written_by_convcli) as output:
        if output.temporary is None:
            yield None
            return
        with open(output.temporary, "w+b") as fh:
            writer = FrameWriter(fh, fmt=fmt, count=count, loop=loop)
            yield writer
            writer.close()


class FrameWriter:
    """The frames of one file in :func:`frame_writer`'s format, written to `fh` as they come."""

    def __init__(self, fh, *, fmt: str, count: int, loop: int | None = 0):
        if fmt not in ("png", "tiff", "npy"):
            raise ValueError(f"fmt must be png, tiff or npy for frames; got {fmt!r}")
        self._fh, self._fmt, self._count, self._loop = fh, fmt, count, loop
        self._added, self._writer = 0, None

    def add(self, frame: np.ndarray, duration=None) -> None:
        """Write the next frame: levels (H, W[, C]), or float32 values (``npy``, ``F`` TIFF).

        `duration` (ms, None: 100) is that of an animated PNG's frame.
        """
        if self._added == self._count:
            raise ValueError(f"more than the {self._count} frames announced")
        if self._fmt == "png":
            self._png(np.ascontiguousarray(frame), duration)
        elif self._fmt == "npy":
            self._npy(np.asarray(frame, np.float32))
        else:
            self._tiff(np.ascontiguousarray(frame))
        self._added += 1

    def _png(self, frame: np.ndarray, duration) -> None:
        if self._writer is None:
            shape = frame.shape if frame.ndim == 3 else frame.shape + (1,)
            self._writer = ApngWriter(self._fh, shape=shape, dtype=frame.dtype,
                                      count=self._count, loop=self._loop,
                                      text={"Software": MARKER})
        self._writer.add(frame, duration)

    def _npy(self, frame: np.ndarray) -> None:
        if self._writer is None:  # the header of the whole (count, ...) array, as np.save's
            header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                      "fortran_order": False, "shape": (self._count,) + frame.shape}
            np.lib.format.write_array_header_1_0(self._fh, header)
            self._writer = frame.shape
        if frame.shape != self._writer:
            raise ValueError(f"a frame must be {self._writer}; got {frame.shape}")
        self._fh.write(np.ascontiguousarray(frame).tobytes())

    def _tiff(self, frame: np.ndarray) -> None:
        if frame.ndim == 3 and frame.shape[2] == 1:
            frame = frame[:, :, 0]
        if frame.dtype == np.uint16 and frame.ndim == 3:
            raise ValueError("16-bit colour TIFF stacks are not written; use --format png or npy")
        if self._writer is None:
            self._writer = _PageAppender(self._fh)
        page = _float_image(frame) if frame.dtype == np.float32 else Image.fromarray(frame)
        page.save(self._writer, format="TIFF", tiffinfo=_marked_tiff_info())
        self._writer.newFrame()

    def close(self) -> None:
        """Finish the file; ValueError if frames are missing."""
        if self._added != self._count:
            raise ValueError(f"{self._added} frames written of {self._count}")
        if self._fmt in ("png", "tiff"):
            self._writer.close()


class _PageAppender(TiffImagePlugin.AppendingTiffWriter):
    """Pillow's appending TIFF writer, each new page linked from where the last walk ended.

    Pillow walks the chain of pages from the first for every page added
    (20000 pages: about 2 * 10^8 reads); the walk here starts at the last
    page's link, so the same bytes come in time linear in the pages.
    """

    _last_link: int | None = None

    def skipIFDs(self) -> None:  # noqa: N802 - Pillow's name
        if self._last_link is not None:
            self.f.seek(self._last_link)
        super().skipIFDs()
        self._last_link = self.whereToWriteNewIFDOffset


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


def save_float_tiff(path: str | os.PathLike, values: np.ndarray, *,
                    overwrite: bool = False) -> bool:
    """Write one channel of values as a 32-bit float TIFF, atomically (``--normalize none``).

    Parameters
    ----------
    path : str or path-like
        Final file name.
    values : (H, W) ndarray, or (m, H, W) for one page per frame
        Written as float32 (Pillow's mode ``F``: one sample of 32-bit IEEE float
        per pixel, uncompressed), readable by Pillow, tifffile and ImageMagick.
    overwrite : bool
        As for :func:`save_levels`.

    Returns
    -------
    bool
        True if written, False if the file existed and was kept.
    """
    data = np.ascontiguousarray(values, dtype=np.float32)
    if data.ndim == 3:
        return save_frames(path, data, fmt="tiff", overwrite=overwrite)
    if data.ndim != 2:
        raise ValueError(f"values must be one channel (H, W), got shape {data.shape}")
    im = _float_image(data)

    def write(tmp: Path) -> None:
        im.save(tmp, format="TIFF", tiffinfo=_marked_tiff_info())

    return write_atomic(path, write, overwrite=overwrite, replaceable=written_by_convcli)


def _float_image(data: np.ndarray) -> Image.Image:
    """A float32 (H, W) array as a Pillow image of mode ``F``."""
    return Image.fromarray(data) if data.size else Image.new("F", data.shape[::-1])
