"""A golden set of convcli outputs: record it once, compare later runs with it byte for byte.

Run from the repository root::

    python benchmarks/golden.py record golden-before      # writes golden-before/golden.json
    python benchmarks/golden.py compare golden-before     # runs again; exit 1 if anything differs
    PYTHONPATH=/abs/other/checkout python benchmarks/golden.py compare golden-before
    python benchmarks/golden.py compare golden-before --convcli "/path/to/venv/bin/convcli"

Every command of the set runs in a folder of its own inside a scratch folder, on input images
made here (seeded numpy, Pillow and tifffile, and small reductions of ``sample_images/``). For
each command the golden file keeps its exit status, the SHA-256 of its standard output, its
standard error as text, and the SHA-256 of every file it left in its folder (Zarr stores are
folders: each file in them is hashed). What changes from run to run is normalised first: the
scratch folder's path becomes ``<SCRATCH>`` everywhere, the durations in the summary lines
become ``<T>``, and the lines of ``convcli-manifest.jsonl`` lose their time keys and are sorted
(their order follows the files' completion). Commands that name a sequence of steps (a run,
then the same run again) share one folder and run in order; the others run side by side.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tifffile
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_images"
GOLDEN_FILE = "golden.json"
MANIFEST_FILE = "convcli-manifest.jsonl"
SCRATCH_PLACEHOLDER = "<SCRATCH>"
DURATION_PLACEHOLDER = "<T>"
# Each command runs in SCRATCH/runs/<folder>: its inputs are two levels up.
INPUTS = "../../inputs/"
COMMAND_TIMEOUT_SECONDS = 300
# Manifest keys whose values say when or for how long, not what was written.
TIME_KEY_PATTERN = re.compile(r"time|date|duration|elapsed|seconds|started|finished", re.I)
# "... failed in 0.4 s; outputs in out": the wall time of a run.
DURATION_PATTERN = re.compile(r"\b\d+(?:\.\d+)?(?: ?(?:s|ms|min))\b(?=[;,.)\s]|$)")
# Click names the program as it was invoked ("python -m convcli", a script's path): one name.
PROGRAM_NAME_PATTERN = re.compile(r"'(?:\S*python\S* -m |\S*/)?convcli ")


@dataclass(frozen=True)
class Case:
    """One convcli command of the golden set.

    Attributes
    ----------
    name : str
        The key of its entry in ``golden.json``.
    args : tuple of str
        The arguments after the convcli command itself; input files are ``INPUTS`` + name.
    folder : str
        The working folder under ``SCRATCH/runs``; cases sharing one run in the given order
        and each hashes everything the folder holds after it. Empty: the case's own name.
    stdin : str or None
        The input file (under ``SCRATCH/inputs``) fed on standard input, or None for none.
    """

    name: str
    args: tuple[str, ...]
    folder: str = ""
    stdin: str | None = None

    @property
    def workdir_name(self) -> str:
        """The folder under ``SCRATCH/runs`` this case runs in."""
        return self.folder or self.name


def case(name: str, command: str, folder: str = "", stdin: str | None = None) -> Case:
    """A `Case` from a shell-like command line; ``@name`` stands for the input file ``name``.

    Parameters
    ----------
    name : str
        The case's name.
    command : str
        The arguments after ``convcli``, split as a shell would; a word starting with ``@``
        is replaced by the path of that input file relative to the working folder.
    folder : str, optional
        A working folder shared with other cases (run in order).
    stdin : str or None, optional
        An input file to feed on standard input.

    Returns
    -------
    Case
    """
    words = [INPUTS + word[1:] if word.startswith("@") else word for word in shlex.split(command)]
    return Case(name, tuple(words), folder, stdin)


def pad_cases() -> list[Case]:
    """``convcli pad``: every mode, per-side widths, a fill value, alpha and formats."""
    return [
        case("pad-default", "pad @cat.png -o out"),
        case("pad-constant-value", "pad --pad 5 --value 50 @cat.png -o out"),
        case("pad-reflect-per-side", "pad --pad 0,2,1,3 --mode reflect @cat.png -o out"),
        case("pad-edge", "pad --pad 4 --mode edge @camera.png -o out"),
        case("pad-symmetric", "pad --pad 3 --mode symmetric @noise.png -o out"),
        case("pad-wrap", "pad --pad 6 --mode wrap @noise.png -o out"),
        case("pad-rgba-constant", "pad --pad 3 --value 200 @rgba.png -o out"),
        case("pad-rgba-reflect", "pad --pad 2 --mode reflect @rgba.png -o out"),
        case("pad-format-npy", "pad --pad 2 --format npy @cat.png -o out"),
        case("pad-figure", "pad --pad 8 --mode reflect --figure @cat.png -o out"),
        case("pad-16bit-rgb-tiff", "pad --pad 2 --mode edge --format tiff @rgb16.tif -o out"),
    ]


def conv_cases() -> list[Case]:
    """``convcli conv``: kernels, channel modes, combinations, geometry, borders, mappings."""
    return [
        case("conv-default-kernels", "conv @cat.png -o out"),
        case("conv-sobel-x", "conv -k sobel-x @cat.png -o out"),
        case("conv-rotated-and-aliases", "conv -k Sobel-X -k sobel-x:90 -k laplacian8 @cat.png"),
        case("conv-kernel-file-text", "conv -k @diagonal-3x5.txt @camera.png -o out"),
        case("conv-kernel-file-toml", "conv -k @scaled.toml --channels each @noise.png -o out"),
        case("conv-channels-each-blur", "conv -k gaussian-5x5 --channels each @cat.png -o out"),
        case("conv-channels-each-two", "conv -k sobel-x,sharpen --channels each @cat.png -o out"),
        case("conv-channels-gray", "conv -k laplacian --channels gray @cat.png -o out"),
        case("conv-channels-sum-two", "conv -k sobel-x,sobel-y --channels sum @coffee.png -o out"),
        case(
            "conv-combine-magnitude", "conv -k sobel-x,sobel-y --combine magnitude @cat.png -o out"
        ),
        case(
            "conv-combine-max", "conv -k kirsch-n,kirsch-e,kirsch-s --combine max @cat.png -o out"
        ),
        case(
            "conv-combine-sum-npy",
            "conv -k prewitt-x,prewitt-y --combine sum --format npy @cat.png -o out",
        ),
        case(
            "conv-stride-valid-bias-npy",
            "conv -k edge --stride 2 --pad valid --bias 10 --format npy @cat.png -o out",
        ),
        case("conv-stride-3-pad-2", "conv -k sobel-y --stride 3 --pad 2 @camera.png -o out"),
        case(
            "conv-pad-per-side-constant",
            "conv -k vertical --pad 0,2,1,1 --border constant @cat.png -o out",
        ),
        case("conv-dilation-2", "conv -k sobel-x --dilation 2 @camera.png -o out"),
        case("conv-dilation-3-valid", "conv -k log-5x5 --dilation 3 --pad valid @cat.png -o out"),
        case("conv-border-constant", "conv -k edge --border constant @cat.png -o out"),
        case("conv-border-edge", "conv -k edge --border edge @cat.png -o out"),
        case("conv-border-symmetric", "conv -k edge --border symmetric @cat.png -o out"),
        case("conv-border-wrap", "conv -k edge --border wrap @cat.png -o out"),
        case("conv-normalize-robust", "conv -k emboss --normalize robust @cat.png -o out"),
        case("conv-normalize-abs", "conv -k sobel-x --normalize abs @cat.png -o out"),
        case("conv-normalize-minmax", "conv -k sobel-x --normalize minmax @cat.png -o out"),
        case("conv-normalize-clip", "conv -k sharpen --normalize clip @cat.png -o out"),
        case(
            "conv-normalize-offset-bias",
            "conv -k edge --normalize offset --bias 100 @cat.png -o out",
        ),
        case(
            "conv-normalize-none-tiff",
            "conv -k sobel-x,box-blur --normalize none --format tiff @cat.png -o out",
        ),
        case("conv-roberts-valid", "conv -k roberts-ne,roberts-nw --pad valid @camera.png -o out"),
        case("conv-format-jpg", "conv -k sobel-x --channels each --format jpg @cat.png -o out"),
        case("conv-format-tiff", "conv -k horizontal --format tiff @cat.png -o out"),
        case("conv-format-npy", "conv -k sobel-x,sobel-y --channels each --format npy @cat.png"),
        case("conv-format-zarr", "conv -k sobel-x --channels each --format zarr @cat.png -o out"),
        case(
            "conv-format-zarr-none",
            "conv -k vertical --normalize none --format zarr @coffee.png -o out",
        ),
        case("conv-figure", "conv -k vertical,horizontal,edge --figure @cat.png -o out"),
        case("conv-figure-each", "conv -k sobel-x --channels each --figure @noise.png -o out"),
        case("conv-out-file-png", "conv -k vertical @cat.png -o vertical.png"),
        case("conv-out-file-npy", "conv -k vertical,edge --format npy @cat.png -o raw.npy"),
        case("conv-jpeg-input", "conv -k sobel-x @astronaut.jpg -o out"),
        case("conv-rgba-input", "conv -k sobel-x,gaussian --channels each @rgba.png -o out"),
        case("conv-rgba-gray", "conv -k laplacian --channels gray @rgba.png -o out"),
        case("conv-float32-tiff", "conv -k sobel-x @float32.tif -o out"),
        case(
            "conv-float32-tiff-none",
            "conv -k sobel-x --normalize none --format tiff @float32.tif -o out",
        ),
        case("conv-16bit-gray-png", "conv -k gaussian,sobel-x @gray16.png -o out"),
        case("conv-16bit-gray-jpg", "conv -k gaussian --format jpg @gray16.png -o out"),
        case("conv-16bit-rgb-png-each", "conv -k box-blur --channels each @rgb16.png -o out"),
        case(
            "conv-16bit-rgb-jpg-each",
            "conv -k box-blur --channels each --format jpg @rgb16.png -o out",
        ),
        case("conv-folder-recursive", "conv -k sobel-x -r -q -j 2 @photos -o out"),
        case("conv-folder-verbose", "conv -k edge -v -j 1 @photos -o out"),
        case("conv-pipe-stdin-stdout", "conv -k vertical - -o -", stdin="cat.png"),
        case("conv-pipe-npy-stdout", "conv -k sobel-x --format npy - -o -", stdin="noise.png"),
    ]


def pool_cases() -> list[Case]:
    """``convcli pool``: both modes, window geometry, formats, figure, pipes."""
    return [
        case("pool-default", "pool @cat.png -o out"),
        case("pool-average-size-4", "pool --mode average --size 4 @cat.png -o out"),
        case("pool-max-size-5-stride-3", "pool --size 5 --stride 3 @camera.png -o out"),
        case("pool-avg-pad-ceil", "pool --mode avg --size 3 --stride 2 --pad 1 --ceil @cat.png"),
        case("pool-rgba", "pool --mode average --size 2 @rgba.png -o out"),
        case("pool-figure", "pool --size 3 --figure @cat.png -o out"),
        case("pool-format-npy", "pool --mode average --format npy @cat.png -o out"),
        case("pool-format-tiff", "pool --format tiff @noise.png -o out"),
        case("pool-format-zarr", "pool --mode average --format zarr @cat.png -o out"),
        case("pool-out-file-jpg", "pool --mode average --size 4 @astronaut.jpg -o small.jpg"),
        case("pool-float32-tiff", "pool --mode average --size 3 @float32.tif -o out"),
        case("pool-16bit-rgb-png", "pool --mode average @rgb16.png -o out"),
        case("pool-16bit-rgb-jpg", "pool --mode average --format jpg @rgb16.png -o out"),
        case("pool-16bit-gray-png", "pool --size 3 @gray16.png -o out"),
        case("pool-pipe-stdin-stdout", "pool --mode average --size 2 - -o -", stdin="cat.png"),
    ]


def grad_cases() -> list[Case]:
    """``convcli grad pool`` and ``grad conv``: losses, mappings, geometry, figures."""
    return [
        case("grad-pool-max", "grad pool @cat.png -o out"),
        case("grad-pool-max-overlap", "grad pool --size 5 --stride 2 @camera.png -o out"),
        case(
            "grad-pool-average-npy",
            "grad pool --mode average --size 3 --stride 2 --format npy @cat.png -o out",
        ),
        case("grad-pool-figure", "grad pool --size 3 --ceil --figure @noise.png -o out"),
        case("grad-conv-energy", "grad conv -k vertical @cat.png -o out"),
        case("grad-conv-sum-loss", "grad conv -k sobel-x --loss sum @cat.png -o out"),
        case(
            "grad-conv-each-stride",
            "grad conv -k edge --channels each --stride 2 --border constant @noise.png -o out",
        ),
        case("grad-conv-figure", "grad conv -k edge --figure @camera.png -o out"),
        case(
            "grad-conv-npy-dilation",
            "grad conv -k sobel-y --dilation 2 --format npy @cat.png -o out",
        ),
    ]


def fit_cases() -> list[Case]:
    """``convcli fit``: raw values, images, a manifest's mapping, a figure, an edge map."""
    return [
        case("fit-random-kernel-npy", "fit @cat.png @cat_random3x3.npy -o learned.toml"),
        case("fit-gray-valid", "fit --channels gray --pad valid @camera.png @camera_box.png"),
        case(
            "fit-log-prepare",
            "conv -k log-5x5 --format npy -o cat_log.npy @cat.png",
            folder="fit-log",
        ),
        case(
            "fit-log-figure",
            "fit @cat.png cat_log.npy --size 5 -o learned.toml --figure",
            folder="fit-log",
        ),
        case(
            "fit-offset-prepare",
            "conv -k sobel-y --normalize offset @camera.png -o maps",
            folder="fit-offset",
        ),
        case(
            "fit-offset-levels",
            "fit @camera.png maps/camera_conv-sobel-y-offset-sum.png -o k.toml",
            folder="fit-offset",
        ),
        case("fit-robust-prepare", "conv -k sobel-x @camera.png -o maps", folder="fit-robust"),
        case(
            "fit-robust-refused",
            "fit @camera.png maps/camera_conv-sobel-x-sum.png -o k.toml",
            folder="fit-robust",
        ),
        case("fit-stack", "fit --steps 50 @stack.tif @stack_box.tif -o stack.toml"),
    ]


