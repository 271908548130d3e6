"""Image files in: open, check and decode (Pillow, and the TIFF reader for TIFFs).

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
``I;16`` (16-bit grey; tRNS: ``L A``)   ``L``               65535
``I`` (32-bit integer)                 ``L``               65535, or the maximum if larger
``F`` (32-bit float)                   ``L``               1.0, or the maximum if larger
=====================================  ==================  ================

Animated GIFs, WebPs and PNGs, multi-page TIFFs and other multi-frame files: ``read()``
decodes the first frame and :attr:`Picture.notes` says so; :meth:`ImageSource.read_frames`
decodes any of them (:attr:`ImageSource.frame_count`), the composited canvas of an
animation, and :func:`read_stack` all of them as one (m, H, W, C) picture. Where the
optional libraries are installed, plain JPEGs are decoded by simplejpeg (a dependency) and
16-bit colour PNG and TIFF by imagecodecs (the ``deep`` extra), with the same results as
Pillow's (at full depth for 16-bit colour); ``CONVCLI_FAST_CODECS=0`` in the environment
leaves every file to Pillow.

Files out: :mod:`convcli.io.image_files`.
"""

from __future__ import annotations

import functools
import inspect
import os
import shutil
import stat
import struct
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from ..choices import DEFAULT_MAX_PIXELS
from ..errors import ImageError, PixelLimitError  # noqa: F401 (imported from here)
from .apng import CompositedFrames
from .carried import NOTHING, Carried, from_pillow
from .decoders import (
    ORIENTATION,
    apng_frame_controls,
    channels_for,
    cmyk_note,
    deep_colour,
    deep_note,
    exif_upright,
    fast_jpeg,
    frame_loss_note,
    mend_pillow,
    narrow_key,
    narrow_note,
    narrowed_bits,
    narrowed_by_pillow,
    pillow_geo_notes,
    sample_bytes_for,
    stack_samples,
    stored_size,
    to_array,
    unidentified_reason,
)
from .formats import load, starts_as_tiff
from .frames import chosen_image
from .gif import frame_seeker
from .heif import HEIF_EXTENSIONS, opened
from .limits import MAX_SIDE, check_page, check_pixels, check_stack_pixels  # noqa: F401

# Formats Pillow registers but cannot decode without extra software.
_UNDECODABLE = {"MPEG"}


STACK_FORMATS = frozenset({"TIFF", "GIF", "WEBP", "PNG"})
"""The formats (Pillow's names) whose frames are the batch axis m: multi-page TIFF,
animated GIF, WebP and PNG."""


@functools.cache
def image_extensions() -> frozenset[str]:
    """Lower-case extensions (with the dot) of the formats Pillow can decode here.

    Found on first use: ``Image.open`` of a named file loads the one plugin it needs.
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
    return suffix in image_extensions() or suffix in HEIF_EXTENSIONS


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
    carried : Carried
        The file's colour profile, resolution and EXIF (:mod:`convcli.io.carried`).
    floats : bool
        The file holds float samples (a float TIFF or Zarr store, a Pillow "F" image).
    """

    samples: np.ndarray
    channels: tuple[str, ...]
    white: float
    depth: int
    notes: tuple[str, ...] = ()
    carried: Carried = NOTHING
    floats: bool = False

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


