"""Folders, output names, nothing lost, and error reporting of the image commands."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import (
    assert_one_line_error,
    make_bomb_png,
    make_image,
    make_truncated_png,
    names,
    ok,
    run,
)
from PIL import Image

from convcli import pool_forward
from convcli.io.image_files import save_levels


@pytest.fixture
def folder(tmp_path):
    """in/ with two images, a text file, a hidden image and a subfolder with one image."""
    d = tmp_path / "in"
    (d / "sub" / "deeper").mkdir(parents=True)
    make_image(d / "a.png", "RGB", seed=1)
    make_image(d / "B.JPG", "RGB", seed=2)
    (d / "notes.txt").write_text("not an image")
    make_image(d / ".hidden.png", "RGB")
    make_image(d / "sub" / "c.png", "L", seed=3)
    make_image(d / "sub" / "deeper" / "d.tif", "L", seed=4)
    return d


# --- folders ---------------------------------------------------------------------------------


def test_folder_takes_its_images_only_and_passes_over_other_files(folder, tmp_path):
    out = tmp_path / "out"
    result = run("pool", folder, "-o", out, "--format", "npy")
    assert result.exit_code == 0, result.output
    assert names(out) == ["B_pool-max-f2-s2.npy", "a_pool-max-f2-s2.npy"]
    assert "notes.txt" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith("convcli: 2 processed, 0 skipped, 0 failed")


def test_recursive_mirrors_subfolders(folder, tmp_path):
    out = tmp_path / "out"
    result = run("pool", "-r", folder, "-o", out, "--format", "npy")
    assert result.exit_code == 0, result.output
    assert names(out) == [
        "B_pool-max-f2-s2.npy",
        "a_pool-max-f2-s2.npy",
        "sub/c_pool-max-f2-s2.npy",
        "sub/deeper/d_pool-max-f2-s2.npy",
    ]
    with Image.open(folder / "sub" / "c.png") as im:
        A = np.asarray(im).astype(np.float32)[None, :, :, None]
    np.testing.assert_array_equal(
        np.load(out / "sub" / "c_pool-max-f2-s2.npy"), pool_forward(A, {"f": 2, "stride": 2})[0][0]
    )


def test_folder_without_images_is_reported(tmp_path):
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    result = run("pool", empty, "-o", tmp_path / "out")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"convcli: {empty}: no image files in this folder (use -r to include its subfolders)",
        "convcli: no input images: nothing done",
    ]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_no_output_folder_when_every_input_fails(tmp_path, jobs):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    result = run("conv", tmp_path / "nosuch.png", bad, "-o", tmp_path / "out" / "edges", "-j", jobs)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1].endswith("; no outputs written")
    assert names(tmp_path) == ["bad.png"]  # no folder made


def test_an_output_folder_that_cannot_be_made_is_a_usage_error_making_nothing(tmp_path, photo):
    (tmp_path / "afile").write_text("in the way")
    result = run("pool", photo, "-o", tmp_path / "afile" / "out")
    assert_one_line_error(result, 2, "'-o'", "cannot create the folder", "afile")
    assert names(tmp_path) == ["afile", "photo.png"]


def test_the_output_folder_is_made_when_the_first_output_is_written(tmp_path, photo):
    ok("pool", photo, "-o", tmp_path / "a" / "b")
    assert names(tmp_path / "a") == ["b/photo_pool-max-f2-s2.png"]


def test_output_folder_inside_the_input_folder_is_not_an_input(folder):
    out = folder / "results"
    assert run("pool", "-r", folder, "-o", out, "--format", "npy").exit_code == 0
    again = run("pool", "-r", folder, "-o", out, "--format", "npy")
    assert again.exit_code == 0
    assert "0 processed, 4 skipped, 0 failed" in again.stderr  # results/ was not read


def test_mixed_files_and_folders_and_duplicates(folder, tmp_path):
    out = tmp_path / "out"
    result = run("pool", folder / "a.png", folder, folder / "a.png", "-o", out, "--format", "npy")
    assert result.exit_code == 0, result.output
    assert names(out) == ["B_pool-max-f2-s2.npy", "a_pool-max-f2-s2.npy"]
    assert "2 processed" in result.stderr


# --- names -----------------------------------------------------------------------------------


def test_same_stem_inputs_get_their_extension_appended(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    make_image(d / "photo.png", "RGB", seed=1)
    make_image(d / "photo.webp", "RGB", seed=2)
    make_image(d / "other.png", "RGB", seed=3)
    out = tmp_path / "out"
    result = run("pool", d, "-o", out, "--format", "npy")
    assert result.exit_code == 0, result.output
    assert names(out) == [
        "other_pool-max-f2-s2.npy",
        "photo-png_pool-max-f2-s2.npy",
        "photo-webp_pool-max-f2-s2.npy",
    ]
    png = np.load(out / "photo-png_pool-max-f2-s2.npy")
    webp = np.load(out / "photo-webp_pool-max-f2-s2.npy")
    assert not np.array_equal(png, webp)


def test_same_name_in_two_folders_is_numbered(tmp_path):
    for sub, seed in (("x", 1), ("y", 2)):
        (tmp_path / sub).mkdir()
        make_image(tmp_path / sub / "p.png", "RGB", seed=seed)
    out = tmp_path / "out"
    assert run("pool", tmp_path / "x", tmp_path / "y", "-o", out, "--format", "npy").exit_code == 0
    assert names(out) == ["p-png-2_pool-max-f2-s2.npy", "p-png_pool-max-f2-s2.npy"]


def test_numbering_does_not_depend_on_the_order_of_the_inputs(tmp_path):
    for sub, seed in (("a", 1), ("b", 2)):
        (tmp_path / "ss" / sub).mkdir(parents=True)
        make_image(tmp_path / "ss" / sub / "photo.png", "RGB", seed=seed)
    a, b = tmp_path / "ss" / "a", tmp_path / "ss" / "b"
    expected = {"photo-png_pool-max-f2-s2.npy": a, "photo-png-2_pool-max-f2-s2.npy": b}
    for order in ((a, b), (b, a)):
        out = tmp_path / f"out-{order[0].name}"
        assert run("pool", *order, "-o", out, "--format", "npy", "-q").exit_code == 0
        assert names(out) == sorted(expected)
        for name, folder in expected.items():
            source, _ = pool_forward(
                np.asarray(Image.open(folder / "photo.png"), np.float32)[None],
                {"f": 2, "stride": 2},
                "max",
            )
            np.testing.assert_array_equal(np.load(out / name), source[0])


# --- nothing lost ----------------------------------------------------------------------------


def test_existing_outputs_are_skipped_unless_overwrite(tmp_path):
    src = make_image(tmp_path / "p.png", "RGB")
    out = tmp_path / "out"
    assert run("pool", src, "--separate", "-o", out).exit_code == 0
    target = out / "p_pool-max-f2-s2-R.png"
    # An earlier output of convcli's (only those are replaced with --overwrite).
    save_levels(target, np.full((3, 3), 7, np.uint8), fmt="png", overwrite=True)
    result = run("pool", src, "--separate", "-o", out, "--format", "png")
    assert result.exit_code == 0
    assert result.stderr.startswith("convcli: 0 processed, 1 skipped, 0 failed in ")
    assert result.stderr.endswith(
        "; skipped: outputs exist (--overwrite replaces them, -v lists them)\n"
    )
    listed = run("pool", src, "--separate", "-o", out, "-v")
    assert listed.stderr.splitlines()[0] == (
        f"convcli: {src}: skipped, 0 written (outputs exist (use --overwrite to replace them))"
    )
    with Image.open(target) as im:
        assert im.size == (3, 3)
    result = run("pool", src, "--separate", "-o", out, "--overwrite")
    assert result.exit_code == 0 and "1 processed" in result.stderr
    with Image.open(target) as im:
        assert im.size == (20, 15)


@pytest.mark.parametrize("taken_by", ["file", "folder", "dangling link"])
def test_an_outputs_name_taken_by_another_is_a_failure_not_a_skip(tmp_path, taken_by):
    """Only an output convcli wrote is skipped as done; a user's file, a folder or a link
    to nothing at its name fails the input on one line, as with --overwrite, and is kept."""
    src = make_image(tmp_path / "p.png", "RGB")
    out = tmp_path / "out"
    out.mkdir()
    target = out / "p_pool-max-f2-s2.png"
    if taken_by == "file":
        target.write_text("precious")
    elif taken_by == "folder":
        target.mkdir()
    else:
        target.symlink_to(tmp_path / "nothing")
    for extra in ([], ["--overwrite"]):
        result = run("pool", src, "-o", out, *extra)
        assert result.exit_code == 1, result.stderr
        line = result.stderr.splitlines()[0]
        assert line.startswith(f"convcli: {src}: {target}: ")
        why = "a folder has the output's name" if taken_by == "folder" else "not written by convcli"
        assert why in line
        assert "0 processed, 0 skipped, 1 failed" in result.stderr
    if taken_by == "file":
        assert target.read_text() == "precious"
    assert sorted(p.name for p in out.iterdir()) == [target.name]


@pytest.mark.parametrize("fmt", ["png", "npy", "zarr"])
def test_a_run_again_skips_its_outputs_and_figure(tmp_path, fmt):
    """Each kind of output convcli wrote is its own (a Zarr store a folder, the figure a
    PNG beside it): the same run again skips the file and changes none of them."""
    if fmt == "zarr":
        pytest.importorskip("zarr")
    src = make_image(tmp_path / "p.png", "RGB")
    out = tmp_path / "out"
    args = ("conv", "-k", "sobel-x", src, "--format", fmt, "--figure", "-o", out)
    assert run(*args).exit_code == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert any(name.endswith("_grid.png") for name in before)
    again = run(*args)
    assert again.exit_code == 0 and "0 processed, 1 skipped, 0 failed" in again.stderr
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_a_half_done_file_is_completed_and_existing_outputs_kept(tmp_path):
    src = make_image(tmp_path / "p.png", "RGB")
    out = tmp_path / "out"
    assert run("pool", src, "--separate", "-o", out).exit_code == 0
    (out / "p_pool-max-f2-s2-G.png").unlink()
    before = (out / "p_pool-max-f2-s2-R.png").stat().st_mtime_ns
    result = run("pool", src, "--separate", "-o", out)
    assert result.exit_code == 0
    assert "kept 3 existing output(s)" in result.stderr
    assert (out / "p_pool-max-f2-s2-G.png").exists()
    assert (out / "p_pool-max-f2-s2-R.png").stat().st_mtime_ns == before


def test_output_folder_equal_to_the_input_folder(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    src = make_image(d / "p.png", "RGB")
    original = src.read_bytes()
    assert run("pool", d, "-o", d).exit_code == 0
    assert src.read_bytes() == original
    # The outputs are now images in the input folder; a second run passes over them
    # (they are outputs of p.png) and finds its own outputs done.
    produced = names(d)
    again = run("pool", d, "-o", d)
    assert again.exit_code == 0 and len(again.stderr.splitlines()) == 1
    assert "0 processed, 1 skipped, 0 failed" in again.stderr
    assert names(d) == produced
    result = run("pool", d, "-o", d, "--overwrite", "-q")
    assert result.exit_code == 0, result.output
    assert names(d) == produced
    assert src.read_bytes() == original


def test_output_folder_equal_to_the_input_folder_when_run_again(tmp_path):
    d = tmp_path / "sc3"
    d.mkdir()
    make_image(d / "a.png", "RGB", seed=1)
    make_image(d / "b.JPG", "RGB", seed=2)
    expected = [
        "a.png",
        "a_conv-vertical-sum.png",
        "a_conv-vertical-sum_grid.png",
        "b.JPG",
        "b_conv-vertical-sum.png",
        "b_conv-vertical-sum_grid.png",
    ]
    for _ in range(3):
        result = run("conv", "-k", "vertical", d, "-o", d, "-q", "--figure")
        assert result.exit_code == 0, result.output
        assert names(d) == expected
    result = run("conv", "-k", "vertical", d, "-o", d, "--figure", "--overwrite")
    assert result.exit_code == 0, result.output
    assert "2 processed, 0 skipped, 0 failed" in result.stderr
    assert names(d) == expected


def test_no_temporary_files_are_left(folder, tmp_path):
    out = tmp_path / "out"
    run("conv", "-r", folder, "-o", out, "-k", "vertical", "--figure")
    assert not [p for p in out.rglob(".convcli-*")]


# --- per-file failures -----------------------------------------------------------------------


def test_named_non_image_fails_and_the_others_go_on(folder, tmp_path):
    out = tmp_path / "out"
    result = run("pool", folder / "notes.txt", folder / "a.png", "-o", out)
    assert result.exit_code == 1
    assert f"convcli: {folder / 'notes.txt'}: not an image file" in result.stderr
    assert "1 processed, 0 skipped, 1 failed" in result.stderr
    assert (out / "a_pool-max-f2-s2.png").exists()


@pytest.mark.parametrize(
    "setup, needles",
    [
        (lambda d: d / "missing.png", ["missing.png", "No such file or directory"]),
        (lambda d: (d / "t.txt").write_text("x") and d / "t.txt", ["t.txt", "not an image file"]),
        (lambda d: make_truncated_png(d / "half.png"), ["half.png", "truncated"]),
        (
            lambda d: make_bomb_png(d / "bomb.png"),
            ["bomb.png", "100000x100000", "over the limit of 89,478,485", "--max-pixels"],
        ),
        (
            lambda d: make_image(d / "tiny.png", "RGB", size=(1, 1)),
            ["tiny.png", "too small for the 2x2 pooling window"],
        ),
    ],
    ids=["missing", "not-an-image", "truncated", "pixel-limit", "too-small"],
)
def test_per_file_failures_are_one_line(tmp_path, setup, needles):
    path = setup(tmp_path)
    result = run("pool", path, "-o", tmp_path / "out", "-q")
    assert_one_line_error(result, 1, *needles)


def test_max_pixels_option(tmp_path):
    src = make_image(tmp_path / "p.png", "RGB")
    result = run("pool", src, "-o", tmp_path / "out", "--max-pixels", 100, "-q")
    assert_one_line_error(result, 1, "p.png", "40x30 = 1,200 pixels, over the limit of 100")
    assert run("pool", src, "-o", tmp_path / "out", "--max-pixels", 0).exit_code == 0


def test_conv_too_small_for_the_kernel(tmp_path):
    src = make_image(tmp_path / "p.png", "L", size=(4, 4))
    result = run("conv", src, "-k", "gaussian-5x5", "--pad", "valid", "-o", tmp_path / "o", "-q")
    assert_one_line_error(result, 1, "p.png", "too small for the 5x5 kernel 'gaussian-5x5'")


@pytest.mark.parametrize("dry_run", [[], ["-n"]], ids=["run", "dry-run"])
@pytest.mark.parametrize("fmt", ["png", "tiff"])
def test_too_small_for_the_window_names_the_option_in_every_path(tmp_path, fmt, dry_run):
    """A TIFF (its size known from its header) and the dry run say it as a PNG's run does,
    not in the library's words (hparameters["f"])."""
    src = tmp_path / f"p.{fmt}"
    Image.fromarray(np.zeros((7, 9), np.uint16 if fmt == "tiff" else np.uint8)).save(src)
    for command in (["pool"], ["grad", "pool"]):
        result = run(*command, *dry_run, "--size", "9", src, "-o", tmp_path / "o", "-q")
        assert_one_line_error(
            result, 1, "p.", "image is 9x7 pixels, too small for the 9x9 pooling window (--size)"
        )
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("dry_run", [[], ["-n"]], ids=["run", "dry-run"])
@pytest.mark.parametrize(
    "options, needles",
    [
        (["--pad", "9" * 20], [f"--pad {'9' * 20} makes the image", "at most 2147483647 per axis"]),
        (["--dilation", "10000000000"], ["--pad same with --dilation 10000000000", "at most"]),
    ],
    ids=["axis", "dilation"],
)
def test_a_padded_image_longer_than_any_array_names_the_option(tmp_path, options, needles, dry_run):
    """Refused before anything that size is made, in the default channel sum's path too
    (not numpy's error, nor an internal one), and by the dry run."""
    src = make_image(tmp_path / "p.png", "RGB", size=(8, 8))
    result = run("conv", "-k", "vertical", *options, *dry_run, src, "-o", tmp_path / "o", "-q")
    assert_one_line_error(result, 1, "p.png", *needles)


