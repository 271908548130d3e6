"""The Dask tasks of a run in flight: submitted, and not collected yet (:class:`TasksInFlight`).

Each task is sent with the relative local paths of its files joined to this
process's working directory (:func:`_absolute`), and its results name them
again as they were given (:func:`_as_given`).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import time

from ..io.storage import is_url
from .base import RunHooks
from .dask_worker import run_group
from .processes import FileResult

_POLL_SECONDS = 0.05


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
    pairs = sorted(
        [
            (a, b)
            for a, b in (
                (sent.out_dir, given.out_dir),
                (sent.source, given.source),
                (getattr(sent, "out_file", ""), getattr(given, "out_file", "")),
            )
            if a and a != b
        ],
        key=lambda pair: -len(pair[0]),
    )

    def back(text: str, *, whole: bool = False) -> str:
        for absolute, relative in pairs:
            if whole and text.startswith(absolute):
                return relative + text[len(absolute) :]
            if not whole:
                text = text.replace(absolute, relative)
        return text

    return dataclasses.replace(
        result,
        source=given.source,
        message=back(result.message),
        outputs=tuple(back(path, whole=True) for path in result.outputs),
    )


class TasksInFlight:
    """The Dask tasks of a run submitted and not collected yet, by future.

    Parameters
    ----------
    client : distributed.Client
    distributed : module
        Dask distributed.
    worker : callable
        What each task runs for each of its files (:func:`run_group`).
    hooks : RunHooks
        The run's hooks, sent with each task.
    run_key : str
        The run's key, under which its tasks keep their journals.

    Attributes
    ----------
    group_of : dict
        Each future's group of tasks, as given.
    sent : dict
        Each future's ``(group as sent, file numbers, task key, group key)``: the
        group as sent has its relative paths joined to this working directory.
    pending : distributed.as_completed
        The futures, as they finish.
    """

    def __init__(self, client, distributed, worker, hooks: RunHooks, run_key: str):
        self._client = client
        self._worker = worker
        self._hooks = hooks
        self._run_key = run_key
        self._cwd = os.getcwd()
        self._numbers = itertools.count()
        self.group_of: dict = {}
        self.sent: dict = {}
        self.pending = distributed.as_completed(loop=client.loop)

    def numbers(self, count: int) -> tuple[str, ...]:
        """`count` new file numbers, for the files of a group."""
        return tuple(str(next(self._numbers)) for _ in range(count))

    def submit(
        self, group: tuple, numbers: tuple, threads: dict, group_key: str | None = None
    ) -> None:
        """Submit `group` (files `numbers`) as one Dask task, `threads` its layer threads.

        `group_key` is the key of the group split into tasks of one file that
        this one comes from; by default the task's own.
        """
        sent = tuple(_absolute(task, self._cwd) for task in group)
        task_key = str(next(self._numbers))
        group_key = group_key or task_key
        future = self._client.submit(
            run_group,
            self._worker,
            sent,
            threads,
            (self._run_key, task_key, group_key, numbers),
            self._hooks,
            pure=False,
        )
        self.group_of[future] = group
        self.sent[future] = (sent, numbers, task_key, group_key)
        self.pending.add(future)

    def take(self, future) -> tuple:
        """The group of the finished `future`, as given, as sent, its numbers and keys.

        The future is forgotten here, and released.
        """
        group = self.group_of.pop(future)
        sent, numbers, task_key, group_key = self.sent.pop(future)
        future.release()
        return group, sent, numbers, task_key, group_key

    def wait(self) -> None:
        """Wait until a result is ready, or :data:`_POLL_SECONDS` pass.

        as_completed wakes its own iterator through its ``thread_condition``;
        waiting on it here lets a request to stop be seen between results.
        """
        condition = getattr(self.pending, "thread_condition", None)
        if condition is None:
            time.sleep(_POLL_SECONDS)
        else:
            with condition:
                if not self.pending.has_ready():
                    condition.wait(timeout=_POLL_SECONDS)
