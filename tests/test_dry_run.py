"""``--dry-run``: each input's outputs (names, sizes, formats) and skips, and nothing written."""

from __future__ import annotations

import re

import pytest
from helpers import make_image, names, ok, run
from PIL import Image

_LINE = re.compile(
    r"(?P<source>.+) -> (?P<output>.+) \((?P<width>\d+)x(?P<height>\d+) "
    r"(?P<fmt>\w+)\)"
)

COMMANDS = [
    ["pad", "--pad", "1,2,3,4"],
    ["conv", "-k", "sobel-x", "-k", "edge", "--stride", "2", "--pad", "valid"],
    ["conv", "-k", "gaussian", "--channels", "each"],
    ["pool", "--size", "3", "--ceil", "--format", "jpg"],
    ["grad", "pool", "--size", "4"],
    ["grad", "conv", "-k", "vertical"],
]


def _dry(*args):
    result = run(*args)
    assert result.exit_code == 0 and result.stderr == "", result.output
    return result


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: " ".join(args))
def test_dry_run_lists_what_the_run_writes_and_writes_nothing(tmp_path, args):
    (tmp_path / "in").mkdir()
    photo = make_image(tmp_path / "in" / "photo.png", "RGB", size=(41, 30))
    grey = make_image(tmp_path / "in" / "grey.png", "L", size=(33, 20))
    out = tmp_path / "out"
    dry = _dry(*args, "--dry-run", photo, grey, "-o", out)
    assert names(tmp_path) == ["in/grey.png", "in/photo.png"]  # no folder, no manifest
    listed = [_LINE.fullmatch(line) for line in dry.stdout.splitlines()]
    assert all(listed), dry.stdout
    ok(*args, photo, grey, "-o", out)
    written = {str(out / name) for name in names(out)}
    assert {m["output"] for m in listed} == written
    for m in listed:
        with Image.open(m["output"]) as im:
            assert im.size == (int(m["width"]), int(m["height"]))
            assert im.format.lower().replace("jpeg", "jpg") == m["fmt"]
        assert m["source"] in (str(photo), str(grey))


def test_dry_run_lists_the_inputs_it_would_skip_and_the_raw_values(photo, out):
    ok("pool", photo, "-o", out, "--format", "npy")
    dry = _dry("pool", "-n", photo, "-o", out, "--format", "npy")
    assert dry.stdout == f"{photo}: skip (outputs exist)\n"
    dry = _dry("pool", "-n", "--size", "4", "--figure", photo, "-o", out, "--format", "npy")
    assert dry.stdout.splitlines() == [
        f"{photo} -> {out / 'photo_pool-max-f4-s4.npy'} (10x7x3 npy)",
        f"{photo} -> {out / 'photo_pool-max-f4-s4_grid.png'} (figure png)",
    ]


def test_dry_run_of_an_input_that_cannot_be_read_is_one_line_and_exit_1(photo, tmp_path):
    missing = tmp_path / "nosuch.png"
    result = run("conv", "-k", "vertical", "-n", missing, photo, "-o", tmp_path / "out")
    assert result.exit_code == 1
    assert result.stderr == f"convcli: {missing}: No such file or directory\n"
    assert result.stdout == (
        f"{photo} -> {tmp_path / 'out' / 'photo_conv-vertical-sum.png'} (40x30 png)\n"
    )
    assert names(tmp_path) == ["photo.png"]


def _agree(*args):
    """The dry run and the real run agree on success, on the failure line, on what is written."""
    dry, real = run(*args, "-n"), run(*args)
    assert dry.exit_code == real.exit_code, (dry.output, real.output)
    if real.exit_code:
        assert dry.stderr.splitlines()[0] == real.stderr.splitlines()[0]
    return dry, real


def test_dry_run_reads_as_the_run_does_for_files_read_in_strips(tmp_path):
    import numpy as np
    import tifffile

    big = tmp_path / "big.tif"
    tifffile.imwrite(big, np.zeros((300, 400), np.uint8), tile=(64, 64))
    dry, _ = _agree("conv", "-k", "vertical", big, "-o", tmp_path / "a", "--memory", "1M")
    assert "(400x300 png, in strips)" in dry.stdout
    dry, real = _agree(
        "conv",
        "-k",
        "vertical",
        big,
        "-o",
        tmp_path / "a2",
        "--memory",
        "1M",
        "--max-pixels",
        "1000",
    )  # in strips or whole: over the limit, refused
    assert dry.exit_code == real.exit_code == 1
    assert "over the limit of 1,000" in dry.stderr and "over the limit of 1,000" in real.stderr
    _agree(
        "conv", "-k", "vertical", big, "-o", tmp_path / "b", "--memory", "1M", "--format", "jpg"
    )  # strips write no JPEG: both fail on the same line
    zarr = pytest.importorskip("zarr")
    store = tmp_path / "scan.zarr"
    zarr.save_array(str(store), np.zeros((30, 40), np.uint8))
    dry, _ = _agree("conv", "-k", "vertical", store, "-o", tmp_path / "c")
    assert "(40x30 png)" in dry.stdout


def test_dry_run_refuses_what_the_run_refuses(tmp_path):
    photo = make_image(tmp_path / "p.png", "L")
    _agree("pool", photo, "-o", photo)  # an output over an input
    foreign = make_image(tmp_path / "mine.png", "L", seed=3)
    _agree("pool", photo, "-o", foreign)  # a file convcli did not write
    dry, real = _agree("pool", photo, "-o", foreign, "--overwrite")
    assert dry.exit_code == 0 and "mine.png" in dry.stdout
