"""What the commands share: the operation made from their options, and the batch run.

A usage error names the option that cannot work; the run's status is the exit status.
"""

from __future__ import annotations

import click

from ..errors import MissingExtra, OptionError
from .terminal import TerminalReport

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def usage_error(exc: Exception) -> click.ClickException:
    """click's usage error for an OptionError (naming its option) or a MissingExtra."""
    option = getattr(exc, "option", None)
    if option is None:
        return click.UsageError(str(exc))
    return click.BadParameter(str(exc), param_hint=f"'{option}'" if option[0] == "-" else option)


def operation(kind: str, *args, **options):
    """The operation ``convcli.app.ops.<kind>``; a usage error names the option that cannot work."""
    from ..app import ops

    try:
        return getattr(ops, kind)(*args, **options)
    except OptionError as exc:
        raise usage_error(exc) from None


def run_command(
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
        raise usage_error(exc) from None
    if status:
        click.get_current_context().exit(status)


def conv_op(kernels, stride, pad, bias, channels, border, combine, normalize, dilation=1):
    return operation(
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


def pool_op(mode, size, stride, pad, ceil):
    return operation("PoolOp", mode=mode.lower(), size=size, stride=stride, pad=pad, ceil=ceil)
