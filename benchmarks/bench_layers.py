"""Timing of convcli's layers against the tutorial's loops, PyTorch and scipy.

Run from the repository root (PyTorch and scipy come with the ``bench`` extra)::

    python -m pip install -e ".[bench]" && python benchmarks/bench_layers.py

Options: ``--repeat N`` (timed runs per measurement, default 9), ``--threads 1,2,4``
(the thread counts to compare, default 1 and the usable cores), ``--skip-memory``,
``--skip-scaling``.

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

The timed functions of one workload run interleaved, convcli first in every
round (one run of each after a warm-up run, then again, ``--repeat`` times),
and the table gives medians: on a busy machine a slow spell then hits all of
them alike. Ratios compare convcli with the faster PyTorch layout. Results
are checked against PyTorch first, so both compute the same thing. A
subprocess measures the extra memory (tracemalloc peak beyond input and
output) of a 4096x4096x3 float32 convolution with 3x3 kernels.

Threads: the main table uses the largest of ``--threads`` for both convcli
(``set_threads``) and PyTorch (``torch.set_num_threads``). PyTorch's OpenMP
threads wait passively (``OMP_WAIT_POLICY=PASSIVE`` unless set): by default
they spin after each call and slow down whatever runs next, which moved the
ratios by up to 5x with the order of the calls alone. The scaling table then
times the convolutions at every thread count: the speed-up from 1 to N
threads of convcli and of PyTorch, and the share of PyTorch's speed-up that
convcli keeps.
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

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its threads

import numpy as np  # noqa: E402

import convcli  # noqa: E402
from convcli import conv_backward, conv_forward, pool_backward, pool_forward  # noqa: E402
from convcli.layers._engine.tiles import set_threads, usable_cores  # noqa: E402
from convcli.layers.depthwise import depthwise_conv_forward  # noqa: E402

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
    "W4": ((32, 224, 224, 16), 32, 3, 1, 1),
    "W5": ((8, 112, 112, 64), 64, 3, 1, 1),
    # The default `convcli conv -k vertical` on a photo: one channel (R+G+B), 1 0 -1.
    "E1": ((1, 1800, 2400, 1), 1, 3, 1, 1),
}
DEPTHWISE = {
    # name: (input shape, kernels per channel, f, stride, pad); D1 is one channel of a
    # photo, as `convcli conv --channels each` filters it, D2 a whole RGB photo.
    "D1": ((1, 1800, 2400, 1), 1, 3, 1, 1),
    "D2": ((1, 1800, 2400, 3), 1, 3, 1, 1),
    # D2 with the 1 0 -1 edge kernel on every channel (the tap engine's adds).
    "E2": ((1, 1800, 2400, 3), 1, 3, 1, 1),
}
# Workloads with the 1 0 -1 edge kernel rather than random weights.
EDGE = {"E1", "E2"}
EDGE_KERNEL = np.array([[1, 0, -1]] * 3, np.float32)
# Convolutions of the scaling table: name -> (input shape, n_C, f, stride, pad).
SCALING = {
    "W1": CONV["W1"],
    "W4": CONV["W4"],
    "W5": CONV["W5"],
    "4096": ((1, 4096, 4096, 3), 8, 3, 1, 1),
}
POOL_SHAPE = (1, 1024, 1024, 3)
TARGETS = {
    "conv": 2.0,
    "depthwise": 2.0,
    "conv_backward": 4.0,
    "pool": 1.5,
    "pool_backward": 3.0,
    "pool_backward max": 2.0,
}
# The tutorial's W2 keeps its earlier target.
ROW_TARGETS = {"conv_forward W2": 3.0}
LOOPS_TARGET = 300.0  # for the tutorial's workloads: W1 to W3 and pooling
NO_LOOPS_TARGET = ("W4", "W5", "D1", "D2", "E1", "E2")
SCALING_TARGET = 0.7  # share of PyTorch's speed-up from 1 to N threads kept


def interleaved_ms(fns, repeat):
    """{name: median ms} of the callables `fns`, run in turn `repeat` times after a warm-up."""
    for fn in fns.values():
        fn()  # warm-up: caches, first-touch pages, lazy initialisation
    times = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: 1e3 * statistics.median(t) for name, t in times.items()}


def median_ms(fn, repeat):
    return interleaved_ms({"": fn}, repeat)[""]


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


def no_grad(fn):
    def run():
        with torch.no_grad():
            return fn()

    return run


def torch_conv_calls(A, W, b, stride, pad, groups=1):
    """{layout: forward call}; W in conv2d's (n_C, n_C_prev / groups, f, f) order, as NHWC."""
    xs, ws = nchw(A), torch_weights(W)
    bias = torch.from_numpy(b.reshape(-1))
    return {
        layout: no_grad(
            lambda x=xs[layout], w=ws[layout]: F.conv2d(x, w, bias, stride, pad, 1, groups)
        )
        for layout in xs
    }


