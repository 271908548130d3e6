"""``convcli conv``."""

from __future__ import annotations

import click

from .options import common_options, conv_options, normalize_option
from .runner import conv_op, run_command


@click.command("conv")
@conv_options
@normalize_option
@common_options
def conv_cmd(
    kernels, stride, pad, bias, channels, border, combine, normalize, dilation, inputs, **common
):
    """Convolve images with named kernels (conv_forward; cross-correlation, no flip).

    Alpha weighs the colours: blurs by channel keep it (RGBA out), edge maps
    see the image over black. Each output channel is written as a grey image,
    or all of them as one .npy with --format npy.

    \b
    Examples:
      convcli conv --kernel vertical sample_images
      convcli conv -k sobel-x -k sobel-x:90 --channels each photo.png
      convcli conv -k edge --format npy --figure photo.png
    """
    op = conv_op(kernels, stride, pad, bias, channels, border, combine, normalize, dilation)
    run_command(op, inputs, **common)


COMMAND = conv_cmd
"""What ``convcli`` adds of this module (:func:`convcli.cli.main.main`)."""
