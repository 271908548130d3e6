"""What a batch sets in its own process: how many CPUs it may use, and how freed memory is kept.

Apart from :mod:`convcli.engines.pool` (its worker processes), so that a run
of one job does not import ``multiprocessing``.
"""

from __future__ import annotations

import ctypes

from ..layers._engine.tiles import usable_cores

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's mallopt parameters


def default_jobs() -> int:
    """The number of CPUs this process may use."""
    return usable_cores()


def keep_freed_memory() -> None:
    """Let this process reuse freed image buffers instead of returning them.

    By default glibc maps every large block afresh and unmaps it on ``free``,
    so each image's buffers are new pages, and first touching them costs
    more than decoding a JPEG. Serving every block from the heap and keeping
    up to 256 MiB of freed heap per process (the rest is returned) made one
    process on 16 photos of 2400x1800 about 20% faster (3.6 s to 2.8 s;
    decoding 55 ms to 20 ms a photo). Elsewhere than glibc this does nothing.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_MAX, 0)
    mallopt(_M_TRIM_THRESHOLD, 256 * 1024 * 1024)
