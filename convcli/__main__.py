"""``python -m convcli`` and the ``convcli`` command: the command line."""

import atexit
import os
import sys
import threading

from .startup import pause_collection

STOPPED = (130, 143)
"""The statuses of a run stopped by Ctrl-C or SIGTERM."""


def main() -> None:
    """Run the command line; a Ctrl-C while it starts ends it quietly (status 130).

    Once a run was stopped (status 130 or 143), a further Ctrl-C or SIGTERM
    while Python exits (it joins Dask's threads and zarr's, for one) ends the
    process at once with that status, without a traceback; in the last moments
    of the exit, when Python has put the signals' default actions back, the
    signal itself ends it (a shell shows 130 or 143 all the same).

    The modules load here, inside the guard: the package itself imports
    nothing heavy (see ``convcli/__init__.py``).
    """
    _short_blas_spin()
    pause_collection()  # until the run's work begins (convcli.startup)
    try:
        from .cli.main import main as command
    except KeyboardInterrupt:
        sys.stderr.write("convcli: interrupted\n")
        sys.exit(130)
    try:
        command()
    except SystemExit as exc:
        if exc.code in STOPPED:  # stopped: another Ctrl-C while Python exits ends it now
            import signal

            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda signum, frame, code=exc.code: os._exit(code))
        _leave_to_exit()
        raise


def _short_blas_spin() -> None:
    """Let OpenBLAS's idle threads sleep at once instead of spinning (unless the
    environment says otherwise); read when numpy loads OpenBLAS, so set before.

    Its threads spin for about 0.1 s of CPU after they start and after each
    parallel call: at numpy's import, and again in each batch worker after
    its fork, where on 2 cores they took half of the workers' CPU during their
    first photos. The layers run their matmuls on their own threads (BLAS on
    the calling thread, :mod:`convcli.layers._engine.tiles`), so nothing waits for a
    spinning BLAS thread. 16 photos of 2400x1800 on 2 cores: 0.85 s to 0.79 s,
    and 1.44 s to 1.21 s of CPU.
    """
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")


def _leave_to_exit() -> None:
    """Leave the objects alive now to the process's end: Python's last garbage collection
    at exit skips them (``gc.freeze``), 25 to 40 ms of a batch run's end on a 2-core
    machine. The run has closed its files, and the exit handlers still run."""
    import gc

    gc.freeze()


def command_line() -> None:
    """The ``convcli`` command and ``python -m convcli``: :func:`main`, then the end of the
    process without Python's freeing of every object (:func:`_end_process`)."""
    try:
        main()
    except SystemExit as exc:
        _end_process(exc.code)
        raise


def _end_process(code) -> None:
    """End the process now with status `code`, once what Python's exit does first is done:
    the threads that are not daemons joined, the exit handlers run, the standard streams
    flushed.

    Python would then free every object and module one by one, 10 to 15 ms of every run
    (numpy's, Pillow's, click's ...) that no one needs: the run has closed its files.
    Returns, leaving the exit to Python, for a status that is not a number, for a stopped
    run (:data:`STOPPED`, see :func:`main`), where a stream cannot be flushed, and where this
    Python lacks the two steps.
    """
    code = 0 if code is None else code
    join_threads = getattr(threading, "_shutdown", None)
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if not isinstance(code, int) or code in STOPPED or not (join_threads and run_exit_handlers):
        return
    if not _flushed():
        return
    join_threads()
    run_exit_handlers()
    os._exit(code if _flushed() else 120)  # 120: Python's own status for a failed flush


def _flushed() -> bool:
    """Whether the standard streams (and the ones they replace) were flushed."""
    try:
        for stream in {sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__}:
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return False
    return True


if __name__ == "__main__":
    command_line()
