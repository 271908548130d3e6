"""Running one task per input file over any ``concurrent.futures.Executor``.

The command line builds picklable tasks and a top-level worker function
``worker(task) -> FileResult``; :class:`BatchRun` runs them in this process or
on an executor (:class:`LocalProcessPool` here, or any other, such as Dask's
``Client.get_executor()``) and yields each result as it completes, so the
caller can report progress. Workers report a bad file as a ``"failed"``
result rather than raising.
"""

from __future__ import annotations

import ctypes
import itertools
import multiprocessing
import os
import signal
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Executor, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

from ._engine.tiles import set_threads, usable_cores
from .safeio import remove_temporaries


class BatchAborted(RuntimeError):
    """The batch cannot go on (a worker process died)."""


@dataclass(frozen=True)
class FileResult:
    """What happened to one input file.

    Attributes
    ----------
    source : str
        The input file, as it will be shown to the user.
    status : {"done", "skipped", "failed"}
        ``skipped``: every output already existed and ``--overwrite`` was not given.
    message : str
        One line: the reason for a failure or skip, or notes on a done file.
    outputs : tuple of str
        Files written.
    timings : dict
        Seconds spent per stage: ``{"decode": ..., "compute": ..., "encode": ...}``.
    detail : str
        For an unexpected error: its traceback, shown by ``--debug``.
    """

    source: str
    status: str
    message: str = ""
    outputs: tuple[str, ...] = ()
    timings: dict = field(default_factory=dict)
    detail: str = ""


def default_jobs() -> int:
    """The number of CPUs this process may use."""
    return usable_cores()


