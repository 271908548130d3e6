"""The command line: the ``convcli`` group and its commands (click)."""

from .main import main

__all__ = ["main"]
