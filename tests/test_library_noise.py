"""What image libraries print, and a full disk, reach the user as one line about the file."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
from helpers import make_image, names, run
from PIL import Image

from convcli.app import process

# An EXIF block that ends early: Pillow warns "Corrupt EXIF data" (a UserWarning with its path).
_SHORT_EXIF = (
    b"Exif\x00\x00MM\x00\x2a\x00\x00\x00\x08\x00\x05\x01\x12\x00\x03\x00\x00\x00\x01\x00\x06"
)


def _bad_exif_jpeg(path):
    Image.new("RGB", (16, 12), (10, 20, 30)).save(path, exif=_SHORT_EXIF)
    return path


@pytest.mark.parametrize("jobs", [1, 2])
def test_pillow_warnings_are_a_note_of_their_file(tmp_path, capfd, jobs):
    first = _bad_exif_jpeg(tmp_path / "a.jpg")
    second = _bad_exif_jpeg(tmp_path / "b.jpg")
    result = run("pool", first, second, "-o", tmp_path / "out", "-j", jobs)
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    for src in (first, second):
        assert (
            f"convcli: {src}: libraries said: Corrupt EXIF data. Expecting to read 12 bytes "
            "but only got 10." in lines
        )
    assert all(line.startswith("convcli: ") for line in lines)
    assert "Warning" not in capfd.readouterr().err
    assert len(names(tmp_path / "out")) == 2  # each JPEG pooled, a JPEG
    quiet = run("pool", first, second, "-o", tmp_path / "q", "-j", jobs, "-q")
    assert quiet.exit_code == 0 and quiet.stderr == ""


def test_text_c_libraries_write_to_stderr_is_a_note(tmp_path, capfd, monkeypatch):
    src = make_image(tmp_path / "a.png", "RGB")
    real = process.open_image

    def chatty(*args, **kwargs):
        os.write(2, b"TIFFReadDirectory: Warning, Unknown field with tag 65000\n")
        os.write(2, b"TIFFReadDirectory: Warning, Unknown field with tag 65000\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(process, "open_image", chatty)
    result = run("pool", src, "-o", tmp_path / "out", "-j", 1)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == (
        f"convcli: {src}: libraries said: TIFFReadDirectory: Warning, Unknown field with tag 65000"
    )
    assert "TIFFReadDirectory" not in capfd.readouterr().err
    assert run("pool", src, "-o", tmp_path / "q", "-j", 1, "-q").stderr == ""


def _full_disk(error):
    def save(file, *args, **kwargs):
        file.write(b"\x93NUMPY")
        raise error

    return save


@pytest.mark.parametrize(
    "error, free, message",
    [
        (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), None, "no space left on the device"),
        (OSError("786432 requested and 524256 written"), 0, "no space left on the device"),
        (
            OSError("786432 requested and 524256 written"),
            10**12,
            "an output was cut short (524,256 of 786,432 bytes written)",
        ),
    ],
    ids=["errno", "numpy-short-write", "short-write-with-space"],
)
def test_a_full_disk_is_named(tmp_path, monkeypatch, error, free, message):
    src = make_image(tmp_path / "a.png", "RGB")
    monkeypatch.setattr(np, "save", _full_disk(error))
    if free is not None:
        monkeypatch.setattr(process, "_free_bytes", lambda folder: free)
    out = tmp_path / "out"
    result = run("pool", src, "-o", out, "--format", "npy", "-j", 1)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == f"convcli: {src}: {message}"
    assert names(out) == []  # nothing half-written, no temporary left
