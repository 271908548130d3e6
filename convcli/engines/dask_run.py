"""Streaming a batch's tasks through a Dask client (:class:`ClusterRun`).

Files go `files_per_task` to a Dask task (:func:`convcli.engines.dask_worker.run_group`),
a bounded number of tasks in flight, each result released as soon as it has
been counted. The run owns a :class:`convcli.engines.dask_cluster.ClusterWatch`
(the workers, their threads, the scheduler or workers lost, the tasks that
killed their workers), a :class:`convcli.engines.dask_records.RunRecord` (its
record on the scheduler) and :class:`convcli.engines.dask_records.Fragments`
(its tasks' manifest fragments).
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Callable, Iterable, Iterator

from .base import RunHooks
from .dask_cluster import NO_WORKERS_SECONDS, ClusterError, ClusterWatch, _import_distributed
from .dask_records import Fragments, RunRecord, named_outputs, said_done, task_journals
from .dask_tasks import TasksInFlight, _as_given
from .dask_worker import ABANDON, STOP, _remove
from .processes import FileResult

STOP_WAIT_SECONDS = 60.0
"""How long a stopped run waits for the files being written on the workers, at most."""

_ABANDON_WAIT = 10.0  # seconds for results already on their way when tasks are abandoned
_FETCH_SECONDS = 2.0  # the longest wait for a finished task's result (a small record)


class _Stopping:
    """How a :class:`ClusterRun` stops: its tasks asked to stop between files, the results
    of the running ones waited for, the rest abandoned (the attributes are ClusterRun's)."""

    def stop(self, *, force: bool = False) -> list[FileResult]:
        """Stop the tasks between files, and return the results of what they wrote.

        Tasks not started end at once. The running ones end after their file:
        their results are waited for :attr:`stop_wait_seconds` at most, or
        until a second stop request (or `force`). Tasks still running then are
        abandoned: they remove the outputs they wrote (the run does not record
        them), and :attr:`stop_note` says so. Last, the manifest fragments of
        tasks that returned but whose results never arrived (the scheduler was
        lost, or they were no longer waited for) are merged into the manifests.
        """
        try:
            return self._stop(force)
        except BaseException:  # a second Ctrl-C: the results taken are never recorded
            self._fragments.merge_unrecorded(self._run_key)
            raise
        finally:
            self._fragments.merge(self._run_key, self._sent.values())

    def _stop(self, force: bool) -> list[FileResult]:
        """:meth:`stop`, before the fragments are merged."""
        self._stopping = True
        self._watch.singles.clear()
        late, self._unreported = self._unreported, []
        if self._failed == "scheduler":  # nothing can be asked of it any more
            return late
        if not self._group_of or self._client.status != "running":
            self._record.forget()
            return late
        if self._failed:  # no workers: what their lost tasks wrote is removed
            self._record.set_stop(ABANDON)
            self._client.cancel(list(self._group_of))
            self._remove_unreported()
            return late
        if self._record.set_stop(STOP) and not force:
            late += self._gather(self._stop_wait, interruptible=True)
        if not self._group_of:
            self._record.forget()
            return late
        waited = "" if force or self._stop_requests() >= 2 else f" after {self._stop_wait:g} s"
        running = len(self._group_of)
        self._record.set_stop(ABANDON)
        # The tasks that said they were done before reading the flag return their results.
        late += self._gather(_ABANDON_WAIT, interruptible=False, until=self._returning())
        self.stop_note = (
            f"stopped waiting for the Dask workers{waited}: the {running} "
            "task(s) not finished remove the outputs they write, which are not "
            "recorded"
        )
        if self._group_of:
            self._client.cancel(list(self._group_of))
        else:
            self._record.forget()
        return late

    def _remove_unreported(self) -> None:
        """Remove the new outputs that the unfinished tasks' journals name (workers lost)."""
        for path in named_outputs(self._journals(), self._sent):
            _remove(path)

    def _returning(self) -> set:
        """The futures not collected whose tasks said they were done (``_Journal.done``)."""
        return said_done(self._journals(), self._sent)

    def _journals(self) -> dict:
        """Every task's journal of the run, in one request; none if the scheduler is gone."""
        return task_journals(self._client, self._run_key) if self._sent else {}

    def _gather(
        self, seconds: float, *, interruptible: bool, until: set | None = None
    ) -> list[FileResult]:
        """The results of the tasks that finish within `seconds` (or a second stop request).

        With `until`, only until those futures are collected.
        """
        late: list[FileResult] = []
        deadline = time.monotonic() + seconds
        while self._group_of and time.monotonic() < deadline:
            if interruptible and self._stop_requests() >= 2:
                break
            if until is not None and not until & self._group_of.keys():
                break
            try:
                done = self._flight.pending.next_batch(block=False)
                if not done:
                    self._wait_for_results()
                for future in done:
                    late += self._collect(future)
            except ClusterError:  # no scheduler, or no workers: nothing more will come
                break
        return late


class ClusterRun(_Stopping):
    """Run ``worker(task)`` for every task on a Dask client; iterate to get the results.

    The same interface as :class:`convcli.engines.processes.BatchRun` (iteration in
    completion order, :meth:`stop`, :attr:`running`, :attr:`recovered_deaths`).
    Its tasks keep a record on the scheduler (:class:`convcli.engines.dask_worker._Journal`),
    so that a task run again after its worker was lost reports the files written by
    the lost run (their worker is listed in :attr:`recovered_deaths`), and
    tasks stop between files when the run is stopped.

    Parameters
    ----------
    client : distributed.Client
    tasks : iterable
        Consumed lazily: at most `in_flight` groups are submitted and not done.
    worker : callable
        A module-level function, importable on the workers.
    files_per_task : int
        Tasks grouped into one Dask task.
    in_flight : int, optional
        Dask tasks submitted and not finished, at most; by default twice the
        threads of the workers there as tasks are submitted (counted again
        every second, :meth:`ClusterWatch.window`), ``MIN_IN_FLIGHT`` at least.
    stop_requests : callable
        The number of times the user asked to stop, polled while waiting.
    no_workers_seconds, stop_wait_seconds : float
        :data:`NO_WORKERS_SECONDS` and :data:`STOP_WAIT_SECONDS`.
    hooks : RunHooks, optional
        The run's hooks (:class:`convcli.engines.base.RunHooks`):
        each task writes those of its outputs to a fragment beside them, which
        :meth:`recorded` deletes once the caller has recorded the results;
        :meth:`stop` merges those of the results that never arrived.

    Raises
    ------
    ClusterError
        While iterating: the scheduler was lost, or the cluster has had no
        workers for `no_workers_seconds`.
    """

    def __init__(
        self,
        client,
        tasks: Iterable,
        worker: Callable,
        *,
        files_per_task: int,
        in_flight: int | None = None,
        stop_requests: Callable[[], int] = lambda: 0,
        no_workers_seconds: float = NO_WORKERS_SECONDS,
        stop_wait_seconds: float = STOP_WAIT_SECONDS,
        hooks: RunHooks | None = None,
    ):
        self._client = client
        self._hooks = hooks or RunHooks()
        self._fragments = Fragments(self._hooks)
        self._tasks = iter(tasks)
        self._per_task = max(1, files_per_task)
        self._stop_requests = stop_requests
        distributed = _import_distributed()
        self._run_key = f"convcli-run-{secrets.token_hex(8)}"
        self._flight = TasksInFlight(client, distributed, worker, self._hooks, self._run_key)
        self._in_flight = None if in_flight is None else max(1, in_flight)  # None: by the workers
        self._watch = ClusterWatch(client, distributed, no_workers_seconds)
        self._group_of = self._flight.group_of  # each future's group, as given
        self._sent = self._flight.sent  # each future's group as sent, its numbers and keys
        self._record = RunRecord(client, self._run_key)
        self._stop_wait = stop_wait_seconds
        self._stopping = False
        self._unreported: list[FileResult] = []  # results of a finished task not yielded yet
        self.recovered_deaths = self._watch.recovered_deaths  # the same list
        self.stop_note: str | None = None

    @property
    def _failed(self) -> str | None:
        """``"scheduler"`` lost, or no ``"workers"`` (:attr:`ClusterWatch.failed`): no waiting."""
        return self._watch.failed

    @_failed.setter
    def _failed(self, value: str | None) -> None:
        self._watch.failed = value

    @property
    def lost_scheduler(self) -> bool:
        """Whether the run ended because the scheduler was lost."""
        return self._watch.failed == "scheduler"

    @property
    def running(self) -> int:
        """Files being processed, at most: one per Dask task not finished, within the threads."""
        return min(len(self._group_of), max(1, self._watch.threads_in_all))

    @property
    def put_after_manifest(self) -> list[str]:
        """The fragment objects of recorded results, deleted by :meth:`manifest_put`."""
        return self._fragments.put_after_manifest

    def _fill(self) -> None:
        """Submit groups up to `in_flight`; the files of a split group one at a time, alone.

        A file of a split group runs with nothing else on the cluster: Dask
        counts a worker's death against every task assigned to that worker, so
        a file queued beside the one to blame could otherwise fail with it.
        """
        if self._stopping:
            return
        if self._watch.singles:
            if not self._group_of:
                task, number, group_key = self._watch.singles.pop(0)
                self._flight.submit((task,), (number,), self._watch.threads, group_key)
            return
        window = self._watch.window() if self._in_flight is None else self._in_flight
        while len(self._group_of) < window:
            group = tuple(itertools.islice(self._tasks, self._per_task))
            if not group:
                return
            self._flight.submit(group, self._flight.numbers(len(group)), self._watch.threads)

    def __iter__(self) -> Iterator[FileResult]:
        self._fill()
        while not self._flight.pending.is_empty():
            if self._stop_requests():
                return
            done = self._flight.pending.next_batch(block=False)
            if not done:
                self._wait_for_results()
                self._fill()  # workers that joined meanwhile get tasks
                continue
            # Every finished task of the batch is collected before any result is yielded: a
            # caller that stops after a result leaves the others in _unreported (see stop()),
            # not in a batch taken from the pending futures and never collected.
            for future in done:
                self._unreported.extend(self._collect(future))
            self._fill()
            while self._unreported:
                yield self._unreported.pop(0)
        self._watch.note_last_departures()
        self._record.forget()

    def _collect(self, future) -> list[FileResult]:
        """The results of a finished Dask task, named as given; its record cleared."""
        try:
            # A result held by a worker that died is lost: Dask runs its task again, and
            # asking for it would wait for that (for ever, with no workers left).
            outcome, error = future.result(timeout=_FETCH_SECONDS), None
        except TimeoutError:
            self._flight.pending.add(future)  # reported again when it is done again
            return []
        except Exception as exc:  # noqa: BLE001 - sorted out in ClusterWatch.task_failed
            outcome, error = None, exc
        group, sent, numbers, task_key, group_key = self._flight.take(future)
        if error is not None:
            self._fragments.not_returned(sent, task_key)
            return self._watch.task_failed(group, numbers, group_key, error)
        self._record.clear("tasks", task_key, wait=False)
        self._watch.note_lost(outcome.lost_on)
        results = [
            _as_given(result, one, given)
            for result, one, given in zip(outcome.results, sent, group, strict=False)
        ]
        self._fragments.returned(task_key, results, outcome.fragments)
        return results

    def recorded(self, result: FileResult) -> None:
        """Say that `result`'s manifest lines were written (:meth:`Fragments.recorded`)."""
        self._fragments.recorded(result)

    def manifest_put(self, folders: Iterable[str], options: dict | None = None) -> None:
        """Delete the fragment objects of recorded results in `folders`, where the run's
        manifest objects are now put: their lines are there (:meth:`Fragments.manifest_put`)."""
        self._fragments.manifest_put(folders, options)

    def _wait_for_results(self) -> None:
        """Wait for a result, a moment at most (:meth:`TasksInFlight.wait`), to look at stop
        requests; every second, check the cluster too (:meth:`ClusterWatch.check_when_due`)."""
        self._flight.wait()
        self._watch.check_when_due()
