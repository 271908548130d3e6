"""One image too large for memory: read, computed, mapped and written in row strips.

:func:`process_in_strips` is the path of :mod:`convcli.app.process` for an
image that :func:`convcli.io.regions.open_regions` reads by row bands (TIFF,
BigTIFF, OME-TIFF, Zarr) when its work would not fit the memory budget
(``--memory``). The result equals the whole-image path's, value for value:

1. **Statistics.** A mapping that needs the whole map's (``robust``,
   ``minmax``, ``abs``, ``offset``) takes them in one or two passes over the
   strips (:class:`convcli.levels.stats.StreamedMapping`), computing them again;
   whether ``robust`` needs its second is known at the end of the first.
2. **Output.** A last pass computes each strip once more and hands its rows
   to every output, each written as it comes
   (:func:`convcli.io.row_writers.open_row_writer`): ``.npy``, PNG, a tiled
   BigTIFF with reduced levels, and an OME-Zarr store with the same levels.

Memory is that of a strip (its height from the budget), whatever the image's
size. Before anything is written, the outputs' size is checked against the
free disk space.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from ..io.figures import save_grid
from ..io.images import Picture
from ..io.row_writers import ROW_FORMATS, free_space_problem, open_row_writer, space_needed
from ..io.spill import spill_limit
from ..levels.mapping import LevelScale
from ..levels.stats import StreamedMapping, pass_indices
from .ops import not_finite_count
from .outputs import (
    carried_for,
    channels_of,
    kept_by,
    mapped_channels,
    mappings_for,
    output_array,
    output_depth,
    output_record,
    output_scales,
    store_place,
    written_as_values,
)
from .strips import row_geometry, samples_picture, source_picture, strip_results

STREAMED_FORMATS = ROW_FORMATS
"""The formats written in strips (JPEG is at most 65535 pixels a side)."""

STRIP_WORK = 128 << 20
"""The most bytes a strip's work takes, whatever the budget: larger strips gain nothing."""

MIN_STRIP_WORK = 8 << 20
"""The least bytes a strip's work takes, whatever the budget: a --memory below it is
raised to it for the strips' height. Smaller strips cost more in each strip's start
than they save (a 1249x977 photo under --memory 64K took 150 times its whole run)."""


def source_work_bytes(op, source) -> int:
    """About the memory `op`'s whole-image run on `source` takes (:mod:`convcli.app.work`)."""
    return op.work_bytes(source.height, source.width, len(source.channels), source.dtype.itemsize)


STRIP_WORK_FACTOR = 5
"""How many times the whole-image work of its rows a strip takes, at most: its halo, the
rows of tiles decoded and kept, the rows the writers hold and the levels' statistics.
Measured on 3000-pixel-wide TIFFs (grey conv 3.4, grey average pool 1.8, RGB conv by
channel 3.5, RGB pad 2.3 times, beyond about 10-35 MB the strips take whatever their
height)."""


