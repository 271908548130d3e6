"""Whole-process start-up: help, version and one small file, against Python imports and ImageMagick.

Run from the repository root, with convcli installed::

    python benchmarks/bench_startup.py             # 15 interleaved rounds
    python benchmarks/bench_startup.py --repeat 31

Each round runs every command once, in turn, so that a slower moment of the
machine touches all of them alike; the figures are medians over the rounds.
The reference for ``--help`` is ``python -c "import click"``: the least that
a click command line costs; for a file, ``python -c "import numpy, PIL"``:
the least that a numpy and Pillow program costs. A small file (a 64x64 RGB
PNG) and a small photo (a 640x480 JPEG made from ``sample_images/``), one 3x3
kernel and a PNG out, are compared with ImageMagick's ``-morphology
Correlate`` on the same files, when ImageMagick is installed.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from installed import convcli_command
from PIL import Image, ImageOps

ROOT = Path(__file__).resolve().parent.parent
VERTICAL = "3x3: 1,0,-1 1,0,-1 1,0,-1"


def imagemagick() -> str | None:
    """ImageMagick's ``magick`` or ``convert``, if a real one answers ``-version``."""
    for name in ("magick", "convert"):
        path = shutil.which(name)
        if path:
            proc = subprocess.run([path, "-version"], capture_output=True, text=True)
            if proc.returncode == 0 and "ImageMagick" in proc.stdout:
                return path
    return None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="convcli-startup-"))
    small = work / "small.png"
    pixels = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(small)
    photo = work / "photo.jpg"
    with Image.open(ROOT / "sample_images" / "chelsea.png") as im:
        ImageOps.fit(im.convert("RGB"), (640, 480)).save(photo, quality=90)
    convcli = convcli_command()
    commands = {
        'python -c "import click"': [sys.executable, "-c", "import click"],
        'python -c "import numpy, PIL"': [sys.executable, "-c", "import numpy, PIL"],
        "convcli --help": [*convcli, "--help"],
        "convcli --version": [*convcli, "--version"],
        "convcli conv --help": [*convcli, "conv", "--help"],
    }
    magick = imagemagick()
    for label, path in (("one 64x64 file", small), ("one 640x480 photo", photo)):
        commands[f"convcli conv, {label}"] = [
            *convcli,
            "conv",
            "-k",
            "vertical",
            str(path),
            "-o",
            str(work / "out.png"),
            "-q",
            "--overwrite",
        ]
        if magick:
            commands[f"ImageMagick, {label}"] = [
                magick,
                str(path),
                "-colorspace",
                "gray",
                "-morphology",
                "Correlate",
                VERTICAL,
                str(work / "magick.png"),
            ]

    times: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(args.repeat + 1):  # the first round warms the caches and is dropped
        for label, cmd in commands.items():
            start = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            times[label].append(time.perf_counter() - start)
    medians = {label: statistics.median(t[1:]) for label, t in times.items()}
    shutil.rmtree(work)

    click_time = medians['python -c "import click"']
    imports_time = medians['python -c "import numpy, PIL"']
    print(f"whole-process wall-clock medians of {args.repeat} interleaved rounds")
    print(f"{'command':34s} {'ms':>7s} {'vs import click':>16s} {'vs import numpy, PIL':>21s}")
    for label, seconds in medians.items():
        print(
            f"{label:34s} {1000 * seconds:7.1f} {seconds / click_time:15.2f}x "
            f"{seconds / imports_time:20.2f}x"
        )
    if magick:
        for label in ("one 64x64 file", "one 640x480 photo"):
            ratio = medians[f"convcli conv, {label}"] / medians[f"ImageMagick, {label}"]
            print(f"{label}: convcli takes {ratio:.2f}x ImageMagick's time")


if __name__ == "__main__":
    main()
