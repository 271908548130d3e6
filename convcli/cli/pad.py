"""``convcli pad``."""

from __future__ import annotations

import click

from .options import SEPARATE_OPTION, common_options, pad_options
from .runner import operation, run_command


@click.command("pad")
@pad_options
@SEPARATE_OPTION
@common_options
def pad_cmd(pad, value, mode, inputs, **common):
    """Pad images: add a border of N pixels to every channel (pad_images).

    Writes the padded image in the input's format (a JPEG stays a JPEG);
    --separate adds each channel as a grey image. Alpha is padded with the
    same mode (opaque in constant mode).

    \b
    Examples:
      convcli pad photo.jpg --pad 30 --value 50
      convcli pad --mode reflect --pad 8 -o padded sample_images
    """
    run_command(operation("PadOp", pad=pad, value=value, mode=mode.lower()), inputs, **common)


COMMAND = pad_cmd
"""What ``convcli`` adds of this module (:func:`convcli.cli.main.main`)."""
