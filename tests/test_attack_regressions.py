"""Regressions found by benchmarks/attack_tiles_frames.py: frames, strips, kernels, engines."""

from __future__ import annotations

import io

import numpy as np
import pytest
from helpers import assert_one_line_error, run
from PIL import Image, TiffImagePlugin

from convcli.frames import MAX_LISTED_FRAMES, parse_frames
from convcli.images import _float_image, _marked_tiff_info, save_frames


@pytest.mark.parametrize("text", ["0-99999999", "0-" + "9" * 40, "5," + "9" * 30 + "-" + "9" * 31])
def test_a_frame_list_too_long_to_hold_is_refused_at_once(tmp_path, text):
    # 0-99999999 was expanded to 10^8 numbers (2.7 GB, then a MemoryError with no message).
    path = tmp_path / "a.gif"
    frames = [Image.new("RGB", (4, 3), (k * 50, 0, 0)) for k in range(3)]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=50)
    assert_one_line_error(run("pool", path, "-o", tmp_path / "o", "--frames", text), 2,
                          "--frames", f"at most {MAX_LISTED_FRAMES} frames")
    assert not (tmp_path / "o").exists()


def test_the_longest_frame_list_is_still_taken():
    assert len(parse_frames(f"0-{MAX_LISTED_FRAMES - 1}")) == MAX_LISTED_FRAMES
    with pytest.raises(ValueError, match="at most"):
        parse_frames(f"0-{MAX_LISTED_FRAMES}")


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_a_multipage_tiff_is_written_in_reads_linear_in_its_pages(tmp_path, monkeypatch, dtype):
    # Pillow's appender walked every page from the first for each page added:
    # 20000 one-pixel frames took over 300 s (quadratic); the bytes stay Pillow's.
    frames = (np.arange(300 * 2 * 3).reshape(300, 2, 3) % 251).astype(dtype)
    reads = []
    original = TiffImagePlugin.AppendingTiffWriter._read
    monkeypatch.setattr(TiffImagePlugin.AppendingTiffWriter, "_read",
                        lambda self, size: reads.append(size) or original(self, size))
    save_frames(tmp_path / "a.tif", frames, fmt="tiff")
    assert len(reads) < 10 * len(frames)
    monkeypatch.undo()
    plain = io.BytesIO()
    with TiffImagePlugin.AppendingTiffWriter(plain) as writer:
        for frame in frames:
            page = _float_image(frame) if dtype == np.float32 else Image.fromarray(frame)
            page.save(writer, format="TIFF", tiffinfo=_marked_tiff_info())
            writer.newFrame()
    assert (tmp_path / "a.tif").read_bytes() == plain.getvalue()
    with Image.open(tmp_path / "a.tif") as im:
        assert im.n_frames == 300
        im.seek(299)
        np.testing.assert_array_equal(np.asarray(im), frames[299])
