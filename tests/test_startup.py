"""The command line starting: Ctrl-C while its modules load ends it quietly."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
from PIL import Image

import convcli.startup


@pytest.fixture(autouse=True)
def _collector_as_it_was():
    """The tests that start the command line in this process leave the garbage collector
    on, as they found it (the command line turns it off while it starts)."""
    enabled = gc.isenabled()
    yield
    convcli.startup._paused = False
    if enabled:
        gc.enable()


def _python(script: str, *args, timeout: float = 60) -> subprocess.CompletedProcess:
    """`script` run by this Python in a process of its own, with `args` as its sys.argv[1:]."""
    return subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# Raises KeyboardInterrupt in the middle of loading the modules, as a Ctrl-C in
# the first few tenths of a second does, then starts the command line.
_INTERRUPTED_IMPORT = """
import builtins, sys
real_import = builtins.__import__
def interrupting(name, *args, **kwargs):
    if name == "click":
        raise KeyboardInterrupt
    return real_import(name, *args, **kwargs)
builtins.__import__ = interrupting
sys.argv = ["convcli", "kernels"]
import convcli.__main__
convcli.__main__.main()
"""


def test_ctrl_c_while_modules_load_is_one_line_and_status_130():
    proc = _python(_INTERRUPTED_IMPORT)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "convcli: interrupted\n"
    assert proc.stdout == ""


def test_the_package_loads_nothing_heavy_until_used():
    code = (
        "import sys, convcli; heavy = {'numpy', 'PIL', 'click'} & set(sys.modules); "
        "print(sorted(heavy)); print(convcli.zero_pad.__module__, convcli.__version__ != '')"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[]", "convcli.layers.padding True"]


def test_the_command_leaves_its_objects_to_the_exit_and_keeps_its_status(monkeypatch):
    """gc.freeze as the command ends (Python's last collection then skips them), whatever
    the status; the status and the message are the command's."""
    import gc

    import convcli.__main__
    import convcli.cli.main

    frozen = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(1))
    for code in (0, 1, 2):
        monkeypatch.setattr(convcli.cli.main, "main", lambda code=code: sys.exit(code))
        try:
            convcli.__main__.main()
        except SystemExit as exc:
            assert exc.code == code
        else:
            raise AssertionError("no SystemExit")
    assert frozen == [1, 1, 1]


# Records OPENBLAS_THREAD_TIMEOUT as numpy is first imported (when numpy loads OpenBLAS,
# which reads it), then runs `convcli kernels`.
_BLAS_TIMEOUT_AT_NUMPY_IMPORT = """
import builtins, os, sys
seen = []
real_import = builtins.__import__
def watching(name, *args, **kwargs):
    if name == "numpy" and not seen:
        seen.append(os.environ.get("OPENBLAS_THREAD_TIMEOUT"))
    return real_import(name, *args, **kwargs)
builtins.__import__ = watching
sys.argv = ["convcli", "kernels"]
import convcli.__main__
try:
    convcli.__main__.main()
except SystemExit as exc:
    assert not exc.code, exc.code
print(seen)
"""


def test_blas_threads_sleep_at_once_unless_the_environment_says(monkeypatch):
    """OpenBLAS's idle threads would spin for a tenth of a second of CPU after they
    start, in the parent and again in each batch worker: the command asks them to sleep
    at once, before numpy loads, and keeps a value the user set."""
    for given, expected in ((None, "['4']"), ("20", "['20']")):
        if given is None:
            monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT", raising=False)
        else:
            monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", given)
        proc = _python(_BLAS_TIMEOUT_AT_NUMPY_IMPORT)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines()[-1] == expected


# Runs one small conv to -o FILE in this process, then prints the modules it loaded.
_SMALL_RUN = """
import sys
import numpy as np
from PIL import Image
folder = sys.argv[1]
Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), np.uint8)).save(
    folder + "/in.png")
sys.argv = ["convcli", "conv", "-k", "vertical", folder + "/in.png", "-o", folder + "/out.png"]
import convcli.__main__
try:
    convcli.__main__.main()
except SystemExit as exc:
    assert not exc.code, exc.code
print(" ".join(sorted(sys.modules)))
"""

# What a small file's run has no use for, and what each cost its start on a 2-core machine.
_NOT_FOR_A_SMALL_FILE = (
    "multiprocessing",  # the worker processes of -j 2 and more: 8 ms
    "numpy.ma",  # np.percentile's first call: 8 ms
    "threadpoolctl",  # BLAS thread limits for work spread over threads: 2.4 ms
    "socket",  # the claims of stores on object storage: 3 ms
    "xml.etree.ElementTree",  # OME-XML: 5 ms
    "matplotlib",
    "tifffile",
    "dask",
    "distributed",
    "zarr",
    "fsspec",
)