class ImageSource:
    """An opened image file whose pixels have not been decoded yet.

    Made by :func:`open_image`; :attr:`size` and :attr:`channels` come from the
    header, :meth:`read` decodes, if the frame it decodes is within `max_pixels`.
    """

    def __init__(self, im: Image.Image, path: str, max_pixels: int = DEFAULT_MAX_PIXELS):
        self._im = im
        self.path = path
        self.max_pixels = max_pixels
        mend_pillow(im)
        self.channels = channels_for(im)
        self.sample_bytes = sample_bytes_for(im.mode)
        self.size = stored_size(im)  # (width, height) before the EXIF orientation

    @functools.cached_property
    def frame_count(self) -> int:
        """The frames of the file: pages of a TIFF, frames of a GIF, WebP or APNG (not its
        default image, unless a frame; its chunks are walked to count them, once). 1 for the
        other formats, whose further images are no frames of a stack (the preview or depth map
        of a phone's MPO JPEG, the sizes of an icon): ``read()`` takes their first."""
        if self._im.format not in STACK_FORMATS:
            return 1
        with _pillow_errors(parsing=True):
            count = getattr(self._im, "n_frames", 1)
        if self._im.format == "PNG" and count > 1:  # acTL's count is only the file's word
            count = min(count, self.first_frame + apng_frame_controls(self.path))
        return count - self.first_frame

    @property
    def first_frame(self) -> int:
        """Pillow's index of frame 0: 1 past an APNG's default image, else 0."""
        return int(bool(self._im.format == "PNG" and self._im.info.get("default_image")))

    @property
    def stack_carried(self) -> Carried:
        """What its frames are written with: a TIFF's pages upright (Pillow turns them)."""
        with _pillow_errors(parsing=True):
            self._im.seek(self.first_frame)  # the first frame's, where frame_sizes left another
            return from_pillow(self._im, upright=self._im.format == "TIFF")

    @property
    def loop(self) -> int | None:
        """How many times an animation plays (0: for ever), or None where the file does not say;
        a GIF's count is of the plays after the first (as browsers play it), none: once."""
        gif, loop = self._im.format == "GIF", self._im.info.get("loop")
        if not isinstance(loop, (int, np.integer)):
            return 1 if gif else None
        return int(loop) + (gif and loop > 0)

    def frame_sizes(self, frames: tuple[int, ...]) -> list[tuple[int, int]]:
        """(width, height) of each of `frames`, from the headers: a TIFF's own pages, an
        animation's canvas."""
        if self._im.format != "TIFF":
            return [self.size] * len(frames)
        sizes = []
        for k in frames:
            with _frame_errors(k, self.frame_count, self.path):
                self._im.seek(k)
                sizes.append(self._im.size)
        return sizes

    def read_frames(self, frames: tuple[int, ...]) -> Iterator[tuple[Picture, int | None]]:
        """Decode `frames`, in order: each a :class:`Picture` and its duration (ms) or None.

        A frame of an animation is the canvas a viewer shows, composited as the file says (by
        Pillow; an APNG's by :mod:`convcli.io.apng`, 16-bit at 16 bits), as stored; a TIFF's
        page is turned upright, with its own metadata. Every frame has the first's channels,
        read by Pillow (8 bits for colour, said in a 16-bit frame's notes). An error names
        the frame."""
        count = self.frame_count
        apng = CompositedFrames.of(self.path) if self._im.format == "PNG" and count > 1 else None
        seek = frame_seeker(self._im, self.path)  # a GIF's frames each disposed of as it says
        for k in frames:
            with _frame_errors(k, count, self.path):
                if apng is not None:  # its canvas checked before it is made
                    check_pixels(self._im.size, self.max_pixels)
                    pixels, white, depth, notes, duration = apng.picture(k, self.channels)
                    carried = NOTHING
                else:
                    seek(k + self.first_frame)
                    check_pixels(self._im.size, self.max_pixels)
                    im, deep = self._im, narrowed_bits(self._im) > 8  # before load()
                    carried = from_pillow(im) if im.format == "TIFF" else NOTHING  # its own
                    geo_lost = pillow_geo_notes(im)  # before load(), which turns a TIFF
                    im.load()
                    duration = im.info.get("duration")
                    lost = frame_loss_note(im, channels_for(im), self.channels) + geo_lost
                    lost += narrow_key(im) if deep else ()  # 16-bit: Pillow's 8 bits, no key
                    pixels, white, depth = to_array(im, self.channels)
                    why = "imagecodecs reads no animations"
                    notes = (narrow_note(self.channels, why),) * deep + lost
            yield (
                Picture(pixels, self.channels, white, depth, notes, carried),
                round(duration) if isinstance(duration, (int, float)) else None,
            )

    @property
    def upright_size(self) -> tuple[int, int]:
        """(width, height) of the picture :meth:`read` gives: the EXIF orientation applied."""
        width, height = self.size
        with _pillow_errors(parsing=True):
            orientation = self._im.getexif().get(ORIENTATION, 1)
        return (height, width) if orientation in (5, 6, 7, 8) else (width, height)

    def read(self) -> Picture:
        """Decode the first frame into a :class:`Picture`.

        Raises
        ------
        ImageError
            If the file is truncated or corrupt; :class:`PixelLimitError` if the frame is
            over the pixel limit (a GIF's first frame may be larger than its header says).
        """
        im = self._im
        notes = [*narrowed_by_pillow(im)]  # before load()
        # Everything that makes Pillow parse the file is guarded: counting the
        # frames reads every frame header (a truncated GIF or TIFF fails there).
        with _pillow_errors(parsing=True):
            frames = getattr(im, "n_frames", 1)
            if frames > 1:
                notes.append(chosen_image(im, frames))
            check_pixels(im.size, self.max_pixels)  # a GIF's first frame may outgrow its header
            decoded, white, depth = None, 255.0, 8
            if (bits := narrowed_bits(im)) > 8:  # before load(), which forgets the layout
                (decoded, white), depth = deep_colour(im, self.path, self.channels, bits), 16
                if decoded is None:
                    notes += [deep_note(im, self.channels, bits), *narrow_key(im)]
            elif frames == 1:
                decoded = fast_jpeg(im, self.path)
            carried = from_pillow(im)  # after narrowed_bits: Pillow's EXIF loads a PNG
            notes += pillow_geo_notes(im)
            if decoded is not None:
                upright = exif_upright(decoded, im.getexif().get(ORIENTATION, 1))
                if upright.dtype == np.uint8 and upright.flags.c_contiguous:
                    samples = upright.reshape(upright.shape[:2] + (-1,))  # kept as integers
                else:
                    samples = upright.astype(np.float32).reshape(upright.shape[:2] + (-1,))
                return Picture(samples, self.channels, white, depth, tuple(notes), carried)
            with _pillow_errors(tiff=self.path):  # a TIFF layout Pillow lacks is said
                im.load()
            ImageOps.exif_transpose(im, in_place=True)  # no copy when upright
        with _pillow_errors():
            samples, white, depth = to_array(im, self.channels, integers=True)
            notes += cmyk_note(im)
        return Picture(
            samples, self.channels, white, depth, tuple(notes), carried, floats=im.mode == "F"
        )


