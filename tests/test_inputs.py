"""Awkward inputs on the command line: symbolic link loops, names too long, unreadable files.

Each fails on its own line naming it, and the rest of the batch runs (exit 1).
"""

from __future__ import annotations

import builtins
import os
from pathlib import Path

import pytest
from helpers import make_image, names, pixels, run

from convcli.app.ops import PoolOp
from convcli.app.plan import find_inputs, plan_tasks
from convcli.io import safeio
from convcli.io.safeio import path_key, path_order


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
@pytest.mark.parametrize("recursive", [False, True])
def test_symlink_loops_met_in_a_folder_walk_are_named_whatever_their_names(tmp_path, recursive):
    """One INPUT folder (planned a folder at a time): loops were passed over without a word."""
    folder = tmp_path / "d"
    (folder / "sub").mkdir(parents=True)
    make_image(folder / "a.png", "L")
    (folder / "loop1.png").symlink_to("loop2.png")
    (folder / "loop2.png").symlink_to("loop1.png")
    (folder / "self").symlink_to("self")  # no image extension: still named
    (folder / "sub" / "deep.png").symlink_to("deep.png")
    (folder / "up").symlink_to(".")  # a link to a folder, not a loop: not walked, not named
    out = tmp_path / "out"
    result = run("pool", folder, "-o", out, *(["-r"] if recursive else []))
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    loops = ["loop1.png", "loop2.png", "self"] + (["sub/deep.png"] if recursive else [])
    assert sorted(error_lines(result)) == sorted(
        f"convcli: {folder / name}: Too many levels of symbolic links" for name in loops
    )
    assert names(out) == ["a_pool-max-f2-s2-L.png"]
    assert run("pool", folder / "a.png", "-o", tmp_path / "alone").exit_code == 0
    alone = pixels(tmp_path / "alone" / "a_pool-max-f2-s2-L.png", "L")
    assert alone.shape == (15, 20, 1)
    assert (pixels(out / "a_pool-max-f2-s2-L.png", "L") == alone).all()


@needs_symlinks
def test_plan_tasks_keeps_a_symlink_loop_as_a_task(tmp_path):
    (tmp_path / "self.png").symlink_to("self.png")
    make_image(tmp_path / "a.png", "L")
    found = find_inputs([tmp_path], out_dir=tmp_path / "out")
    tasks = plan_tasks(found.files, PoolOp())
    assert [Path(t.source).name for t in tasks] == ["a.png", "self.png"]


# --- names too long for the file system ------------------------------------------------------


