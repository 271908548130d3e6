"""A batch run from Python: plan the files, run them on an engine, report, exit status.

:func:`run_batch` is what ``convcli pad|conv|pool|grad`` do after parsing
their options, with the same rules: existing outputs are skipped unless
``overwrite``, a file that fails is reported and the rest goes on, a
``convcli-manifest.jsonl`` records what was written. No click here::

    from convcli.app import ops
    from convcli.app.run import RunOptions, run_batch
    from convcli.kernels import parse_kernel_spec

    conv = ops.ConvOp((parse_kernel_spec("sobel-x"),))
    status = run_batch(conv, ["photos"], RunOptions(out_dir="edges", jobs=2))

The exit status is 0 when every file was processed or skipped, 1 when a
file failed (or nothing could be done, a manifest could not be written, or
the object store failed and stopped the run), 130 or 143 when the run was
stopped by Ctrl-C or SIGTERM. Options that cannot work raise
:class:`convcli.errors.OptionError` (or :class:`convcli.errors.MissingExtra`),
before anything is written.
"""

from __future__ import annotations

import itertools
import shutil
import time
from contextlib import ExitStack
from dataclasses import dataclass, field

from ..choices import DEFAULT_MAX_PIXELS
from ..engines.base import Engine, EngineError, EngineSettings, make_engine
from ..engines.processes import default_jobs
from ..errors import MissingExtra
from ..io.frames import DEFAULT_FRAMES
from ..io.safeio import STALE_SECONDS, remove_stale_temporaries
from ..io.storage import StoreError, for_terminal, is_url, local_path
from ..layers._engine import native
from ..layers._engine.tiles import memory_budget
from ..startup import startup_over
from . import inputs, plan, process
from .manifest import Manifest, ManifestHooks, merge_fragments
from .parts import part
from .report import Reporter
from .stdio import (
    StreamError,
    stdout_binary,
    terminate_raises,
    write_failed,
    write_text,
)
from .stop_requests import StopRequests, Terminated
from .targets import (
    Target,
    check_folder,
    check_one_image,
    in_memory_path,
    remove_unused_folders,
    target_and_inputs,
)

FIRST_TASKS = 256
"""Tasks planned before the run starts, for an INPUT folder planned a folder at a time."""


@dataclass(frozen=True)
class RunOptions:
    """The options of a batch run (those of ``convcli pad|conv|pool|grad``).

    Attributes
    ----------
    out_dir : str
        A folder for the outputs (made when needed); a file named with a
        format's extension, for one input giving one image; ``"-"`` for
        standard output.
    fmt : str or None
        The output format (``png``, ``jpg``, ``tiff``, ``npy``, or an alias);
        None: that of `out_dir`'s extension, else each input's own for pad and pool, and
        ``png`` for maps (:func:`convcli.app.outputs.output_format`).
    figure, separate, recursive, overwrite, fail_fast : bool
        As ``--figure``, ``--separate``, ``-r``, ``--overwrite`` and ``--fail-fast``.
    max_pixels : int
        Larger images are refused (0: no limit).
    engine : str or None
        Where the files are processed (:data:`convcli.engines.base.ENGINES`); None:
        ``dask`` with a scheduler, else ``processes``.
    jobs, scheduler, scheduler_file, files_per_task
        The engine's settings (:class:`convcli.engines.base.EngineSettings`).
    storage_options : dict or None
        fsspec options for ``s3://`` ... inputs and outputs.
    memory : int or None
        Bytes one file's work may take: a larger image that can be read by
        regions (TIFF) is processed in strips; None: half the memory
        available, shared by the files processed at once.
    dry_run : bool
        List what would be written on the standard output, from the image
        headers, and write nothing (:mod:`convcli.app.dryrun`).
    """

    out_dir: str = "convcli-out"
    fmt: str | None = None
    figure: bool = False
    separate: bool = False
    recursive: bool = False
    overwrite: bool = False
    max_pixels: int = DEFAULT_MAX_PIXELS
    fail_fast: bool = False
    engine: str | None = None
    jobs: int | None = None
    scheduler: str | None = None
    scheduler_file: str | None = None
    files_per_task: int | None = None
    storage_options: dict | None = field(default=None, hash=False)
    memory: int | None = None
    dry_run: bool = False
    frames: str | tuple[int, ...] = DEFAULT_FRAMES


def _run_format(options: RunOptions, target, op) -> str | None:
    """The format of every output of the run: ``--format``, the one ``-o FILE`` and
    ``-o -`` write, or PNG for maps; None where each input's outputs have their own
    (:func:`convcli.app.outputs.output_format`: pad, pool)."""
    given = options.fmt is not None or target.out_file
    return target.fmt if given or not getattr(op, "writes_image", False) else None


