"""What names and marks convcli's files: the output formats, the ownership marker, the
Zarr store name.

The lowest module of :mod:`convcli.io`: it imports nothing of convcli's, and
loads the modules that import tifffile on first use (:func:`load`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

MARKER = "convcli"
"""What every image convcli writes carries in its metadata, so that ``--overwrite``
replaces only convcli's own files: the PNG text chunk ``Software``, the TIFF tag
Software (305), a JPEG comment (COM) of its own after the input's, a Zarr store's
attributes. Metadata only: the pixels are not touched."""


@dataclass(frozen=True)
class Format:
    """An output format (``--format``).

    Attributes
    ----------
    extension : str
        The file extension, without the dot.
    raw : bool
        One file of raw float32 values per input, instead of image levels per channel.
    max_depth : int
        The deepest samples the format holds: 16, or 8 (JPEG).
    floats : bool
        Whether it holds float32 values as they are (``--normalize none``).
    folder : bool
        Whether an output is a folder (a Zarr store), not a file.
    pillow : str or None
        The Pillow writer of a whole image (PNG and JPEG: levels and what they carry
        through :func:`convcli.io.image_files.save_levels`), or None.
    strips : bool
        Whether :func:`convcli.io.row_writers.open_row_writer` writes it a strip of
        rows at a time (an image larger than memory).
    stacks : bool
        Whether one file holds a stack of frames of one size (animated PNG, TIFF
        pages, ``.npy``); the others are written a file per frame.
    by_rows : bool
        Whether an image is written by :func:`convcli.io.row_writers.open_row_writer`,
        whole or in strips alike: the same file, tiles, compression and reduced levels
        whatever the memory budget (TIFF, Zarr).
    alpha : bool
        Whether an image's alpha is written with its colours (JPEG has none).
    """

    extension: str
    raw: bool = False
    max_depth: int = 16
    floats: bool = False
    folder: bool = False
    pillow: str | None = None
    strips: bool = True
    stacks: bool = True
    by_rows: bool = False
    alpha: bool = True


FORMATS = {
    "png": Format("png", pillow="PNG"),
    "jpg": Format("jpg", max_depth=8, pillow="JPEG", strips=False, stacks=False, alpha=False),
    "tiff": Format("tiff", floats=True, pillow="TIFF", by_rows=True),
    "npy": Format("npy", raw=True, floats=True),
    "zarr": Format("zarr", floats=True, folder=True, stacks=False, by_rows=True),
}
"""The output formats by ``--format`` name (:data:`convcli.choices.FORMAT_NAMES`, a test
checks); PNG and JPEG images are written by
:func:`convcli.io.image_files.save_levels`, the raw one by :func:`convcli.io.image_files.save_npy`,
TIFFs and Zarr stores by :func:`convcli.io.row_writers.open_row_writer`, as the strips
write them."""


STORE_EXTENSION = ".zarr"
"""The extension of a Zarr store's folder."""

