"""What a run says to its user: a line per file, notes, errors (:class:`Reporter`).

Light to import (no numpy, no Pillow), so that the command line's own
reporter can be made before the run's modules load.
"""

from __future__ import annotations

import sys

from ..errors import OptionError
from ..io.storage import for_terminal


class Reporter:
    """What a run tells its user: one line each on the standard error.

    Errors are always said; notes and the summary unless `quiet`; a line per
    file with `verbose`; an unexpected error's traceback with `debug`. The
    command line's reporter adds a progress bar.
    """

    def __init__(self, *, quiet: bool = False, verbose: bool = False, debug: bool = False):
        if quiet and verbose:
            raise OptionError(
                "-q (errors only) and -v (a line per file) cannot be used together", None
            )
        self.quiet, self.verbose, self.debug = quiet, verbose, debug
        self.causes_said: set[str] = set()  # the store's failures said (FileResult.fatal)

    def say(self, line: str) -> None:
        """One line for the user, always (:func:`convcli.io.storage.for_terminal`: its secrets
        hidden, control characters escaped)."""
        print(f"convcli: {for_terminal(line)}", file=sys.stderr, flush=True)

    def say_lines(self, text: str) -> None:
        """convcli's own text of several lines (a dW grid, a traceback): the first as
        :meth:`say`, the others as they are, each escaped alone.

        A file name in `text` must be escaped already (``for_terminal``): its
        newlines would otherwise start lines of their own.
        """
        first, *more = text.split("\n")
        self.say(first)
        for line in more:
            print(for_terminal(line), file=sys.stderr, flush=True)

    def note(self, line: str) -> None:
        """A line that `quiet` leaves out."""
        if not self.quiet:
            self.say(line)

    def wants_total(self) -> bool:
        """Whether :meth:`begin` should be given a count of the files while the run goes on."""
        return False

    def begin(self, total: int | None, count=None) -> None:
        """The run starts: `total` files, or `count()` gives their number once known."""

    def add(self, result, source: str) -> None:
        """One file's result (a :class:`convcli.engines.processes.FileResult`); `source`
        as shown."""
        if result.status == "failed":
            if result.fatal:  # the store failed: said once, for the first file it failed
                if result.fatal not in self.causes_said:
                    self.causes_said.add(result.fatal)
                    self.say(f"{source}: {result.message}; the run stops")
                return
            self.say(f"{source}: {result.message}")
            if self.debug and result.detail:
                self.say_lines(result.detail.rstrip())
        elif self.verbose:
            said = "; ".join(part for part in (result.message, result.kept) if part)
            note = f" ({said})" if said else ""
            self.say_lines(
                f"{for_terminal(source)}: {result.status}, {len(result.outputs)} written{note}"
            )
        elif result.message and not self.quiet and result.status != "skipped":
            self.say_lines(f"{for_terminal(source)}: {result.message}")

    def end(self, line: str, *, interrupted: bool = False) -> None:
        """The summary line (said even when `quiet` if the run was interrupted)."""
        if interrupted:
            self.say(line)
        else:
            self.note(line)
