"""The command line starting: Ctrl-C while its modules load ends it quietly."""

from __future__ import annotations

import subprocess
import sys

from PIL import Image

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
    proc = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_IMPORT], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "convcli: interrupted\n"
    assert proc.stdout == ""


def test_the_package_loads_nothing_heavy_until_used():
    code = (
        "import sys, convcli; heavy = {'numpy', 'PIL', 'click'} & set(sys.modules); "
        "print(sorted(heavy)); print(convcli.zero_pad.__module__, convcli.__version__ != '')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
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
        proc = subprocess.run(
            [sys.executable, "-c", _BLAS_TIMEOUT_AT_NUMPY_IMPORT],
            capture_output=True,
            text=True,
            timeout=60,
        )
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
    "matplotlib",
    "tifffile",
    "dask",
    "distributed",
    "zarr",
    "fsspec",
)


def test_a_small_file_to_one_output_loads_only_what_it_uses(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", _SMALL_RUN, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # -o FILE: nothing to say on success
    loaded = set(proc.stdout.split())
    assert "convcli.app.process" in loaded  # the run did happen
    with Image.open(tmp_path / "out.png") as written:
        assert written.size == (64, 64)
    assert [name for name in _NOT_FOR_A_SMALL_FILE if name in loaded] == []
