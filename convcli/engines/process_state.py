"""What a file's processing borrows from the process: Python warnings and file descriptor 2.

What the image libraries say while a file is read and written belongs in that
file's result (see :func:`convcli.app.process.process_file`). Both channels
are process-wide, and a Dask worker processes several files at once, one per
thread. This module is their one owner:

Python warnings are routed by thread.
    Installed once (and again where something, such as pytest between tests,
    put the ``warnings`` module's state back): a filter at the front of
    ``warnings.filters`` that matches only in a thread gathering a file's
    messages, where every warning is shown every time whatever the other
    filters say, and a ``warnings.showwarning`` that hands what that thread
    is shown to its file. Other threads' warnings go where they went before.
    ``warnings.catch_warnings``, which swaps the module's state for every
    thread, is not used.

Text on file descriptor 2 is kept by exclusion.
    C libraries (libjpeg, libtiff) write it from whichever thread calls them,
    so it cannot be told apart by thread. :func:`library_section` holds one
    lock per process around the calls into image libraries (opening and
    decoding a file, writing one output) and, while it is held, points fd 2
    at the gathering file's capture: what appears there is that file's.

The trade-off: in one process, image libraries run for one file at a time,
while the numpy work between decoding and writing runs in parallel. A
process with one thread (local runs, one process per job) never waits for
the lock. Text that another thread writes to fd 2 while a section is held,
Python's ``sys.stderr`` included (a Dask worker's log line), is gathered
into that section's file.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from ..io.safeio import signals_held

STDERR_LIMIT = 4096
"""At most this many bytes of what C libraries write to fd 2 are kept per file."""

_thread = threading.local()  # .gathering: the _Gathered of this thread's file, or None
_section_lock = threading.RLock()
_routing_lock = threading.Lock()


class _Gathered:
    """What one file's processing was told: warnings, and the text fd 2 received."""

    def __init__(self) -> None:
        self.warnings: list[warnings.WarningMessage] = []
        self._capture = None
        self._tried = False

    def capture(self):
        """The temporary file fd 2 points to in sections, made once; None if it cannot be."""
        if not self._tried:
            self._tried = True
            try:
                self._capture = tempfile.TemporaryFile()
            except OSError:
                pass
        return self._capture

    def text_lines(self) -> list[str]:
        """What fd 2 received in the file's sections, in lines (:data:`STDERR_LIMIT` at most)."""
        if self._capture is None:
            return []
        with self._capture as capture:
            capture.seek(0)
            return capture.read(STDERR_LIMIT).decode("utf-8", "replace").splitlines()


def _gathering() -> _Gathered | None:
    return getattr(_thread, "gathering", None)


@contextmanager
def library_messages(said: list[str]) -> Iterator[None]:
    """Gather this thread's warnings and what fd 2 receives in its sections into `said`.

    One line each, once each: the text on fd 2 first, then the warnings.
    Deprecation warnings are for developers: they are issued again as usual
    once the block ends.
    """
    _route_warnings()
    gathered, outer = _Gathered(), _gathering()
    _thread.gathering = gathered
    try:
        yield
    finally:
        _thread.gathering = outer
        for line in gathered.text_lines():
            _add(said, line)
        for w in gathered.warnings:
            if issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning)):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            else:
                _add(said, str(w.message))


def _add(said: list[str], line: str) -> None:
    line = " ".join(line.split())
    if line and line not in said:
        said.append(line)


@contextmanager
def library_section() -> Iterator[None]:
    """Call image libraries inside: one thread of the process at a time.

    In a thread gathering a file's messages (:func:`library_messages`), fd 2
    points to that file's capture inside the block. Sections nest.
    """
    with _section_lock:
        gathered = _gathering()
        nested = getattr(_thread, "in_section", False)
        _thread.in_section = True
        try:
            with nullcontext() if nested or gathered is None else _fd2_to(gathered.capture()):
                yield
        finally:
            _thread.in_section = nested


@contextmanager
def _fd2_to(capture) -> Iterator[None]:
    """Point file descriptor 2 at `capture` inside the block.

    If that cannot be done (no capture, no fd 2), the text goes to the
    standard error as before.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2) if capture is not None else None
    except (OSError, ValueError, AttributeError):
        saved = None
    if saved is None:
        yield
        return
    try:
        with signals_held():  # a stop request here must not leave fd 2 redirected
            _redirected.append(saved)  # recorded first: fd 2 is never redirected unrecorded
            os.dup2(capture.fileno(), 2)
        yield
    finally:
        restore_stderr()


# The fds 2 was before each section that has it redirected now, innermost last.
_redirected: list[int] = []


def restore_stderr() -> None:
    """Point fd 2 back where it was before the library sections that have it redirected.

    A section does so as it ends; a stop (Ctrl-C) that lands as its ``finally`` begins,
    before it gets there, would leave the run's own lines going to a file's capture, so
    the file's guard (:func:`convcli.engines.processes.run_guarded`) calls this again.
    """
    # Held signals still reach Python's handler where they arrived just before: each fd
    # stays recorded until fd 2 points at it again, so that a stop here leaves it to the next call.
    with signals_held():
        while _redirected:
            os.dup2(_redirected[-1], 2)
            os.close(_redirected.pop())


# --- Python warnings, routed by thread ------------------------------------------------------


class _InGatheringThread:
    """A message pattern for ``warnings.filters`` that matches in a gathering thread only."""

    def match(self, text: str) -> bool:
        return _gathering() is not None

    def __repr__(self) -> str:
        return "<convcli: in a thread gathering a file's messages>"


_ALWAYS_WHEN_GATHERING = ("always", _InGatheringThread(), Warning, None, 0)
_shown_before = warnings.showwarning  # where the warnings of other threads go


def _show(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` while routed: to the thread's file, else as before."""
    gathered = _gathering()
    if gathered is None:
        _shown_before(message, category, filename, lineno, file, line)
    else:
        gathered.warnings.append(
            warnings.WarningMessage(message, category, filename, lineno, file, line)
        )


def _route_warnings() -> None:
    """Put the filter and :func:`_show` in place, where they are not (cheap when they are)."""
    global _shown_before
    if warnings.showwarning is _show and warnings.filters[:1] == [_ALWAYS_WHEN_GATHERING]:
        return
    with _routing_lock:
        if warnings.showwarning is not _show:
            _shown_before, warnings.showwarning = warnings.showwarning, _show
        if warnings.filters[:1] != [_ALWAYS_WHEN_GATHERING]:
            while _ALWAYS_WHEN_GATHERING in warnings.filters:
                warnings.filters.remove(_ALWAYS_WHEN_GATHERING)
            warnings.filters.insert(0, _ALWAYS_WHEN_GATHERING)
            # Forget the warnings that other filters showed once already (as filterwarnings does).
            getattr(warnings, "_filters_mutated", lambda: None)()
