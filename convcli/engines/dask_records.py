"""What a run on a Dask cluster keeps about its tasks, on the client's side.

:class:`RunRecord` writes and clears the run's record on the scheduler,
which its tasks keep (:class:`convcli.engines.dask_worker._Journal`): the
stop flag, and each task's entry, cleared once its result is counted.
:class:`Fragments` follows the manifest fragments that the tasks write
beside their outputs, until the caller has recorded the results (deleted),
or, for tasks whose results never arrived, merges them into the manifests.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from ..io.storage import dirname, is_url
from .base import RunHooks
from .dask_worker import _remove
from .processes import FileResult


async def _quietly(request, **kwargs) -> None:
    """Await ``request(**kwargs)``, a call to the scheduler not waited for; errors are dropped."""
    try:
        await request(**kwargs)
    except OSError:  # the scheduler is gone: the run says so on its own
        pass


class RunRecord:
    """The record of the run `key` on the scheduler of `client`, as the client sets and clears it.

    Parameters
    ----------
    client : distributed.Client
    key : str
        The run's key, under which its tasks keep their journals.
    """

    def __init__(self, client, key: str):
        self._client = client
        self._key = key

    def clear(self, *keys: str, wait: bool = True) -> None:
        """Clear the run's record under `keys` on the scheduler (all of it without keys).

        Without `wait`, the request is sent from the client's event loop and
        not waited for (a task's entry, cleared as its result is counted).
        """
        request = self._client.scheduler.set_metadata
        keys = [self._key, *keys]
        if not wait:
            self._client.loop.add_callback(_quietly, request, keys=keys, value=None)
            return
        try:
            self._client.sync(request, keys=keys, value=None)
        except OSError:
            pass

    def forget(self) -> None:
        """Clear all of the run's record, if the scheduler is still there."""
        if self._client.status == "running":
            self.clear()

    def set_stop(self, state: str) -> bool:
        """Tell the tasks that the run stopped, in `state`; whether it could.

        `state` is :data:`convcli.engines.dask_worker.STOP` or ``ABANDON``.
        """
        try:
            self._client.set_metadata([self._key, "stop"], state)
        except OSError:
            return False
        return True


def task_journals(client, run_key: str) -> dict:
    """Every task's journal of the run `run_key`, in one request; none if the scheduler is gone."""
    try:
        return client.get_metadata([run_key, "tasks"], None) or {}
    except OSError:
        return {}


def said_done(journals: dict, sent: dict) -> set:
    """The futures of `sent` whose tasks said in `journals` that they were done.

    `sent` maps each future to ``(tasks as sent, numbers, task key, group key)``.
    """
    return {
        future
        for future, (_, _, task_key, _) in sent.items()
        if (journals.get(task_key) or {}).get("done")
    }


def named_outputs(journals: dict, sent: dict) -> Iterator[str]:
    """The new outputs that the files of the groups of `sent` named in `journals`.

    `sent` maps each future to ``(tasks as sent, numbers, task key, group key)``.
    """
    for _, numbers, _, group_key in sent.values():
        files = (journals.get(group_key) or {}).get("files") or {}
        for number in numbers:
            yield from files.get(number, ())


def _folders(tasks: tuple) -> set[str]:
    """The local output folders of `tasks` (where their manifest fragments would be)."""
    return {
        task.out_dir
        for task in tasks
        if getattr(task, "out_dir", None) and not is_url(task.out_dir)
    }


class Fragments:
    """The manifest fragments of a run's tasks, from their results' arrival until they go.

    Each task writes its outputs' records to fragments beside them
    (:meth:`convcli.engines.base.RunHooks.write_records`). A task's local
    fragments are deleted once the caller has recorded all its results
    (:meth:`recorded`); those on object storage once the run's manifest
    objects are put (:meth:`manifest_put`). Those of the tasks whose results
    never arrived are merged into the manifests (:meth:`merge`).

    Parameters
    ----------
    hooks : RunHooks
        The run's hooks, which write and merge the records.
    """

    def __init__(self, hooks: RunHooks):
        self._hooks = hooks
        self._left: dict = {}  # task key: its results not recorded yet, and its fragments
        self._task_of: dict[int, str] = {}  # id of a result: its task's key (see recorded)
        self._unarrived: list = []  # (folders, task key) of the tasks whose result was an error
        self.put_after_manifest: list[str] = []  # fragment objects of recorded results

    def returned(self, task_key: str, results: list, fragments: tuple) -> None:
        """Note that task `task_key` returned `results`, its records kept in `fragments`."""
        if fragments:
            self._left[task_key] = [len(results), fragments]
            self._task_of.update((id(result), task_key) for result in results)

    def not_returned(self, sent: tuple, task_key: str) -> None:
        """Note that task `task_key` (of the tasks `sent`) raised: did its result get lost?"""
        if self._hooks.keeps_records:  # returned, its result lost on the way?
            self._unarrived.append((_folders(sent), task_key))

    def recorded(self, result: FileResult) -> None:
        """Say that `result`'s manifest lines were written: its task's local fragments go.

        Those on object storage are kept in :attr:`put_after_manifest` until
        the run's manifest objects are put (:meth:`manifest_put`).
        """
        task_key = self._task_of.pop(id(result), None)
        if task_key is None:
            return
        left = self._left[task_key]
        left[0] -= 1
        if left[0] == 0:
            del self._left[task_key]
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

    def merge_unrecorded(self, run_key: str) -> None:
        """Merge the local fragments of the tasks whose results arrived but will not all be
        recorded (the run stops at once): a line of a result recorded already comes twice,
        and is read once (:func:`convcli.app.manifest.read_manifest`)."""
        for task_key, (_, paths) in self._left.items():
            for folder in {os.path.dirname(path) for path in paths if not is_url(path)}:
                self._hooks.merge_records(folder, run_key, task_key)
        self._left.clear()
        self._task_of.clear()

    def merge(self, run_key: str, unfinished: Iterable[tuple]) -> None:
        """Merge the manifest fragments of the tasks whose results never arrived.

        `unfinished` holds ``(tasks as sent, numbers, task key, group key)`` of the
        tasks not collected; those that raised were noted (:meth:`not_returned`).
        """
        if not self._hooks.keeps_records:
            return
        unarrived = [(_folders(sent), task_key) for sent, _, task_key, _ in unfinished]
        for folders, task_key in self._unarrived + unarrived:
            for folder in folders:
                self._hooks.merge_records(folder, run_key, task_key)
        self._unarrived.clear()
