"""The run manifest (convcli-manifest.jsonl): one line per file written, values recoverable.

The key check re-reads real image outputs and turns their levels back into
values with the manifest's scale and offset: (level - offset) / scale gives
the ``--format npy`` values to within one level, for every mapping.
"""

from __future__ import annotations

import json
import shlex
import sys

import hypothesis.strategies as st
import numpy as np
import pytest
from helpers import MANIFEST, make_folder, make_image, manifest_records, names, ok, read, run
from hypothesis import given, settings
from hypothesis.extra.numpy import arrays
from PIL import Image

from convcli import __version__
from convcli.choices import MAPPINGS, NORMALIZE_CHOICES, RAW_VALUES
from convcli.levels.mapping import map_levels, to_levels

NORMALIZE = [m for m in NORMALIZE_CHOICES if m != RAW_VALUES]  # the mappings to levels


@pytest.fixture
def photo_seed():
    """The ``photo`` fixture (tests/conftest.py) draws its picture with seed 4 here."""
    return 4


def _values_back(levels: np.ndarray, record: dict, raw: np.ndarray) -> None:
    """(level - offset) / scale is `raw` (|raw| for absolute mappings) within one level."""
    scale, offset, top = record["scale"], record["offset"], record["top"]
    x = np.abs(raw) if record["absolute"] else raw
    assert scale > 0
    back = (levels.astype(np.float64) - offset) / scale
    inside = (levels > 0) & (levels < top)  # clipped levels hold no value
    assert inside.mean() > 0.05
    # Rounding moves a level by at most half a level: tighter than the one level promised.
    error = np.abs(back[inside] - x[inside])
    assert np.all(error <= 0.501 / scale + 1e-6 * np.abs(x[inside]))
    level_of_x = scale * x + offset
    assert np.all(level_of_x[levels == top] >= top - 0.5 - 1e-3)
    assert np.all(level_of_x[levels == 0] <= 0.5 + 1e-3)


@pytest.mark.parametrize("mapping", NORMALIZE)
@pytest.mark.parametrize("kernel", ["sobel-x", "gaussian-3x3", "emboss"])
def test_levels_give_back_the_npy_values_for_every_mapping(tmp_path, photo, mapping, kernel):
    out = tmp_path / "out"
    ok("conv", "-k", kernel, "--normalize", mapping, photo, "-o", out, "-q")
    ok("conv", "-k", kernel, photo, "-o", out, "--format", "npy", "-q")
    raw = np.load(out / f"photo_conv-{kernel}-sum.npy")[:, :, 0]
    tag = "" if mapping == "auto" else f"-{mapping}"
    name = f"photo_conv-{kernel}{tag}-sum.png"
    (record,) = [r for r in manifest_records(out) if r["output"] == name]
    if mapping != "auto":
        assert record["mapping"] == mapping
    _values_back(read(out / record["output"]), record, raw)


def test_sixteen_bit_levels_and_colour_groups_give_back_the_values(tmp_path):
    deep = tmp_path / "deep.png"
    grey = np.random.default_rng(8).integers(0, 65536, (20, 30), dtype=np.uint16)
    Image.fromarray(grey).save(deep)
    photo = make_image(tmp_path / "photo.png", "RGB", seed=2)
    out = tmp_path / "out"
    for args in (
        [deep, "-k", "sobel-y", "--normalize", "offset"],
        [photo, "-k", "laplacian", "--channels", "each", "--normalize", "minmax"],
    ):
        ok("conv", *args, "-o", out, "-q")
        ok("conv", *args, "-o", out, "-q", "--format", "npy")
    records = {r["output"]: r for r in manifest_records(out)}
    raw = np.load(out / "deep_conv-sobel-y-sum.npy")[:, :, 0]
    record = records["deep_conv-sobel-y-offset-sum.png"]
    assert record["top"] == 65535
    _values_back(read(out / record["output"]), record, raw)
    # The colour image of one kernel's channels: one scale per channel.
    raw = np.load(out / "photo_conv-laplacian-each.npy")
    group = records["photo_conv-laplacian-minmax-each.png"]
    assert group["kind"] == "group" and len(group["scale"]) == 3
    levels = read(out / group["output"])
    for c in range(3):
        one = {key: group[key][c] for key in ("scale", "offset", "absolute")}
        _values_back(levels[:, :, c], {**one, "top": 255}, raw[:, :, c])
        assert records[f"photo_conv-laplacian-minmax-{'RGB'[c]}.png"]["scale"] == one["scale"]