@pytest.mark.parametrize(
    "options, cause",
    [
        ([], "--pad 100000 makes the"),
        (["--dilation", "2"], "--pad 100000 with --dilation 2 makes the"),
        (["--channels", "gray"], "--pad 100000 makes the"),
        (["--channels", "each"], "--pad 100000 makes the"),
    ],
)
def test_a_padded_image_larger_than_memory_is_refused_before_it_is_made(tmp_path, options, cause):
    """The channel sum's paths check the memory as the layers' do (a 149 GiB padded input
    took 3.6 s to fail as 'not enough memory'), in the options' words; the dry run plans
    it, as strips could."""
    src = make_image(tmp_path / "p.png", "RGB", size=(8, 8))
    result = run(
        "conv", "-k", "vertical", "--pad", "100000", *options, src, "-o", tmp_path / "o", "-q"
    )
    assert_one_line_error(result, 1, "p.png", cause, "(149 GiB), more than this machine's memory")
    assert "width" not in result.output


@pytest.mark.parametrize(
    "command, cause",
    [
        (["pad", "--pad", "100000"], "--pad 100000 makes the padded image"),
        (["fit", "--pad", "100000"], "--pad 100000 makes the padded image"),
        (["fit", "--dilation", "100000"], "--pad same with --dilation 100000 makes the"),
    ],
)
def test_pad_and_fit_refuse_a_padded_image_larger_than_memory_in_the_options_words(
    tmp_path, command, cause
):
    src = make_image(tmp_path / "p.png", "RGB", size=(8, 8))
    target = ["-o", tmp_path / ("k.toml" if command[0] == "fit" else "o")]
    inputs = [src, src] if command[0] == "fit" else [src]
    result = run(*command, *inputs, *target, "-q")
    assert_one_line_error(result, 1, "p.png", cause, "GiB), more than this machine's memory")
    assert "width" not in result.output and not (tmp_path / "o").exists()


