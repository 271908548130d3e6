"""Planning a run: the command line's INPUT arguments to picklable :class:`Task` objects.

:func:`find_inputs` expands files and folders into image files, each with
the folder its outputs go to; :func:`plan_tasks` makes one task per distinct
file, with output stems that cannot clash (:func:`convcli.app.names.output_stems`).
:func:`stream_tasks` does both lazily, a folder at a time, wherever that
gives the same tasks: a batch of a million files is never held whole.
"""

from __future__ import annotations

import errno
import os
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..io.formats import is_store_name
from ..io.frames import DEFAULT_FRAMES
from ..io.images import DEFAULT_MAX_PIXELS, is_image_name
from ..io.safeio import path_key, resolved
from ..io.storage import basename, is_folder, is_url, join, list_names, walk_visible
from .names import earlier_outputs, named_for_stem, output_stems
from .ops import OPERATION_NAMES, Operation
from .outputs import output_format


@dataclass(frozen=True)
class InputFile:
    """One input and the folder its outputs go to.

    `out_root` is the run's output folder (``-o``) where `out_dir` is a
    subfolder of it made for a subfolder of the input (``-r``), else "".
    """

    path: str
    out_dir: str
    out_root: str = ""


@dataclass
class Inputs:
    """What :func:`find_inputs` found: files in order, and notes for the user."""

    files: list[InputFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class _Folder:
    """The image files of one folder met in a walk, all with one output folder.

    `same` says whether the output folder is this folder itself; `links`
    holds the names that are symbolic links.
    """

    path: str
    out_dir: str
    names: list[str]
    same: bool = False
    links: frozenset[str] = frozenset()
    out_root: str = ""

    def files(self) -> list[InputFile]:
        if self.path == ".":
            return [InputFile(name, self.out_dir, self.out_root) for name in self.names]
        start = self.path.rstrip("/" if is_url(self.path) else os.sep)
        start += "/" if is_url(self.path) else os.sep
        return [InputFile(start + name, self.out_dir, self.out_root) for name in self.names]


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


def _is_input_name(name: str) -> bool:
    """Whether a name met in a folder is an input: an image file's, or a Zarr store's."""
    return is_image_name(name) or is_store_name(name)


def _out_folder(out_dir: str, rel: str) -> str:
    """The output folder for inputs in the subfolder `rel` ("." for the top) of an INPUT folder."""
    if is_url(out_dir):
        return join(out_dir, rel)
    return str(Path(out_dir) / rel)


def _without_earlier_outputs(names: list[str]) -> list[str]:
    outputs = earlier_outputs(names, OPERATION_NAMES)
    return [n for n in names if n not in outputs] if outputs else names


def _url_folders(arg: str, out_dir: str, *, recursive: bool, options: dict | None,
                 notes: list[str]) -> Iterator[_Folder]:
    """The folders of one URL INPUT (an object is one :class:`InputFile`)."""
    count = 0
    for rel, names in walk_visible(arg, recursive=recursive, options=options):
        images = [n for n in names if _is_input_name(n)]
        out_folder = _out_folder(out_dir, rel)
        folder = join(arg, rel)
        same = out_folder.rstrip("/") == folder.rstrip("/")
        if same:
            images = _without_earlier_outputs(images)
        if images:
            count += len(images)
            yield _Folder(folder, out_folder, images, same)
    if count == 0:
        notes.append(f"{arg}: no image files in this folder"
                     + ("" if recursive else " (use -r to include its subfolders)"))


def _scan(folder: str) -> tuple[list[str], list[str], set[str], set[str]]:
    """Visible ``(subfolders, files, links among the files, link loops)`` of `folder`, sorted.

    As :func:`os.walk`: links to folders are neither walked nor files. A
    folder named as a Zarr store (``*.zarr``) is a file: an image, not walked.
    A symbolic link loop is among the files, whatever its name (an input
    that fails on its own line), and not among the links.
    """
    dirs, files, links, loops = [], [], set(), set()
    with os.scandir(folder) as entries:
        for entry in entries:
            if _is_hidden(entry.name):
                continue
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if is_dir and not is_store_name(entry.name):
                if not entry.is_symlink():
                    dirs.append(entry.name)
                continue
            files.append(entry.name)
            if entry.is_symlink():
                (loops if _is_loop(entry) else links).add(entry.name)
    dirs.sort()
    files.sort()
    return dirs, files, links, loops


def _is_loop(entry: os.DirEntry) -> bool:
    """Whether the symbolic link `entry` goes round a loop (which following it reports)."""
    try:
        entry.stat()
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def _local_folders(top: str, out_dir: str, *, recursive: bool,
                   notes: list[str]) -> Iterator[_Folder | InputFile]:
    """The folders of one local INPUT folder, depth first in name order.

    A folder that cannot be listed (the named one, or a subfolder met with
    `recursive`) is an :class:`InputFile` itself, so that it fails on its own
    line when it is opened (:func:`convcli.io.images.open_image` raises the
    listing's error). The output folder is passed over.
    """
    local_out = not is_url(out_dir)
    out_real = resolved(out_dir) if local_out else None
    count = 0
    skipped_dirs = False
    pending = [(str(Path(top)), ".")]
    while pending:
        folder, rel = pending.pop()
        out_folder = _out_folder(out_dir, rel)
        try:
            dirs, names, links, loops = _scan(folder)
        except OSError:
            count += 1
            parent = rel.rpartition("/")[0] or "." if rel != "." else "."
            yield InputFile(folder, _out_folder(out_dir, parent))
            continue
        if local_out:
            dirs = [d for d in dirs if resolved(os.path.join(folder, d)) != out_real]
        skipped_dirs = skipped_dirs or bool(dirs and not recursive)
        if recursive:
            pending.extend((os.path.join(folder, d), d if rel == "." else f"{rel}/{d}")
                           for d in reversed(dirs))
        images = [n for n in names if _is_input_name(n) or n in loops]
        same = local_out and resolved(out_folder) == resolved(folder)
        if same:
            images = _without_earlier_outputs(images)
        if images:
            count += len(images)
            yield _Folder(folder, out_folder, images, same, frozenset(links & set(images)),
                          out_dir if local_out and rel != "." else "")
    if count == 0:
        hint = " (use -r to include its subfolders)" if skipped_dirs else ""
        notes.append(f"{top}: no image files in this folder{hint}")


def _folders(args: Iterable, out_dir: str, *, recursive: bool, options: dict | None,
             notes: list[str]) -> Iterator[_Folder | InputFile]:
    """Each INPUT as the folders it holds, or as one :class:`InputFile` for a file."""
    top_out = _out_folder(out_dir, ".")
    for arg in args:
        arg = str(arg)
        if is_store_name(arg):  # a Zarr store is one image, wherever it is
            yield InputFile(arg, top_out)
        elif is_url(arg):
            if is_folder(arg, options):
                yield from _url_folders(arg, out_dir, recursive=recursive, options=options,
                                        notes=notes)
            else:
                yield InputFile(arg, top_out)
        elif os.path.isdir(arg):  # False for a name too long, or a link loop
            yield from _local_folders(arg, out_dir, recursive=recursive, notes=notes)
        else:
            yield InputFile(arg, top_out)


def find_inputs(args, *, out_dir: str | os.PathLike, recursive: bool = False,
                storage_options: dict | None = None) -> Inputs:
    """Expand the command line's INPUT arguments into image files.

    A file is taken as it is (whatever its extension: if it is not an image,
    that file fails), and so is a Zarr store (a folder named ``*.zarr``). A
    folder gives the image files and Zarr stores directly in it, sorted by
    name, recognised by extension ignoring case; with `recursive` also those
    in its subfolders, whose outputs go to the same subfolders under `out_dir`.
    Hidden files and folders (name starting with ``.``), links to folders and
    the output folder itself are passed over. In a folder that is also the
    output folder of its own images, the outputs of earlier runs are passed
    over too (see :func:`convcli.app.names.earlier_outputs`), so that running
    a command again does not take its own outputs as inputs. A folder that
    cannot be listed is returned as an input itself, so that it fails on its
    own line when it is opened.
    """
    found = Inputs()
    for item in _folders(args, str(out_dir), recursive=recursive, options=storage_options,
                         notes=found.notes):
        found.files.extend(item.files() if isinstance(item, _Folder) else [item])
    return found


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
        ``-o FILE --overwrite`` (:func:`convcli.io.safeio.replacing_any`).
    frames : "first", "all" or tuple of int
        The frames of a multi-frame file to process (``--frames``,
        :func:`convcli.io.frames.parse_frames`).
    out_root : str
        The run's output folder where `out_dir` is a subfolder made in it
        (``-r``), else "": no folder between them may be a symbolic link.
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
    downloaded: bool = False
    existing: tuple[str, ...] | None = None
    memory: int | None = None
    memory_given: bool = False
    replace_any: bool = False
    frames: str | tuple[int, ...] = DEFAULT_FRAMES
    out_root: str = ""


def _identity(path: str):
    """What makes two inputs one file: the file itself (device and inode), else its path."""
    if is_url(path):
        return path
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return resolved(path)
    return st.st_dev, st.st_ino


def _plan_group(items: list[InputFile], out_dir: str, inputs_here: list[str], op: Operation,
                **options) -> Iterator[Task]:
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
            existing = tuple(n for n in names_there if named_for_stem(n, stem)
                             or (out_file and n == basename(out_file)))
        fmt = options["fmt"]
        yield Task(item.path, item.out_dir, stem, op, protected=protected, existing=existing,
                   out_root=item.out_root, **{**options, "fmt": output_format(op, item.path, fmt),
                                              "kept_format": fmt is None})


def plan_tasks(inputs: list[InputFile], op: Operation, *, fmt: str | None = "png",
               figure: bool = False, separate: bool = False, overwrite: bool = False,
               max_pixels: int = DEFAULT_MAX_PIXELS, out_file: str = "",
               storage_options: dict | None = None, memory: int | None = None,
               memory_given: bool = False, replace_any: bool = False,
               frames=DEFAULT_FRAMES) -> list[Task]:
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
    options = dict(fmt=fmt, figure=figure, separate=separate, overwrite=overwrite,
                   max_pixels=max_pixels, out_file=out_file, storage_options=storage_options,
                   memory=memory, memory_given=memory_given, replace_any=replace_any,
                   frames=frames)
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
    tasks = []
    for key, items in groups.items():
        tasks.extend(_plan_group(items, items[0].out_dir, inputs_in_dir.get(key, []), op,
                                 **options))
    return tasks


def _contains(outer: str, inner: str) -> bool:
    """Whether the folder `outer` holds `inner` below it (not the same folder)."""
    if is_url(outer) != is_url(inner):
        return False
    if is_url(outer):
        outer, inner = outer.rstrip("/") + "/", inner.rstrip("/") + "/"
        return inner.startswith(outer) and inner != outer
    outer, inner = resolved(outer), resolved(inner)
    return inner.startswith(outer.rstrip(os.sep) + os.sep)


def streams_by_folder(args, *, out_dir: str, recursive: bool, out_file: str = "",
                      storage_options: dict | None = None) -> bool:
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
    return not (recursive and _contains(out_dir, str(args[0])))


def _is_folder(arg: str, options: dict | None = None) -> bool:
    return is_folder(arg, options) if is_url(arg) else os.path.isdir(arg)


def stream_tasks(args, op: Operation, *, out_dir: str, recursive: bool = False,
                 notes: list[str], fmt: str | None = "png", figure: bool = False,
                 separate: bool = False, overwrite: bool = False,
                 max_pixels: int = DEFAULT_MAX_PIXELS,
                 out_file: str = "", storage_options: dict | None = None,
                 by_folder: bool | None = None, memory: int | None = None,
                 memory_given: bool = False, replace_any: bool = False,
                 frames=DEFAULT_FRAMES) -> Iterator[Task]:
    """The tasks of :func:`find_inputs` and :func:`plan_tasks`, a folder at a time where it can.

    Where :func:`streams_by_folder` says so (`by_folder`, if the caller has
    asked it already), each folder is listed and planned when the tasks
    before it have been taken, so that memory holds one folder's names, not
    the batch's. Otherwise every input is listed first. `notes` receives
    :attr:`Inputs.notes`, once a folder has been listed whole.
    """
    options = dict(fmt=fmt, figure=figure, separate=separate, overwrite=overwrite,
                   max_pixels=max_pixels, out_file=out_file, storage_options=storage_options,
                   memory=memory, memory_given=memory_given, replace_any=replace_any,
                   frames=frames)
    if by_folder is None:
        by_folder = streams_by_folder(args, out_dir=out_dir, recursive=recursive,
                                      out_file=out_file, storage_options=storage_options)
    if not by_folder:
        found = find_inputs(args, out_dir=out_dir, recursive=recursive,
                            storage_options=storage_options)
        notes.extend(found.notes)
        yield from plan_tasks(found.files, op, **options)
        return
    for item in _folders(args, out_dir, recursive=recursive, options=storage_options,
                         notes=notes):
        if isinstance(item, InputFile):  # a folder that cannot be listed
            yield from _plan_group([item], item.out_dir, [], op, **options)
            continue
        files = item.files()
        here = [f.path for f in files] if item.same else []
        if item.links:
            files = _without_links_to_walked(item, files, args[0], out_dir, recursive)
        yield from _plan_group(files, item.out_dir, here, op, **options)


def _without_links_to_walked(folder: _Folder, files: list[InputFile], top: str, out_dir: str,
                             recursive: bool) -> list[InputFile]:
    """`files` less the links to files that the walk of `top` takes as they are.

    Links to the same file elsewhere are kept once.
    """
    top_real = resolved(top)
    out_real = resolved(out_dir) if not is_url(out_dir) else None
    seen = set()
    kept = []
    for item, name in zip(files, folder.names, strict=True):
        if name not in folder.links:
            kept.append(item)
            continue
        target = resolved(item.path)
        rel = os.path.relpath(target, top_real)
        walked = (
            not rel.startswith(os.pardir) and _is_input_name(target)
            and not any(_is_hidden(part) for part in rel.split(os.sep))
            and (recursive or os.sep not in rel)
            and not (out_real and _contains(out_real, target))
        )
        if not walked and target not in seen:
            seen.add(target)
            kept.append(item)
    return kept


def count_inputs(args, *, out_dir: str, recursive: bool = False,
                 storage_options: dict | None = None) -> int:
    """The number of tasks that :func:`stream_tasks` makes of `args` a folder at a time.

    From a listing only; for the `args` that :func:`streams_by_folder` accepts.
    """
    count = 0
    for item in _folders(args, out_dir, recursive=recursive, options=storage_options,
                         notes=[]):
        if isinstance(item, InputFile):
            count += 1
        elif item.links:
            count += len(_without_links_to_walked(item, item.files(), str(args[0]), out_dir,
                                                  recursive))
        else:
            count += len(item.names)
    return count


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


def count_in_background(args, **options):
    """Start :func:`count_inputs` in a thread; return a function giving the count (None before).

    Listing is much faster than processing, so the count is there long before
    the batch ends, while the tasks start at once.
    """
    import threading

    counted: list[int] = []

    def count() -> None:
        try:
            counted.append(count_inputs(args, **options))
        except (OSError, ImportError):  # the planning itself reports it
            pass

    threading.Thread(target=count, name="convcli-count", daemon=True).start()
    return lambda: counted[0] if counted else None