class LocalProcessPool(ProcessPoolExecutor):
    """`jobs` worker processes on this machine, which can be killed at once.

    Workers ignore SIGINT and SIGTERM (the parent decides when to stop), run
    ``CPUs // jobs`` layer threads each (unless ``CONVCLI_THREADS`` is set),
    and keep freed image buffers for the next file (:func:`keep_freed_memory`).
    """

    def __init__(self, jobs: int):
        context = multiprocessing.get_context()
        self._pid_queue = context.SimpleQueue()
        self._pids: list[int] = []
        threads = max(1, default_jobs() // jobs)
        super().__init__(max_workers=jobs, mp_context=context, initializer=_worker_init,
                         initargs=(threads, self._pid_queue))

    def terminate(self) -> list[int]:
        """Kill the worker processes; return their process ids.

        Their temporary files can then be removed
        (:func:`convcli.safeio.remove_temporaries`).
        """
        while not self._pid_queue.empty():
            self._pids.append(self._pid_queue.get())
        for pid in self._pids:
            try:
                os.kill(pid, signal.SIGKILL)  # they ignore SIGTERM
            except ProcessLookupError:
                pass
        self.shutdown(wait=True, cancel_futures=True)  # joins the killed workers
        return list(self._pids)


def _worker_init(threads: int, pid_queue) -> None:
    # The parent decides when to stop (Ctrl-C, kill): workers finish their file.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pid_queue.put(os.getpid())
    # One process per core already: the layers' row-tile threads would compete.
    if not os.environ.get("CONVCLI_THREADS"):
        set_threads(threads)
    keep_freed_memory()


# How often a run on an executor looks at its stop requests, in seconds.
_POLL_SECONDS = 0.1


class BatchRun:
    """Run ``worker(task)`` for every task; iterate to get the results.

    Parameters
    ----------
    tasks : iterable
        Picklable task objects; consumed lazily, `in_flight` ahead at most.
    worker : callable
        A module-level function (so that other processes can import it).
    executor : concurrent.futures.Executor, optional
        Where the tasks run; None runs them one by one in this process. The
        run shuts the executor down when it ends.
    in_flight : int
        Tasks submitted and not finished, at most (about twice the workers).
    stop_requests : callable
        The number of times the user asked to stop (e.g. counted by a signal
        handler), polled during a run on an executor.

    Notes
    -----
    Iterating yields a :class:`FileResult` per task, in task order in this
    process and in completion order on an executor. To end early (Ctrl-C,
    ``--fail-fast``), call :meth:`stop`: tasks not yet started are cancelled
    and the files being processed are finished, so none is left half-written;
    their results are returned. One stop request ends the iteration; a second
    one makes :meth:`stop` stop at once: an executor with a ``terminate()``
    method returning process ids (:class:`LocalProcessPool`) has its workers
    killed and their temporary files removed. Each worker handles one image
    at a time, so memory stays bounded whatever the number of tasks.
    """

    def __init__(self, tasks: Iterable, worker: Callable, *, executor: Executor | None = None,
                 in_flight: int = 2, stop_requests: Callable[[], int] = lambda: 0):
        self._tasks = iter(tasks)
        self._worker = worker
        self._executor = executor
        self._in_flight = max(1, in_flight)
        self._stop_requests = stop_requests
        self._pending: set = set()
        self._unreported: list = []
        self._task_of: dict = {}

    def __iter__(self) -> Iterator[FileResult]:
        if self._executor is None:
            keep_freed_memory()
            for task in self._tasks:
                yield run_guarded(self._worker, task)
            return
        self._submit(self._in_flight)
        while self._pending:
            done, self._pending = wait(
                self._pending, timeout=_POLL_SECONDS, return_when=FIRST_COMPLETED
            )
            if self._stop_requests():
                self._unreported = list(done)
                return
            self._submit(len(done))
            self._unreported = list(done)
            while self._unreported:
                future = self._unreported.pop()
                del self._task_of[future]
                yield _result(future)
        self._executor.shutdown()

    def _submit(self, count: int) -> None:
        for task in itertools.islice(self._tasks, count):
            future = self._executor.submit(run_guarded, self._worker, task)
            self._task_of[future] = task
            self._pending.add(future)

    @property
    def running(self) -> int:
        """Number of tasks submitted and not finished."""
        return sum(not f.done() for f in self._pending)

    def stop(self, *, force: bool = False) -> list[FileResult]:
        """End the run: cancel what has not started, finish what is running.

        Parameters
        ----------
        force : bool
            Stop the running tasks too (see the class notes).

        Returns
        -------
        list of FileResult
            The results that finished and were not yielded yet.
        """
        if self._executor is None:
            return []
        for future in self._pending:
            future.cancel()
        # Wait for the running files, unless a second request (or `force`) comes.
        while not force and not all(f.done() for f in self._pending):
            wait(self._pending, timeout=_POLL_SECONDS)
            force = self._stop_requests() >= 2
        terminate = getattr(self._executor, "terminate", None)
        if force and callable(terminate):
            unfinished = [f for f in self._pending if not f.done()]
            pids = terminate()
            for future in unfinished:
                folder = getattr(self._task_of[future], "out_dir", None)
                if folder is not None:
                    remove_temporaries(folder, pids)
        finished = [f for f in self._unreported + list(self._pending)
                    if f.done() and not f.cancelled() and f.exception() is None]
        self._pending, self._unreported = set(), []
        self._executor.shutdown(wait=not force, cancel_futures=True)
        return [f.result() for f in finished]


def _result(future) -> FileResult:
    try:
        return future.result()
    except BrokenProcessPool:
        raise BatchAborted("a worker process ended unexpectedly (out of memory?)") from None


def iter_results(
    tasks: Iterable, worker: Callable, *, jobs: int = 1
) -> Iterator[FileResult]:
    """Yield ``worker(task)`` for every task, on `jobs` local processes (see :class:`BatchRun`).

    Stopping the iteration early stops the run: tasks not yet started are
    cancelled and the running ones finish.
    """
    executor = LocalProcessPool(jobs) if jobs > 1 else None
    run = BatchRun(tasks, worker, executor=executor, in_flight=2 * jobs)
    try:
        yield from run
    finally:
        run.stop()


def run_guarded(worker: Callable, task) -> FileResult:
    """``worker(task)``, with an unexpected exception turned into a failed result.

    Workers report the errors they expect (a bad file) themselves; anything
    else is a bug, reported for that file with its traceback in ``detail``
    so the batch goes on and ``--debug`` can show it.
    """
    try:
        return worker(task)
    except Exception as exc:  # noqa: BLE001 - reported to the user, never swallowed
        source = str(getattr(task, "source", task))
        message = f"internal error: {type(exc).__name__}: {exc}"
        return FileResult(source, "failed", " ".join(message.split()),
                          detail=traceback.format_exc())


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


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