def explain_cases() -> list[Case]:
    """``convcli explain``: the table and every ``--as`` target."""
    return [
        case("explain-conv-table", "explain conv -k sobel-x --border constant --stride 2"),
        case(
            "explain-conv-scipy", "explain conv -k sobel-x --border constant --stride 2 --as scipy"
        ),
        case(
            "explain-conv-opencv", "explain conv -k sobel-x,sobel-y --combine magnitude --as opencv"
        ),
        case("explain-conv-torch", "explain conv -k edge --channels each --bias 3 --as torch"),
        case("explain-conv-skimage", "explain conv -k sobel-x --border symmetric --as skimage"),
        case("explain-conv-magick", "explain conv -k vertical --pad 0,2,1,1 --as magick"),
        case("explain-pool-table", "explain pool --size 3 --stride 2"),
        case("explain-pool-opencv", "explain pool --mode average --size 3 --stride 2 --as opencv"),
        case("explain-pad-magick", "explain pad --pad 0,2,1,1 --mode symmetric --as magick"),
        case("explain-pad-scipy", "explain pad --pad 3 --value 7 --as scipy"),
    ]


def kernel_cases() -> list[Case]:
    """``convcli kernels``: the list, grids, checks, and an unknown name."""
    return [
        case("kernels-list", "kernels"),
        case("kernels-one-name", "kernels box-blur"),
        case("kernels-rotated", "kernels sobel-x:90"),
        case("kernels-check-name", "kernels --check gaussian-5x5"),
        case("kernels-check-file", "kernels --check @diagonal-3x5.txt"),
        case("kernels-unknown-name", "kernels no-such-kernel"),
    ]


