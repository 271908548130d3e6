"""Worker processes on this machine that can be stopped at once (:class:`LocalProcessPool`).

Workers ignore SIGINT and SIGTERM (the parent decides when to stop); a stop
request interrupts the file being processed (SIGUSR1), and a second one ends
it at once. Used by :class:`convcli.engines.processes.BatchRun`.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import CancelledError, InvalidStateError, ProcessPoolExecutor
from contextlib import contextmanager

from ..layers._engine.tiles import set_threads
from .this_process import default_jobs, keep_freed_memory


class LocalProcessPool(ProcessPoolExecutor):
    """`jobs` worker processes on this machine, which can be killed at once.

    Workers ignore SIGINT and SIGTERM (the parent decides when to stop), run
    ``CPUs // jobs`` layer threads each (unless ``CONVCLI_THREADS`` is set),
    and keep freed image buffers for the next file (:func:`keep_freed_memory`).

    Besides the ``Executor`` interface it offers the hooks that
    :class:`BatchRun` looks for: :meth:`busy` (tasks being processed now),
    :meth:`stop_starting` (tasks already queued are not started),
    :meth:`terminate` (kill the workers) and :meth:`worker_deaths` (how
    workers that died ended).
    """

    def __init__(self, jobs: int):
        context = multiprocessing.get_context()
        self.jobs = jobs
        self._pid_queue = context.SimpleQueue()
        self._pids: list[int] = []
        self._workers: dict = {}  # pid -> multiprocessing.Process
        self._other_children = {p.pid for p in multiprocessing.active_children()}
        self._busy = context.Value("i", 0)
        self._stopping = context.Event()
        threads = max(1, default_jobs() // jobs)
        super().__init__(
            max_workers=jobs,
            mp_context=context,
            initializer=_worker_init,
            initargs=(threads, self._pid_queue, self._busy, self._stopping),
        )

    def submit(self, fn, /, *args, **kwargs):
        """Run ``fn(*args, **kwargs)`` in a worker, unless :meth:`stop_starting` was called.

        A task that was queued but not started when :meth:`stop_starting` was
        called raises ``concurrent.futures.CancelledError``.
        """
        future = super().submit(_tracked_call, fn, *args, **kwargs)
        if not self._workers:  # the pool starts its processes on the first submit
            self._workers = {
                p.pid: p
                for p in multiprocessing.active_children()
                if p.pid not in self._other_children
            }
        return future

    def busy(self) -> int:
        """The number of tasks that workers are processing now."""
        return max(0, min(self._busy.value, self.jobs))

    def stop_starting(self) -> None:
        """Start no more tasks: those queued in the workers end with CancelledError."""
        self._stopping.set()

    def _worker_pids(self) -> list[int]:
        while not self._pid_queue.empty():
            self._pids.append(self._pid_queue.get())
        return sorted(set(self._pids) | set(self._workers))

    def worker_deaths(self) -> dict[int, int]:
        """Process id -> exit code (negative: the signal) of the workers that died.

        Read from the workers' ``multiprocessing.Process`` objects, kept when
        they started (``multiprocessing.active_children()``). Workers that
        ended cleanly, and those the pool stopped itself with SIGTERM, are left
        out. Waits up to a second for a status: the pool notices a death a
        moment before it can be read.
        """
        for _ in range(100):
            deaths = {
                pid: p.exitcode
                for pid, p in self._workers.items()
                if p.exitcode and p.exitcode != -signal.SIGTERM
            }
            if deaths:
                return deaths
            time.sleep(0.01)
        return {}

    def cannot_finish(self) -> bool:
        """Whether the pool broke and its manager thread has ended: a future not done by now
        never will be. CPython's pool fails the pending tasks without the lock that
        ``submit`` holds, so a task submitted as it broke can be left so."""
        thread = getattr(self, "_executor_manager_thread", None)
        return bool(getattr(self, "_broken", False)) and not (thread and thread.is_alive())

    def interrupt(self) -> None:
        """Raise KeyboardInterrupt in the workers' tasks (SIGUSR1): each ends its file now.

        A worker's task returns what it wrote so far
        (:func:`convcli.app.process.process_file`); a worker between tasks
        is left alone, and one in a long call of a C library sees it when
        the call returns.
        """
        for pid in self._worker_pids():
            try:
                os.kill(pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass

    def terminate(self) -> list[int]:
        """Kill the worker processes; return their process ids.

        Their temporary files can then be removed
        (:func:`convcli.io.safeio.remove_temporaries`).
        """
        pids = self._worker_pids()
        with _quiet_pool_thread():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)  # they ignore SIGTERM
                except ProcessLookupError:
                    pass
            self.shutdown(wait=True, cancel_futures=True)  # joins the killed workers
        return pids


@contextmanager
def _quiet_pool_thread():
    """Silence the pool thread's InvalidStateError while a killed pool winds down.

    Python 3.11's pool thread tries to set an error on futures that were
    cancelled when it sees its workers die, and prints "Exception in thread
    ... InvalidStateError: CANCELLED"; the futures are already settled, so
    there is nothing to report.
    """
    previous = threading.excepthook

    def hook(args):
        if not issubclass(args.exc_type, InvalidStateError):
            previous(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous


# In a worker process of a LocalProcessPool: the shared count of busy workers,
# the event that says not to start queued tasks, and whether a task is running.
_busy = None
_stopping = None
_in_task = False


def _worker_init(threads: int, pid_queue, busy, stopping) -> None:
    global _busy, _stopping
    # The parent decides when to stop (Ctrl-C, kill): workers finish their file.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, _interrupt_task)
    signal.signal(signal.SIGALRM, _interrupt_task)  # a stop sent again: _interrupt_again
    sys.unraisablehook = _interrupt_again(sys.unraisablehook)
    _busy, _stopping = busy, stopping
    pid_queue.put(os.getpid())
    # One process per core already: the layers' row-tile threads would compete.
    if not os.environ.get("CONVCLI_THREADS"):
        set_threads(threads)
    keep_freed_memory()
    _watch_parent(os.getppid())


# How often a worker looks whether its parent is still there, and how long an orphaned
# worker's file has to stop where it is (as at a second stop request) before it exits.
_PARENT_POLL_SECONDS = 0.5
_ORPHAN_GRACE_SECONDS = 2.0


def _watch_parent(parent: int) -> None:
    """End this worker once the process that started it is gone (SIGKILL, the out-of-memory
    killer): the file being processed stops where it is, its temporary files removed, as at
    a second stop request; then the worker exits. It would otherwise wait for tasks forever,
    since it holds an end of the task queue's pipe itself."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_PARENT_POLL_SECONDS)
        if _in_task:
            os.kill(os.getpid(), signal.SIGUSR1)  # _interrupt_task
            deadline = time.monotonic() + _ORPHAN_GRACE_SECONDS
            while _in_task and time.monotonic() < deadline:
                time.sleep(0.05)
        os._exit(1)

    threading.Thread(target=watch, name="convcli-parent-watch", daemon=True).start()


