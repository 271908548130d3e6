"""Which existing files an output may replace: convcli's own, and the file a user named.

An output convcli names itself replaces only a file that carries convcli's mark
(:func:`convcli.io.image_files.written_by_convcli`); the file named with
``-o FILE --overwrite`` is replaced whoever wrote it (:func:`writing_named`). Used by
:mod:`convcli.io.safeio` at every write, and by the check of a file's outputs before
any is written.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path


def refusal(
    path,
    replaceable: Callable[[Path], bool],
    named: str,
    replace_any: bool,
    *,
    marked: bool | None = None,
) -> FileExistsError | None:
    """Why ``overwrite`` may not replace the existing `path`, as the error to raise, or None
    where it may: `replaceable` says convcli wrote it, or it is the file named with
    ``-o FILE`` (`named`; "" for none) and `replace_any` (``--overwrite``) replaces that
    whoever wrote it. `marked` as for :func:`kept_file_text`.

    The one rule for the check at the write (:func:`convcli.io.safeio.atomic_output`) and
    the check of every output before any is written
    (:func:`convcli.app.outputs.outputs_to_write`).
    """
    is_named = bool(named) and Path(path) == Path(named)
    if (replace_any and is_named) or replaceable(path):
        return None
    text = kept_file_text(path, marked=marked, named=not named or is_named)
    return FileExistsError(errno.EEXIST, text, str(path))


def kept_file_text(
    path: str | os.PathLike, *, marked: bool | None = None, named: bool = True
) -> str:
    """Why an existing file named with ``-o`` (or, not `named`, a frame's file made from
    that name) is kept: convcli did not write it, or, for a ``.npy`` (a format with no place
    for convcli's mark) where the mark is needed, `marked` (by default: :func:`marks_needed`),
    cannot tell that it did."""
    marked = marks_needed() if marked is None else marked
    why = (
        "an existing .npy is kept: convcli cannot tell it wrote one"
        if marked and os.fspath(path).lower().endswith(".npy")
        else "the existing file was not written by convcli and is kept"
    )
    if not named:
        return f"{why} (choose another -o, or move it: --overwrite replaces only the file named)"
    return f"{why} (choose another -o; --overwrite replaces a file named with -o)"


_NAMED: ContextVar[tuple[str, bool]] = ContextVar("convcli_named_output", default=("", False))


@contextmanager
def writing_named(path: str | os.PathLike, *, replace_any: bool = False) -> Iterator[None]:
    """Inside the block (in this thread), outputs are written for the file a user named
    with ``-o FILE`` (`path`; "" for none, outputs convcli named itself).

    ``overwrite`` then replaces only files that carry convcli's mark, and a
    ``.npy``, which has no place for one, is kept
    (:func:`convcli.io.image_files.written_by_convcli`); with `replace_any`
    (``--overwrite``) the file named is replaced whoever wrote it, as ``convert``
    replaces the file it is told to write, each frame's file made from its name
    still only where convcli's mark says it wrote it.
    """
    token = _NAMED.set((os.fspath(path), replace_any))
    try:
        yield
    finally:
        _NAMED.reset(token)


def marks_needed() -> bool:
    """Whether an existing output must carry convcli's mark to be replaced in this thread
    now: inside :func:`writing_named` of a file."""
    return bool(_NAMED.get()[0])


def named_output() -> tuple[str, bool]:
    """The file named with ``-o FILE`` that outputs are written for now ("" for none), and
    whether ``--overwrite`` replaces it whoever wrote it (:func:`writing_named`)."""
    return _NAMED.get()
