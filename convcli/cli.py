"""The ``convcli`` command line (click only; the work is done by :mod:`convcli.app`).

Errors are one line on stderr: ``convcli: <file>: <reason>`` for a file that
cannot be processed (the run goes on, exit status 1 at the end), and
``convcli: <reason>`` naming the option for a usage error (exit status 2).
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import click

from . import __version__
from .app.names import FORMATS
from .app.ops import (
    BORDER_MODES,
    CHANNEL_MODES,
    COMBINE_MODES,
    DEFAULT_BORDER,
    NORMALIZE_CHOICES,
    ConvOp,
    OptionError,
    PadOp,
    PoolOp,
)
from .app.plan import find_inputs, plan_tasks
from .app.process import process_file
from .batch import BatchAborted, BatchRun, LocalProcessPool, default_jobs
from .images import DEFAULT_MAX_PIXELS
from .kernels import KernelError, format_kernel_grid, list_kernels, parse_kernel_spec
from .padding import PAD_MODES
from .pooling import POOL_MODE_ALIASES, POOL_MODES
from .safeio import remove_stale_temporaries

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
DEFAULT_KERNELS = ("vertical", "horizontal", "edge")
# click >= 8.2 raises this for a group called without a command (it prints the help).
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _say(message: str) -> None:
    click.echo(f"convcli: {message}", err=True)


class _Group(click.Group):
    """A group whose errors are one line on stderr, never a traceback or usage block."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
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
            _say(message)
            sys.exit(exc.exit_code)
        except click.Abort:
            _say("interrupted")
            sys.exit(130)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=_Group, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "-V", "--version", prog_name="convcli")
def main():
    """Convolution and pooling on image files: pad, conv, pool, and the kernel list.

    \b
    Examples:
      convcli conv --kernel vertical sample_images
      convcli pool --mode average --size 4 photo.jpg -o small
      convcli kernels sobel-x
    """


# --- options shared by pad, conv and pool ----------------------------------------------------


def _apply(decorators, command):
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


def common_options(command):
    """INPUT... and the options every image command takes (files, formats, the batch)."""
    decorators = [
        # Not checked for reading here: an unreadable file or folder fails on its own
        # line in the batch, and the rest runs.
        click.argument("inputs", metavar="INPUT...", nargs=-1, required=True,
                       type=click.Path(path_type=str, readable=False)),
        click.option("-o", "--out-dir", default="convcli-out", show_default=True,
                     type=click.Path(file_okay=False, path_type=str),
                     help="Folder for the results (created if needed)."),
        click.option("--format", "fmt", type=click.Choice(list(FORMATS), case_sensitive=False),
                     default="png", show_default=True,
                     help="Per-channel images, or one raw float32 .npy per input."),
        click.option("--figure", is_flag=True,
                     help="Also draw <stem>_<op>_grid.png: the original beside every channel."),
        click.option("-r", "--recursive", is_flag=True,
                     help="Also take images in subfolders (mirrored under --out-dir)."),
        click.option("-q", "--quiet", is_flag=True, help="Only report errors."),
        click.option("--overwrite", is_flag=True,
                     help="Replace existing outputs (otherwise a done file is skipped)."),
        click.option("--max-pixels", type=click.IntRange(min=0), default=DEFAULT_MAX_PIXELS,
                     show_default=True, help="Refuse larger images (0: no limit)."),
        click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
                     help="Files processed in parallel, each in its own process  "
                          "[default: the number of CPUs]"),
        click.option("-v", "--verbose", is_flag=True, help="One line per file."),
        click.option("--fail-fast", is_flag=True, help="Stop at the first file that fails."),
        click.option("--debug", is_flag=True,
                     help="Show the traceback of an unexpected error."),
    ]
    return _apply(decorators, command)


class PadParam(click.ParamType):
    """``same``, ``valid`` or an integer >= 0."""

    name = "N|same|valid"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        text = str(value).strip().lower()
        if text in ("same", "valid"):
            return text
        try:
            number = int(text)
        except ValueError:
            self.fail(f"{value!r} is not same, valid or a whole number", param, ctx)
        if number < 0:
            self.fail(f"must be >= 0, got {number}", param, ctx)
        return number