def dry_run_cases() -> list[Case]:
    """``-n/--dry-run`` of every batch command, and one that sees outputs to skip."""
    return [
        case("dry-run-conv", "conv -n -k sobel-x,edge --stride 2 @cat.png @camera.png -o out"),
        case("dry-run-pool-folder", "pool -n --size 3 -r @photos -o out"),
        case("dry-run-pad-npy", "pad -n --pad 0,1,2,3 --format npy @noise.png -o out"),
        case("dry-run-grad-pool", "grad pool -n --size 4 @cat.png -o out"),
        case("dry-run-frames", "conv -n -k sobel-x --format jpg @anim.gif -o out"),
        case("dry-run-skip-prepare", "conv -q -k vertical @cat.png -o out", folder="dry-run-skip"),
        case(
            "dry-run-skip", "conv -n -k vertical @cat.png @noise.png -o out", folder="dry-run-skip"
        ),
    ]


def frame_cases() -> list[Case]:
    """Stacks: an animated GIF, multi-page TIFFs (one size, several sizes), ``--frames``."""
    return [
        case("frames-gif-all", "conv -k sobel-x @anim.gif -o out"),
        case("frames-gif-first", "conv -k sobel-x --frames first @anim.gif -o out"),
        case("frames-gif-list", "pool --frames 0,2-3 @anim.gif -o out"),
        case("frames-gif-jpg", "conv -k edge --format jpg @anim.gif -o out"),
        case("frames-gif-figure", "conv -k vertical --figure @anim.gif -o out"),
        case("frames-tiff-all", "conv -k sobel-x,sobel-y @stack.tif -o out"),
        case("frames-tiff-list-npy", "pool --frames 4,1 --format npy @stack.tif -o out"),
        case(
            "frames-tiff-format-tiff", "conv -k edge --format tiff --frames all @stack.tif -o out"
        ),
        case("frames-tiff-none-tiff", "conv -k edge --normalize none --format tiff @stack.tif"),
        case("frames-tiff-zarr", "pool --format zarr --frames 0-1 @stack.tif -o out"),
        case("frames-tiff-rgb-each", "conv -k gaussian --channels each @stack_rgb.tif -o out"),
        case("frames-tiff-sizes", "conv -k sobel-x @stack_sizes.tif -o out"),
        case("frames-grad-conv", "grad conv -k sobel-x @stack.tif -o out"),
        case("frames-small-memory", "conv -k sobel-x --memory 64K @stack_rgb.tif -o out"),
        case("frames-past-end", "conv -k sobel-x --frames 9 -j 1 @anim.gif @cat.png -o out"),
    ]


