"""``python -m convcli`` and the ``convcli`` command: the command line."""

import sys


def main() -> None:
    """Run the command line; a Ctrl-C while it starts ends it quietly (status 130).

    The modules load here, inside the guard: the package itself imports
    nothing heavy (see ``convcli/__init__.py``).
    """
    try:
        from .cli import main as command
    except KeyboardInterrupt:
        sys.stderr.write("convcli: interrupted\n")
        sys.exit(130)
    command()


if __name__ == "__main__":
    main()
