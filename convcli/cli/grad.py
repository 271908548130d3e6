"""``convcli grad pool`` and ``convcli grad conv``: the backward passes as pictures."""

from __future__ import annotations

import click

from ..choices import LOSSES, NORMALIZE_CHOICES
from .options import common_options, conv_options, pool_options
from .runner import CONTEXT_SETTINGS, conv_op, operation, pool_op, run_command


@click.group("grad", context_settings=CONTEXT_SETTINGS)
def grad_cmd():
    """The backward passes as pictures: dA_prev of pool or conv (pool_backward, conv_backward).

    \b
    Examples:
      convcli grad pool --mode max --size 2 photo.png
      convcli grad conv -k vertical --loss energy --figure photo.png
    """


_GRAD_NORMALIZE = [m for m in NORMALIZE_CHOICES if m != "auto"]


def _normalize(default: str, help_text: str):
    """A gradient's ``--normalize``: the mappings but ``auto``, `default` the one it takes."""
    return click.option(
        "--normalize",
        type=click.Choice(_GRAD_NORMALIZE, case_sensitive=False),
        default=default,
        show_default=True,
        help=help_text,
    )


@grad_cmd.command("pool")
@pool_options
@_normalize("robust", "Values to image levels (robust: the 99.5th percentile white).")
@common_options
def grad_pool_cmd(mode, size, stride, pad, ceil, normalize, inputs, **common):
    """Where pooling sends its gradient (pool_backward's dA_prev for ones).

    max: 1 at each window's first maximum, 0 elsewhere (the routing map);
    average: the windows covering each pixel, over F x F. Every channel on its own.

    \b
    Examples:
      convcli grad pool photo.png
      convcli grad pool --mode average --size 3 --stride 2 --format npy photo.png
    """
    op = operation(
        "GradPoolOp", pool_op(mode, size, stride, pad, ceil), normalize=normalize.lower()
    )
    run_command(op, inputs, **common)


@grad_cmd.command("conv")
@conv_options
@click.option(
    "--loss",
    type=click.Choice(LOSSES, case_sensitive=False),
    default="energy",
    show_default=True,
    help="energy: L = sum(Z^2)/2, the pixels that most change the strong responses; "
    "sum: L = sum(Z), each pixel's weight in all responses (zero inside the "
    "image for a zero-sum kernel).",
)
@_normalize("offset", "Values to image levels (offset: zero mid-grey).")
@common_options
def grad_conv_cmd(
    kernels,
    stride,
    pad,
    bias,
    channels,
    border,
    combine,
    dilation,
    loss,
    normalize,
    inputs,
    **common,
):
    """Which pixels would most change the response (conv_backward's dA_prev).

    Writes dA_prev of L = sum(Z) or sum(Z^2)/2 per kernel, and prints dW, the
    gradient with respect to the kernel, as a grid (not with -q).

    \b
    Examples:
      convcli grad conv -k vertical photo.png
      convcli grad conv -k edge --loss energy --figure photo.png
    """
    # The layer with its default mapping; the gradient's levels follow --normalize.
    conv = conv_op(kernels, stride, pad, bias, channels, border, combine, "auto", dilation)
    op = operation("GradConvOp", conv, loss=loss.lower(), normalize=normalize.lower())
    run_command(op, inputs, **common)


COMMAND = grad_cmd
"""What ``convcli`` adds of this module (:func:`convcli.cli.main.main`)."""
