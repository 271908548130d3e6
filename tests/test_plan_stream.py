"""Planning a folder a time (issue 10): the same tasks as listing everything first, lazily.

The whole-list planning (:func:`find_inputs` then :func:`plan_tasks`) is the
oracle: for one INPUT folder, :func:`stream_tasks` must give exactly its
tasks, while listing a folder only when the tasks before it are taken.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import make_image, names, ok
from hypothesis import given, settings
from hypothesis import strategies as st

from convcli.app import inputs, plan
from convcli.app.ops import PoolOp

OP = PoolOp()


def fields(task) -> tuple:
    return (task.source, task.out_dir, task.stem, tuple(sorted(task.protected)))


def whole_plan(args, out_dir, recursive) -> list[tuple]:
    found = plan.find_inputs(args, out_dir=out_dir, recursive=recursive)
    return sorted(fields(t) for t in plan.plan_tasks(found.files, OP))


def streamed(args, out_dir, recursive) -> list[tuple]:
    notes: list[str] = []
    tasks = plan.stream_tasks(args, OP, out_dir=str(out_dir), recursive=recursive, notes=notes)
    return sorted(fields(t) for t in tasks)


def touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")


# Names that clash in output stems (same stem, other extension or case); inputs
# named for another's stem, which outputs must not replace; hidden files,
# non-images and the outputs of earlier runs, which are passed over.
NAMES = [
    "photo.png",
    "photo.webp",
    "Photo.jpg",
    "cat.png",
    "CAT.PNG",
    "x-png.png",
    "a.png",
    "a_pool-max-f2-s2.png",
    "cat_pool.png",
    "cat-png_x.png",
    ".hidden.png",
    "notes.txt",
]
FOLDERS = [".", "sub", "sub/deep", "Sub2", ".git", "out"]


@settings(max_examples=60, deadline=None)
@given(
    files=st.lists(
        st.tuples(st.sampled_from(FOLDERS), st.sampled_from(NAMES)),
        min_size=1,
        max_size=14,
        unique=True,
    ),
    out=st.sampled_from(["out", ".", "sub", "../elsewhere"]),
    recursive=st.booleans(),
)
def test_streaming_plans_the_same_tasks_as_listing_everything(
    tmp_path_factory, files, out, recursive
):
    root = tmp_path_factory.mktemp("tree")
    top = root / "in"
    top.mkdir()
    for folder, name in files:
        touch(top / folder / name)
    out_dir = str(top / out)
    assert plan.streams_by_folder([str(top)], out_dir=out_dir, recursive=recursive)
    assert streamed([str(top)], out_dir, recursive) == whole_plan([str(top)], out_dir, recursive)
    assert inputs.count_inputs([str(top)], out_dir=out_dir, recursive=recursive) == len(
        whole_plan([str(top)], out_dir, recursive)
    )


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links")
def test_links_to_files_of_the_walk_are_not_planned_twice(tmp_path):
    top = tmp_path / "in"
    for name in ("a.png", "sub/b.png"):
        touch(top / name)
    (top / "sub" / "to-a.png").symlink_to(top / "a.png")
    (top / "to-b.png").symlink_to(top / "sub" / "b.png")
    outside = tmp_path / "outside.png"
    touch(outside)
    (top / "o1.png").symlink_to(outside)
    (top / "o2.png").symlink_to(outside)
    out = str(tmp_path / "out")
    tasks = streamed([str(top)], out, True)
    assert [Path(t[0]).name for t in tasks] == ["a.png", "o1.png", "b.png"]
    assert len(tasks) == len(whole_plan([str(top)], out, True))
    # Not walking the subfolder, a link into it is the only way to b.png.
    assert [Path(t[0]).name for t in streamed([str(top)], out, False)] == [
        "a.png",
        "o1.png",
        "to-b.png",
    ]


def test_names_differing_in_case_are_two_files_where_the_file_system_says_so(tmp_path):
    touch(tmp_path / "in" / "photo.png")
    touch(tmp_path / "in" / "Photo.png")
    if len(os.listdir(tmp_path / "in")) == 1:
        pytest.skip("a case-insensitive file system")
    for tasks in (
        streamed([str(tmp_path / "in")], str(tmp_path / "out"), False),
        whole_plan([str(tmp_path / "in")], str(tmp_path / "out"), False),
    ):
        assert sorted(t[2] for t in tasks) == ["Photo-png", "photo-png-2"]
    for name in ("photo.png", "Photo.png"):
        make_image(tmp_path / "in" / name)
    ok("pool", tmp_path / "in", "-o", tmp_path / "out", "-q", "--separate")
    written = names(tmp_path / "out")
    assert len(written) == 8  # the colour image and its three channels, for each file
    assert {n.split("_")[0] for n in written} == {"Photo-png", "photo-png-2"}


def test_folders_are_listed_only_when_their_tasks_are_taken(tmp_path):
    top = tmp_path / "in"
    for folder in ("a", "b", "c"):
        touch(top / folder / "x.png")
    tasks = plan.stream_tasks(
        [str(top)], OP, out_dir=str(tmp_path / "out"), recursive=True, notes=[]
    )
    assert Path(next(tasks).source).parent.name == "a"
    # Files that appear in a later folder once planning has begun are planned;
    # a whole listing would have missed them.
    touch(top / "c" / "y.png")
    rest = [Path(t.source).relative_to(top).as_posix() for t in tasks]
    assert rest == ["b/x.png", "c/x.png", "c/y.png"]


def test_several_inputs_or_an_output_holding_the_input_are_planned_whole(tmp_path):
    top = tmp_path / "in"
    touch(top / "a.png")
    assert not plan.streams_by_folder(
        [str(top), str(top)], out_dir=str(tmp_path / "o"), recursive=False
    )
    assert not plan.streams_by_folder(
        [str(top / "a.png")], out_dir=str(tmp_path / "o"), recursive=False
    )
    assert not plan.streams_by_folder([str(top)], out_dir=str(tmp_path), recursive=True)
    assert plan.streams_by_folder([str(top)], out_dir=str(tmp_path), recursive=False)
    # The one case where a subfolder's output folder is another input folder:
    # in/in's outputs go to out/in, which is the walked folder in/in when out is tmp.
    touch(top / "in" / "a.png")
    touch(top / "in" / "in" / "a.png")
    assert streamed([str(top)], str(tmp_path), True) == whole_plan([str(top)], str(tmp_path), True)


def test_a_listing_error_ends_the_tasks_and_is_kept():
    class Task(str):
        @property
        def out_dir(self) -> str:
            return self[0]

    def tasks():
        yield from (Task("a1"), Task("a2"), Task("b1"))
        raise PermissionError(13, "Permission denied", "s3://bucket/in/sub")

    folders = []
    stream = plan.TaskStream(tasks(), on_folder=folders.append)
    assert list(stream) == ["a1", "a2", "b1"]
    assert folders == ["a", "b"]  # each output folder once, before its first task
    assert stream.taken == 3 and stream.finished
    assert isinstance(stream.error, PermissionError)
    assert list(stream) == []


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="no pseudo-terminals")
@pytest.mark.parametrize("twice", [False, True], ids=["one folder", "named twice"])
def test_the_progress_bar_counts_a_folder_listed_as_it_goes(tmp_path, twice):
    """A folder at a time, the total comes from a listing in the background; planned whole
    (the folder named twice), from the plan, each file once."""
    import subprocess
    import sys

    top = tmp_path / "in"
    top.mkdir()
    count = 300  # more than the tasks planned before the run starts
    for i in range(count):
        make_image(top / f"{i:03d}.png", "L", seed=i, size=(4, 4))
    main_fd, terminal = os.openpty()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "convcli",
            "pool",
            str(top),
            *[str(top)] * twice,
            "-o",
            str(tmp_path / "out"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=terminal,
    )
    os.close(terminal)
    shown = b""
    while True:
        try:
            chunk = os.read(main_fd, 4096)
        except OSError:  # the terminal is closed once the process has ended
            break
        if not chunk:
            break
        shown += chunk
    os.close(main_fd)
    assert process.wait(timeout=120) == 0
    text = shown.decode(errors="replace")
    assert f"{count}/{count}" in text
    assert f"{count} processed, 0 skipped, 0 failed" in text
    assert len(names(tmp_path / "out")) == count
