"""The application layer behind the commands (no click): operations, names, plans, one file."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import make_image
from PIL import Image

from convcli import pool_forward
from convcli.app.names import output_stems, planned_outputs
from convcli.app.ops import ConvOp, OptionError, PadOp, PoolOp
from convcli.app.plan import Task, find_inputs, plan_tasks
from convcli.app.process import process_file
from convcli.choices import BORDER_MODES, CHANNEL_MODES
from convcli.engines.processes import FileResult, iter_results
from convcli.kernels import Kernel, get_kernel, parse_kernel_spec
from convcli.levels.mapping import count_not_finite


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


@pytest.mark.parametrize("value", [1e40, -1e39, 3.5e38])
def test_pad_value_beyond_float32_is_an_option_error(value):
    with pytest.raises(OptionError, match="beyond the float32 range") as info:
        PadOp(value=value)
    assert info.value.option == "--value"
    assert PadOp(value=-3.4e38).value == -3.4e38  # within the range


def test_pad_value_in_names_is_exact():
    assert PadOp(pad=1, value=0.1234567).details == "constant-1-v0.1234567"
    assert PadOp(pad=1, value=-1e-7).details == "constant-1-v-1e-07"


def test_conv_pad_for():
    op = ConvOp(kernels("vertical", "gaussian-5x5"))
    assert [op.pad_for(k) for k in op.kernels] == [1, 2]
    assert ConvOp(kernels("roberts-nw"), pad="valid").pad_for(get_kernel("roberts-nw")) == 0
    assert ConvOp(kernels("roberts-nw"), pad=1).pad_for(get_kernel("roberts-nw")) == 1


def test_conv_pad_same_needs_odd_sides(tmp_path):
    with pytest.raises(
        OptionError, match=r"kernel 'roberts-nw' is 2x2: --pad same .*--pad valid"
    ) as info:
        ConvOp(kernels("roberts-nw"))
    assert info.value.option == "--pad"
    wide = tmp_path / "wide.txt"
    wide.write_text("1 2 0\n-2 -1 0\n")
    with pytest.raises(
        OptionError,
        match=re.escape(
            f"kernel 'wide' ({wide}) is 2x3: --pad same needs an odd number of rows and of columns"
        ),
    ):
        ConvOp(kernels("vertical", str(wide)), pad="same")
    line = tmp_path / "line.txt"
    line.write_text("1 2 0 -2 -1\n")
    assert ConvOp(kernels(str(line)), pad="valid").pad_for(parse_kernel_spec(str(line))) == 0
    assert ConvOp(kernels("vertical"), pad="valid").pad_for(get_kernel("vertical")) == 0
    assert ConvOp(kernels("vertical"), pad=4).pad_for(get_kernel("vertical")) == 4


@pytest.mark.parametrize("channels", ["sum", "each"])
@pytest.mark.parametrize(
    ("grid", "widths"),
    [
        ("1 2 -1", (0, 0, 1, 1)),
        ("1 0 -1 2 3\n0 1 1 0 2\n-1 2 0 1 1", (1, 1, 2, 2)),
        ("1\n-2\n1", (1, 1, 0, 0)),
    ],
)
def test_conv_pad_same_centres_odd_kernels_that_are_not_square(tmp_path, grid, widths, channels):
    """A 1x3 or 3x5 kernel is centred, as scipy and OpenCV centre it: half each side per side."""
    path = tmp_path / "k.txt"
    path.write_text(grid + "\n")
    (k,) = kernels(str(path))
    op = ConvOp((k,), channels=channels)
    assert op.pad_widths(k) == widths
    pic = _pic()
    same = op.compute(pic)
    assert same.shape[:2] == pic.pixels.shape[:2]
    np.testing.assert_array_equal(same, ConvOp((k,), pad=widths, channels=channels).compute(pic))
    with_square = ConvOp((k, *kernels("sobel-x")), channels=channels)
    assert with_square.tags(("R", "G", "B"))  # one size of result: accepted together
    if widths[0] != widths[2]:
        with pytest.raises(ValueError, match="pad_widths"):
            op.pad_for(k)


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
        ("vertical", "sum", 3, "robust"),
        ("edge", "gray", 1, "robust"),
        ("identity", "gray", 1, "clip"),
        ("box-blur", "each", 3, "clip"),
        ("gaussian-5x5", "sum", 1, "clip"),
        ("identity", "sum", 3, "clip"),  # R + G + B, shown as their mean
        ("sharpen", "gray", 1, "clip"),  # weights summing to 1 keep the level
        ("emboss", "each", 3, "clip"),
    ],
)
def test_auto_normalize(name, channels, n_colour, expected):
    op = ConvOp(kernels(name), channels=channels)
    n_summed = n_colour if channels == "sum" else 1
    assert op.mapping_for(get_kernel(name), n_summed, 255.0) == expected
    forced = ConvOp(kernels(name), channels=channels, normalize="offset")
    assert forced.mapping_for(get_kernel(name), n_summed, 255.0) == "offset"


def test_conv_names_per_channel_mode():
    rgb = ("R", "G", "B", "A")
    op = ConvOp(kernels("vertical", "sobel-x:90"), stride=2, pad="valid", channels="each")
    assert op.tags(rgb).channels == [
        f"{k}-s2-p0-{c}" for k in ("vertical", "sobel-x_rot90") for c in "RGB"
    ]
    assert op.tags(rgb).raw == "vertical+sobel-x_rot90-s2-p0-each"
    assert ConvOp(kernels("edge")).tags(("L",)).channels == ["edge-sum"]
    assert ConvOp(kernels("edge"), channels="gray").tags(rgb).channels == ["edge-gray"]


def test_conv_names_bias_and_explicit_normalize():
    op = ConvOp(kernels("vertical", "edge"), stride=2, bias=100, normalize="offset")
    assert op.tags(("L",)).channels == ["vertical-s2-b100-offset-sum", "edge-s2-b100-offset-sum"]
    assert op.tags(("L",)).raw == "vertical+edge-s2-b100-sum"  # raw values: no mapping
    op = ConvOp(kernels("vertical"), bias=-0.25, channels="each")
    assert op.tags(("R", "G", "B")).channels == [f"vertical-b-0.25-{c}" for c in "RGB"]
    assert ConvOp(kernels("vertical"), bias=0.0, normalize="auto").tags(("L",)).channels == [
        "vertical-sum"
    ]
    assert ConvOp(kernels("vertical"), normalize="abs").tags(("L",)).channels == [
        "vertical-abs-sum"
    ]


def test_planned_outputs(tmp_path):
    task = Task("in/p.png", str(tmp_path), "p", PoolOp(), figure=True, separate=True)
    assert [o.path.name for o in planned_outputs(task, ("R", "G", "B"))] == [
        "p_pool-max-f2-s2-R.png",
        "p_pool-max-f2-s2-G.png",
        "p_pool-max-f2-s2-B.png",
        "p_pool-max-f2-s2.png",
        "p_pool-max-f2-s2_grid.png",
    ]
    task = Task("in/p.jpg", str(tmp_path), "p", PoolOp(), fmt="jpg", figure=True)
    assert [o.path.name for o in planned_outputs(task, ("R", "G", "B", "A"))] == [
        "p_pool-max-f2-s2.jpg",
        "p_pool-max-f2-s2_grid.png",
    ]
    assert [o.path.name for o in planned_outputs(task, ("L",))] == [
        "p_pool-max-f2-s2-L.jpg",
        "p_pool-max-f2-s2_grid.png",
    ]
    task = Task("in/p.png", str(tmp_path), "p", PadOp(), fmt="npy")
    assert [o.path.name for o in planned_outputs(task, ("L",))] == ["p_pad-constant-2.npy"]


# --- inputs and tasks ------------------------------------------------------------------------


def test_output_stems():
    paths = [Path("photo.png"), Path("photo.webp"), Path("cat.png")]
    assert output_stems(paths) == ["photo-png", "photo-webp", "cat"]
    assert output_stems([Path("Photo.PNG"), Path("photo.png")]) == ["Photo-PNG", "photo-png-2"]
    assert output_stems([Path("a/x.png"), Path("b/x.png"), Path("c/x.png")]) == [
        "x-png",
        "x-png-2",
        "x-png-3",
    ]
    # Numbered in the order of the full paths, not of the arguments.
    assert output_stems([Path("c/x.png"), Path("a/x.png"), Path("B/x.png")]) == [
        "x-png-3",
        "x-png",
        "x-png-2",
    ]


def test_plan_tasks_numbering_does_not_depend_on_the_input_order(tmp_path):
    for sub in ("a", "b", "C"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "photo.png").write_bytes(b"")
    mappings = set()
    for order in (["a", "b", "C"], ["C", "b", "a"], ["b", "a", "C"]):
        found = find_inputs([tmp_path / d for d in order], out_dir=tmp_path / "out")
        tasks = plan_tasks(found.files, PoolOp())
        mappings.add(frozenset((t.stem, Path(t.source).parent.name) for t in tasks))
    assert mappings == {frozenset({("photo-png", "a"), ("photo-png-2", "b"), ("photo-png-3", "C")})}


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
        ("a.jpeg", "out"),
        ("b.PNG", "out"),
        ("c.png", "sub"),
    ]
    named = find_inputs([d / "x.txt"], out_dir=tmp_path / "out")
    assert [Path(f.path).name for f in named.files] == ["x.txt"]  # named files are always tried


def test_find_inputs_passes_over_earlier_outputs_in_the_output_folder(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    outputs = [
        "a_conv-vertical-sum.png",
        "A_CONV-vertical-sum.png",
        "a_conv-vertical-sum_conv-vertical-sum.png",
        "a_pool-max-f2-s2.tiff",
        "a_pad-constant-2-R.jpg",
        "a_conv_grid.png",
        "photo-png_conv-edge-sum.png",
        "photo-webp-2_pool-max-f2-s2-R.png",
        "photo_pool_grid.png",
        "a_conv-vertical+edge-s2-sum_grid.png",
        "photo-webp_pool-max-f2-s2_grid.png",
    ]
    kept = [
        "a.png",
        "a_convolved.png",
        "a_conv-x.gif",
        "a_blur-1.png",
        "b_conv-vertical-sum.png",
        "photo.png",
        "photo.webp",
        "photo-jpg_conv-edge-sum.png",
        "x_pool_grid.png",
    ]
    for name in outputs + kept:
        (d / name).write_bytes(b"")
    same = find_inputs([d], out_dir=d)
    assert sorted(Path(f.path).name for f in same.files) == sorted(kept)
    elsewhere = find_inputs([d], out_dir=tmp_path / "out")  # not its own output folder
    assert len(elsewhere.files) == len(outputs + kept)
    # With -r, each subfolder that is its own output folder.
    (d / "sub").mkdir()
    for name in ("c.png", "c_pool-max-f2-s2.png"):
        (d / "sub" / name).write_bytes(b"")
    deep = find_inputs([d], out_dir=d, recursive=True)
    assert [Path(f.path).name for f in deep.files if "sub" in f.path] == ["c.png"]
    # A file named on the command line is always taken.
    named = find_inputs([d / "a_conv-vertical-sum.png"], out_dir=d)
    assert [Path(f.path).name for f in named.files] == ["a_conv-vertical-sum.png"]


def test_plan_tasks_protects_inputs_in_the_output_folder(tmp_path):
    for name in ("p.png", "p_pool-max-f2-s2-R.png", "q.png"):
        (tmp_path / name).write_bytes(b"")
    # Named as files: taken, even where they look like outputs of p.png.
    found = find_inputs(sorted(tmp_path.iterdir()), out_dir=tmp_path)
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
    records = ({"output": "p_pool-max-f2-s2.npy", "kind": "raw"},)
    assert result == FileResult(str(src), "done", "", written, result.timings, records=records)
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
    np.testing.assert_array_equal(
        np.load(tmp_path / "out" / "p0_pool-max-f2-s2.npy"),
        pool_forward(A, {"f": 2, "stride": 2})[0][0],
    )


# --- borders, mappings, colour results and combined maps (issue 9) ---------------------------


def _pic(seed=0, shape=(23, 31, 3)):
    from convcli.io.images import Picture

    pixels = np.random.default_rng(seed).integers(0, 256, shape).astype(np.float32)
    return Picture(pixels, ("R", "G", "B", "A")[: shape[2]], 255.0, 8)


@pytest.mark.parametrize("border", BORDER_MODES)
@pytest.mark.parametrize("channels", CHANNEL_MODES)
def test_conv_border_pads_with_pad_images_then_conv_forward_with_pad_0(border, channels):
    from convcli import conv_forward, depthwise_conv_forward, pad_images

    pic = _pic()
    ks = kernels("vertical", "gaussian-5x5")
    op = ConvOp(ks, channels=channels, border=border)
    got = op.compute(pic)
    A = op.conv_input(pic)
    expected = []
    for k in ks:
        p = op.pad_for(k)
        b = np.zeros((1, 1, 1, A.shape[3] if channels == "each" else 1), np.float32)
        W = k.weights.astype(np.float32)[:, :, None, None]
        if border == "constant":  # conv_forward's own zero padding, as before
            A_in, hp = A, {"stride": 1, "pad": p}
        else:
            A_in, hp = pad_images(A, p, mode=border), {"stride": 1, "pad": 0}
        if channels == "each":
            Z, _ = depthwise_conv_forward(A_in, np.repeat(W, 3, axis=2), b, hp)
        else:
            Z, _ = conv_forward(A_in, W, b, hp)
        expected.append(Z[0])
    np.testing.assert_array_equal(got, np.concatenate(expected, axis=2))


def test_conv_default_border_is_reflect_and_named_only_when_not_default():
    assert ConvOp(kernels("vertical")).border == "reflect"
    assert ConvOp(kernels("vertical")).tags(("L",)).channels == ["vertical-sum"]
    op = ConvOp(kernels("vertical"), border="constant", stride=2, bias=1)
    assert op.tags(("L",)).channels == ["vertical-s2-b1-Bconstant-sum"]
    assert op.tags(("L",)).raw == "vertical-s2-b1-Bconstant-sum"
    # No padding, no border: the names of --pad valid do not depend on it.
    assert ConvOp(kernels("vertical"), pad="valid", border="wrap").tags(("L",)).raw == (
        "vertical-p0-sum"
    )
    with pytest.raises(ValueError, match="mode must be one of"):
        ConvOp(kernels("vertical"), border="mirror")


def test_conv_each_names_a_colour_image_per_kernel():
    tags = ConvOp(kernels("vertical", "gaussian-3x3"), channels="each").tags(("R", "G", "B", "A"))
    assert tags.groups == (("vertical-each", (0, 1, 2)), ("gaussian-3x3-each", (3, 4, 5)))
    assert ConvOp(kernels("vertical"), channels="each").tags(("L",)).groups == ()
    assert ConvOp(kernels("vertical")).tags(("R", "G", "B")).groups == ()


def test_conv_combine_names_and_values():
    pic = _pic()
    ks = kernels("sobel-x", "sobel-y")
    separate = ConvOp(ks).compute(pic)
    for combine, expected in [
        ("magnitude", np.sqrt(separate[:, :, 0] ** 2 + separate[:, :, 1] ** 2)),
        ("max", np.maximum(separate[:, :, 0], separate[:, :, 1])),
        ("sum", separate[:, :, 0] + separate[:, :, 1]),
    ]:
        op = ConvOp(ks, combine=combine)
        assert op.tags(("R", "G", "B")).channels == [f"sobel-x+sobel-y-{combine}-sum"]
        assert op.tags(("R", "G", "B")).raw == f"sobel-x+sobel-y-{combine}-sum"
        got = op.compute(pic)
        assert got.shape == separate.shape[:2] + (1,)
        np.testing.assert_allclose(got[:, :, 0], expected, rtol=1e-6)
        assert [m.method for m in op.mappings(pic)] == ["robust"]
    each = ConvOp(ks, channels="each", combine="magnitude")
    assert each.tags(("R", "G", "B")).channels == [f"sobel-x+sobel-y-magnitude-{c}" for c in "RGB"]
    assert each.tags(("R", "G", "B")).groups == (("sobel-x+sobel-y-magnitude-each", (0, 1, 2)),)
    assert each.compute(pic).shape[2] == 3
    with pytest.raises(ValueError, match="combine"):
        ConvOp(ks, combine="mean")


def test_conv_mappings_show_a_level_keeping_channel_sum_as_the_mean():
    pic = _pic()
    (mapping,) = ConvOp(kernels("gaussian-3x3")).mappings(pic)
    assert mapping.method == "clip" and mapping.white == 3 * 255.0
    (mapping,) = ConvOp(kernels("gaussian-3x3"), normalize="clip").mappings(pic)
    assert mapping.white == 255.0  # an explicit clip keeps the input's scale
    (mapping,) = ConvOp(kernels("vertical")).mappings(pic)
    assert mapping.method == "robust" and mapping.margin == 4


def test_conv_figure_scale_is_counted_away_from_the_border():
    from convcli.levels.mapping import robust_top

    # A flat picture with zero padding: the only responses are the frame's.
    pic = _pic(shape=(40, 40, 1))
    pic.pixels[:] = 250.0
    pic.pixels[20, :] = 200.0  # one darker line: the edges inside
    op = ConvOp(kernels("horizontal"), border="constant")
    data = op.compute(pic)
    grid = op.figure(pic, data)
    limit = grid.panels[1].vmax
    assert limit == robust_top(data, margin=op.margin())
    # The line's edges (150), not the zero-padded frame (750 on rows 0 and -1, 5% of the map).
    assert limit == pytest.approx(150.0)


def test_each_channel_is_mapped_once_for_its_own_file_and_the_colour_image(tmp_path, monkeypatch):
    from convcli.app import process

    calls = []
    original = process._levels
    monkeypatch.setattr(
        process,
        "_levels",
        lambda data, index, *args: calls.append(index) or original(data, index, *args),
    )
    src = make_image(tmp_path / "photo.png", "RGB")
    op = ConvOp((get_kernel("vertical"),), channels="each")
    (task,) = plan_tasks(find_inputs([src], out_dir=tmp_path / "out").files, op)
    result = process_file(task)
    assert result.status == "done" and len(result.outputs) == 4  # R, G, B and the colour image
    assert sorted(calls) == [0, 1, 2]
    with Image.open(tmp_path / "out" / "photo_conv-vertical-each.png") as im:
        colour = np.asarray(im)
    for i, channel in enumerate("RGB"):
        with Image.open(tmp_path / "out" / f"photo_conv-vertical-{channel}.png") as im:
            np.testing.assert_array_equal(np.asarray(im), colour[:, :, i])


@pytest.mark.parametrize(
    "bad", [[], [np.nan], [np.inf], [-np.inf], [np.nan, np.inf, -np.inf, np.nan]]
)
def test_a_files_note_counts_the_values_that_are_not_finite(bad):
    """Counted as isfinite does, whether the smallest and largest values show them or not."""
    data = np.random.default_rng(2).standard_normal((7, 9, 2)).astype(np.float32)
    data.flat[[3, 17, 40, 99][: len(bad)]] = bad
    assert count_not_finite(data) == len(bad) == data.size - np.isfinite(data).sum()
    assert count_not_finite(data[:0]) == 0


def _integer_pic(dtype, channels, seed=0, shape=(9, 11)):
    from convcli.io.images import Picture

    top = np.iinfo(dtype).max
    samples = np.random.default_rng(seed).integers(0, top, shape + (len(channels),), endpoint=True)
    return Picture(samples.astype(dtype), channels, float(top), 16 if top > 255 else 8)


@pytest.mark.parametrize(
    ("dtype", "channels", "weight", "combine", "vouched"),
    [
        (np.uint8, ("R", "G", "B"), 1.0, None, True),
        (np.uint16, ("R", "G", "B"), 1e3, "magnitude", True),
        (np.uint8, ("L",), 1e13, "magnitude", True),  # 2 x 255 x 9e13: squares well in float32
        (np.uint16, ("R", "G", "B", "A"), 1.0, None, False),  # alpha weighting: counted
        (np.uint8, ("R", "G", "B"), 3e37, None, False),  # overflows: counted
        (np.uint16, ("L",), 1e12, "magnitude", False),  # over the bound: counted
    ],
)
def test_conv_vouches_for_finite_results_only_where_they_cannot_overflow(
    dtype, channels, weight, combine, vouched
):
    """``finite_results`` spares the count of values that are not finite; where it says
    True the values are finite, and where overflow is possible it says False."""
    kernels = (Kernel("big", "all one weight", np.full((3, 3), weight)), get_kernel("horizontal"))
    op = ConvOp(kernels, combine=combine)
    pic = _integer_pic(dtype, channels)
    assert op.finite_results(pic) is vouched
    data = op.compute(pic)
    if vouched:
        assert np.isfinite(data).all()
    assert op.finite_results(_pic()) is False  # float samples: only a pass can tell


def test_conv_vouches_for_finite_results_only_for_few_enough_kernels():
    """The kernels' sum and sum of squares grow with their number: so does the bound."""
    pic = _integer_pic(np.uint8, ("L",))
    weights = np.full((3, 3), 1e13)  # 255 x 9e13 = 2.3e16 a kernel
    one = ConvOp((Kernel("k0", "big", weights),), combine=None)
    five = ConvOp(tuple(Kernel(f"k{i}", "big", weights) for i in range(5)), combine="sum")
    assert one.finite_results(pic) and not five.finite_results(pic)
