"""W1 and W3 against PyTorch in CPU time on one thread: the ratio a busy machine disturbs least.

Run from the repository root (PyTorch comes with the ``bench`` extra)::

    python benchmarks/bench_small_channels_cpu.py     # --repeat 9

``benchmarks/bench_layers.py`` times the layers by the wall clock, which the
other jobs of a shared machine move by tens of percent between runs. Here
both libraries run on the calling thread (convcli's ``set_threads(1)`` and
BLAS limited to one thread; ``torch.set_num_threads(1)``), and each call is
timed by the CPU time of that thread (``time.thread_time``), the least of
``--repeat`` calls after a warm-up call. The workloads are bench_layers.py's:
W1 is 1x1024x1024x3 to 3 filters 3x3, stride 1, pad 1; W3 is 1x2048x2048x3
to 3 filters 5x5, stride 2, pad 2 (random weights, float32). PyTorch is
timed in both layouts (contiguous NCHW, and channels_last: the NHWC array
itself); the ratio is against the faster.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from convcli import conv_forward
from convcli.layers._engine.tiles import set_threads

WORKLOADS = {  # name: (input shape, f, stride, pad), 3 filters
    "W1": ((1, 1024, 1024, 3), 3, 1, 1),
    "W3": ((1, 2048, 2048, 3), 5, 2, 2),
}


def least_cpu_ms(fn, repeat: int) -> float:
    """The least CPU time of the calling thread over `repeat` calls of `fn`, after a warm-up."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.thread_time()
        fn()
        times.append(time.thread_time() - start)
    return 1e3 * min(times)


def time_workload(shape, f, stride, pad, rng, repeat) -> tuple[float, float, float]:
    """(convcli, torch NCHW, torch channels_last) least CPU ms of one workload, 3 filters."""
    A = rng.standard_normal(shape).astype(np.float32)
    W = rng.standard_normal((f, f, shape[3], 3)).astype(np.float32)
    b = np.zeros((1, 1, 1, 3), np.float32)
    x_last = torch.from_numpy(A).permute(0, 3, 1, 2)  # channels_last, no copy
    x_nchw = x_last.contiguous()
    w = torch.from_numpy(W).permute(3, 2, 0, 1).contiguous()
    w_last = w.to(memory_format=torch.channels_last)
    conv2d = torch.nn.functional.conv2d
    with torch.no_grad():
        last = least_cpu_ms(lambda: conv2d(x_last, w_last, None, stride, pad), repeat)
        nchw = least_cpu_ms(lambda: conv2d(x_nchw, w, None, stride, pad), repeat)
    ours = least_cpu_ms(lambda: conv_forward(A, W, b, {"stride": stride, "pad": pad}), repeat)
    return ours, nchw, last


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args(argv)
    threadpool_limits(1)
    torch.set_num_threads(1)
    set_threads(1)
    rng = np.random.default_rng(0)
    print(
        "| workload | convcli ms | torch NCHW ms | torch channels_last ms | convcli / best torch |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, workload in WORKLOADS.items():
        ours, nchw, last = time_workload(*workload, rng, args.repeat)
        print(f"| {name} | {ours:.1f} | {nchw:.1f} | {last:.1f} | {ours / min(last, nchw):.2f}x |")


if __name__ == "__main__":
    main()
