"""A run's checks before it starts: where it writes (``-o``), and its inputs.

:func:`run_target` says where a run writes (a folder, one file, standard
output) and refuses what cannot work there; the other checks look at the
inputs (standard input, Zarr stores) and the folder before a cluster is
started or reached.
"""

from __future__ import annotations

import contextlib
import os
import sys
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from ..choices import DEFAULT_MAX_PIXELS, RAW_VALUES
from ..errors import OptionError
from ..io.formats import extension_of_bytes, is_store_name, load
from ..io.images import is_image_name
from ..io.safeio import staging_folder
from ..io.storage import dirname, is_url, protocol
from .names import FORMATS, file_format, format_name, planned_outputs, single_output
from .outputs import output_format
from .stdio import save_stdin


@dataclass
class Target:
    """Where a run writes: a folder, one file (``-o FILE``), or standard output (``-o -``)."""

    folder: str
    fmt: str
    out_file: str = ""
    stdout: bool = False

    def where(self, out_dir: str, *, written: bool = True, paths: tuple[str, ...] = ()) -> str:
        """Where the outputs are, for the summary; `written`: whether any is there.

        `paths`, for ``-o FILE``: the files written, where they are not the one
        named (a file's frames, each to a file of its own, say).
        """
        if not written:
            return "no outputs written"
        if self.stdout:
            return "output to standard output"
        if not self.out_file:
            return f"outputs in {out_dir}"
        if paths and list(paths) != [self.out_file]:
            names = [os.path.basename(p) for p in paths]
            shown = ", ".join(names) if len(names) <= 3 else f"{names[0]} ... {names[-1]}"
            return (
                f"{len(names)} outputs in {self.folder} ({shown}), not {out_dir}"
                if len(names) > 1
                else f"output in {paths[0]}, not {out_dir}"
            )
        return f"output in {out_dir}"


def in_memory_path(paths) -> str | None:
    """The first of `paths` on memory://, which only this process sees; or None."""
    return next((path for path in paths if protocol(path) == "memory"), None)


def run_target(out_dir: str, options, op, stack: ExitStack) -> Target:
    """Where the run writes, from `out_dir` and `options` (a
    :class:`convcli.app.run.RunOptions`: the format, --figure); errors name ``-o``."""
    fmt = format_name(options.fmt or "png")
    named = "" if out_dir == "-" else file_format(out_dir)
    out_dir = named_without_slash(out_dir, named)
    if out_dir != "-" and not named and not os.path.isdir(out_dir):
        check_not_an_image_name(out_dir)
    store = bool(named) and FORMATS[named].folder  # -o out.zarr: one output, a folder
    if out_dir != "-" and (not named or (os.path.isdir(out_dir) and not store)):
        target = Target(out_dir, fmt)
    elif options.figure:
        raise OptionError(f"{out_dir!r} is one image: --figure needs a folder", "-o")
    elif out_dir == "-":
        check_stream(
            sys.stdout,
            "-o -",
            "standard output is closed: nothing can be written to it",
            "standard output is a terminal: redirect it to a file (> out.png) or a pipe",
        )
        folder = stack.enter_context(staging_folder())
        target = Target(
            folder, fmt, os.path.join(folder, f"stdout.{FORMATS[fmt].extension}"), stdout=True
        )
    elif options.fmt is not None and named != fmt:
        raise OptionError(f"{out_dir!r} names a {named} file, but --format is {fmt}", "-o")
    else:
        folder = dirname(out_dir) if is_url(out_dir) else os.path.dirname(out_dir) or "."
        target = Target(folder, named, out_dir)
    check_raw_values(op, target.fmt)
    check_folder_format(target)
    return target


def named_without_slash(out_dir: str, named: str | None) -> str:
    """``-o`` naming a `named` format file, without a trailing slash.

    A Zarr store is a folder, so ``-o out.zarr/`` is the store ``out.zarr``; for
    any other format a trailing slash (``-o out.png/``) is an OptionError,
    unless a folder of that name exists (then it is that folder).
    """
    if not named or not out_dir.endswith(("/", os.sep)):
        return out_dir
    if FORMATS[named].folder:
        return out_dir.rstrip("/" + os.sep) or out_dir
    if not os.path.isdir(out_dir):
        raise OptionError(
            f"{out_dir!r} ends in / as a folder does, but names a {named} file: give the file "
            "without the /, or a folder name without an image extension",
            "-o",
        )
    return out_dir


def check_not_an_image_name(out_dir: str) -> None:
    """An OptionError for ``-o`` naming an image format convcli does not write (``r.bmp``).

    Such a name would otherwise be a folder of PNGs named like an image.
    """

    if is_image_name(out_dir):
        suffix = os.path.splitext(out_dir)[1]
        writes = ", ".join(f".{f.extension}" for f in FORMATS.values())
        raise OptionError(
            f"{out_dir!r}: convcli does not write {suffix} files; -o FILE takes "
            f"{writes} (.jpeg and .tif too), and a folder's name has no image "
            "extension",
            "-o",
        )


def check_folder_format(target: Target) -> None:
    """A Zarr output is a folder (or an object-storage prefix): not to standard output; zarr
    installed."""

    if not FORMATS[target.fmt].folder:
        return
    if target.stdout:
        raise OptionError(
            f"--format {target.fmt} writes a folder, which cannot go to standard "
            "output: give -o a folder or a .zarr name",
            "-o -",
        )
    load("zarr stores").require_zarr(f"--format {target.fmt} needs zarr")


def check_raw_values(op, fmt: str) -> None:
    """``--normalize none`` needs a format that holds float32 values."""
    if getattr(op, "normalize", None) == RAW_VALUES and not FORMATS[fmt].floats:
        holding = " or ".join(name for name, f in FORMATS.items() if f.floats)
        raise OptionError(
            f"none writes float32 values, which {fmt} cannot hold: use --format {holding}",
            "--normalize",
        )


