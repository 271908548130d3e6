"""The depthwise correlation engine behind depthwise_conv_forward (numpy only).

Each input channel is correlated with its own kernels, so there is no sum
over channels for a matmul to do: the work is one multiply and one add per
kernel tap. To run them at numpy's full speed:

- **Row tiles** of about 1 MB of output per kernel, staged with their
  zero padding in a reused buffer, so that each tap's multiply and add
  read and write memory that is in cache (the whole-image version made 9
  passes through temporaries of the picture's size).
- **Whole rows.** A tap's inputs for a row of outputs are, at stride 1, one
  contiguous run of ``n_W * C`` values; the tap's per-channel weights are
  laid out along a whole row once, so every multiply runs along rows.
  Larger strides copy the tap's pixels into a contiguous row first.
- **Zero taps skipped.** A tap whose weights are all zero adds nothing,
  unless an input is NaN or infinite (``0 * inf`` is NaN): such taps are
  skipped when the input is finite (edge kernels such as ``1 0 -1`` have a
  third of their taps zero).
- **Unit taps.** A tap whose weight is 1 (or -1) in every channel adds
  (subtracts) its inputs in one pass instead of a multiply and an add, with
  the same values: edge kernels such as ``1 0 -1`` are all unit taps.
- Kernels are accumulated kernel-major, one (rows, n_W * C) block each, and
  written to the output's ``k * C + c`` channels with the bias added.

:func:`taps_are_cheaper` tells the layers when this engine beats the matmul
engine (``correlate``), whose cost does not depend on the weights.
"""

from __future__ import annotations

import numpy as np

from . import tiles
from .correlate import _finite
from .tiles import RowTiles, Scratch, ceil_div, covered, run_tiles, window_count

# Output values per kernel in one row tile (1 MB in float32). Smaller tiles
# kept the accumulator in the L2 cache but cost more Python calls than they
# saved: a 1800x2400 channel took 9.4 ms with 256 kB tiles, 8.5 ms with these
# (5.5 ms on 2 threads, where 256 kB tiles did not gain).
TILE_VALUES = 1 << 18


