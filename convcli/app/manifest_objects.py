"""A run's manifest objects on object storage: their names, their puts, and the lines put
as a run goes (:class:`Checkpoints`), for :mod:`convcli.app.manifest`."""

from __future__ import annotations

import math
import os
import threading
import time

from ..io import storage
from ..io.safeio import random_hex, staging_folder

RUN_PREFIX = "convcli-manifest-"
"""On object storage, the start of the name of each run's manifest object."""


def _utc_stamp(now: float | None = None) -> str:
    """`now` (default: the time now) as ``YYYYmmddTHHMMSS.ffffffZ``, in UTC."""
    now = time.time() if now is None else now
    seconds = math.floor(now)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(seconds))
    micro = min(999999, round((now - seconds) * 1e6))
    return f"{stamp}.{micro:06d}Z"


def run_manifest_name(now: float | None = None) -> str:
    """A name for one run's manifest object: the UTC time, then 8 random hex digits.

    Names sort as the times they were made (to the microsecond: the run's
    end), and two runs never share one.

    >>> run_manifest_name(0)[:-15], run_manifest_name(1.5)[:-15]
    ('convcli-manifest-19700101T000000.000000Z', 'convcli-manifest-19700101T000001.500000Z')
    """
    return f"{RUN_PREFIX}{_utc_stamp(now)}-{random_hex(4)}.jsonl"


def url_fragment_name(run_key: str, task_key: str, now: float | None = None) -> str:
    """The name of a Dask task's manifest fragment object on object storage.

    A manifest object's name (:func:`is_manifest_name`), so that readers take
    its lines, with the time it was put: it sorts among the runs' objects.

    >>> url_fragment_name("convcli-run-1f", "3", 0)
    'convcli-manifest-19700101T000000.000000Z-part-convcli-run-1f-3.jsonl'
    """
    return f"{RUN_PREFIX}{_utc_stamp(now)}-part-{run_key}-{task_key}.jsonl"


def put_text(url: str, text: str, storage_options: dict | None = None) -> None:
    """Put the object `url` holding `text`, in one put (whole, or not at all).

    Raises
    ------
    OSError
        It could not be put.
    """
    name = storage.basename(url)
    with staging_folder() as staging:
        local = os.path.join(staging, name)
        with open(local, "w", encoding="utf-8") as f:
            f.write(text)
        storage.upload(local, url, storage_options)


def put_fragment(
    folder: str, name: str, text: str, storage_options: dict | None = None
) -> str | None:
    """Put the lines `text` in the fragment object `name` in the URL `folder`.

    Returns its URL, or None where it could not be put (the main process
    then records the lines as for any result).
    """
    url = storage.join(folder, name)
    try:
        put_text(url, text, storage_options)
    except OSError:
        return None
    return url


class Checkpoints:
    """A run's manifest lines put on object storage as they come, in fragment objects of
    their own, by a thread: a run killed before its end (SIGKILL, a lost machine) leaves
    the lines of the outputs it put.

    Each put takes every line added since the last one began, so there is at most
    one put in flight and a batch of small files costs few puts. The objects are
    manifest objects (:func:`url_fragment_name`) that readers take as they are;
    once the run has put its own object in a folder, :meth:`remove` deletes them
    there (a line read twice is read once: :func:`read_manifest`).
    """

    def __init__(self, storage_options: dict | None = None):
        self.options = storage_options
        self.run_key = f"convcli-run-{random_hex(4)}"
        self.put: list[tuple[str, str]] = []  # (folder, url) of each fragment put
        self._waiting: dict[str, list[str]] = {}  # folder: its lines not put yet
        self._busy = False
        self._stopped = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, folder: str, lines: list[str]) -> None:
        """Put `lines` of the URL `folder` soon (returns at once)."""
        with self._changed:
            self._waiting.setdefault(folder, []).extend(lines)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def _run(self) -> None:
        count = 0
        while True:
            with self._changed:
                self._busy = False
                self._changed.notify_all()
                while not self._stopped and not self._waiting:
                    self._changed.wait()
                if self._stopped:
                    return
                batch, self._waiting = self._waiting, {}
                self._busy = True
            for folder, new in batch.items():
                count += 1
                name = url_fragment_name(self.run_key, str(count))
                try:
                    url = put_fragment(folder, name, "".join(new), self.options)
                except Exception:  # noqa: BLE001 - the run's own object carries the lines
                    url = None
                if url is not None:
                    with self._changed:
                        self.put.append((folder, url))

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every line added is put (or failed to be); whether it is."""
        with self._changed:
            return self._changed.wait_for(
                lambda: self._stopped or not (self._busy or self._waiting), timeout
            )

    def stop(self) -> None:
        """Put no more; wait for a put in flight (bounded by the store's own timeouts)."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join()

    def remove(self, folders: set[str]) -> None:
        """Delete the fragments put in `folders` (where the run's own object is).

        A put that a Ctrl-C left in flight (:meth:`stop` interrupted) is waited
        for a few seconds; one that ends later stays (its lines are read once).
        """
        if self._thread is not None and self._thread.is_alive():
            try:
                self._thread.join(timeout=5)
            except KeyboardInterrupt:
                pass
        with self._changed:
            put = list(self.put)
        for folder, url in put:
            if folder in folders:
                try:
                    storage.remove_object(url, self.options)
                except OSError:
                    pass  # a copy: its lines are read once