def _interrupt_task(signum, frame):
    """SIGUSR1 in a worker (:meth:`LocalProcessPool.interrupt`): stop the task running, if any."""
    if _in_task:
        raise KeyboardInterrupt


def _interrupt_again(previous):
    """An unraisable-exception hook for workers: a stop that landed where Python cannot raise.

    A KeyboardInterrupt from :func:`_interrupt_task` that lands in a weakref
    callback or a ``__del__`` is ignored by Python and printed as "Exception
    ignored in ...": here it is not printed, and the stop comes again a
    millisecond later (SIGALRM), so that it reaches the task's own code. Sent
    at once, it could land in this hook itself, where Python ignores it again.
    """

    def hook(unraisable):
        if issubclass(unraisable.exc_type, KeyboardInterrupt):
            if _in_task:
                signal.setitimer(signal.ITIMER_REAL, 0.001)
            return
        previous(unraisable)

    return hook


def _tracked_call(fn, *args, **kwargs):
    global _in_task
    if _stopping is not None and _stopping.is_set():
        raise CancelledError("not started: the run is stopping")
    if _busy is None:
        return fn(*args, **kwargs)
    with _busy.get_lock():
        _busy.value += 1
    try:
        _in_task = True
        result = fn(*args, **kwargs)
        _in_task = False  # before returning: a late stop request must not replace the result
        return result
    finally:
        _in_task = False
        with _busy.get_lock():
            _busy.value -= 1