def test_an_image_larger_than_memory_is_still_sized_for_strips():
    """The size check of a padded image is of its sides alone: the memory a whole image's
    padding takes is checked where it is made, so an image larger than this machine's
    memory is still planned and estimated for strips."""
    from convcli.app.ops import ConvOp
    from convcli.kernels import parse_kernel_spec
    from convcli.layers.validation import MAX_BYTES

    op = ConvOp((parse_kernel_spec("sobel-x"),))
    side = int((2 * MAX_BYTES / 4) ** 0.5)  # a float32 copy twice this machine's memory
    assert op.output_size(side, side) == (side, side)
    assert op.work_bytes(side, side, 1, 1) > MAX_BYTES


# --- usage errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, needles",
    [
        (["conv", "IMG", "-k", "nope"], ["--kernel", "unknown kernel 'nope'"]),
        (["conv", "IMG", "-k", "vertical:30"], ["--kernel", "30"]),
        (["conv", "IMG", "-k", "missing/k.txt"], ["--kernel", "missing/k.txt"]),
        (["conv", "IMG", "-k", "vertical", "-k", "vertical"], ["--kernel", "vertical"]),
        (
            ["conv", "IMG", "-k", "vertical", "-k", "gaussian-5x5", "--pad", "1"],
            ["--pad", "different sizes"],
        ),
        (["conv", "IMG", "--pad", "wide"], ["--pad", "wide"]),
        (["conv", "IMG", "--pad", "-1"], ["--pad"]),
        (["conv", "IMG", "--stride", "0"], ["--stride"]),
        (["conv", "IMG", "--bias", "nan"], ["--bias", "finite"]),
        (["conv", "IMG", "--channels", "rgb"], ["--channels"]),
        (["conv", "IMG", "--normalize", "gamma"], ["--normalize"]),
        (["pool", "IMG", "--mode", "min"], ["--mode"]),
        (["pool", "IMG", "--size", "0"], ["--size"]),
        (["pad", "IMG", "--pad", "-2"], ["--pad"]),
        (["pad", "IMG", "--value", "inf"], ["--value"]),
        (["pad", "IMG", "--mode", "mirror"], ["--mode"]),
        (["pad", "IMG", "--format", "gif"], ["--format"]),
        (["pad", "IMG", "--max-pixels", "-1"], ["--max-pixels"]),
        (["pad", "IMG", "-o", "FILE"], ["FILE"]),
        (["pad"], ["INPUT"]),
        (["kernels", "nope"], ["NAME", "unknown kernel 'nope'"]),
        (["nonsense"], ["nonsense"]),
    ],
)
def test_usage_errors_are_one_line_with_status_2(tmp_path, args, needles):
    image = make_image(tmp_path / "p.png", "RGB")
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    args = [str(image) if a == "IMG" else str(a_file) if a == "FILE" else a for a in args]
    needles = [str(a_file) if n == "FILE" else n for n in needles]
    assert_one_line_error(run(*args), 2, *needles)


def test_quiet_run_prints_nothing(folder, tmp_path):
    result = run("conv", folder, "-o", tmp_path / "out", "-q", "-k", "vertical")
    assert result.exit_code == 0
    assert result.stderr == "" and result.stdout == ""
