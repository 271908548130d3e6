"""Which run writes a Zarr store on object storage: a claim object inside the store.

Objects cannot be renamed, so a store on object storage is written in place.
While a run writes one, the store holds the object :data:`CLAIM_NAME`, the
run's token; convcli's marker (the group's attributes) is written last, and
the claim then removed. So:

- a store with a claim and no marker is unfinished: convcli's own, never
  taken for a finished output, and written again by the next run, with or
  without ``--overwrite`` (:func:`unfinished`);
- a run checks its claim before each band of rows and before it finishes
  (:func:`check`): one whose claim another run has taken (a later run, while
  the tasks of a client that died still write) stops and leaves the store;
- a run that fails removes the store only while the claim is its own
  (:func:`holder`).
"""

from __future__ import annotations

import errno
import json
import os
import uuid

from . import storage
from .formats import store_attributes_marked

CLAIM_NAME = ".convcli-writing"
"""The object a store on object storage holds while a run writes it."""


class StoreTaken(OSError):
    """Another run claimed the store this run was writing: this one stops and leaves it."""

    def __init__(self, url: str):
        super().__init__(
            errno.EBUSY,
            "another run is writing this Zarr store now; this run stops and leaves it to that one",
            url,
        )

    def __reduce__(self):  # through a process pool or a cluster: the same arguments
        return type(self), (self.filename,)


def claim(url: str, options: dict | None = None) -> str:
    """Claim the store `url` for this run; its token is returned."""
    import socket  # only where a store on object storage is written (3 ms to load)

    token = f"{uuid.uuid4().hex} {socket.gethostname()} {os.getpid()}"
    storage.write_bytes(storage.join(url, CLAIM_NAME), token.encode(), options)
    return token


def holder(url: str, options: dict | None = None, *, timeout: float | None = None) -> str | None:
    """The token of the run that claims the store `url`, or None (finished, or never claimed);
    `timeout` seconds at most, if given (:func:`convcli.io.storage.read_bytes`)."""
    try:
        return storage.read_bytes(storage.join(url, CLAIM_NAME), options, timeout=timeout).decode(
            errors="replace"
        )
    except FileNotFoundError:
        return None


def check(url: str, token: str | None, options: dict | None = None) -> None:
    """Raise :class:`StoreTaken` unless the store `url` is claimed with `token` (None: a store
    on this machine's disk, written in a temporary folder: nothing to check)."""
    if token is not None and holder(url, options) != token:
        raise StoreTaken(url)


def release(url: str, options: dict | None = None) -> None:
    """Remove the claim of the finished store `url`."""
    storage.remove_object(storage.join(url, CLAIM_NAME), options)


def unfinished(url: str, options: dict | None = None) -> bool:
    """Whether the store `url` was claimed by a run and never finished: a claim, no marker.

    Such a store is convcli's own, and is written again whether ``--overwrite``
    is given or not.
    """
    if holder(url, options) is None:
        return False
    try:
        attrs = json.loads(storage.read_bytes(storage.join(url, ".zattrs"), options))
    except (FileNotFoundError, ValueError):
        return True
    return not store_attributes_marked(attrs)
