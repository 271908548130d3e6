"""Batch runs of a folder: parallel jobs, progress and summary, failures, nothing lost."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    MANIFEST,
    digests,
    interrupt,
    make_bomb_png,
    make_copies,
    make_folder,
    make_image,
    make_truncated_png,
    manifest_records,
    names,
    outputs_in,
    run,
    wait_until,
)
from PIL import Image

from convcli import conv_forward
from convcli.app import ops, plan, process
from convcli.engines import pool as local_pool
from convcli.engines import processes as batch
from convcli.engines.processes import FileResult, iter_results, run_guarded
from convcli.io.image_files import save_levels
from convcli.io.safeio import TEMP_SUFFIX

VERTICAL = np.array([[1, 0, -1]] * 3, dtype=np.float32)


@pytest.fixture
def mixed(tmp_path):
    """Good images in nested subfolders, and broken files beside them."""
    d = tmp_path / "in"
    (d / "sub" / "deeper").mkdir(parents=True)
    make_image(d / "a.png", "RGB", seed=1)
    make_image(d / "photo.png", "RGB", seed=2)
    make_image(d / "photo.webp", "RGB", seed=3)
    make_image(d / "sub" / "b.png", "L", seed=4)
    make_image(d / "sub" / "deeper" / "c.tif", "RGB", seed=5)
    (d / "empty.png").write_bytes(b"")
    (d / "text.jpg").write_text("this is not a JPEG")
    make_truncated_png(d / "sub" / "half.png")
    make_bomb_png(d / "sub" / "bomb.png")
    make_image(d / "sub" / "deeper" / "tiny.png", "RGB", size=(2, 2))
    jpeg = d / "sub" / "corrupt.jpg"
    make_image(jpeg, "RGB", seed=6)
    data = bytearray(jpeg.read_bytes())
    data[200:260] = bytes(60)  # garbage in the scan data
    jpeg.write_bytes(bytes(data[: len(data) * 2 // 3]))
    return d


GOOD = ["a.png", "photo.png", "photo.webp", "sub/b.png", "sub/deeper/c.tif"]
BAD = [
    "empty.png",
    "text.jpg",
    "sub/half.png",
    "sub/bomb.png",
    "sub/deeper/tiny.png",
    "sub/corrupt.jpg",
]


def test_every_good_file_processed_every_bad_one_named(mixed, tmp_path):
    out = tmp_path / "out"
    before = digests(mixed)
    result = run("conv", "-k", "vertical", "--pad", "valid", "-r", mixed, "-o", out, "--jobs", 2)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    *failed, summary = result.stderr.splitlines()
    assert all(line.startswith("convcli: ") for line in failed)
    for name in BAD:
        assert sum(str(mixed / name) in line for line in failed) == 1, (name, result.stderr)
    assert len(failed) == len(BAD), result.stderr
    assert f"{len(GOOD)} processed, 0 skipped, {len(BAD)} failed" in summary
    for name in GOOD:
        src = mixed / name
        stem = {"photo.png": "photo-png", "photo.webp": "photo-webp"}.get(src.name, src.stem)
        written = out / Path(name).parent / f"{stem}_conv-vertical-p0-sum.png"
        with Image.open(src) as im, Image.open(written) as res:
            assert res.size == (im.width - 2, im.height - 2)
    assert digests(mixed) == before  # inputs untouched


def test_npy_values_in_a_parallel_run(mixed, tmp_path):
    out = tmp_path / "out"
    run(
        "conv",
        "-k",
        "vertical",
        "--border",
        "constant",
        mixed / "a.png",
        mixed / "photo.png",
        "-o",
        out,
        "--format",
        "npy",
        "-j",
        2,
    )
    for stem, name in (("a", "a.png"), ("photo", "photo.png")):
        with Image.open(mixed / name) as im:
            pixels = np.asarray(im, dtype=np.float32)[None]
        expected, _ = conv_forward(
            pixels,
            np.repeat(VERTICAL[:, :, None, None], 3, 2),
            np.zeros((1, 1, 1, 1), np.float32),
            {"stride": 1, "pad": 1},
        )
        np.testing.assert_array_equal(
            np.load(out / f"{stem}_conv-vertical-Bconstant-sum.npy"), expected[0]
        )


def test_rerun_skips_and_overwrite_replaces(mixed, tmp_path):
    out = tmp_path / "out"
    args = ["conv", "-k", "vertical", "--pad", "valid", "-r", mixed, "-o", out]
    first = run(*args)
    assert first.exit_code == 1
    target = out / "a_conv-vertical-p0-sum.png"
    good_bytes = target.read_bytes()
    # A result from some earlier, different run (convcli's: --overwrite may replace it).
    save_levels(target, np.zeros((2, 2), np.uint8), fmt="png", overwrite=True)
    stale = target.read_bytes()
    again = run(*args)
    assert f"0 processed, {len(GOOD)} skipped, {len(BAD)} failed" in again.stderr
    assert target.read_bytes() == stale
    forced = run(*args, "--overwrite")
    assert f"{len(GOOD)} processed, 0 skipped, {len(BAD)} failed" in forced.stderr
    assert target.read_bytes() == good_bytes


def test_jobs_2_writes_byte_identical_outputs_to_jobs_1(mixed, tmp_path):
    args = [
        "conv",
        "-k",
        "sobel-x",
        "-k",
        "edge",
        "--channels",
        "each",
        "-r",
        mixed,
        "--figure",
        "-q",
    ]
    run(*args, "-o", tmp_path / "one", "--jobs", 1)
    run(*args, "-o", tmp_path / "two", "--jobs", 2)
    one, two = digests(tmp_path / "one"), digests(tmp_path / "two")
    # Five colour images (with tiny.png, which pad "same" handles) give 2 kernels x
    # (3 channels + the colour image) + a grid each; the grey b.png gives 2 + 1.
    assert len(one) == 5 * 9 + 3
    assert one == two


def test_same_stem_inputs_both_keep_their_results(mixed, tmp_path):
    out = tmp_path / "out"
    run("pool", mixed / "photo.png", mixed / "photo.webp", "-o", out, "--format", "npy")
    a = np.load(out / "photo-png_pool-max-f2-s2.npy")
    b = np.load(out / "photo-webp_pool-max-f2-s2.npy")
    assert not np.array_equal(a, b)


def test_fail_fast_stops_at_the_first_failure(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    make_image(d / "a.png", "RGB")
    (d / "b.png").write_bytes(b"")
    make_image(d / "c.png", "RGB")
    result = run("pool", d, "-o", tmp_path / "out", "--jobs", 1, "--fail-fast")
    assert result.exit_code == 1
    assert "1 processed, 0 skipped, 1 failed" in result.stderr
    assert (tmp_path / "out" / "a_pool-max-f2-s2.png").exists()
    assert not (tmp_path / "out" / "c_pool-max-f2-s2.png").exists()


def test_verbose_quiet_and_summary(mixed, tmp_path):
    verbose = run("pool", mixed / "a.png", mixed / "empty.png", "-o", tmp_path / "v", "-v")
    lines = verbose.stderr.splitlines()
    assert any(str(mixed / "a.png") in line and "done" in line for line in lines)
    assert any(str(mixed / "empty.png") in line for line in lines)
    assert lines[-1].startswith("convcli: 1 processed, 0 skipped, 1 failed in ")
    assert " s; outputs in " in lines[-1]
    quiet = run("pool", mixed / "a.png", mixed / "empty.png", "-o", tmp_path / "q", "-q")
    assert quiet.exit_code == 1
    assert quiet.stderr.splitlines() == [
        f"convcli: {mixed / 'empty.png'}: " + quiet.stderr.split(": ", 2)[2].strip()
    ]
    assert quiet.stdout == ""


def test_no_progress_bar_when_stderr_is_not_a_terminal(mixed, tmp_path):
    result = run("pool", mixed, "-o", tmp_path / "out")
    assert "[#" not in result.stderr and "files/s" not in result.stderr


def test_unexpected_error_is_one_line_and_debug_shows_the_traceback(tmp_path, monkeypatch):
    src = make_image(tmp_path / "a.png", "RGB")

    def broken(task):
        raise RuntimeError("boom")

    monkeypatch.setattr("convcli.app.process.process_file", broken)
    plain = run("pool", src, "-o", tmp_path / "out", "-q", "-j", 1)
    assert plain.exit_code == 1
    assert plain.stderr.splitlines() == [f"convcli: {src}: internal error: RuntimeError: boom"]
    debug = run("pool", src, "-o", tmp_path / "out", "-q", "-j", 1, "--debug")
    assert "Traceback" in debug.stderr and "RuntimeError: boom" in debug.stderr


def test_run_guarded_and_iter_results_in_both_modes(tmp_path):
    tasks = [f"t{i}" for i in range(6)]
    sequential = list(iter_results(tasks, _echo, jobs=1))
    parallel = list(iter_results(tasks, _echo, jobs=2))
    assert [r.source for r in sequential] == tasks
    assert sorted(r.source for r in parallel) == tasks
    failed = run_guarded(_explode, "x")
    assert failed.status == "failed" and "ValueError: no" in failed.message
    assert "Traceback" in failed.detail


def _echo(task):
    return FileResult(task, "done")


def _explode(task):
    raise ValueError("no")


def test_bomb_is_refused_from_the_header(tmp_path):
    # The file holds a header only: decoding would fail differently (truncated).
    bomb = make_bomb_png(tmp_path / "bomb.png", 200_000, 200_000)
    task = plan.plan_tasks([plan.InputFile(str(bomb), str(tmp_path / "out"))], ops.PoolOp())[0]
    result = process.process_file(task)
    assert result.status == "failed"
    assert "200000x200000" in result.message and "limit" in result.message
    assert "decode" not in result.timings


def test_default_jobs_is_the_cpu_count():
    assert batch.default_jobs() == len(os.sched_getaffinity(0))


# --- interruption --------------------------------------------------------------------------


def _readable(path: Path) -> bool:
    try:
        with Image.open(path) as im:
            im.load()
        return True
    except OSError:
        return False


def _long_batch(tmp_path: Path, jobs: int) -> tuple[subprocess.Popen, Path]:
    """convcli started on 40 copies of a photo (6 outputs each) into ``tmp_path / "out"``,
    with `jobs` jobs and its stderr piped: a run long enough to stop midway."""
    src = make_copies(tmp_path / "in", 40, (400, 300))
    out = tmp_path / "out"
    command = ["conv", "-k", "sobel-x", "-k", "edge", "--channels", "each", src, "-o", out]
    proc = subprocess.Popen(
        [sys.executable, "-m", "convcli", *map(str, command), "--jobs", str(jobs)],
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, out


@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])
def test_sigint_leaves_only_whole_files_and_exit_130(tmp_path, jobs):
    proc, out = _long_batch(tmp_path, jobs)
    stderr = interrupt(proc, lambda: len(list(out.glob("*.png"))) >= 3)
    assert "interrupted:" in stderr.splitlines()[-1]
    files = outputs_in(out)
    assert files and not any(f.name.endswith(TEMP_SUFFIX) for f in files)
    assert all(_readable(f) for f in files)
    assert len(files) < 40 * 6  # it really stopped early
    # The manifest names files that are there, in whole lines (with one job, the file
    # abandoned has none, and may be the only one begun).
    manifest = out / MANIFEST
    assert manifest.exists() or jobs == 1
    lines = manifest.read_text().splitlines() if manifest.exists() else []
    assert {json.loads(line)["output"] for line in lines} <= {f.name for f in files}


def test_sigterm_is_not_caught_by_the_per_file_guard():
    from convcli.app.stop_requests import Terminated

    def terminated(task):
        raise Terminated

    with pytest.raises(Terminated):
        run_guarded(terminated, "x")


@pytest.mark.slow
def test_sigterm_with_one_job_stops_like_ctrl_c(tmp_path):
    proc, out = _long_batch(tmp_path, 1)
    wait_until(lambda: len(list(out.glob("*.png"))) >= 3, 60)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 143, stderr
    assert "internal error" not in stderr and "Traceback" not in stderr
    assert "interrupted:" in stderr.splitlines()[-1]
    files = outputs_in(out)
    assert not any(f.name.endswith(TEMP_SUFFIX) for f in files)
    assert all(_readable(f) for f in files)
    assert len(files) < 40 * 6


# --- review fixes: odd files, output folder errors, stopping ---------------------------------


def test_pipes_empty_files_and_deep_colour_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVCLI_FAST_CODECS", "0")  # Pillow alone: 16-bit colour at 8 bits
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)  # opening it would block for ever
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    deep = tmp_path / "rgb16.png"
    deep.write_bytes(_png_rgb16(8, 6))
    result = run("pool", fifo, empty, deep, "-o", tmp_path / "out", "-j", 1)
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert f"convcli: {fifo}: not a regular file (a folder, pipe or device)" in lines
    assert f"convcli: {empty}: empty file (0 bytes)" in lines
    assert any(str(deep) in line and "16-bit colour read as 8-bit" in line for line in lines)


def _png_rgb16(width, height):
    """A 16-bit RGB PNG (Pillow cannot write one), written with zlib."""
    import struct
    import zlib

    rows = np.arange(width * height * 3, dtype=">u2").reshape(height, width * 3) * 1000
    raw = b"".join(b"\x00" + row.tobytes() for row in rows)

    def chunk(kind, data):
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 16, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def test_output_folder_that_cannot_be_made_is_one_usage_error(tmp_path):
    src = make_image(tmp_path / "a.png", "RGB")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = run("pool", src, "-o", blocker / "out")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "'-o'" in result.stderr


def test_a_folder_in_the_way_of_an_output_is_named(tmp_path):
    src = make_image(tmp_path / "a.png", "L")
    (tmp_path / "out" / "a_pool-max-f2-s2-L.png").mkdir(parents=True)
    result = run("pool", src, "-o", tmp_path / "out", "-q", "--overwrite")
    assert result.exit_code == 1
    assert "a_pool-max-f2-s2-L.png: a folder has the output's name" in result.stderr
    assert ".part" not in result.stderr


def test_overflow_is_a_note_not_a_numpy_warning(tmp_path):
    src = make_image(tmp_path / "a.png", "L")
    kernel = tmp_path / "big.txt"
    kernel.write_text("3e38 3e38 3e38\n3e38 3e38 3e38\n3e38 3e38 3e38\n")
    result = run("conv", "-k", kernel, src, "-o", tmp_path / "out", "--format", "npy")
    assert result.exit_code == 0, result.output
    assert "Warning" not in result.stderr
    assert "result values are not finite" in result.stderr


def _start_batch(tmp_path, count, size, *extra):
    """``pool --figure -r`` of in/00/photo.png ... (`count` copies of a picture), 2 jobs.

    Returns once two files are done: a figure takes about a second whatever
    the picture's size, so the run is still going. Each input's outputs,
    figure included, are those of a run on in/00/photo.png alone (the
    figure's title is the file's name).
    """
    picture = make_image(tmp_path / "photo.png", "RGB", size=size)
    src = tmp_path / "in"
    for i in range(count):
        (src / f"{i:02d}").mkdir(parents=True)
        shutil.copyfile(picture, src / f"{i:02d}" / "photo.png")
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "convcli",
            "pool",
            "--figure",
            "--separate",
            "-r",
            str(src),
            "-o",
            str(out),
            "--jobs",
            "2",
            *extra,
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_until(lambda: len(list(out.glob("*/*_grid.png"))) >= 2, 60)
    return proc, out


@pytest.mark.slow
def test_interrupted_summary_counts_every_finished_file(tmp_path):
    proc, out = _start_batch(tmp_path, 10, (400, 300))
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    summary = stderr.splitlines()[-1]
    done = int(summary.split("interrupted: ")[1].split(" processed")[0])
    # Every input whose four outputs (3 channels + the whole image) and grid exist is counted.
    complete = [
        d for d in (tmp_path / "in").iterdir() if len(list((out / d.name).glob("photo_*"))) == 5
    ]
    assert done == len(complete)


def test_a_ctrl_c_while_the_manifest_is_written_lets_the_run_end_as_it_would(tmp_path, monkeypatch):
    """A Ctrl-C landing as the run ends (writing its manifest: a second one, on a cluster,
    once the files being written were finished) is counted, as during the run: the manifest
    is written whole and the summary said; it used to end the run there ("interrupted")."""
    from convcli.app.manifest import Manifest

    src = make_folder(tmp_path / "in", 3, (30, 20))
    real_close = Manifest.close

    def close(self):
        os.kill(os.getpid(), signal.SIGINT)
        return real_close(self)

    monkeypatch.setattr(Manifest, "close", close)
    result = run("pool", src, "-o", tmp_path / "out", "-j", 1)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[-1].startswith("convcli: 3 processed, 0 skipped, 0 failed")
    assert len(manifest_records(tmp_path / "out")) == 3


class _RaisesWhenCollected:
    def __del__(self):
        raise ValueError("raised in a finalizer")


def test_an_error_python_cannot_raise_is_printed_as_python_prints_it(tmp_path, monkeypatch):
    """The run's unraisable hook hands what is not a stop request to the one before it (it
    was handed to itself, once the handlers were installed twice: RecursionError)."""
    real = process.process_file

    def process_file(task):
        _RaisesWhenCollected()
        return real(task)

    monkeypatch.setattr(process, "process_file", process_file)
    src = make_folder(tmp_path / "in", 1, (30, 20))
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    result = run("pool", src, "-o", tmp_path / "out", "-j", 1)
    assert result.exit_code == 0, result.output
    assert [str(u.exc_value) for u in seen] == ["raised in a finalizer"]
    assert sys.unraisablehook == seen.append


@pytest.mark.slow
def test_second_interrupt_stops_at_once_and_leaves_no_temporaries(tmp_path):
    proc, out = _start_batch(tmp_path, 6, (1600, 1200))
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    files = [out / name for name in names(out)]
    assert not any(f.name.endswith(TEMP_SUFFIX) for f in files)
    assert all(_readable(f) for f in files)


# A run whose file p01.png has written its outputs, then takes a minute to return.
_SLOW_AFTER_WRITING = """
import sys, time
import convcli.app.process as process
real_decode, real_notes = process._decode, process._notes
source = []
def decode(task):
    source[:] = [task.source]
    return real_decode(task)
