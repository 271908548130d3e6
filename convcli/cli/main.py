"""The ``convcli`` command line (click only; the work is done by :mod:`convcli.app`).

Errors are one line on stderr: ``convcli: <file>: <reason>`` for a file that
cannot be processed (the run goes on, exit status 1 at the end), and
``convcli: <reason>`` naming the option for a usage error (exit status 2).

Only click and numpy-free modules are imported here; numpy, Pillow and the
rest load when a command runs, so that ``--help`` and ``--version`` start as
fast as click itself.
"""

from __future__ import annotations

import os
import sys

import click

from ..choices import LOSSES, NORMALIZE_CHOICES
from ..errors import MissingExtra, OptionError
from .options import (
    SEPARATE_OPTION,
    common_options,
    conv_options,
    fit_options,
    normalize_option,
    pad_options,
    pool_options,
    target_option,
)
from .terminal import TerminalReport, say

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
# click >= 8.2 raises this for a group called without a command (it prints the help).
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class _Group(click.Group):
    """A group whose errors are one line on stderr, never a traceback or usage block."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        from ..io.storage import remember_secrets

        remember_secrets(sys.argv[1:] if args is None else args)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _NO_ARGS_IS_HELP as exc:
            click.echo(exc.format_message(), err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            message = " ".join(exc.format_message().split())
            if isinstance(exc, click.UsageError) and exc.ctx is not None:
                message += f" (see '{exc.ctx.command_path} --help')"
            say(message)
            sys.exit(exc.exit_code)
        except click.Abort:
            say("interrupted")
            sys.exit(130)
        except _stream_error() as exc:  # standard output closed or full
            say(str(exc))
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def _stream_error() -> type[Exception]:
    """:class:`convcli.app.stdio.StreamError`, imported only when an error is being handled."""
    from ..app.stdio import StreamError

    return StreamError


def _print_version(ctx, param, value):
    if not value or ctx.resilient_parsing:
        return
    from .._version import __version__
    from ..layers._engine import which as native

    click.echo(f"convcli, version {__version__}\nengine: {native.description()}")
    ctx.exit()


@click.group(cls=_Group, context_settings=CONTEXT_SETTINGS)
@click.option(
    "-V",
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
def main():
    """Convolution and pooling on image files: pad, conv, pool, the kernel list; grad, fit
    and explain.

    \b
    Examples:
      convcli conv --kernel vertical sample_images
      convcli pool --mode average --size 4 photo.jpg -o small
      convcli kernels sobel-x
      convcli explain conv -k sobel-x --as opencv > sobel.py
    """
    if os.environ.get("CONVCLI_ENGINE"):
        from ..layers._engine import which as native

        problem = native.setting_problem()
        if problem:
            raise click.UsageError(problem)


# --- usage errors --------------------------------------------------------------------------------


def _usage_error(exc: Exception) -> click.ClickException:
    """click's usage error for an OptionError (naming its option) or a MissingExtra."""
    option = getattr(exc, "option", None)
    if option is None:
        return click.UsageError(str(exc))
    return click.BadParameter(str(exc), param_hint=f"'{option}'" if option[0] == "-" else option)


def _operation(kind: str, *args, **options):
    """The operation ``convcli.app.ops.<kind>``; a usage error names the option that cannot work."""
    from ..app import ops

    try:
        return getattr(ops, kind)(*args, **options)
    except OptionError as exc:
        raise _usage_error(exc) from None


def _run(
    op,
    inputs,
    *,
    out_dir,
    fmt,
    figure,
    recursive,
    quiet,
    overwrite,
    max_pixels,
    frames,
    memory,
    jobs,
    verbose,
    fail_fast,
    debug,
    engine,
    scheduler,
    scheduler_file,
    files_per_task,
    storage_options,
    dry_run,
    separate=False,
) -> None:
    """Run the batch (:func:`convcli.app.run.run_batch`) and exit with its status."""
    from ..app.run import RunOptions, run_batch

    source = click.get_current_context().get_parameter_source("fmt")
    options = RunOptions(
        out_dir=out_dir,
        fmt=None if source is None or source.name == "DEFAULT" else fmt,
        figure=figure,
        separate=separate,
        recursive=recursive,
        overwrite=overwrite,
        max_pixels=max_pixels,
        fail_fast=fail_fast,
        engine=engine.lower() if engine else None,
        jobs=jobs,
        scheduler=scheduler,
        scheduler_file=scheduler_file,
        files_per_task=files_per_task,
        storage_options=storage_options,
        memory=memory,
        dry_run=dry_run,
        frames=frames,
    )
    try:
        report = TerminalReport(quiet=quiet, verbose=verbose, debug=debug)
        status = run_batch(op, inputs, options, report)
    except (OptionError, MissingExtra) as exc:
        raise _usage_error(exc) from None
    if status:
        click.get_current_context().exit(status)


# --- commands --------------------------------------------------------------------------------


@main.command("pad")
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
    _run(_operation("PadOp", pad=pad, value=value, mode=mode.lower()), inputs, **common)


def _conv_op(kernels, stride, pad, bias, channels, border, combine, normalize, dilation=1):
    return _operation(
        "ConvOp",
        kernels,
        stride=stride,
        pad=pad,
        bias=bias,
        channels=channels.lower(),
        normalize=normalize.lower(),
        border=border.lower(),
        combine=combine.lower() if combine else None,
        dilation=dilation,
    )


