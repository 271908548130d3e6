"""The run's manifest: one JSON line per file written, in each output folder.

Every run appends to ``convcli-manifest.jsonl`` in each folder it wrote to:
one object per output file, with the input, the command line, convcli's
version, the operation and its options, and for an image how its values
became levels (``level = scale * x + offset``, see
:func:`convcli.levels.map_levels`), so that the values can be had back:
``x = (level - offset) / scale``.

Only the main process writes it, as results arrive: on disk each file's
lines are appended in one ``write`` (whole lines, whatever the other runs
and workers do); on object storage the lines are kept and, at the end of the
run, the manifest is read once, appended to and put back whole.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import sys
import tempfile

from .. import storage

MANIFEST_NAME = "convcli-manifest.jsonl"
"""The manifest's file name, in each output folder."""


def operation_record(op) -> dict:
    """The operation's name and options as JSON values (kernels with their weights)."""
    return {"operation": op.name, "options": _options(op)}


def _options(op) -> dict:
    """The fields of an operation as JSON values; an operation inside another as its own options."""
    options = {}
    for field in dataclasses.fields(op):
        value = getattr(op, field.name)
        if field.name == "kernels":
            value = [{"name": k.name, "label": k.label, "weights": k.weights.tolist()}
                     for k in value]
        elif dataclasses.is_dataclass(value):
            value = {"operation": getattr(value, "name", type(value).__name__),
                     "options": _options(value)}
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
    found = None
    try:
        with open(os.path.join(folder, MANIFEST_NAME), encoding="utf-8",
                  errors="replace") as lines:
            for line in lines:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and entry.get("output") == name:
                    found = entry
    except OSError:
        return None
    return found


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

    def __init__(self, op, *, fmt: str, shown: dict | None = None,
                 storage_options: dict | None = None, argv: list[str] | None = None):
        from .. import __version__

        argv = list(sys.argv if argv is None else argv)
        argv[:1] = ["convcli"]
        # Secrets (--storage-option secret=..., s3://KEY:SECRET@...) never reach a manifest.
        command = shlex.join(storage.redact(arg) for arg in argv)
        self.run = {"command": command, "version": __version__,
                    **operation_record(op), "format": fmt}
        self.shown = shown or {}
        self.storage_options = storage_options
        self.pending: dict[str, list[str]] = {}  # object-storage folder: its new lines
        self.errors: list[str] = []

    def add(self, result) -> None:
        """Record the outputs of one result (a :class:`convcli.batch.FileResult`)."""
        source = self.shown.get(result.source, result.source)
        if storage.is_url(source):
            source = storage.redact(source)  # no s3://KEY:SECRET@...
        elif source != "-":
            source = os.path.abspath(source)
        lines: dict[str, list[str]] = {}
        for path, record in zip(result.outputs, result.records, strict=False):
            folder = storage.dirname(path) if storage.is_url(path) else os.path.dirname(path)
            entry = {"output": record["output"], "input": source, **self.run,
                     **{k: v for k, v in record.items() if k != "output"}}
            lines.setdefault(folder, []).append(_json_line(entry))
        for folder, new in lines.items():
            if storage.is_url(folder):
                self.pending.setdefault(folder, []).extend(new)
            else:
                self._append(os.path.join(folder, MANIFEST_NAME), "".join(new))

    def _append(self, path: str, text: str) -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            try:
                os.write(fd, text.encode("utf-8"))
            finally:
                os.close(fd)
        except OSError as exc:
            self._failed(path, exc)

    def _failed(self, path: str, exc: BaseException) -> None:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        message = f"{path}: the manifest could not be written: {reason}"
        if message not in self.errors:
            self.errors.append(message)

    def close(self) -> list[str]:
        """Put the manifests on object storage (read once, appended, written whole).

        Returns the lines to report for manifests that could not be written.
        """
        for folder, new in self.pending.items():
            url = storage.join(folder, MANIFEST_NAME)
            with tempfile.TemporaryDirectory(prefix="convcli-") as staging:
                local = os.path.join(staging, MANIFEST_NAME)
                try:
                    if MANIFEST_NAME in storage.list_names(folder, self.storage_options):
                        storage.download(url, local, self.storage_options)
                    with open(local, "a", encoding="utf-8") as f:
                        f.write("".join(new))
                    storage.upload(local, url, self.storage_options)
                except OSError as exc:
                    self._failed(url, exc)
        self.pending.clear()
        return list(self.errors)