# What Pillow's plugins raise, besides OSError and friends, when they parse a
# corrupt or truncated header (a GIF's frame blocks, a TIFF's tags): only
# caught around Pillow's parsing, where they cannot come from convcli's own code.
_PARSING_ERRORS = (IndexError, KeyError, TypeError, struct.error)


@contextmanager
def _pillow_errors(
    *, parsing: bool = False, tiff: str | None = None, frame: int = 0
) -> Iterator[None]:
    """Turn Pillow's errors about bad files into ImageError (one line each).

    With `parsing`, also the errors in :data:`_PARSING_ERRORS` that Pillow's
    plugins let through from a corrupt header. With `tiff` (the file's path),
    a layout Pillow does not know (it cannot identify the file, parse the
    page's layout or set up its decoder) of a TIFF that tifffile parses is
    said as :func:`convcli.io.tiff_pages.unread_error` says it (page `frame`).
    """
    try:
        yield
    except ImageError:
        raise  # convcli's own, such as the pixel limit
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageError(f"image too large (Pillow's decompression-bomb check): {exc}") from None
    except UnidentifiedImageError:
        unknown = "not an image file (Pillow cannot identify its format)"
        broken = tiff and unidentified_reason(tiff)
        unknown = ImageError(f"cannot decode the image: {broken}" if broken else unknown)
        raise _unread_tiff(tiff, frame) or unknown from None
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except (OSError, SyntaxError, EOFError, ValueError) as exc:
        # Pillow reports truncated and corrupt data with these; a layout it lacks with the last.
        unread = None if isinstance(exc, (OSError, EOFError)) else _unread_tiff(tiff, frame)
        raise unread or ImageError(f"cannot decode the image: {_reason(exc)}") from None
    except _PARSING_ERRORS as exc:
        if not parsing:
            raise
        raise ImageError(f"cannot decode the image: {_reason(exc)}") from None


def _unread_tiff(path: str | None, frame: int) -> ImageError | None:
    """:func:`convcli.io.tiff_pages.unread_error` of `path` where it starts as a TIFF, else None."""
    if path is None or not starts_as_tiff(path):
        return None
    return load("tiff pages").unread_error(path, frame)


@contextmanager
def _frame_errors(frame: int, count: int, path: str | None = None) -> Iterator[None]:
    """:func:`_pillow_errors` of one frame's decoding (of file `path`), the message naming
    the frame."""
    try:
        with _pillow_errors(parsing=True, tiff=path, frame=frame):
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
    tiff = starts_as_tiff(shown)  # tifffile is loaded only for a file that starts as a TIFF
    pages = load("tiff pages").open_tiff_pages(shown) if tiff else None
    if pages is not None:
        with closing(TiffSource(pages, shown, max_pixels)) as source:
            check_page(pages, 0, max_pixels)
            yield source
        return
    _pillow_limit_off()
    with _pillow_image(shown, tiff) as im:
        check_pixels(im.size, max_pixels)
        yield ImageSource(im, shown, max_pixels)


