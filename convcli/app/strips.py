"""An operation over row strips of an image too large to hold: the whole result, strip by strip.

The strips are bands of output rows of the full width. Each is computed by
the operation itself (:mod:`convcli.app.ops`, unchanged) on the band of input
rows its windows read, with a halo of rows above and below, and only the
output rows whose windows lie inside that band are kept. The values are
therefore those of the whole-image call, bit for bit: every output row is
computed from the same input values by the same code, and the layers compute
each row on its own (they run over row tiles themselves).

The halo rows that lie outside the image are the border the whole image
would get (``--border`` / ``pad --mode``: the rows ``np.pad`` gives, ``wrap``
included); pooling's padding holds no values (a window's maximum or mean is
of its real pixels), so its strips stop at the image's edges instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..io.carried import NOTHING, Carried
from ..io.images import Picture
from ..layers.padding import border_terms, sum_of_terms
from .geometry import RowGeometry


def in_strips(op) -> bool:
    """Whether `op` can be computed in row strips (conv, pool, pad; not the gradients)."""
    return not op.computed_whole


def row_geometry(op, height: int, width: int = 1) -> RowGeometry | None:
    """:meth:`row_geometry` of `op`: the :class:`RowGeometry` of an image of `height` x `width`.

    ``conv``, ``pool`` and ``pad`` have one; the gradients do not (None: they
    are computed whole).
    """
    return op.row_geometry(height, width)


def output_size(op, height: int, width: int) -> tuple[int, int]:
    """The (height, width) of `op`'s result on an image of `height` x `width`.

    Gradients are the input's size; a size below 1 means the image is too
    small for the window.

    >>> from convcli.app.pad_pool import PoolOp
    >>> output_size(PoolOp(size=2), 30, 41)
    (15, 20)
    """
    return op.output_size(height, width)


@dataclass(frozen=True)
class Strip:
    """One strip: output rows ``out0`` to ``out1 - 1`` from input rows ``in0`` to ``in1 - 1``.

    The input rows may reach beyond the image (the border, for a bordered
    geometry); ``skip`` is the first row of the operation's result to keep.
    """

    out0: int
    out1: int
    in0: int
    in1: int
    skip: int


def plan_strips(
    geometry: RowGeometry, height: int, rows_per_strip: int, band: tuple[int, int] | None = None
) -> list[Strip]:
    """The strips of `rows_per_strip` output rows (the last may have more) covering the result.

    With `band`, ``(out0, out1)``, only those output rows, from ``out0`` on:
    the bands of a result cut anywhere give the strips' rows, bit for bit.
    A result that one engine tile holds is one strip (and must be one band).
    """
    if rows_per_strip < 1:
        raise ValueError(f"rows_per_strip must be >= 1, got {rows_per_strip}")
    out0, out1 = band if band is not None else (0, geometry.out_rows)
    if geometry.out_rows <= geometry.align:  # one engine tile holds the whole result
        if (out0, out1) != (0, geometry.out_rows):
            raise ValueError(f"a result of {geometry.out_rows} rows is computed in one band")
        rows_per_strip = max(1, geometry.out_rows)
    starts = list(range(out0, out1, rows_per_strip))
    if len(starts) > 1 and out1 - starts[-1] < rows_per_strip:
        del starts[-1]  # the last strip takes the rest: none is shorter than the others
    ends = [*starts[1:], out1]
    return [_strip(geometry, height, out0, out1) for out0, out1 in zip(starts, ends, strict=True)]


def _strip(g: RowGeometry, height: int, out0: int, out1: int) -> Strip:
    """The input band of output rows `out0` to `out1` - 1.

    The operation's results on the band are computed in whole engine tiles
    (`align` rows, from a multiple of it). Its own pad above the band only
    reaches the tiles above the first one that holds `out0`, which are
    dropped, so every tile kept reads the image's rows (or its border) as
    the whole image's does, and is computed the same way. The band's end
    covers the last row of the tile holding `out1` - 1.
    """
    top = max(g.tops)
    above = -(-top // (g.align * g.stride)) * g.align  # the dropped tiles' rows
    first = out0 // g.align * g.align - above
    if not g.bordered:  # pooling's padding is the image's own above row 0
        first = max(0, out0 - -(-top // g.stride))
    last = min(g.out_rows, -(-out1 // g.align) * g.align) - 1
    end = max(last * g.stride - t + s for t, s in zip(g.tops, g.spans, strict=True))
    if not g.bordered:
        end = height if end >= height or out1 == g.out_rows else end
        # A last window that --ceil lets hang over the edge: the band holds a whole window.
        short = max(g.spans) - 2 * top - (end - first * g.stride)
        if short > 0:
            first = max(0, first - -(-short // g.stride))
    return Strip(out0, out1, first * g.stride, end, out0 - first)


def source_rows(in0: int, in1: int, height: int, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """What each row of ``in0 .. in1 - 1`` holds under the border `mode`: the image rows it
    reads and their weights, (in1 - in0, K) each; a row with no source (-1) holds the constant.

    Rows beyond the image read as :func:`convcli.layers.padding.border_terms` says.

    >>> source_rows(-2, 6, 4, "reflect")[0][:, 0].tolist()
    [2, 1, 0, 1, 2, 3, 2, 1]
    >>> source_rows(-1, 5, 4, "constant")[0][:, 0].tolist()
    [-1, 0, 1, 2, 3, -1]
    """
    before, after = max(0, -in0), max(0, in1 - height)
    terms = border_terms(height, before, after, mode)  # from row -before on
    rows = slice(in0 + before, in1 + before)
    return terms.sources[rows], terms.weights[rows]


def source_picture(source, pixels: np.ndarray) -> Picture:
    """A picture of `pixels` (rows of `source`, or an array standing for them) with the
    source's channels, white, depth, notes, what it carries and whether it holds floats."""
    return Picture(
        pixels,
        source.channels,
        source.white,
        source.depth,
        source.notes,
        source.carried,
        source.floats,
    )


