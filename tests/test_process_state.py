"""Files processed at once on threads of one process keep their own messages and pixel limits."""

from __future__ import annotations

import os
import threading
import warnings
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import make_image
from PIL import Image

from convcli.app import outputs, process
from convcli.app.ops import ConvOp
from convcli.app.plan import find_inputs, plan_tasks
from convcli.app.process import process_file
from convcli.engines import process_state as _process_state
from convcli.kernels import get_kernel


def _task(src: Path, out: Path, **changes):
    (task,) = plan_tasks(find_inputs([src], out_dir=out).files, ConvOp((get_kernel("vertical"),)))
    return replace(task, **changes)


def _in_threads(tasks: dict[str, object], start_next=lambda name: None) -> dict:
    """``process_file`` of each task on its own thread, named by its key; their results.

    `start_next(name)` runs after the thread `name` is started, before the next one.
    """
    results, errors = {}, []

    def work(name, task):
        try:
            results[name] = process_file(task)
        except BaseException as exc:  # reported in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=item, name=item[0]) for item in tasks.items()]
    for thread in threads:
        thread.start()
        start_next(thread.name)
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    return results


def _then(call, after):
    """`call`, which runs `after` when it returns or raises."""

    def wrapped(*args, **kwargs):
        try:
            return call(*args, **kwargs)
        finally:
            after()

    return wrapped


def _said(message: str) -> list[str]:
    return message.split("libraries said: ", 1)[1].split("; ")


def test_threads_keep_their_own_library_messages(tmp_path, monkeypatch):
    sources = {
        name: make_image(tmp_path / f"{name}.png", "RGB", seed=i) for i, name in enumerate("ab")
    }
    both_computing = threading.Barrier(2, timeout=10)
    real_open, real_save, real_compute = process.open_image, outputs.save_levels, ConvOp.compute
    limits_while_open = []

    @contextmanager
    def chatty_open(path, **kwargs):
        name = Path(path).stem
        os.write(2, f"decoder: about {name}\n".encode())
        warnings.warn(f"reader: about {name}", UserWarning, stacklevel=1)
        with real_open(path, **kwargs) as source:
            limits_while_open.append(Image.MAX_IMAGE_PIXELS)
            yield source

    def chatty_save(path, *args, **kwargs):
        os.write(2, f"encoder: about {Path(path).name.split('_')[0]}\n".encode())
        return real_save(path, *args, **kwargs)

    def computing(self, pic):
        both_computing.wait()  # both files are between decoding and writing
        warnings.warn(f"compute: about {threading.current_thread().name}", stacklevel=1)
        return real_compute(self, pic)

    monkeypatch.setattr(process, "open_image", chatty_open)
    monkeypatch.setattr(outputs, "save_levels", chatty_save)
    monkeypatch.setattr(ConvOp, "compute", computing)
    results = _in_threads(
        {
            name: _task(src, tmp_path / "out", max_pixels=10_000 * (i + 1))
            for i, (name, src) in enumerate(sources.items())
        }
    )
    for name, result in results.items():
        assert result.status == "done", result.message
        assert len(result.outputs) == 1
        said = _said(result.message)
        assert sorted(said) == sorted(
            f"{step}: about {name}" for step in ("decoder", "encoder", "reader", "compute")
        ), said
    # Pillow's limit is one for the process: never set to a file's own.
    assert limits_while_open == [None, None]
    assert Image.MAX_IMAGE_PIXELS is None


