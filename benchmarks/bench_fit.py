"""Timing of ``convcli fit``'s solver against the least-squares tools a user would pick instead.

Run from the repository root (PyTorch comes with the ``bench`` extra)::

    python -m pip install -e ".[bench]" && python benchmarks/bench_fit.py

Options: ``--repeat N`` (rounds, default 5).

Workload: the luminance of each 512x512 sample photo, reflect-padded, and its
float32 convolution with a 3x3 or 5x5 kernel (named, or seeded random) plus a
bias. Each round times, interleaved in one process:

- :func:`convcli.app.fit.fit_kernel` (conjugate gradients on conv_forward and
  conv_backward, float64);
- ``numpy.linalg.lstsq`` on the im2col matrix (every window a row, built with
  ``sliding_window_view``, plus a column of ones), im2col included;
- ``torch.linalg.lstsq`` on the same matrix (im2col by ``unfold``), where installed.

It prints medians, the ratio of each tool's time to convcli's, the largest
weight error of each, and the im2col matrix's size (what least squares holds
in memory, against convcli's few image-sized arrays).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from convcli import conv_forward, pad_images
from convcli.app.fit import fit_kernel
from convcli.io.images import read_image
from convcli.kernels import get_kernel

try:
    import torch
except ImportError:
    torch = None

SAMPLES = Path(__file__).resolve().parent.parent / "sample_images"


def workloads():
    rng = np.random.default_rng(0)
    photo = read_image(SAMPLES / "astronaut.png").pixels[:, :, :3] @ [0.299, 0.587, 0.114]
    for name, W in [
        ("sobel-x", get_kernel("sobel-x").weights),
        ("random 3x3", rng.normal(size=(3, 3))),
        ("log-5x5", get_kernel("log-5x5").weights),
        ("random 5x5", rng.normal(size=(5, 5))),
    ]:
        f = W.shape[0]
        A = pad_images(photo[None, :, :, None], (f - 1) // 2, mode="reflect")
        Y, _ = conv_forward(
            A.astype(np.float32),
            W.astype(np.float32)[:, :, None, None],
            np.full((1, 1, 1, 1), 3.0, np.float32),
            {"stride": 1, "pad": 0},
        )
        yield name, A.astype(np.float64), Y.astype(np.float64), W


def with_numpy(A, Y, f):
    windows = sliding_window_view(A[0, :, :, 0], (f, f)).reshape(-1, f * f)
    X = np.concatenate([windows, np.ones((len(windows), 1))], axis=1)
    solution, *_ = np.linalg.lstsq(X, Y.ravel(), rcond=None)
    return solution[:-1].reshape(f, f), X.nbytes


def with_torch(A, Y, f):
    x = torch.from_numpy(A[:, :, :, 0])[None]
    cols = torch.nn.functional.unfold(x, f)[0].T  # (n, f * f)
    X = torch.cat([cols, torch.ones(len(cols), 1, dtype=cols.dtype)], dim=1)
    solution = torch.linalg.lstsq(X, torch.from_numpy(Y.reshape(-1, 1))).solution
    return solution[:-1, 0].numpy().reshape(f, f), None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    tools = {
        "convcli fit": lambda A, Y, f: (fit_kernel(A, Y, (f, f)).weights, None),
        "numpy lstsq": with_numpy,
    }
    if torch is not None:
        torch.set_num_threads(2)
        tools["torch lstsq"] = with_torch
    print(
        f"{'kernel':<12} {'tool':<12} {'median s':>9} {'vs convcli':>10} "
        f"{'max |dW|':>9} {'im2col MB':>9}"
    )
    for name, A, Y, W in workloads():
        f = W.shape[0]
        times = {tool: [] for tool in tools}
        errors, sizes = {}, {}
        for _ in range(args.repeat):
            for tool, solve in tools.items():  # interleaved: every tool once per round
                start = time.perf_counter()
                weights, nbytes = solve(A, Y, f)
                times[tool].append(time.perf_counter() - start)
                errors[tool] = float(np.abs(weights - W).max())
                sizes[tool] = nbytes
        base = statistics.median(times["convcli fit"])
        for tool in tools:
            t = statistics.median(times[tool])
            size = f"{sizes[tool] / 2**20:.0f}" if sizes[tool] else ""
            print(
                f"{name:<12} {tool:<12} {t:>9.2f} {t / base:>9.2f}x {errors[tool]:>9.1e} {size:>9}"
            )


if __name__ == "__main__":
    main()
