"""Running one task per input file over any ``concurrent.futures.Executor``.

The command line builds picklable tasks and a top-level worker function
``worker(task) -> FileResult``; :class:`BatchRun` runs them in this process or
on an executor (:class:`LocalProcessPool` here, or any other, such as Dask's
``Client.get_executor()``) and yields each result as it completes, so the
caller can report progress. Workers report a bad file as a ``"failed"``
result rather than raising; a worker process that dies fails its file and is
replaced (see :class:`BatchRun`).
"""

from __future__ import annotations

import importlib
import itertools
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import (
    FIRST_COMPLETED,
    BrokenExecutor,
    Executor,
    Future,
    wait,
)
from dataclasses import dataclass, field

from ..errors import OptionError
from ..io.safeio import remove_temporaries
from .base import EngineError, EngineSettings, RunEngine
from .process_state import restore_stderr
from .this_process import default_jobs, keep_freed_memory


class BatchAborted(EngineError):
    """The batch cannot go on (a worker process died, and no new one can replace it)."""


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
    records : tuple of dict
        What the manifest says of each output written (its name, and for an
        image how values became levels): see :mod:`convcli.app.manifest`.
    hints : tuple of str
        Tips about the options, and what the outputs' format cannot hold of what
        the input carries: said once per run however many files give them.
    usage : bool
        The file failed for a usage error (``--frames`` picks a frame past its
        end): the run goes on with the other files, and exits 2.
    fatal : str
        For a failure of what every file needs (the object store: see
        :class:`convcli.io.storage.StoreError`), its reason: the run stops, and
        says it once.
    kept : str
        What the outputs keep of what the input carries (colour profile,
        resolution, EXIF, georeference): said with ``-v`` only.
    """

    source: str
    status: str
    message: str = ""
    outputs: tuple[str, ...] = ()
    timings: dict = field(default_factory=dict)
    detail: str = ""
    records: tuple[dict, ...] = ()
    hints: tuple[str, ...] = ()
    usage: bool = False
    fatal: str = ""
    kept: str = ""


# How often a run on an executor looks at its stop requests, in seconds.
_POLL_SECONDS = 0.1

# How long workers asked to stop at once have to report what they wrote, in seconds.
_INTERRUPT_SECONDS = 2.0

FINISH_SECONDS = 10.0
"""How long a stopped run waits for the files being written to finish before it stops them
at once, as a second Ctrl-C does: a stop never waits on a large file (or a slow upload)."""

WORKER_DIED = "the worker processing it died"


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
    new_executor : callable, optional
        ``new_executor()`` returns a fresh executor to replace one that broke
        (a worker process died: ``concurrent.futures.BrokenExecutor``).
        Without it, a broken executor ends the run with :class:`BatchAborted`.

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

    **A worker that dies** (killed by the out-of-memory killer, a crashing
    decoder) breaks a process pool: every task in flight on it fails with
    ``BrokenExecutor``, and which of them killed the worker is unknown. The
    run then kills what is left of the pool (``terminate()``, removing the
    temporary files of its workers), takes a fresh executor from
    `new_executor`, and runs those tasks again **one at a time**. A task
    that breaks the executor while running alone is the cause: it is
    reported failed (``"the worker processing it died (signal 9)"``, the
    signal or exit status given by the executor's ``worker_deaths()`` when
    it has one) and not tried again; the others complete as usual (a file
    that only died beside others, memory being short, is then processed).
    Once they are done the run goes on in parallel; if none of them was to
    blame (a worker killed from outside, or memory short only with several
    files at once), the death is listed in :attr:`recovered_deaths` (how it
    died: ``"signal 9"``) so that the caller can say so. So every task runs at
    most twice, a file that kills its worker every time fails once and
    cannot stop the batch, and every result is yielded exactly once.
    Outputs stay whole: files are written under a temporary name and renamed;
    a task runs again as :func:`_run_again` makes it, its first outputs rewritten.
    """

    def __init__(
        self,
        tasks: Iterable,
        worker: Callable,
        *,
        executor: Executor | None = None,
        in_flight: int = 2,
        stop_requests: Callable[[], int] = lambda: 0,
        new_executor: Callable[[], Executor] | None = None,
    ):
        self._tasks = iter(tasks)
        self._worker = worker
        self._executor = executor
        self._new_executor = new_executor
        self._in_flight = max(1, in_flight)
        self._stop_requests = stop_requests
        self._pending: set = set()
        self._unreported: list[FileResult] = []
        self._task_of: dict = {}
        # Tasks in flight on an executor that broke, to be run again one at a time.
        self._suspects: deque = deque()
        self._alone = False  # the one task in flight runs alone (a suspect)
        self._unsent: set = set()  # futures of tasks that a broken executor refused
        self._unexplained: str | None = None  # how a worker died, no suspect blamed yet
        self._began = time.time()  # when its work began (_run_again)
        self.recovered_deaths: list[str] = []

    def __iter__(self) -> Iterator[FileResult]:
        if self._executor is None:
            keep_freed_memory()
            for task in self._tasks:
                if self._stop_requests():  # asked to stop between files: start no other
                    return
                yield _run_here(self._worker, task)
            return
        self._fill()
        while self._pending:
            done, self._pending = wait(
                self._pending, timeout=_POLL_SECONDS, return_when=FIRST_COMPLETED
            )
            results = self._collect(done)
            if self._stop_requests():
                self._unreported = results
                return
            self._fill()
            self._unreported = results
            while self._unreported:
                yield self._unreported.pop(0)
        self._executor.shutdown()

    def _collect(self, done) -> list[FileResult]:
        """The results of finished futures; recovers from a broken executor."""
        results, broken = [], []
        blame = self._alone and not (set(done) & self._unsent)
        self._unsent -= set(done)
        for future in done:
            task = self._task_of.pop(future)
            if isinstance(future.exception(), BrokenExecutor):
                broken.append(task)
            else:
                results.append(future.result())
        if broken:
            results.extend(self._replace_executor(broken, blame=blame))
        return results

    def _replace_executor(self, broken: list, *, blame: bool) -> list[FileResult]:
        """Replace the broken executor; return the failure of the task that broke it, if known."""
        _settle(self._pending, self._executor)  # the others in flight fail or finish too
        results = []
        for future in self._pending:
            task = self._task_of.pop(future)
            if not future.done() or isinstance(future.exception(), BrokenExecutor):
                broken.append(task)
            else:
                results.append(future.result())
        self._pending, self._unsent = set(), set()
        deaths = getattr(self._executor, "worker_deaths", None)
        how = _death(deaths() if callable(deaths) else {})
        terminate = getattr(self._executor, "terminate", None)
        if callable(terminate):
            pids = terminate()
            for folder in {getattr(task, "out_dir", None) for task in broken} - {None}:
                remove_temporaries(folder, pids)
        else:
            self._executor.shutdown(wait=False, cancel_futures=True)
        if self._new_executor is None:
            raise BatchAborted("a worker process ended unexpectedly (out of memory?)")
        self._executor = self._new_executor()
        if blame:  # it ran alone: it killed the worker
            self._unexplained = None
            culprit = broken.pop(0)
            source = str(getattr(culprit, "source", culprit))
            results.append(FileResult(source, "failed", f"{WORKER_DIED}{how}"))
        elif not self._alone:
            self._unexplained = how.strip(" ()") or "cause unknown"
        self._suspects.extend(broken)
        return results

    def _fill(self) -> None:
        """Submit tasks: suspects of a broken executor one at a time, then new ones."""
        if self._suspects:
            if not self._pending:
                self._alone = True
                self._submit(_run_again(self._suspects.popleft(), self._began))
            return
        if self._alone:
            if self._pending:
                return  # the last suspect is running
            self._alone = False
            if self._unexplained is not None:  # every suspect finished when alone
                self.recovered_deaths.append(self._unexplained)
                self._unexplained = None
        for task in itertools.islice(self._tasks, self._in_flight - len(self._pending)):
            self._submit(task)

    def _submit(self, task) -> None:
        try:
            future = self._executor.submit(run_guarded, self._worker, task)
        except BrokenExecutor as exc:
            # It broke before this task reached it: the task is not to blame.
            future = Future()
            future.set_exception(exc)
            self._unsent.add(future)
        self._task_of[future] = task
        self._pending.add(future)

    @property
    def running(self) -> int:
        """Number of tasks being processed now (at most the number of workers).

        Asks the executor's ``busy()`` if it has one; otherwise counts the
        futures that have started.
        """
        busy = getattr(self._executor, "busy", None)
        if callable(busy):
            return busy()
        return sum(f.running() for f in self._pending)

    def _interrupt(self) -> None:
        """Ask the running tasks to end now and report what they wrote (``interrupt()``).

        Waits :data:`_INTERRUPT_SECONDS` at most for their results, so that
        the outputs written before the workers are killed are reported.
        """
        interrupt = getattr(self._executor, "interrupt", None)
        running = [f for f in self._pending if not f.done()]
        if callable(interrupt) and running:
            interrupt()
            wait(running, timeout=_INTERRUPT_SECONDS)

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
        stop_starting = getattr(self._executor, "stop_starting", None)
        if callable(stop_starting):
            stop_starting()
        # Wait for the running files, unless a second request (or `force`) comes, or
        # they take longer than FINISH_SECONDS.
        deadline = time.monotonic() + FINISH_SECONDS
        while not force and not all(f.done() for f in self._pending):
            wait(self._pending, timeout=_POLL_SECONDS)
            force = self._stop_requests() >= 2 or time.monotonic() > deadline
        terminate = getattr(self._executor, "terminate", None)
        if force and callable(terminate):
            self._interrupt()
            unfinished = [f for f in self._pending if not f.done()]
            pids = terminate()
            for future in unfinished:
                folder = getattr(self._task_of[future], "out_dir", None)
                if folder is not None:
                    remove_temporaries(folder, pids)
        finished = [
            f.result()
            for f in self._pending
            if f.done() and not f.cancelled() and f.exception() is None
        ]
        late = self._unreported + finished
        self._pending, self._unreported = set(), []
        self._executor.shutdown(wait=not force, cancel_futures=True)
        return late


