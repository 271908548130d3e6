"""A Dask cluster as a run watches it from the client (the ``dask`` extra).

:class:`ClusterWatch` counts the workers' threads (how many Dask tasks to
keep in flight, and each worker's layer threads), lists the workers lost
during the run, ends the run when the scheduler is lost or the cluster is
left without workers for :data:`NO_WORKERS_SECONDS` (:class:`ClusterError`),
and sorts out the Dask tasks that raised instead of returning: a group that
keeps killing its workers is split into one task per file.
"""

from __future__ import annotations

import time

from ..errors import MissingExtra
from .base import EngineError
from .dask_worker import layer_threads
from .processes import WORKER_DIED, FileResult

NO_WORKERS_SECONDS = 10.0
"""How long a run waits on a cluster left with no workers (none started again) before it stops."""

MIN_IN_FLIGHT = 2
"""Dask tasks in flight at least, whatever the cluster's threads (none may have joined yet)."""

_CHECK_SECONDS = 1.0  # how often a run asks whether the cluster still has workers


class ClusterError(EngineError):
    """The cluster cannot be used (unreachable, other versions); the message is one line."""


def _import_distributed():
    try:
        import distributed
    except ImportError:
        raise MissingExtra("--scheduler needs Dask distributed", "dask") from None
    return distributed


class ClusterWatch:
    """The workers of a run's cluster, their threads, and what the run lost on it.

    Parameters
    ----------
    client : distributed.Client
    distributed : module
        Dask distributed (:func:`_import_distributed`).
    no_workers_seconds : float
        How long the cluster may have no workers before the run ends.

    Attributes
    ----------
    threads : dict
        Layer threads by worker address (:func:`convcli.engines.dask_worker.layer_threads`).
    threads_in_all : int
        The Dask threads of the workers when last counted.
    recovered_deaths : list of str
        The workers lost during the run, whose files were processed again.
    failed : str or None
        ``"scheduler"`` lost, or no ``"workers"`` left: nothing more is waited for.
    singles : list
        ``(task, number, group key)`` of the files of the groups split after they
        kept killing their workers, to run one at a time.
    """

    def __init__(self, client, distributed, no_workers_seconds: float):
        self._client = client
        self._distributed = distributed
        workers = client.scheduler_info().get("workers", {})
        self.threads = layer_threads(client, workers)  # by address, see count_threads
        self.threads_in_all = sum(w.get("nthreads", 1) for w in workers.values())
        self._counted = time.monotonic()  # when the workers' threads were last counted
        self._workers = set(workers)  # their addresses when last asked
        self._address = getattr(client.scheduler, "address", None) or "?"
        self._no_workers = (no_workers_seconds, None)  # the bound, and since when there are none
        self._next_check = time.monotonic() + _CHECK_SECONDS
        self.failed: str | None = None
        self.singles: list = []
        self.recovered_deaths: list[str] = []

    def window(self) -> int:
        """Dask tasks to keep in flight: twice the threads of the workers now.

        Workers join after the run starts, and a nanny starts another in
        place of one that died: they are counted again every
        :data:`_CHECK_SECONDS` (the last count is kept without a scheduler).
        """
        if time.monotonic() - self._counted >= _CHECK_SECONDS and self._client.status == "running":
            try:
                self.count_threads(self._client.nthreads())
            except OSError:  # no scheduler: the run's own checks say so
                pass
        return max(MIN_IN_FLIGHT, 2 * self.threads_in_all)

    def count_threads(self, nthreads: dict) -> None:
        """Count the threads of the workers there now (`nthreads`: each one's, by address).

        Workers not seen before change their hosts' share of cores: the layer
        threads are worked out again (:func:`layer_threads`), or on the next
        count if a worker leaves meanwhile.
        """
        self._counted = time.monotonic()
        self.threads_in_all = sum(nthreads.values())
        if nthreads.keys() - self.threads.keys():
            try:
                self.threads = layer_threads(
                    self._client, self._client.scheduler_info().get("workers", {})
                )
            except Exception:  # noqa: BLE001 - a worker lost while asked: the next count
                pass

    def check_when_due(self) -> None:
        """:meth:`check_workers`, if :data:`_CHECK_SECONDS` passed since the last time."""
        if time.monotonic() >= self._next_check:
            self.check_workers()
            self._next_check = time.monotonic() + _CHECK_SECONDS

    def check_scheduler(self) -> None:
        """Raise ClusterError if the connection to the scheduler was lost."""
        if self._client.status != "running":
            raise self.lost_scheduler()

    def lost_scheduler(self) -> ClusterError:
        """Note that the scheduler was lost; the error that says so."""
        self.failed = "scheduler"
        self._client._convcli_lost = True  # closed without waiting, see dask.close()
        return ClusterError(
            f"lost the Dask scheduler at {self._address}: the files not reported were not processed"
        )

    def check_workers(self) -> None:
        """Raise ClusterError if the cluster has had no workers for the bound (or no scheduler)."""
        self.check_scheduler()
        try:
            nthreads = self._client.nthreads()
        except OSError:
            self.check_scheduler()
            raise
        workers = set(nthreads)
        self.count_threads(nthreads)
        self.note_departures(workers)
        count = len(workers)
        bound, since = self._no_workers
        now = time.monotonic()
        if count:
            since = None
        elif since is None:
            since = now
        elif now - since >= bound:
            self.failed = "workers"
            raise ClusterError(
                f"the Dask cluster at {self._address} has had no workers for {bound:g} s: stopping"
            )
        self._no_workers = (bound, since)

    def note_departures(self, workers: set) -> None:
        """List in :attr:`recovered_deaths` the workers gone since the last time (`workers` now)."""
        for address in sorted(self._workers - workers):
            if address not in self.recovered_deaths:
                self.recovered_deaths.append(address)
        self._workers = workers

    def note_last_departures(self) -> None:
        """:meth:`note_departures` as the run ends, if the scheduler is still there to ask."""
        try:
            self.note_departures(set(self._client.nthreads()))
        except OSError:
            pass

    def note_lost(self, address: str | None) -> None:
        """List the worker `address` in :attr:`recovered_deaths`, where a task's run was lost."""
        if address and address not in self.recovered_deaths:
            self.recovered_deaths.append(address)

    def task_failed(
        self, group: tuple, numbers: tuple, group_key: str, error: Exception
    ) -> list[FileResult]:
        """The results of a Dask task that raised `error` instead of returning."""
        if isinstance(error, self._distributed.KilledWorker):
            return self._killed(group, numbers, group_key, error)
        if isinstance(error, self._distributed.client.FutureCancelledError):
            self.check_scheduler()
            return []
        if isinstance(error, OSError):  # the result could not be fetched: no scheduler
            raise self.lost_scheduler()
        reason = " ".join(f"{type(error).__name__}: {error}".split())
        return [
            FileResult(
                str(getattr(task, "source", task)), "failed", f"the Dask task failed: {reason}"
            )
            for task in group
        ]

    def _killed(
        self, group: tuple, numbers: tuple, group_key: str, exc: BaseException
    ) -> list[FileResult]:
        """Results for a group whose workers kept dying: split it, or fail its one file."""
        if len(group) > 1:
            self.singles.extend(
                (task, number, group_key) for task, number in zip(group, numbers, strict=True)
            )
            return []
        task = group[0]
        source = str(getattr(task, "source", task))
        return [
            FileResult(
                source, "failed", f"{WORKER_DIED} (each time it was tried: {type(exc).__name__})"
            )
        ]