class _Ended(Exception):
    """The run ends now with `status` (its reason was said)."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


def run_batch(
    operation, inputs, options: RunOptions | None = None, reporter: Reporter | None = None
) -> int:
    """Apply `operation` to every image of `inputs`; return the exit status.

    Parameters
    ----------
    operation : Operation
        What to do to each picture (:mod:`convcli.app.ops`: ``PadOp``,
        ``ConvOp``, ``PoolOp``, ``GradPoolOp``, ``GradConvOp``).
    inputs : sequence of str
        Image files, folders, URLs, or ``"-"`` for standard input.
    options : RunOptions, optional
    reporter : Reporter, optional
        Told of every result; by default lines on the standard error.

    Returns
    -------
    int
        0, 1 (a file failed, or nothing was done), 130 or 143 (stopped).

    Raises
    ------
    OptionError, MissingExtra
        Options that cannot work; nothing was written.
    """
    # The modules are loaded: what planning and the work make is collected from here on,
    # and workers forked later share what start-up made, frozen (convcli.startup).
    startup_over()
    options = options or RunOptions()
    reporter = reporter or Reporter()
    if reporter.debug:
        reporter.say(f"engine: {native.description()}")
    run = _BatchRun(operation, inputs, options, reporter)
    try:
        return run.run()
    except _Ended as ended:
        return ended.status
    except StreamError as exc:  # standard input or output (its temporaries are removed)
        reporter.say(str(exc))
        return 1
    except Terminated:  # SIGTERM before the run's own handlers (see run)
        reporter.say("stopped (SIGTERM)")
        return 143
    finally:
        if not run.written and hasattr(run, "made_in"):  # the folder made for nothing
            remove_unused_folders(*run.made_in)


class _BatchRun:
    """One run of :func:`run_batch`: its checks, its plan, its engine and its tally."""

    def __init__(self, operation, inputs, options: RunOptions, reporter: Reporter):
        self.op, self.options, self.reporter = operation, options, reporter
        self.inputs = tuple(local_path(str(path)) for path in inputs)
        self.out_dir = local_path(options.out_dir)
        # "stopped": files left part-written by a stop at once (their outputs are recorded)
        self.counts = {"done": 0, "skipped": 0, "failed": 0, "stopped": 0}
        self.usage_failed = False  # a file failed for a usage error: exit 2
        self.written = 0  # output files written
        self.written_paths: list[str] = []  # with -o FILE: the files written
        self.out_file_run = False
        self.hints_said: set[str] = set()
        self.started = time.monotonic()
        self.total: int | None = None  # the number of tasks, once known
        self.count = None  # the background count of the files, when there is one
        self.shown: dict[str, str] = {}  # names to show for some inputs ("-")
        self.manifest = None
        self.store_failed = False  # a file failed for the store's failure: the run stopped
        self.listing: dict = {}
        settings = EngineSettings(
            jobs=options.jobs,
            scheduler=options.scheduler,
            scheduler_file=options.scheduler_file,
            files_per_task=options.files_per_task,
            in_memory=in_memory_path((*self.inputs, self.out_dir)),
        )
        self.engine: Engine = make_engine(options.engine, settings)
        self.requests = StopRequests()  # Ctrl-C and SIGTERM during the run

    def run(self) -> int:
        with ExitStack() as stack:
            # Entered first, left last: a kill unwinds the stack, removing its temporaries.
            stack.enter_context(terminate_raises(Terminated))
            target, paths, shown = target_and_inputs(
                self.out_dir, self.inputs, self.options, self.op, stack
            )
            tasks, first = self._plan(paths, target)
            if self.options.dry_run:
                return _dry_run(itertools.chain(first, tasks), tasks, shown, target, self.reporter)
            self.made_in = target.folder, check_folder(target.folder)  # before a cluster starts
            self._open_engine(stack)
            # One file to -o FILE or -o -: nothing said on success (as cp and convert), -v says it.
            self.out_file_run = bool(target.out_file)
            quiet = self.reporter.quiet
            if self.out_file_run and not self.reporter.verbose:
                self.reporter.quiet = True
            status = self._run_planned(paths, target, shown, tasks, first)
            if tasks.error is not None and status not in (130, 143):
                _planning_error(tasks.error, self.reporter, stop=False)
                status = status or 1
            where = target.where(
                self.out_dir,
                written=self.written or self.counts["skipped"],
                paths=tuple(self.written_paths),
            )
            if not target.stdout and self.written_paths not in ([], [target.out_file]):
                self.reporter.quiet = quiet  # what was written is not the file named: said
            self._summarise(where, interrupted=status in (130, 143), stopped=self.store_failed)
            if target.stdout and self.counts["done"]:
                status = _copy_to_stdout(target.out_file, self.reporter) or status
        return status or 0

    def _plan(self, paths: list[str], target: Target):
        """The run's task stream and its first tasks; ends the run if there are none."""
        notes: list[str] = []
        self.listing = dict(
            out_dir=target.folder,
            recursive=self.options.recursive,
            storage_options=self.options.storage_options,
        )
        try:
            by_folder = plan.streams_by_folder(paths, out_file=target.out_file, **self.listing)
        except (OSError, ImportError) as exc:  # MissingExtra is an ImportError
            _planning_error(exc, self.reporter, stop=True)
        options = self.options
        # A file named with -o is the result asked for: replaced if convcli wrote it
        # (a file it did not write is kept, and the run fails naming it), as convert does.
        overwrite = options.overwrite or bool(target.out_file)
        fmt = _run_format(options, target, self.op)
        tasks = plan.TaskStream(
            plan.stream_tasks(
                paths,
                self.op,
                notes=notes,
                fmt=fmt,
                figure=options.figure,
                separate=options.separate,
                overwrite=overwrite,
                max_pixels=options.max_pixels,
                frames=options.frames,
                out_file=target.out_file,
                by_folder=by_folder,
                memory=self._memory(),
                memory_given=options.memory is not None,
                replace_any=options.overwrite and bool(target.out_file),
                **self.listing,
            ),
            # Manifest lines and temporary files that killed runs left where this one writes.
            on_folder=None
            if options.dry_run
            else lambda folder: (
                is_url(folder)
                or (
                    merge_fragments(folder, min_age=STALE_SECONDS),
                    remove_stale_temporaries(folder),
                )
            ),
        )
        # Planned a folder at a time, the first tasks: enough to know whether there are
        # any. Otherwise all of them, which planning has listed already.
        first = list(itertools.islice(tasks, FIRST_TASKS if by_folder else None))
        _planning_error(tasks.error, self.reporter, stop=not first)
        for note in notes:
            self.reporter.note(note)
        if not first:
            self.reporter.say("no input images: nothing done")
            raise _Ended(1)
        if target.out_file:
            check_one_image(first, self.out_dir)
        self.total = len(first) if tasks.finished else None  # else planned a folder at a time
        return tasks, first

    def _memory(self) -> int:
        """The bytes one file's work may take: ``memory``, or a share of what is available."""
        if self.options.memory is not None:
            return self.options.memory

        return memory_budget(self.options.jobs or default_jobs())

    def _open_engine(self, stack: ExitStack) -> None:
        """Open the engine, closed with `stack`; a failure ends the run (exit status 1).

        While it closes, Ctrl-C and SIGTERM are counted (:class:`StopRequests`):
        a request after the run stopped does not cut the closing short.
        """
        closing = ExitStack()
        stack.callback(closing.close)
        stack.callback(self.engine.close)
        stack.callback(lambda: closing.enter_context(self.requests.installed()))
        try:
            self.engine.open()
        except EngineError as exc:
            self.reporter.say(str(exc))
            raise _Ended(1) from None

    def _run_planned(self, paths, target: Target, shown: dict, tasks, first) -> int | None:
        """Run the tasks with the manifest recording what is written; the exit status."""
        if self.total is None and self.reporter.wants_total():
            self.count = inputs.count_in_background(paths, **self.listing)
        self.shown = shown
        if not target.out_file:  # -o FILE and -o - write that one file only
            fmt = _run_format(self.options, target, self.op) or "input"
            self.manifest = Manifest(
                self.op, fmt=fmt, shown=shown, storage_options=self.options.storage_options
            )
        self.reporter.begin(self.total, self.count)
        # A Ctrl-C as the run ends is counted too: its manifest written whole, its parts gone.
        with self.requests.installed():
            try:
                status = self._run_tasks(itertools.chain(first, tasks))
            finally:
                lost = self.manifest.close() if self.manifest else []
                if self.manifest:  # the fragment objects of recorded results are copies now
                    self.engine.records_published(
                        self.manifest.put_folders, self.options.storage_options
                    )
        for line in lost:
            self.reporter.say(line)
        # Outputs without their manifest lines: the run did not do all it says it does.
        return status or (1 if lost else None)

    def _add(self, result) -> None:
        self.counts[result.status] += 1
        self.usage_failed = self.usage_failed or result.usage
        self.store_failed = self.store_failed or bool(result.fatal)
        self.written += len(result.outputs)
        if self.out_file_run:
            self.written_paths.extend(result.outputs)
        if self.manifest is not None and result.records:
            self.manifest.add(result)
        self.engine.result_kept(result)  # a copy of its lines kept on the way is let go
        self.reporter.add(result, self.shown.get(result.source, result.source))
        for hint in result.hints:
            if hint not in self.hints_said:
                self.hints_said.add(hint)
                self.reporter.note(hint)

    def _run_tasks(self, tasks) -> int | None:
        """Run the tasks on the engine, reporting each result; the exit status, or None for 0."""
        engine, requests = self.engine, self.requests
        status, late = None, []

        engine.hooks = ManifestHooks(self.manifest.lines if self.manifest is not None else None)
        with requests.installed():
            results = engine.start(
                tasks, process.process_file, count=self.total, stop_requests=requests
            )
            requests.raise_first = engine.runs_here
            try:
                for result in results:
                    self._add(result)
                    # A stop request here: Ctrl-C ended the file processed in this thread.
                    if (
                        requests()
                        or result.fatal
                        or (self.options.fail_fast and result.status == "failed")
                    ):
                        break
            except (KeyboardInterrupt, Terminated):
                pass  # counted in `requests`
            except EngineError as exc:
                self.reporter.say(str(exc))
                status = 1
            # Files not started are cancelled; the ones running are finished,
            # unless a second Ctrl-C (or kill) asks to stop at once.
            if requests() and engine.running and engine.finishes_running:
                most = f", {engine.finish_seconds:g} s at most" if engine.finish_seconds else ""
                self.reporter.note(
                    f"stopping: finishing {engine.running} file(s) being written{most} "
                    "(Ctrl-C again to stop at once)"
                )
            late = engine.stop()
            for result in late:  # a Ctrl-C is still counted here, not raised mid-record
                self._add(result)
        if engine.stop_note:
            self.reporter.say(engine.stop_note)
        deaths = engine.deaths_note()
        if deaths:  # an error, even though every file was then processed
            self.reporter.say(deaths)
        status = requests.status or status
        if status is None and (self.counts["failed"] or deaths):
            status = 2 if self.usage_failed else 1
        return status

    def _summarise(self, where: str, *, interrupted: bool, stopped: bool = False) -> None:
        """The summary line; `stopped`: by a failure of the store (said, even when quiet)."""
        line = _summary_line(
            self.counts,
            time.monotonic() - self.started,
            where,
            verbose=self.reporter.verbose,
            interrupted=interrupted,
            stopped=stopped,
            total=lambda: (
                self.total if self.total is not None or self.count is None else self.count()
            ),
        )
        self.reporter.end(line, interrupted=interrupted or stopped)


