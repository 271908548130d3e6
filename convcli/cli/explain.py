"""``convcli explain``: an operation as other tools' code."""

from __future__ import annotations

import click

from ..errors import OptionError
from .options import conv_options, normalize_option, pad_options, pool_options, target_option
from .runner import CONTEXT_SETTINGS, conv_op, operation, pool_op, usage_error


@click.group("explain", context_settings=CONTEXT_SETTINGS)
def explain_cmd():
    """Print an operation as scipy, OpenCV, PyTorch, scikit-image or ImageMagick code.

    With --as, a runnable script (IMAGE in, OUT.npy out, the values of
    --format npy) or ImageMagick's command line; without, the conventions side
    by side.

    \b
    Examples:
      convcli explain conv -k sobel-x --border constant --as opencv > sobel.py
      python sobel.py photo.png sobel.npy
      convcli explain pool --size 3 --stride 2
    """


def _explain(op, target) -> None:
    from ..app.explain import conventions, explain
    from ..app.stdio import write_text

    try:
        text = explain(op, target.lower()) if target else conventions(op)
    except OptionError as exc:  # an option the script cannot hold
        raise usage_error(exc) from None
    write_text(text)


@explain_cmd.command("conv")
@conv_options
@normalize_option
@target_option
def explain_conv_cmd(
    kernels, stride, pad, bias, channels, border, combine, dilation, normalize, target
):
    """Explain conv with these options (the values of --format npy; --normalize is ignored)."""
    _explain(
        conv_op(kernels, stride, pad, bias, channels, border, combine, normalize, dilation), target
    )


@explain_cmd.command("pool")
@pool_options
@target_option
def explain_pool_cmd(mode, size, stride, pad, ceil, target):
    """Explain pool with these options."""
    _explain(pool_op(mode, size, stride, pad, ceil), target)


@explain_cmd.command("pad")
@pad_options
@target_option
def explain_pad_cmd(pad, value, mode, target):
    """Explain pad with these options."""
    _explain(operation("PadOp", pad=pad, value=value, mode=mode.lower()), target)


COMMAND = explain_cmd
"""What ``convcli`` adds of this module (:func:`convcli.cli.main.main`)."""