def strip_cases() -> list[Case]:
    """Images larger than ``--memory``: TIFFs read, computed and written in strips."""
    return [
        case("strips-conv-png", "conv -k sobel-x -v --memory 64K @big_rgb_tiled.tif -o out"),
        case(
            "strips-conv-each-tiff",
            "conv -k sobel-x --channels each --format tiff --memory 64K @big_rgb_tiled.tif -o out",
        ),
        case(
            "strips-conv-none-tiff",
            "conv -k vertical --normalize none --format tiff --memory 64K @big_gray16.tif -o out",
        ),
        case("strips-conv-npy", "conv -k edge --format npy --memory 64K @big_gray16.tif -o out"),
        case(
            "strips-conv-zarr",
            "conv -k vertical --normalize none --format zarr --memory 64K @big_float32.tif -o out",
        ),
        case(
            "strips-conv-stride-border",
            "conv -k edge --stride 2 --border constant --memory 64K @big_rgb_tiled.tif -o out",
        ),
        case(
            "strips-pool-tiff",
            "pool --mode average --size 2 --format tiff --memory 64K @big_rgb_tiled.tif -o out",
        ),
        case("strips-pool-zarr", "pool --size 3 --format zarr --memory 64K @big_gray16.tif -o out"),
        case("strips-pad-png", "pad --pad 5 --mode reflect --memory 64K @big_float32.tif -o out"),
        case("strips-figure", "conv -k sobel-y --figure --memory 64K @big_rgb_tiled.tif -o out"),
    ]