def read_stdin(
    inputs: tuple[str, ...], stack: ExitStack, max_pixels: int = DEFAULT_MAX_PIXELS
) -> tuple[list[str], dict[str, str]]:
    """INPUT ``-``: standard input saved to a temporary file named ``stdin``.

    At most :func:`convcli.app.stdio.stdin_limit` bytes are taken: more is a
    :class:`convcli.app.stdio.StreamError`, as is a full disk.
    """
    if "-" not in inputs:
        return list(inputs), {}
    if inputs.count("-") > 1:
        raise OptionError("- (standard input) is given more than once", "INPUT")
    check_stream(
        sys.stdin,
        "INPUT",
        "- reads an image from standard input, which is closed",
        "- reads an image from standard input, which is a terminal: pipe an image into it",
    )
    folder = stack.enter_context(staging_folder())
    path = os.path.join(folder, "stdin")
    save_stdin(path, max_pixels)
    with open(path, "rb") as fh:  # named by what it is, as a file is by its extension
        named = path + extension_of_bytes(fh.read(12))
    os.replace(path, named)
    return [named if arg == "-" else arg for arg in inputs], {named: "-"}


def target_and_inputs(out_dir: str, inputs, options, op, stack: ExitStack):
    """``(target, paths, shown)``: where the run writes (:func:`run_target`), the input paths
    with standard input saved (:func:`read_stdin`; `shown`: how each saved one is named to
    the user) and checked (:func:`check_store_inputs`), and ``-o -`` in the format those
    inputs keep (:func:`stdout_target`)."""
    target = run_target(out_dir, options, op, stack)
    paths, shown = read_stdin(inputs, stack, options.max_pixels)
    check_store_inputs(paths)
    return stdout_target(target, op, paths, options.fmt), paths, shown


def stdout_target(target: Target, op, paths: list[str], fmt: str | None) -> Target:
    """``-o -`` writes as ``-o FILE`` does: pad's and pool's image in its input's format
    (:func:`convcli.app.outputs.output_format`: a JPEG stays a JPEG) unless ``--format``
    says otherwise; one file's stream, never a store's folder."""
    if not target.stdout or fmt is not None or len(paths) != 1:
        return target
    kept = output_format(op, paths[0], None)
    if kept == target.fmt or FORMATS[kept].folder:
        return target
    out_file = os.path.join(target.folder, f"stdout.{FORMATS[kept].extension}")
    return replace(target, fmt=kept, out_file=out_file)


def check_store_inputs(paths: list[str]) -> None:
    """Zarr stores named as inputs need zarr: a MissingExtra (a usage error) before any work.

    Stores found in a folder fail on their own line each, if it is missing.
    """

    if any(is_store_name(path) for path in paths):
        load("zarr stores").require_zarr("reading .zarr needs zarr")


def check_stream(stream, option: str, closed: str, terminal: str) -> None:
    """An OptionError naming `option` if `stream` (stdin, stdout) is closed or a terminal."""
    if stream is None:
        raise OptionError(closed, option)
    if stream.isatty():
        raise OptionError(terminal, option)


def check_one_image(tasks, out_dir: str) -> None:
    """An OptionError unless the run makes one image, for ``-o FILE`` and ``-o -``."""
    if len(tasks) > 1:
        raise OptionError(
            f"{out_dir!r} is one image, but there are {len(tasks)} input images: give a folder",
            "-o",
        )
    probe = replace(tasks[0], out_file="")
    if all(
        single_output(planned_outputs(probe, channels)) is None
        for channels in (("L",), ("R", "G", "B"))
    ):
        raise OptionError(
            f"{out_dir!r} is one image, but this run makes an image per kernel: give a folder, "
            "or one map with --combine",
            "-o",
        )


def check_folder(folder: str) -> str | None:
    """An OptionError if the output folder could not be made; nothing is created here.

    The folder is made when the first output is written. What would stop it
    is said now: a file in the way, or a parent folder that cannot be
    written. Object storage has no folders to make.

    Returns the folder that the output folder is to be made in (its nearest
    ancestor that exists), or None where it exists (or is on object storage).
    """
    if is_url(folder):
        return None
    path = Path(folder)
    made = False  # whether a folder is to be made below `path`
    while not os.path.lexists(path) and path != path.parent:
        path, made = path.parent, True
    if not path.is_dir():
        raise OptionError(
            f"cannot create the folder {folder}: {path} is in the way, and not a folder", "-o"
        )
    if made and not os.access(path, os.W_OK | os.X_OK):
        raise OptionError(f"cannot create the folder {folder}: {path}: Permission denied", "-o")
    return str(path) if made else None


def remove_unused_folders(folder: str, made_in: str | None) -> None:
    """Remove the output `folder` (with the folders a run made in it) and the parents it was
    made with in `made_in` (:func:`check_folder`), those that hold nothing: a run that
    wrote nothing leaves no folder behind (a disk that filled, every file failed).

    Only empty folders go (``os.rmdir``): one that another run has written into stays.
    A path through ``..`` is left alone: its folders, named by their text, may not be
    the ones made. Two runs into one new folder: the other may have made its folder,
    and not yet its first file, when this one removes it: its write then fails.
    """
    if made_in is None or ".." in Path(folder).parts:
        return
    if not os.path.isdir(folder) or os.path.islink(folder):
        return
    for root, _, _ in os.walk(folder, topdown=False):
        with contextlib.suppress(OSError):
            os.rmdir(root)
    path = Path(folder).parent
    while path != Path(made_in) and path != path.parent:
        try:
            os.rmdir(path)
        except OSError:
            return
        path = path.parent
