"""The batch run from Python (convcli.app.run), the Engine interface, and convcli's errors."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import numpy as np
import pytest
from helpers import (
    assert_same_file,
    hide_modules,
    make_image,
    make_truncated_png,
    manifest_records,
    names,
    run,
)

from convcli.app import ops
from convcli.app.manifest import Manifest
from convcli.app.run import Reporter, RunOptions, run_batch
from convcli.cli.options import common_options
from convcli.engines import base as engines
from convcli.engines.base import Engine, EngineSettings, make_engine
from convcli.engines.processes import FileResult, ProcessEngine, run_guarded
from convcli.errors import MissingExtra, OptionError
from convcli.kernels import parse_kernel_spec


class Recorder(Reporter):
    """A reporter that keeps every result and line instead of printing them."""

    def __init__(self, **flags):
        super().__init__(**flags)
        self.results: list[FileResult] = []
        self.lines: list[str] = []

    def say(self, line: str) -> None:
        self.lines.append(line)

    def add(self, result, source: str) -> None:
        self.results.append(result)
        super().add(result, source)

    def statuses(self) -> dict[str, str]:
        return {r.source.rsplit("/", 1)[-1]: r.status for r in self.results}


def _conv():
    return ops.ConvOp((parse_kernel_spec("sobel-x"),))


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    make_image(d / "a.png", "RGB", seed=1)
    make_image(d / "b.png", "L", seed=2)
    return d


def test_a_script_runs_a_folder_as_the_command_line_does(folder, tmp_path):
    ours = tmp_path / "ours"
    report = Recorder()
    status = run_batch(_conv(), [str(folder)], RunOptions(out_dir=str(ours), jobs=1), report)
    assert status == 0
    assert report.statuses() == {"a.png": "done", "b.png": "done"}
    assert report.lines[-1].startswith("2 processed, 0 skipped, 0 failed in ")
    theirs = tmp_path / "theirs"
    assert run("conv", "-k", "sobel-x", folder, "-o", theirs).exit_code == 0
    assert names(ours) == names(theirs)
    for name in names(theirs):
        assert_same_file(ours / name, theirs / name)


def test_skips_overwrites_and_failures_follow_the_command_lines_rules(folder, tmp_path):
    out = str(tmp_path / "out")
    assert run_batch(_conv(), [str(folder)], RunOptions(out_dir=out), Recorder()) == 0

    again = Recorder()
    assert run_batch(_conv(), [str(folder)], RunOptions(out_dir=out), again) == 0
    assert again.statuses() == {"a.png": "skipped", "b.png": "skipped"}
    assert "skipped: outputs exist" in again.lines[-1]

    replaced = Recorder()
    options = RunOptions(out_dir=out, overwrite=True)
    assert run_batch(_conv(), [str(folder)], options, replaced) == 0
    assert replaced.statuses() == {"a.png": "done", "b.png": "done"}

    make_truncated_png(folder / "c.png")
    failed = Recorder()
    assert run_batch(_conv(), [str(folder)], RunOptions(out_dir=out), failed) == 1
    assert failed.statuses()["c.png"] == "failed"
    assert any(line.startswith(f"{folder / 'c.png'}: ") for line in failed.lines)


def test_nothing_to_do_is_exit_status_1(tmp_path):
    (tmp_path / "empty").mkdir()
    report = Recorder()
    options = RunOptions(out_dir=str(tmp_path / "out"))
    assert run_batch(_conv(), [str(tmp_path / "empty")], options, report) == 1
    assert report.lines[-1] == "no input images: nothing done"


def test_options_that_cannot_work_raise_before_anything_is_written(folder, tmp_path):
    one_file = str(tmp_path / "one.png")
    with pytest.raises(OptionError) as caught:
        run_batch(_conv(), [str(folder)], RunOptions(out_dir=one_file), Recorder())
    assert caught.value.option == "-o"
    assert "2 input images" in str(caught.value)
    with pytest.raises(OptionError) as caught:
        run_batch(
            _conv(),
            [str(folder)],
            RunOptions(out_dir=str(tmp_path / "o"), files_per_task=4),
            Recorder(),
        )
    assert caught.value.option == "--files-per-task"
    with pytest.raises(OptionError) as caught:
        Recorder(quiet=True, verbose=True)
    assert caught.value.option is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


# --- engines -----------------------------------------------------------------------------------


class SerialEngine(Engine):
    """The smallest engine: every task in this thread, in order (what adding one takes)."""

    name = "serial"

    def __init__(self, settings: EngineSettings):
        super().__init__(settings)
        self.opened = self.closed = False

    @property
    def shares_memory(self) -> bool:
        return True

    def open(self) -> None:
        self.opened = True

    def close(self) -> None:
        self.closed = True

    def start(self, tasks, worker, *, count=None, stop_requests=lambda: 0) -> Iterator:
        return (run_guarded(worker, task) for task in tasks)

    def stop(self, *, force: bool = False) -> list:
        return []

    @property
    def running(self) -> int:
        return 0


class StoppedEngine(SerialEngine):
    """Runs the first task, is then stopped (a Ctrl-C), and finishes the others in stop(),
    as an engine whose workers finish the files they are writing."""

    name = "stopped"

    @property
    def runs_here(self) -> bool:
        return False

    def start(self, tasks, worker, *, count=None, stop_requests=lambda: 0) -> Iterator:
        self.tasks, self.worker = list(tasks), worker
        first = run_guarded(worker, self.tasks[0])
        os.kill(os.getpid(), signal.SIGINT)  # counted: the run stops after this result
        return iter([first])

    def stop(self, *, force: bool = False) -> list:
        return [run_guarded(self.worker, task) for task in self.tasks[1:]]

    @property
    def running(self) -> int:
        return len(self.tasks) - 1


def test_a_ctrl_c_while_the_last_results_are_recorded_loses_none(folder, tmp_path, monkeypatch):
    monkeypatch.setitem(engines.ENGINES, "stopped", f"{__name__}:StoppedEngine")
    real_add = Manifest.add
    added = []

    def add_then_ctrl_c(self, result):
        real_add(self, result)
        added.append(result.source)
        if len(added) == 2:  # the first result stop() returned: Ctrl-C again
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(Manifest, "add", add_then_ctrl_c)
    out = tmp_path / "out"
    options = RunOptions(out_dir=str(out), engine="stopped")
    try:
        status = run_batch(_conv(), [str(folder)], options, Recorder())
    except KeyboardInterrupt:
        pytest.fail("the second Ctrl-C was raised while the last results were recorded")
    assert status == 130
    written = sorted(p.name for p in out.glob("*.png"))
    assert len(added) == 2 and len(written) == 2
    assert sorted(record["output"] for record in manifest_records(out)) == written


def test_an_engine_is_one_class_and_one_entry(folder, tmp_path, monkeypatch):
    monkeypatch.setitem(engines.ENGINES, "serial", f"{__name__}:SerialEngine")
    made = []
    real_make = engines.make_engine

    def recording(name, settings):
        made.append(real_make(name, settings))
        return made[-1]

    monkeypatch.setattr("convcli.app.run.make_engine", recording)
    out = tmp_path / "serial"
    options = RunOptions(out_dir=str(out), engine="serial")
    assert run_batch(_conv(), [str(folder)], options, Recorder()) == 0
    (engine,) = made
    assert isinstance(engine, SerialEngine) and engine.opened and engine.closed
    reference = tmp_path / "processes"
    assert (
        run_batch(_conv(), [str(folder)], RunOptions(out_dir=str(reference), jobs=2), Recorder())
        == 0
    )
    assert names(out) == names(reference)
    for name in names(reference):
        if name.endswith(".png"):
            assert_same_file(out / name, reference / name)


def test_the_engine_option_lists_the_engines_of_the_registry():
    @common_options
    def command(**kwargs):
        pass

    (option,) = [p for p in command.__click_params__ if p.name == "engine"]
    assert list(option.type.choices) == list(engines.ENGINES)


def test_engines_are_chosen_and_checked_by_their_own_rules():
    assert isinstance(make_engine(None, EngineSettings()), ProcessEngine)
    with pytest.raises(OptionError) as caught:
        make_engine("processes", EngineSettings(scheduler="tcp://127.0.0.1:8786"))
    assert caught.value.option == "--scheduler"
    with pytest.raises(OptionError) as caught:
        make_engine("nosuch", EngineSettings())
    assert caught.value.option == "--engine"
    in_memory = make_engine(None, EngineSettings(jobs=4, in_memory="memory://x"))
    assert in_memory.shares_memory and in_memory.runs_here


def test_processes_engine_runs_no_more_workers_than_files():
    engine = make_engine("processes", EngineSettings(jobs=8))
    results = list(engine.start([1, 2], _double_it, count=2))
    assert sorted(r.message for r in results) == ["2", "4"]
    assert engine.jobs == 2
    assert engine.stop() == [] and engine.deaths_note() is None


def _double_it(task: int) -> FileResult:
    return FileResult(str(task), "done", str(2 * task))


def test_a_type_error_inside_convcli_is_an_internal_error(folder, tmp_path, monkeypatch):
    def broken(self, pic):
        raise TypeError("unsupported operand")

    monkeypatch.setattr(ops.ConvOp, "compute", broken)
    result = run(
        "conv", "-k", "sobel-x", "-j", "1", folder / "a.png", "-o", tmp_path / "o", "--debug"
    )
    assert result.exit_code == 1
    engine, *lines = result.stderr.splitlines()
    assert engine.startswith("convcli: engine: ")  # --debug names the engine first
    assert lines[0] == (
        f"convcli: {folder / 'a.png'}: internal error: TypeError: unsupported operand"
    )
    assert "Traceback (most recent call last)" in result.stderr
    quiet = run("conv", "-k", "sobel-x", "-j", "1", folder / "b.png", "-o", tmp_path / "o")
    assert "Traceback" not in quiet.stderr and "internal error: TypeError" in quiet.stderr


# --- errors ------------------------------------------------------------------------------------


def test_every_missing_extra_is_one_type_naming_its_extra(monkeypatch):
    from convcli.engines import dask as cluster
    from convcli.io import storage

    hide_modules(monkeypatch, "distributed", "fsspec")
    with pytest.raises(MissingExtra) as dask:
        cluster.connect("tcp://127.0.0.1:8786")
    assert dask.value.extra == "dask" and "pip install 'convcli[dask]'" in str(dask.value)
    with pytest.raises(MissingExtra) as s3:
        storage.filesystem("s3://bucket/photos")
    assert s3.value.extra == "s3" and "pip install 'convcli[s3]'" in str(s3.value)
    assert isinstance(s3.value, ImportError)


def test_a_missing_extra_is_a_usage_error_on_the_command_line(folder, tmp_path, monkeypatch):
    hide_modules(monkeypatch, "distributed")
    result = run("pool", folder, "-o", tmp_path / "out", "--scheduler", "local")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        "convcli: --scheduler needs Dask distributed: pip install 'convcli[dask]' (see "
    )
    assert not (tmp_path / "out").exists()


def test_reporter_lines_match_the_results(folder, tmp_path):
    report = Recorder(verbose=True)
    assert (
        run_batch(_conv(), [str(folder / "a.png")], RunOptions(out_dir=str(tmp_path)), report) == 0
    )
    assert report.lines[0] == f"{folder / 'a.png'}: done, 1 written"
    written = np.asarray(report.results[0].outputs)
    assert written.size == 1 and written[0].endswith("a_conv-sobel-x-sum.png")


def test_the_dask_engine_without_a_scheduler_starts_a_local_cluster(monkeypatch):
    from convcli.engines import dask as cluster

    asked = []
    monkeypatch.setattr(cluster, "connect", lambda *args, **kw: asked.append((args, kw)) or "c")
    monkeypatch.setattr(cluster, "close", lambda client: asked.append(("closed", client)))
    with make_engine("dask", EngineSettings(jobs=3)) as engine:
        assert engine.client == "c" and not engine.shares_memory
    assert asked == [(("local", None), {"jobs": 3}), ("closed", "c")]
    with pytest.raises(OptionError) as caught:
        make_engine(None, EngineSettings(scheduler="local", in_memory="memory://photos"))
    assert caught.value.option == "--scheduler" and "memory://photos" in str(caught.value)


def test_every_engine_of_the_registry_is_importable_and_an_engine():
    # An entry added alone appeared in --help and gave a ModuleNotFoundError traceback.
    import importlib

    from convcli.engines.base import ENGINES

    for name, where in ENGINES.items():
        module, _, cls = where.partition(":")
        engine = getattr(importlib.import_module(module), cls)
        assert issubclass(engine, Engine), name
