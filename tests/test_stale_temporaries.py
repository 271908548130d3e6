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
        others = [_part(tmp_path, name, age=600) for name in (
            f"photo.{dead}-0a1b2c3d.part", f".convcli-e.png.{dead}-0a1b2c3d.partial",
            ".convcli-notes.txt", f"x.convcli-f.png.{dead}-0a1b2c3d.part")]
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
