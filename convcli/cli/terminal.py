"""What the command line says on stderr: one-line messages, and the run's reporter
with its progress bar."""

from __future__ import annotations

import sys
import time

import click

from ..app.report import Reporter


def say(message: str) -> None:
    from ..io.storage import for_terminal

    click.echo(f"convcli: {for_terminal(message)}", err=True)


class TerminalReport(Reporter):
    """The run's reporter on a terminal: a progress bar on stderr while files are processed.

    The bar is shown when stderr is a terminal, unless quiet or verbose, once
    the number of files is known (from a count in the background when the
    inputs are planned a folder at a time), and if there is more than one.
    """

    def __init__(self, *, quiet: bool, verbose: bool, debug: bool):
        super().__init__(quiet=quiet, verbose=verbose, debug=debug)
        self.bar = None
        self.done = 0
        self.total: int | None = None
        self._count = None
        self.start = time.monotonic()

    def wants_total(self) -> bool:
        return not self.quiet and not self.verbose and sys.stderr.isatty()

    def begin(self, total, count=None) -> None:
        self.total, self._count = total, count
        self._start_bar()

    def _start_bar(self) -> None:
        """Show the progress bar once the total is known, if there is more than one file."""
        if self.total is None and self._count is not None:
            self.total = self._count()
        if not self.wants_total() or self.total is None or self.total <= 1:
            return
        self.bar = click.progressbar(
            length=self.total,
            label="convcli",
            file=sys.stderr,
            show_pos=True,
            show_eta=True,
            item_show_func=self._rate,
        )
        self.bar.__enter__()
        self.bar.update(self.done)

    def _rate(self, _item) -> str:
        elapsed = time.monotonic() - self.start
        return f"{self.done / elapsed:.1f} files/s" if self.done and elapsed > 0 else ""

    def add(self, result, source: str) -> None:
        self.done += 1
        super().add(result, source)
        if self.bar is not None:
            self.bar.update(1)
        elif self.total is None:
            self._start_bar()

    def say(self, line: str) -> None:
        if self.bar is not None:  # start the message on a line of its own
            click.echo("\r\x1b[K", nl=False, err=True)
        say(line)

    def end(self, line: str, *, interrupted: bool = False) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None
        super().end(line, interrupted=interrupted)