def _settle(pending: set, executor) -> None:
    """Wait until each future of `pending` is done, or the broken `executor` can finish none
    of those left (its ``cannot_finish()``): CPython's pool leaves a task submitted as it
    broke unfinished for ever, and the run waited for it for ever."""
    cannot_finish = getattr(executor, "cannot_finish", None)
    while wait(pending, timeout=_POLL_SECONDS).not_done:
        if callable(cannot_finish) and cannot_finish():
            return


# Whether a task is being processed in this process's main thread now (one job).
_working_here = False


def working_here() -> bool:
    """Whether this thread is inside a task that :class:`BatchRun` runs here (one job).

    A stop request there may interrupt the file; elsewhere (the run's own
    bookkeeping, the manifest) it is only counted.
    """
    return _working_here


def _run_here(worker: Callable, task) -> FileResult:
    global _working_here
    _working_here = True
    try:
        return run_guarded(worker, task)
    finally:
        _working_here = False


def _death(codes: dict[int, int]) -> str:
    """`` (signal 9)`` for the one worker that died, if the executor said how."""
    if len(codes) != 1:
        return ""
    (code,) = codes.values()
    return f" (signal {-code})" if code < 0 else f" (exit status {code})"


def _run_again(task, began: float):
    """`task` as it runs again after its worker died: what its ``again(began)`` method
    gives (:meth:`convcli.app.plan.Task.again`: the outputs the dead worker put in place
    since the run's work `began`, ``time.time()``, are written again, with their records,
    which died with it), or itself."""
    again = getattr(task, "again", None)
    return again(began) if callable(again) else task


