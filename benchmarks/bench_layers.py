"""Timing of convcli's layers against the tutorial's loops, PyTorch and scipy.

Run from the repository root (PyTorch and scipy come with the ``bench`` extra)::

    python -m pip install -e ".[bench]" && python benchmarks/bench_layers.py

Options: ``--repeat N`` (timed runs per measurement, default 9), ``--threads N``
(PyTorch's intra-op threads, default 2), ``--skip-memory``.

For every workload (float32, NHWC) it times, in one process:

- convcli's function;
- PyTorch on the CPU, in both memory layouts: contiguous NCHW (the input
  permuted and copied once, outside the timing) and channels_last, which is
  the NHWC array itself, shared without a copy; weights in the same layout;
- scipy (``scipy.signal.correlate`` per image and filter,
  ``scipy.ndimage.maximum_filter`` / ``uniform_filter`` then subsampling) for
  the forward passes, where installed;
- the tutorial's loops (one ``np.sum(window * W)`` per output value), on a
  small crop, scaled to the full workload per output value.

Times are medians over ``--repeat`` runs after one warm-up run. Ratios
compare convcli with the faster PyTorch layout. Results are checked against
PyTorch first, so both compute the same thing. Finally, a subprocess measures
the extra memory (tracemalloc peak beyond input and output) of a 4096x4096x3
float32 convolution with 3x3 kernels.

Threads: PyTorch gets ``torch.set_num_threads(--threads)``. numpy's BLAS keeps
its default (all cores); convcli's engine keeps each matmul small enough for
OpenBLAS to run it on the calling thread, so convcli runs on one core.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import time

import numpy as np

import convcli
from convcli import conv_backward, conv_forward, pool_backward, pool_forward

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the table then has no PyTorch columns
    torch = None
try:
    import scipy.ndimage
    import scipy.signal
except ImportError:
    scipy = None

CONV = {
    # name: (input shape, n_C, f, stride, pad)
    "W1": ((1, 1024, 1024, 3), 3, 3, 1, 1),
    "W2": ((16, 256, 256, 3), 8, 3, 1, 1),
    "W3": ((1, 2048, 2048, 3), 3, 5, 2, 2),
}
POOL_SHAPE = (1, 1024, 1024, 3)
TARGETS = {"conv": 3.0, "conv_backward": 4.0, "pool": 1.5, "pool_backward": 3.0}
LOOPS_TARGET = 300.0


def median_ms(fn, repeat):
    fn()  # warm-up: caches, first-touch pages, lazy initialisation
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


# --- the tutorial's loops (float64, one output value at a time) -----------------------------


def conv_forward_loops(A_prev, W, b, stride, pad):
    m, n_H_prev, n_W_prev, _ = A_prev.shape
    f, _, _, n_C = W.shape
    n_H = (n_H_prev - f + 2 * pad) // stride + 1
    n_W = (n_W_prev - f + 2 * pad) // stride + 1
    A_pad = np.pad(A_prev, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    Z = np.zeros((m, n_H, n_W, n_C))
    for i in range(m):
        for h in range(n_H):
            for w in range(n_W):
                a_slice = A_pad[i, h * stride : h * stride + f, w * stride : w * stride + f, :]
                for c in range(n_C):
                    Z[i, h, w, c] = np.sum(a_slice * W[:, :, :, c]) + b[0, 0, 0, c]
    return Z


def conv_backward_loops(dZ, A_prev, W, stride, pad):
    f = W.shape[0]
    A_pad = np.pad(A_prev, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    dA_pad, dW, db = np.zeros_like(A_pad), np.zeros_like(W), np.zeros((1, 1, 1, W.shape[3]))
    m, n_H, n_W, n_C = dZ.shape
    for i in range(m):
        for h in range(n_H):
            for w in range(n_W):
                rows, cols = slice(h * stride, h * stride + f), slice(w * stride, w * stride + f)
                for c in range(n_C):
                    dA_pad[i, rows, cols, :] += W[:, :, :, c] * dZ[i, h, w, c]
                    dW[:, :, :, c] += A_pad[i, rows, cols, :] * dZ[i, h, w, c]
                    db[:, :, :, c] += dZ[i, h, w, c]
    return dA_pad[:, pad : pad + A_prev.shape[1], pad : pad + A_prev.shape[2]], dW, db


def pool_forward_loops(A_prev, f, stride, mode):
    m, n_H_prev, n_W_prev, n_C = A_prev.shape
    n_H, n_W = (n_H_prev - f) // stride + 1, (n_W_prev - f) // stride + 1
    A = np.zeros((m, n_H, n_W, n_C))
    for i in range(m):
        for h in range(n_H):
            for w in range(n_W):
                for c in range(n_C):
                    window = A_prev[i, h * stride : h * stride + f, w * stride : w * stride + f, c]
                    A[i, h, w, c] = np.max(window) if mode == "max" else np.mean(window)
    return A


def pool_backward_loops(dA, A_prev, f, stride, mode):
    dA_prev = np.zeros(A_prev.shape)
    m, n_H, n_W, n_C = dA.shape
    for i in range(m):
        for h in range(n_H):
            for w in range(n_W):
                rows, cols = slice(h * stride, h * stride + f), slice(w * stride, w * stride + f)
                for c in range(n_C):
                    if mode == "max":
                        window = A_prev[i, rows, cols, c]
                        mask = np.zeros(window.shape, bool)
                        mask.flat[np.argmax(window)] = True
                        dA_prev[i, rows, cols, c] += mask * dA[i, h, w, c]
                    else:
                        dA_prev[i, rows, cols, c] += dA[i, h, w, c] / (f * f)
    return dA_prev


def scaled_loops_ms(run_crop, crop_outputs, full_outputs):
    """Time the loops on a crop, scaled to the full workload per output value."""
    start = time.perf_counter()
    run_crop()
    return 1e3 * (time.perf_counter() - start) * full_outputs / crop_outputs


# --- workloads -------------------------------------------------------------------------------


def nchw(A):
    """The NHWC array as torch tensors: channels_last (no copy) and contiguous NCHW."""
    x = torch.from_numpy(A).permute(0, 3, 1, 2)
    return {"NCHW": x.contiguous(), "channels_last": x}


def torch_weights(W):
    w = torch.from_numpy(np.ascontiguousarray(W.transpose(3, 2, 0, 1)))
    return {"NCHW": w, "channels_last": w.contiguous(memory_format=torch.channels_last)}


def leaf(t):
    """A copy of `t` in the same memory layout that autograd tracks."""
    return t.detach().clone(memory_format=torch.preserve_format).requires_grad_(True)


def torch_conv(A, W, b, stride, pad, dZ, repeat, backward):
    """{layout: (forward ms, backward ms or None)}."""
    xs, ws, gs = nchw(A), torch_weights(W), nchw(dZ)
    bias = torch.from_numpy(b.reshape(-1))
    return {
        layout: torch_conv_layout(
            xs[layout], ws[layout], bias, stride, pad, gs[layout], repeat, backward
        )
        for layout in xs
    }


def torch_conv_layout(x, w, bias, stride, pad, g, repeat, backward):
    with torch.no_grad():
        fwd = median_ms(lambda: F.conv2d(x, w, bias, stride, pad), repeat)
    if not backward:
        return fwd, None
    x, w, bias = leaf(x), leaf(w), leaf(bias)
    out = F.conv2d(x, w, bias, stride, pad)
    grads = (x, w, bias)
    bwd = median_ms(
        lambda: torch.autograd.grad(out, grads, g, retain_graph=True), max(3, repeat // 2)
    )
    return fwd, bwd


def torch_pool(A, f, stride, mode, dA, repeat, backward):
    """{layout: (forward ms, backward ms or None, forward + backward ms or None)}."""
    fn = F.max_pool2d if mode == "max" else F.avg_pool2d
    xs, gs = nchw(A), nchw(dA)
    return {
        layout: torch_pool_layout(fn, xs[layout], f, stride, gs[layout], repeat, backward)
        for layout in xs
    }


def torch_pool_layout(fn, x, f, stride, g, repeat, backward):
    with torch.no_grad():
        fwd = median_ms(lambda: fn(x, f, stride), repeat)
    if not backward:
        return fwd, None, None
    x = leaf(x)
    y = fn(x, f, stride)
    bwd = median_ms(lambda: torch.autograd.grad(y, x, g, retain_graph=True), repeat)
    both = median_ms(lambda: torch.autograd.grad(fn(x, f, stride), x, g), repeat)
    return fwd, bwd, both


def scipy_conv(A, W, b, stride, pad, out_shape):
    A_pad = np.pad(A, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    out = np.empty(out_shape, np.float32)
    for i in range(A.shape[0]):
        for c in range(W.shape[3]):
            full = scipy.signal.correlate(A_pad[i], W[:, :, :, c], mode="valid")
            out[i, :, :, c] = full[::stride, ::stride, 0] + b[0, 0, 0, c]
    return out


def scipy_pool(A, f, stride, mode, out_shape):
    filt = scipy.ndimage.maximum_filter if mode == "max" else scipy.ndimage.uniform_filter
    full = filt(A, size=(1, f, f, 1), mode="constant")
    start = f // 2  # the filters centre their window
    return full[:, start::stride, start::stride][:, : out_shape[1], : out_shape[2]]


def row(name, what, kind, ours, loops):
    return {"name": name, "what": what, "kind": kind, "ours": ours, "loops": loops}


def bench_conv(name, rng, repeat, rows):
    shape, n_C, f, stride, pad = CONV[name]
    A = rng.standard_normal(shape, dtype=np.float32)
    W = rng.standard_normal((f, f, shape[3], n_C), dtype=np.float32)
    b = rng.standard_normal((1, 1, 1, n_C), dtype=np.float32)
    hp = {"stride": stride, "pad": pad}
    Z, cache = conv_forward(A, W, b, hp)
    dZ = rng.standard_normal(Z.shape, dtype=np.float32)
    what = f"{shape[0]}x{shape[1]}x{shape[2]}x{shape[3]} to {n_C} filters {f}x{f}, s{stride} p{pad}"
    # The loops on a 24x24 crop of the first image, in float64 like the tutorial.
    crop, W64 = A[:1, :24, :24].astype(np.float64), W.astype(np.float64)
    crop_Z = conv_forward(crop, W64, b, hp)[0]
    new = [
        row(
            f"conv_forward {name}",
            what,
            "conv",
            median_ms(lambda: conv_forward(A, W, b, hp), repeat),
            scaled_loops_ms(
                lambda: conv_forward_loops(crop, W64, b, stride, pad), crop_Z.size, Z.size
            ),
        )
    ]
    backward = name == "W2"
    if backward:
        new.append(
            row(
                f"conv_backward {name}",
                what,
                "conv_backward",
                median_ms(lambda: conv_backward(dZ, cache), max(3, repeat // 2)),
                scaled_loops_ms(
                    lambda: conv_backward_loops(crop_Z, crop, W64, stride, pad),
                    crop_Z.size,
                    dZ.size,
                ),
            )
        )
    if torch is not None:
        with torch.no_grad():
            check = F.conv2d(
                nchw(A)["channels_last"],
                torch_weights(W)["channels_last"],
                torch.from_numpy(b.reshape(-1)),
                stride,
                pad,
            )
        scale = np.abs(Z).max()
        np.testing.assert_allclose(check.permute(0, 2, 3, 1), Z, rtol=1e-4, atol=1e-5 * scale)
        for layout, (fwd, bwd) in torch_conv(A, W, b, stride, pad, dZ, repeat, backward).items():
            new[0][layout] = fwd
            if backward:
                new[1][layout] = bwd
    if scipy is not None:
        new[0]["scipy"] = median_ms(
            lambda: scipy_conv(A, W, b, stride, pad, Z.shape), max(3, repeat // 3)
        )
    rows.extend(new)


def bench_pool(f, stride, mode, rng, repeat, rows):
    A = rng.standard_normal(POOL_SHAPE, dtype=np.float32)
    hp = {"f": f, "stride": stride}
    out, cache = pool_forward(A, hp, mode)
    dA = rng.standard_normal(out.shape, dtype=np.float32)
    what = f"1x1024x1024x3, f{f} s{stride}"
    crop = A[:1, :48, :48].astype(np.float64)
    crop_out = pool_forward(crop, hp, mode)[0]
    new = [
        row(
            f"pool_forward {mode}",
            what,
            "pool",
            median_ms(lambda: pool_forward(A, hp, mode), repeat),
            scaled_loops_ms(
                lambda: pool_forward_loops(crop, f, stride, mode), crop_out.size, out.size
            ),
        )
    ]
    backward = (f, stride) == (2, 2)
    if backward:
        loops_bwd = scaled_loops_ms(
            lambda: pool_backward_loops(crop_out, crop, f, stride, mode), crop_out.size, dA.size
        )
        new.append(
            row(
                f"pool_backward {mode}",
                what,
                "pool_backward",
                median_ms(lambda: pool_backward(dA, cache, mode), repeat),
                loops_bwd,
            )
        )
        if mode == "max":

            def both():
                result, pool_cache = pool_forward(A, hp, mode)
                return pool_backward(dA, pool_cache, mode)

            loops_both = new[0]["loops"] + loops_bwd
            new.append(
                row("pool max forward+backward", what, None, median_ms(both, repeat), loops_both)
            )
    if torch is not None:
        with torch.no_grad():
            fn = F.max_pool2d if mode == "max" else F.avg_pool2d
            check = fn(nchw(A)["channels_last"], f, stride).permute(0, 2, 3, 1)
        np.testing.assert_allclose(check, out, rtol=1e-5, atol=1e-6)
        for layout, times in torch_pool(A, f, stride, mode, dA, repeat, backward).items():
            for r, t in zip(new, times, strict=False):
                r[layout] = t
    if scipy is not None:
        new[0]["scipy"] = median_ms(
            lambda: scipy_pool(A, f, stride, mode, out.shape), max(3, repeat // 3)
        )
    rows.extend(new)


MEMORY_SCRIPT = textwrap.dedent(
    """
    import tracemalloc
    import numpy as np
    from convcli import conv_forward
    rng = np.random.default_rng(0)
    A = rng.standard_normal((1, 4096, 4096, 3), dtype=np.float32)
    W = rng.standard_normal((3, 3, 3, 3), dtype=np.float32)
    b = np.zeros((1, 1, 1, 3), np.float32)
    conv_forward(A[:, :64, :64], W, b, {"stride": 1, "pad": 1})  # imports, thread pool

    def status(key):  # kB in /proc/self/status (Linux)
        with open("/proc/self/status") as lines:
            return next(int(line.split()[1]) for line in lines if line.startswith(key))

    rss_before = status("VmRSS:")
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset the peak RSS (VmHWM) to the current RSS
    tracemalloc.start()
    Z, _ = conv_forward(A, W, b, {"stride": 1, "pad": 1})
    traced = tracemalloc.get_traced_memory()[1] - Z.nbytes
    print(traced, (status("VmHWM:") - rss_before) * 1024 - Z.nbytes, A.nbytes)
    """
)


def measure_memory():
    """Extra bytes of a 4096x4096x3 float32 convolution: (traced, RSS, input bytes).

    The filters are random; conv_forward does the same work for any finite values.
    """
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT], capture_output=True, text=True, check=True
    )
    return tuple(map(int, out.stdout.split()))


def fmt(ms):
    return "-" if ms is None else (f"{ms:,.0f}" if ms >= 100 else f"{ms:.1f}")


def report(rows, threads):
    print(
        f"convcli {convcli.__version__}, numpy {np.__version__}"
        + (f", torch {torch.__version__} ({threads} threads)" if torch is not None else "")
        + (f", scipy {scipy.__version__}" if scipy is not None else "")
        + f"; {platform.processor() or platform.machine()}, {os.cpu_count()} cores\n"
    )
    print(
        "| workload | | convcli ms | torch NCHW ms | torch channels_last ms | scipy ms "
        "| convcli / best torch | target | loops ms (scaled) | loops / convcli |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    missed = []
    for r in rows:
        torch_times = [r[k] for k in ("NCHW", "channels_last") if r.get(k) is not None]
        best = min(torch_times) if torch_times else None
        ratio = r["ours"] / best if best else None
        target = TARGETS.get(r["kind"])
        speedup = r["loops"] / r["ours"]
        if target is not None:
            if (ratio is not None and ratio > target) or speedup < LOOPS_TARGET:
                missed.append(r["name"])
        print(
            f"| {r['name']} | {r['what']} | {fmt(r['ours'])} | {fmt(r.get('NCHW'))} "
            f"| {fmt(r.get('channels_last'))} | {fmt(r.get('scipy'))} "
            f"| {'-' if ratio is None else f'{ratio:.2f}x'} "
            f"| {'-' if target is None else f'<= {target:g}x'} "
            f"| {fmt(r['loops'])} | {speedup:,.0f}x |"
        )
    print("\nTargets missed: " + (", ".join(missed) if missed else "none"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args(argv)
    if torch is not None:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    rows = []
    for name in CONV:
        bench_conv(name, rng, args.repeat, rows)
    for f, stride in ((2, 2), (3, 1)):
        for mode in ("max", "average"):
            bench_pool(f, stride, mode, rng, args.repeat, rows)
    report(rows, args.threads)
    if not args.skip_memory:
        traced, rss, input_bytes = measure_memory()
        print(
            f"\nMemory, 1x4096x4096x3 float32 to 3 filters 3x3, pad 1 (input and output"
            f" {input_bytes / 2**20:.0f} MiB each): {traced / 2**20:.1f} MiB allocated beyond"
            f" the output at peak (tracemalloc); peak RSS {rss / 2**20:.0f} MiB above the RSS"
            f" before the call, output excluded."
        )


if __name__ == "__main__":
    main()