def strip_results(
    op, source, *, rows_per_strip: int, band: tuple[int, int] | None = None
) -> Iterator[tuple[Strip, np.ndarray]]:
    """``op.compute`` of the whole image, a strip of output rows at a time.

    Parameters
    ----------
    op : ConvOp, PoolOp or PadOp
    source
        The image: ``height``, ``width``, ``channels``, ``white``, ``depth``,
        ``notes`` and ``read_rows(r0, r1)``, the (r1 - r0, width, C) float32
        rows (a :class:`convcli.io.regions.RegionSource`, or
        :class:`PictureRows` over a picture in memory).
    rows_per_strip : int
        Output rows in each strip, at least.
    band : (int, int), optional
        Only output rows ``band[0] .. band[1] - 1`` (a task of a cluster's),
        in strips from ``band[0]`` on (:func:`plan_strips`).

    Yields
    ------
    strip : Strip
    rows : (strip.out1 - strip.out0, W_out, C_out) float32 ndarray
        Those rows of ``op.compute(picture)``, equal to them bit for bit.
    """
    geometry = row_geometry(op, source.height, source.width)
    if geometry is None:
        raise ValueError(f"{op.name} has no row geometry: it is computed whole")
    mode, fill = op.border_fill(source.channels, source.white)
    for strip in plan_strips(geometry, source.height, rows_per_strip, band):
        pixels = _band(source, strip, mode, fill)
        pic = source_picture(source, pixels)
        result = op.compute(pic)
        yield strip, result[strip.skip : strip.skip + strip.out1 - strip.out0]


def samples_picture(source) -> Picture:
    """A picture of none of `source`'s rows, its samples of the type strips read them in:
    what an operation can know of every strip's picture without its rows
    (:func:`convcli.app.ops.not_finite_count`)."""
    return source_picture(source, _sample_reader(source)(0, 0))


def _sample_reader(source):
    """``read_rows(r0, r1)`` of `source`'s samples as a whole read gives them (a TIFF's 8-bit
    values as stored, where it keeps them), else float32."""
    return getattr(source, "read_samples", source.read_rows)


def _band(source, strip: Strip, mode: str | None, fill: np.ndarray) -> np.ndarray:
    """The input rows of `strip`, those beyond the image made as the border `mode` makes them,
    in the samples' type (:func:`_sample_reader`) where they hold them, else float32."""
    read_rows = _sample_reader(source)
    if mode is None or (strip.in0 >= 0 and strip.in1 <= source.height):  # no border row
        return read_rows(strip.in0, strip.in1)
    sources, weights = source_rows(strip.in0, strip.in1, source.height, mode)
    read = sources >= 0
    needed = np.unique(sources[read])
    shape = (len(sources), source.width, fill.size)
    if needed.size == 0:
        return np.broadcast_to(fill, shape).copy()
    low = int(needed[0])
    if needed[-1] - low + 1 == needed.size:
        block = read_rows(low, int(needed[-1]) + 1)
    else:  # wrapped rows: read each run of consecutive rows once
        block = _read_runs(read_rows, needed, low)
    if block.dtype != np.float32 and not (
        np.all(fill == fill.astype(block.dtype)) and np.all(weights[read] == 1)
    ):
        block = block.astype(np.float32)  # a fill or border the samples cannot hold
    band = sum_of_terms(block, np.where(read, sources - low, -1), weights, axis=0)
    band[~read.any(axis=1)] = fill
    return band


def _read_runs(read_rows, needed: np.ndarray, low: int) -> np.ndarray:
    """Rows ``low ..`` where `needed` lists them, each run of consecutive rows read by
    ``read_rows(r0, r1)`` (other rows left unread)."""
    block = None
    for run in np.split(needed, np.flatnonzero(np.diff(needed) != 1) + 1):
        rows = read_rows(int(run[0]), int(run[-1]) + 1)
        if block is None:  # of the rows' own dtype
            block = np.empty((int(needed[-1]) - low + 1, *rows.shape[1:]), rows.dtype)
        block[run[0] - low : run[-1] + 1 - low] = rows
    return block


@dataclass(frozen=True)
class PictureRows:
    """A picture in memory read as rows, as :func:`strip_results` reads a region source."""

    pixels: np.ndarray
    channels: tuple[str, ...]
    white: float
    depth: int
    notes: tuple[str, ...] = ()
    carried: Carried = NOTHING
    floats: bool = False

    @classmethod
    def of(cls, pic) -> PictureRows:
        return cls(
            pic.pixels, pic.channels, pic.white, pic.depth, pic.notes, pic.carried, pic.floats
        )

    @property
    def height(self) -> int:
        return self.pixels.shape[0]

    @property
    def width(self) -> int:
        return self.pixels.shape[1]

    def read_rows(self, r0: int, r1: int) -> np.ndarray:
        return self.pixels[r0:r1]
