"""Processing the frames of one file as the batch axis m: multi-page TIFFs and animations.

:func:`convcli.app.process.process_file` gives a file with several frames
selected (``--frames``) to :func:`process_stack`. Frames of one size go
through each layer call together, as its m; frames of other sizes in calls of
their own. Each result channel is mapped to levels with one scale for every
frame (:class:`convcli.levels.stats.StreamedMapping` over the values of all
the frames, the robust percentile over each frame's inside: as
:func:`convcli.levels.mapping.map_frame_levels`), so brightness does not flicker, and
written as one file that keeps the frames (:func:`convcli.io.image_files.frame_writer`):
an animated PNG with the input's durations and loop count, a multi-page TIFF,
an (m, H, W, C) ``.npy``. JPEG, and frames of different sizes, are written one
file per frame (``..._f<k>.<ext>``). The manifest records the frames of every
output.

Memory is bounded. Where the work of the whole stack fits ``--memory`` (by
default half the memory available), the frames are read once and their
results kept. Otherwise they are read and computed in groups of as many
frames as fit: a first pass decodes every frame (a corrupt frame fails the
file before anything is written), a pass or two take the mapping's
statistics, and the last computes the groups again and writes each frame as
it comes; memory then holds one group's work and one frame of each output.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..engines.process_state import library_section
from ..engines.processes import FileResult
from ..io.carried import NOTHING, Carried
from ..io.decoders import stack_samples
from ..io.figures import Grid, save_grid
from ..io.image_files import frame_writer
from ..io.images import Picture, check_stack_pixels, open_image
from ..io.safeio import make_output_folder
from ..layers._engine.tiles import memory_budget
from ..levels import stats as level_stats
from ..levels.mapping import LevelScale, _inside, _margin_left_out
from ..units import size_text
from .names import FORMATS, Output
from .ops import not_finite_count, result_and_summary
from .outputs import (
    carried_for,
    carried_note,
    kept_by,
    mapped_channels,
    mappings_for,
    output_array,
    output_depth,
    output_scales,
    run_hints,
    save_output,
    written_as_values,
)
from .strips import output_size
from .work import check_whole_work

FIGURE_FRAMES = 4
"""The frames ``--figure`` draws, a row each; it says how many more it leaves out."""


@dataclass(frozen=True)
class StackPlan:
    """The frames of one file to process, as its header gives them.

    Attributes
    ----------
    frames : tuple of int
        Their numbers in the file, from 0, in the order asked for.
    count : int
        The frames of the file.
    sizes : tuple of (int, int)
        (width, height) of each frame to process.
    channels : tuple of str
        The channels every frame is read with (those of the first).
    loop : int or None
        How many times the animation plays (0: for ever), where the file says.
    per_frame : bool
        Whether the outputs are written one file per frame.
    sample_bytes : int
        Bytes of one decoded sample of the first frame (1, 2 or 4).
    carried : Carried
        The colour profile and resolution of the file (:mod:`convcli.io.carried`).
    """

    frames: tuple[int, ...]
    count: int
    sizes: tuple[tuple[int, int], ...]
    channels: tuple[str, ...]
    loop: int | None
    per_frame: bool
    sample_bytes: int = 4
    carried: Carried = NOTHING

    @functools.cached_property
    def position(self) -> dict[int, int]:
        """Each frame number's place in :attr:`frames` (numbers are unique)."""
        return {number: k for k, number in enumerate(self.frames)}


def plan_stack(fmt: str, source, frames: tuple[int, ...], count: int) -> StackPlan:
    """The :class:`StackPlan` of `frames` of the open image `source`, for the output format.

    JPEG and Zarr hold one frame, an animated PNG or an ``.npy`` one size:
    those are written one file (store) per frame.
    """
    sizes = tuple(source.frame_sizes(frames))
    check_stack_pixels(sizes, source.max_pixels)
    per_frame = not FORMATS[fmt].stacks or len(set(sizes)) > 1
    return StackPlan(
        frames,
        count,
        sizes,
        tuple(source.channels),
        source.loop,
        per_frame,
        source.sample_bytes,
        source.stack_carried,
    )


@dataclass
class _Frame:
    """One frame of a pass: its position among the frames, picture, duration and result."""

    position: int
    picture: Picture
    duration: int | None
    result: np.ndarray | None = None