class _Report:
    """Counts results and reports them on stderr: errors always, the rest unless quiet."""

    def __init__(self, total: int, *, quiet: bool, verbose: bool, debug: bool):
        self.total, self.quiet, self.verbose, self.debug = total, quiet, verbose, debug
        self.counts = {"done": 0, "skipped": 0, "failed": 0}
        self.start = time.monotonic()
        self.bar = None
        if not quiet and not verbose and total > 1 and sys.stderr.isatty():
            self.bar = click.progressbar(
                length=total, label="convcli", file=sys.stderr, show_pos=True,
                show_eta=True, item_show_func=self._rate,
            )
            self.bar.__enter__()

    def _rate(self, _item) -> str:
        done = sum(self.counts.values())
        elapsed = time.monotonic() - self.start
        return f"{done / elapsed:.1f} files/s" if done and elapsed > 0 else ""

    def add(self, result) -> None:
        self.counts[result.status] += 1
        if result.status == "failed":
            self._say(f"{result.source}: {result.message}")
            if self.debug and result.detail:
                self._say(result.detail.rstrip())
        elif self.verbose:
            note = f" ({result.message})" if result.message else ""
            self._say(f"{result.source}: {result.status}, {len(result.outputs)} written{note}")
        elif result.message and not self.quiet:
            self._say(f"{result.source}: {result.message}")
        if self.bar is not None:
            self.bar.update(1)

    def _say(self, message: str) -> None:
        if self.bar is not None:  # start the message on a line of its own
            click.echo("\r\x1b[K", nl=False, err=True)
        _say(message)

    def close(self, out_dir: str, *, interrupted: bool = False) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
        c = self.counts
        line = (f"{c['done']} processed, {c['skipped']} skipped, {c['failed']} failed "
                f"in {time.monotonic() - self.start:.1f} s; outputs in {out_dir}")
        if interrupted:
            left = self.total - sum(c.values())
            _say(f"interrupted: {line}; {left} not started or not finished")
        elif not self.quiet:
            _say(line)


class _Terminated(BaseException):
    """SIGTERM, handled like Ctrl-C so that the run stops cleanly.

    A BaseException, as KeyboardInterrupt is, so that the per-file guard
    (:func:`convcli.batch.run_guarded`) does not take it for a file's error.
    """


class _StopRequests:
    """Counts Ctrl-C and kill during a run.

    With one job the work runs in this process, so the first request raises
    (KeyboardInterrupt or _Terminated) to abandon the file at once. With
    worker processes the handler only counts, and the run polls the count:
    nothing is raised in the middle of the bookkeeping.
    """

    def __init__(self, *, raise_first: bool):
        self.signals: list[int] = []
        self.raise_first = raise_first

    def __call__(self) -> int:
        return len(self.signals)

    def handle(self, signum, frame):
        self.signals.append(signum)
        if self.raise_first and len(self.signals) == 1:
            raise KeyboardInterrupt if signum == signal.SIGINT else _Terminated

    @property
    def status(self) -> int | None:
        if not self.signals:
            return None
        return 130 if self.signals[0] == signal.SIGINT else 143


def _operation(kind, *args, **options):
    """The operation, or a usage error naming the option that cannot work."""
    try:
        return kind(*args, **options)
    except OptionError as exc:
        raise click.BadParameter(str(exc), param_hint=f"'{exc.option}'") from None


