"""Rank-1 kernels: convcli's two 1-D passes against OpenCV's sepFilter2D, on a photo.

Run from the repository root (OpenCV comes with the ``bench`` extra)::

    python benchmarks/bench_separable.py              # --repeat 15 --threads 1,2
    python benchmarks/bench_separable.py --sweep      # the cost model's sizes too
    python benchmarks/bench_separable.py --threads 1 --clock cpu   # on a busy machine

The job: one 2400x1800 photo (``sample_images/astronaut.png`` resized),
its R+G+B sum as one float32 channel (what ``convcli conv --channels sum``
filters), correlated with a 15x15 Gaussian (sigma 2.6, OpenCV's default
for that size) and with a 31x31 box (all 1/961), zero border, output the
size of the input. convcli: :func:`convcli.conv_forward` with pad f // 2,
which picks the separable engine itself; OpenCV: ``cv2.sepFilter2D`` with
the same 1-D kernels and ``BORDER_CONSTANT``, and ``cv2.filter2D`` with the
2-D kernel. The results are compared first (their largest difference,
relative to the largest output, is printed).

Every count of ``--threads`` runs both libraries at that count
(``set_threads``, ``cv2.setNumThreads``); the calls run interleaved, convcli
first in every round, and the table gives medians of ``--repeat`` rounds
after a warm-up round (``--clock cpu``: the least CPU time of the calling
thread instead, which other processes on a busy machine disturb far less
than the wall clock). ``--sweep`` also times the separable engine against
convcli's 2-D engines for Gaussians of 3x3 to 15x15 (the choice between them
is :func:`convcli.layers._engine.separable.passes`).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

import convcli.layers.conv as conv_module
from convcli import conv_forward
from convcli.layers._engine.separable import passes
from convcli.layers._engine.tiles import set_threads

ROOT = Path(__file__).resolve().parent.parent


def photo_channel_sum(size=(2400, 1800)) -> np.ndarray:
    """(1, 1800, 2400, 1) float32: R+G+B of a sample photo resized to `size`."""
    with Image.open(ROOT / "sample_images" / "astronaut.png") as im:
        rgb = np.asarray(im.convert("RGB").resize(size, Image.Resampling.BICUBIC), np.float32)
    return rgb.sum(axis=2, dtype=np.float32)[None, :, :, None]


def interleaved_ms(fns, repeat, clock="wall"):
    """{name: ms} of the callables, run in turn `repeat` times after a warm-up round.

    The median wall time, or with ``clock="cpu"`` the least CPU time of the
    calling thread (one thread only: what a busy machine disturbs least).
    """
    timer, summary = (
        (time.thread_time, min) if clock == "cpu" else (time.perf_counter, statistics.median)
    )
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = timer()
            fn()
            times[name].append(timer() - start)
    return {name: 1e3 * summary(t) for name, t in times.items()}


def kernels():
    """name -> 1-D kernel (float32); the 2-D kernel is its outer product with itself."""
    return {
        "15x15 Gaussian": cv2.getGaussianKernel(15, 0).astype(np.float32)[:, 0],
        "31x31 box": np.full(31, 1 / 31, np.float32),
    }


def calls(A, k):
    f = len(k)
    W = np.outer(k, k).astype(np.float32)
    plane = np.ascontiguousarray(A[0, :, :, 0])
    b = np.zeros((1, 1, 1, 1), np.float32)
    hp = {"stride": 1, "pad": f // 2}
    border = cv2.BORDER_CONSTANT
    return {
        "convcli": lambda: conv_forward(A, W[:, :, None, None], b, hp)[0],
        "sepFilter2D": lambda: cv2.sepFilter2D(plane, -1, k, k, borderType=border),
        "filter2D": lambda: cv2.filter2D(plane, -1, W, borderType=border),
    }


def compare(A, repeat, threads, clock="wall"):
    print(
        "| kernel | threads | convcli ms | cv2.sepFilter2D ms | cv2.filter2D ms "
        "| convcli / sepFilter2D | largest difference / largest value |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, k in kernels().items():
        fns = calls(A, k)
        ours, theirs = fns["convcli"]()[0, :, :, 0], fns["sepFilter2D"]()
        difference = float(np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs)))
        for n in threads:
            set_threads(n)
            cv2.setNumThreads(n)
            ms = interleaved_ms(fns, repeat, clock)
            print(
                f"| {name} | {n} | {ms['convcli']:.1f} | {ms['sepFilter2D']:.1f} "
                f"| {ms['filter2D']:.1f} | {ms['convcli'] / ms['sepFilter2D']:.2f}x "
                f"| {difference:.1e} |"
            )


def sweep(A, repeat, threads):
    """The separable engine against the 2-D engines, Gaussians of 3x3 to 15x15."""
    print("\n| kernel | threads | separable ms | 2-D ms | separable passes | 2-D passes |")
    print("|---|---:|---:|---:|---:|---:|")
    b = np.zeros((1, 1, 1, 1), np.float32)
    chosen = conv_module.passes
    for f in (3, 5, 7, 9, 15):
        k = cv2.getGaussianKernel(f, 0).astype(np.float32)[:, 0]
        W = np.outer(k, k).astype(np.float32)[:, :, None, None]
        hp = {"stride": 1, "pad": f // 2}

        def separable(W=W, hp=hp):
            conv_module.passes = lambda *_: 0  # always the separable engine
            try:
                conv_forward(A, W, b, hp)
            finally:
                conv_module.passes = chosen

        def two_d(W=W, hp=hp):
            conv_module.passes = lambda *_: float("inf")  # never
            try:
                conv_forward(A, W, b, hp)
            finally:
                conv_module.passes = chosen

        for n in threads:
            set_threads(n)
            ms = interleaved_ms({"separable": separable, "2-D": two_d}, repeat)
            print(
                f"| {f}x{f} Gaussian | {n} | {ms['separable']:.1f} | {ms['2-D']:.1f} "
                f"| {passes(f, f):.1f} | {f * f + 2} |"
            )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--threads", default="1,2", help="thread counts, such as 1,2")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: the least CPU time of the calling thread (with --threads 1)",
    )
    args = parser.parse_args(argv)
    threads = [int(n) for n in args.threads.split(",")]
    if args.clock == "cpu" and threads != [1]:
        parser.error("--clock cpu measures one thread: use it with --threads 1")
    A = photo_channel_sum()
    measure = "least CPU time of the thread" if args.clock == "cpu" else "median wall time"
    print(
        f"numpy {np.__version__}, OpenCV {cv2.__version__}; one 2400x1800 channel, float32; "
        f"ms: {measure}\n"
    )
    compare(A, args.repeat, threads, args.clock)
    if args.sweep:
        sweep(A, max(3, args.repeat // 3), threads)


if __name__ == "__main__":
    main()
