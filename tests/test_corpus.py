"""A corpus of corrupt image files, made at test time from the sample images, run as batches.

Every format convcli reads often (PNG, JPEG, GIF, TIFF, BMP, WebP) is written
from a sample photo, then truncated, bit-flipped and given edited headers
(seeded). Whole batches of the corpus must end without a traceback or a hang,
name every file that fails on one line, and write for every other file exactly
what a run on that file alone writes, with one process or two. A file that
Pillow's decoder rejects always fails.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import digests, run
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
FORMATS = {"png": "PNG", "jpg": "JPEG", "gif": "GIF", "tiff": "TIFF", "bmp": "BMP", "webp": "WEBP"}


def _mutations(data: bytes, rng: np.random.Generator) -> dict[str, bytes]:
    """Named corruptions of a file's bytes: truncations, bit flips, header edits."""
    out = {}
    for fraction in (0.1, 0.5, 0.9):
        out[f"cut{int(fraction * 100)}"] = data[: int(len(data) * fraction)]
    for name, (lo, hi) in {"flip-head": (0, 64), "flip-body": (64, len(data))}.items():
        flipped = bytearray(data)
        for pos in rng.integers(lo, max(lo + 1, hi), size=8):
            flipped[pos] ^= 1 << int(rng.integers(0, 8))
        out[name] = bytes(flipped)
    zeroed = bytearray(data)
    zeroed[12:28] = bytes(16)  # where PNG, BMP and WebP keep their sizes
    out["zero-head"] = bytes(zeroed)
    big = bytearray(data)
    big[16:24] = b"\x7f\xff\xff\xff" * 2
    out["huge-head"] = bytes(big)
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(8)
    with Image.open(ROOT / "sample_images" / "chelsea.png") as im:
        photo = im.convert("RGB").resize((48, 32))
    for ext, fmt in FORMATS.items():
        good = folder / f"{ext}-good.{ext}"
        photo.save(good, format=fmt)
        for name, data in _mutations(good.read_bytes(), rng).items():
            (folder / f"{ext}-{name}.{ext}").write_bytes(data)
    return folder


def _failed(stderr: str) -> dict[str, str]:
    """File name -> the one line that names it, from convcli's stderr."""
    lines = {}
    for line in stderr.splitlines():
        assert line.startswith("convcli: "), line
        assert "internal error" not in line and "Traceback" not in line, line
        head = line.removeprefix("convcli: ").split(": ", 1)[0]
        if Path(head).suffix:
            name = Path(head).name
            assert name not in lines, f"{name} named twice:\n{stderr}"
            lines[name] = line
    return lines


@pytest.mark.parametrize("command", [["conv", "-k", "vertical"], ["pool", "--size", "3"]])
def test_corrupt_corpus_in_one_batch(corpus, tmp_path, command):
    files = sorted(p.name for p in corpus.iterdir())
    assert len(files) == len(FORMATS) * 8
    before = digests(corpus)
    # Each file alone: what it writes, or its one-line failure.
    alone = tmp_path / "alone"
    failing = set()
    for name in files:
        result = run(*command, corpus / name, "-o", alone, "-q")
        assert "Traceback" not in result.output
        assert result.exit_code in (0, 1), result.output
        if result.exit_code:
            failing.add(name)
            assert _failed(result.stderr).keys() == {name}
        else:  # what Pillow's own decoder rejects is never taken for pixels
            with Image.open(corpus / name) as im:
                im.load()
    for ext in FORMATS:
        assert f"{ext}-good.{ext}" not in failing
    assert failing, "no mutation broke any file"
    # The whole corpus in one batch, with one and with two worker processes.
    for jobs in (1, 2):
        out = tmp_path / f"jobs{jobs}"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "convcli",
                *command,
                str(corpus),
                "-o",
                str(out),
                "-q",
                "--jobs",
                str(jobs),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 1, proc.stderr
        assert "Traceback" not in proc.stderr
        assert set(_failed(proc.stderr)) == failing
        assert digests(out) == digests(alone)
    assert digests(corpus) == before  # inputs untouched


def test_a_png_with_corrupt_pixel_data_fails_and_writes_nothing(tmp_path):
    """A byte changed inside a PNG's compressed pixels: Pillow's decoder stops on it, and
    reading the PNG's EXIF (which makes Pillow decode the pixels) must not hide that, or
    the half-decoded pixels would be taken for the image."""
    data = (ROOT / "sample_images" / "camera.png").read_bytes()
    start = data.index(b"IDAT") + 4
    for offset in (1000, 5000, 40000):
        flipped = bytearray(data)
        flipped[start + offset] ^= 0xFF
        path = tmp_path / f"flip{offset}.png"
        path.write_bytes(bytes(flipped))
        with pytest.raises(OSError), Image.open(path) as im:
            im.load()
        for command in (["pool"], ["conv", "-k", "vertical"]):
            result = run(*command, path, "-o", tmp_path / "out", "-q")
            assert result.exit_code == 1, result.output
            assert _failed(result.stderr).keys() == {path.name}
            assert "cannot decode the image" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_png_cut_short_after_its_pixels_keeps_them(tmp_path):
    """A text chunk after the pixels, cut off where the file ends: every pixel is whole,
    and the PNG is read as it was before its EXIF was looked for (the chunk's loss costs
    the EXIF alone)."""
    import io
    import struct
    import zlib

    pixels = (np.arange(32 * 32) % 256).reshape(32, 32).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    data = buffer.getvalue()
    body = b"Comment\0" + b"x" * 100
    chunk = struct.pack(">I", len(body)) + b"tEXt" + body
    chunk += struct.pack(">I", zlib.crc32(b"tEXt" + body))
    path = tmp_path / "tail.png"
    path.write_bytes(data[: data.rindex(b"IEND") - 4] + chunk[:40])
    result = run("pool", "--size", "1", "--stride", "1", path, "-o", tmp_path / "out", "-q")
    assert result.exit_code == 0, result.output
    with Image.open(tmp_path / "out" / "tail_pool-max-f1-s1-L.png") as im:
        np.testing.assert_array_equal(np.asarray(im), pixels)