@main.command("conv")
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
    op = _conv_op(kernels, stride, pad, bias, channels, border, combine, normalize, dilation)
    _run(op, inputs, **common)


def _pool_op(mode, size, stride, pad, ceil):
    return _operation("PoolOp", mode=mode.lower(), size=size, stride=stride, pad=pad, ceil=ceil)


@main.command("pool")
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
    _run(_pool_op(mode, size, stride, pad, ceil), inputs, **common)


@main.command("fit")
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

    if out and os.path.isdir(out):
        raise click.BadParameter(
            f"{out!r} is a folder: -o names the kernel file", param_hint="'-o'"
        )
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
        out=out,
        figure=figure,
        overwrite=overwrite,
        max_pixels=max_pixels,
    )
    try:
        run.conv_op()  # options that cannot work together are usage errors, as in conv
    except OptionError as exc:
        raise _usage_error(exc) from None
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


@main.group("grad", context_settings=CONTEXT_SETTINGS)
def grad_cmd():
    """The backward passes as pictures: dA_prev of pool or conv (pool_backward, conv_backward).

    \b
    Examples:
      convcli grad pool --mode max --size 2 photo.png
      convcli grad conv -k vertical --loss energy --figure photo.png
    """


_GRAD_NORMALIZE = [m for m in NORMALIZE_CHOICES if m != "auto"]


@grad_cmd.command("pool")
@pool_options
@click.option(
    "--normalize",
    type=click.Choice(_GRAD_NORMALIZE, case_sensitive=False),
    default="robust",
    show_default=True,
    help="Values to image levels (robust: the 99.5th percentile white).",
)
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
    op = _operation(
        "GradPoolOp", _pool_op(mode, size, stride, pad, ceil), normalize=normalize.lower()
    )
    _run(op, inputs, **common)


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
@click.option(
    "--normalize",
    type=click.Choice(_GRAD_NORMALIZE, case_sensitive=False),
    default="offset",
    show_default=True,
    help="Values to image levels (offset: zero mid-grey).",
)
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
    conv = _conv_op(kernels, stride, pad, bias, channels, border, combine, "auto", dilation)
    op = _operation("GradConvOp", conv, loss=loss.lower(), normalize=normalize.lower())
    _run(op, inputs, **common)


# --- explain ---------------------------------------------------------------------------------


@main.group("explain", context_settings=CONTEXT_SETTINGS)
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

    write_text(explain(op, target.lower()) if target else conventions(op))


@explain_cmd.command("conv")
@conv_options
@normalize_option
@target_option
def explain_conv_cmd(
    kernels, stride, pad, bias, channels, border, combine, dilation, normalize, target
):
    """Explain conv with these options (the values of --format npy; --normalize is ignored)."""
    _explain(
        _conv_op(kernels, stride, pad, bias, channels, border, combine, normalize, dilation), target
    )


@explain_cmd.command("pool")
@pool_options
@target_option
def explain_pool_cmd(mode, size, stride, pad, ceil, target):
    """Explain pool with these options."""
    _explain(_pool_op(mode, size, stride, pad, ceil), target)


@explain_cmd.command("pad")
@pad_options
@target_option
def explain_pad_cmd(pad, value, mode, target):
    """Explain pad with these options."""
    _explain(_operation("PadOp", pad=pad, value=value, mode=mode.lower()), target)


@main.command("kernels")
@click.argument("name", required=False)
@click.option(
    "--check",
    is_flag=True,
    help="Say what the kernel does instead: sum, separable, symmetry, centre.",
)
def kernels_cmd(name, check):
    """List the named kernels, or print one kernel's grid.

    The grid of 'convcli kernels NAME' is itself a valid kernel file. NAME may
    also be NAME:ANGLE or a kernel file. With --check, it says what the kernel
    does: its sum (1 keeps levels, 0 shows edges), whether it is separable
    (rank 1), its symmetries and its centre.

    \b
    Examples:
      convcli kernels
      convcli kernels sobel-x:90 > my-kernel.txt
      convcli kernels --check my-kernel.txt
    """
    from ..app.stdio import write_text
    from ..kernels import (
        KernelError,
        describe_kernel,
        format_kernel_grid,
        list_kernels,
        parse_kernel_spec,
    )

    if name is None and check:
        raise click.UsageError("--check needs a kernel: give its NAME or file")
    if name is None:
        kernels = list_kernels()
        width = max(len(k.name) for k in kernels)
        lines = []
        for k in kernels:
            size = f"{k.size[0]}x{k.size[1]}"
            aliases = f" (also: {', '.join(k.aliases)})" if k.aliases else ""
            lines.append(f"{k.name:<{width}}  {size:>5}  {k.description}{aliases}\n")
        write_text("".join(lines))
        return
    try:
        kernel = parse_kernel_spec(name)
    except KernelError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None
    if check:
        write_text(describe_kernel(kernel) + "\n")
        return
    size = f"{kernel.size[0]}x{kernel.size[1]}"
    heading = f"# {kernel.name} ({size}): {kernel.description}".rstrip(": ")
    write_text(f"{heading}\n{format_kernel_grid(kernel)}\n")


if __name__ == "__main__":
    main()