def iter_results(tasks: Iterable, worker: Callable, *, jobs: int = 1) -> Iterator[FileResult]:
    """Yield ``worker(task)`` for every task, on `jobs` local processes (:class:`ProcessEngine`).

    Stopping the iteration early stops the run: tasks not yet started are
    cancelled and the running ones finish. A worker process that dies is
    replaced (its file fails).
    """
    engine = ProcessEngine(EngineSettings(jobs=jobs))
    try:
        yield from engine.start(tasks, worker)
    finally:
        engine.stop()


class ProcessEngine(RunEngine):
    """The ``processes`` engine: `jobs` worker processes here, or this process for one job.

    A :class:`LocalProcessPool` run by :class:`BatchRun`; see there what a
    worker that dies means. Tasks run in this process (this thread) for one
    job, and whenever the run uses ``memory://``, which only this process sees.
    """

    name = "processes"
    finish_seconds = FINISH_SECONDS
    deaths_text = (
        "{count} worker process(es) died ({names}) and were replaced; the files they "
        "had in hand were processed again, one at a time"
    )

    def __init__(self, settings: EngineSettings):
        if settings.files_per_task is not None:
            raise OptionError(
                "only applies to Dask (--scheduler, --scheduler-file, --engine dask)",
                "--files-per-task",
            )
        if settings.scheduler is not None or settings.scheduler_file is not None:
            raise OptionError(
                "names a Dask scheduler, which --engine processes does not use",
                "--scheduler" if settings.scheduler is not None else "--scheduler-file",
            )
        super().__init__(settings)
        self.jobs = 1 if settings.in_memory else settings.jobs or default_jobs()

    @property
    def shares_memory(self) -> bool:
        return self.jobs == 1

    @property
    def runs_here(self) -> bool:
        return self.jobs == 1

    def start(self, tasks, worker, *, count=None, stop_requests=lambda: 0):
        if count is not None:  # no more processes than files
            self.jobs = min(self.jobs, max(1, count))
        jobs = self.jobs
        executor = _local_pool(jobs) if jobs > 1 else None
        return self._started(
            BatchRun(
                tasks,
                worker,
                executor=executor,
                in_flight=2 * jobs,
                stop_requests=stop_requests,
                new_executor=lambda: _local_pool(jobs),
            )
        )


