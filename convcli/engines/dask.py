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
scheduler (:class:`convcli.engines.dask_worker._Journal`): a task run again
writes again the outputs its lost run wrote, so that they are reported and
reach the manifest, and names the lost worker. A group that keeps killing its
workers is split into one task per file, run one at a time with nothing else
in flight, so that only the file to blame fails. A lost scheduler, or a
cluster left without workers for :data:`NO_WORKERS_SECONDS`, ends the run
(:class:`ClusterError`). A run that is stopped sets a flag that its tasks read
between files (:meth:`ClusterRun.stop`). Before it returns, a task writes its
outputs' manifest lines to a fragment beside them, deleted once the client has
recorded its result and merged into the manifest where the result never
arrived (:func:`convcli.app.manifest.merge_fragments`); on object storage, a
manifest object of its own, deleted once the client's run has put its own
(:meth:`ClusterRun.manifest_put`).

The modules, each importing only those before it:

- :mod:`convcli.engines.dask_worker`: what a task does on its worker
  (:func:`~convcli.engines.dask_worker.run_group`, its journal, layer threads);
- :mod:`convcli.engines.dask_cluster`: :class:`ClusterError`, and the watch
  on the cluster's workers, threads and losses;
- :mod:`convcli.engines.dask_records`: the run's record on the scheduler, and
  its tasks' manifest fragments;
- :mod:`convcli.engines.dask_tasks`: the Dask tasks in flight;
- :mod:`convcli.engines.dask_run`: :class:`ClusterRun`;
- this module: :class:`DaskEngine`, connecting to a cluster and closing the
  client, and the checks of ``--scheduler`` and ``--scheduler-file``.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator

from .._version import __version__
from ..errors import OptionError
from .base import EngineSettings, RunEngine
from .dask_cluster import MIN_IN_FLIGHT as MIN_IN_FLIGHT
from .dask_cluster import NO_WORKERS_SECONDS as NO_WORKERS_SECONDS
from .dask_cluster import ClusterError, _import_distributed
from .dask_run import STOP_WAIT_SECONDS as STOP_WAIT_SECONDS
from .dask_run import ClusterRun
from .dask_worker import _prepare_worker as _prepare_worker
from .dask_worker import layer_threads as layer_threads
from .processes import default_jobs

DEFAULT_FILES_PER_TASK = 8
"""Files per Dask task: enough to make the scheduler's cost per file small
(about a millisecond a task), few enough to spread a folder over many workers."""


def connect(
    scheduler: str | None = None,
    scheduler_file: str | None = None,
    *,
    jobs: int = 1,
    timeout: float = 10.0,
):
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

    # A scheduler that goes away is said in the run's own line, not in Dask's error.
    client_log = logging.getLogger("distributed.client")
    if not any(isinstance(f, _NoReconnectError) for f in client_log.filters):
        client_log.addFilter(_NoReconnectError())
    if scheduler not in (None, "local"):
        _check_reachable(scheduler, timeout)

    # Dask logs connection chatter at INFO and WARNING; the command line reports on its own,
    # also a scheduler that went away (its "Failed to reconnect" error).
    _quiet_dask_logs(logging.ERROR)
    try:
        client = _client(distributed, scheduler, scheduler_file, jobs=jobs, timeout=timeout)
    except (OSError, TimeoutError, ValueError) as exc:
        where = scheduler_file or scheduler
        raise ClusterError(
            f"cannot reach the Dask scheduler at {where}: "
            f"{' '.join(str(exc).split()) or type(exc).__name__}"
        ) from None
    asyncio_loop = getattr(client.loop, "asyncio_loop", None)
    if asyncio_loop is not None:
        asyncio_loop.set_exception_handler(_without_abandoned_gathers)
    try:
        check_versions(client)
    except BaseException:
        close(client)
        raise
    return client


def _client(
    distributed, scheduler: str | None, scheduler_file: str | None, *, jobs: int, timeout: float
):
    """The client of :func:`connect`: of a new local cluster, or of the scheduler named."""
    import logging

    if scheduler == "local":
        # The scheduler's HTTP server on a free loopback port: with the dashboard
        # off it would still take 8787, and warn when another cluster holds it. The
        # workers log nothing: the run says what happened to its files itself, and Dask's
        # errors come with tracebacks (a heartbeat to a scheduler closed first, at the end).
        with _forgotten_if_stopped(distributed):
            cluster = distributed.LocalCluster(
                n_workers=jobs,
                threads_per_worker=1,
                processes=True,
                dashboard_address="127.0.0.1:0",
                silence_logs=logging.CRITICAL + 1,
            )
        client = distributed.Client(cluster, set_as_default=False)
        client._convcli_cluster = cluster  # closed with the client, see close()
        return client
    if scheduler_file is not None:
        return distributed.Client(
            scheduler_file=scheduler_file, timeout=timeout, set_as_default=False
        )
    return distributed.Client(scheduler, timeout=timeout, set_as_default=False)


