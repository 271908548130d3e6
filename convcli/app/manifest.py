"""The run's manifest: one JSON line per file written, in each output folder.

Every run appends to ``convcli-manifest.jsonl`` in each folder it wrote to:
one object per output file, with the input, the command line, convcli's
version, the operation and its options, and for an image how its values
became levels (``level = scale * x + offset``, see
:func:`convcli.levels.mapping.map_levels`), so that the values can be had back:
``x = (level - offset) / scale``.

Only the main process writes it, as results arrive: on disk each file's
lines are appended in one ``write`` (whole lines, whatever the other runs
and workers do), holding a lock on the manifest, and only the lines of
outputs that still hold what they describe: where another run replaced an
output meanwhile, its line is that run's, the last one (:func:`append_checked`).
Object storage has no append, and a read, append and put
back would lose the lines of a run writing to the same prefix meanwhile: there
each run puts its own object, ``convcli-manifest-<UTC time>Z-<random>.jsonl``,
once at its end, and a folder's manifest is all of them (and a
``convcli-manifest.jsonl`` that earlier versions wrote) in name order:
:func:`read_manifest`. As it goes, a run also puts the lines it has so far
in objects of their own (:class:`convcli.app.manifest_objects.Checkpoints`),
deleted once its object is put: a run killed before its end leaves the lines
of the outputs it put.

A Dask task also writes its files' lines to a hidden fragment beside them
before it returns (:func:`write_fragment`), which the main process deletes
once it has appended those lines itself; a fragment left behind (the result
never arrived: the scheduler or the main process was killed) is appended to
the manifest by :func:`merge_fragments`, at the end of its run or by a later
run into the folder. On object storage the fragment is a manifest object of
its own (:func:`url_fragment_name`, :func:`put_fragment`), read with the
others; the main process deletes those of the results it recorded once its
run's object is put, and a line read twice (put in both) is read once.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import shlex
import sys
import time
from collections.abc import Iterable

try:
    import fcntl
except ImportError:  # not POSIX: appends are not locked
    fcntl = None

from .._version import __version__
from ..engines.base import RunHooks
from ..io import storage
from ..io.safeio import file_identity, random_hex, write_atomic
from .manifest_objects import (
    RUN_PREFIX,
    Checkpoints,
    put_fragment,
    put_text,
    run_manifest_name,
    url_fragment_name,
)
from .outputs import checking_outputs

MANIFEST_NAME = "convcli-manifest.jsonl"
"""The manifest's file name, in each output folder."""

FRAGMENT_PREFIX = ".convcli-manifest-part-"
"""The start of the name of a Dask task's manifest fragment (:func:`write_fragment`)."""


def is_manifest_name(name: str) -> bool:
    """Whether `name` is a manifest's: ``convcli-manifest.jsonl`` or one run's object.

    >>> is_manifest_name("convcli-manifest.jsonl"), is_manifest_name(run_manifest_name())
    (True, True)
    """
    return name == MANIFEST_NAME or (name.startswith(RUN_PREFIX) and name.endswith(".jsonl"))


def read_manifest(folder: str, storage_options: dict | None = None) -> list[dict]:
    """The records of the manifest of `folder` (a local folder or a URL), oldest first.

    On disk, the lines of ``convcli-manifest.jsonl``. On object storage, the
    lines of every manifest object there (:func:`is_manifest_name`), in name
    order: ``convcli-manifest.jsonl`` first, then each run's (and the Dask
    tasks' fragment objects, :func:`url_fragment_name`). Lines that are not
    JSON objects are passed over, and a line that comes again (the same
    text: a fragment object and its run's object both hold it) is read once,
    where it comes last; no manifest gives an empty list.

    Raises
    ------
    OSError
        A manifest that exists cannot be read.
    """
    if not storage.is_url(folder):
        try:
            with open(os.path.join(storage.local_path(folder), MANIFEST_NAME), "rb") as f:
                return _records([f.read()])
        except FileNotFoundError:
            return []
    names = sorted(n for n in storage.list_names(folder, storage_options) if is_manifest_name(n))
    names.sort(key=lambda n: n != MANIFEST_NAME)  # the one of earlier versions first
    return _records(
        [storage.read_bytes(storage.join(folder, name), storage_options) for name in names]
    )