def _local_pool(jobs: int):
    """A :class:`convcli.engines.pool.LocalProcessPool` of `jobs` workers.

    Its module (and ``multiprocessing``, about 8 ms) is loaded only for a run of
    more than one job.
    """
    return importlib.import_module("convcli.engines.pool").LocalProcessPool(jobs)


def run_guarded(worker: Callable, task) -> FileResult:
    """``worker(task)``, with an unexpected exception turned into a failed result.

    Workers report the errors they expect (a bad file) themselves; anything
    else is a bug, reported for that file with its traceback in ``detail``
    so the batch goes on and ``--debug`` can show it, and with the outputs the
    worker had written before it, where the exception holds them
    (``written_before``, a FileResult), so that they keep their manifest lines.
    """
    try:
        return worker(task)
    except Exception as exc:  # noqa: BLE001 - reported to the user, never swallowed
        source = str(getattr(task, "source", task))
        message = " ".join(f"internal error: {type(exc).__name__}: {exc}".split())
        # The outputs written before it, with their records, where the worker gave them.
        before = getattr(exc, "written_before", None)
        return FileResult(
            source,
            "failed",
            message,
            getattr(before, "outputs", ()),
            detail=traceback.format_exc(),
            records=getattr(before, "records", ()),
        )
    finally:
        restore_stderr()  # where a stop cut a library section's own restoring short


# glibc's mallopt parameters (malloc.h).
