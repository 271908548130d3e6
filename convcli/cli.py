"""The ``convcli`` command line (click only; the work is done by :mod:`convcli.app`).

Errors are one line on stderr: ``convcli: <file>: <reason>`` for a file that
cannot be processed (the run goes on, exit status 1 at the end), and
``convcli: <reason>`` naming the option for a usage error (exit status 2).

Only click and numpy-free modules are imported here; numpy, Pillow and the
rest load when a command runs, so that ``--help`` and ``--version`` start as
fast as click itself.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import click

from .choices import (
    BORDER_MODES,
    CHANNEL_MODES,
    COMBINE_MODES,
    DEFAULT_BORDER,
    DEFAULT_MAX_PIXELS,
    EXPLAIN_TARGETS,
    FORMAT_ALIASES,
    FORMAT_NAMES,
    NORMALIZE_CHOICES,
    PAD_MODES,
    POOL_MODE_ALIASES,
    POOL_MODES,
    RAW_VALUES,
)

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


def _print_version(ctx, param, value):
    if not value or ctx.resilient_parsing:
        return
    from . import __version__

    click.echo(f"convcli, version {__version__}")
    ctx.exit()


@click.group(cls=_Group, context_settings=CONTEXT_SETTINGS)
@click.option("-V", "--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Show the version and exit.")
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


# --- options shared by pad, conv and pool ----------------------------------------------------


def _apply(decorators, command):
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


def _storage_options(ctx, param, values):
    from .storage import parse_option

    options = {}
    for text in values:
        try:
            key, value = parse_option(text)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
        options[key] = value
    return options or None


def common_options(command):
    """INPUT... and the options every image command takes (files, formats, the batch)."""
    decorators = [
        # Not checked for reading here: an unreadable file or folder fails on its own
        # line in the batch, and the rest runs.
        click.argument("inputs", metavar="INPUT...", nargs=-1, required=True,
                       type=click.Path(path_type=str, readable=False)),
        click.option("-o", "--out-dir", default="convcli-out", show_default=True,
                     metavar="DIR|FILE|-",
                     help="Folder for the results (created if needed); or, for one input "
                          "giving one image, a file named with its format's extension, or "
                          "- for standard output."),
        click.option("--format", "fmt",
                     type=click.Choice([*FORMAT_NAMES, *FORMAT_ALIASES], case_sensitive=False),
                     default="png", show_default=True,
                     help="Per-channel images, or one raw float32 .npy per input."),
        click.option("--figure", is_flag=True,
                     help="Also draw <stem>_<op>-<options>_grid.png: the original beside "
                          "every channel."),
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
        click.option("--scheduler", metavar="ADDRESS|local",
                     help="Run the batch on a Dask cluster (tcp://HOST:PORT), or on a local one "
                          "of --jobs worker processes (needs convcli[dask])."),
        click.option("--scheduler-file", type=click.Path(dir_okay=False, path_type=str),
                     help="Run the batch on the Dask cluster that this scheduler file names."),
        click.option("--files-per-task", type=click.IntRange(min=1), default=None,
                     help="Files in each Dask task  [default: 8]"),
        click.option("--storage-option", "storage_options", multiple=True,
                     metavar="KEY=VALUE", callback=_storage_options,
                     help="An fsspec option for s3://, gs:// ... inputs and outputs "
                          "(endpoint_url=..., anon=true); repeatable."),
    ]
    return _apply(decorators, command)


def _side_widths(text: str):
    """``T,B,L,R``: four whole numbers >= 0; None when `text` has no comma."""
    if "," not in text:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 4 or not all(p.isdigit() for p in parts):
        raise ValueError(f"{text!r} is not T,B,L,R: four whole numbers >= 0 "
                         "(top, bottom, left, right)")
    return tuple(int(p) for p in parts)


class PadParam(click.ParamType):
    """``same``, ``valid``, an integer >= 0, or ``T,B,L,R`` (with `words`: ``same``, ``valid``)."""

    def __init__(self, words: bool = True):
        self.words = words
        self.name = "N|T,B,L,R|same|valid" if words else "N|T,B,L,R"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, tuple)):
            return value
        text = str(value).strip().lower()
        if self.words and text in ("same", "valid"):
            return text
        try:
            sides = _side_widths(text)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if sides is not None:
            return sides
        try:
            number = int(text)
        except ValueError:
            words = "same, valid, " if self.words else ""
            self.fail(f"{value!r} is not {words}a whole number or T,B,L,R", param, ctx)
        if number < 0:
            self.fail(f"must be >= 0, got {number}", param, ctx)
        return number


class _Report:
    """Counts results and reports them on stderr: errors always, the rest unless quiet.

    A skipped file (its outputs exist) is counted, and listed only with
    `verbose`. `shown` gives the names to show for some sources (``-`` for
    standard input).
    """

    def __init__(self, total: int | None, *, quiet: bool, verbose: bool, debug: bool,
                 shown: dict[str, str] | None = None, count=None):
        self.total, self.quiet, self.verbose, self.debug = total, quiet, verbose, debug
        self.shown = shown or {}
        self.counts = {"done": 0, "skipped": 0, "failed": 0}
        self.start = time.monotonic()
        self.bar = None
        self.manifest = None  # a convcli.app.manifest.Manifest, given the results written
        # `count()` gives the total once a listing in the background has it.
        self._count = count
        self._wants_bar = not quiet and not verbose and sys.stderr.isatty()
        self._start_bar()

    def _known_total(self) -> int | None:
        """The number of files, once known (from the background count, when there is one)."""
        if self.total is None and self._count is not None:
            self.total = self._count()
        return self.total

    def _start_bar(self) -> None:
        """Show the progress bar once the total is known, if there is more than one file."""
        if not self._wants_bar or self._known_total() is None or self.total <= 1:
            return
        self.bar = click.progressbar(
            length=self.total, label="convcli", file=sys.stderr, show_pos=True,
            show_eta=True, item_show_func=self._rate,
        )
        self.bar.__enter__()
        self.bar.update(sum(self.counts.values()))

    def _rate(self, _item) -> str:
        done = sum(self.counts.values())
        elapsed = time.monotonic() - self.start
        return f"{done / elapsed:.1f} files/s" if done and elapsed > 0 else ""

    def add(self, result) -> None:
        self.counts[result.status] += 1
        if self.manifest is not None and result.records:
            self.manifest.add(result)
        source = self.shown.get(result.source, result.source)
        if result.status == "failed":
            self._say(f"{source}: {result.message}")
            if self.debug and result.detail:
                self._say(result.detail.rstrip())
        elif self.verbose:
            note = f" ({result.message})" if result.message else ""
            self._say(f"{source}: {result.status}, {len(result.outputs)} written{note}")
        elif result.message and not self.quiet and result.status != "skipped":
            self._say(f"{source}: {result.message}")
        if self.bar is not None:
            self.bar.update(1)
        elif self.total is None:
            self._start_bar()

    def _say(self, message: str) -> None:
        if self.bar is not None:  # start the message on a line of its own
            click.echo("\r\x1b[K", nl=False, err=True)
        _say(message)

    def close(self, where: str, *, interrupted: bool = False) -> None:
        """The summary line; `where` says where the outputs are ("outputs in DIR" ...)."""
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
        c = self.counts
        line = (f"{c['done']} processed, {c['skipped']} skipped, {c['failed']} failed "
                f"in {time.monotonic() - self.start:.1f} s; {where}")
        if c["skipped"] and not self.verbose:
            line += "; skipped: outputs exist (--overwrite replaces them, -v lists them)"
        if interrupted:
            total = self._known_total()
            left = "the rest" if total is None else total - sum(c.values())
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


def _operation(kind: str, *args, **options):
    """The operation ``convcli.app.ops.<kind>``; a usage error names the option that cannot work."""
    from .app import ops

    try:
        return getattr(ops, kind)(*args, **options)
    except ops.OptionError as exc:
        raise click.BadParameter(str(exc), param_hint=f"'{exc.option}'") from None


class _Target:
    """Where a run writes: a folder, one file (``-o FILE``), or standard output (``-o -``)."""

    def __init__(self, folder: str, out_file: str = "", *, fmt: str, stdout: bool = False):
        self.folder, self.out_file, self.fmt, self.stdout = folder, out_file, fmt, stdout


def _target(out_dir: str, fmt: str, *, figure: bool, stack: ExitStack) -> _Target:
    """The run's :class:`_Target` from ``-o`` and ``--format``; usage errors name ``-o``."""
    from .app.names import FORMATS, file_format
    from .storage import dirname, is_url

    source = click.get_current_context().get_parameter_source("fmt")
    fmt_given = source is not None and source.name != "DEFAULT"
    named = "" if out_dir == "-" else file_format(out_dir)
    if out_dir != "-" and (not named or os.path.isdir(out_dir)):
        return _Target(out_dir, fmt=fmt)
    if figure:
        raise click.BadParameter(f"{out_dir!r} is one image: --figure needs a folder",
                                 param_hint="'-o'")
    if out_dir == "-":
        if sys.stdout.isatty():
            raise click.BadParameter("standard output is a terminal: redirect it to a file "
                                     "(> out.png) or a pipe", param_hint="'-o -'")
        folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="convcli-"))
        return _Target(folder, os.path.join(folder, f"stdout.{FORMATS[fmt].extension}"),
                       fmt=fmt, stdout=True)
    if fmt_given and named != fmt:
        raise click.BadParameter(f"{out_dir!r} names a {named} file, but --format is {fmt}",
                                 param_hint="'-o'")
    folder = dirname(out_dir) if is_url(out_dir) else os.path.dirname(out_dir) or "."
    return _Target(folder, out_dir, fmt=named)