class _Frames:
    """The frames of a stack, read and computed a group at a time, or all kept if they fit.

    `white`, `depth` and `floats` are the stack's (the largest of its frames', whether
    one holds floats), known
    after :meth:`first_pass`; `summary` what the operation reported over the
    frames of the last pass (grad conv: dW summed over them).
    """

    def __init__(self, task, plan: StackPlan):

        self.task, self.plan = task, plan
        budget = task.memory or memory_budget()
        work = [
            task.op.work_bytes(h, w, len(plan.channels), plan.sample_bytes) for w, h in plan.sizes
        ]
        largest = max(range(len(work)), key=work.__getitem__)
        check_whole_work(
            task, *plan.sizes[largest], len(plan.channels), plan.sample_bytes, what="each frame"
        )
        self.work, self.budget = sum(work), budget
        self.kept = self.work <= budget
        self.group_frames = len(work) if self.kept else max(1, int(budget // max(work)))
        self.white, self.depth, self.floats = 0.0, 8, False
        self.summary, self.not_finite, self._dWs = "", 0, None
        self.timed = False  # a frame read gave its duration (an animation)
        self.notes: dict[str, None] = {}  # what frames' reads said, once each, in order
        self.carried_seen: list[Carried] = []  # the pages' own, where they differ
        self._kept: list[_Frame] | None = None

    def first_pass(self) -> None:
        """Decode every frame (and compute them all, where they are kept)."""
        if self.kept:
            frames = list(self._read())
            self._stack_of(frames)
            self._compute_by_size(frames)
            self._kept = frames
            return
        for frame in self._read():  # a corrupt frame fails the file here, before any write
            self._stack_of([frame])
            shape_only = np.broadcast_to(np.float32(0), (1,) + frame.picture.shape)
            self.task.op.check(Picture(shape_only, self.plan.channels, self.white, self.depth))

    def each(self, *, pictures: bool = False) -> Iterator[_Frame]:
        """Every frame with its result, in order: the kept ones, or computed again in groups.

        A group is computed as soon as it is full, before the next frame is
        read. Without `pictures`, a frame computed in a group keeps its result
        and lets its samples go (only a figure draws them): the frames before
        and after it are not held beside it.
        """
        if self._kept is not None:
            yield from self._kept
            return
        self.summary, self._dWs, self.not_finite = "", None, 0
        group: list[_Frame] = []
        for frame in self._read():
            if group and frame.picture.shape != group[0].picture.shape:
                yield from self._computed(group, pictures)
                group = []
            group.append(frame)
            del frame  # the group holds it
            if len(group) == self.group_frames:
                yield from self._computed(group, pictures)
                group = []
        if group:
            yield from self._computed(group, pictures)

    def _computed(self, group: list[_Frame], pictures: bool) -> list[_Frame]:
        self._compute(group)
        if not pictures:
            for frame in group:
                shape, kind = frame.picture.shape, frame.picture.samples.dtype
                samples = np.broadcast_to(np.zeros((), kind), shape)  # no memory
                frame.picture = replace(frame.picture, samples=samples)
        return group

    def _compute_by_size(self, frames: list[_Frame]) -> None:
        self.summary, self._dWs, self.not_finite = "", None, 0
        sizes: dict[tuple[int, ...], list[_Frame]] = {}
        for frame in frames:
            sizes.setdefault(frame.picture.shape, []).append(frame)
        for group in sizes.values():
            self._compute(group)

    def _compute(self, group: list[_Frame]) -> None:
        """The results of frames of one size, through the operation as one (m, H, W, C) picture."""
        op = self.task.op
        # The samples as decoded (8-bit, or float32): each frame's float32 copy (pixels) would
        # stay with its frame, beside the stack's (a 20 MP RGB frame: 229 MB more each).
        pic = self._picture([f.picture for f in group])
        op.check(pic)
        if hasattr(op, "dW_text"):  # grad conv: dW summed over every frame
            data, dWs = op.gradients(pic)
            self._dWs = (
                dWs if self._dWs is None else [a + b for a, b in zip(self._dWs, dWs, strict=True)]
            )
            self.summary = op.dW_text(self._dWs)
        else:
            data, summary = result_and_summary(op, pic)
            self.summary = summary or self.summary
        data = np.asarray(data, np.float32)
        self.not_finite += not_finite_count(op, pic, data)
        del pic
        for frame, result in zip(group, data, strict=True):
            frame.result = result

    def _picture(self, pictures: list[Picture]) -> Picture:
        return Picture(
            stack_samples(pictures, self.depth, self.floats),
            self.plan.channels,
            self.white,
            self.depth,
            carried=self.plan.carried,
            floats=self.floats,
        )

    def _stack_of(self, frames: list[_Frame]) -> None:
        for frame in frames:
            self.notes.update(dict.fromkeys(frame.picture.notes))
            carried = frame.picture.carried
            if carried is not NOTHING and carried not in self.carried_seen:
                self.carried_seen.append(carried)
            self.white = max(self.white, frame.picture.white)
            self.depth = max(self.depth, frame.picture.depth)
            self.floats = self.floats or frame.picture.floats

    def _read(self) -> Iterator[_Frame]:
        """The frames in order, each decoded in the process's library section."""
        with ExitStack() as files:
            with library_section():
                source = files.enter_context(
                    open_image(self.task.source, max_pixels=self.task.max_pixels)
                )
                frames = source.read_frames(self.plan.frames)
            for position in range(len(self.plan.frames)):
                with library_section():
                    picture, duration = next(frames)
                self.timed = self.timed or duration is not None
                yield _Frame(position, picture, duration)

    def stands_for(self) -> Picture:
        """A picture of the stack's channels, white and depth, whose pixels take no memory."""
        pixels = np.broadcast_to(np.float32(0), (1, 1, len(self.plan.channels)))
        return Picture(
            pixels,
            self.plan.channels,
            self.white,
            self.depth,
            carried=self.plan.carried,
            floats=self.floats,
        )


class _Scales:
    """One level mapping per result channel for all the frames, from their statistics."""

    def __init__(self, task, plan: StackPlan, frames: _Frames, todo: list[Output]):
        op, stands_for = task.op, frames.stands_for()
        self.depth = output_depth(frames.depth, task.fmt)
        self.mappings = mappings_for(task, stands_for)
        sizes = [output_size(op, h, w) for w, h in plan.sizes]
        self.plans: dict[int, level_stats.StreamedMapping] = {}
        for i in mapped_channels(todo, self.mappings):
            m = self.mappings[i]
            values = sum(
                _inside_size(s, m.margin) if m.method == "robust" else s[0] * s[1] for s in sizes
            )
            self.plans[i] = level_stats.StreamedMapping(
                m.method,
                white=m.white,
                depth=self.depth,
                height=max(values, 1),
                width=1,
                max_kept=level_stats.KEPT_MAGNITUDES,
            )
        whole = sum(s[0] * s[1] for s in sizes) * len(self.mappings)
        self.whole = level_stats.StreamedMapping(
            "clip", white=stands_for.white, depth=self.depth, height=max(whole, 1), width=1
        )
        self._rows: dict[int, int] = {}
        self._levels_of: np.ndarray | None = None
        self._levels: dict[int, np.ndarray] = {}

    @property
    def passes(self) -> int:
        """Passes of statistics over the frames before the outputs (those of the plans)."""
        return max((p.passes for p in self.plans.values()), default=0)

    def add(self, pass_index: int, result: np.ndarray) -> None:
        """Take the statistics of one frame's (H', W', C') result, in the pass under way."""
        for i, plan in self.plans.items():
            if pass_index >= plan.passes:
                continue
            values = result[:, :, i]
            if plan.method == "robust":
                values = _inside(values, self.mappings[i].margin)
            column = np.ascontiguousarray(values, np.float32).reshape(-1, 1)
            row = self._rows.get(i, 0)
            plan.add(pass_index, row, column)
            self._rows[i] = (row + len(column)) % plan.height

    def of(self, out: Output) -> list[LevelScale]:
        """The scales of the levels of `out`, for the manifest."""
        return output_scales(out, self)

    def channel_levels(self, i: int, result: np.ndarray) -> np.ndarray:
        """The (H', W') levels of channel `i` of one frame's result, mapped once a frame."""
        if result is not self._levels_of:
            self._levels_of, self._levels = result, {}
        if i not in self._levels:
            values = np.ascontiguousarray(result[:, :, i], np.float32)
            self._levels[i] = self.plans[i].levels(values.reshape(-1, 1)).reshape(values.shape)
        return self._levels[i]

    def whole_levels(self, result: np.ndarray) -> np.ndarray:
        """The (H', W', C') levels of one frame's result in the input's scale (``clip``)."""
        values = np.ascontiguousarray(result, np.float32)
        return self.whole.levels(values.reshape(-1, 1)).reshape(values.shape)

    def channel_scale(self, i: int) -> LevelScale:
        return self.plans[i].scale()

    def whole_scale(self) -> LevelScale:
        return self.whole.scale()


def _inside_size(size: tuple[int, int], margin: int) -> int:
    """The values of a (H, W) map that :func:`convcli.levels.mapping._inside` keeps."""
    left_out = _margin_left_out(size, margin)
    return (size[0] - 2 * left_out) * (size[1] - 2 * left_out)


def _file_format(out: Output, scales: _Scales, fmt: str) -> str:
    """The format of a file of every frame: npy for the raw values, float TIFF for
    ``--normalize none``."""
    if out.kind == "raw":
        return "npy"
    if written_as_values(out, scales.mappings):
        return "tiff"
    return fmt


def _kept(out: Output, task, carried: Carried, scales: _Scales):
    """What `out` keeps of what the file or a frame carries (:func:`carried_for`)."""
    return carried_for(task.op, carried, out, scales.of(out))


def _carried(frame: _Frame, plan: StackPlan) -> Carried:
    """What `frame` carries: a TIFF page's own, an animation's frame the file's (its picture
    carries nothing of its own: :data:`NOTHING` itself)."""
    return plan.carried if frame.picture.carried is NOTHING else frame.picture.carried


@contextmanager
def _stack_files(todo: list[Output], task, plan: StackPlan, scales: _Scales):
    """A :class:`convcli.io.image_files.FrameWriter` (or None: kept) for each output that
    holds every frame; they get their names when the block ends without an error."""
    with ExitStack() as files:
        writers = {}
        for out in todo:
            if out.frame < 0 and out.kind != "grid":
                with library_section():
                    writers[out] = files.enter_context(
                        frame_writer(
                            out.path,
                            fmt=_file_format(out, scales, task.fmt),
                            count=len(plan.frames),
                            loop=plan.loop,
                            overwrite=task.overwrite,
                            carried=_kept(out, task, plan.carried, scales),
                        )
                    )
        yield writers


def _write_pass(
    task, plan: StackPlan, frames: _Frames, scales: _Scales, todo: list[Output], written, record
) -> list[_Frame]:
    """Compute the frames (or take them kept) and write every output; the frames drawn.

    Per-frame files are recorded in `written` as each is renamed into place,
    the files of every frame once all are.
    """
    per_frame: dict[int, list[Output]] = {}
    for out in todo:
        if out.frame >= 0:
            per_frame.setdefault(plan.position[out.frame], []).append(out)
    drawn = []
    figures = any(out.kind == "grid" for out in todo)
    with _stack_files(todo, task, plan, scales) as writers:
        for frame in frames.each(pictures=figures):
            carried = _carried(frame, plan)
            for out, writer in writers.items():
                if writer is not None:
                    array = output_array(out, frame.result, scales)
                    with library_section():
                        writer.add(array, frame.duration, _kept(out, task, carried, scales))
            for out in per_frame.get(frame.position, []):
                array = output_array(out, frame.result, scales)
                ok = save_output(out, array, task, _kept(out, task, carried, scales))
                _record(out, ok, scales, written, record, plan, task, carried)
            if figures and len(drawn) < FIGURE_FRAMES:
                drawn.append(frame)
    for out, writer in writers.items():
        _record(out, writer is not None, scales, written, record, plan, task)
    return drawn


def _record(
    out: Output, ok: bool, scales: _Scales, written, record, plan: StackPlan, task, carried=None
) -> None:
    """Add `out`, if written, to `written`, with its manifest record (its frames; what it kept
    of `carried`, a frame's, or the file's); else count it as kept."""
    if not ok:
        written.todo -= 1
        return
    carried = plan.carried if carried is None else carried
    entry = record(out, scales.of(out), scales.depth, kept_by(task, carried, out, scales.of(out)))
    if out.kind != "grid":
        entry.update({"frame": out.frame} if out.frame >= 0 else {"frames": len(plan.frames)})
    written.paths.append(str(out.path))
    written.records.append(entry)


def stack_figure(op, drawn: list[tuple[int, Picture, np.ndarray]], total: int) -> Grid:
    """The figure of a stack: `op`'s figure of each frame of `drawn` (number, picture, result),
    a row each, and how many of the `total` frames it leaves out."""
    grids = [op.figure(pic, result) for _, pic, result in drawn]
    ncols = max(g.ncols for g in grids)
    panels = []
    for (number, _, _), grid in zip(drawn, grids, strict=True):
        row = [
            p if p is None else replace(p, title=f"frame {number}: {p.title}") for p in grid.panels
        ]
        panels += row + [None] * (-len(row) % ncols)
    left = total - len(drawn)
    title = grids[0].title
    if left:
        title += f" ({left} more frame{'s' if left > 1 else ''} left out)"
    return Grid(panels, ncols, title)


def _save_figure(out: Output, task, plan: StackPlan, frames: _Frames, drawn: list[_Frame]) -> bool:
    stands_for = frames.stands_for()
    pictures = [
        (
            plan.frames[f.position],
            Picture(
                stack_samples([f.picture], frames.depth, frames.floats)[0],
                plan.channels,
                stands_for.white,
                stands_for.depth,
            ),
            f.result,
        )
        for f in drawn
    ]
    grid = stack_figure(task.op, pictures, len(plan.frames))
    with library_section():
        return save_grid(
            out.path,
            grid.panels,
            ncols=grid.ncols,
            overwrite=task.overwrite,
            title=f"{Path(task.source).name}: {grid.title}",
        )


def stack_notes(plan: StackPlan, frames: _Frames) -> list[str]:
    """What the user should know of a stack: the frames used, sizes, groups."""
    m = len(plan.frames)
    notes = [f"{m} frames" if m == plan.count else f"{m} of {plan.count} frames", *frames.notes]
    sizes = len(set(plan.sizes))
    if sizes > 1:
        notes.append(
            f"frames of {sizes} sizes, each size processed on its own and written "
            "one file per frame"
        )
    if not frames.kept:
        group = f"{frames.group_frames} frame{'s' if frames.group_frames > 1 else ''}"
        notes.append(
            f"read and processed in groups of at most {group} "
            f"(the whole stack's work would take about {size_text(frames.work)}, "
            "over the --memory budget)"
        )
    return notes


def _timing_lost(task, plan: StackPlan, frames: _Frames) -> tuple[str, ...]:
    """A line where an animation's frame durations and loop count are not written: an
    animated PNG of every frame holds them, no other output."""
    timed = frames.timed or plan.loop is not None
    if not timed or (task.fmt == "png" and not plan.per_frame):
        return ()
    if task.fmt == "png":
        return ("frame durations not kept: frames of several sizes are written one file each",)
    return (f"frame durations not kept: {task.fmt} outputs hold none (png outputs do)",)


def process_stack(
    task,
    plan: StackPlan,
    outputs: list[Output],
    todo: list[Output],
    timings: dict,
    written,
    *,
    record,
    file_notes,
) -> FileResult:
    """Compute the frames of `plan` and write the outputs `todo`; the file's result.

    `written` (:class:`convcli.app.process._Written`) grows as each output is
    renamed into place; `record` (the manifest's record of an output) and
    `file_notes` are :mod:`convcli.app.process`'s helpers.
    """
    start = time.perf_counter()
    frames = _Frames(task, plan)
    frames.first_pass()
    scales = _Scales(task, plan, frames, todo)
    timings["decode"] = time.perf_counter() - start
    start = time.perf_counter()
    for pass_index in level_stats.pass_indices(scales):
        for frame in frames.each():
            scales.add(pass_index, frame.result)
    timings["compute"] = time.perf_counter() - start
    start = time.perf_counter()
    make_output_folder(task.out_dir, task.out_root)
    written.todo = len(todo)
    drawn = _write_pass(task, plan, frames, scales, todo, written, record)
    for out in todo:
        if out.kind == "grid":
            _record(
                out,
                _save_figure(out, task, plan, frames, drawn),
                scales,
                written,
                record,
                plan,
                task,
            )
    timings["encode"] = time.perf_counter() - start
    carried, lost = carried_note(task, replace(frames.stands_for(), carried=plan.carried))
    for other in frames.carried_seen:  # what a later page of its own loses is said too
        more = carried_note(task, replace(frames.stands_for(), carried=other))[1]
        lost += tuple(line for line in more if line not in lost)
    notes = stack_notes(plan, frames) + ([frames.summary] if frames.summary else [])
    kept = len(outputs) - len(written.paths)
    return FileResult(
        task.source,
        "done",
        file_notes(notes, frames.not_finite, kept),
        tuple(written.paths),
        timings,
        records=tuple(written.records),
        hints=run_hints(task, plan.channels) + lost + _timing_lost(task, plan, frames),
        kept=carried,
    )