def _records(blobs: list[bytes]) -> list[dict]:
    """The JSON objects of the lines of `blobs`, in order; a line that comes again, once (last)."""
    lines = [line for data in blobs for line in data.decode("utf-8", errors="replace").splitlines()]
    last = {line: number for number, line in enumerate(lines)}
    records = []
    for number, line in enumerate(lines):
        if last[line] != number:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            records.append(entry)
    return records


def operation_record(op) -> dict:
    """The operation's name and options as JSON values (kernels with their weights)."""
    return {"operation": op.name, "options": _options(op)}


def _options(op) -> dict:
    """The fields of an operation as JSON values; an operation inside another as its own options."""
    options = {}
    for field in dataclasses.fields(op):
        value = getattr(op, field.name)
        if field.name == "kernels":
            value = [
                {"name": k.name, "label": k.label, "weights": k.weights.tolist()} for k in value
            ]
        elif dataclasses.is_dataclass(value):
            value = {
                "operation": getattr(value, "name", type(value).__name__),
                "options": _options(value),
            }
        elif isinstance(value, tuple):
            value = list(value)
        options[field.name] = value
    return options


def _json_line(entry: dict) -> str:
    """One line of strict JSON: a value that is not finite is written as null."""
    try:
        return json.dumps(entry, allow_nan=False) + "\n"
    except ValueError:
        return json.dumps(_finite(entry), allow_nan=False) + "\n"


