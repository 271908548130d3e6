"""``python -m convcli`` and the ``convcli`` command: the command line."""

import os
import sys


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
    try:
        from .cli.main import main as command
    except KeyboardInterrupt:
        sys.stderr.write("convcli: interrupted\n")
        sys.exit(130)
    try:
        command()
    except SystemExit as exc:
        if exc.code in (130, 143):  # stopped: another Ctrl-C while Python exits ends it now
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


if __name__ == "__main__":
    main()