def test_a_pixel_limit_stays_with_its_file(tmp_path, monkeypatch):
    """A low limit on one thread's file, while another thread decodes a larger image."""
    low = make_image(tmp_path / "low.png", "RGB", size=(30, 30))  # 900 pixels, its limit 1,000
    high = tmp_path / "high.tiff"  # 14,400 pixels, its limit 20,000: over twice the other's
    Image.fromarray(np.zeros((120, 120, 3), np.uint8)).save(high)
    over = make_image(tmp_path / "over.png", "RGB", size=(40, 40))  # the low limit's, refused
    opened = {name: threading.Event() for name in ("low", "high")}
    high_decoded = threading.Event()
    real_open = process.open_image

    @contextmanager
    def interleaved_open(path, **kwargs):
        """Each file stays open while the other is opened and decoded, where it can."""
        name = Path(path).stem
        with real_open(path, **kwargs) as source:
            opened[name].set()
            if name == "high":
                opened["low"].wait(0.5)
                source.read = _then(source.read, high_decoded.set)
            else:
                high_decoded.wait(0.5)
            yield source

    monkeypatch.setattr(process, "open_image", interleaved_open)
    tasks = {
        "high": _task(high, tmp_path / "out", max_pixels=20_000),
        "low": _task(low, tmp_path / "out", max_pixels=1000),
    }
    results = _in_threads(tasks, start_next=lambda name: opened[name].wait(10))
    assert results["high"].status == "done", results["high"].message
    assert results["low"].status == "done", results["low"].message
    refused = process_file(_task(over, tmp_path / "out", max_pixels=1000))
    assert refused.status == "failed"
    assert refused.message == (
        "image is 40x40 = 1,600 pixels, over the limit of 1,000 (raise it with --max-pixels)"
    )
    assert Image.MAX_IMAGE_PIXELS is None


def test_other_threads_warnings_go_where_they_went(tmp_path):
    inside, done = threading.Event(), threading.Event()
    said: list[str] = []

    def gather():
        with _process_state.library_messages(said):
            warnings.warn("from the file's thread", stacklevel=1)
            inside.set()
            done.wait(10)

    thread = threading.Thread(target=gather)
    thread.start()
    try:
        assert inside.wait(10)
        with pytest.raises(UserWarning, match="not a file's"):  # pytest's "error" filter
            warnings.warn("not a file's", stacklevel=1)
    finally:
        done.set()
        thread.join(10)
    assert said == ["from the file's thread"]


def test_sections_exclude_each_other():
    order = []
    first_inside, release = threading.Event(), threading.Event()

    def hold():
        with _process_state.library_section():
            order.append("first in")
            first_inside.set()
            release.wait(10)
            order.append("first out")

    thread = threading.Thread(target=hold)
    thread.start()
    assert first_inside.wait(10)
    timer = threading.Timer(0.2, release.set)
    timer.start()
    with _process_state.library_section():
        order.append("second in")
    thread.join(10)
    assert order == ["first in", "first out", "second in"]


# A worker's decoder that writes to fd 2, as libtiff does, naming the file it reads.
_CHATTY_DECODER = """
import os
from convcli.app import process

_open_image = getattr(process.open_image, "real", process.open_image)  # Dask may run it twice


def _chatty(path, **kwargs):
    os.write(2, f"decoder: reading {os.path.basename(path)}\\n".encode())
    return _open_image(path, **kwargs)


_chatty.real = _open_image
process.open_image = _chatty
"""

# An EXIF block cut short: Pillow warns "Corrupt EXIF data. Expecting to read 12 bytes but
# only got N." with N the bytes left of its one entry (0 to 10).
_EXIF_HEAD = b"Exif\x00\x00MM\x00\x2a\x00\x00\x00\x08\x00\x05"
_EXIF_ENTRY = b"\x01\x12\x00\x03\x00\x00\x00\x01\x00\x06\x00\x00"


def _photos(folder: Path, prefix: str, sizes) -> dict[Path, str]:
    """JPEGs with EXIF cut short, each by its own amount; each one's EXIF warning."""
    folder.mkdir()
    notes = {}
    for i, size in enumerate(sizes):
        left = 2 * (i % 6)
        path = folder / f"{prefix}{i}.jpg"
        Image.new("RGB", size, (10 * i, 20, 30)).save(path, exif=_EXIF_HEAD + _EXIF_ENTRY[:left])
        notes[path] = f"Corrupt EXIF data. Expecting to read 12 bytes but only got {left}."
    return notes


