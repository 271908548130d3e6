"""Processing the frames of one file as the batch axis m: multi-page TIFFs and animations.

:func:`convcli.app.process.process_file` gives a file with several frames
selected (``--frames``) to :func:`process_stack`. Frames of one size go through
each layer call together, as its m; frames of other sizes in calls of their
own. Each result channel is mapped to levels with one scale for every frame
(:func:`convcli.levels.map_frame_levels`), so brightness does not flicker, and
written as one file that keeps the frames: an animated PNG (the input's
durations and loop count), a multi-page TIFF, an (m, H, W, C) ``.npy``. JPEG,
and frames of different sizes, are written one file per frame
(``..._f<k>.<ext>``). The manifest records the frames of every output.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..batch import FileResult
from ..choices import RAW_VALUES
from ..figures import Grid, save_grid
from ..images import Picture, save_float_tiff, save_frames, save_levels, save_npy
from ..levels import LevelScale, map_frame_levels
from .names import FORMATS, Output
from .ops import result_and_summary

FIGURE_FRAMES = 4
"""The frames ``--figure`` draws, a row each; it says how many more it leaves out."""


@dataclass
class Stack:
    """The decoded frames of one file.

    Attributes
    ----------
    pictures : list of Picture
        One per frame processed, in the order asked for, each (H, W, C).
    frames : tuple of int
        Their numbers in the file, from 0.
    count : int
        The frames of the file.
    durations : list of (int or None)
        Each frame's time on screen in ms, where the file says.
    loop : int or None
        How many times the animation plays (0: for ever), where the file says.
    per_frame : bool
        Whether the outputs are written one file per frame.
    """

    pictures: list[Picture]
    frames: tuple[int, ...]
    count: int
    durations: list[int | None]
    loop: int | None
    per_frame: bool

    @property
    def whole(self) -> Picture:
        """A picture standing for the stack: the first frame, with the stack's white and depth."""
        first = self.pictures[0]
        return Picture(first.pixels, first.channels, max(p.white for p in self.pictures),
                       max(p.depth for p in self.pictures))

    def size_groups(self) -> list[list[int]]:
        """The positions of the frames, grouped by size (in order of first appearance)."""
        groups: dict[tuple[int, ...], list[int]] = {}
        for j, pic in enumerate(self.pictures):
            groups.setdefault(pic.pixels.shape, []).append(j)
        return list(groups.values())


def per_frame_outputs(fmt: str, sizes: list[tuple[int, int]]) -> bool:
    """Whether a stack of frames of these `sizes` is written one file per frame in `fmt`.

    JPEG holds one frame; an animated PNG or an ``.npy`` one size.
    """
    if FORMATS[fmt].folder:
        raise ValueError("--format zarr writes one frame per file: use --frames first, or "
                         "another format")
    return fmt == "jpg" or len(set(sizes)) > 1


def compute_stack(op, stack: Stack) -> tuple[list[np.ndarray], list[str]]:
    """Each frame's float32 result (in order), and what the operation reported.

    The frames of one size go through the operation as one (m, H, W, C)
    picture: one layer call with m frames.
    """
    whole = stack.whole
    results: list[np.ndarray | None] = [None] * len(stack.pictures)
    summaries: list[str] = []
    for positions in stack.size_groups():
        pixels = np.stack([stack.pictures[j].pixels for j in positions])
        group = Picture(pixels, whole.channels, whole.white, whole.depth)
        op.check(group)
        data, summary = result_and_summary(op, group)
        del pixels, group
        for j, frame in zip(positions, data, strict=True):
            results[j] = frame
        if summary and summary not in summaries:
            summaries.append(summary)
    return results, summaries


class _StackLevels:
    """The levels of each result channel over all frames, mapped once and kept while needed."""

    def __init__(self, op, stack: Stack, results: list[np.ndarray], todo: list[Output], fmt: str):
        self.depth = min(stack.whole.depth, FORMATS[fmt].max_depth)
        self.mappings = op.mappings(stack.whole)
        self._results = results
        self._uses: dict[int, int] = {}
        for out in todo:
            for i in (out.group if out.kind == "group" else (out.index,)):
                self._uses[i] = self._uses.get(i, 0) + 1
        self._kept: dict[int, tuple[list[np.ndarray], LevelScale]] = {}

    def __call__(self, index: int) -> tuple[list[np.ndarray], LevelScale]:
        if index not in self._kept:
            mapping = self.mappings[index]
            channel = [np.ascontiguousarray(r[:, :, index]) for r in self._results]
            self._kept[index] = map_frame_levels(channel, mapping.method, white=mapping.white,
                                                 depth=self.depth, margin=mapping.margin)
        return self._kept[index]

    def done(self, out: Output) -> None:
        """Forget the levels `out` used once no output to come needs them."""
        for i in (out.group if out.kind == "group" else (out.index,)):
            self._uses[i] -= 1
            if not self._uses[i]:
                self._kept.pop(i, None)


