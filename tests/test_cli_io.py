"""Where a run reads and writes: -o FILE, standard input and output, no folder on usage errors."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import (
    assert_one_line_error,
    assert_same_file,
    make_image,
    names,
    ok,
    outputs_in,
    read,
    run,
)
from PIL import Image

from convcli.cli.main import main


def _folder_run(photo, folder, *args):
    ok(*args, photo, "-o", folder)
    return folder


# --- -o FILE -----------------------------------------------------------------------------------


def test_o_file_writes_the_one_image_of_a_single_kernel(photo, tmp_path):
    target = tmp_path / "edges.png"
    result = ok("conv", "-k", "vertical", photo, "-o", target)
    assert result.stderr == ""  # one file named and written: nothing to say, as cp
    assert target.is_file()
    verbose = ok("conv", "-k", "vertical", photo, "-o", target, "--overwrite", "-v")
    assert verbose.stderr.rstrip().endswith(f"output in {target}")
    folder = _folder_run(photo, tmp_path / "ref", "conv", "-k", "vertical")
    np.testing.assert_array_equal(read(target), read(folder / "photo_conv-vertical-sum.png"))
    assert names(tmp_path) == sorted(["edges.png", "photo.png", "ref/photo_conv-vertical-sum.png"])


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["pool"], "photo_pool-max-f2-s2.png"),  # the whole colour image, not a channel
        (["pad", "--pad", "3"], "photo_pad-constant-3.png"),
        (["conv", "-k", "gaussian", "--channels", "each"], "photo_conv-gaussian-3x3-each.png"),
        (
            ["conv", "-k", "sobel-x", "-k", "sobel-y", "--combine", "magnitude"],
            "photo_conv-sobel-x+sobel-y-magnitude-sum.png",
        ),
    ],
)
def test_o_file_writes_the_image_that_stands_for_the_result(photo, tmp_path, args, expected):
    target = tmp_path / "result.png"
    ok(*args, photo, "-o", target)
    folder = _folder_run(photo, tmp_path / "ref", *args)
    np.testing.assert_array_equal(read(target), read(folder / expected))


@pytest.mark.parametrize(
    ("name", "fmt", "extra"),
    [
        ("small.jpeg", "JPEG", []),
        ("small.TIF", "TIFF", []),
        ("small.jpg", "JPEG", ["--format", "jpeg"]),
    ],
)
def test_o_file_takes_its_format_from_the_extension(photo, tmp_path, name, fmt, extra):
    target = tmp_path / name
    ok("pool", photo, "-o", target, *extra)
    with Image.open(target) as im:
        assert im.format == fmt and im.size == (20, 15) and im.mode == "RGB"


def test_o_file_npy_holds_the_raw_values(photo, tmp_path):
    target = tmp_path / "values.npy"
    ok("conv", "-k", "edge", photo, "-o", target)
    folder = _folder_run(photo, tmp_path / "ref", "conv", "-k", "edge", "--format", "npy")
    np.testing.assert_array_equal(np.load(target), np.load(folder / "photo_conv-edge-sum.npy"))


def test_o_file_in_a_new_folder_creates_the_folder(photo, tmp_path):
    target = tmp_path / "a" / "b" / "edges.png"
    ok("conv", "-k", "vertical", photo, "-o", target)
    assert target.is_file() and names(tmp_path / "a") == ["b/edges.png"]


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["conv"], ["'-o'", "an image per kernel", "--combine"]),
        (["conv", "-k", "vertical", "--figure"], ["'-o'", "--figure needs a folder"]),
        (["conv", "-k", "vertical", "--format", "jpg"], ["'-o'", "names a png file", "jpg"]),
    ],
)
def test_o_file_that_cannot_hold_the_result_is_a_usage_error(photo, tmp_path, args, needles):
    result = run(*args, photo, "-o", tmp_path / "out.png")
    assert_one_line_error(result, 2, *needles)
    assert names(tmp_path) == ["photo.png"]  # no folder named out.png, nothing written


def test_o_file_with_several_inputs_is_a_usage_error(photo, tmp_path):
    other = make_image(tmp_path / "other.png", "L")
    result = run("conv", "-k", "vertical", photo, other, "-o", tmp_path / "out.png")
    assert_one_line_error(result, 2, "'-o'", "2 input images", "give a folder")
    assert names(tmp_path) == ["other.png", "photo.png"]


def test_o_file_written_by_convcli_is_replaced(photo, tmp_path):
    """A file named with -o is the result asked for: a run with other options replaces it."""
    target = tmp_path / "small.png"
    ok("pool", "--size", "2", photo, "-o", target)
    again = ok("pool", "--size", "4", photo, "-o", target, "-v")
    assert "1 processed, 0 skipped" in again.stderr
    with Image.open(target) as im:
        assert im.size == (10, 7)


def test_o_file_convcli_did_not_write_is_kept_and_the_run_fails(photo, tmp_path):
    target = make_image(tmp_path / "mine.png", "L", seed=5)
    before = target.read_bytes()
    result = run("pool", photo, "-o", target)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == (
        f"convcli: {photo}: {target}: the existing file was not written by convcli and is kept "
        "(choose another -o; --overwrite replaces a file named with -o)"
    )
    assert target.read_bytes() == before


def test_o_file_convcli_did_not_write_is_replaced_with_overwrite(photo, tmp_path):
    target = make_image(tmp_path / "mine.png", "L", seed=5)
    assert run("pool", photo, "-o", target, "--overwrite").exit_code == 0
    reference = _folder_run(photo, tmp_path / "ref", "pool")
    (whole,) = [p for p in reference.iterdir() if p.name.endswith("s2.png")]
    assert_same_file(target, whole)


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["run", "dry run"])
def test_o_file_keeps_an_existing_npy_whoever_wrote_it_without_overwrite(photo, tmp_path, dry_run):
    """A .npy has no place for convcli's mark: one named with -o is kept, even convcli's own,
    and the run fails on one line; --overwrite replaces it."""
    mine = tmp_path / "results.npy"
    np.save(mine, np.arange(1000.0))
    before = mine.read_bytes()
    result = run("conv", "-k", "sobel-x", photo, "-o", mine, *dry_run)
    assert_one_line_error(result, 1, f"{mine}: an existing .npy is kept", "--overwrite replaces")
    assert mine.read_bytes() == before
    convcli_own = tmp_path / "edges.npy"
    ok("conv", "-k", "sobel-x", photo, "-o", convcli_own)
    assert run("conv", "-k", "edge", photo, "-o", convcli_own, *dry_run).exit_code == 1
    assert run("conv", "-k", "sobel-x", photo, "-o", mine, "--overwrite", *dry_run).exit_code == 0
    if not dry_run:
        values = np.load(mine)
        np.testing.assert_array_equal(values, np.load(convcli_own))
        assert values.dtype == np.float32 and values.shape[2] == 1


def test_overwrite_replaces_npy_outputs_in_a_folder(photo, tmp_path):
    """In a folder convcli names the .npy outputs: --overwrite replaces them there."""
    out = tmp_path / "out"
    ok("conv", "-k", "sobel-x", "--format", "npy", photo, "-o", out)
    (written,) = out.glob("*.npy")
    np.save(written, np.zeros(3, np.float32))
    result = ok("conv", "-k", "sobel-x", "--format", "npy", photo, "-o", out, "--overwrite")
    assert "1 processed, 0 skipped" in result.stderr
    ok("conv", "-k", "sobel-x", "--format", "npy", photo, "-o", tmp_path / "reference")
    np.testing.assert_array_equal(np.load(written), np.load(tmp_path / "reference" / written.name))


def test_overwrite_keeps_a_file_convcli_did_not_write_in_a_folder(photo, tmp_path):
    out = tmp_path / "out"
    assert run("pool", photo, "-o", out).exit_code == 0
    (written,) = [p for p in out.iterdir() if p.name.endswith("s2.png")]
    make_image(written, "L", seed=5)  # now a file convcli did not write
    before = written.read_bytes()
    result = run("pool", photo, "-o", out, "--overwrite")
    assert result.exit_code == 1 and "was not written by convcli and is kept" in result.stderr
    assert written.read_bytes() == before


def test_o_file_from_a_pipe_is_replaced_by_the_next_image(photo, tmp_path):
    """``cat other.png | convcli conv -k vertical - -o e2.png`` after another photo."""
    other = make_image(tmp_path / "other.png", "RGB", seed=9)
    target = tmp_path / "e2.png"
    for picture in (photo, other):
        result = CliRunner().invoke(
            main, ["conv", "-k", "vertical", "-", "-o", str(target)], input=picture.read_bytes()
        )
        assert result.exit_code == 0, result.stderr
    folder = _folder_run(other, tmp_path / "ref", "conv", "-k", "vertical")
    np.testing.assert_array_equal(read(target), read(folder / "other_conv-vertical-sum.png"))


def test_o_file_never_replaces_the_input(photo):
    original = photo.read_bytes()
    result = run("pool", photo, "-o", photo, "--overwrite")
    assert result.exit_code == 1
    assert "would replace an input file" in result.stderr
    assert photo.read_bytes() == original


@pytest.mark.parametrize("name", ["r.webp", "r.bmp", "r.GIF"])
def test_o_with_an_image_extension_convcli_does_not_write_is_a_usage_error(photo, tmp_path, name):
    result = run("pool", photo, "-o", tmp_path / name)
    assert_one_line_error(result, 2, "'-o'", name, "does not write", ".png, .jpg, .tiff, .npy")
    assert names(tmp_path) == ["photo.png"]  # no folder named like an image


def test_o_naming_an_existing_folder_with_an_extension_is_a_folder(photo, tmp_path):
    folder = tmp_path / "results.png"
    folder.mkdir()
    ok("conv", "-k", "vertical", photo, "-o", folder)
    assert names(folder) == ["photo_conv-vertical-sum.png"]


def test_o_file_with_a_trailing_slash_is_a_usage_error(photo, tmp_path):
    # it failed per file, calling the new name a folder or an existing file
    result = run("pool", photo, "-o", f"{tmp_path / 'small.png'}/")
    assert_one_line_error(result, 2, "'-o'", "small.png/", "ends in /")
    assert names(tmp_path) == ["photo.png"]


def test_o_zarr_store_with_a_trailing_slash_is_the_store(photo, tmp_path):
    ok("pool", photo, "-o", f"{tmp_path / 'small.zarr'}/")
    assert (tmp_path / "small.zarr").is_dir()


# --- standard input and output ---------------------------------------------------------------


def test_stdin_to_stdout_in_a_pipe(photo, tmp_path):
    """``cat photo.png | convcli conv -k vertical - -o - > edges.png``, as a shell runs it."""
    proc = subprocess.run(
        [sys.executable, "-m", "convcli", "conv", "-k", "vertical", "-", "-o", "-"],
        input=photo.read_bytes(),
        capture_output=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == b""  # a filter: quiet unless something goes wrong
    folder = _folder_run(photo, tmp_path / "ref", "conv", "-k", "vertical")
    with Image.open(io.BytesIO(proc.stdout)) as im:
        assert im.format == "PNG"
        np.testing.assert_array_equal(np.asarray(im), read(folder / "photo_conv-vertical-sum.png"))
    assert names(tmp_path) == ["photo.png", "ref/photo_conv-vertical-sum.png"]  # nothing else


def test_stdout_takes_the_format_option(photo):
    result = CliRunner().invoke(main, ["pool", str(photo), "-o", "-", "--format", "tif"])
    assert result.exit_code == 0, result.stderr
    with Image.open(io.BytesIO(result.stdout_bytes)) as im:
        assert im.format == "TIFF" and im.size == (20, 15)


def test_a_piped_jpeg_stays_a_jpeg_through_pool_and_pad(tmp_path):
    """``cat photo.jpg | convcli pool - -o -``: standard input is told by its first bytes,
    and pool and pad write its format as they do for files; maps stay PNG."""
    photo = tmp_path / "photo.jpg"
    pixels = np.random.default_rng(4).integers(0, 256, (60, 80, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(photo, quality=90)
    expected = {
        ("pool",): ("JPEG", (40, 30)),
        ("pad", "--pad", "2"): ("JPEG", (84, 64)),
        ("conv", "-k", "edge"): ("PNG", (80, 60)),
        ("pool", "--format", "png"): ("PNG", (40, 30)),
    }
    for args, (fmt, size) in expected.items():
        proc = subprocess.run(
            [sys.executable, "-m", "convcli", *args, "-", "-o", "-"],
            input=photo.read_bytes(),
            capture_output=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr
        with Image.open(io.BytesIO(proc.stdout)) as im:
            assert (im.format, im.size) == (fmt, size), args
    folder = _folder_run(photo, tmp_path / "ref", "pool")
    proc = subprocess.run(
        [sys.executable, "-m", "convcli", "pool", "-", "-o", "-"],
        input=photo.read_bytes(),
        capture_output=True,
        timeout=120,
    )
    assert proc.stdout == (folder / "photo_pool-max-f2-s2.jpg").read_bytes()


def test_stdin_to_a_folder_is_named_stdin(photo, tmp_path):
    result = CliRunner().invoke(
        main, ["conv", "-k", "edge", "-", "-o", str(tmp_path / "out")], input=photo.read_bytes()
    )
    assert result.exit_code == 0, result.stderr
    assert names(tmp_path / "out") == ["stdin_conv-edge-sum.png"]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty file"),
        (b"not an image\n", "not an image file"),
    ],
)
def test_bad_stdin_fails_as_a_file_named_dash(tmp_path, data, reason):
    result = CliRunner().invoke(main, ["pool", "-", "-o", str(tmp_path / "out")], input=data)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == f"convcli: -: {reason}" or result.stderr.splitlines()[
        0
    ].startswith(f"convcli: -: {reason}")


def test_stdout_with_several_images_is_a_usage_error(photo, tmp_path):
    result = CliRunner().invoke(main, ["conv", str(photo), "-o", "-"])
    assert_one_line_error(result, 2, "'-o'", "an image per kernel")
    assert result.stdout_bytes == b""


def test_dash_twice_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(main, ["pool", "-", "-", "-o", str(tmp_path / "out")], input=b"")
    assert_one_line_error(result, 2, "INPUT", "more than once")
    assert not (tmp_path / "out").exists()


def test_an_empty_o_is_a_usage_error(photo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an empty -o was taken as the current folder
    result = run("pool", photo, "-o", "")
    assert_one_line_error(result, 2, "'-o'", "empty")
    assert list(tmp_path.iterdir()) == [photo]


@pytest.mark.parametrize(
    "arguments, named",
    [
        (["pool", ""], "'INPUT...'"),
        (["conv", "-k", "vertical", "PHOTO", ""], "'INPUT...'"),
        (["fit", "", "PHOTO"], "'BEFORE'"),
        (["fit", "PHOTO", ""], "'AFTER'"),
    ],
)
def test_an_empty_input_name_is_a_usage_error(photo, tmp_path, monkeypatch, arguments, named):
    monkeypatch.chdir(tmp_path)  # said as "convcli: : No such file or directory"
    result = run(*[photo if a == "PHOTO" else a for a in arguments], "-o", tmp_path / "o")
    assert_one_line_error(result, 2, named, "empty")
    assert not (tmp_path / "o").exists()


# --- usage errors and empty runs make no folder ----------------------------------------------


def test_verbose_with_quiet_is_a_usage_error(photo, tmp_path):
    result = run("pool", photo, "-o", tmp_path / "out", "-v", "-q")
    assert_one_line_error(result, 2, "-q", "-v")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args", [["--stride", "0"], ["-k", "no-such-kernel"], ["--pad", "x"]])
def test_a_usage_error_makes_no_output_folder(photo, tmp_path, args):
    result = run("conv", *args, photo, "-o", tmp_path / "out")
    assert result.exit_code == 2
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("alias", "extension", "fmt"), [("jpeg", "jpg", "JPEG"), ("tif", "tiff", "TIFF")]
)
def test_format_aliases(photo, tmp_path, alias, extension, fmt):
    ok("pool", photo, "-o", tmp_path / "out", "--format", alias.upper())
    written = tmp_path / "out" / f"photo_pool-max-f2-s2.{extension}"
    with Image.open(written) as im:
        assert im.format == fmt and im.size == (20, 15)


# --- figures named after what they show ------------------------------------------------------


def test_each_kernel_tried_gets_its_own_grid(photo, tmp_path):
    out = tmp_path / "out"
    ok("conv", "-k", "sobel-x", photo, "-o", out, "--figure")
    first = (out / "photo_conv-sobel-x-sum_grid.png").read_bytes()
    again = ok("conv", "-k", "sobel-y", photo, "-o", out, "--figure")
    assert "skipped" not in again.stderr.replace("0 skipped", "")
    assert (out / "photo_conv-sobel-x-sum_grid.png").read_bytes() == first
    with Image.open(out / "photo_conv-sobel-y-sum_grid.png") as im:
        assert im.format == "PNG" and im.width > 300


# --- start-up ---------------------------------------------------------------------------------

_IMPORTS_OF = """
import sys
from convcli.__main__ import main
sys.argv = ["convcli", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
heavy = sorted(m for m in ("numpy", "PIL", "matplotlib") if m in sys.modules)
print("heavy:", ",".join(heavy))
"""


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--version"],
        ["conv", "--help"],
        ["pool", "--help"],
        ["pad", "-h"],
        ["kernels", "--help"],
    ],
)
def test_help_and_version_import_neither_numpy_nor_pillow(args):
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORTS_OF, *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "heavy: "
    assert "Usage" in proc.stdout or "version" in proc.stdout


def test_version_is_the_package_version():
    from convcli import __version__

    result = run("--version")
    assert result.exit_code == 0
    version, engine = result.stdout.splitlines()
    assert version == f"convcli, version {__version__}"
    assert engine.startswith(("engine: native ", "engine: numpy ("))


# --- kernel names before paths ---------------------------------------------------------------


def test_a_folder_or_file_named_like_a_kernel_does_not_hide_it(photo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "edge").mkdir()  # the default kernels include edge
    (tmp_path / "sobel-y").write_text("0 0 0\n0 5 0\n0 0 0\n")  # convcli kernels X > X, edited
    ok("conv", photo, "-o", "out")
    assert names(tmp_path / "out") == [
        f"photo_conv-{k}-sum.png" for k in ("edge", "horizontal", "vertical")
    ]
    for _ in range(2):  # an output folder named like the kernel, then run again
        ok("conv", "-k", "sobel-x", photo, "-o", "sobel-x", "--overwrite")
    ok("conv", "-k", "sobel-y", photo, "-o", "ref")
    ok("conv", "-k", "./sobel-y", photo, "-o", "file")
    assert not np.array_equal(
        read(tmp_path / "ref" / "photo_conv-sobel-y-sum.png"),
        read(outputs_in(tmp_path / "file")[0]),
    )


def test_comma_list_of_kernels_is_the_same_as_repeating_k(photo, tmp_path):
    ok("conv", "-k", "sobel-x, sobel-y:90", photo, "-o", tmp_path / "list", "--format", "npy")
    ok(
        "conv",
        "-k",
        "sobel-x",
        "-k",
        "sobel-y:90",
        photo,
        "-o",
        tmp_path / "repeated",
        "--format",
        "npy",
    )
    name = "photo_conv-sobel-x+sobel-y_rot90-sum.npy"
    assert names(tmp_path / "list") == [name]
    np.testing.assert_array_equal(
        np.load(tmp_path / "list" / name), np.load(tmp_path / "repeated" / name)
    )


def test_an_empty_item_in_a_kernel_list_is_a_usage_error(photo, tmp_path):
    result = run("conv", "-k", "sobel-x,,edge", photo, "-o", tmp_path / "out")
    assert_one_line_error(result, 2, "'-k'", "empty")
    assert not (tmp_path / "out").exists()


def test_the_command_line_choices_are_the_library_names():
    from convcli import choices
    from convcli.app.names import FORMATS
    from convcli.layers import padding, pooling
    from convcli.levels import mapping as levels

    assert tuple(FORMATS) == choices.FORMAT_NAMES
    assert padding.PAD_MODES is choices.PAD_MODES and pooling.POOL_MODES is choices.POOL_MODES
    assert levels.MAPPINGS is choices.MAPPINGS


def test_frames_written_to_files_of_their_own_are_named_in_the_summary(tmp_path):
    # -o x.jpg of a 6-frame GIF wrote x_f0.jpg ... x_f5.jpg and said "output in x.jpg".
    frames = [Image.new("RGB", (8, 6), (40 * k, 0, 0)) for k in range(6)]
    frames[0].save(tmp_path / "anim.gif", save_all=True, append_images=frames[1:], duration=50)
    result = ok("pool", "--mode", "average", tmp_path / "anim.gif", "-o", tmp_path / "x.jpg")
    assert not (tmp_path / "x.jpg").exists()
    assert sorted(p.name for p in tmp_path.glob("x_f*.jpg")) == [f"x_f{k}.jpg" for k in range(6)]
    assert result.stderr.rstrip().endswith(
        f"6 outputs in {tmp_path} (x_f0.jpg ... x_f5.jpg), not {tmp_path / 'x.jpg'}"
    )


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_an_output_that_cannot_be_made_is_named_not_its_temporary(photo):
    # /proc takes no new files: the temporary's name (.convcli-x.png.<pid>-<hex>.part) was said.
    result = run("pad", photo, "-o", "/proc/convcli-x.png")
    assert result.exit_code == 1
    assert "photo.png: /proc/convcli-x.png: " in result.stderr
    assert ".part" not in result.stderr and ".convcli-" not in result.stderr
