"""Processing one file: read the image, apply the operation, write its outputs.

:func:`process_file` is the worker that :class:`convcli.engines.processes.BatchRun` runs
for every :class:`convcli.app.plan.Task`, in this process or in another.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from stat import S_ISREG

import numpy as np

from ..engines.process_state import library_messages, library_section
from ..engines.processes import FileResult
from ..errors import MissingExtra
from ..io import storage
from ..io.carried import NOTHING
from ..io.figures import save_grid
from ..io.formats import is_store_name, open_regions, starts_as_tiff
from ..io.frames import FramesPastEnd, select_frames
from ..io.images import Picture, PixelLimitError, check_pixels, open_image
from ..io.limits import check_stored
from ..io.ownership import writing_named
from ..io.safeio import make_output_folder, remove_stale_staging, staging_folder
from ..io.storage import is_url
from ..layers._engine.tiles import memory_budget
from ..levels.mapping import LevelScale, map_levels
from ..units import size_text
from .names import Output, planned_outputs
from .ops import not_finite_count, result_and_summary
from .outputs import (
    carried_for,
    carried_note,
    kept_by,
    mappings_for,
    output_array,
    output_depth,
    output_record,
    output_scales,
    outputs_to_write,
    run_hints,
    save_output,
)
from .parts import part
from .plan import Task
from .staging import download_input, staged_task, stand_in_for_outputs, upload_outputs
from .work import check_whole_work

# Errors that mean "this file cannot be processed"; anything else is a bug and propagates.
EXPECTED_ERRORS = (OSError, ValueError, MemoryError)


# numpy's message for a write cut short (np.save to a full disk), which carries no errno.
_SHORT_WRITE = re.compile(r"(\d+) requested and (\d+) written")

NO_SPACE = "no space left on the device"


def describe_error(exc: BaseException, source: str = "", out_dir: str | None = None) -> str:
    """One line for the user from an expected exception about the file `source`.

    `out_dir`, where the outputs go, tells a write cut short by a full disk
    (which numpy reports without an errno) from other short writes.
    """
    if isinstance(exc, MemoryError):
        return "not enough memory for this image"
    if isinstance(exc, PixelLimitError):
        return f"{exc} (raise it with --max-pixels)"
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", None)):
        return NO_SPACE if exc.errno == errno.ENOSPC else "disk quota exceeded"
    short = _SHORT_WRITE.fullmatch(str(exc).strip()) if isinstance(exc, OSError) else None
    if short:
        requested, written = (int(n) for n in short.groups())
        if out_dir is not None and _free_bytes(out_dir) < requested - written:
            return NO_SPACE
        return f"an output was cut short ({written:,} of {requested:,} bytes written)"
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
        if exc.filename is not None and str(exc.filename) != source:
            text = f"{exc.filename}: {text}"
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def _free_bytes(folder) -> float:
    try:
        stat = os.statvfs(folder)
    except (OSError, AttributeError):
        return float("inf")
    return stat.f_bavail * stat.f_frsize


@dataclass
class _Written:
    """The outputs of one file written so far, kept when the file stops part way.

    `paths` and `records` (the manifest's, one per path while they are
    aligned) grow as each output is renamed into place; `todo` is the number
    of outputs to write, once known.
    """

    paths: list[str] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    todo: int = -1


def process_file(task: Task) -> FileResult:
    """Read one image, apply the task's operation, write its outputs.

    A file that cannot be processed gives a ``"failed"`` result whose message
    is one line; unexpected exceptions (bugs) propagate. What the image
    libraries say while the file is read and written, Python warnings
    (Pillow's "Corrupt EXIF data") and text that C libraries (libjpeg,
    libtiff) write straight to the standard error, is gathered into the
    result's message (a note, or part of the failure) instead of reaching the
    terminal, where it would carry source paths and split the run's lines.
    Several threads may process files at once: :mod:`convcli.engines.process_state`
    keeps each file's messages apart. A KeyboardInterrupt (Ctrl-C, or the run
    stopping at once) gives the outputs written so far, with their records:
    ``"done"`` if they were all written, else ``"stopped"``.
    """
    timings: dict[str, float] = {}
    written = _Written()
    said: list[str] = []
    try:
        # Overflow and NaN are reported once per file (below), not as numpy warnings.
        with (
            np.errstate(all="ignore"),
            library_messages(said),
            writing_named(task.out_file, replace_any=task.replace_any),
        ):
            if is_url(task.source) or is_url(task.out_dir):
                result = _process_staged(task, timings, written)
            else:
                result = _process(task, timings, written)
        if said and result.status == "done":
            result = replace(result, message=_with(result.message, said))
        return result
    except (*EXPECTED_ERRORS, MissingExtra) as exc:  # no zarr: this file fails, the run goes on
        message = describe_error(exc, task.source, task.out_dir)
        result = _partial(task, "failed", _with(message, said), written, timings)
        if isinstance(exc, storage.StoreError):  # the store failed: the run stops
            result = replace(result, fatal=exc.strerror)
        return replace(result, usage=True) if isinstance(exc, FramesPastEnd) else result
    except Exception as exc:  # a bug: failed with its traceback (run_guarded), and the
        # outputs it had written keep their manifest lines
        with contextlib.suppress(AttributeError):  # an exception without a __dict__
            exc.written_before = _partial(task, "failed", "", written, timings)
        raise
    except KeyboardInterrupt:
        finished = written.todo == len(written.paths)
        return _partial(
            task,
            "done" if finished else "stopped",
            "" if finished else "stopped before its outputs were all written",
            written,
            timings,
        )


def _partial(task: Task, status: str, message: str, written: _Written, timings: dict) -> FileResult:
    """The result of a file that ended early, with the outputs it had written."""
    count = len(written.paths)
    # Records match paths one for one from the first; an upload stopped part way has more
    # records than paths, strips stopped while closing their files fewer (no lines then).
    records = written.records[:count] if len(written.records) >= count else []
    return FileResult(
        task.source, status, message, tuple(written.paths), timings, records=tuple(records)
    )


def _with(message: str, said: list[str]) -> str:
    if not said:
        return message
    libraries = "libraries said: " + "; ".join(said)
    return f"{message}; {libraries}" if message else libraries


def _process(task: Task, timings: dict, written: _Written) -> FileResult:
    streamed = _process_streamed(task, timings, written)
    if streamed is not None:
        return streamed
    start = time.perf_counter()
    pic, outputs, todo = _decode(task)
    if pic is None:
        return FileResult(task.source, "skipped", "outputs exist (use --overwrite to replace them)")
    timings["decode"] = time.perf_counter() - start
    if not isinstance(pic, Picture):  # a StackPlan: read, computed and written there, in groups
        return part("stacks").process_stack(
            task, pic, outputs, todo, timings, written, record=output_record, file_notes=_file_notes
        )

    start = time.perf_counter()
    op = task.op
    op.check(pic)
    data, summary = result_and_summary(op, pic)
    timings["compute"] = time.perf_counter() - start

    start = time.perf_counter()
    make_output_folder(task.out_dir, task.out_root)
    levels = _WholeLevels(task, pic, todo)
    kept = 0
    written.todo = len(todo)
    for out in todo:
        ok, scales = _write_output(out, task, pic, data, levels)
        if ok:
            record = output_record(
                out, scales, levels.depth, kept_by(task, pic.carried, out, scales)
            )
            written.paths.append(str(out.path))
            written.records.append(record)
        else:
            kept += 1
            written.todo -= 1
    timings["encode"] = time.perf_counter() - start

    kept += len(outputs) - len(todo)
    carried, lost = carried_note(task, pic)
    return FileResult(
        task.source,
        "done",
        _notes(op, pic, [summary], data, kept),
        tuple(written.paths),
        timings,
        records=tuple(written.records),
        hints=run_hints(task, pic.channels) + lost,
        kept=carried,
    )


def _process_streamed(task: Task, timings: dict, written: _Written) -> FileResult | None:
    """A TIFF or Zarr store whose work would not fit the memory budget, in strips; else None.

    See :mod:`convcli.app.streamed`; everything else reads the image whole. An image over
    ``--max-pixels`` is refused from its header, as a whole read refuses it.
    """
    if not _may_be_read_in_strips(task.source):
        return None  # without importing tifffile and the strips' modules (in every worker)
    if task.op.computed_whole:
        return None
    source = open_regions(
        task.source, max_pixels=task.max_pixels, storage_options=task.storage_options
    )
    if source is None:
        return None
    with source:
        check_pixels((source.width, source.height), task.max_pixels)
        check_stored(*source.stored_bytes(), task.max_pixels)
        if reads_as_frames(task, source):
            return None
        why, size, budget = strips_reason(task, source)
        if why is None:
            return None
        count = getattr(source, "frame_count", 1)
        outputs = planned_outputs(
            task, source.channels, frames=(select_frames(task.frames, count), count)
        )
        todo = outputs_to_write(task, outputs)
        if not todo:
            return FileResult(
                task.source, "skipped", "outputs exist (use --overwrite to replace them)"
            )
        make_output_folder(task.out_dir, task.out_root)
        written.todo = len(todo)
        not_finite, tasks = _in_strips(
            task,
            source,
            todo,
            budget=budget,
            timings=timings,
            written=written.paths,
            records=written.records,
        )
        records = written.records
        carried, lost = carried_note(task, part("strips").shape_only(source))
        notes = _strips_notes(task, source, tasks, f"{size_text(size)}; {why}")
    kept = len(outputs) - len(records)
    return FileResult(
        task.source,
        "done",
        _file_notes(notes, not_finite, kept, nodata=source.carried.nodata),
        tuple(written.paths),
        timings,
        records=tuple(records),
        hints=run_hints(task, tuple(source.channels)) + lost,
        kept=carried,
    )


def _strips_notes(task: Task, source, tasks: int, why: str) -> list[str]:
    """The notes of an image processed in strips (`tasks` of them on a Dask cluster, or 0
    here) for the reason `why`: the source's, that, and the operation's (pad's ``--value``
    past the samples' range)."""
    where = f", in {tasks} tasks on the Dask cluster" if tasks else ""
    notes = [*source.notes, f"processed in strips{where} (its work would take about {why})"]
    fill_note = getattr(task.op, "fill_note", None)
    said = fill_note(source.white, source.floats) if fill_note is not None else ""
    return notes + [said] if said else notes


def _in_strips(task: Task, source, todo: list[Output], **kwargs) -> tuple[int, int]:
    """The outputs `todo` written in strips: here, or as band tasks on the Dask cluster
    whose worker runs this (:mod:`convcli.app.streamed_cluster`).

    Returns the count of non-finite values and the number of band tasks (0: here).
    """

    # A copy downloaded here is on this machine's disk only: the other workers cannot read it.
    bands = part("cluster bands")
    client = None if task.downloaded else bands.cluster_client()
    if client is None:
        return part("strips").process_in_strips(task, source, todo, **kwargs), 0
    with client as connected:
        return bands.process_on_cluster(task, source, todo, client=connected, **kwargs)


def _may_be_read_in_strips(source: str) -> bool:
    """False for a local file that :func:`convcli.io.regions.open_regions` surely reads whole.

    That is any regular file that does not start as a TIFF does (and anything
    not a regular file); a store, a URL, or a file whose first bytes cannot be
    read goes on to ``open_regions``, which decides or reports as before.
    """
    if is_store_name(source) or is_url(source):
        return True
    try:
        if not S_ISREG(os.stat(source).st_mode):
            return False
        return starts_as_tiff(source)
    except OSError:
        return True


def reads_as_frames(task: Task, source) -> bool:
    """Whether ``--frames`` picks more of `source` (read by regions) than its first frame.

    Those files are read as frames, never in strips, which read the first only.
    """
    count = getattr(source, "frame_count", 1)
    return count > 1 and select_frames(task.frames, count) != (0,)


def strips_reason(task: Task, source) -> tuple[str | None, int, int]:
    """Why `task` reads `source` (a region source) in strips, or None; its work's size and budget.

    In strips when the whole-image work would not fit ``--memory``.
    """
    budget = task.memory or memory_budget()
    size = part("strips").source_work_bytes(task.op, source)
    if size > budget:
        return "over the --memory budget", size, budget
    return None, size, budget


def _decode(task: Task) -> tuple[Picture | object | None, list[Output], list[Output]]:
    """The file's pixels, its planned outputs and those to write; no pixels if none is to be.

    The file is opened and decoded in the process's library section; a Zarr
    store is read whole through :func:`convcli.io.regions.open_regions`. Where
    ``--frames`` picks several frames of the file, their plan (nothing decoded).
    """
    if is_store_name(task.source):
        return _read_store(task)
    with library_section(), open_image(task.source, max_pixels=task.max_pixels) as source:
        count = source.frame_count
        frames = select_frames(task.frames, count)
        if len(frames) > 1:
            plan = part("stacks").plan_stack(task.fmt, source, frames, count)
            outputs = planned_outputs(
                task, source.channels, frames=(frames, count), per_frame=plan.per_frame
            )
            todo = outputs_to_write(task, outputs)
            return (plan if todo else None), outputs, todo
        outputs = planned_outputs(task, source.channels, frames=(frames, count))
        todo = outputs_to_write(task, outputs)
        if not todo:
            return None, outputs, todo
        width, height = source.frame_sizes(frames)[0]
        check_whole_work(
            task, width, height, len(source.channels), source.sample_bytes, frame=frames[0]
        )
        return _read_frame(source, frames[0], count), outputs, todo


def _read_frame(source, frame: int, count: int) -> Picture:
    """One frame of a file as a picture: the first as a one-frame file's, else by frame, with
    what it carries as a stack's frames keep it: a TIFF page's own, an animation's frame
    the file's (its EXIF orientation as stored: a frame is not turned)."""
    if frame == 0 and not source.first_frame:  # 1: past an APNG's default image
        return source.read()
    pic, _ = next(source.read_frames((frame,)))
    notes = (f"used frame {frame} of {count} frames",) * (count > 1) + pic.notes
    carried = source.stack_carried if pic.carried is NOTHING else pic.carried
    return replace(pic, notes=notes, carried=carried)


def _read_store(task: Task) -> tuple[Picture | None, list[Output], list[Output]]:
    """:func:`_decode` for a Zarr store: every row read at once, within ``--max-pixels``."""
    with open_regions(task.source, storage_options=task.storage_options) as source:
        outputs = planned_outputs(task, source.channels)
        todo = outputs_to_write(task, outputs)
        if not todo:
            return None, outputs, todo
        check_pixels((source.width, source.height), task.max_pixels)
        check_stored(*source.stored_bytes(), task.max_pixels)
        check_whole_work(
            task, source.width, source.height, len(source.channels), source.dtype.itemsize
        )
        pixels = source.read_rows(0, source.height)
        return part("strips").source_picture(source, pixels), outputs, todo


class _WholeLevels:
    """The levels of a whole result's channels, for the output format's depth
    (:class:`convcli.app.outputs.ResultLevels`).

    A channel that is written both on its own and in a colour image
    (``--channels each``) is mapped once, and kept until its second file is
    written.
    """

    def __init__(self, task: Task, pic: Picture, todo: list[Output]):
        self.depth = output_depth(pic.depth, task.fmt)
        self.mappings = mappings_for(task, pic)
        self._white = pic.white
        single = {out.index for out in todo if out.kind == "channel"}
        self._twice = single & {i for out in todo if out.kind == "group" for i in out.group}
        self._kept: dict[int, np.ndarray] = {}
        self._scales: dict[int, LevelScale] = {}
        self._whole_scale: LevelScale | None = None

    def channel_levels(self, index: int, result: np.ndarray) -> np.ndarray:
        if index in self._kept:
            return self._kept.pop(index)
        levels, self._scales[index] = _levels(result, index, self.mappings[index], self.depth)
        if index in self._twice:
            self._kept[index] = levels
        return levels

    def whole_levels(self, result: np.ndarray) -> np.ndarray:
        levels, self._whole_scale = map_levels(result, "clip", white=self._white, depth=self.depth)
        return levels

    def channel_scale(self, index: int) -> LevelScale:
        return self._scales[index]

    def whole_scale(self) -> LevelScale:
        return self._whole_scale


def _write_output(
    out: Output, task: Task, pic: Picture, data: np.ndarray, levels: _WholeLevels
) -> tuple[bool, list[LevelScale]]:
    """Write one output; whether it was written (not kept), and the scales of its levels."""
    if out.kind == "grid":
        return _save_figure(out.path, task, pic, data), []
    array = output_array(out, data, levels)
    scales = output_scales(out, levels)
    return save_output(out, array, task, carried_for(task.op, pic.carried, out, scales)), scales


def _notes(op, pic: Picture, said: list[str], data: np.ndarray, kept: int) -> str:
    """The note of a processed file: the picture's notes, then `said` (the operation's
    summary), the result's.

    The values that are not finite are counted unless the operation vouches for them
    (:func:`convcli.app.ops.not_finite_count`: 1 ms a photo spared).
    """
    notes = list(pic.notes) + [note for note in said if note]
    return _file_notes(notes, not_finite_count(op, pic, data), kept, nodata=pic.carried.nodata)


def _file_notes(notes: list[str], not_finite: int, kept: int, nodata: float | None = None) -> str:
    """`notes`, then what the result's values and the outputs kept call for, in one line.

    An input with GDAL's nodata (`nodata`) has its missing pixels read as NaN:
    the results of their windows are missing too, and said so.
    """
    if not_finite:
        missing = "" if nodata is None else f"missing (windows of nodata pixels, {nodata:g}) or "
        notes.append(
            f"{not_finite:,} result values are {missing}not finite "
            "(overflow, or NaN/inf in the input)"
        )
    if kept:
        notes.append(f"kept {kept} existing output(s) (use --overwrite to replace them)")
    return "; ".join(notes)


def _process_staged(task: Task, timings: dict, written: _Written) -> FileResult:
    """:func:`_process` for a task with URLs: through a local staging folder (:mod:`.staging`).

    An input on object storage is downloaded first. For an output folder on
    object storage, the staging folder stands for it: the outputs already
    there (``task.existing``, listed once for the run) are empty placeholders,
    so that they are kept as on disk, or with ``--overwrite`` copies, whose
    marker says whether convcli wrote them. Each output written is then
    uploaded in one put, so an object appears whole or not at all.
    """
    _remove_stale_staging_once()
    with staging_folder() as staging:
        source = download_input(task, staging, timings)
        downloaded = source != task.source
        if not is_url(task.out_dir):
            result = _process(replace(task, source=source, downloaded=downloaded), timings, written)
            return replace(result, source=task.source)
        out = os.path.join(staging, "output")
        os.makedirs(out)
        stand_in_for_outputs(task, out)
        staged = _Written()
        try:
            result = _process(staged_task(task, source, downloaded, out), timings, staged)
        except OSError as exc:  # named as the user knows it: its URL, not the staging path
            if isinstance(exc.filename, str) and exc.filename.startswith(out + os.sep):
                exc.filename = storage.join(task.out_dir, os.path.basename(exc.filename))
            raise
        written.records, written.todo = staged.records, staged.todo
        upload_outputs(task, staged.paths, written.paths, timings)
        return replace(result, source=task.source, outputs=tuple(written.paths))


@functools.cache
def _remove_stale_staging_once() -> None:
    """The staging folders of killed runs, removed once a process (:func:`remove_stale_staging`)."""
    remove_stale_staging()


def _levels(data: np.ndarray, index: int, mapping, depth: int) -> tuple[np.ndarray, LevelScale]:
    # A contiguous copy of the channel first: the mapping's passes over a strided
    # channel of 9 took 55 ms on a 2400x1800 map, 33 ms with the copy (8 ms of it).
    channel = np.ascontiguousarray(data[:, :, index])
    return map_levels(
        channel, mapping.method, white=mapping.white, depth=depth, margin=mapping.margin
    )


def _save_figure(path: Path, task: Task, pic, data: np.ndarray) -> bool:
    grid = task.op.figure(pic, data)
    with library_section():
        return save_grid(
            path,
            grid.panels,
            ncols=grid.ncols,
            title=f"{Path(task.source).name}: {grid.title}",
            overwrite=task.overwrite,
        )
