"""What ``--max-pixels`` refuses besides one frame over it: a stack, and a file's empty promise.

:func:`convcli.io.images.check_pixels` checks each frame's size from its
header. Here, before anything is decoded or written:

- :func:`check_stack_pixels`: the frames a run reads of a file (``--frames``)
  are within ``--max-pixels`` together, not only one by one;
- :func:`check_stored`: a file (a TIFF's pages, a Zarr array) stores at least
  one byte of image data for every :data:`STORED_RATIO` bytes of samples it
  declares. No compression a TIFF or Zarr reader knows comes near that on
  real images (deflate's limit is about 1,032 to 1; zstd's on a tile of one
  value a few thousand): a file further from it, a TIFF whose tiles or
  strips are 0 bytes or a Zarr store with no chunks, holds a size and no
  image, and would only make large outputs of its fill value.

``--max-pixels 0`` lifts both, as it lifts the frame's limit.
"""

from __future__ import annotations

from ..errors import ImageError, PixelLimitError

MAX_SIDE = 2**31 - 1
"""The most rows or columns an image may have, whatever ``--max-pixels`` says."""

MAX_AREA = 2**58
"""The most pixels an image may have, whatever ``--max-pixels`` says: up to 4 float64
samples each, its values stay within the bytes numpy can address (2**63)."""

STORED_RATIO = 100_000
"""Bytes of samples a file may declare for each byte of image data it stores."""


def check_stack_pixels(sizes, max_pixels: int) -> None:
    """Raise :class:`PixelLimitError` if the frames of `sizes` ((width, height) each) have
    more than `max_pixels` pixels together (0: no limit).

    Examples
    --------
    >>> check_stack_pixels([(100, 100)] * 2, 20_000)
    >>> check_stack_pixels([(100, 100)] * 3, 20_000)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    convcli.errors.PixelLimitError: the 3 frames read are 30,000 pixels in all, over the ...
    """
    total = sum(width * height for width, height in sizes)
    if max_pixels > 0 and total > max_pixels:
        raise PixelLimitError(
            f"the {len(sizes)} frames read are {total:,} pixels in all, over the limit of "
            f"{max_pixels:,} for a stack's frames together"
        )


def check_stored(declared: int, stored: int, max_pixels: int) -> None:
    """Raise :class:`ImageError` if a file declaring `declared` bytes of samples stores fewer
    than ``declared / STORED_RATIO`` bytes of image data (`stored`); not where `max_pixels`
    is 0.

    Examples
    --------
    >>> check_stored(10_000_000, 1_000, 1)
    >>> check_stored(10_000_000, 0, 0)
    >>> check_stored(10_000_000, 0, 1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    convcli.errors.ImageError: declares 10,000,000 bytes of samples but stores 0 bytes of ...
    """
    if max_pixels > 0 and declared > STORED_RATIO * stored:
        raise ImageError(
            f"declares {declared:,} bytes of samples but stores {stored:,} bytes of image data "
            f"(under 1 byte for {STORED_RATIO:,}, more than any compression gives): refused "
            "(--max-pixels 0 reads it)"
        )


def check_pixels(size: tuple[int, int], max_pixels: int) -> None:
    """Raise :class:`PixelLimitError` if an image of `size` (width, height) is over `max_pixels`.

    0 means no limit. Every read checks it from the header, whole or in strips, before
    anything is decoded or written; a side over :data:`MAX_SIDE`, or more pixels than
    :data:`MAX_AREA`, is refused whatever `max_pixels` says.

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
    if max(width, height) > MAX_SIDE:
        raise ImageError(
            f"image is {width}x{height}: over the {MAX_SIDE:,} rows or columns "
            "an image can have here"
        )
    if width * height > MAX_AREA:
        raise ImageError(
            f"image is {width}x{height} = {width * height:,} pixels: over the {MAX_AREA:,} "
            "pixels an image can have here"
        )


def check_page(pages, k: int, max_pixels: int) -> None:
    """:func:`check_pixels` and :func:`check_stored` for page `k` of a TIFF's
    :class:`convcli.io.tiff_pages.TiffPages`, from its header."""
    check_pixels(pages.page_size(k), max_pixels)
    check_stored(*pages.page_bytes(k), max_pixels)
