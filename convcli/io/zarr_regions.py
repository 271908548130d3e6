"""Reading a Zarr store by row bands (``*.zarr``, the ``zarr`` extra; written by
:mod:`convcli.io.zarr_stores`, which imports the ``zarr`` package for both).

:func:`open_store_regions` opens a store as a source of row bands, like
:func:`convcli.io.regions.open_regions` for a TIFF; only the chunks that hold a
band are read. A store is either

- an array, (H, W) or (H, W, C), or
- an OME-Zarr image (a group with ``multiscales`` metadata, version 0.4, or
  0.5 under ``ome``): its first dataset, the full resolution, with axes
  among t, c, z, y, x; the first time point and plane are read, the channel
  axis moved last.

C is 1 to 4 (L, L A, R G B, R G B A); an OME-Zarr image's channels are no alpha
(OME-NGFF has none), unless labelled so as convcli labels them, and other labels
are said as not kept. Samples are uint8 (white 255, depth 8),
uint16 (65535, 16) or float32 (white the larger of 1 and the largest finite
value, depth 16, as for a float TIFF).
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import ImageError
from .bands import check_rows, float_white
from .carried import NOTHING, Carried
from .ome import physical_of
from .physical import PhysicalSize
from .spill import SegmentRows
from .storage import filesystem, is_url
from .zarr_stores import require_zarr

CHANNEL_NAMES = {1: ("L",), 2: ("L", "A"), 3: ("R", "G", "B"), 4: ("R", "G", "B", "A")}
"""The channels of an image with 1 to 4 samples per pixel, as Pillow names them."""

_DEPTHS = {
    np.dtype(np.uint8): (255.0, 8),
    np.dtype(np.uint16): (65535.0, 16),
    np.dtype(np.float32): (None, 16),
}  # white (None: from the values), depth
_AXES = frozenset("tczyx")


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
        store = zarr.storage.FsspecStore.from_url(
            shown, storage_options=storage_options, read_only=True
        )
    else:
        if not os.path.isdir(shown):
            os.listdir(shown)  # the OSError of a missing folder, or of a file
        store = zarr.storage.LocalStore(shown, read_only=True)
    try:
        node = zarr.open(store=store, mode="r")
    except (FileNotFoundError, ValueError, KeyError, TypeError) as exc:
        raise ImageError(f"not a Zarr array or OME-Zarr image ({_first_line(exc)})") from None
    array, axes, physical, labels = _full_resolution(zarr, node)
    carried = Carried(physical=physical) if physical else NOTHING
    regions = StoreRegions(array, axes, carried, labels)
    if "georeference" in node.attrs:  # convcli's own attribute, which it does not read back
        regions.notes += ("georeference not kept: convcli reads none from a Zarr store",)
    return regions


def _ome_attribute(attrs: dict, name: str):
    """An OME-Zarr group's attribute `name`: at the top (0.4) or under ``ome`` (0.5)."""
    return attrs.get(name) or (attrs.get("ome") or {}).get(name)


def _labels_note(labels: tuple | None, channels: tuple[str, ...]) -> tuple[str, ...]:
    """The note of an OME-Zarr image's channel `labels` that the channels read as
    (`channels`) do not keep; an ImageError where the image would be read with alpha (2 or
    4 channels) but its labels are not convcli's L A or R G B A: OME-NGFF has no alpha."""
    if labels is None or labels == channels:
        return ()
    shown = ", ".join(labels) if len(labels) == len(channels) and all(labels) else ""
    if "A" in channels:
        raise ImageError(
            f"an OME-Zarr image of {len(channels)} channels{f' ({shown})' if shown else ''}, "
            "none of them alpha: convcli reads OME-Zarr images of 1 or 3 channels, and of "
            f"{len(channels)} labelled {', '.join(channels)} as it writes them (alpha last)"
        )
    return (f"channel names not kept: {shown} read as {', '.join(channels)}",) if shown else ()


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _full_resolution(zarr, node) -> tuple[object, tuple[str, ...], PhysicalSize | None, tuple]:
    """The array to read, its axes' names, physical size and channel labels: the node itself
    (no labels: None), or an OME image's level 0 (:func:`convcli.io.ome.physical_of`) and
    its ``omero`` channels' labels (none given: empty)."""
    if isinstance(node, zarr.Array):
        if node.ndim not in (2, 3):
            raise ImageError(
                f"a Zarr array of {node.ndim} dimensions: convcli reads "
                "(height, width) or (height, width, channels)"
            )
        return node, ("y", "x", "c")[: node.ndim], None, None
    attrs = dict(node.attrs)
    scales = _ome_attribute(attrs, "multiscales")
    try:
        image = scales[0]
        array = node[str(image["datasets"][0]["path"])]
        axes = image.get("axes") or ("t", "c", "z", "y", "x")  # before OME-Zarr 0.4
        axes = tuple(str(a["name"] if isinstance(a, dict) else a).lower() for a in axes)
    except (TypeError, KeyError, IndexError, ValueError):
        raise ImageError(
            "a Zarr group that is not an OME-Zarr image (no multiscales metadata with a dataset)"
        ) from None
    if (
        not isinstance(array, zarr.Array)
        or len(axes) != array.ndim
        or not (set(axes) <= _AXES and {"y", "x"} <= set(axes) and len(set(axes)) == len(axes))
    ):
        raise ImageError(
            f"an OME-Zarr image with axes {', '.join(axes)}: convcli reads t, c, z, y, x"
        )
    omero = _ome_attribute(attrs, "omero") or {}
    channels = omero.get("channels") if isinstance(omero, dict) else None
    channels = channels if isinstance(channels, list) else []
    labels = tuple(str(c.get("label", "")) for c in channels if isinstance(c, dict))
    return array, axes, physical_of(image), labels


