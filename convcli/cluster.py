"""Running a batch on a Dask cluster (the ``dask`` extra): ``--scheduler``.

Dask distributed is imported when a cluster is asked for, never before.
:func:`connect` opens a client (to a scheduler's address, a scheduler file,
or a LocalCluster of worker processes started here), checks that every worker
runs this version of convcli, and :class:`ClusterRun` streams the tasks
through it: files grouped `files_per_task` to a Dask task, a bounded number of
tasks in flight, each result released as soon as it has been counted. Tasks
return small :class:`convcli.batch.FileResult` records, never pixels.

Dask runs a task again when the worker running it dies (at-least-once), and
gives up after its ``allowed-failures`` with ``KilledWorker``. Outputs are
written under temporary names and renamed, and a task run again keeps what
its first run completed, so a second run is harmless (its files are counted
as skipped). A group that keeps killing its workers is split into one task
per file, run one at a time with nothing else in flight, so that only the
file to blame fails.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator

from ._engine.tiles import set_threads, usable_cores
from .batch import WORKER_DIED, FileResult, keep_freed_memory, run_guarded
from .engines import EngineError, EngineSettings, RunEngine
from .errors import MissingExtra, OptionError
from .storage import is_url

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
    logging.getLogger("distributed").setLevel(logging.ERROR)
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
    try:
        check_versions(client)
    except BaseException:
        close(client)
        raise
    return client


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
    cluster = getattr(client, "_convcli_cluster", None)
    client.close()
    if cluster is not None:
        cluster.close()


def worker_version() -> str:
    """convcli's version where this runs (called on the workers)."""
    from . import __version__

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


def run_group(worker: Callable, tasks: tuple, threads: dict | None = None) -> list[FileResult]:
    """Each task of a group through :func:`convcli.batch.run_guarded`, in a Dask worker.

    `threads` maps worker addresses to layer threads (:func:`layer_threads`).
    """
    _prepare_worker(threads or {})
    return [run_guarded(worker, task) for task in tasks]


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


class ClusterRun:
    """Run ``worker(task)`` for every task on a Dask client; iterate to get the results.

    The same interface as :class:`convcli.batch.BatchRun` (iteration in
    completion order, :meth:`stop`, :attr:`running`, :attr:`recovered_deaths`).

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
        cluster's threads.
    stop_requests : callable
        The number of times the user asked to stop, polled while waiting.
    """

    def __init__(self, client, tasks: Iterable, worker: Callable, *, files_per_task: int,
                 in_flight: int | None = None, stop_requests: Callable[[], int] = lambda: 0):
        self._client = client
        self._tasks = iter(tasks)
        self._worker = worker
        self._per_task = max(1, files_per_task)
        workers = client.scheduler_info().get("workers", {})
        if in_flight is None:
            in_flight = 2 * sum(w.get("nthreads", 1) for w in workers.values())
        self._stop_requests = stop_requests
        self._distributed = _import_distributed()
        self._pending = self._distributed.as_completed(loop=client.loop)
        self._in_flight = max(1, in_flight)
        self._threads = layer_threads(client, workers)
        self._group_of: dict = {}
        self._sent: dict = {}  # the groups as sent: relative paths joined to this directory
        self._cwd = os.getcwd()
        self._singles: list = []  # tasks of groups split after killing workers
        self.recovered_deaths: list[str] = []

    def _submit(self, group: tuple) -> None:
        sent = tuple(_absolute(task, self._cwd) for task in group)
        future = self._client.submit(run_group, self._worker, sent, self._threads, pure=False)
        self._group_of[future] = group
        self._sent[future] = sent
        self._pending.add(future)

    def _fill(self) -> None:
        """Submit groups up to `in_flight`; the files of a split group one at a time, alone.

        A file of a split group runs with nothing else on the cluster: Dask
        counts a worker's death against every task assigned to that worker, so
        a file queued beside the one to blame could otherwise fail with it.
        """
        if self._singles:
            if not self._group_of:
                self._submit((self._singles.pop(0),))
            return
        while len(self._group_of) < self._in_flight:
            group = tuple(itertools.islice(self._tasks, self._per_task))
            if not group:
                return
            self._submit(group)

    def __iter__(self) -> Iterator[FileResult]:
        killed = self._distributed.KilledWorker
        self._fill()
        while not self._pending.is_empty():
            if self._stop_requests():
                return
            done = self._pending.next_batch(block=False)
            if not done:
                self._wait_for_results()
                continue
            for future in done:
                group, sent = self._group_of.pop(future), self._sent.pop(future)
                try:
                    results = [_as_given(result, one, given)
                               for result, one, given in zip(future.result(), sent, group,
                                                                 strict=True)]
                except killed as exc:
                    results = self._killed(group, exc)
                except self._distributed.client.FutureCancelledError:
                    results = []
                future.release()
                self._fill()
                yield from results

    def _wait_for_results(self) -> None:
        """Wait until a result is ready, or :data:`_POLL_SECONDS` pass (to look at stop requests).

        as_completed wakes its own iterator through its ``thread_condition``;
        waiting on it here lets a request to stop be seen between results.
        """
        condition = getattr(self._pending, "thread_condition", None)
        if condition is None:
            time.sleep(_POLL_SECONDS)
            return
        with condition:
            if not self._pending.has_ready():
                condition.wait(timeout=_POLL_SECONDS)

    def _killed(self, group: tuple, exc: BaseException) -> list[FileResult]:
        """Results for a group whose workers kept dying: split it, or fail its one file."""
        if len(group) > 1:
            self._singles.extend(group)
            return []
        task = group[0]
        source = str(getattr(task, "source", task))
        return [FileResult(source, "failed",
                           f"{WORKER_DIED} (each time it was tried: {type(exc).__name__})")]

    @property
    def running(self) -> int:
        """Files in Dask tasks that were submitted and have not finished."""
        return sum(len(group) for group in self._group_of.values())

    def stop(self, *, force: bool = False) -> list[FileResult]:
        """Cancel the tasks not finished; return nothing (their files are not reported).

        Outputs stay whole either way: a cancelled task that was running
        finishes the file it is writing, under a temporary name, or leaves a
        temporary file that the next run removes.
        """
        futures = list(self._group_of)
        self._group_of.clear()
        self._sent.clear()
        if futures:
            self._client.cancel(futures, force=force)
        self._pending.clear()
        return []


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
    worker each time fails alone. Stopping cancels the Dask tasks: their
    results are not waited for.
    """

    name = "dask"
    finishes_running = False

    def __init__(self, settings: EngineSettings):
        if settings.scheduler is not None and settings.scheduler_file is not None:
            raise OptionError("--scheduler and --scheduler-file name the same thing: give one",
                              None)
        if settings.in_memory:
            raise OptionError(f"{settings.in_memory}: memory:// lives in this process only, "
                              "where the cluster's workers cannot see it", "--scheduler")
        super().__init__(settings)
        self.client = None
        self.scheduler = None if settings.scheduler is None else check_scheduler(settings.scheduler)
        if settings.scheduler_file is not None:
            self.scheduler = scheduler_file_address(settings.scheduler_file)

    @property
    def shares_memory(self) -> bool:
        return False

    def open(self) -> None:
        from .batch import default_jobs

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
                                        stop_requests=stop_requests))