def torch_conv_backward_calls(A, W, b, stride, pad, dZ):
    """{layout: backward call} on a graph built once."""
    xs, ws, gs = nchw(A), torch_weights(W), nchw(dZ)
    calls = {}
    for layout in xs:
        x, w, bias = leaf(xs[layout]), leaf(ws[layout]), leaf(torch.from_numpy(b.reshape(-1)))
        out = F.conv2d(x, w, bias, stride, pad)
        calls[layout] = lambda out=out, grads=(x, w, bias), g=gs[layout]: torch.autograd.grad(
            out, grads, g, retain_graph=True
        )
    return calls


def torch_pool_calls(A, f, stride, mode, dA):
    """{layout: (forward, backward, forward + backward) calls}."""
    fn = F.max_pool2d if mode == "max" else F.avg_pool2d
    xs, gs = nchw(A), nchw(dA)
    calls = {}
    for layout in xs:
        x, g = leaf(xs[layout]), gs[layout]
        y = fn(x, f, stride)
        calls[layout] = (
            no_grad(lambda x=x: fn(x, f, stride)),
            lambda y=y, x=x, g=g: torch.autograd.grad(y, x, g, retain_graph=True),
            lambda x=x, g=g: torch.autograd.grad(fn(x, f, stride), x, g),
        )
    return calls


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


def conv_case(rng, shape, n_C, f, depthwise=False, edge=False):
    A = rng.standard_normal(shape, dtype=np.float32)
    W = rng.standard_normal((f, f, shape[3], n_C), dtype=np.float32)
    if edge:  # the same edge kernel for every channel and filter
        W[...] = EDGE_KERNEL[:, :, None, None]
    n_out = n_C * shape[3] if depthwise else n_C
    return A, W, rng.standard_normal((1, 1, 1, n_out), dtype=np.float32)


