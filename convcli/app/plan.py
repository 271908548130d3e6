"""Planning a run: the command line's INPUT arguments to picklable :class:`Task` objects.

:func:`find_inputs` expands files and folders into image files, each with
the folder its outputs go to; :func:`plan_tasks` makes one task per distinct
file, with output stems that cannot clash (:func:`convcli.app.names.output_stems`).
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ..images import DEFAULT_MAX_PIXELS, is_image_name
from ..safeio import path_key, resolved
from ..storage import basename, is_folder, is_url, join, list_names, walk_visible
from .names import earlier_outputs, named_for_stem, output_stems
from .ops import OPERATION_NAMES, Operation


@dataclass(frozen=True)
class InputFile:
    """One input and the folder its outputs go to."""

    path: str
    out_dir: str


@dataclass
class Inputs:
    """What :func:`find_inputs` found: files in order, and notes for the user."""

    files: list[InputFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


def _same_path(a: Path, b: Path) -> bool:
    return resolved(a) == resolved(b)


def _out_folder(out_dir: str, rel: str) -> str:
    """The output folder for inputs in the subfolder `rel` ("." for the top) of an INPUT folder."""
    if is_url(out_dir):
        return join(out_dir, rel)
    return str(Path(out_dir) / rel)


def _find_in_url(arg: str, out_dir: str, found: Inputs, *, recursive: bool,
                 options: dict | None) -> None:
    """:func:`find_inputs` for one URL: an object, or a folder listed through fsspec."""
    if not is_folder(arg, options):
        found.files.append(InputFile(arg, out_dir))
        return
    count = 0
    for rel, names in walk_visible(arg, recursive=recursive, options=options):
        images = [n for n in names if is_image_name(n)]
        out_folder = _out_folder(out_dir, rel)
        if out_folder.rstrip("/") == join(arg, rel).rstrip("/"):
            outputs = earlier_outputs(images, OPERATION_NAMES)
            images = [n for n in images if n not in outputs]
        for name in images:
            found.files.append(InputFile(join(arg, rel, name), out_folder))
            count += 1
    if count == 0:
        found.notes.append(f"{arg}: no image files in this folder"
                           + ("" if recursive else " (use -r to include its subfolders)"))


def find_inputs(args, *, out_dir: str | os.PathLike, recursive: bool = False,
                storage_options: dict | None = None) -> Inputs:
    """Expand the command line's INPUT arguments into image files.

    A file is taken as it is (whatever its extension: if it is not an image,
    that file fails). A folder gives the image files directly in it, sorted by
    name, recognised by extension ignoring case; with `recursive` also those
    in its subfolders, whose outputs go to the same subfolders under `out_dir`.
    Hidden files and folders (name starting with ``.``) and the output folder
    itself are passed over. In a folder that is also the output folder of its
    own images, the outputs of earlier runs are passed over too (see
    :func:`convcli.app.names.earlier_outputs`), so that running a command again
    does not take its own outputs as inputs. A folder that cannot be listed
    (the named one, or a subfolder met with `recursive`) is returned as an
    input itself, so that it fails on its own line when it is opened
    (:func:`convcli.images.open_image` raises the listing's error).
    """
    out_root = Path(out_dir)
    # An output folder on object storage is never one of the local folders walked here.
    local_out = not is_url(out_dir)
    found = Inputs()
    for arg in args:
        if is_url(arg):
            _find_in_url(str(arg), str(out_dir), found, recursive=recursive,
                         options=storage_options)
            continue
        top = Path(arg)
        if not os.path.isdir(top):  # False for a name too long, or a link loop
            found.files.append(InputFile(str(arg), _out_folder(str(out_dir), ".")))
            continue
        count = 0
        skipped_dirs = False
        unreadable: list[OSError] = []
        for folder, dirs, files in os.walk(top, onerror=unreadable.append):
            folder_path = Path(folder)
            dirs.sort()
            kept = [d for d in dirs if not _is_hidden(d) and
                    not (local_out and _same_path(folder_path / d, out_root))]
            skipped_dirs = skipped_dirs or bool(kept and not recursive)
            dirs[:] = kept if recursive else []
            rel = folder_path.relative_to(top)
            names = [n for n in sorted(files) if not _is_hidden(n) and is_image_name(n)]
            if local_out and _same_path(out_root / rel, folder_path):
                outputs = earlier_outputs(names, OPERATION_NAMES)
                names = [n for n in names if n not in outputs]
            for name in names:
                found.files.append(InputFile(str(folder_path / name),
                                             _out_folder(str(out_dir), rel.as_posix())))
                count += 1
        for error in unreadable:
            # A folder that cannot be listed fails on its own line (opening it
            # as an image repeats the error), as a file that cannot be read does.
            folder = Path(error.filename) if error.filename is not None else top
            rel = folder.parent.relative_to(top) if folder != top else Path()
            found.files.append(InputFile(str(folder), _out_folder(str(out_dir), rel.as_posix())))
            count += 1
        if count == 0:
            hint = " (use -r to include its subfolders)" if skipped_dirs else ""
            found.notes.append(f"{arg}: no image files in this folder{hint}")
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
    figure, overwrite : bool
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
    """

    source: str
    out_dir: str
    stem: str
    op: Operation
    fmt: str = "png"
    figure: bool = False
    overwrite: bool = False
    max_pixels: int = DEFAULT_MAX_PIXELS
    protected: tuple[str, ...] = ()
    out_file: str = ""
    storage_options: dict | None = None
    existing: tuple[str, ...] | None = None


def plan_tasks(inputs: list[InputFile], op: Operation, *, fmt: str = "png",
               figure: bool = False, overwrite: bool = False,
               max_pixels: int = DEFAULT_MAX_PIXELS, out_file: str = "",
               storage_options: dict | None = None) -> list[Task]:
    """One task per distinct input file, with output stems that cannot clash.

    The same file named twice (or named and found in a folder) is processed
    once. Inputs that live in an output folder are recorded in the tasks as
    protected, so that no output is ever written over an input. With
    `out_file` (one input), its output is that file, which must not be the input.
    An output folder on object storage is listed once, here, for every task
    that writes to it (``Task.existing``).
    """
    # Each input resolved once, each folder once: resolving follows every link
    # of every component, and a batch can hold a million files in a few folders.
    folder_keys: dict[str, str] = {}

    def folder_key(folder: str) -> str:
        if folder not in folder_keys:
            folder_keys[folder] = folder if is_url(folder) else path_key(folder)
        return folder_keys[folder]

    unique: list[InputFile] = []
    orders: list[tuple[str, str]] = []
    seen = set()
    for item in inputs:
        real = item.path if is_url(item.path) else resolved(item.path)
        key = os.path.normcase(real).casefold()
        if key not in seen:
            seen.add(key)
            unique.append(item)
            orders.append((key, real))
    del seen
    by_dir: dict[str, list[int]] = defaultdict(list)
    for i, item in enumerate(unique):
        by_dir[folder_key(item.out_dir)].append(i)
    inputs_in_dir: dict[str, list[str]] = defaultdict(list)
    for item in unique:
        inputs_in_dir[folder_key(os.path.dirname(item.path) or ".")].append(item.path)
    stems = [""] * len(unique)
    for indices in by_dir.values():
        paths = [Path(unique[i].path) for i in indices]
        for i, stem in zip(
            indices, output_stems(paths, orders=[orders[i] for i in indices]), strict=True
        ):
            stems[i] = stem
    tasks = []
    listed: dict[str, set[str]] = {}
    for item, stem in zip(unique, stems, strict=True):
        protected = tuple(
            p for p in inputs_in_dir.get(folder_key(item.out_dir), ())
            if named_for_stem(os.path.basename(p), stem)
        )
        if out_file:
            protected = (item.path,)
        existing = None
        if is_url(item.out_dir):
            names = listed.get(item.out_dir)
            if names is None:
                names = listed[item.out_dir] = list_names(item.out_dir, storage_options)
            existing = tuple(n for n in names if named_for_stem(n, stem)
                             or (out_file and n == basename(out_file)))
        tasks.append(Task(item.path, item.out_dir, stem, op, fmt, figure, overwrite,
                          max_pixels, protected, out_file, storage_options, existing))
    return tasks
