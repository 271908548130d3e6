"""The parts of the pipeline only some files need, loaded when a file needs them.

A folder of photos needs neither the frame stacks nor the strips, nor the
cluster's bands, nor the dry run: loading them all made every run's start
about a tenth of a second longer. :func:`part` imports one on first use.
"""

from __future__ import annotations

import importlib

_PARTS = {
    "stacks": "convcli.app.stacks",  # a file's frames, whole or in groups
    "strips": "convcli.app.streamed",  # an image larger than the memory budget
    "cluster bands": "convcli.app.streamed_cluster",  # its strips as a cluster's tasks
    "dry run": "convcli.app.dryrun",  # --dry-run
}


def part(name: str):
    """The module of the pipeline's part `name` (a key of :data:`_PARTS`), imported once.

    >>> part("stacks").__name__
    'convcli.app.stacks'
    """
    return importlib.import_module(_PARTS[name])
