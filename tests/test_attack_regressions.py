"""Regressions found by benchmarks/attack_tiles_frames.py: frames, strips, kernels, engines."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
import tifffile
from helpers import assert_one_line_error, run
from PIL import Image

from convcli.io.frames import MAX_LISTED_FRAMES, parse_frames
from convcli.io.image_files import save_frames


@pytest.mark.parametrize("text", ["0-99999999", "0-" + "9" * 40, "5," + "9" * 30 + "-" + "9" * 31])
def test_a_frame_list_too_long_to_hold_is_refused_at_once(tmp_path, text):
    # 0-99999999 was expanded to 10^8 numbers (2.7 GB, then a MemoryError with no message).
    path = tmp_path / "a.gif"
    frames = [Image.new("RGB", (4, 3), (k * 50, 0, 0)) for k in range(3)]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=50)
    assert_one_line_error(
        run("pool", path, "-o", tmp_path / "o", "--frames", text),
        2,
        "--frames",
        f"at most {MAX_LISTED_FRAMES} frames",
    )
    assert not (tmp_path / "o").exists()


def test_the_longest_frame_list_is_still_taken():
    assert len(parse_frames(f"0-{MAX_LISTED_FRAMES - 1}")) == MAX_LISTED_FRAMES
    with pytest.raises(ValueError, match="at most"):
        parse_frames(f"0-{MAX_LISTED_FRAMES}")


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_a_multipage_tiff_is_written_page_after_page_deflated(tmp_path, dtype):
    # Pillow's appender walked every page from the first for each page added (20000
    # one-pixel frames: over 300 s); tifffile writes each page after the last.
    frames = (np.arange(300 * 2 * 3).reshape(300, 2, 3) % 251).astype(dtype)
    save_frames(tmp_path / "a.tif", frames, fmt="tiff")
    with tifffile.TiffFile(tmp_path / "a.tif") as tif:
        assert len(tif.pages) == 300
        assert {page.compression for page in tif.pages} == {tifffile.COMPRESSION.ADOBE_DEFLATE}
        assert tif.pages[0].predictor == (2 if dtype == np.uint8 else 1)
        np.testing.assert_array_equal(tif.asarray(key=range(300)), frames)
    with Image.open(tmp_path / "a.tif") as im:
        assert im.n_frames == 300
        im.seek(299)
        np.testing.assert_array_equal(np.asarray(im), frames[299])


def _tiff_with(path, shape, tags: dict[str, int], **options):
    """A zlib TIFF of zeros written by tifffile, then the first page's `tags` set (16 bits)."""
    tifffile.imwrite(path, np.zeros(shape, np.uint8), compression="zlib", **options)
    with tifffile.TiffFile(path) as tif:
        at = {tif.pages[0].tags[name].valueoffset: value for name, value in tags.items()}
    data = bytearray(path.read_bytes())
    for offset, value in at.items():
        data[offset : offset + 2] = struct.pack("<H", value)
    path.write_bytes(bytes(data))
    return path


def test_a_tiff_listing_fewer_tiles_than_its_size_needs_fails_on_one_line(tmp_path):
    # Its width and length patched from 512 to 3000: read in strips, an IndexError
    # was reported as an internal error.
    path = _tiff_with(
        tmp_path / "claims.tif",
        (512, 512),
        {"ImageWidth": 3000, "ImageLength": 3000},
        tile=(256, 256),
    )
    result = run("conv", "-k", "box", path, "-o", tmp_path / "o", "--memory", "1M")
    lines = result.stderr.splitlines()
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert lines[0] == (
        f"convcli: {path}: cannot decode the image: it lists 4 tiles or strips "
        "where its 3000 x 3000 pixels need 144"
    )
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("memory", [[], ["--memory", "1M"]])
def test_a_tiff_that_tifffile_cannot_parse_fails_on_one_line(tmp_path, memory):
    # SamplesPerPixel 0: tifffile raised an IndexError, reported as an internal error.
    path = _tiff_with(tmp_path / "none.tif", (300, 200, 3), {"SamplesPerPixel": 0}, rowsperstrip=32)
    result = run("conv", "-k", "box", path, "-o", tmp_path / "o", *memory)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.splitlines()[0] == (
        f"convcli: {path}: cannot decode the image: a TIFF file whose header Pillow cannot "
        "read (unknown pixel mode)"
    )
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "make, what",
    [
        (lambda p: os.mkfifo(p), "a FIFO"),
        (
            lambda p: p.symlink_to(p),
            "a link that leads nowhere (Too many levels of symbolic links)",
        ),
        (lambda p: p.symlink_to(p.with_name("gone.txt")), "a link that leads nowhere"),
    ],
)
def test_a_kernel_path_that_is_no_file_says_what_it_is(tmp_path, make, what):
    # They were "no such kernel file", although something is there (never opened: a FIFO blocks).
    path = tmp_path / "k.txt"
    make(path)
    assert_one_line_error(
        run("kernels", "--check", path), 2, f"{path}: {what}", "not a kernel file"
    )


def test_a_device_named_as_a_kernel_says_so():
    assert_one_line_error(
        run("kernels", "--check", "/dev/zero"), 2, "/dev/zero: a device, not a kernel file"
    )


def test_a_scheduler_file_with_engine_processes_is_named_as_given(tmp_path):
    # The message named --scheduler, an option the command line did not have.
    Image.new("RGB", (4, 4)).save(tmp_path / "a.png")
    result = run(
        "pool",
        tmp_path / "a.png",
        "-o",
        tmp_path / "o",
        "--engine",
        "processes",
        "--scheduler-file",
        tmp_path / "s.json",
    )
    assert_one_line_error(result, 2, "'--scheduler-file'", "--engine processes does not use")
