"""Threads, row tiles, scratch buffers and window geometry: shared by both engines and the layers.

numpy and the standard library, plus threadpoolctl. numpy releases the GIL
inside its copies, ufuncs and matmuls, so the row tiles of one layer call,
handed to a few threads, run on that many cores. While tiles run, the BLAS
library runs every matmul on the thread that calls it (threadpoolctl sets
its thread count to 1 and back), so BLAS threads and these threads do not
compete: a matmul with many channels would otherwise start a BLAS thread per
core from each tile thread.

The number of threads is ``CONVCLI_THREADS`` from the environment, else the
number of usable cores. ``CONVCLI_THREADS=1`` runs everything on the calling
thread; the batch runner gives each of its ``--jobs`` processes its share of
the cores (``cores // jobs``) instead.
"""

from __future__ import annotations

import collections
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

# --- window geometry ---------------------------------------------------------------------------


def window_count(size: int, window: int, stride: int) -> int:
    """Number of positions of a `window` sliding by `stride` along `size` values.

    Examples
    --------
    >>> window_count(7, 3, 2)
    3
    """
    return (size - window) // stride + 1


def covered(count: int, window: int, stride: int) -> int:
    """Values covered by the first `count` windows: ``stride * (count - 1) + window``.

    Examples
    --------
    >>> covered(3, 3, 2)  # windows at 0, 2, 4 cover values 0 to 6
    7
    """
    return stride * (count - 1) + window


def window_slice(start: int, count: int, stride: int) -> slice:
    """Indices ``start, start + stride, ...``, `count` of them: one offset of every window.

    Examples
    --------
    >>> list(range(10))[window_slice(1, 3, 3)]
    [1, 4, 7]
    """
    return slice(start, start + stride * (count - 1) + 1, stride)


