"""Where a batch's tasks run: the :class:`Engine` interface and the engines by name.

An engine takes picklable tasks and a module-level ``worker(task) ->
FileResult`` function and yields one result per task. The batch run
(:func:`convcli.app.run.run_batch`) plans the tasks, reports the results and
decides the exit status; the engine only decides where and how the tasks
run. Two engines exist:

- ``processes`` (:class:`convcli.engines.processes.ProcessEngine`): ``--jobs`` worker
  processes on this machine, or this process for one job;
- ``dask`` (:class:`convcli.engines.dask.DaskEngine`): a Dask cluster
  (``--scheduler``), files grouped into Dask tasks.

Adding an engine is one class that implements :class:`Engine` and one entry
in :data:`ENGINES`, which ``--engine`` takes its values from. This module
imports neither numpy nor the engines themselves, so that the command line
can list the names without loading them.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import ClassVar

from ..errors import OptionError

ENGINES = {
    "processes": "convcli.engines.processes:ProcessEngine",
    "dask": "convcli.engines.dask:DaskEngine",
}
"""Engine names (``--engine``) and the class of each, as ``module:Class``."""


class EngineError(RuntimeError):
    """The engine cannot start or go on (a cluster that cannot be reached); one line."""


@dataclass(frozen=True)
class EngineSettings:
    """What an engine is asked for: the options of the batch that concern it.

    Attributes
    ----------
    jobs : int or None
        Files processed at once (``--jobs``); None: one per CPU.
    scheduler, scheduler_file : str or None
        A Dask scheduler's address (or ``"local"``), or its scheduler file.
    files_per_task : int or None
        Files in each task of an engine that groups them.
    in_memory : str or None
        A ``memory://`` input or output of the run: it exists in this process
        only, so the tasks must run here.
    """

    jobs: int | None = None
    scheduler: str | None = None
    scheduler_file: str | None = None
    files_per_task: int | None = None
    in_memory: str | None = None


class Engine(ABC):
    """Runs a batch's tasks somewhere and yields their results.

    Use it as a context manager (:meth:`open` on entry, :meth:`close` on
    exit), then iterate :meth:`start` once. The constructor checks the
    settings and raises :class:`convcli.errors.OptionError` for options this
    engine cannot honour; nothing is started before :meth:`open`.

    **Stopping.** :meth:`stop` ends the run early (Ctrl-C, ``--fail-fast``):
    tasks not started are cancelled. Where :attr:`finishes_running` is true
    the files being written are finished and their results returned, unless
    a second stop request (or ``force``) stops them at once; outputs stay
    whole either way (they are written under temporary names and renamed).
    Then :attr:`stop_note` may say what was not waited for.

    **A dead worker** (killed by the out-of-memory killer, or a decoder that
    crashes) never stops the run: the engine runs its tasks again, and a
    task that kills its worker each time fails alone with a result saying
    so. A death that no task was found to cause is listed in
    :attr:`recovered_deaths`; :meth:`deaths_note` says it in one line, and
    the run then ends with exit status 1 although every file was processed.
    """

    name: ClassVar[str]
    """The engine's name in :data:`ENGINES` (``--engine``)."""

    finishes_running: ClassVar[bool] = True
    """Whether :meth:`stop` waits for the files being written (a second request stops them)."""

    finish_seconds: ClassVar[float | None] = None
    """How long at most :meth:`stop` waits for them (None: until they end)."""

    def __init__(self, settings: EngineSettings):
        self.settings = settings
        self.recovered_deaths: list[str] = []

    @property
    @abstractmethod
    def shares_memory(self) -> bool:
        """Whether tasks run in this process (they see its ``memory://``; nothing is pickled)."""

    @property
    def runs_here(self) -> bool:
        """Whether tasks run in this thread: a first stop request then interrupts the file."""
        return False

    def open(self) -> None:  # noqa: B027 - starting is optional for an engine
        """Start workers or connect to them; :class:`EngineError` if that fails."""

    def close(self) -> None:  # noqa: B027 - as open
        """Let go of what :meth:`open` started (idempotent)."""

    def __enter__(self) -> Engine:
        self.open()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @abstractmethod
    def start(
        self,
        tasks: Iterable,
        worker: Callable,
        *,
        count: int | None = None,
        stop_requests: Callable[[], int] = lambda: 0,
    ) -> Iterator:
        """Run ``worker(task)`` for every task; yield each ``FileResult`` as it completes.

        Parameters
        ----------
        tasks : iterable
            Picklable tasks, consumed lazily (a bounded number in flight).
        worker : callable
            A module-level function, importable where the tasks run.
        count : int, optional
            The number of tasks, when known (no more workers are started).
        stop_requests : callable
            The number of times the user asked to stop, polled while waiting:
            the iteration ends after the first.
        """

    @abstractmethod
    def stop(self, *, force: bool = False) -> list:
        """Cancel what has not started; return the results not yielded yet (see the class)."""

    @property
    @abstractmethod
    def running(self) -> int:
        """Files being processed now."""

    @property
    def stop_note(self) -> str | None:
        """After :meth:`stop`: one line on files it could not wait for, or None."""
        return None

    hooks: RunHooks | None = None
    """The run's :class:`RunHooks`, set before :meth:`start`."""

    def result_kept(self, result) -> None:  # noqa: B027 - only some engines keep copies
        """Say that the run has kept the records of `result`, yielded by :meth:`start`."""

    def records_published(self, folders, options=None) -> None:  # noqa: B027 - see result_kept
        """Say that the run's records are published in the object-storage `folders`."""

    deaths_text = "{count} worker(s) died ({names}) and were replaced"
    """:meth:`deaths_note`'s line, each engine's own words for its workers."""

    def deaths_note(self) -> str | None:
        """One line on workers that died and were recovered from, or None."""
        if not self.recovered_deaths:
            return None
        return self.deaths_text.format(
            count=len(self.recovered_deaths), names=", ".join(self.recovered_deaths)
        )


