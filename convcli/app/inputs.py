"""Finding the inputs of a run: the command line's INPUT arguments as image files.

:func:`find_inputs` expands files and folders into image files, each with
the folder its outputs go to; :func:`input_folders` gives them a folder at a
time, for :func:`convcli.app.plan.stream_tasks`, and :func:`count_inputs`
counts them from the listing alone.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..io.formats import is_store_name
from ..io.images import is_image_name
from ..io.safeio import resolved
from ..io.storage import is_folder, is_url, join, walk_visible
from .names import earlier_outputs
from .ops import OPERATION_NAMES


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
class InputFolder:
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


def _without_earlier_outputs(names: list[str], sources: Iterable[str] = ()) -> list[str]:
    """`names` (of one folder) less the outputs of earlier runs of its own images, and of
    the images named `sources` (of the input folders whose outputs go to this folder)."""
    own = set(names)
    outputs = earlier_outputs(names + [n for n in sources if n not in own], OPERATION_NAMES)
    return [n for n in names if n not in outputs] if outputs else names


def _mirror_sources(folder_real: str, out_real: str, roots: list[str]) -> list[str]:
    """The image names in the input folders (of the INPUT folders `roots`, mirrored under
    the output folder `out_real`) whose outputs go to the folder `folder_real` (both
    resolved), other than that folder itself: a folder in the output folder can be the
    output folder of another input folder."""
    try:
        rel = os.path.relpath(folder_real, out_real)
    except ValueError:  # another drive
        return []
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return []
    names = []
    for root in roots:
        source = os.path.join(root, rel)
        if not os.path.isdir(source) or resolved(source) == folder_real:
            continue
        try:
            names += [n for n in _scan(source)[1] if _is_input_name(n)]
        except OSError:
            continue
    return names


def _url_folders(
    arg: str, out_dir: str, *, recursive: bool, options: dict | None, notes: list[str]
) -> Iterator[InputFolder]:
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
            yield InputFolder(folder, out_folder, images, same)
    if count == 0:
        notes.append(
            f"{arg}: no image files in this folder"
            + ("" if recursive else " (use -r to include its subfolders)")
        )


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


def _local_folders(
    top: str, out_dir: str, *, recursive: bool, notes: list[str], roots: list[str]
) -> Iterator[InputFolder | InputFile]:
    """The folders of one local INPUT folder, depth first in name order.

    A folder that cannot be listed (the named one, or a subfolder met with
    `recursive`) is an :class:`InputFile` itself, so that it fails on its own
    line when it is opened (:func:`convcli.io.images.open_image` raises the
    listing's error). The output folder is passed over, and in a folder that
    is the output folder of its own images or of another folder's of `roots`
    (the run's local INPUT folders), the outputs of earlier runs.
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
            pending.extend(
                (os.path.join(folder, d), d if rel == "." else f"{rel}/{d}") for d in reversed(dirs)
            )
        images = [n for n in names if _is_input_name(n) or n in loops]
        folder_real = resolved(folder) if local_out else ""
        same = local_out and resolved(out_folder) == folder_real
        sources = _mirror_sources(folder_real, out_real, roots) if local_out else []
        if same or sources:
            images = _without_earlier_outputs(images, sources)
        if images:
            count += len(images)
            yield InputFolder(
                folder,
                out_folder,
                images,
                same,
                frozenset(links & set(images)),
                out_dir if local_out and rel != "." else "",
            )
    if count == 0:
        hint = " (use -r to include its subfolders)" if skipped_dirs else ""
        notes.append(f"{top}: no image files in this folder{hint}")


def input_folders(
    args: Iterable, out_dir: str, *, recursive: bool, options: dict | None, notes: list[str]
) -> Iterator[InputFolder | InputFile]:
    """Each INPUT as the folders it holds, or as one :class:`InputFile` for a file."""
    top_out = _out_folder(out_dir, ".")
    args = [str(arg) for arg in args]
    roots = [a for a in args if not is_store_name(a) and not is_url(a) and os.path.isdir(a)]
    for arg in args:
        if is_store_name(arg):  # a Zarr store is one image, wherever it is
            yield InputFile(arg, top_out)
        elif is_url(arg):
            if is_folder(arg, options):
                yield from _url_folders(
                    arg, out_dir, recursive=recursive, options=options, notes=notes
                )
            else:
                yield InputFile(arg, top_out)
        elif os.path.isdir(arg):  # False for a name too long, or a link loop
            yield from _local_folders(arg, out_dir, recursive=recursive, notes=notes, roots=roots)
        else:
            yield InputFile(arg, top_out)


def find_inputs(
    args,
    *,
    out_dir: str | os.PathLike,
    recursive: bool = False,
    storage_options: dict | None = None,
) -> Inputs:
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
    for item in input_folders(
        args, str(out_dir), recursive=recursive, options=storage_options, notes=found.notes
    ):
        found.files.extend(item.files() if isinstance(item, InputFolder) else [item])
    return found


def folder_holds(outer: str, inner: str) -> bool:
    """Whether the folder `outer` holds `inner` below it (not the same folder)."""
    if is_url(outer) != is_url(inner):
        return False
    if is_url(outer):
        outer, inner = outer.rstrip("/") + "/", inner.rstrip("/") + "/"
        return inner.startswith(outer) and inner != outer
    outer, inner = resolved(outer), resolved(inner)
    return inner.startswith(outer.rstrip(os.sep) + os.sep)


def without_links_to_walked(
    folder: InputFolder, files: list[InputFile], top: str, out_dir: str, recursive: bool
) -> list[InputFile]:
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
            not rel.startswith(os.pardir)
            and _is_input_name(target)
            and not any(_is_hidden(part) for part in rel.split(os.sep))
            and (recursive or os.sep not in rel)
            and not (out_real and folder_holds(out_real, target))
        )
        if not walked and target not in seen:
            seen.add(target)
            kept.append(item)
    return kept


def count_inputs(
    args, *, out_dir: str, recursive: bool = False, storage_options: dict | None = None
) -> int:
    """The number of tasks that :func:`stream_tasks` makes of `args` a folder at a time.

    From a listing only; for the `args` that :func:`streams_by_folder` accepts.
    """
    count = 0
    for item in input_folders(
        args, out_dir, recursive=recursive, options=storage_options, notes=[]
    ):
        if isinstance(item, InputFile):
            count += 1
        elif item.links:
            count += len(
                without_links_to_walked(item, item.files(), str(args[0]), out_dir, recursive)
            )
        else:
            count += len(item.names)
    return count


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
