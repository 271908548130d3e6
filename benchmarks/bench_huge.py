"""One image larger than memory: convcli in strips beside libvips, time and peak memory.

Run from the repository root (``apt-get install libvips-tools`` for ``vips``)::

    python benchmarks/bench_huge.py                      # 0.25 and 1 gigapixel
    python benchmarks/bench_huge.py --sides 16000 32000 --repeat 3

For each side S it makes a grey S x S tiled BigTIFF (256 x 256 tiles,
deflate) once, with ``vips replicate`` of ``sample_images/camera.png``, and
times whole processes, each writing a tiled BigTIFF with deflate and a
pyramid (the same compression on both sides):

- ``convcli conv -k vertical --normalize none --format tiff`` (float32
  results) beside ``vips conv`` with the same 3x3 mask (float, ``precision=float``);
- ``convcli pool --mode average --size 2 --format tiff`` beside ``vips shrink 2 2``.

``--hide imagecodecs`` runs convcli as the README's plain install does
(tifffile deflating with Python's zlib, or ISA-L where python-isal is
installed); ``--hide imagecodecs isal`` as it did before ISA-L; ``--only
conv`` runs one job.

Peak memory is the largest resident set of the process and all its
children (``/usr/bin/time``'s maximum of the process tree is of one
process only, so the children are polled here). Each figure is the median of
`repeat` runs; runs of the two tools alternate.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from installed import convcli_command, engine_line

ROOT = Path(__file__).resolve().parent.parent
MASK = "3 3 1 0\n1 0 -1\n1 0 -1\n1 0 -1\n"  # vips matrix: width height scale offset
TIFF_OUT = "[tile,tile-width=256,tile-height=256,pyramid,compression=deflate,bigtiff]"


def make_image(folder: Path, side: int) -> Path:
    """A grey `side` x `side` tiled BigTIFF of the camera photo repeated."""
    path = folder / f"huge-{side}.tif"
    if path.exists():
        return path
    grey = folder / "camera.v"
    subprocess.run(
        ["vips", "colourspace", str(ROOT / "sample_images" / "camera.png"), str(grey), "b-w"],
        check=True,
    )
    times = -(-side // 512)
    big = folder / f"replicated-{side}.v"
    subprocess.run(["vips", "replicate", str(grey), str(big), str(times), str(times)], check=True)
    subprocess.run(
        [
            "vips",
            "crop",
            str(big),
            f"{path}[tile,tile-width=256,tile-height=256,compression=deflate,bigtiff]",
            "0",
            "0",
            str(side),
            str(side),
        ],
        check=True,
    )
    big.unlink()
    return path


def peak_run(command: list[str], env=None) -> tuple[float, int]:
    """Seconds and peak resident bytes (the process and its children) of `command`."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss(proc.pid))
        time.sleep(0.02)
    elapsed = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(f"{command[:3]} failed: {proc.stderr.read().decode()[-500:]}")
    return elapsed, peak


def _tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and its descendants, from /proc."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            with open(f"/proc/{current}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            with open(f"/proc/{current}/task/{current}/children") as f:
                todo.extend(int(child) for child in f.read().split())
        except (OSError, ValueError):
            continue
    return total


def hiding(folder: Path, modules: list[str]) -> dict | None:
    """An environment in which importing `modules` fails, as where they are not installed."""
    if not modules:
        return None
    stubs = folder / "hidden"
    for name in modules:
        (stubs / name).mkdir(parents=True, exist_ok=True)
        (stubs / name / "__init__.py").write_text(f"raise ImportError('{name} hidden')\n")
    path = os.pathsep.join(filter(None, [str(stubs), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path)


def jobs(image: Path, out: Path, mask: Path, memory: str) -> dict[str, list[list[str]]]:
    """The pairs of commands: (convcli, libvips) for each job; convcli in strips under `memory`."""
    convcli = convcli_command()
    # The images are over the default --max-pixels on purpose.
    return {
        "conv vertical, float32": [
            [
                *convcli,
                "conv",
                "-k",
                "vertical",
                "--normalize",
                "none",
                "--format",
                "tiff",
                "--overwrite",
                "-q",
                "--max-pixels",
                "0",
                "--memory",
                memory,
                str(image),
                "-o",
                str(out / "convcli-conv.tiff"),
            ],
            [
                "vips",
                "conv",
                str(image),
                f"{out / 'vips-conv.tif'}{TIFF_OUT}",
                str(mask),
                "--precision",
                "float",
            ],
        ],
        "average pool 2x2": [
            [
                *convcli,
                "pool",
                "--mode",
                "average",
                "--size",
                "2",
                "--format",
                "tiff",
                "--overwrite",
                "-q",
                "--max-pixels",
                "0",
                "--memory",
                memory,
                str(image),
                "-o",
                str(out / "convcli-pool.tiff"),
            ],
            ["vips", "shrink", str(image), f"{out / 'vips-shrink.tif'}{TIFF_OUT}", "2", "2"],
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sides", type=int, nargs="+", default=[16000, 32000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--folder",
        type=Path,
        default=None,
        help="Where the test images are kept between runs (default: a temp dir)",
    )
    parser.add_argument(
        "--hide", nargs="*", default=[], help="Modules convcli runs without (imagecodecs, isal)"
    )
    parser.add_argument("--only", choices=["conv", "pool"], default=None)
    parser.add_argument(
        "--memory", default="100M", help="convcli's --memory (default 100M: in strips)"
    )
    args = parser.parse_args()
    if shutil.which("vips") is None:
        sys.exit("bench_huge: needs libvips' command line (apt-get install libvips-tools)")
    folder = args.folder or Path(tempfile.mkdtemp(prefix="convcli-huge-"))
    folder.mkdir(parents=True, exist_ok=True)
    mask = folder / "vertical.mat"
    mask.write_text(MASK)
    print(f"convcli's {engine_line(hiding(folder, args.hide))}")
    print(
        "| image | job | convcli s | libvips s | ratio (libvips / convcli) "
        "| convcli peak MB | libvips peak MB |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for side in args.sides:
        image = make_image(folder, side)
        out = folder / "out"
        out.mkdir(exist_ok=True)
        env = hiding(folder, args.hide)
        for job, (ours, theirs) in jobs(image, out, mask, args.memory).items():
            if args.only and not job.startswith(args.only.replace("pool", "average")):
                continue
            figures = {0: [], 1: []}
            for _ in range(args.repeat):
                for which, command in enumerate((ours, theirs)):
                    figures[which].append(peak_run(command, env if which == 0 else None))
            (t0, m0), (t1, m1) = (
                [statistics.median(x) for x in zip(*figures[i], strict=True)] for i in (0, 1)
            )
            print(
                f"| {side}x{side} ({side * side / 1e9:.2f} Gpx) | {job} | {t0:.1f} | "
                f"{t1:.1f} | {t1 / t0:.2f}x | {m0 / 1e6:.0f} | {m1 / 1e6:.0f} |",
                flush=True,
            )
            for path in out.iterdir():
                path.unlink()


if __name__ == "__main__":
    main()