class StoreRegions:
    """A Zarr array read band by band (made by :func:`open_store_regions`).

    Attributes as :class:`convcli.io.regions.RegionSource`: ``height``,
    ``width``, ``channels``, ``white``, ``depth``, ``notes``, ``dtype``, and
    ``carried`` (an OME image's physical size, :func:`convcli.io.ome.physical_of`).
    The last two rows of chunks read are kept in ``kept_rows``
    (:class:`convcli.io.spill.SegmentRows`: on disk where wider than its ``spill_limit``),
    so that bands that overlap (a halo) read each chunk once when read top to bottom.
    """

    def __init__(
        self, array, axes: tuple[str, ...], carried: Carried = NOTHING, labels: tuple | None = None
    ):
        self._array, self._axes = array, axes
        size = dict(zip(axes, (int(n) for n in array.shape), strict=True))
        self.height, self.width = size["y"], size["x"]
        count = size.get("c", 1)
        if count not in CHANNEL_NAMES or 0 in array.shape:
            raise ImageError(
                f"a Zarr image of {count} channels, {self.width}x{self.height}: "
                "convcli reads 1 to 4 channels"
            )
        self.dtype = np.dtype(array.dtype)
        self.carried = carried  # an OME image's physical size
        self.floats = self.dtype.kind == "f"
        if self.dtype not in _DEPTHS:
            raise ImageError(
                f"a Zarr image of {self.dtype} samples: convcli reads uint8, uint16 or float32"
            )
        self.channels = CHANNEL_NAMES[count]
        self._white, self.depth = _DEPTHS[self.dtype]
        names = {"t": "time points", "z": "planes"}
        self.notes = tuple(
            f"used the first of {size[a]} {names[a]}" for a in "tz" if size.get(a, 1) > 1
        ) + _labels_note(labels, self.channels)
        self._step = int(array.chunks[axes.index("y")])
        self._chunk_columns = int(array.chunks[axes.index("x")])
        self.kept_rows = SegmentRows()

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
        check_rows(r0, r1, self.height)
        out = np.empty((r1 - r0, self.width, len(self.channels)), np.float32)
        step = self._step
        for k in range(r0 // step, -(-r1 // step)):
            top = k * step
            lo, hi = max(r0, top), min(r1, top + step)
            shape = (min(step, self.height - top), self.width, len(self.channels))
            out[lo - r0 : hi - r0] = self.kept_rows.read(
                k,
                lo - top,
                hi - top,
                shape=shape,
                dtype=self.dtype,
                tile=self._chunk_columns,
                decode=lambda c0, c1, values, k=k: self._decode(k, c0, c1, values),
            )
        return out

    def _decode(self, k: int, c0: int, c1: int, out: np.ndarray) -> None:
        """Chunk row `k`'s columns `c0` to `c1` - 1, as stored, into `out` (rows, c1 - c0, C)."""
        rows = slice(k * self._step, min((k + 1) * self._step, self.height))
        where = tuple(
            rows if a == "y" else slice(c0, c1) if a == "x" else 0 if a in "tz" else slice(None)
            for a in self._axes
        )
        try:
            values = np.asarray(self._array[where])
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            raise ImageError(f"cannot decode the image: {_first_line(exc)}") from None
        kept = [a for a in self._axes if a not in "tz"]
        values = np.moveaxis(values, [kept.index(a) for a in "yx"], [0, 1])
        out[:] = values if values.ndim == 3 else values[:, :, None]

    def close(self) -> None:
        """Forget the kept chunks (a store holds no open file)."""
        self.kept_rows.forget()

    def __enter__(self) -> StoreRegions:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
