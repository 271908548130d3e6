"""The errors convcli raises for its callers to report (no numpy, no click).

Each message is one line for the user. The command line turns
:class:`OptionError` and :class:`MissingExtra` into usage errors (exit
status 2); a script calling :func:`convcli.app.run.run_batch` catches them.
Any other exception from inside convcli, a ``TypeError`` above all, is a bug:
an "internal error" line (its traceback with ``--debug``).
"""

from __future__ import annotations


class OptionError(ValueError):
    """Options that cannot work together, or a value out of range.

    Parameters
    ----------
    message : str
        One line saying what is wrong.
    option : str or None
        The option to blame as the command line spells it (``"--stride"``,
        ``"-o"``, ``"INPUT"``); None for options that conflict as a whole.
    """

    def __init__(self, message: str, option: str | None):
        super().__init__(message)
        self.option = option


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the extra to install.

    Parameters
    ----------
    need : str
        What needs it (``"--scheduler needs Dask distributed"``).
    extra : str or None
        The extra that installs it; None where no extra does (an unknown
        protocol), and `need` says why.

    >>> str(MissingExtra("--scheduler needs Dask distributed", "dask"))
    "--scheduler needs Dask distributed: pip install 'convcli[dask]'"
    """

    def __init__(self, need: str, extra: str | None):
        super().__init__(f"{need}: pip install 'convcli[{extra}]'" if extra else need)
        self.extra = extra


class ImageError(ValueError):
    """A file that cannot be used as an image; the message is one line for the user."""


class PixelLimitError(ImageError):
    """An image whose header claims more pixels than the limit; nothing was decoded."""