def write_stack_output(out: Output, task, stack: Stack, results: list[np.ndarray],
                       levels: _StackLevels, section) -> tuple[bool, list[LevelScale]]:
    """Write one output of a stack; whether it was written, and the scales of its levels.

    `section(save, *args, **kwargs)` calls a writer in the process's library section.
    """
    path, overwrite, fmt = out.path, task.overwrite, task.fmt
    position = stack.frames.index(out.frame) if out.frame >= 0 else None

    def frames_of(per_frame: list[np.ndarray]) -> np.ndarray:
        return per_frame[position] if position is not None else np.stack(per_frame)

    if out.kind == "raw":
        return section(save_npy, path, frames_of(results), overwrite=overwrite), []
    if out.kind == "channel" and levels.mappings[out.index].method == RAW_VALUES:
        values = frames_of([r[:, :, out.index] for r in results])
        return (section(save_float_tiff, path, values, overwrite=overwrite),
                [LevelScale(RAW_VALUES, 1.0, 0.0)])
    if out.kind == "channel":
        frames, scale = levels(out.index)
        image, scales = frames_of(frames), [scale]
    elif out.kind == "group":
        planes = [levels(i) for i in out.group]
        scales = [scale for _, scale in planes]
        image = frames_of([np.stack([p[0][j] for p in planes], axis=2)
                           for j in range(len(results))])
    else:  # whole: the result in the input's scale
        frames, scale = map_frame_levels(results, "clip", white=stack.whole.white,
                                         depth=levels.depth)
        image, scales = frames_of(frames), [scale]
    if position is not None:
        return section(save_levels, path, image, fmt=fmt, overwrite=overwrite), scales
    return section(save_frames, path, image, fmt=fmt, durations=stack.durations,
                   loop=stack.loop, overwrite=overwrite), scales


def stack_figure(op, stack: Stack, results: list[np.ndarray]) -> Grid:
    """The figure of a stack: the operation's figure of each of the first frames, a row each."""
    shown = min(len(results), FIGURE_FRAMES)
    whole = stack.whole
    grids = [op.figure(Picture(stack.pictures[j].pixels, whole.channels, whole.white,
                               whole.depth), results[j]) for j in range(shown)]
    ncols = max(g.ncols for g in grids)
    panels = []
    for j, grid in enumerate(grids):
        row = [p if p is None else replace(p, title=f"frame {stack.frames[j]}: {p.title}")
               for p in grid.panels]
        panels += row + [None] * (-len(row) % ncols)
    left = len(results) - shown
    title = grids[0].title
    if left:
        title += f" ({left} more frame{'s' if left > 1 else ''} left out)"
    return Grid(panels, ncols, title)


def save_stack_figure(path: Path, task, stack: Stack, results: list[np.ndarray],
                      section) -> bool:
    grid = stack_figure(task.op, stack, results)
    return section(save_grid, path, grid.panels, ncols=grid.ncols,
                   title=f"{Path(task.source).name}: {grid.title}", overwrite=task.overwrite)


def stack_notes(stack: Stack, results: list[np.ndarray]) -> list[str]:
    """What the user should know of a stack: the frames used, the sizes processed apart."""
    m = len(stack.frames)
    notes = [f"{m} frames" if m == stack.count else f"{m} of {stack.count} frames"]
    sizes = len(stack.size_groups())
    if sizes > 1:
        notes.append(f"frames of {sizes} sizes, each size processed on its own and written "
                     "one file per frame")
    return notes


def process_stack(task, stack: Stack, outputs: list[Output], todo: list[Output],
                  timings: dict, written, *, section, record, file_notes) -> FileResult:
    """Compute the frames of `stack` and write the outputs `todo`; the file's result.

    `written` (:class:`convcli.app.process._Written`) grows as each output is
    renamed into place; `section`, `record` (the manifest's record of an
    output) and `file_notes` are :mod:`convcli.app.process`'s helpers.
    """
    start = time.perf_counter()
    results, summaries = compute_stack(task.op, stack)
    timings["compute"] = time.perf_counter() - start
    start = time.perf_counter()
    Path(task.out_dir).mkdir(parents=True, exist_ok=True)
    levels = _StackLevels(task.op, stack, results, todo, task.fmt)
    written.todo, kept = len(todo), 0
    for out in todo:
        if out.kind == "grid":
            ok, scales = save_stack_figure(out.path, task, stack, results, section), []
        else:
            ok, scales = write_stack_output(out, task, stack, results, levels, section)
            levels.done(out)
        if ok:
            entry = record(out, scales, levels.depth)
            entry.update({"frame": out.frame} if out.frame >= 0 else
                         {} if out.kind == "grid" else {"frames": len(stack.frames)})
            written.paths.append(str(out.path))
            written.records.append(entry)
        else:
            kept += 1
            written.todo -= 1
    timings["encode"] = time.perf_counter() - start
    not_finite = sum(r.size - int(np.count_nonzero(np.isfinite(r))) for r in results)
    notes = stack_notes(stack, results) + summaries
    return FileResult(task.source, "done",
                      file_notes(notes, not_finite, kept + len(outputs) - len(todo)),
                      tuple(written.paths), timings, records=tuple(written.records))
