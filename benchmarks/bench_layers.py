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
    """The NHWC array as a torch tensor: channels_last (no copy) and contiguous NCHW."""
    x = torch.from_numpy(A).permute(0, 3, 1, 2)
    return {"NCHW": x.contiguous(), "channels_last": x}


def torch_weights(W):
    w = torch.from_numpy(np.ascontiguousarray(W.transpose(3, 2, 0, 1)))
    return {"NCHW": w, "channels_last": w.contiguous(memory_format=torch.channels_last)}


def bench_conv(name, rng, repeat, rows):
    shape, n_C, f, stride, pad = CONV[name]
    A = rng.standard_normal(shape, dtype=np.float32)
    W = rng.standard_normal((f, f, shape[3], n_C), dtype=np.float32)
    b = rng.standard_normal((1, 1, 1, n_C), dtype=np.float32)
    hp = {"stride": stride, "pad": pad}
    Z, cache = conv_forward(A, W, b, hp)
    dZ = rng.standard_normal(Z.shape, dtype=np.float32)
    what = f"{shape[0]}x{shape[1]}x{shape[2]}x{shape[3]} to {n_C} filters {f}x{f}, s{stride} p{pad}"
    fwd = {"name": f"conv_forward {name}", "what": what, "kind": "conv"}
    fwd["ours"] = median_ms(lambda: conv_forward(A, W, b, hp), repeat)
    crop = A[:1, :24, :24].astype(np.float64)
    crop_out = conv_forward(crop, W, b, hp)[0].size
    fwd["loops"] = scaled_loops_ms(
        lambda: conv_forward_loops(crop, W.astype(np.float64), b, stride, pad), crop_out, Z.size
    )
    backward = name == "W2"
    if backward:
        bwd = {"name": f"conv_backward {name}", "what": what, "kind": "conv_backward"}
        bwd["ours"] = median_ms(lambda: conv_backward(dZ, cache), max(3, repeat // 2))
        crop_dZ = dZ[:1, :24, :24].astype(np.float64)
        bwd["loops"] = scaled_loops_ms(
            lambda: conv_backward_loops(crop_dZ, crop, W.astype(np.float64), stride, pad),
            crop_dZ.size,
            dZ.size,
        )
    if torch is not None:
        xs, ws = nchw(A), torch_weights(W)
        bias = torch.from_numpy(b.reshape(-1))
        with torch.no_grad():
            ref = F.conv2d(xs["channels_last"], ws["channels_last"], bias, stride, pad)
        np.testing.assert_allclose(
            ref.permute(0, 2, 3, 1).numpy(), Z, rtol=1e-4, atol=1e-3 * np.abs(Z).max()
        )
        for layout in ("NCHW", "channels_last"):
            x, w = xs[layout], ws[layout]
            with torch.no_grad():
                fwd[layout] = median_ms(lambda: F.conv2d(x, w, bias, stride, pad), repeat)
            if backward:
                x = x.detach().clone(memory_format=torch.preserve_format).requires_grad_(True)
                w = w.detach().clone(memory_format=torch.preserve_format).requires_grad_(True)
                bb = bias.detach().clone().requires_grad_(True)
                out = F.conv2d(x, w, bb, stride, pad)
                g = nchw(dZ)[layout]
                bwd[layout] = median_ms(
                    lambda: torch.autograd.grad(out, (x, w, bb), g, retain_graph=True),
                    max(3, repeat // 2),
                )
    if scipy is not None:
        A_pad = np.pad(A, ((0, 0), (pad, pad), (pad, pad), (0, 0)))

        def scipy_conv():
            out = np.empty(Z.shape, np.float32)
            for i in range(A.shape[0]):
                for c in range(n_C):
                    full = scipy.signal.correlate(A_pad[i], W[:, :, :, c], mode="valid")
                    out[i, :, :, c] = full[::stride, ::stride, 0] + b[0, 0, 0, c]
            return out

        fwd["scipy"] = median_ms(scipy_conv, max(3, repeat // 3))
    rows.append(fwd)
    if backward:
        rows.append(bwd)


def bench_pool(rng, repeat, rows):
    A = rng.standard_normal(POOL_SHAPE, dtype=np.float32)
    crop = A[:1, :48, :48].astype(np.float64)
    xs = nchw(A) if torch is not None else {}
    for f, stride in ((2, 2), (3, 1)):
        hp = {"f": f, "stride": stride}
        for mode in ("max", "average"):
            out, cache = pool_forward(A, hp, mode)
            what = f"1x1024x1024x3, f{f} s{stride}"
            row = {"name": f"pool_forward {mode}", "what": what, "kind": "pool"}
            row["ours"] = median_ms(lambda: pool_forward(A, hp, mode), repeat)
            crop_out = pool_forward(crop, hp, mode)[0].size
            row["loops"] = scaled_loops_ms(
                lambda: pool_forward_loops(crop, f, stride, mode), crop_out, out.size
            )
            dA = rng.standard_normal(out.shape, dtype=np.float32)
            backward = (f, stride) == (2, 2)
            if backward:
                bwd = {"name": f"pool_backward {mode}", "what": what, "kind": "pool_backward"}
                bwd["ours"] = median_ms(lambda: pool_backward(dA, cache, mode), repeat)
                crop_dA = pool_forward(crop, hp, mode)[0]
                bwd["loops"] = scaled_loops_ms(
                    lambda: pool_backward_loops(crop_dA, crop, f, stride, mode),
                    crop_dA.size,
                    dA.size,
                )
            if torch is not None:
                fn = F.max_pool2d if mode == "max" else F.avg_pool2d
                with torch.no_grad():
                    ref = fn(xs["channels_last"], f, stride)
                np.testing.assert_allclose(ref.permute(0, 2, 3, 1).numpy(), out, rtol=1e-5, atol=1e-6)
                for layout, x in xs.items():
                    with torch.no_grad():
                        row[layout] = median_ms(lambda: fn(x, f, stride), repeat)
                    if backward:
                        x = x.detach().clone(memory_format=torch.preserve_format)
                        x.requires_grad_(True)
                        y = fn(x, f, stride)
                        g = nchw(dA)[layout]
                        bwd[layout] = median_ms(
                            lambda: torch.autograd.grad(y, x, g, retain_graph=True), repeat
                        )
            if scipy is not None:
                filt = scipy.ndimage.maximum_filter if mode == "max" else scipy.ndimage.uniform_filter
                start = f // 2  # the filters centre their window

                def scipy_pool():
                    full = filt(A, size=(1, f, f, 1), mode="constant")
                    return full[:, start::stride, start::stride][:, : out.shape[1], : out.shape[2]]

                row["scipy"] = median_ms(scipy_pool, max(3, repeat // 3))
            rows.append(row)
            if backward:
                rows.append(bwd)


MEMORY_SCRIPT = textwrap.dedent(
    """
    import resource, tracemalloc
    import numpy as np
    from convcli import conv_forward
    A = np.random.default_rng(0).standard_normal((1, 4096, 4096, 3), dtype=np.float32)
    W = np.ones((3, 3, 3, 3), np.float32)
    b = np.zeros((1, 1, 1, 3), np.float32)
    tracemalloc.start()
    Z, _ = conv_forward(A, W, b, {"stride": 1, "pad": 1})
    peak = tracemalloc.get_traced_memory()[1]
    print(peak - Z.nbytes, A.nbytes, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    """
)


def measure_memory():
    """Extra bytes of a 4096x4096x3 float32 convolution (3x3 kernels, pad 1)."""
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT], capture_output=True, text=True, check=True
    )
    extra, input_bytes, maxrss_kb = map(int, out.stdout.split())
    return extra, input_bytes, maxrss_kb


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
        target = TARGETS[r["kind"]]
        speedup = r["loops"] / r["ours"]
        ok = (ratio is None or ratio <= target) and speedup >= LOOPS_TARGET
        if not ok:
            missed.append(r["name"])
        print(
            f"| {r['name']} | {r['what']} | {fmt(r['ours'])} | {fmt(r.get('NCHW'))} "
            f"| {fmt(r.get('channels_last'))} | {fmt(r.get('scipy'))} "
            f"| {'-' if ratio is None else f'{ratio:.2f}x'} | <= {target:g}x "
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
    bench_pool(rng, args.repeat, rows)
    report(rows, args.threads)
    if not args.skip_memory:
        extra, input_bytes, maxrss_kb = measure_memory()
        print(
            f"\nMemory, 1x4096x4096x3 float32 to 3 filters 3x3 (input {input_bytes / 2**20:.0f} MiB,"
            f" output the same): {extra / 2**20:.1f} MiB allocated beyond the output at peak"
            f" (tracemalloc); process peak RSS {maxrss_kb / 2**10:.0f} MiB."
        )


if __name__ == "__main__":
    main()