def ceil_div(a: int, b: int) -> int:
    """``a / b`` rounded up, for integers."""
    return -(-a // b)


# --- row tiles -----------------------------------------------------------------------------


class RowTiles:
    """The tiles of m images of n_H output rows, at most `rows_fit` rows a tile.

    Whole images when they fit (``images`` of them a tile, the last group
    possibly shorter), else ``rows`` rows of one image. Iterating gives
    ``(i0, i1, h0, h1)``: the images and output rows of each tile.

    Examples
    --------
    >>> list(RowTiles(3, 4, 9))
    [(0, 2, 0, 4), (2, 3, 0, 4)]
    >>> list(RowTiles(1, 5, 2))
    [(0, 1, 0, 2), (0, 1, 2, 4), (0, 1, 4, 5)]
    """

    def __init__(self, m: int, n_H: int, rows_fit: int):
        self.m, self.n_H = m, n_H
        if n_H <= rows_fit:
            self.images, self.rows = max(1, min(m, rows_fit // n_H)), n_H
        else:
            self.images, self.rows = 1, rows_fit

    def __iter__(self):
        m, n_H = self.m, self.n_H
        for i0 in range(0, m, self.images):
            for h0 in range(0, n_H, self.rows):
                yield i0, min(m, i0 + self.images), h0, min(n_H, h0 + self.rows)


class Scratch:
    """Flat buffers reused across tiles; ``take(name, shape)`` views their start.

    Fresh pages cost more than the arithmetic on them, so each thread keeps
    its buffers from tile to tile. The values taken are left over from
    earlier tiles: callers overwrite them.
    """

    def __init__(self, dtype):
        self.dtype, self.buffers = dtype, {}

    def take(self, name, shape, dtype=None):
        size = math.prod(shape)
        buf = self.buffers.get(name)
        if buf is None or buf.size < size:
            buf = self.buffers[name] = np.empty(size, dtype or self.dtype)
        return buf[:size].reshape(shape)


# --- threads -----------------------------------------------------------------------------------


def usable_cores() -> int:
    """The number of CPUs this process may use (its affinity mask where known)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _default_threads() -> int:
    value = os.environ.get("CONVCLI_THREADS", "").strip()
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            raise ValueError(f"CONVCLI_THREADS must be a whole number, got {value!r}") from None
    return usable_cores()


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


_blas_lock = threading.Lock()
_blas_users = 0
_blas_limit = None


@contextmanager
def blas_on_calling_thread():
    """Run BLAS calls on the thread that makes them, for the duration of the block.

    The first of overlapping blocks (from several threads) sets the BLAS
    libraries' thread count to 1, the last one restores it.
    """
    global _blas_users, _blas_limit
    with _blas_lock:
        if _blas_users == 0:
            _blas_limit = _blas_controller().limit(limits=1, user_api="blas")
        _blas_users += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_users -= 1
            if _blas_users == 0:
                _blas_limit.restore_original_limits()
                _blas_limit = None


_controller = None


def _blas_controller():
    """threadpoolctl's view of the loaded BLAS libraries, found once (about 1 ms)."""
    global _controller
    if _controller is None:
        from threadpoolctl import ThreadpoolController

        _controller = ThreadpoolController()
    return _controller


# A thread is worth handing work to for about this much of it: in passes of
# numpy over one value (about a nanosecond each; a BLAS multiply-add is about
# a sixteenth of one), about a millisecond. Handing a tile to another thread
# and waiting for it costs some tens of microseconds, more on a busy machine:
# a 96x96 RGB depthwise call took 0.8 ms on one thread and 2.0 ms on two.
WORK_PER_THREAD = 1 << 20


def thread_count(n_tiles: int, work: float | None = None) -> int:
    """The threads for `n_tiles` tiles of `work` in all: THREADS at most, one per tile at most,
    and one per :data:`WORK_PER_THREAD` of work.

    >>> set_threads(8); thread_count(3), thread_count(100, 2.5 * WORK_PER_THREAD)
    (3, 2)
    >>> set_threads(_default_threads())
    """
    n = min(THREADS, n_tiles)
    if work is not None:
        n = min(n, int(work // WORK_PER_THREAD))
    return max(1, n)


def map_in_order(function, items, workers: int | None = None):
    """``function(item)`` of each of `items` (an iterator), in their order, on `workers`
    threads (THREADS by default), a few items ahead at most.

    For work that runs without the GIL on items that come one by one: deflating
    and inflating the tiles of a TIFF read or written in strips.
    """
    workers = THREADS if workers is None else workers
    if workers < 2:
        yield from map(function, items)
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="convcli-codec") as pool:
        waiting: collections.deque = collections.deque()
        for item in items:
            waiting.append(pool.submit(function, item))
            if len(waiting) >= 2 * workers:
                yield waiting.popleft().result()
        while waiting:
            yield waiting.popleft().result()


def run_tiles(
    tiles, work, new_state, *, neighbours_overlap=False, cost=None, as_free=False, blas=True
):
    """Call ``work(state, tile)`` for every tile, on up to THREADS threads.

    Each thread has its own `state` from ``new_state()`` (scratch buffers,
    partial sums); the states are returned. Tiles must write disjoint
    outputs; with ``neighbours_overlap`` a tile may share outputs with the
    tiles next to it, and even and odd tiles run in two rounds. The
    threads take the tiles in fixed turns, so that a state's partial sums
    add the same tiles in the same order from call to call; with `as_free`
    (for work whose results do not depend on which thread runs a tile), each
    takes the next tile as it finishes one instead.
    `cost` is the call's work (in :data:`WORK_PER_THREAD`'s units): small
    calls use fewer threads (:func:`thread_count`), so that more threads
    never make them slower.
    An exception in `work` is raised here, after all threads stop. BLAS
    runs on the calling threads meanwhile (:func:`blas_on_calling_thread`),
    unless `blas` is false (work that calls no BLAS).
    """
    tiles = list(tiles)
    threads = thread_count(len(tiles), cost)
    if not blas or (threads == 1 and cost is not None and cost < WORK_PER_THREAD):
        # Under a thread's worth of work BLAS runs on this thread anyway; not
        # asking spares a small file's run the import of threadpoolctl.
        return _run_tiles(tiles, work, new_state, neighbours_overlap, threads, as_free)
    with blas_on_calling_thread():
        return _run_tiles(tiles, work, new_state, neighbours_overlap, threads, as_free)


def _run_tiles(tiles, work, new_state, neighbours_overlap, n, as_free=False):
    states = [new_state() for _ in range(n)]
    if n == 1:
        for tile in tiles:
            work(states[0], tile)
        return states
    rounds = [tiles[0::2], tiles[1::2]] if neighbours_overlap else [tiles]
    errors = np.geterr()  # the caller's floating-point error handling, in every thread
    for group in rounds:
        turns = _Shared(group) if as_free else None

        def worker(w, group=group, turns=turns):
            with np.errstate(**errors):
                for tile in group[w::n] if turns is None else turns:
                    work(states[w], tile)

        # The calling thread takes the first share itself: a pool thread that sleeps took
        # 1 to 3 ms to start on a virtual machine, and a photo's conv then ran slower on
        # two threads than on one (6.65 against 6.11 ms).
        futures = [_pool().submit(worker, w) for w in range(1, n)]
        try:
            worker(0)
            error = None
        except Exception as raised:  # raised after every thread stops, as theirs are
            error = raised
        for future in futures:
            future.exception()  # wait for every thread before raising
        if error is not None:
            raise error
        for future in futures:
            future.result()
    return states


class _Shared:
    """An iterator over tiles that several threads share, each taking the next one."""

    def __init__(self, tiles):
        self._lock, self._tiles = threading.Lock(), iter(tiles)

    def __iter__(self):
        return self

    def __next__(self):
        with self._lock:
            return next(self._tiles)


def memory_budget(jobs: int = 1) -> int:
    """Half the memory available now, shared by `jobs` files processed at once (64 MiB at least).

    Available is Linux's ``MemAvailable`` (free memory and what the page cache
    would give back), else the free pages, else 4 GiB.
    """
    available = _available_memory()
    return max(64 << 20, available // 2 // max(1, jobs))


def _available_memory() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 4 << 30