def _check_raw_values(op, fmt: str) -> None:
    """``--normalize none`` needs a format that holds float32 values: a usage error otherwise."""
    from .app.names import FORMATS

    if getattr(op, "normalize", None) == RAW_VALUES and not FORMATS[fmt].floats:
        holding = " or ".join(name for name, f in FORMATS.items() if f.floats)
        raise click.BadParameter(f"none writes float32 values, which {fmt} cannot hold: "
                                 f"use --format {holding}", param_hint="'--normalize'")


def _read_stdin(inputs: tuple[str, ...], stack: ExitStack) -> tuple[list[str], dict[str, str]]:
    """INPUT ``-``: standard input saved to a temporary file named ``stdin``."""
    if "-" not in inputs:
        return list(inputs), {}
    if inputs.count("-") > 1:
        raise click.BadParameter("- (standard input) is given more than once",
                                 param_hint="INPUT")
    if sys.stdin.isatty():
        raise click.BadParameter("- reads an image from standard input, which is a terminal: "
                                 "pipe an image into it", param_hint="INPUT")
    folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="convcli-"))
    path = os.path.join(folder, "stdin")
    with open(path, "wb") as f:
        shutil.copyfileobj(sys.stdin.buffer, f)
    return [path if arg == "-" else arg for arg in inputs], {path: "-"}


