"""The native engine against the numpy engines, PyTorch and OpenCV, in one run.

Run from the repository root (PyTorch and OpenCV come with the ``bench`` extra)::

    python -m pip install -e ".[bench]" && python benchmarks/bench_native.py
    python benchmarks/bench_native.py --threads 1 --clock cpu   # on a busy machine

For each workload and each count of ``--threads`` (default 1 and 2), the calls
run interleaved, convcli's native engine first in every round, then its numpy
engines (``use_engine("numpy")``), then the peer at the same thread count
(``set_threads``, ``torch.set_num_threads``, ``cv2.setNumThreads``). The table
gives medians of ``--repeat`` rounds after a warm-up round (``--clock cpu``:
the least CPU time of the calling thread, for one thread). Results are compared
with the peer's first.

- W1 to W5: ``conv_forward`` as in ``bench_layers.py`` (float32 NHWC, random
  weights) against PyTorch's faster layout (channels_last or NCHW).
- E1: one 1800x2400 channel with the ``1 0 -1`` columns (``convcli conv -k
  vertical``'s layer call) against PyTorch.
- G15: a 15x15 Gaussian (sigma 2.6) on one 1800x2400 float32 channel against
  ``cv2.sepFilter2D`` with the same 1-D kernels and a zero border.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its threads

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from convcli import conv_forward  # noqa: E402
from convcli.layers._engine import native  # noqa: E402
from convcli.layers._engine.tiles import set_threads  # noqa: E402

CONV = {
    # name: (input shape, n_C, f, stride, pad)
    "W1": ((1, 1024, 1024, 3), 3, 3, 1, 1),
    "W2": ((16, 256, 256, 3), 8, 3, 1, 1),
    "W3": ((1, 2048, 2048, 3), 3, 5, 2, 2),
    "W4": ((32, 224, 224, 16), 32, 3, 1, 1),
    "W5": ((8, 112, 112, 64), 64, 3, 1, 1),
    "E1": ((1, 1800, 2400, 1), 1, 3, 1, 1),
}


def timed(fns, repeat, clock):
    """{name: ms}: medians of wall time, or least thread CPU time, over interleaved rounds."""
    now = time.thread_time if clock == "cpu" else time.perf_counter
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = now()
            fn()
            times[name].append(now() - start)
    pick = min if clock == "cpu" else statistics.median
    return {name: 1e3 * pick(t) for name, t in times.items()}


def convcli_calls(call):
    """The call on the native engine and on the numpy engines."""

    def on(engine):
        def run():
            before = native.use_engine(engine)
            try:
                return call()
            finally:
                native.use_engine(before)

        return run

    return {"native": on("native"), "numpy": on("numpy")}


def torch_calls(A, W, stride, pad):
    x = torch.from_numpy(A).permute(0, 3, 1, 2)
    w = torch.from_numpy(np.ascontiguousarray(W.transpose(3, 2, 0, 1)))
    layouts = {
        "NCHW": (x.contiguous(), w),
        "channels_last": (x, w.contiguous(memory_format=torch.channels_last)),
    }

    def call(xw):
        def run():
            with torch.no_grad():
                return F.conv2d(xw[0], xw[1], stride=stride, padding=pad)

        return run

    return {name: call(xw) for name, xw in layouts.items()}


def conv_workload(name, repeat, clock):
    shape, n_C, f, stride, pad = CONV[name]
    rng = np.random.default_rng(0)
    A = rng.standard_normal(shape).astype(np.float32)
    if name == "E1":
        W = np.array([[1, 0, -1]] * 3, np.float32)[:, :, None, None]
    else:
        W = rng.standard_normal((f, f, shape[3], n_C)).astype(np.float32)
    b = np.zeros((1, 1, 1, n_C), np.float32)
    hp = {"stride": stride, "pad": pad}
    ours = convcli_calls(lambda: conv_forward(A, W, b, hp)[0])
    peers = torch_calls(A, W, stride, pad)
    Z, check = ours["native"](), peers["channels_last"]().permute(0, 2, 3, 1).numpy()
    assert np.allclose(Z, check, rtol=1e-4, atol=1e-3 * np.abs(check).max()), name
    ms = timed({**ours, **peers}, repeat, clock)
    peer = min(ms["NCHW"], ms["channels_last"])
    return ms["native"], ms["numpy"], peer, "PyTorch"


def gaussian_workload(repeat, clock):
    rng = np.random.default_rng(0)
    A = (rng.random((1800, 2400), dtype=np.float32) * 765).astype(np.float32)
    g = cv2.getGaussianKernel(15, 2.6).astype(np.float32).ravel()
    K = np.outer(g, g)[:, :, None, None]
    b = np.zeros((1, 1, 1, 1), np.float32)
    ours = convcli_calls(
        lambda: conv_forward(A[None, :, :, None], K, b, {"stride": 1, "pad": 7})[0]
    )
    peer = {"cv2": lambda: cv2.sepFilter2D(A, -1, g, g, borderType=cv2.BORDER_CONSTANT)}
    Z, check = ours["native"]()[0, :, :, 0], peer["cv2"]()
    assert np.allclose(Z, check, rtol=1e-4, atol=1e-3), "G15"
    ms = timed({**ours, **peer}, repeat, clock)
    return ms["native"], ms["numpy"], ms["cv2"], "cv2.sepFilter2D"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--only", help="comma list of workloads (W1, ..., E1, G15)")
    args = parser.parse_args()
    names = [*CONV, "G15"]
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
    print(f"engine: {native.description()}; clock: {args.clock}; medians of {args.repeat}")
    print("| job | threads | native ms | numpy ms | peer ms | native / peer | native / numpy |")
    print("|---|---|---|---|---|---|---|")
    for threads in (int(t) for t in args.threads.split(",")):
        set_threads(threads)
        torch.set_num_threads(threads)
        cv2.setNumThreads(threads)
        for name in names:
            if name == "G15":
                ours, numpy_ms, peer, who = gaussian_workload(args.repeat, args.clock)
            else:
                ours, numpy_ms, peer, who = conv_workload(name, args.repeat, args.clock)
            print(
                f"| {name} vs {who} | {threads} | {ours:.1f} | {numpy_ms:.1f} | {peer:.1f} "
                f"| {ours / peer:.2f}x | {ours / numpy_ms:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()