def _copy_to_stdout(path: str, reporter: Reporter) -> int | None:
    """Copy the output file `path` to standard output; 1 if that fails (said), else None."""
    try:
        with open(path, "rb") as f:
            out = stdout_binary()
            try:
                shutil.copyfileobj(f, out)
                out.flush()
            except OSError as exc:
                raise write_failed(exc) from None
    except StreamError as exc:
        reporter.say(str(exc))
        return 1
    return None


def _dry_run(planned, tasks, shown: dict, target: Target, reporter: Reporter) -> int:
    """``--dry-run``: each input's outputs on the standard output; 1 if one cannot be read."""

    if target.stdout:
        shown = {**shown, target.out_file: "-"}

    def echo(line: str) -> None:
        write_text(for_terminal(line) + "\n")

    dry_run = part("dry run").dry_run
    failed = sum(not read for read in dry_run(planned, shown, reporter.say, echo))
    _planning_error(tasks.error, reporter, stop=False)
    return 1 if failed or tasks.error is not None else 0


def _summary_line(
    counts: dict,
    seconds: float,
    where: str,
    *,
    verbose: bool,
    interrupted: bool,
    stopped: bool,
    total,
) -> str:
    """The run's summary: its `counts`, its time and `where` the outputs are; for a run
    `interrupted` or `stopped`, what was left, of the `total()` tasks (None: not known)."""
    c = counts
    line = (
        f"{c['done']} processed, {c['skipped']} skipped, {c['failed']} failed "
        f"in {seconds:.1f} s; {where}"
    )
    if c["skipped"] and not verbose:
        line += "; skipped: outputs exist (--overwrite replaces them, -v lists them)"
    if interrupted or stopped:
        total = total()
        finished = c["done"] + c["skipped"] + c["failed"]
        left = "the rest" if total is None else total - finished
        line = (
            f"{'interrupted' if interrupted else 'stopped'}: {line}; "
            f"{left} not started or not finished"
        )
    return line


def _planning_error(error: BaseException | None, reporter: Reporter, *, stop: bool) -> None:
    """Report an error met listing the inputs: a missing extra is raised (a usage error).

    Other errors (a bucket that cannot be listed, a store that cannot be
    reached: :class:`convcli.io.storage.StoreError`) are one line; with `stop`,
    nothing was done and the run ends with exit status 1.
    """
    if error is None:
        return
    if isinstance(error, MissingExtra):
        raise error
    reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
    where = getattr(error, "filename", None)
    if isinstance(error, StoreError):  # the store's reason says it: unreachable, no credentials
        reporter.say(f"{where}: {reason}")
    else:
        reporter.say(
            f"{where}: cannot list: {reason}" if where else f"cannot list the inputs: {reason}"
        )
    if stop:
        raise _Ended(1)
