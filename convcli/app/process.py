"""Processing one file: read the image, apply the operation, write its outputs.

:func:`process_file` is the worker that :class:`convcli.batch.BatchRun` runs
for every :class:`convcli.app.plan.Task`, in this process or in another.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..batch import FileResult
from ..figures import save_grid
from ..images import PixelLimitError, open_image, save_levels, save_npy
from ..levels import to_levels
from ..safeio import path_key
from .names import FORMATS, planned_outputs
from .plan import Task

# Errors that mean "this file cannot be processed"; anything else is a bug and propagates.
EXPECTED_ERRORS = (OSError, ValueError, TypeError, MemoryError)


def describe_error(exc: BaseException, source: str = "") -> str:
    """One line for the user from an expected exception about the file `source`."""
    if isinstance(exc, MemoryError):
        return "not enough memory for this image"
    if isinstance(exc, PixelLimitError):
        return f"{exc} (raise it with --max-pixels)"
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
        if exc.filename is not None and str(exc.filename) != source:
            text = f"{exc.filename}: {text}"
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def process_file(task: Task) -> FileResult:
    """Read one image, apply the task's operation, write its outputs.

    A file that cannot be processed gives a ``"failed"`` result whose message
    is one line; unexpected exceptions (bugs) propagate.
    """
    timings: dict[str, float] = {}
    written: list[str] = []
    try:
        # Overflow and NaN are reported once per file (below), not as numpy warnings.
        with np.errstate(all="ignore"):
            return _process(task, timings, written)
    except EXPECTED_ERRORS as exc:
        return FileResult(
            task.source, "failed", describe_error(exc, task.source), tuple(written), timings
        )


def _process(task: Task, timings: dict, written: list[str]) -> FileResult:
    op = task.op
    start = time.perf_counter()
    with open_image(task.source, max_pixels=task.max_pixels) as source:
        outputs = planned_outputs(task, source.channels)
        todo = outputs if task.overwrite else [o for o in outputs if not o.path.exists()]
        protected = {path_key(p) for p in task.protected}
        for out in todo:
            if path_key(out.path) in protected:
                raise ValueError(
                    f"output {out.path.name} would replace an input file of this run; "
                    "choose another --out-dir"
                )
        if not todo:
            return FileResult(task.source, "skipped",
                              "outputs exist (use --overwrite to replace them)")
        pic = source.read()
    timings["decode"] = time.perf_counter() - start

    start = time.perf_counter()
    op.check(pic)
    data = np.asarray(op.compute(pic), dtype=np.float32)
    timings["compute"] = time.perf_counter() - start

    start = time.perf_counter()
    Path(task.out_dir).mkdir(parents=True, exist_ok=True)
    fmt = FORMATS[task.fmt]
    depth = min(pic.depth, fmt.max_depth)
    mappings = op.mappings(pic)
    kept = 0
    for out in todo:
        if out.kind == "raw":
            ok = save_npy(out.path, data, overwrite=task.overwrite)
        elif out.kind == "channel":
            levels = to_levels(data[:, :, out.index], mappings[out.index],
                               white=pic.white, depth=depth)
            ok = save_levels(out.path, levels, fmt=task.fmt, overwrite=task.overwrite)
        elif out.kind == "whole":
            levels = to_levels(data, "clip", white=pic.white, depth=depth)
            ok = save_levels(out.path, levels, fmt=task.fmt, overwrite=task.overwrite)
        else:
            ok = _save_figure(out.path, task, pic, data)
        if ok:
            written.append(str(out.path))
        else:
            kept += 1
    timings["encode"] = time.perf_counter() - start

    notes = list(pic.notes)
    not_finite = data.size - int(np.count_nonzero(np.isfinite(data)))
    if not_finite:
        notes.append(f"{not_finite:,} result values are not finite (overflow, or NaN/inf in "
                     "the input)")
    kept += len(outputs) - len(todo)
    if kept:
        notes.append(f"kept {kept} existing output(s) (use --overwrite to replace them)")
    return FileResult(task.source, "done", "; ".join(notes), tuple(written), timings)


def _save_figure(path: Path, task: Task, pic, data: np.ndarray) -> bool:
    grid = task.op.figure(pic, data)
    return save_grid(path, grid.panels, ncols=grid.ncols,
                             title=f"{Path(task.source).name}: {grid.title}",
                             overwrite=task.overwrite)
