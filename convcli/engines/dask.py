"""Running a batch on a Dask cluster (the ``dask`` extra): ``--scheduler``.

Dask distributed is imported when a cluster is asked for, never before.
:func:`connect` opens a client (to a scheduler's address, a scheduler file,
or a LocalCluster of worker processes started here), checks that every worker
runs this version of convcli, and :class:`ClusterRun` streams the tasks
through it: files grouped `files_per_task` to a Dask task, a bounded number of
tasks in flight, each result released as soon as it has been counted. Tasks
return small :class:`convcli.engines.processes.FileResult` records, never pixels.

Dask runs a task again when the worker running it dies (at-least-once), and
gives up after its ``allowed-failures`` with ``KilledWorker``. Outputs are
written under temporary names and renamed. Each task keeps a record on the
scheduler (:class:`_Journal`): a task run again writes again the outputs its
lost run wrote, so that they are reported and reach the manifest, and names
the lost worker. A group that keeps killing its workers is split into one
task per file, run one at a time with nothing else in flight, so that only
the file to blame fails. A lost scheduler, or a cluster left without workers
for :data:`NO_WORKERS_SECONDS`, ends the run (:class:`ClusterError`). A run
that is stopped sets a flag that its tasks read between files
(:meth:`ClusterRun.stop`). Before it returns, a task writes its outputs'
manifest lines to a fragment beside them, deleted once the client has
recorded its result and merged into the manifest where the result never
arrived (:func:`convcli.app.manifest.merge_fragments`); on object storage, a
manifest object of its own, deleted once the client's run has put its own
(:meth:`ClusterRun.manifest_put`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import secrets
import time
from collections.abc import Callable, Iterable, Iterator

from .._version import __version__
from ..errors import MissingExtra, OptionError
from ..io.storage import dirname, is_url, remove_tree
from ..layers._engine.tiles import set_threads, usable_cores
from .base import EngineError, EngineSettings, RunEngine, RunHooks
from .processes import WORKER_DIED, FileResult, default_jobs, keep_freed_memory, run_guarded

DEFAULT_FILES_PER_TASK = 8
"""Files per Dask task: enough to make the scheduler's cost per file small
(about a millisecond a task), few enough to spread a folder over many workers."""

_POLL_SECONDS = 0.05


class ClusterError(EngineError):
    """The cluster cannot be used (unreachable, other versions); the message is one line."""


def _import_distributed():
    try:
        import distributed
    except ImportError:
        raise MissingExtra("--scheduler needs Dask distributed", "dask") from None
    return distributed


def connect(scheduler: str | None = None, scheduler_file: str | None = None, *,
            jobs: int = 1, timeout: float = 10.0):
    """A ``distributed.Client`` for `scheduler` (an address or ``"local"``) or `scheduler_file`.

    ``"local"`` starts a LocalCluster of `jobs` worker processes of one
    thread each on this machine, closed with the client. Every worker is
    checked to run this version of convcli (:func:`check_versions`).

    Raises
    ------
    MissingExtra
        Dask distributed is not installed.
    ClusterError
        The scheduler cannot be reached, or a worker runs another convcli.
    """
    distributed = _import_distributed()
    import logging

    if scheduler not in (None, "local"):
        _check_reachable(scheduler, timeout)

    # Dask logs connection chatter at INFO and WARNING; the command line reports on its own.
    _quiet_dask_logs(logging.ERROR)
    try:
        if scheduler == "local":
            # The scheduler's HTTP server on a free loopback port: with the dashboard
            # off it would still take 8787, and warn when another cluster holds it.
            cluster = distributed.LocalCluster(
                n_workers=jobs, threads_per_worker=1, processes=True,
                dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
            client = distributed.Client(cluster, set_as_default=False)
            client._convcli_cluster = cluster  # closed with the client, see close()
        elif scheduler_file is not None:
            client = distributed.Client(scheduler_file=scheduler_file, timeout=timeout,
                                        set_as_default=False)
        else:
            client = distributed.Client(scheduler, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        where = scheduler_file or scheduler
        raise ClusterError(f"cannot reach the Dask scheduler at {where}: "
                           f"{' '.join(str(exc).split()) or type(exc).__name__}") from None
    asyncio_loop = getattr(client.loop, "asyncio_loop", None)
    if asyncio_loop is not None:
        asyncio_loop.set_exception_handler(_without_abandoned_gathers)
    try:
        check_versions(client)
    except BaseException:
        close(client)
        raise
    return client


def _without_abandoned_gathers(loop, context: dict) -> None:
    """The client loop's exception handler, silent on a result no longer waited for.

    A result asked for with a timeout (:data:`_FETCH_SECONDS`) leaves Dask's
    gathering task to end later with ``AllExit``, which asyncio would print
    as "Task exception was never retrieved" with a traceback.
    """
    if type(context.get("exception")).__name__ == "AllExit":
        return
    loop.default_exception_handler(context)


_CLOSE_SECONDS = 2.0  # closing a client whose scheduler was lost


def _quiet_dask_logs(level: int) -> None:
    """Dask's loggers (``distributed`` and those its configuration sets apart) at `level`."""
    import logging

    names = [name for name in logging.root.manager.loggerDict
             if name == "distributed" or name.startswith("distributed.")]
    for name in names or ["distributed"]:
        logging.getLogger(name).setLevel(level)