TIFF_SIGNATURES = (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+")
"""The first four bytes of a TIFF (``*``) or BigTIFF (``+``), little- or big-endian."""

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
"""The first eight bytes of every PNG."""


def extension_of_bytes(head: bytes) -> str:
    """The extension that the first bytes of an image file say it has (``.jpg``, ``.png``,
    ``.tif``, ``.gif``, ``.webp``, ``.bmp``), or "" where they say none of these: standard
    input has no name to tell it by.

    >>> extension_of_bytes(b"\\xff\\xd8\\xff\\xe0"), extension_of_bytes(b"II*\\0")
    ('.jpg', '.tif')
    >>> extension_of_bytes(b"?")
    ''

    """
    if head.startswith(b"\xff\xd8\xff"):
        return ".jpg"
    if head.startswith(PNG_SIGNATURE):
        return ".png"
    if head[:4] in TIFF_SIGNATURES:
        return ".tif"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return ".gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return ".webp"
    if head.startswith(b"BM"):
        return ".bmp"
    return ""


"""The first four bytes of a TIFF (``*``) or BigTIFF (``+``), little- or big-endian."""


def store_attributes_marked(attrs) -> bool:
    """Whether a Zarr group's attributes carry convcli's marker: a ``"convcli"`` object,
    which convcli writes last, once every level of the store is in place."""
    return isinstance(attrs, dict) and isinstance(attrs.get("convcli"), dict)


def tiff_page_tags(channels: int, dtype) -> dict:
    """The tags of every TIFF page convcli writes, as tifffile's ``write`` options.

    Contiguous samples (grey, grey + alpha, RGB, RGBA: the alpha unassociated),
    TIFF's compression 8 (Adobe deflate, which libtiff, Pillow, vips and every
    viewer read) with the horizontal predictor for levels, and the Software tag
    that marks convcli's files.

    >>> import numpy as np
    >>> sorted(tiff_page_tags(4, np.dtype(np.uint8)).items())[:3]
    [('compression', 8), ('extrasamples', ['unassalpha']), ('metadata', None)]
    """
    tags = {
        "photometric": "rgb" if channels >= 3 else "minisblack",
        "planarconfig": "contig",
        "compression": 8,
        "software": MARKER,
        "metadata": None,
    }
    if channels in (2, 4):
        tags["extrasamples"] = ["unassalpha"]
    if dtype.kind == "u":  # a numpy dtype
        tags["predictor"] = 2  # horizontal differencing
    return tags


CLASSIC_TIFF_BYTES = 2**32 - 2**25
"""The most bytes a TIFF output is written as a classic TIFF in (32-bit offsets): tifffile's
own margin under 4 GiB."""


def bigtiff_needed(sample_bytes: int, pieces: int, pages: int, metadata_bytes: int) -> bool:
    """Whether a TIFF of `sample_bytes` of samples, deflated in `pieces` tiles or strips on
    `pages` pages that each carry `metadata_bytes` (profile, XMP, IPTC), might pass
    :data:`CLASSIC_TIFF_BYTES`: deflate stores what it cannot shrink (well under 0.1% more,
    and a zlib header a piece), a page's tags take up to 4 KB and its offsets 16 bytes a
    piece. A classic TIFF otherwise, as GDAL and libvips write: every TIFF reader opens one,
    where older readers (and Windows' own viewers) open no BigTIFF.
    """
    stored = sample_bytes + sample_bytes // 1000 + 80 * pieces
    return stored + pages * (metadata_bytes + 4096) > CLASSIC_TIFF_BYTES


def file_head(path, size: int) -> bytes:
    """The first `size` bytes of the file `path` (fewer in a shorter file), or none where
    it cannot be read (or the image came from no file: Pillow's filename "")."""
    try:
        with open(path, "rb") as fh:
            return fh.read(size)
    except (OSError, TypeError):
        return b""


def starts_as_tiff(path) -> bool:
    """Whether the file `path` starts as a TIFF or BigTIFF does (:data:`TIFF_SIGNATURES`).

    Only its first four bytes are read; OSError where they cannot be.
    """
    with open(path, "rb") as fh:
        return fh.read(4) in TIFF_SIGNATURES


def is_store_name(path) -> bool:
    """Whether `path` names a Zarr store (``.zarr``, any case, a trailing slash allowed).

    >>> is_store_name("scan.ZARR"), is_store_name("s3://b/scan.zarr/"), is_store_name("a.png")
    (True, True, False)
    """
    return str(path).rstrip("/\\").lower().endswith(STORE_EXTENSION)


_LOADED = {
    "region reader": "convcli.io.regions",  # TIFF and Zarr rows by bands; tifffile
    "tiff pages": "convcli.io.tiff_pages",  # TIFF pages read whole by the same code; tifffile
    "tiff writer": "convcli.io.tiff_writer",  # tiled BigTIFF outputs; tifffile
    "row writer": "convcli.io.row_writers",  # TIFF and Zarr outputs, whole or in strips
    "zarr stores": "convcli.io.zarr_stores",  # Zarr stores in and out
}


def load(part: str):
    """The module of convcli's `part` (a key of :data:`_LOADED`), imported on first use.

    The TIFF modules import tifffile (about a tenth of a second, in each worker
    process), and the writers of rows and stores a dozen modules more: a folder
    of JPEGs and PNGs written as PNG never loads them.

    >>> load("region reader").__name__
    'convcli.io.regions'
    """
    return importlib.import_module(_LOADED[part])


def open_regions(path, **options):
    """:func:`convcli.io.regions.open_regions` (a TIFF or Zarr store read by bands of rows,
    or None), its module loaded on first use (:func:`load`)."""
    return load("region reader").open_regions(path, **options)
