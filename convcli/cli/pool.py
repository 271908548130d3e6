"""``convcli pool``."""

from __future__ import annotations

import click

from .options import SEPARATE_OPTION, common_options, pool_options
from .runner import pool_op, run_command


@click.command("pool")
@pool_options
@SEPARATE_OPTION
@common_options
def pool_cmd(mode, size, stride, pad, ceil, inputs, **common):
    """Pool images: max or average over F x F windows, channel by channel (pool_forward).

    Writes the pooled image in the input's format (a JPEG stays a JPEG);
    --separate adds each channel as a grey image. Colour under transparent
    pixels never shows: it is weighted by alpha, which is pooled as well.

    \b
    Examples:
      convcli pool photo.jpg
      convcli pool --mode average --size 5 --stride 3 sample_images
    """
    run_command(pool_op(mode, size, stride, pad, ceil), inputs, **common)


COMMAND = pool_cmd
"""What ``convcli`` adds of this module (:func:`convcli.cli.main.main`)."""
