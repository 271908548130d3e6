"""Planning a run: the command line's INPUT arguments to picklable :class:`Task` objects.

:func:`~convcli.app.inputs.find_inputs` expands files and folders into image files, each
with the folder its outputs go to; :func:`plan_tasks` makes one task per distinct
file, with output stems that cannot clash (:func:`convcli.app.names.output_stems`).
:func:`stream_tasks` does both lazily, a folder at a time, wherever that
gives the same tasks: a batch of a million files is never held whole.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from ..io.frames import DEFAULT_FRAMES
from ..io.images import DEFAULT_MAX_PIXELS
from ..io.safeio import path_key, resolved
from ..io.storage import basename, is_folder, is_url, list_names
from .inputs import InputFile, find_inputs, folder_holds, input_folders, without_links_to_walked
from .names import named_for_stem, output_stems
from .ops import Operation
from .outputs import output_format


@dataclass(frozen=True, slots=True)
class Task:
    """Everything :func:`convcli.app.process.process_file` needs for one input (picklable).

    Attributes
    ----------
    source : str
        The input file.
    out_dir : str
        Its output folder.
    stem : str
        The start of its output names.
    op : Operation
    fmt : str
        A key of :data:`convcli.app.names.FORMATS`.
    kept_format : bool
        `fmt` is not the run's ``--format`` but the one
        :func:`convcli.app.outputs.output_format` gives this input (its own, for pad and pool).
    figure, overwrite : bool
    separate : bool
        Write an image changed (pad, pool) channel by channel too, one grey file each
        (``--separate``, :func:`convcli.app.names.channels_written`).
    max_pixels : int
        Refuse larger images (0: no limit).
    protected : tuple of str
        Inputs of the run in the output folder whose names start with the stem:
        no output may replace them.
    out_file : str
        Write only the one image that stands for the result to this path
        (``-o FILE``, see :func:`convcli.app.names.single_output`); "" for a folder.
    storage_options : dict or None
        fsspec options for the URLs among `source` and `out_dir` (``--storage-option``).
    existing : tuple of str or None
        For an output folder on object storage, the names in it that start with
        the stem (from one listing of the folder for the whole run); None: ask
        the file system.
    stores_at : str
        An object-storage folder the Zarr outputs (``--format zarr``) are
        written to in place, while `out_dir` is the local staging folder
        that stands for it (:func:`convcli.app.process._process_staged`); "": none.
    staged : bool
        `out_dir` is the local staging folder of an output folder on object storage
        (:func:`convcli.app.staging.staged_task`): its empty placeholders stand for the
        objects there, whoever wrote them.
    downloaded : bool
        `source` is a copy on this machine's disk of an object downloaded
        from object storage: a cluster's band tasks could not read it there,
        so a large one is processed in strips by this worker alone.
    memory : int or None
        The bytes one file's work may take (``--memory``): an image whose
        whole-image work would take more is processed in strips
        (:mod:`convcli.app.streamed`); None: half the memory available.
    memory_given : bool
        `memory` is the user's ``--memory``, not a share of the memory available:
        an image read whole whose work is over it is refused
        (:func:`convcli.app.work.check_whole_work`).
    replace_any : bool
        Replace an existing output whoever wrote it: the file named with
        ``-o FILE --overwrite`` (:func:`convcli.io.ownership.writing_named`).
    frames : "first", "all" or tuple of int
        The frames of a multi-frame file to process (``--frames``,
        :func:`convcli.io.frames.parse_frames`).
    out_root : str
        The run's output folder where `out_dir` is a subfolder made in it
        (``-r``), else "": no folder between them may be a symbolic link.
    again_since : float or None
        For a task run again after its worker died (:meth:`again`): outputs
        changed since then (``time.time()``) are written again, as the
        worker's own, whose manifest lines it took with it.
    """

    source: str
    out_dir: str
    stem: str
    op: Operation
    fmt: str = "png"
    kept_format: bool = False
    figure: bool = False
    separate: bool = False
    overwrite: bool = False
    max_pixels: int = DEFAULT_MAX_PIXELS
    protected: tuple[str, ...] = ()
    out_file: str = ""
    storage_options: dict | None = None
    stores_at: str = ""
    staged: bool = False
    downloaded: bool = False
    existing: tuple[str, ...] | None = None
    memory: int | None = None
    memory_given: bool = False
    replace_any: bool = False
    frames: str | tuple[int, ...] = DEFAULT_FRAMES
    out_root: str = ""
    again_since: float | None = None

    def again(self, since: float) -> Task:
        """This task to run again after its worker died, the run's work having begun at
        `since` (``time.time()``).

        The outputs the worker put in place have no manifest line (it died with them):
        those changed since are replaced, as with ``--overwrite`` (convcli's files only),
        and recorded; an output there before the run stays, as this task would keep it.
        Outputs on object storage (staged, or Zarr stores written in place) have no time
        to tell them by: there the task runs again as it is.
        """
        if self.overwrite or is_url(self.out_dir) or self.stores_at:
            return self
        return replace(self, overwrite=True, again_since=since)


def _identity(path: str):
    """What makes two inputs one file: the file itself (device and inode), else its path."""
    if is_url(path):
        return path
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return resolved(path)
    return st.st_dev, st.st_ino


def _plan_group(
    items: list[InputFile], out_dir: str, inputs_here: list[str], op: Operation, **options
) -> Iterator[Task]:
    """The tasks of the inputs `items`, which all write to `out_dir`.

    `inputs_here` are the inputs of the run that live in `out_dir`.
    """
    out_file = options.get("out_file", "")
    stems = output_stems([Path(item.path) for item in items])
    names_there = None
    if is_url(out_dir):  # one listing of the output folder for all its tasks
        names_there = list_names(out_dir, options.get("storage_options"))
    for item, stem in zip(items, stems, strict=True):
        if out_file:
            protected = (item.path,)
        else:
            protected = tuple(p for p in inputs_here if named_for_stem(os.path.basename(p), stem))
        existing = None
        if names_there is not None:
            existing = tuple(
                n
                for n in names_there
                if named_for_stem(n, stem) or (out_file and n == basename(out_file))
            )
        fmt = options["fmt"]
        yield Task(
            item.path,
            item.out_dir,
            stem,
            op,
            protected=protected,
            existing=existing,
            out_root=item.out_root,
            **{**options, "fmt": output_format(op, item.path, fmt), "kept_format": fmt is None},
        )


def _by_output_folder(
    inputs: list[InputFile],
) -> tuple[dict[str, list[InputFile]], dict[str, list[str]]]:
    """The distinct files of `inputs` grouped by output folder, and the inputs in each folder.

    Both are keyed by the folder's resolved path (its URL for object storage).
    """
    # Each folder resolved once: resolving follows every link of every component.
    folder_keys: dict[str, str] = {}

    def folder_key(folder: str) -> str:
        if folder not in folder_keys:
            folder_keys[folder] = folder if is_url(folder) else path_key(folder)
        return folder_keys[folder]

    seen = set()
    groups: dict[str, list[InputFile]] = defaultdict(list)
    inputs_in_dir: dict[str, list[str]] = defaultdict(list)
    for item in inputs:
        identity = _identity(item.path)
        if identity in seen:
            continue
        seen.add(identity)
        groups[folder_key(item.out_dir)].append(item)
        inputs_in_dir[folder_key(os.path.dirname(item.path) or ".")].append(item.path)
    return groups, inputs_in_dir


def plan_tasks(
    inputs: list[InputFile],
    op: Operation,
    *,
    fmt: str | None = "png",
    figure: bool = False,
    separate: bool = False,
    overwrite: bool = False,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    out_file: str = "",
    storage_options: dict | None = None,
    memory: int | None = None,
    memory_given: bool = False,
    replace_any: bool = False,
    frames=DEFAULT_FRAMES,
) -> list[Task]:
    """One task per distinct input file, with output stems that cannot clash.

    The same file named twice (or named and found in a folder, or reached
    through a link) is processed once. Inputs that live in an output folder
    are recorded in the tasks as protected, so that no output is ever written
    over an input. With `out_file` (one input), its output is that file,
    which must not be the input. An output folder on object storage is
    listed once, here, for every task that writes to it (``Task.existing``).
    `fmt` None: each input's outputs in the format
    :func:`convcli.app.outputs.output_format` gives it.
    """
    options = dict(
        fmt=fmt,
        figure=figure,
        separate=separate,
        overwrite=overwrite,
        max_pixels=max_pixels,
        out_file=out_file,
        storage_options=storage_options,
        memory=memory,
        memory_given=memory_given,
        replace_any=replace_any,
        frames=frames,
    )
    groups, inputs_in_dir = _by_output_folder(inputs)
    tasks = []
    for key, items in groups.items():
        tasks.extend(
            _plan_group(items, items[0].out_dir, inputs_in_dir.get(key, []), op, **options)
        )
    return tasks


def streams_by_folder(
    args, *, out_dir: str, recursive: bool, out_file: str = "", storage_options: dict | None = None
) -> bool:
    """Whether :func:`stream_tasks` plans `args` a folder at a time.

    So it does for one INPUT folder writing to a folder, which is what a big
    batch is: then no two folders share an output folder, and the only
    inputs in an output folder are those of the folder itself, so each
    folder's tasks are those of the whole plan. The exception is an output
    folder holding the INPUT folder with `recursive`, where the output
    folder of one subfolder can be another subfolder.
    """
    if out_file or len(args) != 1 or not _is_folder(str(args[0]), storage_options):
        return False
    return not (recursive and folder_holds(out_dir, str(args[0])))


def _is_folder(arg: str, options: dict | None = None) -> bool:
    return is_folder(arg, options) if is_url(arg) else os.path.isdir(arg)


def stream_tasks(
    args,
    op: Operation,
    *,
    out_dir: str,
    recursive: bool = False,
    notes: list[str],
    fmt: str | None = "png",
    figure: bool = False,
    separate: bool = False,
    overwrite: bool = False,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    out_file: str = "",
    storage_options: dict | None = None,
    by_folder: bool | None = None,
    memory: int | None = None,
    memory_given: bool = False,
    replace_any: bool = False,
    frames=DEFAULT_FRAMES,
) -> Iterator[Task]:
    """The tasks of :func:`find_inputs` and :func:`plan_tasks`, a folder at a time where it can.

    Where :func:`streams_by_folder` says so (`by_folder`, if the caller has
    asked it already), each folder is listed and planned when the tasks
    before it have been taken, so that memory holds one folder's names, not
    the batch's. Otherwise every input is listed first. `notes` receives
    :attr:`convcli.app.inputs.Inputs.notes`, once a folder has been listed whole.
    """
    options = dict(
        fmt=fmt,
        figure=figure,
        separate=separate,
        overwrite=overwrite,
        max_pixels=max_pixels,
        out_file=out_file,
        storage_options=storage_options,
        memory=memory,
        memory_given=memory_given,
        replace_any=replace_any,
        frames=frames,
    )
    if by_folder is None:
        by_folder = streams_by_folder(
            args,
            out_dir=out_dir,
            recursive=recursive,
            out_file=out_file,
            storage_options=storage_options,
        )
    if not by_folder:
        found = find_inputs(
            args, out_dir=out_dir, recursive=recursive, storage_options=storage_options
        )
        notes.extend(found.notes)
        yield from plan_tasks(found.files, op, **options)
        return
    yield from _folder_by_folder(
        args, op, out_dir=out_dir, recursive=recursive, notes=notes, **options
    )


def _folder_by_folder(
    args, op: Operation, *, out_dir: str, recursive: bool, notes: list[str], **options
) -> Iterator[Task]:
    """:func:`stream_tasks` of one INPUT folder: each folder planned as it is listed."""
    for item in input_folders(
        args, out_dir, recursive=recursive, options=options["storage_options"], notes=notes
    ):
        if isinstance(item, InputFile):  # a folder that cannot be listed
            yield from _plan_group([item], item.out_dir, [], op, **options)
            continue
        files = item.files()
        here = [f.path for f in files] if item.same else []
        if item.links:
            files = without_links_to_walked(item, files, args[0], out_dir, recursive)
        yield from _plan_group(files, item.out_dir, here, op, **options)


class TaskStream:
    """The tasks of a run as they are taken: counted, and stopped by an error in listing.

    An error listing a folder (``OSError``, or a :class:`convcli.errors.MissingExtra`)
    ends the tasks and is kept in :attr:`error`, for the caller to report
    once the tasks taken before it are done. `on_folder` is called with each
    output folder before its first task is taken (the tasks of a folder come
    together).
    """

    def __init__(self, tasks: Iterable[Task], *, on_folder=None):
        self._tasks = iter(tasks)
        self._on_folder = on_folder
        self._folder: str | None = None
        self.taken = 0
        self.finished = False
        self.error: BaseException | None = None

    def __iter__(self) -> TaskStream:
        return self

    def __next__(self) -> Task:
        if self.finished:
            raise StopIteration
        try:
            task = next(self._tasks)
        except StopIteration:
            self.finished = True
            raise
        except (OSError, ImportError) as exc:  # MissingExtra is an ImportError
            self.finished = True
            self.error = exc
            raise StopIteration from None
        if self._on_folder is not None and task.out_dir != self._folder:
            self._folder = task.out_dir
            self._on_folder(task.out_dir)
        self.taken += 1
        return task