def rows_for_budget(op, source, budget: int) -> int:
    """Output rows of a strip whose work fits `budget` bytes: a multiple of the engine's row
    tile (:attr:`convcli.app.geometry.RowGeometry.align`), at least one tile.

    A strip computes whole engine tiles whatever its height, so that its rows
    equal the whole image's; a strip of fewer rows than a tile would compute a
    tile for each, a 2500-row image of 10-row strips 24 times over.
    """
    geometry = row_geometry(op, source.height, source.width)
    per_output_row = source_work_bytes(op, source) / max(1, geometry.out_rows)
    rows = int(budget // max(1.0, STRIP_WORK_FACTOR * per_output_row))
    return max(1, rows // geometry.align) * geometry.align


def shape_only(source) -> Picture:
    """A picture of the source's size and kind whose pixels take no memory."""
    pixels = np.broadcast_to(np.float32(0), (source.height, source.width, len(source.channels)))
    return source_picture(source, pixels)


def check_strips(task, source) -> Picture:
    """A ValueError (one line) if `task` cannot be done in strips; else a shape-only picture."""
    whole = shape_only(source)
    task.op.check(whole)
    if task.fmt not in STREAMED_FORMATS:
        raise ValueError(
            f"an image this large ({source.width}x{source.height}) is processed "
            f"in strips, which write {', '.join(STREAMED_FORMATS)}, not "
            f"{task.fmt}: give --format png, tiff or zarr"
        )
    return whole


def plan_in_strips(task, source, todo, budget: int):
    """The outputs `todo` of `task` sorted for strips, and their plans, checked for disk space.

    Returns the ``--figure`` outputs, the other outputs, the output rows of a
    strip, the result's size and the :class:`_Outputs` that write them.
    """
    whole = check_strips(task, source)
    grids = [out for out in todo if out.kind == "grid"]
    files = [out for out in todo if out.kind != "grid"]
    rows = rows_for_budget(task.op, source, min(max(budget, MIN_STRIP_WORK), STRIP_WORK))
    size = _result_size(task.op, source)
    # each output's bands in its share of the budget
    limit = spill_limit(budget // max(1, len(files)))
    plans = _Outputs(task, whole, files, size, limit, samples_picture(source))
    plans.check_space(Path(task.out_dir))
    return grids, files, rows, size, plans


def save_overviews(
    grids, task, source, overview, depth: int, written: list[str], records: list[dict]
) -> None:
    """Draw the ``--figure`` outputs `grids` from `overview`, each recorded once in place."""
    for out in grids:
        if _save_overview(out.path, task, source, overview):
            written.append(str(out.path))
            records.append(output_record(out, [], depth))


def process_in_strips(
    task, source, todo, *, budget: int, timings: dict, written: list[str], records: list[dict]
) -> int:
    """Write the outputs `todo` of `task` from `source`, strip by strip.

    Each output written is added to `written` and its manifest record to
    `records` as soon as it is in place. Returns the number of non-finite
    result values. Raises ValueError (one line) for what cannot be written in
    strips, or an output that would not fit the free disk space.
    """
    op, start = task.op, time.perf_counter()
    grids, files, rows, size, plans = plan_in_strips(task, source, todo, budget)
    if hasattr(source, "kept_rows"):  # a file's rows of tiles: in memory where they fit
        source.kept_rows.spill_limit = spill_limit(budget)
    for pass_index in pass_indices(plans):
        for strip, result in strip_results(op, source, rows_per_strip=rows):
            plans.add(pass_index, strip.out0, result)
    strips, overview = strip_results(op, source, rows_per_strip=rows), None
    if grids:  # block means of the result as it is written, for the overview
        overview = _Overview(_overview_factor(source.height, source.width), size[1], size[2])
        strips = (overview.add(result) or (strip, result) for strip, result in strips)
    not_finite = plans.write(strips, written, records)
    save_overviews(grids, task, source, overview, plans.depth, written, records)
    timings["compute"] = time.perf_counter() - start
    return not_finite


OVERVIEW_SIDE = 1000
"""The longest side of each picture in the ``--figure`` of an image processed in strips."""


def _overview_factor(height: int, width: int) -> int:
    """The block size that brings the longer side down to :data:`OVERVIEW_SIDE` at most."""
    return max(1, -(-max(height, width) // OVERVIEW_SIDE))


class _Overview:
    """Block means of rows as they arrive: a picture `factor` times smaller on each side.

    A last block of rows or columns that is not whole is left out.
    """

    def __init__(self, factor: int, width: int, channels: int):
        self.factor, self.width = factor, width // factor * factor
        self.carry = np.zeros((0, width, channels), np.float32)
        self.blocks: list[np.ndarray] = []

    def add(self, rows: np.ndarray) -> None:
        rows = np.concatenate([self.carry, rows]) if self.carry.size else rows
        k = self.factor
        whole = rows.shape[0] // k * k
        if whole and self.width:
            block = rows[:whole, : self.width].reshape(whole // k, k, self.width // k, k, -1)
            self.blocks.append(block.mean(axis=(1, 3), dtype=np.float64).astype(np.float32))
        self.carry = rows[whole:].copy()

    def picture(self) -> np.ndarray:
        """The (H // factor, W // factor, C) block means."""
        return np.concatenate(self.blocks) if self.blocks else self.carry[:0, : self.width]


def _save_overview(path: Path, task, source, result: _Overview) -> bool:
    """``--figure`` of an image processed in strips: block means of the image and the result."""
    image = _Overview(result.factor, source.width, len(source.channels))
    band = max(
        result.factor,
        (STRIP_WORK // 8) // max(1, source.width * 4) // result.factor * result.factor,
    )
    for row0 in range(0, source.height, band):
        image.add(source.read_rows(row0, min(source.height, row0 + band)))
    small = Picture(image.picture(), source.channels, source.white, source.depth)
    grid = task.op.figure(small, result.picture())
    return save_grid(
        path,
        grid.panels,
        ncols=grid.ncols,
        overwrite=task.overwrite,
        title=f"{Path(task.source).name}: {grid.title} (overview: means of "
        f"{result.factor}x{result.factor} pixels)",
    )


def _result_size(op, source) -> tuple[int, int, int]:
    """The (H', W', C') of `op`'s result on the source: W' and C' from a few rows of zeros."""
    geometry = row_geometry(op, source.height, source.width)
    rows = min(source.height, max(geometry.spans) + geometry.stride)
    probe = source_picture(source, np.zeros((rows, source.width, len(source.channels)), np.float32))
    width, channels = np.asarray(op.compute(probe)).shape[1:]
    return geometry.out_rows, width, channels


class _Outputs:
    """The outputs of one file: the mapping of each channel and the writer of each file."""

    def __init__(
        self,
        task,
        whole: Picture,
        todo,
        size: tuple[int, int, int],
        spill_limit: int | None = None,
        samples: Picture | None = None,
    ):
        self.task, self.todo, self.size = task, todo, size
        self.spill_limit = spill_limit  # the largest band of rows a TIFF or Zarr output holds
        # What every strip's picture is, known without its rows (samples_picture): else `whole`.
        self.samples = whole if samples is None else samples

        self.depth = output_depth(whole.depth, task.fmt)
        self.carried = whole.carried
        self.mappings = mappings_for(task, whole)
        height, width, _ = size
        self.maps: dict[int, StreamedMapping] = {
            index: StreamedMapping(
                self.mappings[index].method,
                white=self.mappings[index].white,
                depth=self.depth,
                height=height,
                width=width,
                margin=self.mappings[index].margin,
            )
            for index in mapped_channels(todo, self.mappings)
        }
        self.whole = (
            StreamedMapping("clip", white=whole.white, depth=self.depth, height=height, width=width)
            if any(out.kind == "whole" for out in todo)
            else None
        )

    @property
    def passes(self) -> int:
        """Passes of statistics over the strips before the outputs (those of the mappings)."""
        return max([m.passes for m in self.maps.values()], default=0)

    def check_space(self, folder: Path) -> None:
        """A ValueError naming the size if the outputs would not fit the free disk space."""
        needed = sum(space_needed(**self._layout(out)) for out in self.todo)
        problem = free_space_problem(folder if folder.exists() else Path("."), needed)
        if problem is not None:
            raise ValueError(problem)

    def add(self, pass_index: int, row0: int, result: np.ndarray) -> None:
        for index, mapping in self.maps.items():
            if pass_index < mapping.passes:
                mapping.add(pass_index, row0, np.ascontiguousarray(result[:, :, index]))

    def _layout(self, out) -> dict:
        height, width, channels = self.size
        fmt = self.task.fmt
        place = dict(fmt=fmt, height=height, width=width, spill_limit=self.spill_limit)
        if out.kind == "raw":
            return dict(place, channels=channels, dtype=np.float32)
        count = len(channels_of(out)) if out.kind != "whole" else channels
        raw = written_as_values(out, self.mappings)
        levels = np.uint16 if self.depth > 8 else np.uint8
        return dict(place, channels=count, dtype=np.float32 if raw else levels)

    def write(self, strips, written: list[str], records: list[dict]) -> int:
        """Write every output from the strips of the last pass; the non-finite values' count.

        Each output is added to `written` and `records` as soon as it is in
        place, so that one that fails or is stopped later leaves the others
        recorded.
        """
        not_finite = 0
        with ExitStack() as stack:
            writers = []
            for out in self.todo:
                # Registered first, so called once the writer has closed (last in, first out).
                stack.callback(self._record, out, writers, len(writers), written, records)
                kept = carried_for(self.task.op, self.carried, out, output_scales(out, self))
                writers.append(
                    stack.enter_context(
                        open_row_writer(
                            out.path,
                            overwrite=self.task.overwrite,
                            **self._layout(out),
                            **store_place(self.task, out.path),
                            carried=kept,
                        )
                    )
                )
            for _, result in strips:
                not_finite += self.not_finite(result)
                for out, writer in zip(self.todo, writers, strict=True):
                    writer.write(output_array(out, result, self))
        return not_finite

    def not_finite(self, result: np.ndarray) -> int:
        """The NaN and infinities among a strip's `result` (none counted where the operation
        vouches for every strip: :func:`convcli.app.ops.not_finite_count`)."""
        return not_finite_count(self.task.op, self.samples, result)

    def _record(
        self, out, writers: list, index: int, written: list[str], records: list[dict]
    ) -> None:
        if index < len(writers) and writers[index].written:
            written.append(str(out.path))
            scales = output_scales(out, self)
            records.append(
                output_record(
                    out, scales, self.depth, kept_by(self.task, self.carried, out, scales)
                )
            )

    def channel_levels(self, index: int, result: np.ndarray) -> np.ndarray:
        """The (h, W) levels of channel `index` of a strip's rows."""
        return self.maps[index].levels(np.ascontiguousarray(result[:, :, index]))

    def whole_levels(self, result: np.ndarray) -> np.ndarray:
        """The (h, W, C') levels of a strip's rows in the input's scale (``clip``)."""
        planes = [
            self.whole.levels(np.ascontiguousarray(result[:, :, i])) for i in range(result.shape[2])
        ]
        return np.stack(planes, axis=2)

    def channel_scale(self, index: int) -> LevelScale:
        return self.maps[index].scale()

    def whole_scale(self) -> LevelScale:
        return self.whole.scale()
