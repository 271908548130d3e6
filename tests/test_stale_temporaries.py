"""Temporary files left by writers that were killed are removed by the next run, and only those."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from helpers import make_image, run

from convcli.io.safeio import remove_stale_temporaries


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _part(folder, name, *, age):
    path = folder / name
    path.write_bytes(b"half a file")
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def test_only_old_temporaries_of_gone_writers_are_removed(tmp_path):
    dead = _dead_pid()
    # A process started now, after the file below was last changed: its id was reused. (Not
    # this test's own process: when started more than 600 s ago, it may be the writer.)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = _part(tmp_path, f".convcli-a_pool-max-f2-s2.png.{dead}-0a1b2c3d.part", age=600)
        reused = _part(tmp_path, f".convcli-b.png.{alive.pid}-00ff00ff.part", age=600)
        recent = _part(tmp_path, f".convcli-c.png.{dead}-12345678.part", age=0)
        others = [
            _part(tmp_path, name, age=600)
            for name in (
                f"photo.{dead}-0a1b2c3d.part",
                f".convcli-e.png.{dead}-0a1b2c3d.partial",
                ".convcli-notes.txt",
                f"x.convcli-f.png.{dead}-0a1b2c3d.part",
            )
        ]
        folder = tmp_path / f".convcli-g.png.{dead}-0a1b2c3d.part"
        folder.mkdir()
        os.utime(folder, (time.time() - 600,) * 2)
        assert remove_stale_temporaries(tmp_path) == 2
    finally:
        alive.kill()
        alive.wait()
    assert not stale.exists() and not reused.exists()
    assert recent.exists() and folder.is_dir()
    assert all(p.read_bytes() == b"half a file" for p in others)


def test_the_temporary_of_a_writer_still_at_work_is_kept(tmp_path):
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.1)
        alive = _part(tmp_path, f".convcli-d.png.{writer.pid}-deadbeef.part", age=0)
        # Old enough to be considered at all, but its writer is alive and started before it.
        assert remove_stale_temporaries(tmp_path, min_age=-1) == 0
        assert alive.read_bytes() == b"half a file"
    finally:
        writer.kill()
        writer.wait()


def test_a_run_cleans_the_folders_it_writes_to(tmp_path):
    src = tmp_path / "in"
    (src / "sub").mkdir(parents=True)
    make_image(src / "a.png", "RGB")
    make_image(src / "sub" / "b.png", "L")
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    dead = _dead_pid()
    top = _part(out, f".convcli-a_pool-max-f2-s2-R.png.{dead}-0a1b2c3d.part", age=600)
    deep = _part(out / "sub", f".convcli-b_pool-max-f2-s2.png.{dead}-0a1b2c3d.part", age=600)
    kept = _part(out, f".convcli-z.png.{dead}-0a1b2c3d.part", age=0)
    result = run("pool", "-r", src, "-o", out, "-q")
    assert result.exit_code == 0, result.output
    assert not top.exists() and not deep.exists() and kept.exists()
    assert (out / "sub" / "b_pool-max-f2-s2-L.png").exists()


def _staging(root, pid: int, *, age: float):
    from convcli.io.safeio import STAGING_PREFIX

    folder = root / f"{STAGING_PREFIX}{pid}-abc123"
    (folder / "output").mkdir(parents=True)
    (folder / "output" / "a_pool-max-f2-s2.png").write_bytes(b"x" * 1000)
    then = time.time() - age
    for path in (folder / "output" / "a_pool-max-f2-s2.png", folder / "output", folder):
        os.utime(path, (then, then))
    return folder


def test_staging_folders_of_killed_runs_are_removed_by_the_next_run_to_object_storage(
    tmp_path, monkeypatch
):
    """A run killed while uploading left its staging folder (2.5 and 40 MB) for ever."""
    import tempfile

    from convcli.app import process

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = _dead_pid()
    stale = _staging(tmp_path, dead, age=600)
    recent = _staging(tmp_path, _dead_pid(), age=0)  # changed just now: kept
    busy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        mine = _staging(tmp_path, os.getpid(), age=0)
        other_live = _staging(tmp_path, busy.pid, age=0)
        process._remove_stale_staging_once.cache_clear()
        (tmp_path / "in").mkdir()
        photo = make_image(tmp_path / "in" / "a.png", "RGB")
        result = run("pool", photo, "-o", "memory://staging-test/out")
        assert result.exit_code == 0, result.output
        assert not stale.exists()
        assert recent.exists() and mine.exists() and other_live.exists()
        left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("convcli-"))
        assert left == sorted(p.name for p in (recent, mine, other_live))  # its own gone too
    finally:
        busy.kill()
        busy.wait()
        process._remove_stale_staging_once.cache_clear()