def _check_one_image(tasks, out_dir: str) -> None:
    """A usage error unless the run makes one image, for ``-o FILE`` and ``-o -``."""
    from dataclasses import replace

    from .app.names import planned_outputs, single_output

    if len(tasks) > 1:
        raise click.BadParameter(f"{out_dir!r} is one image, but there are {len(tasks)} "
                                 "input images: give a folder", param_hint="'-o'")
    probe = replace(tasks[0], out_file="")
    if all(single_output(planned_outputs(probe, channels)) is None
           for channels in (("L",), ("R", "G", "B"))):
        raise click.BadParameter(
            f"{out_dir!r} is one image, but this run makes an image per kernel: give a folder, "
            "or one map with --combine", param_hint="'-o'")


def _connect(scheduler, scheduler_file, jobs, stack: ExitStack):
    """A Dask client for ``--scheduler``/``--scheduler-file``, closed with `stack`; or None."""
    if scheduler is None and scheduler_file is None:
        return None
    from .batch import default_jobs
    from .cluster import ClusterError, MissingExtra, close, connect

    try:
        client = connect(scheduler, scheduler_file, jobs=jobs or default_jobs())
    except MissingExtra as exc:
        raise click.UsageError(str(exc)) from None
    except ClusterError as exc:
        _say(str(exc))
        click.get_current_context().exit(1)
    stack.callback(close, client)
    return client


