"""Running one job per input file, in this process or in worker processes.

The command line builds a list of picklable tasks and a top-level worker
function ``worker(task) -> FileResult``; :func:`iter_results` runs them and
yields each result as it completes, so the caller can report progress.
Workers report a bad file as a ``"failed"`` result rather than raising.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field


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
        One line: the reason for a failure or skip; empty when done.
    outputs : tuple of str
        Files written.
    timings : dict
        Seconds spent per stage: ``{"decode": ..., "compute": ..., "encode": ...}``.
    """

    source: str
    status: str
    message: str = ""
    outputs: tuple[str, ...] = ()
    timings: dict = field(default_factory=dict)


def default_jobs() -> int:
    """The number of CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def iter_results(
    tasks: Iterable, worker: Callable, *, jobs: int = 1
) -> Iterator[FileResult]:
    """Run ``worker(task)`` for every task and yield the results.

    Parameters
    ----------
    tasks : iterable
        Picklable task objects.
    worker : callable
        A module-level function (so worker processes can import it).
    jobs : int
        Number of processes; 1 runs everything in this process.

    Yields
    ------
    FileResult
        In task order with ``jobs=1``, in completion order otherwise.
    """
    if jobs <= 1:
        for task in tasks:
            yield worker(task)
        return
    yield from _iter_parallel(list(tasks), worker, jobs)


def _iter_parallel(tasks: list, worker: Callable, jobs: int) -> Iterator[FileResult]:
    """Process-pool version of iter_results."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(worker, task) for task in tasks]
        for future in as_completed(futures):
            yield future.result()