def batch_rule_cases() -> list[Case]:
    """Re-runs (skip, ``--overwrite``), a shared output folder, and usage and file errors."""
    return [
        case("rerun-first", "conv -k sobel-x @cat.png @noise.png -j 1 -o out", folder="rerun"),
        case("rerun-skips", "conv -k sobel-x -v @cat.png @noise.png -j 1 -o out", folder="rerun"),
        case("rerun-overwrite", "conv -k sobel-x --overwrite @cat.png -o out", folder="rerun"),
        case("error-unknown-kernel", "conv -k no-such-kernel @cat.png -o out"),
        case("error-roberts-pad-same", "conv -k roberts-ne @cat.png -o out"),
        case("error-normalize-none-png", "conv -k sobel-x --normalize none @cat.png -o out"),
        case("error-webp-out-file", "conv -k sobel-x @cat.png -o result.webp"),
        case("error-several-images-to-file", "conv @cat.png -o one.png"),
        case("error-missing-input", "conv -k sobel-x @cat.png @missing.png -j 1 -o out"),
        case("error-not-an-image", "pool @photos/notes.txt -o out"),
        case("error-pool-pad-too-large", "pool --size 2 --pad 2 @cat.png -o out"),
    ]


def golden_cases() -> list[Case]:
    """Every command of the golden set, in the order they are listed and recorded.

    Returns
    -------
    list of Case
        Names are unique.
    """
    groups = (
        pad_cases,
        conv_cases,
        pool_cases,
        grad_cases,
        fit_cases,
        explain_cases,
        kernel_cases,
        dry_run_cases,
        frame_cases,
        strip_cases,
        batch_rule_cases,
    )
    cases = [one for group in groups for one in group()]
    names = [one.name for one in cases]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"case names used twice: {duplicates}")
    return cases


