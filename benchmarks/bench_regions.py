"""Reading and writing a large TIFF by row bands: time and peak memory, against vips.

    python benchmarks/bench_regions.py [--size 16000] [--folder /tmp]

Makes a size x size uint8 grey TIFF (256 x 256 tiles, deflate; a gradient with
noise, written tile by tile), then, each in a fresh process so that the peak
resident memory (``ru_maxrss``) is that step's own:

- ``read``: every band of 256 rows through :func:`convcli.io.regions.open_regions`;
- ``copy``: the same bands written by :func:`convcli.io.row_writers.open_row_writer`
  as a tiled BigTIFF with its pyramid;
- ``vips``: ``vips copy in.tif out.tif[tile,pyramid,compression=deflate,bigtiff]``,
  where vips is installed (``apt-get install libvips-tools``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import tifffile

BAND = 256


def make_input(path: Path, size: int) -> None:
    rng = np.random.default_rng(0)
    across = -(-size // 256)

    def tiles():
        for index in range(across * across):
            top, left = divmod(index, across)
            ramp = np.add.outer(np.arange(256) + top * 256, np.arange(256) + left * 256) * (
                255 / (2 * size)
            )
            yield (ramp + rng.integers(0, 24, (256, 256))).astype(np.uint8)

    tifffile.imwrite(
        path,
        tiles(),
        shape=(size, size),
        dtype=np.uint8,
        tile=(256, 256),
        compression="zlib",
        bigtiff=True,
    )


def read_all(source_path: str) -> None:
    from convcli.io.regions import open_regions

    with open_regions(source_path) as source:
        for top in range(0, source.height, BAND):
            source.read_rows(top, min(top + BAND, source.height))


def copy_all(source_path: str, out_path: str) -> None:
    from convcli.io.regions import open_regions
    from convcli.io.row_writers import open_row_writer

    with (
        open_regions(source_path) as source,
        open_row_writer(
            out_path,
            fmt="tiff",
            height=source.height,
            width=source.width,
            channels=1,
            dtype=np.uint8,
            overwrite=True,
        ) as out,
    ):
        for top in range(0, source.height, BAND):
            out.write(source.read_rows(top, min(top + BAND, source.height)).astype(np.uint8))


def measured(argv: list[str]) -> tuple[float, float]:
    """Seconds and peak resident MB of a child process running `argv` (its own rusage)."""
    start = time.perf_counter()
    child = subprocess.Popen(argv)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, argv)
    return seconds, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=16000)
    parser.add_argument("--folder", type=Path, default=Path("/tmp"))
    parser.add_argument("--step", choices=["read", "copy"], help=argparse.SUPPRESS)
    parser.add_argument("paths", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step == "read":
        return read_all(*args.paths)
    if args.step == "copy":
        return copy_all(*args.paths)
    source = args.folder / f"bench-regions-{args.size}.tif"
    if not source.exists():
        make_input(source, args.size)
    print(f"input: {args.size}x{args.size} uint8, {source.stat().st_size / 1e6:.0f} MB on disk")
    me = [sys.executable, __file__]
    steps = [("read by bands", me + ["--step", "read", str(source)])]
    ours = args.folder / "bench-regions-out.tif"
    steps.append(("copy to pyramid", me + ["--step", "copy", str(source), str(ours)]))
    theirs = args.folder / "bench-regions-vips.tif"
    if shutil.which("vips"):
        steps.append(
            (
                "vips copy",
                [
                    "vips",
                    "copy",
                    str(source),
                    f"{theirs}[tile,pyramid,compression=deflate,bigtiff]",
                ],
            )
        )
    for name, argv in steps:
        seconds, peak = measured(argv)
        print(f"{name:16s} {seconds:6.1f} s   peak RSS {peak:6.0f} MB")
    for path in (ours, theirs):
        if path.exists():
            print(f"{path.name}: {path.stat().st_size / 1e6:.0f} MB")
            path.unlink()


if __name__ == "__main__":
    main()