class RunHooks:
    """What a run lends its engine: its rules, applied where the tasks run.

    An engine knows nothing of the run's outputs and records; where its
    tasks may finish unseen (a Dask cluster's, whose client or scheduler may
    be lost), it asks these. They travel with the tasks, so a subclass must
    pickle. The defaults do nothing: no checks, no records kept.
    """

    keeps_records = False
    """Whether :meth:`write_records` keeps anything (the run has records to keep)."""

    def checking(self, check: Callable) -> AbstractContextManager:
        """A context inside which ``check(outputs, todo)`` has the last word on the
        outputs a task writes (a Dask worker's journal of what was written)."""
        return nullcontext()

    def write_records(
        self, results: list, run_key: str, task_key: str, options: dict | None = None
    ) -> tuple[str, ...]:
        """Keep the records of `results`' outputs beside them, should the results never
        reach the run; the paths written."""
        return ()

    def merge_records(self, folder: str, run_key: str, task_key: str) -> None:
        """Take into `folder`'s records those task `task_key` kept there (its result never
        reached the run)."""


class RunEngine(Engine):
    """An engine whose :meth:`start` makes a run object that yields, stops and counts.

    The run (:class:`convcli.engines.processes.BatchRun`, :class:`convcli.engines.dask.ClusterRun`)
    has ``__iter__``, ``stop(force=)``, ``running`` and ``recovered_deaths``;
    this class hands :meth:`stop` and :attr:`running` to it.
    """

    _run = None

    def _started(self, run) -> Iterator:
        self._run = run
        self.recovered_deaths = run.recovered_deaths
        return iter(run)

    def stop(self, *, force: bool = False) -> list:
        return self._run.stop(force=force) if self._run is not None else []

    @property
    def running(self) -> int:
        return self._run.running if self._run is not None else 0

    @property
    def stop_note(self) -> str | None:
        return getattr(self._run, "stop_note", None)


def engine_name(name: str | None, settings: EngineSettings) -> str:
    """The engine to use: `name`, or ``dask`` when a scheduler is given, else ``processes``.

    >>> engine_name(None, EngineSettings(scheduler="tcp://127.0.0.1:8786"))
    'dask'
    >>> engine_name(None, EngineSettings())
    'processes'
    """
    if name is None:
        dask = settings.scheduler is not None or settings.scheduler_file is not None
        return "dask" if dask else "processes"
    if name not in ENGINES:
        raise OptionError(f"must be one of {', '.join(ENGINES)}, got {name!r}", "--engine")
    return name


def make_engine(name: str | None, settings: EngineSettings) -> Engine:
    """The engine called `name` (see :func:`engine_name`) for `settings`; not opened yet."""
    module, _, cls = ENGINES[engine_name(name, settings)].partition(":")
    return getattr(importlib.import_module(module), cls)(settings)
