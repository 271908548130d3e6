"""The standard streams: standard input saved with a byte limit, writes to standard output.

Each problem is a :class:`StreamError`, one line for the user: standard
input larger than the limit, a full disk while saving it, standard output
closed (``>&-``) or full (``> /dev/full``).
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
from contextlib import contextmanager

BYTES_PER_PIXEL = 8
"""Bytes of standard input allowed per pixel of ``--max-pixels`` (16-bit RGBA, uncompressed)."""

SLACK = 1 << 20
"""Bytes allowed beyond that, for a file's headers and metadata."""

_CHUNK = 1 << 20


class StreamError(Exception):
    """A standard stream cannot be read or written; the message is one line."""


def stdin_limit(max_pixels: int) -> int:
    """The most bytes of standard input taken with ``--max-pixels`` `max_pixels`; 0: no limit.

    >>> stdin_limit(1000)
    1056576
    >>> stdin_limit(0)
    0
    """
    return BYTES_PER_PIXEL * max_pixels + SLACK if max_pixels > 0 else 0


def reason(exc: OSError) -> str:
    """`exc` in a few words: "no space left on the device" for ENOSPC.

    >>> reason(OSError(errno.ENOSPC, "No space left on device"))
    'no space left on the device'
    """
    if exc.errno == errno.ENOSPC:
        return "no space left on the device"
    if exc.errno == getattr(errno, "EDQUOT", None):
        return "disk quota exceeded"
    return exc.strerror or str(exc) or type(exc).__name__


def save_stdin(path: str, max_pixels: int) -> None:
    """Copy standard input to the file `path`, at most :func:`stdin_limit` bytes.

    Raises
    ------
    StreamError
        Standard input is larger than the limit, or `path` cannot be
        written (a full disk); `path` may be left part-written, for the
        caller's temporary folder to remove.
    """
    limit = stdin_limit(max_pixels)
    source = sys.stdin.buffer
    copied = 0
    with open(path, "wb") as f:
        try:
            while chunk := source.read(_CHUNK):
                copied += len(chunk)
                if limit and copied > limit:
                    raise StreamError(
                        f"standard input is larger than {limit:,} bytes, the limit for "
                        f"--max-pixels {max_pixels:,} ({BYTES_PER_PIXEL} bytes a pixel and "
                        "1 MiB): raise --max-pixels, or 0 for no limit"
                    )
                f.write(chunk)
            f.flush()
        except OSError as exc:
            raise StreamError(f"cannot save standard input: {reason(exc)}") from None


@contextmanager
def terminate_raises(exc_type: type[BaseException]):
    """A context in which SIGTERM raises `exc_type` (in the main thread only).

    Until a run installs its own handlers, a kill then unwinds the run, and
    its temporary files (standard input saved) are removed, instead of
    ending the process where it stands.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum, frame):
        raise exc_type

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stdout_binary():
    """Standard output's binary stream; a StreamError if it is closed (``>&-``)."""
    if sys.stdout is None:
        raise StreamError("standard output is closed: nothing can be written to it")
    return sys.stdout.buffer


def write_failed(exc: OSError) -> StreamError:
    """A StreamError for a write to standard output that failed with `exc`.

    Standard output is pointed at the null device, so that the interpreter's
    last flush of what was left in its buffer does not fail a second time.
    """
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, AttributeError, ValueError):
        pass
    return StreamError(f"cannot write to standard output: {reason(exc)}")


def write_text(text: str) -> None:
    """Write `text` to standard output and flush it; a StreamError if that fails."""
    if sys.stdout is None:
        raise StreamError("standard output is closed: nothing can be written to it")
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as exc:
        raise write_failed(exc) from None
