"""Row tiles on worker threads (numpy and the standard library only).

numpy releases the GIL inside its copies, ufuncs and matmuls, so the row
tiles of one layer call, handed to a few threads, run on that many cores.
The matmuls inside a tile are kept small enough for OpenBLAS to run them on
the calling thread, so BLAS threads and these threads do not compete.

The number of threads is ``CONVCLI_THREADS`` from the environment, else the
number of usable cores, at most 4 (beyond that memory bandwidth, not
arithmetic, limits these layers). ``CONVCLI_THREADS=1`` runs everything on
the calling thread; processes that already run one per core should set it.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor


def _default_threads() -> int:
    value = os.environ.get("CONVCLI_THREADS", "").strip()
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            raise ValueError(f"CONVCLI_THREADS must be a whole number, got {value!r}") from None
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


THREADS = _default_threads()
_executor = None
_executor_pid = None
_lock = threading.Lock()


def set_threads(count: int) -> None:
    """Use `count` tile threads from now on in this process (1: none)."""
    global THREADS, _executor
    with _lock:
        THREADS = max(1, int(count))
        _executor = None


def _pool() -> ThreadPoolExecutor:
    """The shared executor, created on first use (and again in a forked child)."""
    global _executor, _executor_pid
    with _lock:
        if _executor is None or _executor_pid != os.getpid():
            _executor = ThreadPoolExecutor(THREADS, thread_name_prefix="convcli")
            _executor_pid = os.getpid()
        return _executor


def run_tiles(tiles, work, new_state, *, neighbours_overlap=False):
    """Call ``work(state, tile)`` for every tile, on up to THREADS threads.

    Each thread has its own `state` from ``new_state()`` (scratch buffers,
    partial sums); the states are returned. Tiles must write disjoint
    outputs; with ``neighbours_overlap`` a tile may share outputs with the
    tiles next to it, and even and odd tiles run in two rounds.
    An exception in `work` is raised here, after all threads stop.
    """
    tiles = list(tiles)
    n = max(1, min(THREADS, len(tiles)))
    states = [new_state() for _ in range(n)]
    if n == 1:
        for tile in tiles:
            work(states[0], tile)
        return states
    rounds = [tiles[0::2], tiles[1::2]] if neighbours_overlap else [tiles]
    for group in rounds:

        def worker(w, group=group):
            for tile in group[w::n]:
                work(states[w], tile)

        futures = [_pool().submit(worker, w) for w in range(n)]
        for future in futures:
            future.exception()  # wait for every thread before raising
        for future in futures:
            future.result()
    return states