def _in_memory(inputs, out_dir: str, *, cluster: bool) -> bool:
    """Whether the run uses memory:// (this process's own); on a cluster, a usage error."""
    from .storage import protocol

    for path in (*inputs, out_dir):
        if protocol(path) == "memory":
            if cluster:
                raise click.BadParameter(f"{path}: memory:// lives in this process only, "
                                         "where the cluster's workers cannot see it",
                                         param_hint="'--scheduler'")
            return True
    return False


def _run(op, inputs, *, out_dir, fmt, figure, recursive, quiet, overwrite, max_pixels,
         jobs, verbose, fail_fast, debug, scheduler, scheduler_file, files_per_task,
         storage_options) -> None:
    """Plan the batch, run it, report; exit 1 if any file failed, 130 on Ctrl-C."""
    if quiet and verbose:
        raise click.UsageError("-q (errors only) and -v (a line per file) cannot be used together")
    if scheduler is not None and scheduler_file is not None:
        raise click.UsageError("--scheduler and --scheduler-file name the same thing: give one")
    if files_per_task is not None and scheduler is None and scheduler_file is None:
        raise click.BadParameter("only applies with --scheduler or --scheduler-file",
                                 param_hint="'--files-per-task'")
    from .app.names import format_name
    from .storage import is_url, local_path

    inputs = tuple(local_path(str(path)) for path in inputs)
    out_dir = local_path(out_dir)
    if _in_memory(inputs, out_dir, cluster=scheduler is not None or scheduler_file is not None):
        jobs = 1  # other processes cannot see this one's memory://
    with ExitStack() as stack:
        target = _target(out_dir, format_name(fmt), figure=figure, stack=stack)
        _check_raw_values(op, target.fmt)
        paths, shown = _read_stdin(inputs, stack)
        from .app import plan
        from .safeio import remove_stale_temporaries

        notes: list[str] = []
        listing = dict(out_dir=target.folder, recursive=recursive,
                       storage_options=storage_options)
        try:
            by_folder = plan.streams_by_folder(paths, out_file=target.out_file, **listing)
        except (OSError, ImportError) as exc:  # MissingBackend is an ImportError
            _planning_error(exc, stop=True)
        tasks = plan.TaskStream(
            plan.stream_tasks(paths, op, notes=notes, fmt=target.fmt, figure=figure,
                              overwrite=overwrite, max_pixels=max_pixels,
                              out_file=target.out_file, by_folder=by_folder, **listing),
            # Temporary files that killed runs left where this one writes.
            on_folder=lambda folder: is_url(folder) or remove_stale_temporaries(folder))
        # Planned a folder at a time, the first tasks: enough to know whether there are
        # any. Otherwise all of them, which planning has listed already.
        first = list(itertools.islice(tasks, _FIRST_TASKS if by_folder else None))
        _planning_error(tasks.error, stop=not first)
        if not quiet:
            for note in notes:
                _say(note)
        if not first:
            _say("no input images: nothing done")
            click.get_current_context().exit(1)
        if target.out_file:
            _check_one_image(first, out_dir)
        client = _connect(scheduler, scheduler_file, jobs, stack)
        try:
            if not is_url(target.folder):  # object storage has no folders to make
                Path(target.folder).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise click.BadParameter(
                f"cannot create the folder {target.folder}: {exc.strerror or exc}",
                param_hint="'-o'") from None
        quiet = quiet or (target.stdout and not verbose)
        total = len(first) if tasks.finished else None  # else planned a folder at a time
        count = None
        if total is None and not quiet and not verbose and sys.stderr.isatty():
            count = plan.count_in_background(paths, **listing)
        report = _Report(total, quiet=quiet, verbose=verbose, debug=debug, shown=shown,
                         count=count)
        if not target.out_file:  # -o FILE and -o - write that one file only
            from .app.manifest import Manifest

            report.manifest = Manifest(op, fmt=target.fmt, shown=shown,
                                       storage_options=storage_options)
        try:
            status = _run_tasks(itertools.chain(first, tasks), report, jobs=jobs, total=total,
                                fail_fast=fail_fast, quiet=quiet, client=client,
                                files_per_task=files_per_task)
        finally:
            for line in report.manifest.close() if report.manifest else ():
                _say(line)
        if tasks.error is not None and status not in (130, 143):
            _planning_error(tasks.error, stop=False)
            status = status or 1
        where = ("output to standard output" if target.stdout else
                 f"output in {out_dir}" if target.out_file else f"outputs in {out_dir}")
        report.close(where, interrupted=status in (130, 143))
        if target.stdout and report.counts["done"]:
            with open(target.out_file, "rb") as f:
                shutil.copyfileobj(f, sys.stdout.buffer)
            sys.stdout.buffer.flush()
    if status:
        click.get_current_context().exit(status)