def _finite(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(v) for key, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def record_of(path: str) -> dict | None:
    """The last record of the manifest beside `path` (a local file) that names it, or None.

    None where there is no manifest, it cannot be read, or no line names the
    file; lines that are not JSON objects are passed over.
    """
    folder, name = os.path.split(os.path.abspath(path))
    try:
        records = read_manifest(folder)
    except OSError:
        return None
    return next((entry for entry in reversed(records) if entry.get("output") == name), None)


@dataclasses.dataclass(frozen=True)
class ManifestLines:
    """Makes a run's manifest lines; small and picklable, for the Dask workers too.

    Attributes
    ----------
    run : dict
        What every line of the run says (command, version, operation, format).
    shown : dict
        Names to record for some inputs (``-`` for standard input).
    """

    run: dict
    shown: dict

    def of(self, result) -> dict[str, list[str]]:
        """The lines of `result`'s outputs, by folder.

        `result` is a :class:`convcli.engines.processes.FileResult`.
        """
        lines: dict[str, list[str]] = {}
        for folder, entries in self.entries(result).items():
            lines[folder] = [line for _, _, line in entries]
        return lines

    def entries(self, result) -> dict[str, list[tuple[str, list | None, str]]]:
        """:meth:`of` with each line's output path and the identity the file had when it
        was put in place (:class:`convcli.app.outputs.OutputRecord`; None if not known)."""
        source = self.shown.get(result.source, result.source)
        if storage.is_url(source):
            source = storage.redact(source)  # no s3://KEY:SECRET@...
        elif source != "-":
            source = os.path.abspath(source)
        entries: dict[str, list[tuple[str, list | None, str]]] = {}
        for path, record in zip(result.outputs, result.records, strict=False):
            folder = storage.dirname(path) if storage.is_url(path) else os.path.dirname(path)
            entry = {
                "output": record["output"],
                "input": source,
                **self.run,
                **{k: v for k, v in record.items() if k != "output"},
            }
            entries.setdefault(folder, []).append(
                (path, getattr(record, "identity", None), _json_line(entry))
            )
        return entries


def append_text(path: str, text: str) -> None:
    """Append `text` (whole lines) to the manifest `path` in one ``write``.

    A manifest that is a symbolic link is refused (an OSError): its lines
    would go to whatever file it names.
    """
    append_checked(path, [("", None, text)])


def append_checked(path: str, entries: list[tuple[str, list | None, str]]) -> int:
    """Append the lines of `entries` whose outputs still hold what they describe; how many.

    Each entry is ``(output path, identity, line)``: a line whose identity
    (:func:`convcli.io.safeio.file_identity` when the output was put in place)
    is no longer the file's (another run replaced it meanwhile) is left out.
    The check and the ``write`` are made holding a lock on the manifest
    (``flock``, where there is one), so that the last line naming an output
    is that of the file it holds, whatever two runs writing it do.
    """
    if os.path.islink(path):  # O_NOFOLLOW where there is one; the check where not
        raise OSError(errno.ELOOP, "a symbolic link: convcli never writes through one", path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o666)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd is closed
        kept = [
            line
            for output, identity, line in entries
            if identity is None or list(file_identity(output) or ()) == list(identity)
        ]
        if kept:
            _append_whole(fd, "".join(kept).encode("utf-8"))
    finally:
        os.close(fd)
    return len(kept)


def _append_whole(fd: int, data: bytes) -> None:
    """Append all of `data` to the open manifest `fd`, or none of it.

    A full disk may let ``write`` take part of the bytes and refuse the rest:
    what was taken is cut off again, so that no half line is left for the next
    run to append to, and the refusal is raised (OSError).
    """
    start = os.fstat(fd).st_size
    done = 0
    try:
        while done < len(data):
            written = os.write(fd, data[done:])
            if written <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            done += written
    except OSError:
        if done:
            os.ftruncate(fd, start)
        raise


def fragment_name(run_key: str, task_key: str) -> str:
    """The name of the manifest fragment of the Dask task `task_key` of the run `run_key`."""
    return f"{FRAGMENT_PREFIX}{run_key}-{task_key}.jsonl"


def write_fragment(folder: str, name: str, text: str) -> str | None:
    """Write the lines `text` to the fragment `name` in `folder` (whole, or not at all).

    Returns its path, or None where it could not be written (the main
    process then records the lines as for any result).
    """
    path = os.path.join(folder, name)
    try:
        write_atomic(
            path, lambda temporary: temporary.write_bytes(text.encode("utf-8")), overwrite=True
        )
    except OSError:
        return None
    return path


def merge_fragments(
    folder: str, names: Iterable[str] | None = None, *, min_age: float = 0.0
) -> int:
    """Append the manifest fragments left in `folder` to its manifest; return how many.

    `names`: only those fragments, else every one last changed at least
    `min_age` seconds ago (those of runs killed before they took them). Each
    is first renamed to a name of this process's, so that two runs never
    append the same fragment; one that cannot be appended is kept.
    """
    if names is None:
        try:
            names = [
                entry.name
                for entry in os.scandir(folder)
                if entry.name.startswith(FRAGMENT_PREFIX)
                and entry.name.endswith(".jsonl")
                and time.time() - entry.stat(follow_symlinks=False).st_mtime >= min_age
            ]
        except OSError:
            return 0
    merged = 0
    for name in names:
        claimed = os.path.join(
            folder, f"{FRAGMENT_PREFIX}taken-{os.getpid()}-{random_hex(4)}.jsonl"
        )
        try:
            os.rename(os.path.join(folder, name), claimed)
            os.utime(claimed)  # recent: not taken again as left behind
            with open(claimed, "rb") as f:
                text = f.read().decode("utf-8")
            append_text(os.path.join(folder, MANIFEST_NAME), text)
            os.unlink(claimed)
        except (OSError, UnicodeDecodeError):
            continue
        merged += 1
    return merged


class Manifest:
    """Appends the records of a run's results to the manifests of their folders.

    Parameters
    ----------
    op : Operation
        The run's operation.
    fmt : str
        The output format.
    shown : dict
        Names to record for some inputs (``-`` for standard input).
    storage_options : dict or None
        fsspec options for output folders on object storage.
    argv : list of str, optional
        The command line; default ``sys.argv`` (the program as ``convcli``).
    """

    def __init__(
        self,
        op,
        *,
        fmt: str,
        shown: dict | None = None,
        storage_options: dict | None = None,
        argv: list[str] | None = None,
    ):
        argv = list(sys.argv if argv is None else argv)
        argv[:1] = ["convcli"]
        # Secrets (--storage-option secret=..., s3://KEY:SECRET@...) never reach a manifest.
        command = shlex.join(storage.redact(arg) for arg in argv)
        self.lines = ManifestLines(
            {"command": command, "version": __version__, **operation_record(op), "format": fmt},
            shown or {},
        )
        self.storage_options = storage_options
        self.pending: dict[str, list[str]] = {}  # object-storage folder: its new lines
        self.errors: list[str] = []
        self.put_folders: set[str] = set()  # object-storage folders: this run's object is there
        self.checkpoints = Checkpoints(storage_options)

    def add(self, result) -> None:
        """Record the outputs of one result (a :class:`convcli.engines.processes.FileResult`)."""
        for folder, entries in self.lines.entries(result).items():
            if storage.is_url(folder):
                lines = [line for _, _, line in entries]
                self.pending.setdefault(folder, []).extend(lines)
                self.checkpoints.add(folder, lines)
            else:
                self._append(os.path.join(folder, MANIFEST_NAME), entries)

    def _append(self, path: str, entries: list) -> None:
        try:
            append_checked(path, entries)
        except OSError as exc:
            self._failed(path, exc)

    def _failed(self, path: str, exc: BaseException, lines: int = 0) -> None:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        lost = f" ({lines} line(s) of this run lost)" if lines else ""
        message = f"{path}: the manifest could not be written{lost}: {reason}"
        if message not in self.errors:
            self.errors.append(message)

    def close(self) -> list[str]:
        """Put this run's manifest object in each folder on object storage (one put each).

        Returns the lines to report for manifests that could not be written;
        :attr:`put_folders` holds the folders where it was put.
        """
        name = run_manifest_name()
        stopped = False
        try:
            self.checkpoints.stop()
        except KeyboardInterrupt:  # its put in flight goes on; this run's object is put first
            stopped = True
        for folder, new in self.pending.items():
            url = storage.join(folder, name)
            try:
                try:
                    put_text(url, "".join(new), self.storage_options)
                except KeyboardInterrupt:
                    # Its outputs are there already: their lines are put even so, once more
                    # (a few kilobytes; a second Ctrl-C stops at once), then the run stops.
                    stopped = True
                    put_text(url, "".join(new), self.storage_options)
            except OSError as exc:
                self._failed(url, exc, len(new))
            else:
                self.put_folders.add(folder)
        self.pending.clear()
        self.checkpoints.remove(self.put_folders)  # copies of lines now in the run's objects
        if stopped:
            raise KeyboardInterrupt
        return list(self.errors)


class ManifestHooks(RunHooks):
    """The run's hooks for its engine (:class:`convcli.engines.base.RunHooks`): a task's
    outputs checked by :func:`convcli.app.outputs.checking_outputs`, and its manifest lines
    kept in fragments beside its outputs.

    Parameters
    ----------
    lines : ManifestLines or None
        The run's manifest lines; None where the run keeps no manifest (``-o FILE``).
    """

    def __init__(self, lines: ManifestLines | None):
        self.lines = lines
        self.keeps_records = lines is not None

    def checking(self, check):
        return checking_outputs(check)

    def write_records(
        self, results: list, run_key: str, task_key: str, options: dict | None = None
    ) -> tuple[str, ...]:
        """Write the manifest lines of `results`' outputs to a fragment in each folder.

        Should the result never reach the client (its scheduler or itself
        killed meanwhile), the fragments are merged into the manifests at the
        end of the run or by a later run (:func:`merge_fragments`). On object
        storage the fragment is a manifest object that readers take as it is
        (:func:`put_fragment`).
        """
        if self.lines is None:
            return ()
        by_folder: dict[str, list[str]] = {}
        for result in results:
            for folder, new in self.lines.of(result).items():
                by_folder.setdefault(folder, []).extend(new)
        name, url_name = fragment_name(run_key, task_key), url_fragment_name(run_key, task_key)
        written = (
            put_fragment(folder, url_name, "".join(new), options)
            if storage.is_url(folder)
            else write_fragment(folder, name, "".join(new))
            for folder, new in by_folder.items()
        )
        return tuple(path for path in written if path is not None)

    def merge_records(self, folder: str, run_key: str, task_key: str) -> None:
        merge_fragments(folder, [fragment_name(run_key, task_key)])