def test_pool_whole_image_is_clip_at_the_file_scale(tmp_path, photo):
    ok("pool", photo, "-o", tmp_path, "-q", "--separate")
    records = {r["output"]: r for r in manifest_records(tmp_path)}
    assert set(records) == {f"photo_pool-max-f2-s2{t}.png" for t in ("", "-R", "-G", "-B")}
    whole = records["photo_pool-max-f2-s2.png"]
    assert (whole["kind"], whole["mapping"], whole["scale"], whole["offset"]) == (
        "whole",
        "clip",
        1.0,
        0.0,
    )


def test_one_line_per_file_written_with_the_run(tmp_path, photo, monkeypatch):
    out = tmp_path / "out"
    args = [
        "conv",
        "-k",
        "sobel-x,edge",
        "--pad",
        "1,0,2,1",
        "--figure",
        str(photo),
        "-o",
        str(out),
        "-q",
    ]
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/convcli", *args])  # as the shell gives it
    ok(*args)
    records = manifest_records(out)
    assert sorted(r["output"] for r in records) == names(out)
    first = records[0]
    assert first["input"] == str(photo)
    assert first["version"] == __version__
    assert first["command"] == shlex.join(["convcli", *args])
    assert first["operation"] == "conv" and first["format"] == "png"
    options = first["options"]
    assert options["pad"] == [1, 0, 2, 1] and options["border"] == "reflect"
    assert [k["name"] for k in options["kernels"]] == ["sobel-x", "edge"]
    assert options["kernels"][0]["weights"] == [[1, 0, -1], [2, 0, -2], [1, 0, -1]]
    grid = [r for r in records if r["output"].endswith("_grid.png")]
    assert len(grid) == 1 and "scale" not in grid[0]


def test_jobs_write_whole_lines_and_resume_adds_none(tmp_path):
    folder = make_folder(tmp_path / "in", 6)
    out = tmp_path / "out"
    ok("conv", "-k", "vertical", "-r", folder, "-o", out, "-j", "2", "-q")
    first = manifest_records(out)
    assert sorted(r["output"] for r in first) == names(out)
    again = run("conv", "-k", "vertical", "-r", folder, "-o", out, "-j", "2")
    assert "0 processed, 6 skipped" in again.stderr
    assert manifest_records(out) == first
    ok("conv", "-k", "vertical", "-r", folder, "-o", out, "-j", "2", "-q", "--overwrite")
    assert len(manifest_records(out)) == 2 * len(first)


def test_the_manifest_is_not_an_input_of_the_next_run(tmp_path):
    folder = make_folder(tmp_path / "in", 2)
    for _ in range(2):
        result = ok("pool", folder, "-o", folder)
    assert "0 processed, 2 skipped, 0 failed" in result.stderr
    assert (folder / MANIFEST).exists()


def test_recursive_runs_write_one_manifest_per_output_folder(tmp_path):
    make_folder(tmp_path / "in" / "sub", 1)
    make_image(tmp_path / "in" / "top.png", "L")
    out = tmp_path / "out"
    ok("pool", "-r", tmp_path / "in", "-o", out, "-q", "--separate")
    assert [r["output"] for r in manifest_records(out)] == ["top_pool-max-f2-s2-L.png"]
    assert len(manifest_records(out / "sub")) == 4  # three channels and the colour image
    assert {r["format"] for r in manifest_records(out)} == {"input"}  # each keeps its own


