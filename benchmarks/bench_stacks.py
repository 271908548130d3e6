"""Peak memory and time of a long stack (a multi-page TIFF) with and without frames in groups.

Writes a TIFF of ``--frames`` pages of ``--side`` x ``--side`` RGB pixels to a
temporary folder, then runs ``convcli conv -k sobel-x`` on it (animated PNG
out) under ``/usr/bin/time -v`` for each ``--memory`` given, and prints the
wall time and the peak resident memory of each run::

    python benchmarks/bench_stacks.py --frames 400 --side 256 --memory 8G 256M 64M

Timings on a shared machine are noisy; the peaks are what the README quotes.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from installed import convcli_command
from PIL import Image


def make_stack(path: Path, frames: int, side: int) -> None:
    """A TIFF of `frames` RGB pages: a moving square on noise."""
    gen = np.random.default_rng(0)
    pages = []
    for k in range(frames):
        page = gen.integers(0, 120, (side, side, 3), dtype=np.uint8)
        x = (7 * k) % (side - side // 4)
        page[side // 4 : side // 2, x : x + side // 4] = 240
        pages.append(Image.fromarray(page))
    pages[0].save(path, save_all=True, append_images=pages[1:])


def run(stack: Path, out: Path, memory: str) -> tuple[float, float]:
    """Wall seconds and peak resident MiB of one convcli run."""
    command = [
        "/usr/bin/time",
        "-v",
        *convcli_command(),
        "conv",
        str(stack),
        "-k",
        "sobel-x",
        "-o",
        str(out),
        "--overwrite",
        "-q",
        "--memory",
        memory,
    ]
    start = time.perf_counter()
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    seconds = time.perf_counter() - start
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    return seconds, int(peak.group(1)) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=400)
    parser.add_argument("--side", type=int, default=256)
    parser.add_argument("--memory", nargs="+", default=["8G", "256M", "64M"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        stack = Path(folder) / "stack.tiff"
        make_stack(stack, args.frames, args.side)
        size = stack.stat().st_size / 2**20
        print(
            f"{args.frames} frames of {args.side}x{args.side} RGB ({size:.0f} MiB TIFF), "
            "conv -k sobel-x to an animated PNG"
        )
        print("| --memory | seconds | peak MiB |")
        print("|---|---:|---:|")
        for memory in args.memory:
            seconds, peak = run(stack, Path(folder) / f"out-{memory}", memory)
            print(f"| {memory} | {seconds:.1f} | {peak:.0f} |")


if __name__ == "__main__":
    main()
