"""The PNG writer (convcli.io.png): valid streams, read back pixel for pixel, with each deflate."""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_same_file, make_image, ok, outputs_in, read, run_without
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from convcli.io import formats, image_files, png

BACKENDS = [
    "zlib",
    pytest.param(
        "isal",
        marks=pytest.mark.skipif(png.deflate_backend() != "isal", reason="isal is not installed"),
    ),
]
PILLOW_MODES = {
    (1, 8): "L",
    (2, 8): "LA",
    (3, 8): "RGB",
    (4, 8): "RGBA",
    (1, 16): "I;16",
    (3, 16): "RGB",
    (4, 16): "RGBA",
}


def encode(levels, backend, text=None) -> bytes:
    buf = io.BytesIO()
    png.write_png(buf, levels, text=text, backend=backend)
    return buf.getvalue()


def levels_of(shape, dtype, seed=0) -> np.ndarray:
    top = np.iinfo(dtype).max
    return np.random.default_rng(seed).integers(0, top + 1, shape).astype(dtype)


def chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """The (type, payload) of every chunk, checking each CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    out, pos = [], 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, payload = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + payload)
        out.append((kind, payload))
        pos += 12 + length
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("channels", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_pillow_reads_back_every_layout_pixel_for_pixel(channels, dtype, backend):
    shape = (37, 23) if channels == 1 else (37, 23, channels)
    levels = levels_of(shape, dtype, seed=channels)
    with Image.open(io.BytesIO(encode(levels, backend, {"Software": "convcli"}))) as im:
        assert im.info["Software"] == "convcli"
        if (channels, 8 * levels.itemsize) in PILLOW_MODES and (dtype == np.uint8 or channels == 1):
            assert im.mode == PILLOW_MODES[(channels, 8 * levels.itemsize)]
            np.testing.assert_array_equal(np.asarray(im), levels)
        else:  # Pillow reads 16-bit colour at 8 bits: the high bytes (grey + alpha as RGBA)
            assert im.size == (23, 37)
            back = np.asarray(im)[..., [0, 3] if channels == 2 else slice(None)]
            np.testing.assert_array_equal(back, (levels >> 8).astype(np.uint8))


@settings(max_examples=40, deadline=None)
@given(
    height=st.integers(1, 40),
    width=st.integers(1, 40),
    channels=st.sampled_from([1, 2, 3, 4]),
    sixteen=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_decoded_stream_is_the_levels_row_by_row(height, width, channels, sixteen, seed):
    """Undo the Up filter by hand: the rows are the levels, big-endian for 16 bits."""
    dtype = np.uint16 if sixteen else np.uint8
    levels = levels_of((height, width, channels), dtype, seed)
    data = encode(levels, "zlib")
    parts = chunks(data)
    assert [k for k, _ in parts][0] == b"IHDR" and parts[-1] == (b"IEND", b"")
    width_, height_, depth, colour, *_ = struct.unpack(">IIBBBBB", parts[0][1])
    assert (width_, height_, depth, colour) == (
        width,
        height,
        8 * levels.itemsize,
        {1: 0, 2: 4, 3: 2, 4: 6}[channels],
    )
    raw = zlib.decompress(b"".join(p for k, p in parts if k == b"IDAT"))
    rows = np.frombuffer(raw, np.uint8).reshape(height, -1)
    assert np.all(rows[:, 0] == 2)  # Up
    unfiltered = np.cumsum(rows[:, 1:], axis=0, dtype=np.uint8)  # sums modulo 256
    expected = levels.astype(levels.dtype.newbyteorder(">")).view(np.uint8)
    np.testing.assert_array_equal(unfiltered, expected.reshape(height, -1))


def test_rows_are_written_in_blocks_the_same_as_at_once(monkeypatch):
    levels = levels_of((50, 30, 3), np.uint16, seed=5)
    whole = encode(levels, "zlib")
    monkeypatch.setattr(png, "_BLOCK_BYTES", 7 * 30 * 3 * 2)  # 7 rows a block
    blocks = encode(levels, "zlib")
    assert blocks == encode(levels, "zlib")  # deterministic
    with Image.open(io.BytesIO(blocks)) as a, Image.open(io.BytesIO(whole)) as b:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize(
    "bad, message",
    [
        (np.zeros((2, 2), np.float32), "uint8 or uint16"),
        (np.zeros((2, 2, 5), np.uint8), "C in 1..4"),
        (np.zeros((0, 3), np.uint8), "at least one row"),
    ],
)
def test_bad_levels_are_a_value_error(bad, message):
    with pytest.raises(ValueError, match=message):
        encode(bad, "zlib")


def test_the_switch_turns_the_fast_deflate_off(monkeypatch):
    monkeypatch.setenv(png.FAST_CODECS_VARIABLE, "0")
    png.deflate_backend.cache_clear()
    try:
        assert png.deflate_backend() == "zlib"
    finally:
        monkeypatch.delenv(png.FAST_CODECS_VARIABLE)
        png.deflate_backend.cache_clear()


def _imagemagick() -> list[str] | None:
    """ImageMagick 7's ``magick``, or 6's ``convert`` beside its ``identify``."""
    if shutil.which("magick"):
        return ["magick"]
    identify = shutil.which("identify")  # a "convert" alone may be another program
    convert = Path(identify).with_name("convert") if identify else None
    return [str(convert)] if convert and convert.exists() else None


@pytest.mark.skipif(_imagemagick() is None, reason="ImageMagick is not installed")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "channels, dtype",
    [(1, np.uint8), (1, np.uint16), (2, np.uint8), (3, np.uint8), (3, np.uint16), (4, np.uint16)],
)
def test_imagemagick_reads_back_pixel_for_pixel(tmp_path, channels, dtype, backend):
    levels = levels_of((21, 34, channels), dtype, seed=7)
    path = tmp_path / "a.png"
    path.write_bytes(encode(levels, backend))
    # PAM keeps the channels and the depth: a text header, then big-endian samples.
    pam = subprocess.run(
        [*_imagemagick(), str(path), "PAM:-"], capture_output=True, check=True
    ).stdout
    header, body = pam.split(b"ENDHDR\n", 1)
    fields = dict(line.split(b" ", 1) for line in header.splitlines()[1:] if b" " in line)
    depth = int(fields[b"DEPTH"])
    assert (int(fields[b"WIDTH"]), int(fields[b"HEIGHT"])) == (34, 21)
    back = np.frombuffer(body, ">u2" if dtype == np.uint16 else np.uint8).reshape(21, 34, depth)
    if depth == 3 and channels == 1:  # ImageMagick 6 writes 8-bit grey as RGB in PAM
        back = back[:, :, :1] if np.array_equal(back, back[:, :, :1].repeat(3, 2)) else back
    np.testing.assert_array_equal(back, levels)


@pytest.mark.parametrize("backend", BACKENDS)
def test_save_levels_writes_the_stream_with_the_marker(tmp_path, monkeypatch, backend):
    monkeypatch.setattr(png, "deflate_backend", lambda: backend)
    levels = levels_of((9, 11, 3), np.uint8)
    path = tmp_path / "c.png"
    assert image_files.save_levels(path, levels, fmt="png")
    expected = tmp_path / "expected.png"
    expected.write_bytes(encode(levels, backend, {"Software": formats.MARKER}))
    assert_same_file(path, expected)
    assert image_files.written_by_convcli(path)


@pytest.mark.parametrize("missing", ["isal", "simplejpeg"])
def test_the_command_line_without_a_fast_library_writes_the_same_pixels(tmp_path, missing):
    photo = make_image(tmp_path / "photo.jpg", "RGB")
    ok("pool", photo, "-o", tmp_path / "fast", "-j", 1, "--format", "png", "--separate")
    proc = run_without(
        missing, "pool", photo, "-o", tmp_path / "plain", "-j", 1, "--format", "png", "--separate"
    )
    assert proc.returncode == 0, proc.stderr
    names = [p.name for p in outputs_in(tmp_path / "fast")]
    assert names == [p.name for p in outputs_in(tmp_path / "plain")] and len(names) == 4
    for name in names:
        np.testing.assert_array_equal(
            read(tmp_path / "fast" / name), read(tmp_path / "plain" / name)
        )
        assert image_files.written_by_convcli(tmp_path / "plain" / name)


@pytest.mark.parametrize("backend", BACKENDS)
@given(
    data=st.data(),
    channels=st.sampled_from([1, 2, 3, 4]),
    dtype=st.sampled_from([np.uint8, np.uint16]),
)
@settings(max_examples=20)
def test_rows_streamed_in_bands_give_write_pngs_bytes(backend, data, channels, dtype):
    height = data.draw(st.integers(1, 40), label="height")
    levels = levels_of((height, 9, channels), dtype, seed=height)
    cuts = sorted(data.draw(st.lists(st.integers(0, height), max_size=6), label="cuts"))
    streamed = io.BytesIO()
    encoder = png.PngRowEncoder(
        streamed, shape=levels.shape, dtype=dtype, text={"Software": "convcli"}, backend=backend
    )
    for band in np.split(levels, cuts):
        encoder.write(band)
    encoder.close()
    assert streamed.getvalue() == encode(levels, backend, text={"Software": "convcli"})


def test_streamed_rows_are_checked(monkeypatch):
    monkeypatch.setattr(png, "_BLOCK_BYTES", 9 * 2)  # 2 rows a block: blocks and a remainder
    encoder = png.PngRowEncoder(io.BytesIO(), shape=(5, 9, 1), dtype=np.uint8)
    with pytest.raises(ValueError, match=r"rows must be \(n, 9, 1\) uint8"):
        encoder.write(np.zeros((2, 9, 1), np.uint16))
    encoder.write(np.zeros((3, 9), np.uint8))
    with pytest.raises(ValueError, match="6 rows for an image of 5"):
        encoder.write(np.zeros((3, 9), np.uint8))
    with pytest.raises(ValueError, match="3 rows written of 5"):
        encoder.close()


def test_without_isal_the_writer_falls_back_to_zlib(tmp_path, monkeypatch):
    """isal is a dependency, but a platform without its wheel goes without: zlib writes."""
    monkeypatch.setitem(sys.modules, "isal", None)  # import isal raises ImportError
    png.deflate_backend.cache_clear()
    try:
        assert png.deflate_backend() == "zlib"
        levels = levels_of((13, 17, 3), np.uint8, seed=3)
        path = tmp_path / "z.png"
        assert image_files.save_levels(path, levels, fmt="png")
        assert path.read_bytes() == encode(levels, "zlib", {"Software": formats.MARKER})
        with Image.open(path) as im:
            np.testing.assert_array_equal(np.asarray(im), levels)
    finally:
        monkeypatch.delitem(sys.modules, "isal")
        png.deflate_backend.cache_clear()


def test_the_fast_codecs_are_dependencies_and_the_fast_extra_an_empty_alias():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    names = [dep.split(">=")[0] for dep in project["dependencies"]]
    assert {"isal", "simplejpeg"} <= set(names)
    assert project["optional-dependencies"]["fast"] == []
