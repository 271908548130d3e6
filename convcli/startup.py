"""The command line's start-up, without Python's cyclic garbage collector.

While the command line loads its modules (numpy, Pillow, click, convcli's own)
and plans its run, nearly every object it makes lives to the end, so the
collections that the allocations trigger find nothing to free: about 90 of
them, 20 ms of a batch's start on a 2-core machine. :func:`pause_collection`
(called by :func:`convcli.__main__.main`) turns the collector off; a run
(:func:`convcli.app.run.run_batch`, a dry run too) and ``fit`` turn it back on
once the modules are loaded (:func:`startup_over`), after moving what start-up
made out of the collector's sight (``gc.freeze``), where worker processes
forked later also leave it. The commands that never call :func:`startup_over`
(``kernels``, ``explain``) end without a collection, as a short program does.
Used as a library, convcli leaves the collector alone.
"""

from __future__ import annotations

import gc

_paused = False


def pause_collection() -> None:
    """Turn the cyclic garbage collector off until :func:`startup_over`."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def startup_over() -> None:
    """Turn the collector back on, if :func:`pause_collection` turned it off.

    What start-up made is frozen first (``gc.freeze``): collections from here
    on look only at what the work makes.
    """
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