def bench_conv(name, rng, repeat, rows):
    shape, n_C, f, stride, pad = CONV[name]
    A, W, b = conv_case(rng, shape, n_C, f, edge=name in EDGE)
    hp = {"stride": stride, "pad": pad}
    Z, cache = conv_forward(A, W, b, hp)
    dZ = rng.standard_normal(Z.shape, dtype=np.float32)
    kernel = "1 0 -1 filter" if name in EDGE else f"filters {f}x{f}"
    what = f"{shape[0]}x{shape[1]}x{shape[2]}x{shape[3]} to {n_C} {kernel}, s{stride} p{pad}"
    # The loops on a 24x24 crop of the first image, in float64 like the tutorial.
    crop, W64 = A[:1, :24, :24].astype(np.float64), W.astype(np.float64)
    crop_Z = conv_forward(crop, W64, b, hp)[0]
    loops = scaled_loops_ms(
        lambda: conv_forward_loops(crop, W64, b, stride, pad), crop_Z.size, Z.size
    )
    forward = {"ours": lambda: conv_forward(A, W, b, hp)}
    if torch is not None:
        calls = torch_conv_calls(A, W, b, stride, pad)
        scale = np.abs(Z).max()
        check = calls["channels_last"]().permute(0, 2, 3, 1)
        np.testing.assert_allclose(check, Z, rtol=1e-4, atol=1e-5 * scale)
        forward.update(calls)
    times = interleaved_ms(forward, repeat)
    new = [dict(row(f"conv_forward {name}", what, "conv", times.pop("ours"), loops), **times)]
    if name == "W2":
        backward = {"ours": lambda: conv_backward(dZ, cache)}
        if torch is not None:
            backward.update(torch_conv_backward_calls(A, W, b, stride, pad, dZ))
        times = interleaved_ms(backward, max(3, repeat // 2))
        loops = scaled_loops_ms(
            lambda: conv_backward_loops(crop_Z, crop, W64, stride, pad), crop_Z.size, dZ.size
        )
        new.append(
            dict(
                row(f"conv_backward {name}", what, "conv_backward", times.pop("ours"), loops),
                **times,
            )
        )
    if scipy is not None and shape[3] * n_C <= 24:
        new[0]["scipy"] = median_ms(
            lambda: scipy_conv(A, W, b, stride, pad, Z.shape), max(3, repeat // 3)
        )
    rows.extend(new)


def bench_depthwise(name, rng, repeat, rows):
    shape, n_K, f, stride, pad = DEPTHWISE[name]
    A, W, b = conv_case(rng, shape, n_K, f, depthwise=True, edge=name in EDGE)
    hp = {"stride": stride, "pad": pad}
    Z, _ = depthwise_conv_forward(A, W, b, hp)
    C = shape[3]
    kernel = "1 0 -1" if name in EDGE else f"{f}x{f}"
    what = f"{shape[0]}x{shape[1]}x{shape[2]}x{shape[3]}, {n_K} kernel {kernel} a channel"
    crop = A[:1, :24, :24].astype(np.float64)
    crop_Z = depthwise_conv_forward(crop, W.astype(np.float64), b, hp)[0]
    # Each channel is a conv_forward with its own kernels: the same loops per value.
    loops = scaled_loops_ms(
        lambda: [
            conv_forward_loops(crop[..., c : c + 1], W[:, :, c : c + 1], b, stride, pad)
            for c in range(C)
        ],
        crop_Z.size,
        Z.size,
    )
    calls = {"ours": lambda: depthwise_conv_forward(A, W, b, hp)}
    if torch is not None:
        # PyTorch's groups=C orders channels c * n_K + k; convcli's are kernel-major.
        Wt = W.transpose(0, 1, 3, 2).reshape(f, f, 1, n_K * C)
        bt = b.reshape(n_K, C).T.reshape(1, 1, 1, -1)
        torch_calls = torch_conv_calls(A, Wt, bt, stride, pad, groups=C)
        check = torch_calls["channels_last"]().permute(0, 2, 3, 1).numpy()
        check = check.reshape(Z.shape[:3] + (C, n_K)).swapaxes(3, 4).reshape(Z.shape)
        np.testing.assert_allclose(check, Z, rtol=1e-4, atol=1e-5 * np.abs(Z).max())
        calls.update(torch_calls)
    times = interleaved_ms(calls, repeat)
    rows.append(
        dict(
            row(f"depthwise_conv_forward {name}", what, "depthwise", times.pop("ours"), loops),
            **times,
        )
    )


def bench_pool(f, stride, mode, rng, repeat, rows):
    A = rng.standard_normal(POOL_SHAPE, dtype=np.float32)
    hp = {"f": f, "stride": stride}
    out, cache = pool_forward(A, hp, mode)
    dA = rng.standard_normal(out.shape, dtype=np.float32)
    what = f"1x1024x1024x3, f{f} s{stride}"
    crop = A[:1, :48, :48].astype(np.float64)
    crop_out = pool_forward(crop, hp, mode)[0]
    loops_fwd = scaled_loops_ms(
        lambda: pool_forward_loops(crop, f, stride, mode), crop_out.size, out.size
    )
    torch_calls = {}
    if torch is not None:
        torch_calls = torch_pool_calls(A, f, stride, mode, dA)
        check = torch_calls["channels_last"][0]().permute(0, 2, 3, 1)
        np.testing.assert_allclose(check, out, rtol=1e-5, atol=1e-6)
    # (row name, kind, our call, index of the torch call, loops)
    steps = [(f"pool_forward {mode}", "pool", lambda: pool_forward(A, hp, mode), 0, loops_fwd)]
    if (f, stride) == (2, 2):
        loops_bwd = scaled_loops_ms(
            lambda: pool_backward_loops(crop_out, crop, f, stride, mode), crop_out.size, dA.size
        )
        kind = "pool_backward max" if mode == "max" else "pool_backward"
        steps.append(
            (f"pool_backward {mode}", kind, lambda: pool_backward(dA, cache, mode), 1, loops_bwd)
        )
        if mode == "max":

            def both():
                result, pool_cache = pool_forward(A, hp, mode)
                return pool_backward(dA, pool_cache, mode)

            steps.append(("pool max forward+backward", None, both, 2, loops_fwd + loops_bwd))
    for name, kind, ours, index, loops in steps:
        calls = {"ours": ours}
        calls.update({layout: fns[index] for layout, fns in torch_calls.items()})
        times = interleaved_ms(calls, repeat)
        rows.append(dict(row(name, what, kind, times.pop("ours"), loops), **times))
    if scipy is not None:
        rows[-len(steps)]["scipy"] = median_ms(
            lambda: scipy_pool(A, f, stride, mode, out.shape), max(3, repeat // 3)
        )


def bench_scaling(threads, repeat):
    """{name: {N: (convcli ms, best torch ms)}} for the convolutions of SCALING."""
    rng = np.random.default_rng(1)
    table = {}
    for name, (shape, n_C, f, stride, pad) in SCALING.items():
        A, W, b = conv_case(rng, shape, n_C, f)
        hp = {"stride": stride, "pad": pad}
        table[name] = {}
        for n in threads:
            set_threads(n)
            calls = {"ours": lambda A=A, W=W, b=b, hp=hp: conv_forward(A, W, b, hp)}
            if torch is not None:
                torch.set_num_threads(n)
                calls.update(torch_conv_calls(A, W, b, stride, pad))
            times = interleaved_ms(calls, repeat)
            ours = times.pop("ours")
            table[name][n] = (ours, min(times.values()) if times else None)
    return table


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
        + (f", torch {torch.__version__}" if torch is not None else "")
        + (f", scipy {scipy.__version__}" if scipy is not None else "")
        + f"; {platform.processor() or platform.machine()}, {os.cpu_count()} cores,"
        + f" {threads} threads for convcli and PyTorch\n"
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
        target = ROW_TARGETS.get(r["name"], TARGETS.get(r["kind"]))
        speedup = r["loops"] / r["ours"]
        loops_target = not r["name"].endswith(NO_LOOPS_TARGET)
        if target is not None:
            if (ratio is not None and ratio > target) or (loops_target and speedup < LOOPS_TARGET):
                missed.append(r["name"])
        print(
            f"| {r['name']} | {r['what']} | {fmt(r['ours'])} | {fmt(r.get('NCHW'))} "
            f"| {fmt(r.get('channels_last'))} | {fmt(r.get('scipy'))} "
            f"| {'-' if ratio is None else f'{ratio:.2f}x'} "
            f"| {'-' if target is None else f'<= {target:g}x'} "
            f"| {fmt(r['loops'])} | {speedup:,.0f}x |"
        )
    print("\nTargets missed: " + (", ".join(missed) if missed else "none"))


def report_scaling(table, threads):
    """Times per thread count; the share of PyTorch's speed-up from 1 to N that convcli keeps."""
    print("\nconv_forward by thread count (ms, convcli / best torch layout):\n")
    print("| workload | " + " | ".join(f"{n} threads" for n in threads) + " | speed-up kept |")
    print("|---|" + "---:|" * (len(threads) + 1))
    missed = []
    for name, by_n in table.items():
        cells = [f"{fmt(ours)} / {fmt(best)}" for ours, best in (by_n[n] for n in threads)]
        kept = []
        for n in threads[1:]:
            (ours_1, best_1), (ours_n, best_n) = by_n[threads[0]], by_n[n]
            if best_1 is None:
                continue
            share = (ours_1 / ours_n) / (best_1 / best_n)
            kept.append(f"{n}: {share:.0%}")
            if share < SCALING_TARGET:
                missed.append(f"{name} at {n} threads")
        print(f"| {name} | " + " | ".join(cells) + f" | {', '.join(kept) or '-'} |")
    print(
        f"\nScaling target (at least {SCALING_TARGET:.0%} of PyTorch's speed-up from"
        f" {threads[0]} thread): missed " + (", ".join(missed) if missed else "nowhere")
    )


def thread_counts(text):
    counts = sorted({int(n) for n in text.split(",") if n.strip()})
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(f"--threads takes counts >= 1 such as 1,2,4, got {text!r}")
    return counts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument(
        "--threads", type=thread_counts, default=sorted({1, usable_cores()}), metavar="1,2,..."
    )
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--only", help="comma list of workloads to run (W1, D1, pool, ...)")
    args = parser.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    threads = args.threads[-1]
    set_threads(threads)
    if torch is not None:
        torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    rows = []
    for name in CONV:
        if only is None or name in only:
            bench_conv(name, rng, args.repeat, rows)
    for name in DEPTHWISE:
        if only is None or name in only:
            bench_depthwise(name, rng, args.repeat, rows)
    if only is None or "pool" in only:
        for f, stride in ((2, 2), (3, 1)):
            for mode in ("max", "average"):
                bench_pool(f, stride, mode, rng, args.repeat, rows)
    report(rows, threads)
    if not args.skip_scaling and len(args.threads) > 1:
        report_scaling(bench_scaling(args.threads, max(3, args.repeat // 2)), args.threads)
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