def notes(*args):
    if source[0].endswith("p01.png"):
        time.sleep(60)
    return real_notes(*args)
process._decode, process._notes = decode, notes
sys.argv = ["convcli", *sys.argv[1:]]
from convcli.__main__ import main
main()
"""


@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])
def test_every_output_left_by_a_stop_has_its_manifest_line_and_is_counted(tmp_path, jobs):
    """Ctrl-C (twice with processes) while a file that wrote its outputs has not returned."""
    src = make_folder(tmp_path / "in", 4, (60, 40))
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _SLOW_AFTER_WRITING,
            "pool",
            "--separate",
            str(src),
            "-o",
            str(out),
            "-j",
            str(jobs),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    expected = 4 * (4 if jobs == 2 else 2)  # 3 channels and the whole image of each file done
    assert wait_until(lambda: len(list(out.glob("p*.png"))) == expected, 60)
    for _ in range(1 if jobs == 1 else 2):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    on_disk = sorted(p.name for p in out.glob("p*.png"))
    assert len(on_disk) == expected
    assert sorted(r["output"] for r in manifest_records(out)) == on_disk
    assert f"interrupted: {expected // 4} processed" in stderr.splitlines()[-1]


# A pool whose one worker writes its process id, then works for two minutes.
_ORPHANED_WORKER = """
import os, sys, time
from convcli.engines.pool import LocalProcessPool
def work(path):
    with open(path + ".part", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(path + ".part", path)
    time.sleep(120)
if __name__ == "__main__":
    LocalProcessPool(1).submit(work, sys.argv[1])
    time.sleep(120)
"""


def _ended(pid: int) -> bool:
    """Whether process `pid` is gone (or a zombie: ended, not reaped by its new parent)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_a_worker_whose_parent_was_killed_ends_instead_of_waiting_forever(tmp_path):
    """SIGKILL of the process that started a pool (or the out-of-memory killer): its worker
    stops its file as at a second stop request and exits; it used to wait for tasks forever,
    holding its memory."""
    script = tmp_path / "parent.py"
    script.write_text(_ORPHANED_WORKER)
    pid_file = tmp_path / "worker.pid"
    parent = subprocess.Popen([sys.executable, str(script), str(pid_file)])
    try:
        assert wait_until(pid_file.exists, 60)
        worker = int(pid_file.read_text())
        assert not _ended(worker)
    finally:
        parent.kill()
        parent.wait()
    assert wait_until(lambda: _ended(worker), 60)


def test_a_file_stopped_part_way_reports_the_outputs_it_wrote(photo, out, monkeypatch):
    real = process._write_output
    calls = []

    def stopped_at_the_third(out_, *args):
        calls.append(out_)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(out_, *args)

    monkeypatch.setattr(process, "_write_output", stopped_at_the_third)
    task = next(
        iter(plan.plan_tasks([plan.InputFile(str(photo), str(out))], ops.PoolOp(), separate=True))
    )
    result = process.process_file(task)
    assert result.status == "stopped"
    assert [Path(p).name for p in result.outputs] == [c.path.name for c in calls[:2]]
    assert [r["output"] for r in result.records] == [c.path.name for c in calls[:2]]
    assert sorted(names(out)) == sorted(c.path.name for c in calls[:2])


# --- a worker process that dies ------------------------------------------------------------


def _dies_on_b(task):
    """Kills its own process (as the out-of-memory killer would) on task "b"."""
    if task in ("b", "g"):
        os.kill(os.getpid(), signal.SIGKILL)
    return FileResult(task, "done", outputs=(task,))


def _new_pool():
    return local_pool.LocalProcessPool(2)


def test_a_worker_that_dies_fails_its_file_once_and_the_batch_goes_on():
    tasks = list("abcdefghij")
    run = batch.BatchRun(
        tasks, _dies_on_b, executor=_new_pool(), in_flight=4, new_executor=_new_pool
    )
    results = list(run)
    assert sorted(r.source for r in results) == tasks  # each reported exactly once
    failed = {r.source: r.message for r in results if r.status == "failed"}
    assert failed == {
        "b": "the worker processing it died (signal 9)",
        "g": "the worker processing it died (signal 9)",
    }
    assert all(r.outputs == (r.source,) for r in results if r.status == "done")


class _BrokenAsItSubmits:
    """A pool that breaks as the run submits: CPython's pool fails the tasks it holds, but
    one submitted as it broke is left unfinished for ever, and its manager thread is gone."""

    def __init__(self):
        from concurrent.futures import Future

        self.futures = []
        self._future = Future

    def submit(self, fn, /, *args, **kwargs):
        future = self._future()
        if not self.futures:  # the task whose worker died
            future.set_exception(BrokenProcessPool("a worker died"))
        self.futures.append(future)  # the others: never finished
        return future

    def cannot_finish(self) -> bool:
        return True

    def terminate(self) -> list[int]:
        return []


def test_a_task_the_broken_pool_never_finishes_runs_again_instead_of_hanging_the_run():
    broken = _BrokenAsItSubmits()
    run = batch.BatchRun(
        list("abc"), _dies_on_b, executor=broken, in_flight=3, new_executor=_new_pool
    )
    results = list(run)
    assert sorted(r.source for r in results) == ["a", "b", "c"]
    assert not any(f.done() for f in broken.futures[1:])  # never finished by the broken pool
    failed = {r.source: r.message for r in results if r.status == "failed"}
    assert failed == {"b": "the worker processing it died (signal 9)"}  # run again, alone


def test_a_broken_pool_says_it_cannot_finish_once_its_manager_thread_ends():
    pool = _new_pool()
    try:
        assert not pool.cannot_finish()
        future = pool.submit(_dies_on_b, "b")
        with pytest.raises(BrokenProcessPool):
            future.result(timeout=120)
        deadline = time.monotonic() + 120  # a bound, not a timing: the thread ends
        while not pool.cannot_finish() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.cannot_finish()
    finally:
        pool.terminate()


def test_a_worker_that_dies_without_a_replacement_aborts_the_run():
    run = batch.BatchRun(list("abc"), _dies_on_b, executor=_new_pool(), in_flight=4)
    with pytest.raises(batch.BatchAborted):
        list(run)
    run.stop()


def _dies_once(task):
    """Kills its own process the first time it sees task "c" (a marker file remembers)."""
    name, marker = task
    if name == "c" and not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return FileResult(name, "done")


def test_a_worker_killed_once_is_replaced_and_its_files_done(tmp_path):
    marker = str(tmp_path / "died")
    tasks = [(name, marker) for name in "abcdef"]
    run = batch.BatchRun(
        tasks, _dies_once, executor=_new_pool(), in_flight=4, new_executor=_new_pool
    )
    results = list(run)
    assert sorted(r.source for r in results) == list("abcdef")
    assert all(r.status == "done" for r in results)
    assert run.recovered_deaths == ["signal 9"]


_process_file = process.process_file


def _dies_on_victim(task):
    if Path(task.source).name == "p03.png":
        os.kill(os.getpid(), signal.SIGKILL)
    return _process_file(task)


def test_cli_reports_the_file_whose_worker_died_and_keeps_outputs_whole(tmp_path, monkeypatch):
    src = make_folder(tmp_path / "in", 8, (60, 40))
    reference = run("pool", src, "-o", tmp_path / "one", "-j", 1, "-q")
    assert reference.exit_code == 0, reference.output
    monkeypatch.setattr("convcli.app.process.process_file", _dies_on_victim)
    result = run("pool", src, "-o", tmp_path / "two", "-j", 2, "-q")
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.stderr.splitlines() == [
        f"convcli: {src / 'p03.png'}: the worker processing it died (signal 9)"
    ]
    expected = {k: v for k, v in digests(tmp_path / "one").items() if not k.startswith("p03_")}
    assert digests(tmp_path / "two") == expected  # byte-identical, no temporaries


def _dies_after_writing(task):
    """Writes p03's outputs, then kills its own worker the first time (before its result,
    with the outputs' manifest lines, is sent); a marker beside the outputs remembers."""
    result = _process_file(task)
    marker = Path(task.out_dir).parent / "died"
    if Path(task.source).name == "p03.png" and not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return result


def test_outputs_a_dead_worker_put_in_place_are_written_again_with_their_lines(
    tmp_path, monkeypatch
):
    """Run again, its file's outputs were kept as existing ('use --overwrite'), with no
    manifest line; they are now written again and recorded, and an output there before
    the run (not the dead worker's) stays as it was."""
    src = make_folder(tmp_path / "in", 6, (60, 40))
    reference = run("pool", "--figure", src, "-o", tmp_path / "one", "-j", 1, "-q")
    assert reference.exit_code == 0, reference.output
    out = tmp_path / "two"
    out.mkdir()
    before = out / "p05_pool-max-f2-s2.png"
    before.write_bytes((tmp_path / "one" / before.name).read_bytes())
    old = time.time() - 3600
    os.utime(before, (old, old))  # an output of an earlier run
    monkeypatch.setattr("convcli.app.process.process_file", _dies_after_writing)
    result = run("pool", "--figure", src, "-o", out, "-j", 2)
    assert (tmp_path / "died").exists()
    assert result.exit_code == 1, result.output  # a worker died: said, and an error
    assert "1 worker process(es) died (signal 9) and were replaced" in result.stderr
    kept = [line for line in result.stderr.splitlines() if "kept" in line]
    assert len(kept) == 1 and "p05.png: kept 1 existing output(s)" in kept[0]
    assert digests(out) == digests(tmp_path / "one")
    recorded = {r["output"] for r in manifest_records(out)}
    written = {p.name for p in out.iterdir() if p.name != "convcli-manifest.jsonl"}
    assert recorded == written - {before.name}  # every output this run wrote, once each
    assert len(manifest_records(out)) == len(recorded)
    assert before.stat().st_mtime == old


def test_a_task_on_object_storage_runs_again_as_it_is():
    """Staged outputs on object storage are downloaded afresh: their times say nothing of
    the run, so a task writing there is run again unchanged (outputs from before the run
    stay); a local one replaces what changed since, and one with --overwrite is as it was."""
    op = ops.PoolOp()
    local = plan.Task("a.png", "/tmp/out", "a", op)
    again = local.again(1000.0)
    assert (again.overwrite, again.again_since) == (True, 1000.0)
    for task in (
        plan.Task("a.png", "memory://b/out", "a", op),
        plan.Task("a.png", "/tmp/stage", "a", op, stores_at="s3://b/out"),
        plan.Task("a.png", "/tmp/out", "a", op, overwrite=True),
    ):
        assert task.again(1000.0) is task


# --- stopping: the pool's own thread, the count of files being processed ----------------------


def _nap(seconds):
    time.sleep(seconds)
    return seconds


def test_killing_a_pool_with_cancelled_tasks_leaves_its_thread_quiet(monkeypatch):
    errors = []
    monkeypatch.setattr("threading.excepthook", errors.append)
    pool = local_pool.LocalProcessPool(1)
    futures = [pool.submit(_nap, 30)] + [pool.submit(_nap, 0) for _ in range(5)]
    deadline = time.monotonic() + 10
    while pool.busy() < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    # Two wait in the pool's call queue; the last three are cancelled before they get there.
    assert [f.cancel() for f in futures[3:]] == [True] * 3
    pool.terminate()
    assert errors == []
    assert all(f.done() for f in futures)


def test_running_counts_the_files_being_processed_not_the_queued_ones():
    pool = local_pool.LocalProcessPool(2)
    run = batch.BatchRun([30, 30, 0, 0, 0, 0], _nap, executor=pool, in_flight=6)
    run._fill()
    deadline = time.monotonic() + 10
    while pool.busy() < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert run.running == 2
    assert run.stop(force=True) == []


def test_a_stop_stops_the_files_that_take_longer_than_the_finishing_time(monkeypatch):
    # A file that never ends (a huge upload, say) does not hold a stopped run: after
    # FINISH_SECONDS it is stopped as a second Ctrl-C stops it. (0 here: no clock involved.)
    monkeypatch.setattr(batch, "FINISH_SECONDS", 0.0)
    pool = local_pool.LocalProcessPool(1)
    run = batch.BatchRun([3600, 0], _nap, executor=pool, in_flight=2, stop_requests=lambda: 1)
    run._fill()
    deadline = time.monotonic() + 10
    while pool.busy() < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert run.running == 1
    assert run.stop() == []  # returns: the hour-long nap was stopped, not waited for
    assert all(f.done() for f in run._task_of)


@pytest.mark.slow
def test_a_worker_killed_from_outside_is_replaced_and_the_run_exits_1(tmp_path):
    proc, out = _start_batch(tmp_path, 8, (400, 300))
    children = subprocess.run(
        ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, check=False
    ).stdout.split()
    workers = [
        pid
        for pid in children  # not multiprocessing's resource tracker
        if b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    assert workers, "no worker processes found"
    os.kill(int(workers[0]), signal.SIGKILL)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stderr
    assert "worker process(es) died (signal 9) and were replaced" in stderr
    assert "8 processed, 0 skipped, 0 failed" in stderr.splitlines()[-1]
    reference = run(
        "pool",
        "--figure",
        "--separate",
        tmp_path / "in" / "00" / "photo.png",
        "-o",
        tmp_path / "one",
        "-q",
    )
    assert reference.exit_code == 0, reference.output
    expected = digests(tmp_path / "one")
    assert len(expected) == 5  # 3 channels, the whole image, the grid
    # Every file whole, no temporaries.
    assert digests(out) == {
        f"{i:02d}/{name}": digest for i in range(8) for name, digest in expected.items()
    }


def test_a_stop_that_lands_where_python_ignores_it_comes_again_after_the_hook(monkeypatch):
    """Sent again at once, it could land inside the hook, and be ignored (and printed) again."""
    from types import SimpleNamespace

    arrived = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: arrived.append(signum))
    previous_usr1 = signal.signal(signal.SIGUSR1, lambda signum, frame: arrived.append(signum))
    try:
        monkeypatch.setattr(local_pool, "_in_task", True)
        hook = local_pool._interrupt_again(lambda unraisable: arrived.append("printed"))
        hook(SimpleNamespace(exc_type=KeyboardInterrupt))
        assert arrived == []  # not while the hook runs
        deadline = time.monotonic() + 5
        while not arrived and time.monotonic() < deadline:
            time.sleep(0.001)
        assert arrived == [signal.SIGALRM]
        hook(SimpleNamespace(exc_type=ValueError))  # anything else goes to the previous hook
        assert arrived == [signal.SIGALRM, "printed"]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        signal.signal(signal.SIGUSR1, previous_usr1)


# A run whose Ctrl-C comes while a finalizer (``__del__``) runs inside the file's work,
# where Python cannot raise: the SIGINT is sent from there, once the image is computed.
_INTERRUPTED_IN_A_FINALIZER = """
import signal, sys
import convcli.app.process as process
import convcli.app.run as run
run.RAISE_AGAIN_SECONDS = float(sys.argv.pop(1))
real = process.result_and_summary
class Finalized:
    def __del__(self):
        signal.raise_signal(signal.SIGINT)
        sum(range(1000))  # the handler runs here, inside __del__
def result_and_summary(*args):
    data = real(*args)
    Finalized()
    return data
process.result_and_summary = result_and_summary
sys.argv = ["convcli", *sys.argv[1:]]
from convcli.__main__ import main
main()
"""


@pytest.mark.slow
@pytest.mark.parametrize("again", ["0.001", "600"])  # raised again in the work, or at its end
def test_ctrl_c_in_a_finalizer_stops_the_file_without_exception_ignored(tmp_path, again):
    src = make_folder(tmp_path / "in", 2, (60, 40))
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _INTERRUPTED_IN_A_FINALIZER,
            again,
            "pool",
            str(src),
            "-o",
            str(out),
            "-j",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 130, proc.stderr
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr
    # As any Ctrl-C inside a file: the file abandoned, then the summary.
    first, summary = proc.stderr.splitlines()
    assert first.endswith("p00.png: stopped before its outputs were all written")
    assert summary.startswith("convcli: interrupted: 0 processed")
    assert not list(out.glob("*.png"))  # nothing put in place after the Ctrl-C
