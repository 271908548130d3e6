"""Planning and per-file work behind the commands (no click)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from imagefiles import make_image

from convcli import pool_forward
from convcli.batch import FileResult, iter_results
from convcli.kernel_library import get_kernel, parse_kernel_spec
from convcli.pipeline import (
    ConvOp,
    OptionError,
    PadOp,
    PoolOp,
    Task,
    find_inputs,
    output_stems,
    plan_tasks,
    planned_outputs,
    process_file,
)


def kernels(*names):
    return tuple(parse_kernel_spec(n) for n in names)


# --- operations ------------------------------------------------------------------------------


def test_pad_and_pool_details():
    assert PadOp().details == "constant-2"
    assert PadOp(pad=30, value=50).details == "constant-30-v50"
    assert PadOp(pad=1, value=0.5).details == "constant-1-v0.5"
    assert PadOp(pad=3, value=9, mode="wrap").details == "wrap-3"  # the value only fills constant
    assert PoolOp().details == "max-f2-s2"
    assert PoolOp(mode="avg", size=5, stride=3).details == "average-f5-s3"
    with pytest.raises(ValueError, match="mode"):
        PoolOp(mode="min")
    with pytest.raises(ValueError, match="finite"):
        PadOp(value=float("nan"))


def test_conv_pad_for():
    op = ConvOp(kernels("vertical", "gaussian-5x5"))
    assert [op.pad_for(k) for k in op.kernels] == [1, 2]
    assert ConvOp(kernels("roberts-nw")).pad_for(get_kernel("roberts-nw")) == 0
    assert ConvOp(kernels("vertical"), pad="valid").pad_for(get_kernel("vertical")) == 0
    assert ConvOp(kernels("vertical"), pad=4).pad_for(get_kernel("vertical")) == 4


def test_conv_rejects_parameters_that_cannot_work():
    with pytest.raises(ValueError, match="no kernel"):
        ConvOp(())
    with pytest.raises(OptionError, match="given twice") as info:
        ConvOp(kernels("vertical", "Vertical"))
    assert info.value.option == "--kernel"
    with pytest.raises(OptionError, match="different sizes") as info:
        ConvOp(kernels("vertical", "gaussian-5x5"), pad=0)
    assert info.value.option == "--pad"
    with pytest.raises(ValueError, match="channels"):
        ConvOp(kernels("vertical"), channels="rgb")


@pytest.mark.parametrize(
    "name, channels, n_colour, expected",
    [
        ("vertical", "sum", 3, "abs"),
        ("edge", "gray", 1, "abs"),
        ("identity", "gray", 1, "clip"),
        ("box-blur", "each", 3, "clip"),
        ("gaussian-5x5", "sum", 1, "clip"),
        ("identity", "sum", 3, "minmax"),  # R + G + B can reach 3 x 255
        ("sharpen", "gray", 1, "minmax"),
        ("emboss", "each", 3, "minmax"),
    ],
)
def test_auto_normalize(name, channels, n_colour, expected):
    op = ConvOp(kernels(name), channels=channels)
    n_summed = n_colour if channels == "sum" else 1
    assert op.method_for(get_kernel(name), n_summed, 255.0) == expected
    forced = ConvOp(kernels(name), channels=channels, normalize="offset")
    assert forced.method_for(get_kernel(name), n_summed, 255.0) == "offset"


def test_conv_names_per_channel_mode():
    rgb = ("R", "G", "B", "A")
    op = ConvOp(kernels("vertical", "sobel-x:90"), stride=2, pad="valid", channels="each")
    assert op.channel_tags(rgb) == [
        f"{k}-s2-p0-{c}" for k in ("vertical", "sobel-x_rot90") for c in "RGB"
    ]
    assert op.npy_tag(rgb) == "vertical+sobel-x_rot90-s2-p0-each"
    assert ConvOp(kernels("edge")).channel_tags(("L",)) == ["edge-sum"]
    assert ConvOp(kernels("edge"), channels="gray").channel_tags(rgb) == ["edge-gray"]


def test_planned_outputs(tmp_path):
    task = Task("in/p.png", str(tmp_path), "p", PoolOp(), figure=True)
    assert [o.path.name for o in planned_outputs(task, ("R", "G", "B"))] == [
        "p_pool-max-f2-s2-R.png", "p_pool-max-f2-s2-G.png", "p_pool-max-f2-s2-B.png",
        "p_pool-max-f2-s2.png", "p_pool_grid.png",
    ]
    task = Task("in/p.png", str(tmp_path), "p", PadOp(), fmt="npy")
    assert [o.path.name for o in planned_outputs(task, ("L",))] == ["p_pad-constant-2.npy"]


# --- inputs and tasks ------------------------------------------------------------------------


def test_output_stems():
    paths = [Path("photo.png"), Path("photo.webp"), Path("cat.png")]
    assert output_stems(paths) == ["photo-png", "photo-webp", "cat"]
    assert output_stems([Path("Photo.PNG"), Path("photo.png")]) == ["Photo-PNG", "photo-png-2"]
    assert output_stems([Path("a/x.png"), Path("b/x.png"), Path("c/x.png")]) == [
        "x-png", "x-png-2", "x-png-3"]


def test_find_inputs(tmp_path):
    d = tmp_path / "in"
    (d / "sub").mkdir(parents=True)
    (d / ".git").mkdir()
    for name in ("b.PNG", "a.jpeg", ".hidden.png", "sub/c.png", ".git/d.png"):
        (d / name).write_bytes(b"")
    (d / "x.txt").write_text("")
    flat = find_inputs([d], out_dir=tmp_path / "out")
    assert [Path(f.path).name for f in flat.files] == ["a.jpeg", "b.PNG"]
    deep = find_inputs([d], out_dir=d / "sub", recursive=True)  # the output folder is not read
    assert [Path(f.path).name for f in deep.files] == ["a.jpeg", "b.PNG"]
    deep = find_inputs([d], out_dir=tmp_path / "out", recursive=True)
    assert [(Path(f.path).name, Path(f.out_dir).name) for f in deep.files] == [
        ("a.jpeg", "out"), ("b.PNG", "out"), ("c.png", "sub")]
    named = find_inputs([d / "x.txt"], out_dir=tmp_path / "out")
    assert [Path(f.path).name for f in named.files] == ["x.txt"]  # named files are always tried


def test_plan_tasks_protects_inputs_in_the_output_folder(tmp_path):
    for name in ("p.png", "p_pool-max-f2-s2-R.png", "q.png"):
        (tmp_path / name).write_bytes(b"")
    found = find_inputs([tmp_path], out_dir=tmp_path)
    tasks = plan_tasks(found.files, PoolOp())
    by_stem = {t.stem: t for t in tasks}
    assert [Path(p).name for p in by_stem["p"].protected] == ["p_pool-max-f2-s2-R.png"]
    assert by_stem["q"].protected == ()


# --- one file --------------------------------------------------------------------------------


def test_process_file_writes_and_reports(tmp_path):
    src = make_image(tmp_path / "p.png", "RGB")
    task = Task(str(src), str(tmp_path / "out"), "p", PoolOp(), fmt="npy")
    result = process_file(task)
    written = (str(tmp_path / "out" / "p_pool-max-f2-s2.npy"),)
    assert result == FileResult(str(src), "done", "", written, result.timings)
    assert set(result.timings) == {"decode", "compute", "encode"}
    assert process_file(task).status == "skipped"


def test_process_file_returns_failures_and_lets_bugs_through(tmp_path, monkeypatch):
    missing = Task(str(tmp_path / "missing.png"), str(tmp_path), "missing", PoolOp())
    result = process_file(missing)
    assert result.status == "failed" and result.message == "No such file or directory"

    def broken(self, pic):
        raise RuntimeError("a bug")

    src = make_image(tmp_path / "p.png", "RGB")
    monkeypatch.setattr(PoolOp, "compute", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        process_file(Task(str(src), str(tmp_path / "out"), "p", PoolOp()))


def test_tasks_pickle_and_run_in_worker_processes(tmp_path):
    srcs = [make_image(tmp_path / f"p{i}.png", "RGB", seed=i) for i in range(3)]
    op = ConvOp(kernels("vertical", "sobel-x:90"))
    tasks = [Task(str(s), str(tmp_path / "out"), s.stem, op, fmt="npy") for s in srcs]
    assert pickle.loads(pickle.dumps(tasks[0])) == tasks[0]
    results = sorted(iter_results(tasks, process_file, jobs=2), key=lambda r: r.source)
    assert [r.status for r in results] == ["done"] * 3
    pooled = [Task(str(s), str(tmp_path / "out"), s.stem, PoolOp(), fmt="npy") for s in srcs]
    for r in iter_results(pooled, process_file, jobs=1):
        assert r.status == "done"
    from PIL import Image

    with Image.open(srcs[0]) as im:
        A = np.asarray(im).astype(np.float32)[None]
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "p0_pool-max-f2-s2.npy"),
                                  pool_forward(A, {"f": 2, "stride": 2})[0][0])