def write_png_rgb16(path: Path, pixels: np.ndarray) -> None:
    """Write a 16-bit RGB PNG with the standard library (Pillow writes no 16-bit colour).

    Parameters
    ----------
    path : Path
        The file to write.
    pixels : ndarray, shape (H, W, 3), uint16
        The samples, top row first.
    """
    height, width, _ = pixels.shape
    rows = pixels.astype(">u2").reshape(height, width * 6 // 2).view(np.uint8)
    raw = b"".join(b"\x00" + row.tobytes() for row in rows)

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 16, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def correlate_reflect(plane: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Cross-correlate one plane with a kernel, reflect border, same size (conv's defaults).

    Parameters
    ----------
    plane : ndarray, shape (H, W)
        The image plane.
    weights : ndarray, shape (F, F), F odd
        The kernel, laid over the image as written.

    Returns
    -------
    ndarray, shape (H, W), float64
    """
    size = weights.shape[0]
    height, width = plane.shape
    padded = np.pad(plane.astype(np.float64), size // 2, mode="reflect")
    result = np.zeros((height, width))
    for row in range(size):
        for column in range(size):
            result += weights[row, column] * padded[row : row + height, column : column + width]
    return result


def sample_photo(name: str, factor: int) -> Image.Image:
    """A sample photo reduced by `factor` in each direction (block means)."""
    with Image.open(SAMPLES / name) as image:
        return image.reduce(factor)


def make_photo_inputs(inputs: Path) -> None:
    """Small reductions of the sample photos, a folder tree of them, and fit targets."""
    cat = sample_photo("chelsea.png", 4).convert("RGB")
    cat.save(inputs / "cat.png")
    camera = sample_photo("camera.png", 4).convert("L")
    camera.save(inputs / "camera.png")
    sample_photo("astronaut.png", 4).convert("RGB").save(inputs / "astronaut.jpg", quality=90)
    coffee = sample_photo("coffee.png", 5).convert("RGB")
    coffee.save(inputs / "coffee.png")
    photos = inputs / "photos"
    (photos / "sub").mkdir(parents=True)
    cat.crop((0, 0, 64, 48)).save(photos / "cat.png")
    camera.crop((16, 16, 80, 80)).save(photos / "camera.png")
    coffee.crop((8, 8, 72, 56)).save(photos / "sub" / "coffee.jpg", quality=85)
    (photos / "notes.txt").write_text("not an image\n")

    weights = np.random.default_rng(3).uniform(-1.0, 1.0, (3, 3))
    channel_sum = np.asarray(cat, dtype=np.float64).sum(axis=2)
    after = correlate_reflect(channel_sum, weights)[:, :, None].astype(np.float32)
    np.save(inputs / "cat_random3x3.npy", after)
    box = np.asarray(camera, dtype=np.float64)
    blurred = correlate_reflect(box, np.full((3, 3), 1.0 / 9.0))[1:-1, 1:-1]
    Image.fromarray(np.round(blurred).astype(np.uint8)).save(inputs / "camera_box.png")


def make_synthetic_inputs(inputs: Path, generator: np.random.Generator) -> None:
    """Noise, alpha, 16-bit and float32 images, kernel files."""
    noise = generator.integers(0, 256, (40, 48, 3), dtype=np.uint8)
    Image.fromarray(noise).save(inputs / "noise.png")
    rgba = np.zeros((40, 48, 4), dtype=np.uint8)
    rgba[..., :3] = generator.integers(0, 256, (40, 48, 3), dtype=np.uint8)
    rgba[..., 3] = np.linspace(0, 255, 48, dtype=np.uint8)[None, :]
    rgba[10:30, 12:36, 3] = 255
    Image.fromarray(rgba, mode="RGBA").save(inputs / "rgba.png")

    rows, columns = np.mgrid[0:64, 0:64]
    gray16 = (rows * 1000 + columns * 17 + generator.integers(0, 500, (64, 64))).astype(np.uint16)
    Image.fromarray(gray16).save(inputs / "gray16.png")
    rgb16 = generator.integers(0, 65536, (36, 44, 3), dtype=np.uint16)
    rgb16[8:28, 10:30] = (60000, 30000, 1000)
    write_png_rgb16(inputs / "rgb16.png", rgb16)
    tifffile.imwrite(inputs / "rgb16.tif", rgb16, photometric="rgb")
    field = np.sin(rows / 5.0) * 200.0 + generator.normal(0.0, 20.0, (64, 64)) - 30.0
    tifffile.imwrite(inputs / "float32.tif", field.astype(np.float32), photometric="minisblack")

    (inputs / "diagonal-3x5.txt").write_text(
        "# a 3x5 diagonal, fractions and commas\n2, 1, 0, -1/2, 0\n1 0 0 0 -1\n0 1/2 0 -1 -2\n"
    )
    (inputs / "scaled.toml").write_text(
        'description = "an unsharp mask"\nscale = "1/8"\n'
        "weights = [\n    [-1, -1, -1],\n    [-1, 16, -1],\n    [-1, -1, -1],\n]\n"
    )


def make_stack_inputs(inputs: Path, generator: np.random.Generator) -> None:
    """An animated GIF and multi-page TIFFs: grey, RGB, pages of two sizes, a fit target."""
    frames = []
    for index in range(5):
        frame = np.full((32, 40), 40, dtype=np.uint8)
        frame[8:20, 4 + 6 * index : 16 + 6 * index] = 220
        frame[24:28, :] = 120 + 20 * index
        frames.append(Image.fromarray(frame))
    frames[0].save(
        inputs / "anim.gif",
        save_all=True,
        append_images=frames[1:],
        duration=[80, 120, 80, 200, 100],
        loop=0,
    )

    stack = generator.integers(0, 100, (5, 36, 40), dtype=np.uint8)
    for index in range(5):
        stack[index, 10:26, 5 + 5 * index : 15 + 5 * index] = 230
    tifffile.imwrite(inputs / "stack.tif", stack, photometric="minisblack")
    box_blurred = np.stack([correlate_reflect(page, np.full((3, 3), 1.0 / 9.0)) for page in stack])
    tifffile.imwrite(
        inputs / "stack_box.tif", np.round(box_blurred).astype(np.uint8), photometric="minisblack"
    )
    stack_rgb = generator.integers(0, 256, (3, 30, 34, 3), dtype=np.uint8)
    tifffile.imwrite(inputs / "stack_rgb.tif", stack_rgb, photometric="rgb")
    with tifffile.TiffWriter(inputs / "stack_sizes.tif") as writer:
        writer.write(stack[0], photometric="minisblack")
        writer.write(stack[1, :24, :30], photometric="minisblack")


def make_strip_inputs(inputs: Path, generator: np.random.Generator) -> None:
    """TIFFs whose work is over ``--memory 64K``: tiled RGB, 16-bit and float32 grey in strips."""
    astronaut = np.asarray(sample_photo("astronaut.png", 2).convert("RGB"))[:192, :256]
    tifffile.imwrite(
        inputs / "big_rgb_tiled.tif",
        astronaut,
        photometric="rgb",
        tile=(64, 64),
        compression="zlib",
    )
    camera = np.asarray(sample_photo("camera.png", 2).convert("L"), dtype=np.uint16)[:200, :160]
    tifffile.imwrite(
        inputs / "big_gray16.tif", camera * 257, photometric="minisblack", rowsperstrip=16
    )
    rows, columns = np.mgrid[0:180, 0:150]
    field = np.cos(rows / 9.0) * np.sin(columns / 7.0) * 100.0 + generator.normal(0, 5, rows.shape)
    tifffile.imwrite(
        inputs / "big_float32.tif",
        field.astype(np.float32),
        photometric="minisblack",
        rowsperstrip=20,
    )


def make_inputs(inputs: Path) -> None:
    """Write every input image and file the golden set reads into `inputs`.

    Parameters
    ----------
    inputs : Path
        An empty folder.
    """
    generator = np.random.default_rng(20240601)
    make_photo_inputs(inputs)
    make_synthetic_inputs(inputs, generator)
    make_stack_inputs(inputs, generator)
    make_strip_inputs(inputs, generator)


def replace_scratch(data: bytes, scratch: Path) -> bytes:
    """`data` with the scratch folder's path replaced by the placeholder."""
    return data.replace(str(scratch).encode(), SCRATCH_PLACEHOLDER.encode())


def normalise_stderr(text: str, scratch: Path) -> str:
    """Standard error without the scratch path, durations as a placeholder, one program name."""
    text = text.replace(str(scratch), SCRATCH_PLACEHOLDER)
    text = PROGRAM_NAME_PATTERN.sub("'convcli ", text)
    return DURATION_PATTERN.sub(DURATION_PLACEHOLDER, text)


def normalise_manifest_value(value, scratch: Path):
    """A manifest value with the scratch path replaced in every string it holds."""
    if isinstance(value, str):
        return value.replace(str(scratch), SCRATCH_PLACEHOLDER)
    if isinstance(value, list):
        return [normalise_manifest_value(item, scratch) for item in value]
    if isinstance(value, dict):
        return {
            key: normalise_manifest_value(item, scratch)
            for key, item in value.items()
            if not TIME_KEY_PATTERN.search(key)
        }
    return value


def normalise_manifest(data: bytes, scratch: Path) -> bytes:
    """A manifest's lines without time keys or the scratch path, sorted (completion order varies).

    Parameters
    ----------
    data : bytes
        The manifest, one JSON object per line.
    scratch : Path
        The scratch folder.

    Returns
    -------
    bytes
        The normalised lines, keys sorted, lines sorted.
    """
    lines = []
    for line in data.decode().splitlines():
        if line.strip():
            record = normalise_manifest_value(json.loads(line), scratch)
            lines.append(json.dumps(record, sort_keys=True))
    return "\n".join(sorted(lines)).encode()


def hash_folder(folder: Path, scratch: Path) -> dict[str, str]:
    """SHA-256 of every file under `folder` (Zarr stores' files included), normalised.

    Parameters
    ----------
    folder : Path
        A case's working folder.
    scratch : Path
        The scratch folder, whose path is replaced in every file before hashing.

    Returns
    -------
    dict
        Path relative to `folder` (``/``-separated) to hex digest, sorted by path.
    """
    digests = {}
    for path in sorted(folder.rglob("*")):
        if path.is_dir():
            continue
        data = path.read_bytes()
        if path.name == MANIFEST_FILE:
            data = normalise_manifest(data, scratch)
        digests[path.relative_to(folder).as_posix()] = hashlib.sha256(
            replace_scratch(data, scratch)
        ).hexdigest()
    return digests


def run_case(one: Case, convcli: list[str], scratch: Path) -> dict:
    """Run one case in its working folder and summarise what it did.

    Parameters
    ----------
    one : Case
        The case.
    convcli : list of str
        How convcli is invoked.
    scratch : Path
        The scratch folder holding ``inputs/`` and ``runs/``.

    Returns
    -------
    dict
        ``exit``, ``stdout`` (SHA-256), ``stderr`` (normalised text) and ``files``.
    """
    workdir = scratch / "runs" / one.workdir_name
    workdir.mkdir(parents=True, exist_ok=True)
    stdin_path = scratch / "inputs" / one.stdin if one.stdin else None
    with open(stdin_path or os.devnull, "rb") as stdin:
        proc = subprocess.run(
            [*convcli, *one.args],
            cwd=workdir,
            stdin=stdin,
            capture_output=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
        )
    return {
        "exit": proc.returncode,
        "stdout": hashlib.sha256(replace_scratch(proc.stdout, scratch)).hexdigest(),
        "stderr": normalise_stderr(proc.stderr.decode(errors="replace"), scratch),
        "files": hash_folder(workdir, scratch),
    }


def run_all(convcli: list[str], workers: int, keep: bool) -> dict[str, dict]:
    """Make the inputs in a scratch folder and run every case, folders side by side.

    Parameters
    ----------
    convcli : list of str
        How convcli is invoked.
    workers : int
        Working folders run at the same time.
    keep : bool
        Keep the scratch folder (its path is printed) instead of removing it.

    Returns
    -------
    dict
        Case name to its summary (see `run_case`), in the order of `golden_cases`.
    """
    cases = golden_cases()
    scratch = Path(tempfile.mkdtemp(prefix="convcli-golden-")).resolve()
    try:
        (scratch / "inputs").mkdir()
        make_inputs(scratch / "inputs")
        folders: dict[str, list[Case]] = {}
        for one in cases:
            folders.setdefault(one.workdir_name, []).append(one)

        def run_folder(folder_cases: list[Case]) -> dict[str, dict]:
            return {one.name: run_case(one, convcli, scratch) for one in folder_cases}

        results: dict[str, dict] = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            for folder_results in pool.map(run_folder, folders.values()):
                results.update(folder_results)
        return {one.name: results[one.name] for one in cases}
    finally:
        if keep:
            print(f"scratch folder kept: {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def first_line_difference(before: str, after: str) -> str:
    """Say where two texts first differ, line by line."""
    before_lines, after_lines = before.splitlines(), after.splitlines()
    for number, (old, new) in enumerate(zip(before_lines, after_lines, strict=False), start=1):
        if old != new:
            return f"line {number}: {old!r} -> {new!r}"
    return f"{len(before_lines)} lines -> {len(after_lines)} lines"


def case_differences(golden: dict, now: dict) -> list[str]:
    """What differs between a case's golden summary and this run's.

    Parameters
    ----------
    golden, now : dict
        Summaries as `run_case` returns them.

    Returns
    -------
    list of str
        One description per difference; empty when the two are the same.
    """
    found = []
    if golden["exit"] != now["exit"]:
        found.append(f"exit status {golden['exit']} -> {now['exit']}")
    if golden["stdout"] != now["stdout"]:
        found.append("stdout differs")
    if golden["stderr"] != now["stderr"]:
        found.append("stderr differs: " + first_line_difference(golden["stderr"], now["stderr"]))
    for path in sorted(set(golden["files"]) | set(now["files"])):
        if path not in now["files"]:
            found.append(f"file {path} missing")
        elif path not in golden["files"]:
            found.append(f"file {path} new")
        elif golden["files"][path] != now["files"][path]:
            found.append(f"file {path} differs")
    return found


def record(folder: Path, convcli: list[str], workers: int, keep: bool) -> int:
    """Run the golden set and write ``golden.json`` into `folder`; the exit status (0)."""
    started = time.perf_counter()
    results = run_all(convcli, workers, keep)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / GOLDEN_FILE).write_text(json.dumps(results, indent=1) + "\n")
    seconds = time.perf_counter() - started
    print(f"{len(results)} commands recorded in {seconds:.1f} s: {folder / GOLDEN_FILE}")
    return 0


def compare(folder: Path, convcli: list[str], workers: int, keep: bool) -> int:
    """Run the golden set, print every difference from ``golden.json``; 1 if any, else 0."""
    started = time.perf_counter()
    golden = json.loads((folder / GOLDEN_FILE).read_text())
    results = run_all(convcli, workers, keep)
    differing = 0
    for name in [*results, *(name for name in golden if name not in results)]:
        if name not in golden:
            found = ["not in the golden set"]
        elif name not in results:
            found = ["in the golden set, not run"]
        else:
            found = case_differences(golden[name], results[name])
        differing += bool(found)
        for description in found:
            print(f"{name}: {description}")
    seconds = time.perf_counter() - started
    print(f"compared in {seconds:.1f} s")
    print(f"{len(set(golden) | set(results))} commands, {differing} differ")
    return 1 if differing else 0


def convcli_invocation(command: str) -> list[str]:
    """`command` split as a shell would, a leading ``python`` being this interpreter."""
    words = shlex.split(command)
    if words and words[0] == "python":
        words[0] = sys.executable
    return words


def main(argv: list[str] | None = None) -> int:
    """The command line: ``record DIR`` or ``compare DIR``; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("record", "compare"))
    parser.add_argument("folder", type=Path, help=f"the folder holding {GOLDEN_FILE}")
    parser.add_argument(
        "--convcli",
        default="python -m convcli",
        help="how convcli is invoked (a leading 'python' is this interpreter; "
        "default: %(default)s)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="working folders run at the same time (default: the CPUs)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args(argv)
    action = record if args.action == "record" else compare
    return action(args.folder, convcli_invocation(args.convcli), max(1, args.workers), args.keep)


if __name__ == "__main__":
    sys.exit(main())
