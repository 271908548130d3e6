"""Whole-process start-up: help, version and one small file, against import click and ImageMagick.

Run from the repository root, with convcli installed::

    python benchmarks/bench_startup.py             # 15 interleaved rounds
    python benchmarks/bench_startup.py --repeat 31

Each round runs every command once, in turn, so that a slower moment of the
machine touches all of them alike; the figures are medians over the rounds.
The reference for ``--help`` is ``python -c "import click"``: the least that
a click command line costs. The single small file (a 64x64 RGB PNG, one 3x3
kernel, a PNG out) is compared with ImageMagick's ``convert -morphology
Correlate`` on the same file, when ImageMagick is installed.
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
from PIL import Image

VERTICAL = "3x3: 1,0,-1 1,0,-1 1,0,-1"


def convcli_command() -> list[str]:
    """The installed ``convcli`` script beside this Python, as users run it."""
    script = Path(sys.executable).with_name("convcli")
    return [str(script)] if script.exists() else [sys.executable, "-m", "convcli"]


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
    out = work / "out.png"
    convcli = convcli_command()
    commands = {
        'python -c "import click"': [sys.executable, "-c", "import click"],
        "convcli --help": [*convcli, "--help"],
        "convcli --version": [*convcli, "--version"],
        "convcli conv --help": [*convcli, "conv", "--help"],
        "convcli conv, one 64x64 file": [*convcli, "conv", "-k", "vertical", str(small),
                                          "-o", str(out), "-q", "--overwrite"],
    }
    magick = imagemagick()
    if magick:
        commands["ImageMagick, the same file"] = [
            magick, str(small), "-colorspace", "gray", "-morphology", "Correlate", VERTICAL,
            str(work / "magick.png")]

    times: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(args.repeat + 1):  # the first round warms the caches and is dropped
        for label, cmd in commands.items():
            start = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            times[label].append(time.perf_counter() - start)
    medians = {label: statistics.median(t[1:]) for label, t in times.items()}
    shutil.rmtree(work)

    click_time = medians['python -c "import click"']
    print(f"whole-process wall-clock medians of {args.repeat} interleaved rounds")
    print(f"{'command':32s} {'ms':>7s} {'vs import click':>16s}")
    for label, seconds in medians.items():
        print(f"{label:32s} {1000 * seconds:7.1f} {seconds / click_time:15.2f}x")
    if magick:
        ratio = medians["convcli conv, one 64x64 file"] / medians["ImageMagick, the same file"]
        print(f"one small file: convcli takes {ratio:.1f}x ImageMagick's time")


if __name__ == "__main__":
    main()
