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
- **Separable taps.** A kernel that is a column times a row of small
  integers (times one power of two), the same in every channel, such as
  ``1 0 -1`` columns and Sobel, runs at stride 1 as a vertical pass of the
  column's taps along whole staged rows, then a horizontal pass of the
  row's taps, where that takes fewer passes (:func:`separable_taps`): the
  ``vertical`` kernel in 3 passes instead of 6. With integer samples every
  sum is exact in either order, so the results are the 2-D taps' bit for
  bit; otherwise they agree within float32 rounding. Rows whose values are
  not finite (a vertical sum can overflow where the 2-D sum does not) are
  taken from the 2-D taps.
- Kernels are accumulated kernel-major, one (rows, n_W * C) block each, and
  written to the output's ``k * C + c`` channels with the bias added.

:func:`taps_are_cheaper` tells the layers when this engine beats the matmul
engine (``correlate``), whose cost does not depend on the weights.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from . import tiles
from .correlate import _finite
from .separable import rank_one_factors
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
    _correlate_tiles(A, W, Z, bias, taps, stride=s, pad=pad, dilation=d, dtype=dtype, finite=finite)
    return Z


def _correlate_tiles(A, W, Z, bias, taps, *, stride, pad, dilation, dtype, finite) -> None:
    """:func:`correlate_depthwise`'s output `Z` filled tile of rows by tile, the threads
    sharing the tiles: the `taps` (di, dj) of W laid over A, and the `bias` (n_K, C)."""
    m, _, W_in, C = A.shape
    f_h, f_w, _, n_K = W.shape
    _, n_H, n_W, _ = Z.shape
    s, d = stride, dilation
    span_h, span_w = covered(f_h, 1, d), covered(f_w, 1, d)
    row_len = n_W * C
    kernel_taps = _KernelTaps(
        W.astype(dtype, copy=False),
        taps,
        n_W,
        s,
        d,
        separable_taps(W, dtype) if finite and s == 1 else None,
    )
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
        staged = _tile_rows(
            A[i0:i1],
            scratch,
            h0 * s - pad,
            covered(rows, span_h, s),
            width,
            pad,
            cols,
            in_place=in_place,
        )
        if n_K == 1:
            acc = Z[i0:i1, h0:h1].reshape(1, k, rows, row_len)
        else:
            acc = scratch.take("acc", (n_K, k, rows, row_len))
        kernel_taps.correlate(acc, staged, scratch)
        out = Z[i0:i1, h0:h1].reshape(k, rows, n_W, n_K, C)
        if n_K == 1:
            np.add(out, bias, out=out)
        else:
            np.add(acc.reshape(n_K, k, rows, n_W, C).transpose(1, 2, 3, 0, 4), bias, out=out)

    run_tiles(row_tiles, work, lambda: Scratch(dtype), cost=cost)


class _KernelTaps:
    """The taps of W (f_h, f_w, C, n_K) that a row tile adds, 2-D or separable.

    `taps` are the (di, dj) added (zero weights left out where the input is
    finite), `s` and `d` the stride and dilation, `factors` the kernels'
    separable taps (:func:`separable_taps`) or None.
    """

    def __init__(self, W, taps, n_W, s, d, factors):
        Wk = W.transpose(0, 1, 3, 2)  # (f_h, f_w, n_K, C)
        self.taps, self.n_W, self.s, self.d, self.factors = taps, n_W, s, d, factors
        self.units = _unit_signs(W)  # (f_h, f_w, n_K)
        # Each tap's weights along a whole output row: (taps, n_K, n_W * C).
        self.rows_w = np.stack([np.tile(Wk[di, dj], (1, n_W)) for di, dj in taps])

    def correlate(self, acc, staged, scratch):
        """``acc`` (n_K, k, rows, n_W * C) from the tile's `staged` rows: by the separable
        passes, their rows that are not finite by the 2-D taps; else by the 2-D taps."""
        if self.factors is None:
            self.add_2d(acc, staged, scratch)
            return
        _separable_pass(acc, staged, scratch, self.factors, self.d, self.n_W)
        if not _finite(acc):
            bad = ~np.isfinite(acc).all(axis=-1)
            other = scratch.take("other", acc.shape)
            self.add_2d(other, staged, scratch)
            acc[bad] = other[bad]

    def add_2d(self, acc, staged, scratch):
        """``acc`` by each tap's product and sum, in the order of :attr:`taps`."""
        _, k, rows, row_len = acc.shape
        product = scratch.take("product", (k, rows, row_len))
        for t, (di, dj) in enumerate(self.taps):
            window = _tap_inputs(staged, scratch, self.d * di, self.d * dj, self.s, rows, self.n_W)
            _add_tap(acc, window, self.units[di, dj], self.rows_w[t], product, first=t == 0)


def _tile_rows(A, scratch, y0, n_in, width, pad, cols, *, in_place):
    """The padded rows ``y0 .. y0 + n_in`` of a row tile's images `A` (k, H, W, C).

    `A`'s own rows where there is nothing to pad (`in_place`: stride 1, no
    padding, a contiguous input), which saves a pass; else a copy staged in
    `scratch` with its zero padding (:func:`_stage_rows`).
    """
    if in_place:
        return A[:, y0 : y0 + n_in]
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
            elif unit == -1:  # in acc's type: integer inputs would wrap
                np.negative(window, out=acc[kk], dtype=acc.dtype)
            else:
                np.multiply(window, tap_weights[kk], out=acc[kk])
        elif unit == 1:
            np.add(acc[kk], window, out=acc[kk])
        elif unit == -1:
            np.subtract(acc[kk], window, out=acc[kk])
        else:
            np.multiply(window, tap_weights[kk], out=product)
            np.add(acc[kk], product, out=acc[kk])


