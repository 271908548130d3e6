"""``--dry-run``: what a run would write, from the image headers, writing nothing.

For each planned :class:`convcli.app.plan.Task`, one line per output it
would write (its name, size in pixels and format) or one line saying it
would be skipped, as ``make -n`` and ``rsync -n`` do::

    photo.png -> out/photo_conv-vertical-sum.png (40x30 png)
    old.png: skip (outputs exist)

Only headers are read (:func:`convcli.io.images.open_image`); sizes come from
the operation's geometry (:func:`convcli.app.strips.output_size`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import MissingExtra
from ..io import storage
from ..io.formats import is_store_name, open_regions
from ..io.frames import select_frames
from ..io.images import check_pixels, open_image
from ..io.limits import check_stored
from ..io.safeio import staging_folder
from ..io.storage import is_url
from .names import FORMATS, GRID_FORMAT, Output, planned_outputs
from .outputs import outputs_to_write
from .plan import Task
from .process import EXPECTED_ERRORS, describe_error, reads_as_frames, strips_reason
from .stacks import StackPlan, plan_stack
from .streamed import check_strips
from .strips import in_strips, output_size


def dry_run_lines(task: Task, names: dict) -> list[str]:
    """The lines of one task: an output each, or the skip.

    `names` maps paths to the names to show for them (``-`` for standard
    input and output).

    Raises OSError or ValueError (from :mod:`convcli.io.images`) for an input
    that cannot be read, or is too small for the operation.
    """
    with _local_copy(task) as source_path:
        width, height, channels, stack, strips, frames = _header(task, source_path)
    per_frame = stack is not None and stack.per_frame
    outputs = planned_outputs(task, channels, frames=frames, per_frame=per_frame)
    todo = outputs_to_write(task, outputs, exists=lambda out: _exists(out, task))
    if not todo:
        return [f"{names.get(task.source, task.source)}: skip (outputs exist)"]
    count = len(task.op.tags(channels).channels)
    shown = names.get(task.source, task.source)
    lines = []
    for out in todo:
        if stack is not None and out.frame >= 0:
            width, height = stack.sizes[stack.position[out.frame]]
        rows, columns = output_size(task.op, height, width)
        if rows < 1 or columns < 1:
            raise ValueError(f"image is {width}x{height}: too small for this window")
        size = _size(out, columns, rows, count)
        if stack is not None and out.frame < 0 and out.kind != "grid":
            size += f", {len(stack.frames)} frames"
        if strips:
            size += ", in strips"
        lines.append(f"{shown} -> {_name(out, task, names)} ({size})")
    return lines


def _header(
    task: Task, path: str
) -> tuple[int, int, tuple[str, ...], StackPlan | None, bool, tuple[tuple[int, ...], int]]:
    """(width, height, channels) as the run would read them, with its checks, the plan
    of the frames where ``--frames`` picks several of the file, whether it is read in
    strips, and the frames picked with the file's frame count.

    A file the run reads in strips (:func:`convcli.app.process.strips_reason`)
    is checked as the strips are (their formats); every file against ``--max-pixels``.
    """
    source = open_regions(path, max_pixels=task.max_pixels) if in_strips(task.op) else None
    if source is not None:
        with source:
            check_pixels((source.width, source.height), task.max_pixels)
            check_stored(*source.stored_bytes(), task.max_pixels)
            count = getattr(source, "frame_count", 1)
            picked = (select_frames(task.frames, count), count)
            if not reads_as_frames(task, source) and strips_reason(task, source)[0] is not None:
                check_strips(task, source)
                return source.width, source.height, tuple(source.channels), None, True, picked
            if is_store_name(path):  # read whole through zarr: no Pillow
                return source.width, source.height, tuple(source.channels), None, False, picked
    with open_image(path, max_pixels=task.max_pixels) as image:
        width, height = image.upright_size
        count = image.frame_count
        frames = select_frames(task.frames, count)
        stack = plan_stack(task.fmt, image, frames, count) if len(frames) > 1 else None
        if stack is not None:
            width, height = stack.sizes[0]
        return width, height, image.channels, stack, False, (frames, count)


def _size(out: Output, columns: int, rows: int, count: int) -> str:
    """``40x30 png``, ``40x30x3 npy`` for the raw values, ``figure png`` for a grid."""
    if out.kind == "grid":
        return f"figure {GRID_FORMAT}"
    fmt = next(name for name, f in FORMATS.items() if out.path.suffix == f".{f.extension}")
    if FORMATS[fmt].raw:
        return f"{columns}x{rows}x{count} {fmt}"
    return f"{columns}x{rows} {fmt}"


def _name(out: Output, task: Task, names: dict) -> str:
    """The output as the user named its place: the URL of an output on object storage."""
    if task.out_file and out.path == Path(task.out_file):  # not a frame's file of its own
        return names.get(task.out_file, task.out_file)
    if is_url(task.out_dir):
        return task.out_dir.rstrip("/") + "/" + out.path.name
    return str(out.path)


def _exists(out: Output, task: Task) -> bool:
    if task.existing is not None:  # an output folder on object storage, listed once
        return out.path.name in task.existing
    return os.path.lexists(out.path)  # a link that names nothing is there, as the run finds


@contextmanager
def _local_copy(task: Task) -> Iterator[str]:
    """The input as a local path: itself, or a download of an object to a temporary folder."""
    if not is_url(task.source):
        yield task.source
        return

    with staging_folder() as folder:
        path = os.path.join(folder, storage.basename(task.source))
        storage.download(task.source, path, task.storage_options)
        yield path


def dry_run(tasks: Iterable[Task], shown: dict, say, echo) -> Iterator[bool]:
    """Print each task's lines with `echo`; failures with `say`; yield whether each was read."""
    for task in tasks:
        name = shown.get(task.source, task.source)
        try:
            lines = dry_run_lines(task, shown)
        except (*EXPECTED_ERRORS, MissingExtra) as exc:  # as the run fails the file
            say(f"{name}: {describe_error(exc, task.source)}")
            yield False
            continue
        for line in lines:
            echo(line)
        yield True
