"""The ``convcli`` command line (click only; the work is done by :mod:`convcli.app`).

Errors are one line on stderr: ``convcli: <file>: <reason>`` for a file that
cannot be processed (the run goes on, exit status 1 at the end), and
``convcli: <reason>`` naming the option for a usage error (exit status 2).

Only click and numpy-free modules are imported here; numpy, Pillow and the
rest load when a command runs, so that ``--help`` and ``--version`` start as
fast as click itself.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from .runner import CONTEXT_SETTINGS
from .terminal import say

# click >= 8.2 raises this for a group called without a command (it prints the help).
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class _Group(click.Group):
    """A group whose errors are one line on stderr, never a traceback or usage block."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        from ..io.storage import remember_secrets

        remember_secrets(sys.argv[1:] if args is None else args)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _NO_ARGS_IS_HELP as exc:
            click.echo(exc.format_message(), err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            message = " ".join(exc.format_message().split())
            if isinstance(exc, click.UsageError) and exc.ctx is not None:
                message += f" (see '{exc.ctx.command_path} --help')"
            say(message)
            sys.exit(exc.exit_code)
        except click.Abort:
            say("interrupted")
            _end_zarr_requests()
            sys.exit(130)
        except _stream_error() as exc:  # standard output closed or full
            say(str(exc))
            sys.exit(1)
        if code:  # stopped (Ctrl-C, SIGTERM) or failed: what zarr still reads or writes ends
            _end_zarr_requests()
        sys.exit(code if isinstance(code, int) else 0)


def _end_zarr_requests() -> None:
    """Cancel what still runs in zarr's event loop, where zarr was used: a run stopped while
    it read or wrote a store leaves requests there, and zarr's own clean-up at exit then
    printed a traceback ("Cannot close a running event loop")."""
    if "zarr.core.sync" in sys.modules:
        from ..io.storage import CANCEL_SECONDS
        from ..io.zarr_stores import cancel_zarr_requests

        cancel_zarr_requests(CANCEL_SECONDS)


def _stream_error() -> type[Exception]:
    """:class:`convcli.app.stdio.StreamError`, imported only when an error is being handled."""
    from ..app.stdio import StreamError

    return StreamError


def _print_version(ctx, param, value):
    if not value or ctx.resilient_parsing:
        return
    from .._version import __version__
    from ..layers._engine import which as native

    click.echo(f"convcli, version {__version__}\nengine: {native.description()}")
    ctx.exit()


@click.group(cls=_Group, context_settings=CONTEXT_SETTINGS)
@click.option(
    "-V",
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
def main():
    """Convolution and pooling on image files: pad, conv, pool, the kernel list; grad, fit
    and explain.

    \b
    Examples:
      convcli conv --kernel vertical sample_images
      convcli pool --mode average --size 4 photo.jpg -o small
      convcli kernels sobel-x
      convcli explain conv -k sobel-x --as opencv > sobel.py
    """
    if os.environ.get("CONVCLI_ENGINE"):
        from ..layers._engine import which as native

        problem = native.setting_problem()
        if problem:
            raise click.UsageError(problem)


def _add_commands() -> None:
    """Add each command of this package to :func:`main`: the ``COMMAND`` of every module that
    has one, a module a command, so that a new command is a new module."""
    folder = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(folder)):
        stem, extension = os.path.splitext(name)
        if extension == ".py" and stem not in ("__init__", "__main__", "main"):
            module = importlib.import_module(f"{__package__}.{stem}")
            command = getattr(module, "COMMAND", None)
            if command is not None:
                main.add_command(command)


_add_commands()


if __name__ == "__main__":
    main()