def _check_reachable(address: str, timeout: float) -> None:
    """Raise ClusterError at once if nothing listens at a ``tcp://HOST:PORT`` `address`.

    Dask's client retries a refused connection until its timeout (10 s);
    a plain connection says at once that no scheduler is there. Other
    protocols (``tls://`` ...) are left to Dask.
    """
    import socket

    rest = address[len("tcp://"):] if address.startswith("tcp://") else address
    host, sep, port = rest.rpartition(":")
    if "://" in rest or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise ClusterError(f"cannot reach the Dask scheduler at {address}: {reason}") from None


def close(client) -> None:
    """Close `client`, and the LocalCluster it started, if any."""
    import logging

    cluster = getattr(client, "_convcli_cluster", None)
    if client.status == "running" and not getattr(client, "_convcli_lost", False):
        client.close()
    else:
        # The scheduler was lost: closing cancels Dask's attempts to reconnect, which it
        # logs as errors with tracebacks; the run has said what happened.
        _quiet_dask_logs(logging.CRITICAL + 1)
        try:
            client.close(timeout=_CLOSE_SECONDS)
        except (OSError, TimeoutError):
            pass
    if cluster is not None:
        cluster.close()


def worker_version() -> str:
    """convcli's version where this runs (called on the workers)."""
    return __version__


def check_versions(client, *, wait_seconds: float = 10.0) -> None:
    """Raise ClusterError unless every worker of `client` runs this version of convcli.

    Waits up to `wait_seconds` for a first worker to join.
    """
    deadline = time.monotonic() + wait_seconds
    while not client.scheduler_info().get("workers") and time.monotonic() < deadline:
        time.sleep(0.1)
    if not client.scheduler_info().get("workers"):
        raise ClusterError("the Dask cluster has no workers")
    ours = worker_version()
    try:
        theirs = client.run(worker_version)
    except Exception as exc:  # distributed raises a plain Exception for a failed import
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ClusterError(f"convcli cannot be imported on the Dask workers ({reason}); "
                           f"install convcli {ours} there") from None
    other = {address: version for address, version in theirs.items() if version != ours}
    if other:
        listed = ", ".join(f"{address} has {version}" for address, version in sorted(other.items()))
        raise ClusterError(f"the Dask workers must run convcli {ours}, as this machine does: "
                           f"{listed}")


