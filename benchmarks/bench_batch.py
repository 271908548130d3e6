"""Whole-run timing of a batch edge-detection job on a folder of photos.

Run from the repository root::

    python benchmarks/bench_batch.py            # 16 photos of 2400x1800
    python benchmarks/bench_batch.py --count 32 --repeat 5

It builds the photo folder once (JPEG, quality 90, from ``sample_images/``)
and measures, on the same folder:

- ``convcli conv -k vertical`` with ``--jobs 1`` and with the default jobs;
- ImageMagick's ``mogrify -morphology Correlate '3x3: 1,0,-1 1,0,-1 1,0,-1'``
  (when ``mogrify`` or ``magick`` is installed), writing PNG like convcli and
  also JPEG (its default for JPEG input);
- convcli's time per stage (decoding, computing, encoding), from an
  in-process run of the same per-file worker the command line uses.

Times are whole-process wall-clock medians over ``--repeat`` runs.
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

import numpy as np
from PIL import Image, ImageOps

ROOT = Path(__file__).resolve().parent.parent
VERTICAL = "3x3: 1,0,-1 1,0,-1 1,0,-1"


def make_photos(folder: Path, count: int, size=(2400, 1800)) -> list[Path]:
    """Write `count` JPEG photos of `size` made from the sample images."""
    folder.mkdir(parents=True, exist_ok=True)
    sources = sorted((ROOT / "sample_images").glob("*.png"))
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        path = folder / f"photo{i:03d}.jpg"
        paths.append(path)
        if path.exists():
            continue
        with Image.open(sources[i % len(sources)]) as src:
            img = src.convert("RGB")
        if (i // len(sources)) % 2:
            img = ImageOps.mirror(img)
        img = ImageOps.fit(img, size, Image.Resampling.LANCZOS)
        # Mild per-photo noise so no two files are alike.
        arr = np.asarray(img, dtype=np.int16) + rng.integers(-3, 4, (size[1], size[0], 3))
        Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(path, quality=90)
    return paths


def time_command(cmd: list[str], out_dir: Path, repeat: int) -> float:
    """Median wall-clock seconds of `cmd`, with a fresh empty `out_dir` each run."""
    times = []
    for _ in range(repeat + 1):  # the first run warms the file cache
        shutil.rmtree(out_dir, ignore_errors=True)
        out_dir.mkdir(parents=True)
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def imagemagick() -> list[str] | None:
    if shutil.which("magick"):
        return ["magick", "mogrify"]
    if shutil.which("mogrify"):
        return ["mogrify"]
    return None


def stage_split(photos: list[Path], out_dir: Path) -> dict[str, float]:
    """Seconds per stage summed over the photos, from the command line's worker."""
    from convcli.app.ops import ConvOp
    from convcli.app.plan import InputFile, plan_tasks
    from convcli.app.process import process_file
    from convcli.batch import iter_results
    from convcli.kernels import parse_kernel_spec

    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    totals = {"decode": 0.0, "compute": 0.0, "encode": 0.0}
    op = ConvOp((parse_kernel_spec("vertical"),))
    inputs = [InputFile(str(p), str(out_dir)) for p in photos]
    # jobs=1: this process, set up as the command line sets up its own.
    for result in iter_results(plan_tasks(inputs, op), process_file, jobs=1):
        if result.status != "done":
            raise RuntimeError(f"{result.source}: {result.message}")
        for stage in totals:
            totals[stage] += result.timings.get(stage, 0.0)
    return totals


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "convcli-bench")
    args = parser.parse_args(argv)

    photos_dir = args.data / "photos"
    photos = make_photos(photos_dir, args.count)
    out = args.data / "out"
    n = len(photos)
    convcli = [sys.executable, "-m", "convcli"]
    rows = []
    for label, extra in (("convcli --jobs 1", ["--jobs", "1"]), ("convcli (default jobs)", [])):
        cmd = [*convcli, "conv", "-k", "vertical", str(photos_dir), "-o", str(out), "-q", *extra]
        rows.append((label, time_command(cmd, out, args.repeat)))
    magick = imagemagick()
    if magick:
        # The plain command first (JPEG in, JPEG out): it is the reference.
        for label, fmt in (("ImageMagick mogrify (JPEG out)", []),
                           ("ImageMagick mogrify -format png", ["-format", "png"])):
            cmd = [*magick, "-path", str(out), *fmt, "-morphology", "Correlate", VERTICAL,
                   *map(str, photos)]
            rows.append((label, time_command(cmd, out, args.repeat)))

    print(f"{n} photos of 2400x1800 (JPEG q90), {os.cpu_count()} CPUs, "
          f"median of {args.repeat} runs")
    print(f"{'command':34s} {'seconds':>8s} {'images/s':>9s} {'throughput vs mogrify':>22s}")
    reference = rows[2][1] if magick else None
    for label, seconds in rows:
        ratio = f"{reference / seconds:21.2f}x" if reference else f"{'n/a':>22s}"
        print(f"{label:34s} {seconds:8.2f} {n / seconds:9.1f} {ratio}")
    jobs1, default = rows[0][1], rows[1][1]
    print(f"default jobs / jobs 1 time ratio: {default / jobs1:.2f}")

    split = stage_split(photos, out)
    total = sum(split.values())
    print("convcli per-stage time, one process: " + ", ".join(
        f"{stage} {sec:.2f} s ({100 * sec / total:.0f}%)" for stage, sec in split.items()
    ))


if __name__ == "__main__":
    main()