@contextmanager
def _pillow_image(path: str, tiff: bool) -> Iterator[Image.Image]:
    """`path` opened by Pillow, a `tiff` from a file object (closed with the image).

    Given a name, Pillow memory-maps an uncompressed page of one strip, laid out at the size
    it reports: for a TIFF turned by its Orientation (5 to 8) that is the size once turned,
    and a grey, palette, 16-bit or RGBA page comes out scrambled. From a file object Pillow
    decodes the page as stored, then turns it. Other files keep the map (a large PPM or BMP).
    """
    with open(path, "rb") if tiff else nullcontext(path) as file:
        with _pillow_errors(tiff=path):
            im = opened(file)
        with im:
            yield im


class TiffSource:
    """A TIFF opened by :func:`open_image`, with :class:`ImageSource`'s attributes and methods.

    Its pages are read by the TIFF reader of the strips
    (:class:`convcli.io.tiff_pages.TiffPages`), which gives a whole read, a frame
    and a band of rows the same values; a page of a layout that reader leaves
    (JPEG, palette, CMYK, ...) is read by Pillow, as the file's other frames
    would be. TIFF pages have no duration and no EXIF orientation other than
    top-left (other orientations are Pillow's).
    """

    loop, first_frame = None, 0  # page 0 is frame 0

    def __init__(self, pages, path: str, max_pixels: int = DEFAULT_MAX_PIXELS):
        self._pages = pages
        self._pillow_source: ImageSource | None = None
        self._opened = ExitStack()  # the file Pillow reads its pages from
        self.path, self.max_pixels = path, max_pixels
        self.channels, self.sample_bytes = pages.channels, pages.sample_bytes
        self.stack_carried = pages.carried
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
                check_page(self._pages, k, self.max_pixels)
                read = self._pages.read_page(k)
            if read is None:
                yield next(self._pillow().read_frames((k,)))
                continue
            samples, white, depth, floats, notes = read
            carried = self._pages.page_carried(k)
            yield Picture(samples, self.channels, white, depth, notes, carried, floats), None

    def read(self) -> Picture:
        """Decode the first page into a :class:`Picture`, as :meth:`ImageSource.read`."""
        count = self.frame_count
        samples, white, depth, floats, notes = self._pages.read_page(0)
        notes = ((f"used the first of {count} frames",) if count > 1 else ()) + notes
        return Picture(samples, self.channels, white, depth, notes, self._pages.carried, floats)

    def _pillow(self) -> ImageSource:
        """The file opened by Pillow, for the pages the TIFF reader leaves to it."""
        if self._pillow_source is None:
            im = self._opened.enter_context(_pillow_image(self.path, tiff=True))
            self._pillow_source = ImageSource(im, self.path, self.max_pixels)
            self._pillow_source.channels = self.channels
            self._pillow_source.frame_count = self.frame_count  # its pages, counted already
        return self._pillow_source

    def close(self) -> None:
        self._pages.close()
        self._opened.close()


def read_image(path: str | os.PathLike, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> Picture:
    """Open, check and decode an image file in one call (see :func:`open_image`)."""
    with open_image(path, max_pixels=max_pixels) as source:
        return source.read()


def read_stack(path: str | os.PathLike, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> Picture:
    """Every frame of a file as one picture whose pixels are (m, H, W, C); a one-frame file's
    picture as :func:`read_image` gives it, (H, W, C).

    The frames are read as :meth:`ImageSource.read_frames` reads them, their notes kept (each
    once, after the count); an ImageError if they differ in size.
    """
    with open_image(path, max_pixels=max_pixels) as source:
        count = source.frame_count
        if count == 1:
            return source.read()
        check_stack_pixels(source.frame_sizes(tuple(range(count))), max_pixels)
        frames = [pic for pic, _ in source.read_frames(tuple(range(count)))]
    if len({f.pixels.shape for f in frames}) > 1:
        raise ImageError(f"its {count} frames differ in size: a stack needs frames of one size")
    depth, floats = max(f.depth for f in frames), any(f.floats for f in frames)
    return Picture(
        stack_samples(frames, depth, floats),  # an 8-bit frame among 16-bit ones widened
        frames[0].channels,
        max(f.white for f in frames),
        depth,
        (f"{count} frames", *dict.fromkeys(note for f in frames for note in f.notes)),
        floats=floats,
    )
