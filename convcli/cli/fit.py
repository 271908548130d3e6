"""``convcli fit``: a kernel learned from a picture before and after."""

from __future__ import annotations

import os
import sys

import click

from ..errors import OptionError
from .options import fit_options
from .runner import usage_error
from .terminal import say


@click.command("fit")
@fit_options
def fit_cmd(
    before,
    after,
    size,
    channels,
    pad,
    border,
    stride,
    dilation,
    steps,
    out,
    figure,
    overwrite,
    max_pixels,
    quiet,
):
    """Learn the F x F kernel and bias that turn BEFORE into AFTER (by conv_backward).

    AFTER is an image, or a .npy of raw values as 'conv --format npy' writes
    it. Writes a kernel file that 'conv -k FILE' reads, and says how well it
    fits and which named kernel it is closest to.

    \b
    Examples:
      convcli conv -k sobel-x --format npy -o edges.npy photo.png
      convcli fit photo.png edges.npy -o learned.toml --figure
    """
    from ..app.fit import FitRun

    _check_kernel_file_name(out)
    run = FitRun(
        before,
        after,
        size=size,
        channels=channels.lower(),
        pad=pad,
        border=border.lower(),
        stride=stride,
        dilation=dilation,
        steps=steps,
        out=out or "",  # None: the default name
        figure=figure,
        overwrite=overwrite,
        max_pixels=max_pixels,
    )
    try:
        run.conv_op()  # options that cannot work together are usage errors, as in conv
    except OptionError as exc:
        raise usage_error(exc) from None
    _fit(run, quiet=quiet)


def _fit(run, *, quiet: bool) -> None:
    """Run the fit, its progress on one line of stderr where that is a terminal (not with
    `quiet`); then what it found and the files written, or its error (exit status 1)."""
    from ..app.fit import FitError, run_fit

    live = not quiet and sys.stderr.isatty()

    def progress(step, error):
        if live:
            click.echo(
                f"\rconvcli: step {step}: relative error {error:.3e}\x1b[K", nl=False, err=True
            )

    try:
        lines, written = run_fit(run, progress=progress)
    except FitError as exc:
        if live:
            click.echo("\r\x1b[K", nl=False, err=True)
        say(str(exc))
        sys.exit(1)
    if live:
        click.echo("\r\x1b[K", nl=False, err=True)
    if not quiet:
        for line in lines:
            say(line)
        say(f"wrote {', '.join(written)}")


COMMAND = fit_cmd
"""What ``convcli`` adds of this module (:func:`convcli.cli.main.main`)."""


def _check_kernel_file_name(out: str | None) -> None:
    """A usage error naming -o where it is a folder (or named as one: ``k.toml/``), or named
    as an image (also one convcli reads only: .bmp, .gif), under which TOML text would be
    written."""
    from ..app.names import file_format
    from ..io.images import is_image_name

    if out and (os.path.isdir(out) or out.endswith(("/", os.sep))):
        raise click.BadParameter(
            f"{out!r} is a folder: -o names the kernel file", param_hint="'-o'"
        )
    suffix = os.path.splitext(out)[1][1:].lower() if out else ""
    image = out and (file_format(out) or (is_image_name(out) and suffix))
    if image:
        raise click.BadParameter(
            f"{out!r} names a {image} file: -o names the kernel file, TOML text (learned.toml)",
            param_hint="'-o'",
        )
