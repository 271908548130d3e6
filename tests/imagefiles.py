"""Small image files for the image, pipeline and CLI tests (made with Pillow, seeded)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image

WIDTH, HEIGHT = 40, 30

# mode -> file extension it is written as
MODES = {
    "1": "png",
    "L": "png",
    "LA": "png",
    "P": "png",
    "P+transparency": "png",
    "RGB": "png",
    "RGBA": "png",
    "CMYK": "tiff",
    "I;16": "png",
    "I": "tiff",
    "F": "tiff",
}


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def rgb_array(seed: int = 0, size=(WIDTH, HEIGHT)) -> np.ndarray:
    """A random uint8 (H, W, 3) picture with some structure (a bright square)."""
    w, h = size
    arr = rng(seed).integers(0, 200, size=(h, w, 3), dtype=np.uint8)
    arr[h // 4 : h // 2, w // 4 : w // 2] = 250
    return arr


def make_image(path: Path, mode: str = "RGB", *, seed: int = 0, size=(WIDTH, HEIGHT)) -> Path:
    """Write a `mode` image (see MODES) to `path` and return the path."""
    w, h = size
    g = rng(seed)
    rgb = rgb_array(seed, size)
    if mode == "1":
        im = Image.fromarray(g.integers(0, 2, size=(h, w)).astype(bool))
    elif mode == "L":
        im = Image.fromarray(rgb[:, :, 0])
    elif mode == "LA":
        la = np.dstack([rgb[:, :, 0], g.integers(0, 256, size=(h, w), dtype=np.uint8)])
        im = Image.fromarray(la)
    elif mode == "P":
        im = Image.fromarray(rgb).quantize(16)
    elif mode == "P+transparency":
        im = Image.fromarray(rgb).quantize(16)
        im.save(path, transparency=0)
        return path
    elif mode == "RGB":
        im = Image.fromarray(rgb)
    elif mode == "RGBA":
        alpha = g.integers(0, 256, size=(h, w), dtype=np.uint8)
        im = Image.fromarray(np.dstack([rgb, alpha]))
    elif mode == "CMYK":
        im = Image.fromarray(rgb).convert("CMYK")
    elif mode == "I;16":
        im = Image.fromarray(g.integers(0, 65536, size=(h, w)).astype(np.uint16))
    elif mode == "I":
        im = Image.fromarray(g.integers(0, 70000, size=(h, w)).astype(np.int32))
    elif mode == "F":
        im = Image.fromarray(g.random((h, w)).astype(np.float32))
    else:
        raise ValueError(mode)
    im.save(path)
    return path


def make_gif(path: Path, frames: int = 3) -> Path:
    """An animated GIF whose frames differ (frame i is filled with grey 60 * (i + 1))."""
    ims = [Image.new("L", (WIDTH, HEIGHT), 60 * (i + 1)) for i in range(frames)]
    ims[0].save(path, save_all=True, append_images=ims[1:])
    return path


def make_multipage_tiff(path: Path, pages: int = 2) -> Path:
    ims = [Image.fromarray(rgb_array(seed=i)) for i in range(pages)]
    ims[0].save(path, save_all=True, append_images=ims[1:])
    return path


def make_exif_rotated_jpeg(path: Path, orientation: int = 6) -> np.ndarray:
    """A JPEG stored 40 wide x 30 high with an EXIF orientation tag.

    The stored picture is dark with a white block in its top-left corner.
    Returns the stored (un-rotated) array.
    """
    arr = np.full((HEIGHT, WIDTH, 3), 20, np.uint8)
    arr[:10, :10] = 255
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(arr).save(path, exif=exif, quality=95)
    return arr


def make_bomb_png(path: Path, width: int = 100_000, height: int = 100_000) -> Path:
    """A tiny PNG whose header claims `width` x `height` pixels (IHDR patched, CRC fixed)."""
    Image.new("L", (8, 8)).save(path)
    data = bytearray(path.read_bytes())
    # Signature (8) + IHDR length (4) + "IHDR" (4), then width and height.
    data[16:24] = struct.pack(">II", width, height)
    crc = zlib.crc32(bytes(data[12:29])) & 0xFFFFFFFF
    data[29:33] = struct.pack(">I", crc)
    path.write_bytes(bytes(data))
    return path


def make_truncated_png(path: Path) -> Path:
    make_image(path, "RGB")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path
