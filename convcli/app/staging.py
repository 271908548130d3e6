"""A task with URLs staged on the local disk (:func:`convcli.app.process.process_file`).

The input on object storage is downloaded; for an output folder on object
storage, a local folder stands for it, the outputs already there stood in for
by placeholders, and each output written is then uploaded in one put.
"""

from __future__ import annotations

import errno
import functools
import os
import time
from dataclasses import replace

from ..io import storage, store_claims
from ..io.formats import is_store_name
from ..io.storage import is_url
from .names import FORMATS, named_for_stem
from .plan import Task


def download_input(task: Task, staging: str, timings: dict) -> str:
    """The path `task`'s input is read from: a copy in `staging` of an input on object
    storage (its time in ``timings["download"]``), else the source itself (a Zarr store
    is read where it is)."""
    source = task.source
    if is_url(source) and not is_store_name(source):
        source = os.path.join(staging, "input", storage.basename(source))
        os.makedirs(os.path.dirname(source))
        start = time.perf_counter()
        fetch(task.source, source, task.storage_options)
        timings["download"] = time.perf_counter() - start
    return source


def stand_in_for_outputs(task: Task, out: str) -> None:
    """In the local folder `out`, a stand-in for each output of `task` already in its output
    folder on object storage (``task.existing``, listed once for the run, or listed now)."""
    existing = task.existing
    if existing is None:
        existing = [
            n
            for n in storage.list_names(task.out_dir, task.storage_options)
            if named_for_stem(n, task.stem)
        ]
    for name in existing:
        _stand_in(task, name, out, overwrite=task.overwrite)


def staged_task(task: Task, source: str, downloaded: bool, out: str) -> Task:
    """`task` as it runs on the local disk: reading `source`, writing to the folder `out`."""
    folder = task.out_dir.rstrip("/")
    stores = FORMATS[task.fmt].folder  # written in place, see store_place
    return replace(
        task,
        source=source,
        downloaded=downloaded,
        out_dir=out,
        existing=None,
        stores_at=task.out_dir if stores else "",
        staged=True,
        out_file=os.path.join(out, storage.basename(task.out_file)) if task.out_file else "",
        protected=tuple(
            os.path.join(out, storage.basename(p))
            for p in task.protected
            if is_url(p) and storage.dirname(p) == folder
        ),
    )


def upload_outputs(task: Task, paths: list[str], uploaded: list[str], timings: dict) -> None:
    """Put each output written to the staging folder (`paths`) in `task`'s output folder on
    object storage, adding its URL to `uploaded` once it is there; the time in
    ``timings["upload"]``."""
    stores = FORMATS[task.fmt].folder
    start = time.perf_counter()
    for path in paths:
        url = storage.join(task.out_dir, os.path.basename(path))
        if stores and os.path.isdir(path):  # a store is there already
            uploaded.append(url)
        else:  # counted once whole, also where Ctrl-C came as the put finished
            storage.upload(
                path, url, task.storage_options, done=functools.partial(uploaded.append, url)
            )
    timings["upload"] = time.perf_counter() - start


def fetch(url: str, local: str, options) -> None:
    """Download `url` to `local`; a failure is an OSError with a reason for the user."""
    try:
        storage.download(url, local, options)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory") from None
    except OSError as exc:
        if exc.strerror:
            raise
        raise OSError(errno.EIO, f"cannot be read: {exc}") from None


def _stand_in(task: Task, name: str, staging: str, *, overwrite: bool) -> None:
    """An output `name` on object storage, on the staging disk: an empty file, or a copy to
    replace (``--overwrite``); a Zarr store is a folder with its group's attributes only,
    and none stands for a store a run claimed and never finished (it is written again)."""
    url, local = storage.join(task.out_dir, name), os.path.join(staging, name)
    if is_store_name(name) and store_claims.unfinished(url, task.storage_options):
        return  # a store a run never finished: convcli's own, written again
    if not is_store_name(name):
        if overwrite:
            fetch(url, local, task.storage_options)
        else:
            open(local, "wb").close()
        return
    os.makedirs(local)
    if overwrite:  # whether convcli wrote it is in .zattrs (zarr.json for Zarr format 3)
        for meta in (".zattrs", "zarr.json"):
            try:
                storage.download(
                    storage.join(url, meta), os.path.join(local, meta), task.storage_options
                )
            except FileNotFoundError:
                continue