@contextlib.contextmanager
def _forgotten_if_stopped(distributed) -> Iterator[None]:
    """Where the block ends on an exception (Ctrl-C or SIGTERM while a local cluster
    starts), the clusters it made are taken out of Dask's list of clusters, whose exit
    handler would try to close them half started and print a traceback, and asyncio's
    log is silenced, which would report their abandoned start-up tasks as Python exits
    (their workers are daemon processes, ended then)."""
    import logging

    instances = getattr(getattr(distributed, "SpecCluster", None), "_instances", None)
    before = set(instances) if instances is not None else set()
    try:
        yield
    except BaseException:
        for cluster in set(instances or ()) - before:
            instances.discard(cluster)
        logging.getLogger("asyncio").setLevel(logging.CRITICAL + 1)
        raise


def _without_abandoned_gathers(loop, context: dict) -> None:
    """The client loop's exception handler, silent on a result no longer waited for.

    A result asked for with a timeout (``_FETCH_SECONDS`` in :mod:`.dask_run`) leaves Dask's
    gathering task to end later with ``AllExit``, which asyncio would print
    as "Task exception was never retrieved" with a traceback.
    """
    if type(context.get("exception")).__name__ == "AllExit":
        return
    loop.default_exception_handler(context)


_CLOSE_SECONDS = 2.0  # closing a client whose scheduler was lost


class _NoReconnectError:
    """A filter of ``distributed.client``'s log: without its "Failed to reconnect to
    scheduler after ... seconds, closing client", which the run says in its own line."""

    def filter(self, record) -> bool:
        return not str(record.msg).startswith("Failed to reconnect to scheduler")


def _quiet_dask_logs(level: int) -> None:
    """Dask's loggers (``distributed`` and those its configuration sets apart) at `level`."""
    import logging

    names = [
        name
        for name in logging.root.manager.loggerDict
        if name == "distributed" or name.startswith("distributed.")
    ]
    for name in names or ["distributed"]:
        logging.getLogger(name).setLevel(level)


def _check_reachable(address: str, timeout: float) -> None:
    """Raise ClusterError at once if nothing listens at a ``tcp://HOST:PORT`` `address`.

    Dask's client retries a refused connection until its timeout (10 s);
    a plain connection says at once that no scheduler is there. Other
    protocols (``tls://`` ...) are left to Dask.
    """
    import socket

    rest = address[len("tcp://") :] if address.startswith("tcp://") else address
    host, sep, port = rest.rpartition(":")
    if "://" in rest or not sep or not port.isdigit():
        return
    try:
        connection = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise ClusterError(f"cannot reach the Dask scheduler at {address}: {reason}") from None
    with connection:
        _check_greeting(connection, address)


HANDSHAKE_SECONDS = 5.0
"""How long a scheduler has to send its handshake, which it sends as soon as it is reached."""

_LARGEST_HANDSHAKE = 1 << 20  # bytes: a Dask handshake is a few dozen