@pytest.mark.cluster
def test_two_runs_on_one_two_thread_worker_keep_their_notes_and_limits(tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    # The worker's own log lines go to its fd 2 from another thread; one written while a
    # file's section is held would be that file's (see convcli.engines.process_state).
    monkeypatch.setenv("DASK_LOGGING__DISTRIBUTED", "warning")
    import subprocess
    import sys

    from helpers import DaskProcesses, names

    preload = tmp_path / "chatty_decoder.py"
    preload.write_text(_CHATTY_DECODER)
    sizes = [(16, 12), (120, 120)] * 4  # 14,400 pixels: over 5,000 (and twice it), under 20,000
    low = _photos(tmp_path / "low", "low", sizes)
    high = _photos(tmp_path / "high", "high", sizes)
    cluster = DaskProcesses(tmp_path, 1, preload=preload, nthreads=2)
    try:
        runs = {
            limit: subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "convcli",
                    "conv",
                    "-k",
                    "vertical",
                    str(folder),
                    "-o",
                    str(tmp_path / f"out-{limit}"),
                    "--scheduler",
                    cluster.address,
                    "--max-pixels",
                    str(limit),
                    "--files-per-task",
                    "1",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for limit, folder in ((5000, tmp_path / "low"), (20_000, tmp_path / "high"))
        }
        stderr = {limit: run.communicate(timeout=120)[1] for limit, run in runs.items()}
    finally:
        cluster.close()
    assert runs[20_000].returncode == 0, stderr[20_000]
    assert runs[5000].returncode == 1, stderr[5000]
    refused = (
        "image is 120x120 = 14,400 pixels, over the limit of 5,000 (raise it with --max-pixels); "
    )
    expected = [
        f"convcli: {path}: {refused if run == 'low' and size == (120, 120) else ''}"
        f"libraries said: decoder: reading {path.name}; {exif}"
        for run, notes in (("low", low), ("high", high))
        for (path, exif), size in zip(notes.items(), sizes, strict=True)
    ]
    assert "8 processed, 0 skipped, 0 failed" in stderr[20_000].splitlines()[-1]
    assert "4 processed, 0 skipped, 4 failed" in stderr[5000].splitlines()[-1]
    lines = [line for limit in runs for line in stderr[limit].splitlines()[:-1]]
    assert sorted(lines) == sorted(expected)
    assert len(names(tmp_path / "out-20000")) == 8
    assert names(tmp_path / "out-5000") == [f"low{i}_conv-vertical-sum.png" for i in (0, 2, 4, 6)]


def test_fd2_is_put_back_where_a_stop_cut_a_sections_restoring_short(monkeypatch):
    """A Ctrl-C that lands as a library section's ``finally`` begins skipped its restoring
    of fd 2: the run's own lines, its summary among them, then went to a file's capture
    and the run ended 130 with nothing said. The file's guard puts fd 2 back."""

    from convcli.engines import process_state
    from convcli.engines.processes import run_guarded

    before = os.fstat(2)
    real_restore = process_state.restore_stderr

    def stopped_before_restoring():
        raise KeyboardInterrupt

    monkeypatch.setattr(process_state, "restore_stderr", stopped_before_restoring)

    def worker(task):
        with process_state.library_messages([]), process_state.library_section():
            os.write(2, b"")
        return None

    with pytest.raises(KeyboardInterrupt):
        worker(None)
    assert os.fstat(2).st_ino != before.st_ino  # left pointing at the capture
    monkeypatch.setattr(process_state, "restore_stderr", real_restore)
    run_guarded(lambda task: None, None)
    assert (os.fstat(2).st_dev, os.fstat(2).st_ino) == (before.st_dev, before.st_ino)


def test_fd2_is_put_back_where_a_stop_lands_inside_the_restoring(monkeypatch):
    """A Ctrl-C delivered just before the restoring holds the signals is handled inside it
    (Python runs its handler at the next instruction, mask or not): the fd it was putting
    back must stay recorded until fd 2 points there again, or fd 2 is left at the capture."""
    from convcli.engines import process_state

    before = os.fstat(2)
    real_dup2, stops = os.dup2, []

    def dup2_stopped_once(fd, fd2, *args, **kwargs):
        if fd2 == 2 and not stops:
            stops.append(fd)
            raise KeyboardInterrupt  # as the restoring begins to put fd 2 back
        return real_dup2(fd, fd2, *args, **kwargs)

    kept = os.dup(2)  # to put the test's own fd 2 back, whatever happens
    try:
        with process_state.library_messages([]):
            section = process_state.library_section()
            section.__enter__()
            assert os.fstat(2).st_ino != before.st_ino  # at the capture
            monkeypatch.setattr(os, "dup2", dup2_stopped_once)
            with pytest.raises(KeyboardInterrupt):
                section.__exit__(None, None, None)
            monkeypatch.setattr(os, "dup2", real_dup2)
            process_state.restore_stderr()  # the file's guard, as run_guarded calls it
        after = os.fstat(2)
    finally:
        os.dup2(kept, 2)
        os.close(kept)
    assert stops and (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)