def test_a_small_file_to_one_output_loads_only_what_it_uses(tmp_path):
    proc = _python(_SMALL_RUN, tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # -o FILE: nothing to say on success
    loaded = set(proc.stdout.split())
    assert "convcli.app.process" in loaded  # the run did happen
    with Image.open(tmp_path / "out.png") as written:
        assert written.size == (64, 64)
    assert [name for name in _NOT_FOR_A_SMALL_FILE if name in loaded] == []


# Runs `convcli ARGS` as the installed command does, with a thread still running and an
# exit handler, each leaving a file.
_ENDING = """
import atexit, sys, threading, time
folder = sys.argv[1]
def mark(name):
    open(folder + "/" + name, "w").close()
threading.Thread(target=lambda: (time.sleep(0.2), mark("thread"))).start()
atexit.register(mark, "handler")
sys.argv = ["convcli", *sys.argv[2:]]
import convcli.__main__
convcli.__main__.command_line()
"""


def test_the_command_ends_after_its_threads_and_exit_handlers_with_its_status(tmp_path):
    """The process ends as Python's exit would: status, output, threads and handlers."""
    for args, status in ((["kernels"], 0), (["conv", "-k", "nosuch", "x.png"], 2)):
        for name in ("thread", "handler"):
            (tmp_path / name).unlink(missing_ok=True)
        proc = _python(_ENDING, tmp_path, *args)
        assert proc.returncode == status, proc.stderr
        assert ("vertical" in proc.stdout) == (status == 0)
        assert ("unknown kernel 'nosuch'" in proc.stderr) == (status == 2)
        assert (tmp_path / "thread").exists() and (tmp_path / "handler").exists()


class _Ended(Exception):
    """os._exit, in a test: the status it was given."""


def test_the_command_ends_the_process_once_python_exits_first_steps_are_done(monkeypatch):
    """Streams flushed, threads joined, exit handlers run, then ``os._exit`` with the
    command's status; a stopped run (130, 143), a text status and a stream that cannot be
    flushed are left to Python's exit (``SystemExit`` raised on)."""
    import atexit
    import signal
    import threading

    import convcli.__main__
    import convcli.cli.main

    steps = []
    # A stopped run's handlers for a further signal (main's) are not left in this process.
    monkeypatch.setattr(signal, "signal", lambda signum, handler: steps.append("handler"))
    monkeypatch.setattr(threading, "_shutdown", lambda: steps.append("threads"))
    monkeypatch.setattr(atexit, "_run_exitfuncs", lambda: steps.append("handlers"))
    monkeypatch.setattr(convcli.__main__, "_flushed", lambda: steps.append("flushed") or True)

    def ended(code):
        raise _Ended(code)

    monkeypatch.setattr(convcli.__main__.os, "_exit", ended)
    for code, ends in ((0, 0), (None, 0), (2, 2), (130, None), (143, None), ("text", None)):
        steps.clear()
        monkeypatch.setattr(convcli.cli.main, "main", lambda code=code: sys.exit(code))
        try:
            convcli.__main__.command_line()
        except _Ended as exc:
            assert exc.args == (ends,)
            assert steps == ["flushed", "threads", "handlers", "flushed"]
        except SystemExit as exc:
            assert ends is None and exc.code == code and "threads" not in steps
            assert steps == (["handler"] * 2 if code in (130, 143) else [])
    monkeypatch.setattr(convcli.__main__, "_flushed", lambda: False)
    monkeypatch.setattr(convcli.cli.main, "main", lambda: sys.exit(0))
    with pytest.raises(SystemExit):  # a stream that cannot be flushed: Python's exit says so
        convcli.__main__.command_line()


# Runs a batch of two files in this process through the command line (or its dry run),
# and prints whether the garbage collector was on as the run began, while it planned,
# and while it processed each file (and whether start-up's objects were frozen by then).
_COLLECTOR_DURING_A_RUN = """
import gc, os, sys
import numpy as np
from PIL import Image
folder = sys.argv[1]
for i in range(2):
    Image.fromarray(np.full((8, 8), 40 * i, np.uint8)).save(f"{folder}/in{i}.png")
import convcli.__main__
from convcli.app import process, run
seen = []
running = run.run_batch
def watched_run(*args, **kwargs):
    seen.append(("run", gc.isenabled()))
    return running(*args, **kwargs)
run.run_batch = watched_run
planning = run._BatchRun._plan
def watched_plan(self, *args):
    seen.append(("plan", gc.isenabled()))
    return planning(self, *args)
run._BatchRun._plan = watched_plan
processing = process.process_file
def watched_file(task):
    seen.append(("file", gc.isenabled(), gc.get_freeze_count() > 0))
    return processing(task)
process.process_file = watched_file
sys.argv = ["convcli", "conv", "-k", "vertical", folder, "-o", folder + "/out", "-q", "-j", "1"]
sys.argv += os.environ.get("EXTRA", "").split()  # -n: the dry run
try:
    convcli.__main__.main()
except SystemExit as exc:
    assert not exc.code, exc.code
print(seen, gc.isenabled())
"""


@pytest.mark.parametrize("extra", ["", "-n"], ids=["run", "dry-run"])
def test_start_up_runs_without_the_collector_and_the_work_with_it(tmp_path, extra, monkeypatch):
    """The collections that start-up's allocations trigger free nothing (20 ms of a
    batch's start): the collector is off while the modules load, then on, with start-up's
    objects frozen out of its sight, for planning and the work, and in a dry run."""
    monkeypatch.setenv("EXTRA", extra)
    proc = _python(_COLLECTOR_DURING_A_RUN, tmp_path)
    assert proc.returncode == 0, proc.stderr
    files = "" if extra else ", ('file', True, True), ('file', True, True)"
    assert proc.stdout.splitlines()[-1] == f"[('run', False), ('plan', True){files}] True"
    expected = [] if extra else ["in0_conv-vertical-sum.png", "in1_conv-vertical-sum.png"]
    assert sorted(p.name for p in (tmp_path / "out").glob("*.png")) == expected


def test_the_collector_is_turned_back_on_only_where_start_up_turned_it_off():
    """Used as a library, convcli leaves the collector as its caller set it."""
    gc.disable()
    try:
        convcli.startup.startup_over()
        assert not gc.isenabled()
        convcli.startup.pause_collection()  # already off: not convcli's to turn on
        convcli.startup.startup_over()
        assert not gc.isenabled()
    finally:
        gc.enable()
    convcli.startup.pause_collection()
    assert not gc.isenabled()
    frozen = gc.get_freeze_count()
    try:
        convcli.startup.startup_over()
        assert gc.isenabled()
        assert gc.get_freeze_count() >= frozen
    finally:
        gc.unfreeze()
