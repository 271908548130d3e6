"""Awkward inputs on the command line: symbolic link loops, names too long, unreadable files.

Each fails on its own line naming it, and the rest of the batch runs (exit 1).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import make_image, names, pixels, run

from convcli import safeio
from convcli.app.ops import PoolOp
from convcli.app.plan import find_inputs, plan_tasks
from convcli.safeio import path_key, path_order


def error_lines(result) -> list[str]:
    """The stderr lines that report a file, without the summary line."""
    return [line for line in result.stderr.splitlines() if " processed, " not in line]


# --- symbolic link loops ---------------------------------------------------------------------


needs_symlinks = pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links")


@needs_symlinks
def test_paths_of_a_symlink_loop_compare_without_raising(tmp_path):
    loop = tmp_path / "self.png"
    loop.symlink_to("self.png")
    assert safeio.resolved(loop) == str(loop)
    assert path_key(loop) == os.path.normcase(str(loop)).casefold()
    assert path_order(loop) == (path_key(loop), str(loop))
    # Two links round a loop, and a folder under a loop.
    (tmp_path / "b").symlink_to("c")
    (tmp_path / "c").symlink_to("b")
    assert path_key(tmp_path / "b") != path_key(tmp_path / "c")
    path_key(tmp_path / "b" / "x.png")


@needs_symlinks
def test_a_symlink_loop_in_a_folder_fails_on_its_own_line_and_the_rest_runs(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    make_image(folder / "a.png", "L")
    (folder / "self.png").symlink_to("self.png")
    (folder / "loop1.png").symlink_to("loop2.png")
    (folder / "loop2.png").symlink_to("loop1.png")
    out = tmp_path / "out"
    result = run("pool", folder, folder / "self.png", "-o", out)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = error_lines(result)
    assert len(lines) == 3, result.stderr
    for name in ("loop1.png", "loop2.png", "self.png"):
        assert sum(name in line for line in lines) == 1
    assert all("symbolic links" in line for line in lines)
    assert names(out) == ["a_pool-max-f2-s2-L.png"]
    assert pixels(out / "a_pool-max-f2-s2-L.png", "L").shape == (15, 20, 1)


@needs_symlinks
def test_plan_tasks_keeps_a_symlink_loop_as_a_task(tmp_path):
    (tmp_path / "self.png").symlink_to("self.png")
    make_image(tmp_path / "a.png", "L")
    found = find_inputs([tmp_path], out_dir=tmp_path / "out")
    tasks = plan_tasks(found.files, PoolOp())
    assert [Path(t.source).name for t in tasks] == ["a.png", "self.png"]