_FIRST_TASKS = 256


def _planning_error(error: BaseException | None, *, stop: bool) -> None:
    """Report an error met listing the inputs: a missing extra is a usage error (exit 2).

    Other errors (a bucket that cannot be listed) are one line; with `stop`,
    nothing was done and the run ends with exit status 1.
    """
    from .storage import MissingBackend

    if error is None:
        return
    if isinstance(error, MissingBackend):
        raise click.UsageError(str(error))
    reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
    where = getattr(error, "filename", None)
    _say(f"{where}: cannot list: {reason}" if where else f"cannot list the inputs: {reason}")
    if stop:
        click.get_current_context().exit(1)


def _run_tasks(tasks, report: _Report, *, jobs, total, fail_fast, quiet, client=None,
               files_per_task=None) -> int | None:
    """Run the tasks in a batch, reporting each result; the exit status, or None for 0.

    On a Dask `client` when one is given, else in local processes. `total`
    is the number of tasks, if known.
    """
    from .app import process
    from .batch import BatchAborted, BatchRun, LocalProcessPool, default_jobs

    if client is not None:
        from .cluster import DEFAULT_FILES_PER_TASK, ClusterRun

        requests = _StopRequests(raise_first=False)
        run = ClusterRun(client, tasks, process.process_file,
                         files_per_task=files_per_task or DEFAULT_FILES_PER_TASK,
                         stop_requests=requests)
    else:
        jobs = min(jobs or default_jobs(), max(1, total or _FIRST_TASKS))
        requests = _StopRequests(raise_first=jobs == 1)
        executor = LocalProcessPool(jobs) if jobs > 1 else None
        run = BatchRun(tasks, process.process_file, executor=executor, in_flight=2 * jobs,
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
        if requests() and run.running and not quiet and client is None:
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
    if status is None and (report.counts["failed"] or run.recovered_deaths):
        status = 1
    return status


# --- commands --------------------------------------------------------------------------------


def pad_options(command):
    """pad's options: for pad, and explain pad."""
    decorators = [
        click.option("--pad", "pad", type=PadParam(words=False), default="2", show_default=True,
                     help="Pixels added on every side, or T,B,L,R: on the top, bottom, left "
                          "and right."),
        click.option("--value", type=float, default=0.0, show_default=True,
                     help="Fill value for --mode constant, in the image's scale (0-255 for "
                          "8-bit)."),
        click.option("--mode", type=click.Choice(PAD_MODES, case_sensitive=False),
                     default="constant", show_default=True, help="How the border is filled."),
    ]
    return _apply(decorators, command)


@main.command("pad")
@pad_options
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
    _run(_operation("PadOp", pad=pad, value=value, mode=mode.lower()), inputs, **common)


def _kernels(ctx, param, values):
    from .kernels import KernelError, parse_kernel_specs

    kernels = []
    for spec in values or DEFAULT_KERNELS:
        try:
            kernels.extend(parse_kernel_specs(spec))
        except KernelError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
    return tuple(kernels)


def conv_options(command):
    """The kernels and conv_forward's options: for conv, and any command that convolves."""
    decorators = [
        click.option("-k", "--kernel", "kernels", multiple=True, callback=_kernels,
                     metavar="SPEC",
                     help="Kernel name (see 'convcli kernels'), NAME:ANGLE, or a kernel file "
                          "(a path with / or an extension); repeatable, or a comma list. "
                          "Default: vertical, horizontal and edge."),
        click.option("--stride", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Step between kernel positions."),
        click.option("--pad", "pad", type=PadParam(), default="same", show_default=True,
                     help="same: keep the size (odd kernels, stride 1); valid: 0; "
                          "N pixels on every side, or T,B,L,R (top, bottom, left, right), "
                          "filled as --border says."),
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
        click.option("--dilation", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Pixels between a kernel's taps (as PyTorch's dilation); --pad same "
                          "pads for the dilated kernel."),
    ]
    return _apply(decorators, command)


normalize_option = click.option(
    "--normalize", type=click.Choice(NORMALIZE_CHOICES, case_sensitive=False),
    default="auto", show_default=True,
    help="Values to image levels. auto: robust for zero-sum (edge) kernels (the "
         "99.5th percentile of |x| is white), clip for kernels that keep the level "
         "(blur, sharpen; a channel sum shown as the mean), minmax otherwise; "
         "none: the float32 values (--format tiff or npy).")


def _conv_op(kernels, stride, pad, bias, channels, border, combine, normalize, dilation=1):
    return _operation("ConvOp", kernels, stride=stride, pad=pad, bias=bias,
                      channels=channels.lower(), normalize=normalize.lower(),
                      border=border.lower(), combine=combine.lower() if combine else None,
                      dilation=dilation)


@main.command("conv")
@conv_options
@normalize_option
@common_options
def conv_cmd(kernels, stride, pad, bias, channels, border, combine, normalize, dilation,
             inputs, **common):
    """Convolve images with named kernels (conv_forward; cross-correlation, no flip).

    Alpha is dropped: only colour channels are convolved. Each output channel
    is written as a grey image, or all of them as one .npy with --format npy.

    \b
    Examples:
      convcli conv --kernel vertical sample_images
      convcli conv -k sobel-x -k sobel-x:90 --channels each photo.png
      convcli conv -k edge --format npy --figure photo.png
    """
    op = _conv_op(kernels, stride, pad, bias, channels, border, combine, normalize, dilation)
    _run(op, inputs, **common)


def pool_options(command):
    """pool's options: for pool, grad pool and explain pool."""
    decorators = [
        click.option("--mode",
                     type=click.Choice([*POOL_MODES, *POOL_MODE_ALIASES], case_sensitive=False),
                     default="max", show_default=True, help="Max or average pooling."),
        click.option("--size", type=click.IntRange(min=1), default=2, show_default=True,
                     help="Window size F (F x F)."),
        click.option("--stride", type=click.IntRange(min=1), default=None,
                     help="Step between windows  [default: the size]"),
        click.option("--pad", type=click.IntRange(min=0), default=0, show_default=True,
                     help="Pixels of padding on every side, at most half the size; padding is "
                          "never part of a window (max of, or mean of, the real pixels)."),
        click.option("--ceil", is_flag=True,
                     help="Round the output size up (PyTorch's ceil_mode): a last, partial "
                          "window where the image does not divide evenly."),
    ]
    return _apply(decorators, command)


def _pool_op(mode, size, stride, pad, ceil):
    return _operation("PoolOp", mode=mode.lower(), size=size, stride=stride, pad=pad, ceil=ceil)


@main.command("pool")
@pool_options
@common_options
def pool_cmd(mode, size, stride, pad, ceil, inputs, **common):
    """Pool images: max or average over F x F windows, channel by channel (pool_forward).

    Alpha is pooled like the other channels. Each channel is written as a
    grey image, and colour images whole as well.

    \b
    Examples:
      convcli pool photo.jpg
      convcli pool --mode average --size 5 --stride 3 sample_images
    """
    _run(_pool_op(mode, size, stride, pad, ceil), inputs, **common)


@main.command("fit")
@click.argument("before", type=click.Path(path_type=str, readable=False))
@click.argument("after", type=click.Path(path_type=str, readable=False))
@click.option("--size", type=click.IntRange(min=1, max=31), default=3, show_default=True,
              help="Kernel size F (F x F).")
@click.option("--channels", type=click.Choice(CHANNEL_MODES, case_sensitive=False),
              default="sum", show_default=True,
              help="As conv: sum (the channel sum), each (one kernel on every colour channel) "
                   "or gray.")
@click.option("--pad", "pad", type=PadParam(), default="same", show_default=True,
              help="As conv: same, valid or N.")
@click.option("--border", type=click.Choice(BORDER_MODES, case_sensitive=False),
              default=DEFAULT_BORDER, show_default=True, help="As conv: how the pad is filled.")
@click.option("--stride", type=click.IntRange(min=1), default=1, show_default=True,
              help="As conv.")
@click.option("--dilation", type=click.IntRange(min=1), default=1, show_default=True,
              help="As conv: pixels between the kernel's taps.")
@click.option("--steps", type=click.IntRange(min=1), default=200, show_default=True,
              help="At most this many gradient steps.")
@click.option("-o", "--out", default="", metavar="FILE",
              help="The kernel file to write  [default: convcli-out/<stem>_fit-FxF.toml]")
@click.option("--figure", is_flag=True,
              help="Also draw FILE's stem + _grid.png: the kernel, the closest named one, "
                   "the loss curve.")
@click.option("--overwrite", is_flag=True, help="Replace a kernel file (and figure) fit wrote.")
@click.option("--max-pixels", type=click.IntRange(min=0), default=DEFAULT_MAX_PIXELS,
              show_default=True, help="Refuse larger images (0: no limit).")
@click.option("-q", "--quiet", is_flag=True, help="Only report errors.")
def fit_cmd(before, after, size, channels, pad, border, stride, dilation, steps, out, figure,
            overwrite, max_pixels, quiet):
    """Learn the F x F kernel and bias that turn BEFORE into AFTER (by conv_backward).

    AFTER is an image, or a .npy of raw values as 'conv --format npy' writes
    it. Writes a kernel file that 'conv -k FILE' reads, and says how well it
    fits and which named kernel it is closest to.

    \b
    Examples:
      convcli conv -k sobel-x --format npy -o edges.npy photo.png
      convcli fit photo.png edges.npy -o learned.toml --figure
    """
    from .app.fit import FitError, FitRun, run_fit

    if out and os.path.isdir(out):
        raise click.BadParameter(f"{out!r} is a folder: -o names the kernel file",
                                 param_hint="'-o'")
    run = FitRun(before, after, size=size, channels=channels.lower(), pad=pad,
                 border=border.lower(), stride=stride, dilation=dilation, steps=steps, out=out,
                 figure=figure, overwrite=overwrite, max_pixels=max_pixels)
    from .app.ops import OptionError

    try:
        run.conv_op()  # options that cannot work together are usage errors, as in conv
    except OptionError as exc:
        raise click.BadParameter(str(exc), param_hint=f"'{exc.option}'") from None
    live = not quiet and sys.stderr.isatty()

    def progress(step, error):
        if live:
            click.echo(f"\rconvcli: step {step}: relative error {error:.3e}\x1b[K", nl=False,
                       err=True)

    try:
        lines, written = run_fit(run, progress=progress)
    except FitError as exc:
        if live:
            click.echo("\r\x1b[K", nl=False, err=True)
        _say(str(exc))
        sys.exit(1)
    if live:
        click.echo("\r\x1b[K", nl=False, err=True)
    if not quiet:
        for line in lines:
            _say(line)
        _say(f"wrote {', '.join(written)}")


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
@click.option("--normalize", type=click.Choice(_GRAD_NORMALIZE, case_sensitive=False),
              default="robust", show_default=True,
              help="Values to image levels (robust: the 99.5th percentile white).")
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
    op = _operation("GradPoolOp", _pool_op(mode, size, stride, pad, ceil),
                    normalize=normalize.lower())
    _run(op, inputs, **common)


@grad_cmd.command("conv")
@conv_options
@click.option("--loss", type=click.Choice(["sum", "energy"], case_sensitive=False),
              default="energy", show_default=True,
              help="energy: L = sum(Z^2)/2, the pixels that most change the strong responses; "
                   "sum: L = sum(Z), each pixel's weight in all responses (zero inside the "
                   "image for a zero-sum kernel).")
@click.option("--normalize", type=click.Choice(_GRAD_NORMALIZE, case_sensitive=False),
              default="offset", show_default=True,
              help="Values to image levels (offset: zero mid-grey).")
@common_options
def grad_conv_cmd(kernels, stride, pad, bias, channels, border, combine, dilation, loss,
                  normalize, inputs, **common):
    """Which pixels would most change the response (conv_backward's dA_prev).

    Writes dA_prev of L = sum(Z) or sum(Z^2)/2 per kernel, and prints dW, the
    gradient with respect to the kernel, as a grid (not with -q).

    \b
    Examples:
      convcli grad conv -k vertical photo.png
      convcli grad conv -k edge --loss energy --figure photo.png
    """
    conv = _operation("ConvOp", kernels, stride=stride, pad=pad, bias=bias,
                      channels=channels.lower(), border=border.lower(),
                      combine=combine.lower() if combine else None, dilation=dilation)
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


target_option = click.option(
    "--as", "target", type=click.Choice(EXPLAIN_TARGETS, case_sensitive=False), default=None,
    help="The tool to write the operation for; without it, a table of conventions.")


def _explain(op, target) -> None:
    from .app.explain import conventions, explain

    click.echo(explain(op, target.lower()) if target else conventions(op), nl=False)


@explain_cmd.command("conv")
@conv_options
@normalize_option
@target_option
def explain_conv_cmd(kernels, stride, pad, bias, channels, border, combine, dilation, normalize,
                     target):
    """Explain conv with these options (the values of --format npy; --normalize is ignored)."""
    _explain(_conv_op(kernels, stride, pad, bias, channels, border, combine, normalize, dilation),
             target)


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
def kernels_cmd(name):
    """List the named kernels, or print one kernel's grid.

    The grid of 'convcli kernels NAME' is itself a valid kernel file. NAME may
    also be NAME:ANGLE or a kernel file.

    \b
    Examples:
      convcli kernels
      convcli kernels sobel-x:90 > my-kernel.txt
    """
    from .kernels import KernelError, format_kernel_grid, list_kernels, parse_kernel_spec

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