def correlate_depthwise(A, W, stride, pad, dtype, bias, *, dilation=1):
    """Depthwise cross-correlation of A (m, H, W, C) with W (f_h, f_w, C, n_K).

    Returns Z (m, n_H, n_W, n_K * C) in `dtype`, kernel-major:
    ``Z[..., k * C + c] = sum over taps of A_pad[..., c] * W[di, dj, c, k] + bias[k * C + c]``,
    with A zero-padded by `pad` on every side and the kernel's taps `dilation`
    values apart. The taps are added in the order (di, dj) as in a loop over
    them, starting from the first one.
    """
    m, H, W_in, C = A.shape
    f_h, f_w, _, n_K = W.shape
    s, d = stride, dilation
    span_h, span_w = covered(f_h, 1, d), covered(f_w, 1, d)
    n_H = window_count(H + 2 * pad, span_h, s)
    n_W = window_count(W_in + 2 * pad, span_w, s)
    Z = np.empty((m, n_H, n_W, n_K * C), dtype)
    bias = np.asarray(bias, dtype).reshape(n_K, C)
    finite = A.size == 0 or _finite(A)
    Wk = W.astype(dtype, copy=False).transpose(0, 1, 3, 2)  # (f_h, f_w, n_K, C)
    taps = [
        (di, dj) for di in range(f_h) for dj in range(f_w) if not finite or np.any(Wk[di, dj] != 0)
    ]
    if Z.size == 0 or not taps:  # no values, or every weight zero: the bias alone
        Z[...] = bias.reshape(-1)
        return Z
    row_len = n_W * C
    units = _unit_signs(W.astype(dtype, copy=False))  # (f_h, f_w, n_K)
    # Each tap's weights along a whole output row: (taps, n_K, n_W * C).
    rows_w = np.stack([np.tile(Wk[di, dj], (1, n_W)) for di, dj in taps])
    width = covered(n_W, span_w, s)  # padded columns any window reads
    cols = max(0, min(W_in, width - pad))  # image columns staged
    # Small inputs are cut into a few tiles per thread: the threads share the
    # work, and the scratch buffers stay a fraction of the input.
    cost = Z.size * (2 + 2 * len(taps))  # passes over the output
    threads = tiles.thread_count(m * n_H, cost)
    rows_fit = min(TILE_VALUES // max(1, n_K * row_len), ceil_div(m * n_H, 4 * threads))
    row_tiles = RowTiles(m, n_H, max(1, rows_fit))
    in_place = pad == 0 and s == 1 and width == W_in and A.flags.c_contiguous  # see _tile_rows

    def work(scratch, tile):
        i0, i1, h0, h1 = tile
        k, rows = i1 - i0, h1 - h0
        staged = _tile_rows(A[i0:i1], scratch, h0 * s - pad, covered(rows, span_h, s), width,
                            pad, cols, in_place=in_place)
        if n_K == 1:
            acc = Z[i0:i1, h0:h1].reshape(1, k, rows, row_len)
        else:
            acc = scratch.take("acc", (n_K, k, rows, row_len))
        product = scratch.take("product", (k, rows, row_len))
        for t, (di, dj) in enumerate(taps):
            window = _tap_inputs(staged, scratch, d * di, d * dj, s, rows, n_W)
            _add_tap(acc, window, units[di, dj], rows_w[t], product, first=t == 0)
        out = Z[i0:i1, h0:h1].reshape(k, rows, n_W, n_K, C)
        if n_K == 1:
            np.add(out, bias, out=out)
        else:
            np.add(acc.reshape(n_K, k, rows, n_W, C).transpose(1, 2, 3, 0, 4), bias, out=out)

    run_tiles(row_tiles, work, lambda: Scratch(dtype), cost=cost)
    return Z


def _tile_rows(A, scratch, y0, n_in, width, pad, cols, *, in_place):
    """The padded rows ``y0 .. y0 + n_in`` of a row tile's images `A` (k, H, W, C).

    `A`'s own rows where there is nothing to pad (`in_place`: stride 1, no
    padding, a contiguous input), which saves a pass; else a copy staged in
    `scratch` with its zero padding (:func:`_stage_rows`).
    """
    if in_place:
        return A[:, y0:y0 + n_in]
    staged = scratch.take("staged", (len(A), n_in, width, A.shape[3]))
    _stage_rows(staged, A, y0, pad, cols)
    return staged


def _stage_rows(staged, A, y0, pad, cols):
    """Copy the image rows a row tile reads into `staged`, with their zero padding.

    `staged` (k, n_in, width, C) gets padded rows ``y0 .. y0 + n_in`` of the
    tile's images `A` (k, H, W, C): row r is image row ``y0 + r`` (zeros
    above and below the image), `pad` zero columns, the first `cols` image
    columns, then zeros.
    """
    n_in, H = staged.shape[1], A.shape[1]
    lo, hi = max(0, -y0), min(n_in, H - y0)
    staged[:, :lo] = 0
    staged[:, max(lo, hi) :] = 0
    if hi > lo:
        staged[:, lo:hi, :pad] = 0
        staged[:, lo:hi, pad + cols :] = 0
        staged[:, lo:hi, pad : pad + cols] = A[:, y0 + lo : y0 + hi, :cols]


def _tap_inputs(staged, scratch, di, dj, s, rows, n_W):
    """The inputs of the tap at offset (di, dj) of the window, for `rows` rows of outputs.

    A (k, rows, n_W * C) view of `staged` at stride 1; at larger strides the
    tap's pixels are copied into a contiguous scratch buffer first.
    """
    k, _, width, C = staged.shape
    window = staged[:, di : di + s * (rows - 1) + 1 : s]
    if s == 1:
        return window.reshape(k, rows, width * C)[:, :, dj * C : dj * C + n_W * C]
    pixels = scratch.take("pixels", (k, rows, n_W, C))
    pixels[...] = window[:, :, dj : dj + s * (n_W - 1) + 1 : s]
    return pixels.reshape(k, rows, n_W * C)


def _add_tap(acc, window, tap_units, tap_weights, product, *, first):
    """Add one tap's contribution to each kernel's accumulator in `acc` (n_K, k, rows, n_W * C).

    `tap_units` (n_K) says where the tap's weights are all 1 or all -1: its
    inputs `window` are then added or subtracted; otherwise they are
    multiplied by `tap_weights` (n_K, n_W * C) in `product` and added. The
    `first` tap sets the accumulators instead.
    """
    for kk, unit in enumerate(tap_units):
        if first:
            if unit == 1:
                acc[kk] = window
            elif unit == -1:
                np.negative(window, out=acc[kk])
            else:
                np.multiply(window, tap_weights[kk], out=acc[kk])
        elif unit == 1:
            np.add(acc[kk], window, out=acc[kk])
        elif unit == -1:
            np.subtract(acc[kk], window, out=acc[kk])
        else:
            np.multiply(window, tap_weights[kk], out=product)
            np.add(acc[kk], product, out=acc[kk])


def _unit_signs(W) -> np.ndarray:
    """(f_h, f_w, n_K): 1 or -1 where a tap's weight is that number in every channel, else 0.

    Such a tap adds (subtracts) its inputs instead of multiplying them.
    """
    return (np.all(W == 1, axis=2).astype(np.int8) - np.all(W == -1, axis=2).astype(np.int8))


def tap_passes(W) -> int:
    """This engine's cost on W (f_h, f_w, C, n_K), in passes over the output.

    Staging and bias (2), and for each kernel, one per unit tap and two per
    other non-zero tap.
    """
    non_zero = int(np.count_nonzero(np.any(W != 0, axis=2)))
    return 2 + 2 * non_zero - int(np.count_nonzero(_unit_signs(W)))


def matmul_passes(W) -> int:
    """The matmul engine's cost on W (f_h, f_w, C, n_K), in the same passes: ``f_h * f_w + 2``.

    It grows with the kernel's size but not with its weights; on one
    1800x2400 channel that matched it (3x3: ``1 0 -1`` edge kernels 9.5 ms in
    the tap engine against 12.6, a 3x3 blur 20.6 ms against 13.2; 5x5
    Laplacian of Gaussian 20.1 against 20.5).
    """
    f_h, f_w, _, n_K = W.shape
    return n_K * (f_h * f_w + 2)


def taps_are_cheaper(W) -> bool:
    """Whether this engine is expected to beat the matmul engine on W (f_h, f_w, C, n_K)."""
    return tap_passes(W) <= matmul_passes(W)