def test_one_file_or_standard_output_write_no_manifest(tmp_path, photo, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ok("conv", "-k", "vertical", photo, "-o", "edges.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edges.png", "photo.png"]
    result = run("conv", "-k", "vertical", photo, "-o", "-")
    assert result.exit_code == 0 and result.stdout_bytes.startswith(b"\x89PNG")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edges.png", "photo.png"]


def test_on_object_storage_each_run_puts_its_own_manifest_object(tmp_path, photo):
    fsspec = pytest.importorskip("fsspec")
    from convcli.app.manifest import is_manifest_name, read_manifest

    fs = fsspec.filesystem("memory")
    try:
        # A manifest of an earlier version comes first, whatever the names of the runs' objects.
        fs.pipe_file(f"/convcli-manifest/out/{MANIFEST}", b'{"output": "old.png"}\n')
        for kernel in ("vertical", "horizontal"):
            ok("conv", "-k", kernel, photo, "-o", "memory://convcli-manifest/out", "-q")
        objects = sorted(
            p.rsplit("/", 1)[1]
            for p in fs.ls("/convcli-manifest/out", detail=False)
            if is_manifest_name(p.rsplit("/", 1)[1])
        )
        assert len(objects) == 3 and objects[-1] == MANIFEST
        lines = [
            fs.cat_file(f"/convcli-manifest/out/{name}").decode().splitlines()
            for name in objects[:2]
        ]
        assert [len(each) for each in lines] == [1, 1]
        outputs = [m["output"] for m in read_manifest("memory://convcli-manifest/out")]
        assert outputs == [
            "old.png",
            "photo_conv-vertical-sum.png",
            "photo_conv-horizontal-sum.png",
        ]
    finally:
        fs.rm("/convcli-manifest", recursive=True)


def test_a_line_put_twice_on_object_storage_is_read_once(tmp_path):
    # A Dask task's fragment object, left by a kill after its run put its own object: the
    # same line twice. Read once, where it comes last; other lines as they are.
    fsspec = pytest.importorskip("fsspec")
    from convcli.app.manifest import read_manifest, record_of

    fs = fsspec.filesystem("memory")
    first, second = '{"output": "a.png", "n": 1}\n', '{"output": "b.png", "n": 2}\n'
    again = '{"output": "a.png", "n": 3}\n'
    try:
        fs.pipe_file(
            "/convcli-twice/out/convcli-manifest-19700101T000010.000000Z-part-"
            "convcli-run-1f-0.jsonl",
            (first + second).encode(),
        )
        fs.pipe_file(
            "/convcli-twice/out/convcli-manifest-19700101T000011.000000Z-1a2b3c4d.jsonl",
            (first + again + second).encode(),
        )
        records = read_manifest("memory://convcli-twice/out")
        assert records == [
            {"output": "a.png", "n": 1},
            {"output": "a.png", "n": 3},
            {"output": "b.png", "n": 2},
        ]
    finally:
        fs.rm("/convcli-twice", recursive=True)
    # On disk too, and the last record of a file is the same as with every line read.
    (tmp_path / MANIFEST).write_text(first + again + first + second + second)
    assert read_manifest(str(tmp_path)) == [
        {"output": "a.png", "n": 3},
        {"output": "a.png", "n": 1},
        {"output": "b.png", "n": 2},
    ]
    assert record_of(str(tmp_path / "a.png")) == {"output": "a.png", "n": 1}


def test_a_file_url_names_the_local_folder_to_read_and_write(tmp_path):
    """``file://`` is a local path for -o, and for read_manifest too (it read none)."""
    from convcli.app.manifest import read_manifest

    (tmp_path / "in").mkdir()
    make_image(tmp_path / "in" / "a.png", size=(8, 6))
    ok("pool", tmp_path / "in", "-o", f"file://{tmp_path / 'out'}")
    records = read_manifest(f"file://{tmp_path / 'out'}")
    assert [r["output"] for r in records] == ["a_pool-max-f2-s2.png"]
    assert records == read_manifest(str(tmp_path / "out"))


@settings(max_examples=60, deadline=None)
@given(
    values=arrays(
        np.float32,
        st.tuples(st.integers(1, 6), st.integers(1, 6)),
        elements=st.floats(-1e4, 1e4, width=32),
    ),
    method=st.sampled_from(MAPPINGS),
    depth=st.sampled_from([8, 16]),
)
def test_map_levels_scale_gives_back_the_values(values, method, depth):
    levels, used = map_levels(values, method, white=255.0, depth=depth)
    np.testing.assert_array_equal(levels, to_levels(values, method, white=255.0, depth=depth))
    top = 255 if depth == 8 else 65535
    x = np.abs(values.astype(np.float64)) if used.absolute else values.astype(np.float64)
    exact = used.scale * x + used.offset
    inside = (exact > 0.5) & (exact < top - 0.5)
    assert np.all(np.abs(levels[inside] - exact[inside]) <= 0.5 + 1e-3 * max(1.0, used.scale))
    assert np.all(levels[exact >= top - 0.5 + 1e-3] == top)


def test_values_that_are_not_finite_are_null_in_strict_json():
    from convcli.app.manifest import _json_line

    line = _json_line({"output": "a.png", "scale": float("inf"), "offset": [1.0, float("nan")]})
    assert json.loads(line) == {"output": "a.png", "scale": None, "offset": [1.0, None]}


@pytest.mark.parametrize(("stride", "margin"), [(1, 4), (2, 2), (3, 2), (5, 1)])
def test_robust_scale_leaves_out_half_the_kernel_and_3_output_pixels_rounded_up(
    tmp_path, stride, margin
):
    # A 3x3 kernel: 1 + 3 = 4 input pixels on every side, ceil(4 / stride) output pixels.
    photo = make_image(tmp_path / "photo.png", "RGB", seed=9, size=(90, 70))
    out = tmp_path / "out"
    for fmt in ("npy", "png"):
        ok(
            "conv",
            "-k",
            "vertical",
            "--stride",
            stride,
            "--normalize",
            "robust",
            photo,
            "-o",
            out,
            "--format",
            fmt,
            "-q",
        )
    (npy,) = out.glob("*.npy")
    (record,) = [r for r in manifest_records(out) if r["output"].endswith(".png")]
    magnitudes = np.abs(np.load(npy)[:, :, 0].astype(np.float64))

    def scale(m):
        inside = magnitudes[m:-m, m:-m] if m else magnitudes
        return 255 / np.percentile(inside, 99.5)

    assert record["mapping"] == "robust" and record["absolute"]
    assert record["scale"] == pytest.approx(scale(margin), rel=1e-6)
    # The picture is such that a margin one pixel narrower gives another scale.
    assert scale(margin - 1) != pytest.approx(scale(margin), rel=1e-3)


def test_the_input_is_recorded_as_an_absolute_path(tmp_path, monkeypatch):
    make_image(tmp_path / "photo.png", "RGB", seed=10)
    make_folder(tmp_path / "in" / "sub", 2)
    monkeypatch.chdir(tmp_path)
    ok("pool", "photo.png", "-o", "out", "-q")
    ok("pool", "-r", "in", "-o", "tree", "-q")
    assert {r["input"] for r in manifest_records(tmp_path / "out")} == {str(tmp_path / "photo.png")}
    assert {r["input"] for r in manifest_records(tmp_path / "tree" / "sub")} == {
        str(tmp_path / "in" / "sub" / "p00.png"),
        str(tmp_path / "in" / "sub" / "p01.png"),
    }


def test_record_of_finds_the_last_line_naming_a_file(tmp_path):
    from convcli.app.manifest import record_of

    image = tmp_path / "map.png"
    assert record_of(str(image)) is None  # no manifest
    (tmp_path / MANIFEST).write_text(
        '{"output": "map.png", "scale": 1}\nnot json\n[1, 2]\n'
        '{"output": "other.png", "scale": 2}\n{"output": "map.png", "scale": 3}\n'
    )
    assert record_of(str(image)) == {"output": "map.png", "scale": 3}
    assert record_of(str(tmp_path / "none.png")) is None


def _fragment(folder, name: str, lines: list[str], age: float):
    """A Dask task's manifest fragment `name` in `folder`, last changed `age` seconds ago."""
    import os
    import time

    path = folder / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    os.utime(path, (time.time() - age, time.time() - age))
    return path


def test_a_later_run_records_the_fragments_a_killed_run_left(tmp_path):
    # A Dask task wrote p00's outputs and their lines in a fragment, then its result never
    # arrived (the scheduler or convcli was killed): the next run into the folder appends
    # the lines before it plans, so the outputs it skips have them; a fragment of a run
    # still going (changed a moment ago) is left to that run.
    import shutil

    from convcli.app.manifest import FRAGMENT_PREFIX, fragment_name

    src = make_folder(tmp_path / "in", 2, (16, 12))
    ok("pool", src, "-o", tmp_path / "whole")
    killed = [
        line
        for line in (tmp_path / "whole" / MANIFEST).read_text().splitlines()
        if '"output": "p00_' in line
    ]
    out = tmp_path / "out"
    out.mkdir()
    for record in map(json.loads, killed):
        shutil.copy(tmp_path / "whole" / record["output"], out)
    left = _fragment(out, fragment_name("convcli-run-0123", "7"), killed, age=120)
    going = _fragment(out, fragment_name("convcli-run-4567", "3"), ['{"output": "d"}'], age=1)
    result = ok("pool", src, "-o", out)
    assert "1 processed, 1 skipped, 0 failed" in result.stderr
    assert manifest_records(out)[: len(killed)] == [json.loads(line) for line in killed]
    assert sorted(r["output"] for r in manifest_records(out)) == sorted(
        r["output"] for r in manifest_records(tmp_path / "whole")
    )
    assert not left.exists() and going.read_text() == '{"output": "d"}\n'
    assert [p.name for p in out.glob(FRAGMENT_PREFIX + "*")] == [going.name]


def test_merging_a_fragment_takes_it_once(tmp_path):
    from convcli.app.manifest import merge_fragments

    a = _fragment(tmp_path, ".convcli-manifest-part-r-1.jsonl", ['{"output": "a"}'], age=0)
    _fragment(tmp_path, ".convcli-manifest-part-r-2.jsonl", ['{"output": "b"}'], age=0)
    assert merge_fragments(str(tmp_path), [a.name]) == 1
    assert merge_fragments(str(tmp_path), [a.name]) == 0  # taken: not appended twice
    assert merge_fragments(str(tmp_path), min_age=60) == 0  # the other is recent
    assert merge_fragments(str(tmp_path)) == 1
    assert manifest_records(tmp_path) == [{"output": "a"}, {"output": "b"}]
    assert [p.name for p in tmp_path.iterdir()] == [MANIFEST]


@pytest.mark.parametrize("frames", [1, 3])
def test_a_16_bit_input_written_as_jpeg_records_8_bit_levels(tmp_path, frames):
    # output_depth: min(the picture's depth, the format's). Without it a 16-bit input
    # written as JPEG recorded top 65535 and a scale 257 times too large.
    import tifffile
    from PIL import Image

    values = (np.arange(48 * 64).reshape(48, 64) * 20 % 65536).astype(np.uint16)
    stack = np.stack([values, 65535 - values, values // 2])[:frames]
    with tifffile.TiffWriter(tmp_path / "deep.tif") as tif:
        for page in stack:
            tif.write(page, photometric="minisblack")
    result = run(
        "pool",
        "--mode",
        "average",
        "--size",
        "2",
        "--format",
        "jpg",
        tmp_path / "deep.tif",
        "-o",
        tmp_path / "out",
        "-q",
    )
    assert result.exit_code == 0, result.output
    records = [r for r in manifest_records(tmp_path / "out") if r["output"].endswith(".jpg")]
    assert records and all(r["top"] == 255 for r in records)
    record = records[0]
    pooled = stack[0].reshape(24, 2, 32, 2).astype(np.float64).mean(axis=(1, 3))
    expected = np.clip(np.rint(record["scale"] * pooled + record["offset"]), 0, 255)
    with Image.open(tmp_path / "out" / record["output"]) as im:
        written = np.asarray(im.convert("L"), np.float64)
    assert abs(written - expected).mean() < 3  # JPEG's loss, not a factor of 257


def test_the_last_line_names_the_input_whose_result_the_file_holds(tmp_path, monkeypatch):
    """Two --overwrite runs write out/x.png from a/x.png and b/x.png: run A puts its file
    in place, then run B puts its own and records it before A records its line. The last
    line naming x.png must be B's, the one whose result the file holds."""
    from convcli.app import manifest as manifest_module
    from convcli.app import ops
    from convcli.app.report import Reporter
    from convcli.app.run import RunOptions, run_batch

    sources = {}
    for folder, seed in (("a", 1), ("b", 2)):
        (tmp_path / folder).mkdir()
        sources[folder] = make_image(tmp_path / folder / "x.png", "L", seed=seed)
    out = tmp_path / "out"
    options = RunOptions(out_dir=str(out), overwrite=True, jobs=1, engine="processes")
    op = ops.PadOp(pad=1)
    add = manifest_module.Manifest.add
    order = []

    def add_after_b(self, result):  # run A's lines wait until run B has ended
        if not order:
            order.append("A published")
            assert run_batch(op, [str(sources["b"])], options, Reporter(quiet=True)) == 0
        add(self, result)

    monkeypatch.setattr(manifest_module.Manifest, "add", add_after_b)
    assert run_batch(op, [str(sources["a"])], options, Reporter(quiet=True)) == 0
    assert order == ["A published"]
    [name] = names(out)
    assert np.array_equal(read(out / name), np.pad(read(sources["b"]), 1))
    records = [r for r in manifest_records(out) if r["output"] == name]
    assert records[-1]["input"] == str(sources["b"])
    assert all("identity" not in r and "_file" not in r for r in records)


def test_a_ctrl_c_while_the_manifest_object_is_put_still_puts_its_lines(monkeypatch):
    """The outputs were in the bucket with no manifest line, and a later run skipped them
    without recording them: the run's object is put once more, then the run stops."""
    pytest.importorskip("fsspec")
    import fsspec

    from convcli.app import manifest as manifest_module
    from convcli.app.manifest import Manifest
    from convcli.app.ops import PoolOp

    real_put, calls = manifest_module.put_text, []

    def interrupted_once(url, text, options=None):
        calls.append(url)
        if len(calls) == 1:
            raise KeyboardInterrupt
        real_put(url, text, options)

    monkeypatch.setattr(manifest_module, "put_text", interrupted_once)
    run = Manifest(PoolOp(), fmt="png", argv=["convcli", "pool"])
    run.pending["memory://manifest-ctrl-c/out"] = ['{"output": "a.png"}\n']
    with pytest.raises(KeyboardInterrupt):
        run.close()
    fs = fsspec.filesystem("memory")
    (put,) = fs.find("/manifest-ctrl-c/out")
    assert fs.cat_file(put) == b'{"output": "a.png"}\n'
    assert run.put_folders == {"memory://manifest-ctrl-c/out"}


def test_on_object_storage_a_run_killed_before_its_end_leaves_its_lines():
    # Each run put its manifest object once, at its end: a SIGKILL lost the lines of every
    # output it had put (4 of 8 files, the re-run then skipped them unrecorded).
    fsspec = pytest.importorskip("fsspec")
    from convcli.app.manifest import Manifest, is_manifest_name, read_manifest
    from convcli.app.ops import PoolOp
    from convcli.engines.processes import FileResult

    out = "memory://convcli-killed/out"
    fs = fsspec.filesystem("memory")

    def result(name: str) -> FileResult:
        output = f"{name}_pool-max-f2-s2.png"
        return FileResult(
            f"/in/{name}.png", "done", outputs=(f"{out}/{output}",), records=({"output": output},)
        )

    def manifest_objects() -> list[str]:
        names = [p.rsplit("/", 1)[1] for p in fs.ls("/convcli-killed/out", detail=False)]
        return sorted(name for name in names if is_manifest_name(name))

    try:
        manifest = Manifest(PoolOp(), fmt="png", argv=["convcli", "pool", "in"])
        manifest.add(result("a"))
        assert manifest.checkpoints.wait(timeout=60)
        assert [r["output"] for r in read_manifest(out)] == ["a_pool-max-f2-s2.png"]
        manifest.add(result("b"))
        manifest.add(result("c"))
        assert manifest.checkpoints.wait(timeout=60)
        # What a run killed now leaves: every line, in objects that readers take.
        outputs = [r["output"] for r in read_manifest(out)]
        assert outputs == [f"{name}_pool-max-f2-s2.png" for name in "abc"]
        assert 2 <= len(manifest_objects()) <= 3
        assert manifest.close() == []
        # At its end, its one object; the copies put on the way are deleted.
        (kept,) = manifest_objects()
        assert "-part-" not in kept
        assert [r["output"] for r in read_manifest(out)] == outputs
    finally:
        if fs.exists("/convcli-killed"):
            fs.rm("/convcli-killed", recursive=True)


def test_outputs_written_before_an_internal_error_keep_their_lines(tmp_path, photo, monkeypatch):
    """A bug part way through a file fails it with its traceback for --debug, and the outputs
    it had put in place are recorded (as those of a file failing for a bad input are)."""
    from convcli.app import process

    write = process._write_output
    calls = []

    def second_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("a bug in the second output")
        return write(*args, **kwargs)

    monkeypatch.setattr(process, "_write_output", second_fails)
    out = tmp_path / "out"
    result = run("conv", "-k", "vertical,horizontal", photo, "-o", out)
    assert result.exit_code == 1
    assert "internal error: RuntimeError: a bug in the second output" in result.stderr
    (written,) = [p for p in out.iterdir() if p.suffix == ".png"]
    assert written.name == "photo_conv-vertical-sum.png"
    records = manifest_records(out)
    assert [r["output"] for r in records] == [written.name]
    assert records[0]["input"] == str(photo) and records[0]["operation"] == "conv"
    levels = np.asarray(Image.open(written))
    assert levels.shape == read(photo).shape[:2]