def _run(op, inputs, *, out_dir, fmt, figure, recursive, quiet, overwrite, max_pixels,
         jobs, verbose, fail_fast, debug) -> None:
    """Plan the batch, run it, report; exit 1 if any file failed, 130 on Ctrl-C."""
    try:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.BadParameter(
            f"cannot create the folder {out_dir}: {exc.strerror or exc}", param_hint="'-o'"
        ) from None
    found = find_inputs(inputs, out_dir=out_dir, recursive=recursive)
    if not quiet:
        for note in found.notes:
            _say(note)
    tasks = plan_tasks(found.files, op, fmt=fmt.lower(), figure=figure, overwrite=overwrite,
                       max_pixels=max_pixels)
    # Temporary files that killed runs left where this one writes.
    for folder in sorted({task.out_dir for task in tasks}):
        remove_stale_temporaries(folder)
    jobs = min(jobs or default_jobs(), max(1, len(tasks)))
    report = _Report(len(tasks), quiet=quiet, verbose=verbose, debug=debug)
    requests = _StopRequests(raise_first=jobs == 1)
    executor = LocalProcessPool(jobs) if jobs > 1 else None
    run = BatchRun(tasks, process_file, executor=executor, in_flight=2 * jobs,
                   stop_requests=requests, new_executor=lambda: LocalProcessPool(jobs))
    previous = {sig: signal.signal(sig, requests.handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    status = None
    late = []
    try:
        try:
            for result in run:
                report.add(result)
                if fail_fast and result.status == "failed":
                    break
        except (KeyboardInterrupt, _Terminated):
            pass  # counted in `requests`
        except BatchAborted as exc:
            _say(str(exc))
            status = 1
        # Files not started are cancelled; the ones running are finished,
        # unless a second Ctrl-C (or kill) asks to stop at once.
        if requests() and run.running and not quiet:
            _say(f"stopping: finishing {run.running} file(s) being written "
                 "(Ctrl-C again to stop at once)")
        late = run.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    for result in late:
        report.add(result)
    if run.recovered_deaths:  # an error, even though every file was then processed
        how = ", ".join(run.recovered_deaths)
        _say(f"{len(run.recovered_deaths)} worker process(es) died ({how}) and were replaced; "
             "the files they had in hand were processed again, one at a time")
    status = requests.status or status
    report.close(out_dir, interrupted=status in (130, 143))
    if status is None and (report.counts["failed"] or run.recovered_deaths):
        status = 1
    if status:
        click.get_current_context().exit(status)


# --- commands --------------------------------------------------------------------------------


@main.command("pad")
@click.option("--pad", "pad", type=click.IntRange(min=0), default=2, show_default=True,
              help="Pixels added on every side.")
@click.option("--value", type=float, default=0.0, show_default=True,
              help="Fill value for --mode constant, in the image's scale (0-255 for 8-bit).")
@click.option("--mode", type=click.Choice(PAD_MODES, case_sensitive=False), default="constant",
              show_default=True, help="How the border is filled.")
@common_options
def pad_cmd(pad, value, mode, inputs, **common):
    """Pad images: add a border of N pixels to every channel (pad_images).

    Writes each channel as a grey image, and colour images whole as well.
    Alpha is padded with the same mode (opaque in constant mode).

    \b
    Examples:
      convcli pad photo.jpg --pad 30 --value 50
      convcli pad --mode reflect --pad 8 -o padded sample_images
    """
    _run(_operation(PadOp, pad=pad, value=value, mode=mode.lower()), inputs, **common)


def _kernels(ctx, param, values):
    kernels = []
    for spec in values or DEFAULT_KERNELS:
        try:
            kernels.append(parse_kernel_spec(spec))
        except KernelError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
    return tuple(kernels)


def conv_options(command):
    """The kernels and conv_forward's options: for conv, and any command that convolves."""
    decorators = [
        click.option("-k", "--kernel", "kernels", multiple=True, callback=_kernels,
                     metavar="SPEC",
                     help="Kernel name (see 'convcli kernels'), NAME:ANGLE, or a kernel file; "
                          "repeatable. Default: vertical, horizontal and edge."),
        click.option("--stride", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Step between kernel positions."),
        click.option("--pad", "pad", type=PadParam(), default="same", show_default=True,
                     help="same: keep the size (odd kernels, stride 1); valid: 0; "
                          "or N pixels of zeros."),
        click.option("--bias", type=float, default=0.0, show_default=True,
                     help="Added to every output value."),
        click.option("--channels", type=click.Choice(CHANNEL_MODES, case_sensitive=False),
                     default="sum", show_default=True,
                     help="sum: each kernel over all channels, summed; each: every channel "
                          "separately (and each kernel's result in colour); gray: luminance "
                          "first."),
        click.option("--border", type=click.Choice(BORDER_MODES, case_sensitive=False),
                     default=DEFAULT_BORDER, show_default=True,
                     help="How the pad is filled (as pad --mode); constant is zeros."),
        click.option("--combine", type=click.Choice(COMBINE_MODES, case_sensitive=False),
                     default=None,
                     help="One map of all kernels: magnitude (sqrt of the sum of squares), "
                          "max or sum."),
    ]
    return _apply(decorators, command)


@main.command("conv")
@conv_options
@click.option("--normalize", type=click.Choice(NORMALIZE_CHOICES, case_sensitive=False),
              default="auto", show_default=True,
              help="Values to image levels. auto: robust for zero-sum (edge) kernels (the "
                   "99.5th percentile of |x| is white), clip for kernels that keep the level "
                   "(blur, sharpen; a channel sum shown as the mean), minmax otherwise.")
@common_options
def conv_cmd(kernels, stride, pad, bias, channels, border, combine, normalize, inputs,
             **common):
    """Convolve images with named kernels (conv_forward; cross-correlation, no flip).

    Alpha is dropped: only colour channels are convolved. Each output channel
    is written as a grey image, or all of them as one .npy with --format npy.

    \b
    Examples:
      convcli conv --kernel vertical sample_images
      convcli conv -k sobel-x -k sobel-x:90 --channels each photo.png
      convcli conv -k edge --format npy --figure photo.png
    """
    op = _operation(ConvOp, kernels, stride=stride, pad=pad, bias=bias,
                    channels=channels.lower(), normalize=normalize.lower(),
                    border=border.lower(), combine=combine.lower() if combine else None)
    _run(op, inputs, **common)


@main.command("pool")
@click.option("--mode", type=click.Choice([*POOL_MODES, *POOL_MODE_ALIASES], case_sensitive=False),
              default="max", show_default=True, help="Max or average pooling.")
@click.option("--size", type=click.IntRange(min=1), default=2, show_default=True,
              help="Window size F (F x F).")
@click.option("--stride", type=click.IntRange(min=1), default=None,
              help="Step between windows  [default: the size]")
@common_options
def pool_cmd(mode, size, stride, inputs, **common):
    """Pool images: max or average over F x F windows, channel by channel (pool_forward).

    Alpha is pooled like the other channels. Each channel is written as a
    grey image, and colour images whole as well.

    \b
    Examples:
      convcli pool photo.jpg
      convcli pool --mode average --size 5 --stride 3 sample_images
    """
    _run(_operation(PoolOp, mode=mode.lower(), size=size, stride=stride), inputs, **common)


@main.command("kernels")
@click.argument("name", required=False)
def kernels_cmd(name):
    """List the named kernels, or print one kernel's grid.

    The grid of 'convcli kernels NAME' is itself a valid kernel file. NAME may
    also be NAME:ANGLE or a kernel file.

    \b
    Examples:
      convcli kernels
      convcli kernels sobel-x:90 > my-kernel.txt
    """
    if name is None:
        kernels = list_kernels()
        width = max(len(k.name) for k in kernels)
        for k in kernels:
            size = f"{k.size[0]}x{k.size[1]}"
            aliases = f" (also: {', '.join(k.aliases)})" if k.aliases else ""
            click.echo(f"{k.name:<{width}}  {size:>5}  {k.description}{aliases}")
        return
    try:
        kernel = parse_kernel_spec(name)
    except KernelError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None
    size = f"{kernel.size[0]}x{kernel.size[1]}"
    click.echo(f"# {kernel.name} ({size}): {kernel.description}".rstrip(": "))
    click.echo(format_kernel_grid(kernel))


if __name__ == "__main__":
    main()