def test_temporary_name_fits_whenever_the_final_name_fits(tmp_path):
    limit = safeio.name_max(tmp_path)
    for length in (1, 200, 220, limit):
        final = tmp_path / ("é" * (length // 2) + "x" * (length % 2))
        assert len(os.fsencode(final.name)) <= limit
        tmp = safeio.temp_path_for(final)
        assert len(os.fsencode(tmp.name)) <= limit
        assert tmp.name.startswith(safeio.TEMP_PREFIX)
        # The pattern that finds a dead writer's temporaries still matches.
        assert tmp.match(f"{safeio.TEMP_PREFIX}*.{os.getpid()}-*{safeio.TEMP_SUFFIX}")
        assert safeio.write_atomic(final, lambda p: p.write_bytes(b"x"))
        assert final.read_bytes() == b"x"
        final.unlink()


def test_an_output_name_too_long_fails_before_anything_is_written(tmp_path):
    final = tmp_path / ("x" * (safeio.name_max(tmp_path) + 1))
    with pytest.raises(OSError, match="output name too long for the file system"):
        safeio.write_atomic(final, lambda p: p.write_bytes(b"x"))
    assert list(tmp_path.iterdir()) == []


def test_a_write_that_fails_on_a_read_only_disk_raises_its_own_error(tmp_path, monkeypatch):
    """The temporary never made cannot be removed either (a read-only disk refuses both):
    the write's error is raised, not the removal's, which names the temporary."""
    import errno

    def read_only(*args):
        raise OSError(errno.EROFS, "Read-only file system", str(args[0]))

    monkeypatch.setattr(safeio.os, "unlink", read_only)

    def write(path):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    with pytest.raises(OSError) as raised:
        safeio.write_atomic(tmp_path / "out.png", write)
    assert raised.value.errno == errno.EROFS
    assert raised.value.__context__ is None  # not raised while handling another error


def test_long_stems_are_written_and_too_long_inputs_fail_on_their_own_line(tmp_path):
    limit = safeio.name_max(tmp_path)
    long_stem = "b" * (limit - len("_pool-max-f2-s2-L.png"))  # the longest output name that fits
    source = make_image(tmp_path / f"{long_stem}.png", "L")
    small = make_image(tmp_path / "a.png", "L")
    too_long = tmp_path / ("a" * (limit + 45) + ".png")
    out = tmp_path / "out"
    result = run("pool", small, too_long, source, "-o", out)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = error_lines(result)
    assert len(lines) == 1 and lines[0].startswith(f"convcli: {too_long}: ")
    assert names(out) == ["a_pool-max-f2-s2-L.png", f"{long_stem}_pool-max-f2-s2-L.png"]
    assert pixels(out / f"{long_stem}_pool-max-f2-s2-L.png", "L").shape == (15, 20, 1)


def test_kernels_with_a_name_too_long_is_a_usage_error():
    result = run("kernels", "k" * 300)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert len(result.stderr.splitlines()) == 1 and "unknown kernel" in result.stderr


# --- files and folders that cannot be read ---------------------------------------------------
# Simulated (CI runs as root, where chmod 000 does not stop reading): listing the
# folder, or opening the file, raises PermissionError, and os.access says no.


@pytest.fixture
def unreadable(monkeypatch):
    """Make the paths added to the returned set unreadable to convcli."""
    import PIL.Image

    paths: set[str] = set()
    real_scandir, real_access, real_open = os.scandir, os.access, PIL.Image.open
    real_file = builtins.open

    def denied(path):
        return os.path.abspath(os.fspath(path)) in paths

    def scandir(path="."):
        if denied(path):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    def access(path, mode, **kwargs):
        return not denied(path) and real_access(path, mode, **kwargs)

    def open_(fp, *args, **kwargs):
        if isinstance(fp, (str, os.PathLike)) and denied(fp):
            raise PermissionError(13, "Permission denied", os.fspath(fp))
        return real_open(fp, *args, **kwargs)

    def file(path, *args, **kwargs):  # convcli gives Pillow a file of its own
        if isinstance(path, (str, os.PathLike)) and denied(path):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_file(path, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "access", access)
    monkeypatch.setattr(PIL.Image, "open", open_)
    monkeypatch.setattr(builtins, "open", file)
    return paths


def test_an_unreadable_named_file_fails_on_its_own_line(tmp_path, unreadable):
    good = make_image(tmp_path / "a.png", "L")
    locked = make_image(tmp_path / "locked.png", "L")
    unreadable.add(str(locked))
    out = tmp_path / "out"
    result = run("pool", "-j", "1", locked, good, "-o", out)
    assert result.exit_code == 1, result.output
    assert error_lines(result) == [f"convcli: {locked}: Permission denied"]
    assert names(out) == ["a_pool-max-f2-s2-L.png"]


@pytest.mark.parametrize("recursive", [False, True])
def test_an_unreadable_folder_fails_on_its_own_line(tmp_path, unreadable, recursive):
    top = tmp_path / "top"
    (top / "sub").mkdir(parents=True)
    make_image(top / "a.png", "L")
    make_image(top / "sub" / "b.png", "L")
    locked = tmp_path / "locked"
    locked.mkdir()
    make_image(locked / "c.png", "L")
    unreadable.update({str(locked), str(top / "sub")})
    out = tmp_path / "out"
    result = run("pool", "-j", "1", *(["-r"] if recursive else []), locked, top, "-o", out)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    expected = [f"convcli: {locked}: Permission denied"]
    if recursive:
        expected.append(f"convcli: {top / 'sub'}: Permission denied")
    assert error_lines(result) == expected
    assert names(out) == ["a_pool-max-f2-s2-L.png"]


def test_an_output_name_too_long_fails_on_one_line_without_overwrite(tmp_path):
    src = tmp_path / ("a" * 240 + ".png")  # fits; its outputs' names do not
    make_image(src, "RGB")
    result = run("conv", "-k", "vertical", src, "-o", tmp_path / "out")
    assert result.exit_code == 1, result.output
    failed = [line for line in result.stderr.splitlines() if "failed in" not in line]
    assert len(failed) == 1 and failed[0].endswith("output name too long for the file system")
    assert "Traceback" not in result.output


@pytest.mark.parametrize("layout", ["mirror", "two inputs"])
def test_outputs_in_another_input_folders_output_folder_are_not_read_back(tmp_path, layout):
    """`-r w/sub -o w`: the outputs of w/sub/sub go to w/sub, an input folder itself; and
    `A B -o A`: B's outputs go to A. A rerun skips every file (the outputs are not inputs),
    and --overwrite redoes the images alone."""
    if layout == "mirror":
        images = [tmp_path / "w/sub/sub/x.png", tmp_path / "w/sub/sub/sub/y.png"]
        command = ("-r", tmp_path / "w/sub", "-o", tmp_path / "w")
    else:
        images = [tmp_path / "A/a.png", tmp_path / "B/q.png"]
        command = (tmp_path / "A", tmp_path / "B", "-o", tmp_path / "A")
    for k, image in enumerate(images):
        image.parent.mkdir(parents=True, exist_ok=True)
        make_image(image, "RGB", seed=k)
    first = run("conv", "-k", "vertical", *command)
    assert first.exit_code == 0 and "2 processed, 0 skipped" in first.stderr
    written = sorted(p for p in tmp_path.rglob("*.png") if p not in images)
    assert len(written) == 2 and all("_conv-vertical-sum" in p.name for p in written)
    again = run("conv", "-k", "vertical", *command)
    assert again.exit_code == 0 and "0 processed, 2 skipped" in again.stderr
    forced = run("conv", "-k", "vertical", *command, "--overwrite")
    assert forced.exit_code == 0 and "2 processed, 0 skipped" in forced.stderr
    assert sorted(p for p in tmp_path.rglob("*.png") if p not in images) == written
