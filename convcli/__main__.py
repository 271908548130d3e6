"""``python -m convcli`` and the ``convcli`` command: the command line."""

import sys


def main() -> None:
    """Run the command line; a Ctrl-C while it starts ends it quietly (status 130).

    Once a run was stopped (status 130 or 143), further Ctrl-C and SIGTERM
    are ignored while Python exits (it joins Dask's threads, for one).

    The modules load here, inside the guard: the package itself imports
    nothing heavy (see ``convcli/__init__.py``).
    """
    try:
        from .cli import main as command
    except KeyboardInterrupt:
        sys.stderr.write("convcli: interrupted\n")
        sys.exit(130)
    try:
        command()
    except SystemExit as exc:
        if exc.code in (130, 143):  # stopped: another Ctrl-C while Python exits changes nothing
            import signal

            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_IGN)
        raise


if __name__ == "__main__":
    main()