def layer_threads(client, workers: dict) -> dict[str, int]:
    """Layer threads for each of `workers` (the scheduler's information on them, by address).

    Each gets its host's cores shared among the host's Dask threads: a worker
    process runs one file per Dask thread, as a local pool runs one per
    process, and the layers' own threads would otherwise compete for the cores.
    """
    cores = client.run(usable_cores)
    on_host: dict[str, int] = {}
    for info in workers.values():
        on_host[info.get("host")] = on_host.get(info.get("host"), 0) + info.get("nthreads", 1)
    return {address: max(1, cores.get(address, 1) // on_host[info.get("host")])
            for address, info in workers.items()}


_prepared = False


def _prepare_worker(threads: dict[str, int]) -> None:
    """Once per worker process: its layer threads, and freed image buffers kept for reuse."""
    global _prepared
    if _prepared:
        return
    _prepared = True
    try:
        from distributed import get_worker

        count = threads.get(get_worker().address)
    except (ImportError, ValueError):
        count = None
    if count and not os.environ.get("CONVCLI_THREADS"):
        set_threads(count)
    keep_freed_memory()


@dataclasses.dataclass(frozen=True)
class GroupResult:
    """What :func:`run_group` returns: the files' results, and what happened to the task.

    Attributes
    ----------
    results : list of FileResult
        One per file processed (fewer than the group's when the run stopped).
    lost_on : str or None
        Where an earlier run of this task was when its worker was lost.
    abandoned : bool
        The client stopped waiting: the outputs written were removed.
    fragments : tuple of str
        The manifest fragments written (:func:`convcli.app.manifest.write_fragment`).
    """

    results: list
    lost_on: str | None = None
    abandoned: bool = False
    fragments: tuple = ()


_STOP_CHECK_SECONDS = 0.1  # between files, a task reads its run's stop flag at most this often

STOP, ABANDON = "stop", "abandon"
"""The states of a run's stop flag, on the scheduler: start no other file; also remove."""


class _Journal:
    """A run's record on the scheduler (``Client.set_metadata``), used by its Dask tasks.

    Under the run's key: ``stop`` (:data:`STOP` or :data:`ABANDON`, set by
    the client), ``tasks/KEY/worker`` (the worker running the task KEY) and
    ``tasks/GROUP/files/N`` (the new outputs that file N of the group GROUP
    is about to write; a group is a task's files, and keeps its key when it
    is split into tasks of one file). The client clears a task's entry when
    it has its result, and the run's when it ends.
    A task run again after its worker was lost finds there where the first
    run was, and which existing outputs it wrote (written again, so that
    their records reach the manifest, instead of being counted as skipped).
    """

    def __init__(self, run_key: str, task_key: str, group_key: str):
        from distributed import get_client, get_worker

        self.client = get_client()
        self.worker = get_worker()
        self.address = self.worker.address
        self.key = self.worker.get_current_task()  # the Dask key of this task
        self.run_key, self.task_key, self.group_key = run_key, task_key, group_key
        self._stop_checked = 0.0  # when the stop flag was last read

    def _get(self, *keys: str):
        return self.client.get_metadata([self.run_key, *keys], None)

    def _set(self, value, *keys: str) -> None:
        self.client.set_metadata([self.run_key, *keys], value)

    def begin(self) -> str | None:
        """Record this task's worker; where an earlier run of it was, if any."""
        earlier = self._get("tasks", self.task_key, "worker")
        self._set(self.address, "tasks", self.task_key, "worker")
        return earlier if earlier != self.address else None

    def stop_state(self, *, fresh: bool = True) -> str | None:
        """:data:`STOP`, :data:`ABANDON`, or None.

        :data:`ABANDON` too when the scheduler is lost, or this task was
        cancelled (its client stopped waiting, or was killed).

        Unless `fresh`, None without asking within :data:`_STOP_CHECK_SECONDS`
        of the last time (a file started then is still reported, or removed).
        """
        if self._cancelled():  # no client wants the result: nobody records the outputs
            return ABANDON
        now = time.monotonic()
        if not fresh and now - self._stop_checked < _STOP_CHECK_SECONDS:
            return None
        self._stop_checked = now
        try:
            return self._get("stop")
        except Exception:  # noqa: BLE001 - no scheduler: nobody will record the outputs
            return ABANDON

    def done(self) -> bool:
        """Record that this task is about to return its results; whether that could be done."""
        try:
            self._set(True, "tasks", self.task_key, "done")
        except Exception:  # noqa: BLE001 - no scheduler: nobody will record the outputs
            return False
        return True

    def _cancelled(self) -> bool:
        """Whether the scheduler released this task (its client cancelled it, or is gone)."""
        state = getattr(self.worker, "state", None)  # this worker's view of its tasks
        task = state.tasks.get(self.key) if state is not None else None
        return task is not None and task.state in ("cancelled", "released", "forgotten")

    def check(self, number: str) -> Callable:
        """The check of file `number`'s outputs (:func:`convcli.app.process.checking_outputs`)."""
        def check(outputs: list, todo: list) -> list:
            if len(todo) < len(outputs):  # some exist: written by a lost run of this task?
                earlier = set(self._get("tasks", self.group_key, "files", number) or ())
                again = [out for out in outputs if out not in todo and str(out.path) in earlier]
                for out in again:
                    _remove(str(out.path))
                todo = [out for out in outputs if out in todo or out in again]
            # Those that do not exist yet: none of them was in the manifest before.
            new = [str(out.path) for out in todo if not os.path.lexists(out.path)]
            if new:
                self._set(new, "tasks", self.group_key, "files", number)
            return todo

        return check


async def _quietly(request, **kwargs) -> None:
    """Await ``request(**kwargs)``, a call to the scheduler not waited for; errors are dropped."""
    try:
        await request(**kwargs)
    except OSError:  # the scheduler is gone: the run says so on its own
        pass


def _remove(path: str, options: dict | None = None) -> None:
    """Remove the output `path` (a file, a Zarr store's folder, an object) if it is there."""
    import shutil

    try:
        if is_url(path):
            remove_tree(path, options)
        elif os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except (OSError, ValueError):
        pass


def run_group(worker: Callable, tasks: tuple, threads: dict | None = None,
              run: tuple | None = None, hooks: RunHooks | None = None) -> GroupResult:
    """Each task of a group through :func:`convcli.engines.processes.run_guarded`, in a Dask worker.

    `threads` maps worker addresses to layer threads (:func:`layer_threads`).
    `run` is ``(run key, task key, group key, file numbers)``: the group keeps its
    :class:`_Journal`, and looks, before each file, whether the run was
    stopped: it then starts no other file, or (:data:`ABANDON`) removes the
    outputs it wrote, which the client will not record. The run's `hooks`
    (:class:`convcli.engines.base.RunHooks`) check each file's outputs against
    the journal, and keep the records of the outputs it keeps beside them
    before it returns.
    """
    _prepare_worker(threads or {})
    if run is None:
        return GroupResult([run_guarded(worker, task) for task in tasks])
    hooks = hooks or RunHooks()
    run_key, task_key, group_key, numbers = run
    journal = _Journal(run_key, task_key, group_key)
    lost_on = journal.begin()
    results: list[FileResult] = []
    for task, number in zip(tasks, numbers, strict=True):
        if journal.stop_state(fresh=False) is not None:
            break
        if is_url(getattr(task, "out_dir", "")):  # its outputs are listed before the run
            results.append(run_guarded(worker, task))
            continue
        with hooks.checking(journal.check(number)):
            results.append(run_guarded(worker, task))
    # Said done before the stop flag is read: a client that abandons the run after this
    # waits for the results, and one that abandoned it before is seen here.
    if not journal.done() or journal.stop_state() == ABANDON:
        return _abandoned(results, lost_on, tasks)
    options = getattr(tasks[0], "storage_options", None) if tasks else None
    fragments = hooks.write_records(results, run_key, task_key, options)
    return GroupResult(results, lost_on, fragments=fragments)


def _abandoned(results: list, lost_on: str | None, tasks: tuple) -> GroupResult:
    """The result of a group whose run was abandoned: the outputs it wrote are removed."""
    options = getattr(tasks[0], "storage_options", None) if tasks else None
    for result in results:
        for path in result.outputs:
            _remove(path, options)
    return GroupResult([], lost_on, abandoned=True)


def _absolute(task, cwd: str):
    """`task` with its relative local paths joined to `cwd`, for workers started elsewhere.

    A Dask worker resolves a relative path against its own working
    directory; joined here, it names the files this process means. Tasks
    without paths, URLs and absolute paths are left as they are.
    """
    def join(path):
        return path if not path or is_url(path) else os.path.join(cwd, path)

    if not dataclasses.is_dataclass(task) or not hasattr(task, "out_dir"):
        return task
    changes = {"source": join(task.source), "out_dir": join(task.out_dir)}
    for name in ("out_file", "protected"):
        value = getattr(task, name, None)
        if value is not None:
            changes[name] = join(value) if isinstance(value, str) else tuple(map(join, value))
    return dataclasses.replace(task, **changes)


def _folders(tasks: tuple) -> set[str]:
    """The local output folders of `tasks` (where their manifest fragments would be)."""
    return {task.out_dir for task in tasks
            if getattr(task, "out_dir", None) and not is_url(task.out_dir)}


def _as_given(result: FileResult, sent, given) -> FileResult:
    """`result` of task `sent` (:func:`_absolute` of `given`) naming paths as `given` does."""
    if sent is given:
        return result
    pairs = sorted([(a, b) for a, b in ((sent.out_dir, given.out_dir), (sent.source, given.source),
                                 (getattr(sent, "out_file", ""), getattr(given, "out_file", "")))
             if a and a != b], key=lambda pair: -len(pair[0]))

    def back(text: str, *, whole: bool = False) -> str:
        for absolute, relative in pairs:
            if whole and text.startswith(absolute):
                return relative + text[len(absolute):]
            if not whole:
                text = text.replace(absolute, relative)
        return text

    return dataclasses.replace(
        result, source=given.source, message=back(result.message),
        outputs=tuple(back(path, whole=True) for path in result.outputs))


NO_WORKERS_SECONDS = 10.0
"""How long a run waits on a cluster left with no workers (none started again) before it stops."""

STOP_WAIT_SECONDS = 60.0
"""How long a stopped run waits for the files being written on the workers, at most."""

MIN_IN_FLIGHT = 2
"""Dask tasks in flight at least, whatever the cluster's threads (none may have joined yet)."""

_ABANDON_WAIT = 10.0  # seconds for results already on their way when tasks are abandoned
_CHECK_SECONDS = 1.0  # how often a run asks whether the cluster still has workers
_FETCH_SECONDS = 2.0  # the longest wait for a finished task's result (a small record)


class ClusterRun:
    """Run ``worker(task)`` for every task on a Dask client; iterate to get the results.

    The same interface as :class:`convcli.engines.processes.BatchRun` (iteration in
    completion order, :meth:`stop`, :attr:`running`, :attr:`recovered_deaths`).
    Its tasks keep a record on the scheduler (:class:`_Journal`), so that a
    task run again after its worker was lost reports the files written by
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
        every :data:`_CHECK_SECONDS`), :data:`MIN_IN_FLIGHT` at least.
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

    def __init__(self, client, tasks: Iterable, worker: Callable, *, files_per_task: int,
                 in_flight: int | None = None, stop_requests: Callable[[], int] = lambda: 0,
                 no_workers_seconds: float = NO_WORKERS_SECONDS,
                 stop_wait_seconds: float = STOP_WAIT_SECONDS, hooks: RunHooks | None = None):
        self._client = client
        self._hooks = hooks or RunHooks()
        self._fragments: dict = {}  # task key: its results not recorded yet, and its fragments
        self._fragments_of: dict[int, str] = {}  # id of a result: its task's key (see recorded)
        self._unarrived: list = []  # (folders, task key) of the tasks whose result was an error
        self.put_after_manifest: list[str] = []  # fragment objects of recorded results
        self._tasks = iter(tasks)
        self._worker = worker
        self._per_task = max(1, files_per_task)
        workers = client.scheduler_info().get("workers", {})
        self._stop_requests = stop_requests
        self._distributed = _import_distributed()
        self._pending = self._distributed.as_completed(loop=client.loop)
        self._in_flight = None if in_flight is None else max(1, in_flight)  # None: see _window
        self._threads = layer_threads(client, workers)  # by address, see _count_threads
        self._threads_in_all = sum(w.get("nthreads", 1) for w in workers.values())
        self._counted = time.monotonic()  # when the workers' threads were last counted
        self._workers = set(workers)  # their addresses when last asked
        self._group_of: dict = {}
        self._sent: dict = {}  # the groups as sent (paths joined to this directory), their keys
        self._cwd = os.getcwd()
        self._singles: list = []  # (task, number, group key) of groups split after killing workers
        self._numbers = itertools.count()
        self._run_key = f"convcli-run-{secrets.token_hex(8)}"
        self._address = getattr(client.scheduler, "address", None) or "?"
        self._no_workers = (no_workers_seconds, None)  # the bound, and since when there are none
        self._stop_wait = stop_wait_seconds
        self._next_check = time.monotonic() + _CHECK_SECONDS
        self._stopping = False
        self._failed: str | None = None  # "scheduler" lost, or no "workers": no waiting
        self._unreported: list[FileResult] = []  # results of a finished task not yielded yet
        self.recovered_deaths: list[str] = []
        self.stop_note: str | None = None

    def _submit(self, group: tuple, numbers: tuple, group_key: str | None = None) -> None:
        sent = tuple(_absolute(task, self._cwd) for task in group)
        task_key = str(next(self._numbers))
        group_key = group_key or task_key
        future = self._client.submit(run_group, self._worker, sent, self._threads,
                                     (self._run_key, task_key, group_key, numbers), self._hooks,
                                     pure=False)
        self._group_of[future] = group
        self._sent[future] = (sent, numbers, task_key, group_key)
        self._pending.add(future)

    def _fill(self) -> None:
        """Submit groups up to `in_flight`; the files of a split group one at a time, alone.

        A file of a split group runs with nothing else on the cluster: Dask
        counts a worker's death against every task assigned to that worker, so
        a file queued beside the one to blame could otherwise fail with it.
        """
        if self._stopping:
            return
        if self._singles:
            if not self._group_of:
                task, number, group_key = self._singles.pop(0)
                self._submit((task,), (number,), group_key)
            return
        window = self._window()
        while len(self._group_of) < window:
            group = tuple(itertools.islice(self._tasks, self._per_task))
            if not group:
                return
            self._submit(group, tuple(str(next(self._numbers)) for _ in group))

    def _window(self) -> int:
        """Dask tasks to keep in flight: `in_flight`, or twice the threads of the workers now.

        Workers join after the run starts, and a nanny starts another in
        place of one that died: they are counted again every
        :data:`_CHECK_SECONDS` (the last count is kept without a scheduler).
        """
        if self._in_flight is not None:
            return self._in_flight
        if time.monotonic() - self._counted >= _CHECK_SECONDS and self._client.status == "running":
            try:
                self._count_threads(self._client.nthreads())
            except OSError:  # no scheduler: the run's own checks say so
                pass
        return max(MIN_IN_FLIGHT, 2 * self._threads_in_all)

    def _count_threads(self, nthreads: dict) -> None:
        """Count the threads of the workers there now (`nthreads`: each one's, by address).

        Workers not seen before change their hosts' share of cores: the layer
        threads are worked out again (:func:`layer_threads`), or on the next
        count if a worker leaves meanwhile.
        """
        self._counted = time.monotonic()
        self._threads_in_all = sum(nthreads.values())
        if nthreads.keys() - self._threads.keys():
            try:
                self._threads = layer_threads(
                    self._client, self._client.scheduler_info().get("workers", {}))
            except Exception:  # noqa: BLE001 - a worker lost while asked: the next count
                pass

    def __iter__(self) -> Iterator[FileResult]:
        self._fill()
        while not self._pending.is_empty():
            if self._stop_requests():
                return
            done = self._pending.next_batch(block=False)
            if not done:
                self._wait_for_results()
                self._fill()  # workers that joined meanwhile get tasks
                continue
            for future in done:
                self._unreported.extend(self._collect(future))
                self._fill()
                while self._unreported:  # what is not taken when the caller stops: see stop()
                    yield self._unreported.pop(0)
        try:
            self._note_departures(set(self._client.nthreads()))
        except OSError:
            pass
        self._forget()

    def _collect(self, future) -> list[FileResult]:
        """The results of a finished Dask task, named as given; its record cleared."""
        try:
            # A result held by a worker that died is lost: Dask runs its task again, and
            # asking for it would wait for that (for ever, with no workers left).
            outcome, error = future.result(timeout=_FETCH_SECONDS), None
        except TimeoutError:
            self._pending.add(future)  # reported again when it is done again
            return []
        except Exception as exc:  # noqa: BLE001 - sorted out in _task_failed
            outcome, error = None, exc
        group = self._group_of.pop(future)
        sent, numbers, task_key, group_key = self._sent.pop(future)
        future.release()
        if error is not None:
            if self._hooks.keeps_records:  # returned, its result lost on the way?
                self._unarrived.append((_folders(sent), task_key))
            return self._task_failed(group, numbers, group_key, error)
        self._clear("tasks", task_key, wait=False)
        if outcome.lost_on and outcome.lost_on not in self.recovered_deaths:
            self.recovered_deaths.append(outcome.lost_on)
        results = [_as_given(result, one, given)
                   for result, one, given in zip(outcome.results, sent, group, strict=False)]
        if outcome.fragments:
            self._fragments[task_key] = [len(results), outcome.fragments]
            self._fragments_of.update((id(result), task_key) for result in results)
        return results

    def recorded(self, result: FileResult) -> None:
        """Say that `result`'s manifest lines were written: its task's local fragments go.

        Those on object storage are kept in :attr:`put_after_manifest` until
        the run's manifest objects are put (:meth:`manifest_put`).
        """
        task_key = self._fragments_of.pop(id(result), None)
        if task_key is None:
            return
        left = self._fragments[task_key]
        left[0] -= 1
        if left[0] == 0:
            del self._fragments[task_key]
            for path in left[1]:
                if is_url(path):
                    self.put_after_manifest.append(path)
                else:
                    _remove(path)

    def manifest_put(self, folders: Iterable[str], options: dict | None = None) -> None:
        """Delete the fragment objects of recorded results in `folders`, where the run's
        manifest objects are now put: their lines are there."""
        folders = set(folders)
        kept = []
        for url in self.put_after_manifest:
            if dirname(url) in folders:
                _remove(url, options)
            else:
                kept.append(url)
        self.put_after_manifest = kept

    def _merge_fragments(self) -> None:
        """Merge the manifest fragments of the tasks whose results never arrived."""
        if not self._hooks.keeps_records:
            return
        unarrived = [(_folders(sent), task_key) for sent, _, task_key, _ in self._sent.values()]
        for folders, task_key in self._unarrived + unarrived:
            for folder in folders:
                self._hooks.merge_records(folder, self._run_key, task_key)
        self._unarrived.clear()

    def _task_failed(self, group: tuple, numbers: tuple, group_key: str,
                     error: Exception) -> list[FileResult]:
        """The results of a Dask task that raised `error` instead of returning."""
        if isinstance(error, self._distributed.KilledWorker):
            return self._killed(group, numbers, group_key, error)
        if isinstance(error, self._distributed.client.FutureCancelledError):
            self._check_scheduler()
            return []
        if isinstance(error, OSError):  # the result could not be fetched: no scheduler
            raise self._lost_scheduler()
        reason = " ".join(f"{type(error).__name__}: {error}".split())
        return [FileResult(str(getattr(task, "source", task)), "failed",
                           f"the Dask task failed: {reason}") for task in group]

    def _wait_for_results(self) -> None:
        """Wait until a result is ready, or :data:`_POLL_SECONDS` pass (to look at stop requests).

        as_completed wakes its own iterator through its ``thread_condition``;
        waiting on it here lets a request to stop be seen between results.
        Every :data:`_CHECK_SECONDS`, the scheduler and the workers are checked.
        """
        condition = getattr(self._pending, "thread_condition", None)
        if condition is None:
            time.sleep(_POLL_SECONDS)
        else:
            with condition:
                if not self._pending.has_ready():
                    condition.wait(timeout=_POLL_SECONDS)
        if time.monotonic() >= self._next_check:
            self._check_workers()
            self._next_check = time.monotonic() + _CHECK_SECONDS

    def _check_scheduler(self) -> None:
        """Raise ClusterError if the connection to the scheduler was lost."""
        if self._client.status != "running":
            raise self._lost_scheduler()

    def _lost_scheduler(self) -> ClusterError:
        self._failed = "scheduler"
        self._client._convcli_lost = True  # closed without waiting, see close()
        return ClusterError(f"lost the Dask scheduler at {self._address}: the files not "
                            "reported were not processed")

    def _check_workers(self) -> None:
        """Raise ClusterError if the cluster has had no workers for the bound (or no scheduler)."""
        self._check_scheduler()
        try:
            nthreads = self._client.nthreads()
        except OSError:
            self._check_scheduler()
            raise
        workers = set(nthreads)
        self._count_threads(nthreads)
        self._note_departures(workers)
        count = len(workers)
        bound, since = self._no_workers
        now = time.monotonic()
        if count:
            since = None
        elif since is None:
            since = now
        elif now - since >= bound:
            self._failed = "workers"
            raise ClusterError(f"the Dask cluster at {self._address} has had no workers for "
                               f"{bound:g} s: stopping")
        self._no_workers = (bound, since)

    def _note_departures(self, workers: set) -> None:
        """List in :attr:`recovered_deaths` the workers gone since the last time (`workers` now)."""
        for address in sorted(self._workers - workers):
            if address not in self.recovered_deaths:
                self.recovered_deaths.append(address)
        self._workers = workers

    def _killed(self, group: tuple, numbers: tuple, group_key: str,
                exc: BaseException) -> list[FileResult]:
        """Results for a group whose workers kept dying: split it, or fail its one file."""
        if len(group) > 1:
            self._singles.extend((task, number, group_key)
                                 for task, number in zip(group, numbers, strict=True))
            return []
        task = group[0]
        source = str(getattr(task, "source", task))
        return [FileResult(source, "failed",
                           f"{WORKER_DIED} (each time it was tried: {type(exc).__name__})")]

    @property
    def running(self) -> int:
        """Files being processed, at most: one per Dask task not finished, within the threads."""
        return min(len(self._group_of), max(1, self._threads_in_all))

    def _clear(self, *keys: str, wait: bool = True) -> None:
        """Clear the run's record under `keys` on the scheduler (all of it without keys).

        Without `wait`, the request is sent from the client's event loop and
        not waited for (a task's entry, cleared as its result is counted).
        """
        request = self._client.scheduler.set_metadata
        keys = [self._run_key, *keys]
        if not wait:
            self._client.loop.add_callback(_quietly, request, keys=keys, value=None)
            return
        try:
            self._client.sync(request, keys=keys, value=None)
        except OSError:
            pass

    def _forget(self) -> None:
        if self._client.status == "running":
            self._clear()

    def _set_stop(self, state: str) -> bool:
        """Tell the tasks that the run stopped (:data:`STOP`, :data:`ABANDON`); whether it could."""
        try:
            self._client.set_metadata([self._run_key, "stop"], state)
        except OSError:
            return False
        return True

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
        finally:
            self._merge_fragments()

    def _stop(self, force: bool) -> list[FileResult]:
        """:meth:`stop`, before the fragments are merged."""
        self._stopping = True
        self._singles.clear()
        late, self._unreported = self._unreported, []
        if self._failed == "scheduler":  # nothing can be asked of it any more
            return late
        if not self._group_of or self._client.status != "running":
            self._forget()
            return late
        if self._failed:  # no workers: what their lost tasks wrote is removed
            self._set_stop(ABANDON)
            self._client.cancel(list(self._group_of))
            self._remove_unreported()
            return late
        if self._set_stop(STOP) and not force:
            late += self._gather(self._stop_wait, interruptible=True)
        if not self._group_of:
            self._forget()
            return late
        waited = "" if force or self._stop_requests() >= 2 else f" after {self._stop_wait:g} s"
        running = len(self._group_of)
        self._set_stop(ABANDON)
        # The tasks that said they were done before reading the flag return their results.
        late += self._gather(_ABANDON_WAIT, interruptible=False, until=self._returning())
        self.stop_note = (f"stopped waiting for the Dask workers{waited}: the {running} "
                          "task(s) not finished remove the outputs they write, which are not "
                          "recorded")
        if self._group_of:
            self._client.cancel(list(self._group_of))
        else:
            self._forget()
        return late

    def _remove_unreported(self) -> None:
        """Remove the new outputs that the unfinished tasks' journals name (workers lost)."""
        journals = self._journals()
        if journals is None:
            return
        for _, numbers, _, group_key in self._sent.values():
            files = (journals.get(group_key) or {}).get("files") or {}
            for number in numbers:
                for path in files.get(number, ()):
                    _remove(path)

    def _returning(self) -> set:
        """The futures not collected whose tasks said they were done (:meth:`_Journal.done`)."""
        journals = self._journals() or {}
        return {future for future, (_, _, task_key, _) in self._sent.items()
                if (journals.get(task_key) or {}).get("done")}

    def _journals(self) -> dict | None:
        """Every task's journal of the run, in one request; None if the scheduler is gone."""
        if not self._sent:
            return {}
        try:
            return self._client.get_metadata([self._run_key, "tasks"], None) or {}
        except OSError:
            return None

    def _gather(self, seconds: float, *, interruptible: bool,
                until: set | None = None) -> list[FileResult]:
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
                done = self._pending.next_batch(block=False)
                if not done:
                    self._wait_for_results()
                for future in done:
                    late += self._collect(future)
            except ClusterError:  # no scheduler, or no workers: nothing more will come
                break
        return late


_ADDRESS = re.compile(r"(tcp|tls|inproc|ucx)://\S+|[^\s:/]+:\d+|\[[0-9A-Fa-f:.]+\]:\d+")


def check_scheduler(address: str) -> str:
    """`address` as ``--scheduler`` takes it: ``"local"`` (any case), or a Dask address.

    A Dask address is ``tcp://``, ``tls://``, ``inproc://`` or ``ucx://``
    followed by the scheduler's place, or ``HOST:PORT``.

    Raises
    ------
    OptionError
        Anything else, before Dask is asked to connect to it.

    Examples
    --------
    >>> check_scheduler("LOCAL"), check_scheduler("127.0.0.1:8786")
    ('local', '127.0.0.1:8786')
    """
    if address.strip().lower() == "local":
        return "local"
    if not _ADDRESS.fullmatch(address):
        raise OptionError(f"{address!r} is not a Dask scheduler address: give tcp://HOST:PORT "
                          "(or tls://, inproc://, ucx://), HOST:PORT, or local", "--scheduler")
    return address


def scheduler_file_address(path: str) -> str:
    """The scheduler's address in the scheduler file `path` (JSON with an ``"address"``).

    Raises
    ------
    OptionError
        The file cannot be read, is not JSON, or names no address.
    """
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise OptionError(f"{path}: {exc.strerror or exc}", "--scheduler-file") from None
    except ValueError:  # not JSON, or not text
        raise OptionError(f"{path} is not a Dask scheduler file (JSON with an address)",
                          "--scheduler-file") from None
    address = data.get("address") if isinstance(data, dict) else None
    if not isinstance(address, str) or not address:
        raise OptionError(f"{path} is not a Dask scheduler file: it names no address",
                          "--scheduler-file")
    return address


class DaskEngine(RunEngine):
    """The ``dask`` engine: a Dask cluster, from ``--scheduler`` or ``--scheduler-file``.

    Without either, a local cluster of ``--jobs`` worker processes
    (``--scheduler local``). Files go `files_per_task` to a Dask task
    (:class:`ClusterRun`). Dask runs a task again when its worker dies; a
    group that keeps killing workers is split, and a file that kills its
    worker each time fails alone. Stopping ends the tasks between files and
    waits for them (:data:`STOP_WAIT_SECONDS` at most); a second request
    stops waiting, and the tasks still running remove what they write.
    """

    name = "dask"
    deaths_text = ("{count} Dask worker(s) were lost during the run ({names}); the files they "
                   "had in hand were processed again on the others")

    def __init__(self, settings: EngineSettings):
        if settings.scheduler is not None and settings.scheduler_file is not None:
            raise OptionError("--scheduler and --scheduler-file name the same thing: give one",
                              None)
        if settings.in_memory:  # blamed on the option that asked for the cluster
            asked = ("--scheduler" if settings.scheduler is not None else
                     "--scheduler-file" if settings.scheduler_file is not None else "--engine")
            raise OptionError(f"{settings.in_memory}: memory:// lives in this process only, "
                              "where the cluster's workers cannot see it", asked)
        super().__init__(settings)
        self.client = None
        self.scheduler = None if settings.scheduler is None else check_scheduler(settings.scheduler)
        if settings.scheduler_file is not None:
            self.scheduler = scheduler_file_address(settings.scheduler_file)

    @property
    def shares_memory(self) -> bool:
        return False

    def open(self) -> None:
        settings = self.settings
        # A scheduler file's address is checked for a listener at once, as --scheduler's is.
        self.client = connect(self.scheduler or "local", None, jobs=settings.jobs or default_jobs())

    def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            close(client)


    def start(self, tasks, worker, *, count=None, stop_requests=lambda: 0):
        per_task = self.settings.files_per_task or DEFAULT_FILES_PER_TASK
        return self._started(ClusterRun(self.client, tasks, worker, files_per_task=per_task,
                                        stop_requests=stop_requests,
                                        hooks=self.hooks))

    def result_kept(self, result) -> None:
        if self._run is not None:
            self._run.recorded(result)

    def records_published(self, folders, options=None) -> None:
        if self._run is not None:
            self._run.manifest_put(folders, options)
