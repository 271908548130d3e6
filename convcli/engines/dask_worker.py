"""What a Dask task of a run does on its worker (:func:`run_group`).

A task processes a group of files through
:func:`convcli.engines.processes.run_guarded`. It keeps a record on the
scheduler (:class:`_Journal`): where it runs, and which new outputs each of
its files is about to write, so that a run of it again, after its worker
was lost, writes those outputs again and names the lost worker. Between
files it reads its run's stop flag (:data:`STOP`, :data:`ABANDON`), and
before it returns it keeps its outputs' records beside them (the run's
:class:`convcli.engines.base.RunHooks`). A worker process sets its layer
threads once (:func:`_prepare_worker`, :func:`layer_threads`).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable

from ..io.storage import is_url, remove_tree
from ..layers._engine.tiles import set_threads, usable_cores
from .base import RunHooks
from .processes import FileResult, keep_freed_memory, run_guarded


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
    return {
        address: max(1, cores.get(address, 1) // on_host[info.get("host")])
        for address, info in workers.items()
    }


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


def run_group(
    worker: Callable,
    tasks: tuple,
    threads: dict | None = None,
    run: tuple | None = None,
    hooks: RunHooks | None = None,
) -> GroupResult:
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