def separable_taps(W, dtype) -> tuple | None:
    """Each kernel's column and row taps, where the two 1-D passes are cheaper; else None.

    Returns, per kernel of W (f_h, f_w, C, n_K), ``(column, row)``: the
    ``(offset, weight)`` of the nonzero weights of a column and a row whose
    outer product is the kernel in every channel exactly (in `dtype`). All
    weights must be small integers times one power of two, so that with
    integer samples every sum is exact in any order; and the passes
    (:func:`tap_passes`' measure) fewer than the 2-D taps'.

    >>> W = np.array([[1, 0, -1]] * 3, np.float32)[:, :, None, None]
    >>> separable_taps(W, np.float32)
    ((((0, 1.0), (1, 1.0), (2, 1.0)), ((0, 1.0), (2, -1.0))),)
    """
    W = np.asarray(W)
    return _separable_taps(W.tobytes(), W.shape, W.dtype.str, np.dtype(dtype).str)


@lru_cache(maxsize=16)
def _separable_taps(data: bytes, shape, w_dtype: str, dtype: str) -> tuple | None:
    """:func:`separable_taps` of W given by its bytes, shape and dtype (an SVD each: the
    layers ask for a kernel's taps several times)."""
    W = np.frombuffer(data, w_dtype).reshape(shape).astype(dtype)
    f_h, f_w, _, n_K = W.shape
    if min(f_h, f_w) < 2:
        return None
    found = []
    for k in range(n_K):
        K = W[:, :, 0, k]
        factors = rank_one_factors(K) if np.all(W[:, :, :, k] == K[:, :, None]) else None
        if factors is None:
            return None
        u, v = (np.asarray(f, dtype) for f in factors)
        if not (np.array_equal(np.outer(u, v), K) and all(map(_dyadic, (u, v, K)))):
            return None
        found.append(tuple(tuple((int(i), float(f[i])) for i in np.flatnonzero(f)) for f in (u, v)))
    return tuple(found) if _separable_passes(found) < _passes_2d(W) else None


def _separable_passes(factors) -> int:
    """Staging and bias (2), and each kernel's column and row passes."""
    return 2 + sum(_passes(column) + _passes(row) for column, row in factors)


def _passes(taps) -> int:
    """Passes of one 1-D pass: one per unit weight, two per other weight, one fewer where
    the first two are units (added in one pass)."""
    units = [abs(w) == 1 for _, w in taps]
    return sum(1 if unit else 2 for unit in units) - (len(units) > 1 and all(units[:2]))


def _dyadic(weights, largest: int = 1 << 12) -> bool:
    """Whether the weights are integers up to `largest` times one power of two (2**-16 to 1)."""
    w = np.abs(np.asarray(weights, np.float64))
    return any(
        np.all(w * 2.0**e == np.round(w * 2.0**e)) and np.max(w) * 2.0**e <= largest
        for e in range(17)
    )


def _separable_pass(acc, staged, scratch, factors, d, n_W):
    """``acc`` (n_K, k, rows, n_W * C) from `staged` (k, rows + span - 1, width, C) by the
    kernels' column taps along whole staged rows, then their row taps (`d` apart)."""
    _, k, rows, row_len = acc.shape
    width, C = staged.shape[2], staged.shape[3]
    vertical = scratch.take("vertical", (k, rows, width * C))
    product = scratch.take("product", (k, rows, width * C))
    flat = staged.reshape(k, staged.shape[1], width * C)
    for kk, (column, row) in enumerate(factors):
        _weighted_sum(vertical, [(flat[:, d * i : d * i + rows], w) for i, w in column], product)
        _weighted_sum(
            acc[kk],
            [(vertical[:, :, d * j * C : d * j * C + row_len], w) for j, w in row],
            product[:, :, :row_len],
        )


def _weighted_sum(out, terms, product) -> None:
    """``out = sum of w * x`` over `terms` ``(x, w)``, in order, in out's type (integer
    inputs do not wrap); the first two in one pass where both weights are 1 or -1."""
    (x0, w0), rest = terms[0], terms[1:]
    dtype = out.dtype
    if rest and abs(w0) == 1 and abs(rest[0][1]) == 1 and (w0, rest[0][1]) != (-1, -1):
        x1, w1 = rest[0]
        if w0 == 1:
            (np.add if w1 == 1 else np.subtract)(x0, x1, out=out, dtype=dtype)
        else:
            np.subtract(x1, x0, out=out, dtype=dtype)
        rest = rest[1:]
    elif w0 == 1:
        out[...] = x0
    elif w0 == -1:
        np.negative(x0, out=out, dtype=dtype)
    else:
        np.multiply(x0, dtype.type(w0), out=out, dtype=dtype)
    for x, w in rest:
        if abs(w) == 1:
            (np.add if w == 1 else np.subtract)(out, x, out=out, dtype=dtype)
        else:
            np.multiply(x, dtype.type(w), out=product, dtype=dtype)
            np.add(out, product, out=out)


def _unit_signs(W) -> np.ndarray:
    """(f_h, f_w, n_K): 1 or -1 where a tap's weight is that number in every channel, else 0.

    Such a tap adds (subtracts) its inputs instead of multiplying them.
    """
    return np.all(W == 1, axis=2).astype(np.int8) - np.all(W == -1, axis=2).astype(np.int8)


def tap_passes(W) -> int:
    """This engine's cost on W (f_h, f_w, C, n_K), in passes over the output.

    Staging and bias (2), and for each kernel, one per unit tap and two per
    other non-zero tap; or, where fewer, those of its separable taps
    (:func:`separable_taps`, float32).
    """
    factors = separable_taps(W, np.float32)
    if factors is not None:
        return _separable_passes(factors)
    return _passes_2d(W)


def _passes_2d(W) -> int:
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
