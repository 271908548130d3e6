"""Ctrl-C and SIGTERM during a batch run (:func:`convcli.app.run.run_batch`): counted, and
raised where the file is processed in this thread.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import ExitStack

from ..engines.processes import working_here
from ..io.safeio import publishing_checked

RAISE_AGAIN_SECONDS = 0.001
"""How soon a stop that a finalizer swallowed is raised again (:class:`StopRequests`)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C so that the run stops cleanly.

    A KeyboardInterrupt, so that the per-file guard
    (:func:`convcli.engines.processes.run_guarded`) does not take it for a file's error,
    and a file processed in this thread reports the outputs it wrote.
    """


class StopRequests:
    """Counts Ctrl-C and kill during a run.

    Where the work runs in this thread (`raise_first`), the first request
    raises (KeyboardInterrupt or Terminated) to abandon the file at once.
    Otherwise the handler only counts, and the engine polls the count:
    nothing is raised in the middle of the bookkeeping. Handlers are only
    installed from the main thread (elsewhere Python refuses them).
    """

    def __init__(self):
        self.signals: list[int] = []
        self.raise_first = False
        self.owed = False  # a raise that a finalizer swallowed, to raise again
        self.in_hook = False
        self._unraisable = sys.unraisablehook
        self._installed = False

    def __call__(self) -> int:
        return len(self.signals)

    def handle(self, signum, frame):
        self.signals.append(signum)
        # Only inside the file being processed: in the bookkeeping the loop sees the count.
        if self.raise_first and len(self.signals) == 1 and working_here():
            raise KeyboardInterrupt if signum == signal.SIGINT else Terminated

    def unraisable(self, unraisable) -> None:
        """``sys.unraisablehook`` during the run: the stop raised where Python cannot
        raise (in a ``__del__``, a weakref callback) is not printed ("Exception
        ignored") but raised again a millisecond later (SIGALRM: :meth:`raise_owed`),
        in the file's own code; before its outputs are put in place in any case."""
        if not (isinstance(unraisable.exc_value, KeyboardInterrupt) and self.signals):
            self._unraisable(unraisable)
            return
        self.in_hook = True
        try:
            if self.raise_first and working_here() and hasattr(signal, "setitimer"):
                self.owed = True
                signal.setitimer(signal.ITIMER_REAL, RAISE_AGAIN_SECONDS)
        finally:
            self.in_hook = False

    def raise_owed(self, signum, frame):
        """SIGALRM: raise the stop that a finalizer swallowed, in the file being processed."""
        if not (self.owed and self.raise_first and working_here()):
            return
        if self.in_hook:  # not inside the hook itself: later
            signal.setitimer(signal.ITIMER_REAL, RAISE_AGAIN_SECONDS)
            return
        self.owed = False
        raise KeyboardInterrupt if self.signals[0] == signal.SIGINT else Terminated

    def installed(self) -> ExitStack:
        """A context in which SIGINT and SIGTERM are counted here; the handlers are restored.

        Within another such context it does nothing: the outer one restores what was there
        (the previous ``sys.unraisablehook``, not this object's own)."""
        stack = ExitStack()
        if self._installed:
            return stack
        if threading.current_thread() is threading.main_thread():
            self._installed = True
            stack.callback(setattr, self, "_installed", False)
            for sig in (signal.SIGINT, signal.SIGTERM):
                stack.callback(signal.signal, sig, signal.signal(sig, self.handle))
            if hasattr(signal, "SIGALRM"):
                stack.callback(
                    signal.signal, signal.SIGALRM, signal.signal(signal.SIGALRM, self.raise_owed)
                )
                stack.callback(signal.setitimer, signal.ITIMER_REAL, 0)
            self._unraisable = sys.unraisablehook
            sys.unraisablehook = self.unraisable
            stack.callback(setattr, sys, "unraisablehook", self._unraisable)
            stack.enter_context(publishing_checked(self.check_publish))
        return stack

    def check_publish(self) -> None:
        """Raise the stop before a file processed here is put in place, if one was asked
        for: an output never appears after the run was told to stop at once."""
        if self.signals and self.raise_first and working_here():
            raise KeyboardInterrupt if self.signals[0] == signal.SIGINT else Terminated

    @property
    def status(self) -> int | None:
        if not self.signals:
            return None
        return 130 if self.signals[0] == signal.SIGINT else 143
