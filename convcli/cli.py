"""The ``convcli`` command line (click only; the work is done by the library)."""

from __future__ import annotations

import click

from . import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="convcli")
def main():
    """Convolution and pooling on image files."""


if __name__ == "__main__":
    main()