def _check_greeting(connection, address: str) -> None:
    """Raise ClusterError unless what listens at `address` greets as a Dask scheduler.

    A scheduler writes its handshake (an 8-byte length, then a small msgpack
    message) the moment a client connects. An HTTP server (the dashboard's
    port, 8787, beside the scheduler's 8786) says nothing until asked, and
    Dask's client waited on it for minutes, or read a length of exabytes.
    """
    connection.settimeout(HANDSHAKE_SECONDS)
    header = b""
    try:
        while len(header) < 8:
            part = connection.recv(8 - len(header))
            if not part:
                break
            header += part
    except OSError:  # a timeout: nothing said
        pass
    length = int.from_bytes(header, "little") if len(header) == 8 else 0
    if not 0 < length <= _LARGEST_HANDSHAKE:
        said = "said nothing" if not header else "answered in another protocol"
        raise ClusterError(
            f"{address} is not a Dask scheduler: it {said} in "
            f"{HANDSHAKE_SECONDS:g} s (a dashboard or web server? a scheduler "
            "listens on 8786, its dashboard on 8787)"
        )


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

    Waits up to `wait_seconds` for a first worker to join
    (:func:`_wait_for_a_worker`); a scheduler that goes away meanwhile is said
    as such, not as a cluster without workers.
    """
    _wait_for_a_worker(client, wait_seconds)
    ours = worker_version()
    try:
        theirs = client.run(worker_version)
    except Exception as exc:  # distributed raises a plain Exception for a failed import
        if isinstance(exc, OSError) or client.status != "running":
            raise _gone_before_the_run(client) from None
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ClusterError(
            f"convcli cannot be imported on the Dask workers ({reason}); "
            f"install convcli {ours} there"
        ) from None
    other = {address: version for address, version in theirs.items() if version != ours}
    if other:
        listed = ", ".join(f"{address} has {version}" for address, version in sorted(other.items()))
        raise ClusterError(
            f"the Dask workers must run convcli {ours}, as this machine does: {listed}"
        )


ASK_SECONDS = 5.0
"""How long the scheduler has to say which workers it has, while a run waits for one."""


def _wait_for_a_worker(client, wait_seconds: float) -> None:
    """Return once the cluster of `client` has a worker; ClusterError after `wait_seconds`
    without one, or at once where the scheduler went away.

    The scheduler is asked only while the client is connected, and for
    :data:`ASK_SECONDS` at most: asked while the client reconnects to a
    scheduler that was killed, Dask waited out the reconnection (10 s), and
    the run then said that the cluster had no workers.
    """
    deadline = time.monotonic() + wait_seconds
    while True:
        if client.status not in ("running", "newly-created"):
            raise _gone_before_the_run(client)
        try:
            workers = client.sync(
                client.scheduler.identity, n_workers=-1, callback_timeout=ASK_SECONDS
            ).get("workers")
        except (OSError, TimeoutError):  # lost while asked, or no answer
            raise _gone_before_the_run(client) from None
        if workers:
            return
        if time.monotonic() >= deadline:
            raise ClusterError("the Dask cluster has no workers")
        time.sleep(0.1)


def _gone_before_the_run(client) -> ClusterError:
    """The error of a scheduler that went away before the run started."""
    client._convcli_lost = True  # closed without waiting, see close()
    address = getattr(client.scheduler, "address", None) or "its address"
    return ClusterError(
        f"the Dask scheduler at {address} went away before the run started: no file was processed"
    )


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
        raise OptionError(
            f"{address!r} is not a Dask scheduler address: give tcp://HOST:PORT "
            "(or tls://, inproc://, ucx://), HOST:PORT, or local",
            "--scheduler",
        )
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
        raise OptionError(
            f"{path} is not a Dask scheduler file (JSON with an address)", "--scheduler-file"
        ) from None
    address = data.get("address") if isinstance(data, dict) else None
    if not isinstance(address, str) or not address:
        raise OptionError(
            f"{path} is not a Dask scheduler file: it names no address", "--scheduler-file"
        )
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
    deaths_text = (
        "{count} Dask worker(s) were lost during the run ({names}); the files they "
        "had in hand were processed again on the others"
    )

    def __init__(self, settings: EngineSettings):
        if settings.scheduler is not None and settings.scheduler_file is not None:
            raise OptionError(
                "--scheduler and --scheduler-file name the same thing: give one", None
            )
        if settings.in_memory:  # blamed on the option that asked for the cluster
            asked = (
                "--scheduler"
                if settings.scheduler is not None
                else "--scheduler-file"
                if settings.scheduler_file is not None
                else "--engine"
            )
            raise OptionError(
                f"{settings.in_memory}: memory:// lives in this process only, "
                "where the cluster's workers cannot see it",
                asked,
            )
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
        return self._started(
            ClusterRun(
                self.client,
                tasks,
                worker,
                files_per_task=per_task,
                stop_requests=stop_requests,
                hooks=self.hooks,
            )
        )

    def deaths_note(self) -> str | None:
        """None once the scheduler was lost: the run said so on its own line, and the files
        of the workers lost before it were not processed again."""
        if self._run is not None and self._run.lost_scheduler:
            return None
        return super().deaths_note()

    def result_kept(self, result) -> None:
        if self._run is not None:
            self._run.recorded(result)

    def records_published(self, folders, options=None) -> None:
        if self._run is not None:
            self._run.manifest_put(folders, options)
