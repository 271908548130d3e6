"""The pooling engine: max and average windows over row tiles, forward and backward (numpy only).

The layers in ``convcli.layers.pooling`` validate their arguments and call
``pool_forward_tiles`` and ``pool_backward_tiles``. Every step here runs
along whole contiguous rows where it can:

- **Forward.** Window maxima and sums are separable: reduce along the
  height, then along the width at stride 1, then keep every stride-th
  column, copying whole pixels. Row tiles keep the intermediate rows in
  cache, in scratch buffers reused from tile to tile.
- **Backward.** The columns of a tile are split by phase (column index mod
  stride), so that the pixels under one window offset are rows of
  contiguous runs. Max mode claims each window for the first offset holding
  its maximum (PyTorch's tie rule). When the windows tile the input
  (f == stride), max mode skips the phases and works on whole rows (see
  ``_claims_tiled``); pool_forward then finds the claims once, and the
  backward pass only spreads dA over them (``_spread_tiled``).
"""

from __future__ import annotations

import numpy as np

from . import native
from .tiles import RowTiles, Scratch, ceil_div, covered, run_tiles, window_count, window_slice

# Values per row tile: a tile's input, scratch and results stay in L2 cache.
TILE_VALUES = 1 << 18


def pool_forward_tiles(X, f, stride, mode):
    """Max or average of every f x f window of X (m, H, W, n_C), moved by `stride`.

    X is in the dtype to compute in; `mode` is "max", "average" or "sum"
    (the window sums). Returns the (m, n_H, n_W, n_C) result, a new array.
    """
    m, H, W, n_C = X.shape
    n_H, n_W = window_count(H, f, stride), window_count(W, f, stride)
    out = np.empty((m, n_H, n_W, n_C), X.dtype)
    reduce = np.maximum if mode == "max" else np.add

    def work(scratch, tile):
        i0, i1, h0, h1 = tile
        rows = X[i0:i1, _input_rows(h0, h1, f, stride)]
        _reduce_windows(rows, f, stride, out[i0:i1, h0:h1], scratch, reduce)

    if out.size:
        tiles = RowTiles(m, n_H, _tile_rows_fit(X, f, stride))
        run_tiles(tiles, work, lambda: Scratch(X.dtype), cost=2 * X.size)
    if mode == "average":
        out /= X.dtype.type(f * f)
    return out


def pool_max_claims_tiles(X, f):
    """Max pooling with its claims, when f x f windows tile X (m, H, W, n_C) with stride f > 1.

    Returns the window maxima (m, n_H, n_W, n_C), as pool_forward_tiles, and
    a boolean (m, f * n_H, f * n_W, n_C) array over the rows and columns that
    windows cover: True at the first maximum of every window (the first NaN
    where there is one). pool_backward_tiles then only spreads dA over them.
    """
    m, H, W, n_C = X.shape
    n_H, n_W = H // f, W // f
    out = np.empty((m, n_H, n_W, n_C), X.dtype)
    claimed = np.empty((m, f * n_H, f * n_W, n_C), bool)

    def work(scratch, tile):
        i0, i1, h0, h1 = tile
        rows = slice(f * h0, f * h1)
        maxima = _claims_tiled(X[i0:i1, rows], f, claimed[i0:i1, rows], scratch)
        _copy_channels(out[i0:i1, h0:h1], maxima)

    if claimed.size:
        run_tiles(
            RowTiles(m, n_H, _tile_rows_fit(X, f, f)),
            work,
            lambda: Scratch(X.dtype),
            cost=6 * X.size,
        )
    return out, claimed


def pool_backward_tiles(dA, A, f, stride, mode, claimed=None):
    """Gradient of pool_forward_tiles with respect to its input A (m, H, W, n_C).

    dA (m, n_H, n_W, n_C) is in the dtype to compute in, which the result
    has. Each window sends its ``dA`` value to its first maximum (max mode),
    an equal share to every position (average mode) or all of it to every
    position (sum mode); positions no window covers get zero.
    """
    dtype = dA.dtype
    m, n_H, n_W, n_C = dA.shape
    if stride == f > 1 and dA.size:
        # The windows tile the covered rows and columns, which the tiles
        # write in full: only the uncovered margins need zeros.
        dA_prev = np.empty(A.shape, dtype)
        dA_prev[:, covered(n_H, f, stride) :] = 0
        dA_prev[:, :, covered(n_W, f, stride) :] = 0
    else:
        dA_prev = np.zeros(A.shape, dtype)
    if dA_prev.size == 0:
        return dA_prev
    if claimed is not None:
        X = A  # not read
    else:
        X = np.ascontiguousarray(A, dtype=dtype) if mode == "max" else A

    native_spread = _spreads_natively(dA, claimed, dA_prev, f, stride, mode)

    def work(scratch, tile):
        i0, i1, h0, h1 = tile
        rows = _input_rows(h0, h1, f, stride)
        if native_spread:  # the claims the forward pass kept, spread in one pass
            native.spread_claims(dA, claimed, dA_prev, f, tile)
            return
        if mode == "max" and stride == f > 1:
            if claimed is None:
                tile_claims = scratch.take("claims", X[i0:i1, rows, : f * n_W].shape, bool)
                _claims_tiled(X[i0:i1, rows], f, tile_claims, scratch)
            else:
                tile_claims = claimed[i0:i1, rows]
            _spread_tiled(dA[i0:i1, h0:h1], tile_claims, dA_prev[i0:i1, rows], scratch)
            return
        target = _Gradient(dA_prev[i0:i1, rows], f, stride, n_H=h1 - h0, n_W=n_W, scratch=scratch)
        if mode == "max":
            _max_tile(X[i0:i1, rows], dA[i0:i1, h0:h1], target, scratch)
        else:
            _average_tile(dA[i0:i1, h0:h1], target, scratch, f * f if mode == "average" else 1)
        target.finish()

    # Tiles of windows that overlap share input rows. With stride 1 each
    # tile adds its gradient straight into dA_prev, and only neighbouring
    # tiles overlap; other overlapping strides run as one tile.
    rows_fit = _tile_rows_fit(X, f, stride) if stride == 1 or stride >= f else n_H
    tiles = RowTiles(m, n_H, rows_fit)
    run_tiles(
        tiles, work, lambda: Scratch(dtype), neighbours_overlap=f > stride, cost=4 * dA_prev.size
    )
    return dA_prev


def _spreads_natively(dA, claimed, dA_prev, f, stride, mode) -> bool:
    """Whether max pooling's backward pass spreads the kept claims by the native engine."""
    return (
        mode == "max"
        and stride == f > 1
        and claimed is not None
        and native.spread_takes(dA, claimed, dA_prev)
    )


def _input_rows(h0, h1, f, stride):
    """The input rows that the windows of output rows h0 .. h1 - 1 read."""
    return slice(stride * h0, stride * h0 + covered(h1 - h0, f, stride))


def _tile_rows_fit(X, f, stride):
    """Output rows per tile: at least f, so that only neighbouring tiles share input rows."""
    return max(f, TILE_VALUES // max(1, stride * X.shape[2] * X.shape[3]))


def _pixels(X):
    """View each pixel's n_C values as one record: copies then move whole pixels.

    numpy copies a strided run of 3 floats value by value; as one 12-byte
    record it moves about twice as fast.
    """
    return X.view(np.dtype((np.void, X.shape[-1] * X.itemsize)))[..., 0]


def _reduce_windows(X, f, stride, out, scratch, reduce):
    """Reduce every f x f window of the tile X into `out` with the binary ufunc `reduce`.

    Separable: first along the height, every op running along whole
    contiguous rows; then along the width at stride 1 (contiguous again),
    keeping every stride-th result.
    """
    k, n_H, n_W, n_C = out.shape
    if f == 1:
        out[...] = X[:, window_slice(0, n_H, stride), window_slice(0, n_W, stride)]
        return
    rows = scratch.take("rows", (k, n_H, X.shape[2], n_C))
    reduce(X[:, window_slice(0, n_H, stride)], X[:, window_slice(1, n_H, stride)], out=rows)
    for d in range(2, f):
        reduce(rows, X[:, window_slice(d, n_H, stride)], out=rows)
    width = covered(n_W, 1, stride)  # window starts 0 .. width - 1
    full = out if stride == 1 else scratch.take("full", (k, n_H, width, n_C))
    reduce(rows[:, :, :width], rows[:, :, 1 : width + 1], out=full)
    for d in range(2, f):
        reduce(full, rows[:, :, d : d + width], out=full)
    if stride > 1:
        _pixels(out)[...] = _pixels(full)[:, :, ::stride]


# The backward passes work on columns split by phase (column index mod
# stride): there, the pixels under window offset (di, dj) of all windows are
# rows of contiguous runs, so every op runs along rows.


def _split_columns(X, stride, n_cols, out):
    """Phase p of `out` holds columns p, p + stride, ... of X[:, :, :n_cols]."""
    for p in range(len(out)):
        cols = _pixels(X[:, :, p:n_cols:stride])
        _pixels(out[p])[:, :, : cols.shape[2]] = cols


def _region(P, di, dj, stride, n_H, n_W):
    """In column phases P, the pixels under window offset (di, dj) of every window."""
    return P[dj % stride][:, window_slice(di, n_H, stride), dj // stride :][:, :, :n_W]


class _Gradient:
    """Where a tile's windows send their gradient: ``add(di, dj, values)``.

    With stride 1, straight into dA_prev; when windows do not overlap
    (stride >= f), each position gets one value, copied into place as whole
    pixels; otherwise into column phases, merged back by ``finish()``.
    """

    def __init__(self, dA_prev, f, stride, *, n_H, n_W, scratch):
        self.dA_prev, self.f, self.stride, self.n_H, self.n_W = dA_prev, f, stride, n_H, n_W
        self.phases = None
        if 1 < stride < f:
            k, n_rows, _, n_C = dA_prev.shape
            n_cols = ceil_div(covered(n_W, f, stride), stride)
            self.phases = scratch.take("grad", (stride, k, n_rows, n_cols, n_C))
            self.phases[...] = 0

    def add(self, di, dj, values):
        s, n_H, n_W = self.stride, self.n_H, self.n_W
        if self.phases is not None:
            _region(self.phases, di, dj, s, n_H, n_W)[...] += values
        elif s == 1:
            self.dA_prev[:, di : di + n_H, dj : dj + n_W] += values
        else:
            dst = self.dA_prev[:, window_slice(di, n_H, s), window_slice(dj, n_W, s)]
            _pixels(dst)[...] = _pixels(values)

    def finish(self):
        if self.phases is not None:
            s = self.stride
            out = self.dA_prev[:, :, : covered(self.n_W, self.f, s)]
            for p in range(s):
                dst = _pixels(out[:, :, p::s])
                dst[...] = _pixels(self.phases[p])[:, :, : dst.shape[2]]


def _average_tile(dA, target, scratch, divisor):
    """Send ``dA[i, h, w] / divisor`` to every position of window (h, w)."""
    f = target.f
    share = scratch.take("share", dA.shape)
    np.divide(dA, share.dtype.type(divisor), out=share)
    for di in range(f):
        for dj in range(f):
            target.add(di, dj, share)


def _max_tile(X, dA, target, scratch):
    """Send ``dA[i, h, w]`` to the first maximum of window (h, w).

    Window offsets are visited in row-major order; each window is claimed
    by the first offset whose value equals its maximum (or is NaN when the
    maximum is NaN). Like the tutorial's ``mask * dA``, the other positions
    of the window get ``0 * dA``.
    """
    f, s, n_H, n_W = target.f, target.stride, target.n_H, target.n_W
    maxima = scratch.take("maxima", dA.shape)
    if s == 1:
        P = X[None]
        _reduce_windows(X, f, s, maxima, scratch, np.maximum)
    else:
        P = scratch.take("phases", (min(f, s),) + X.shape[:2] + (n_W + (f - 1) // s,) + X.shape[3:])
        _split_columns(X, s, covered(n_W, f, s), P)
        if s >= f:  # windows do not overlap: reduce the f*f offsets directly
            maxima[...] = _region(P, 0, 0, s, n_H, n_W)
            for d in range(1, f * f):
                np.maximum(maxima, _region(P, d // f, d % f, s, n_H, n_W), out=maxima)
        else:
            _reduce_windows(X, f, s, maxima, scratch, np.maximum)
    nan_maxima = np.isnan(maxima) if np.isnan(np.max(maxima)) else None
    unclaimed = scratch.take("unclaimed", dA.shape, bool)
    unclaimed[...] = True
    hit = scratch.take("hit", dA.shape, bool)
    share = scratch.take("share", dA.shape)
    for di in range(f):
        for dj in range(f):
            window = _region(P, di, dj, s, n_H, n_W)
            np.equal(window, maxima, out=hit)
            if nan_maxima is not None:
                hit |= np.isnan(window) & nan_maxima
            hit &= unclaimed
            unclaimed ^= hit
            target.add(di, dj, np.multiply(dA, hit, out=share))


def _copy_channels(dst, src):
    """``dst[...] = src`` for (..., n_C) views; channel by channel when n_C is small.

    numpy runs a strided copy along the last axis: with 3 channels that is
    a loop of 3 values per pixel, while one channel at a time runs along
    the whole row.
    """
    if dst.shape[-1] >= 16:
        dst[...] = src
    else:
        for c in range(dst.shape[-1]):
            dst[..., c] = src[..., c]


def _phase_masks(scratch, f, n_C, size):
    """Masks over `size` flat values of rows of whole windows (f pixels of n_C values each).

    ``after[d]``: the pixel is at least d pixels into its window;
    ``before[d]``: it is at least d pixels before its window's end.
    """
    key = ("phase masks", f, n_C)
    masks = scratch.buffers.get(key)
    if masks is None or masks[0] < size:
        phase = (np.arange(size) // n_C) % f
        after = [None] + [phase >= d for d in range(1, f)]
        before = [None] + [phase < f - d for d in range(1, f)]
        masks = scratch.buffers[key] = (size, after, before)
    return [m if m is None else m[:size] for m in masks[1]], [
        m if m is None else m[:size] for m in masks[2]
    ]


def _claims_tiled(X, f, claimed, scratch):
    """Max-pool claims of a tile when windows tile the input (f == stride).

    X holds the tile's f * n_H input rows; `claimed` (the tile's rows, the
    f * n_W columns that windows cover) gets True at each window's first
    maximum. Each window row r of every window, for all windows at once, is
    a view of whole rows, n_W * f pixels long: ``X[:, r::f, :n_W * f]``.
    Every step runs along these rows as flat runs of values, with shifts by
    whole pixels (n_C values) and masks of the pixel's place in its window:

    - the maxima: rows reduced, then each window's first pixel gets the
      maximum of its f pixels (shifts), copied to the window's other pixels;
    - for window row r, ``E`` marks the values equal to their window's
      maximum (or NaN when it is NaN); a value is claimed if it is in E,
      no earlier pixel of its window row is, and no earlier window row was.

    Returns the window maxima, a (k, n_H, n_W, n_C) view of scratch memory.
    """
    k, H, W, n_C = X.shape
    n_H, n_W = H // f, W // f
    shape = (k, n_H, n_W * f * n_C)
    size, step = int(np.prod(shape)), n_C
    after, before = _phase_masks(scratch, f, n_C, size)
    maxima = _tiled_maxima(X, f, shape, scratch)
    nan_maxima = np.isnan(maxima) if np.isnan(np.max(maxima)) else None

    hit, earlier, seen, tmp = (
        scratch.take(name, (size,), bool) for name in ("hit", "earlier", "seen", "tmp")
    )
    for r in range(f):
        X_r = _window_row(X, r, f, shape)
        np.equal(X_r, maxima, out=hit.reshape(shape))
        if nan_maxima is not None:
            hit.reshape(shape)[...] |= np.isnan(X_r) & nan_maxima
        _mark_earlier_hits(hit, after, step, earlier, tmp)
        claimed_r = _window_row(claimed, r, f, shape)
        if r:
            np.greater(hit, earlier, out=tmp)  # hit and not earlier
            np.greater(tmp.reshape(shape), seen.reshape(shape), out=claimed_r)
        else:
            np.greater(hit.reshape(shape), earlier.reshape(shape), out=claimed_r)
        if r < f - 1:
            # seen |= every pixel of a window with a hit in this row
            if r:
                np.logical_or(seen, hit, out=seen)
            else:
                np.copyto(seen, hit)
            np.logical_or(seen, earlier, out=seen)
            for d in range(1, f):
                np.logical_and(hit[d * step :], before[d][: -d * step], out=tmp[: -d * step])
                np.logical_or(seen[: -d * step], tmp[: -d * step], out=seen[: -d * step])
    return maxima.reshape(k, n_H, n_W, f, n_C)[:, :, :, 0]


def _window_row(Y, r, f, shape):
    """Row r of every f x f window of Y (k, f * n_H, ..., n_C), as a view of `shape`.

    `shape` is (k, n_H, n_W * f * n_C): whole rows over the columns that
    windows cover, ``Y[:, r::f, :n_W * f]``.
    """
    covered_columns = shape[2] // Y.shape[3]
    return Y[:, r::f, :covered_columns].reshape(shape)


def _tiled_maxima(X, f, shape, scratch):
    """Each window's maximum at every pixel of its window rows: a scratch array of `shape`.

    For :func:`_claims_tiled`: the window rows are reduced first, then each
    window's first pixel gets the maximum of its f pixels (shifts by whole
    pixels, n_C values), copied to the window's other pixels.
    """
    k, n_H, _ = shape
    n_C = step = X.shape[3]
    n_W = X.shape[2] // f
    rows = scratch.take("rows", shape)
    np.maximum(_window_row(X, 0, f, shape), _window_row(X, 1, f, shape), out=rows)
    for r in range(2, f):
        np.maximum(rows, _window_row(X, r, f, shape), out=rows)
    maxima = scratch.take("maxima", shape)
    flat_rows, flat_max = rows.reshape(-1), maxima.reshape(-1)
    end = flat_rows.size - (f - 1) * step
    np.maximum(flat_rows[:end], flat_rows[step : end + step], out=flat_max[:end])
    for d in range(2, f):
        np.maximum(flat_max[:end], flat_rows[d * step : end + d * step], out=flat_max[:end])
    by_pixel = maxima.reshape(k, n_H, n_W, f, n_C)
    for p in range(1, f):
        _copy_channels(by_pixel[:, :, :, p], by_pixel[:, :, :, 0])
    return maxima


def _mark_earlier_hits(hit, after, step, earlier, tmp):
    """``earlier``: some earlier pixel of the same window row is a hit.

    `hit`, `earlier` and `tmp` are flat boolean runs of whole window rows,
    pixels `step` values long; ``after[d]`` marks the pixels at least d
    pixels into their window (:func:`_phase_masks`).
    """
    earlier[:step] = False
    np.logical_and(hit[:-step], after[1][step:], out=earlier[step:])
    for d in range(2, len(after)):
        np.logical_and(hit[: -d * step], after[d][d * step :], out=tmp[d * step :])
        np.logical_or(earlier[d * step :], tmp[d * step :], out=earlier[d * step :])


def _spread_tiled(dA, claimed, dA_prev, scratch):
    """``dA_prev = dA * claimed`` over a tile's windows, dA spread over each window's pixels.

    As in the tutorial's ``mask * dA``, the pixels not claimed get ``0 * dA``.
    """
    k, n_H, n_W, n_C = dA.shape
    f = claimed.shape[1] // n_H
    shape = (k, n_H, n_W * f * n_C)
    share = scratch.take("share", (k, n_H, n_W, f, n_C))
    for p in range(f):
        _copy_channels(share[:, :, :, p], dA)
    share = share.reshape(shape)
    for r in range(f):
        np.multiply(
            share,
            claimed[:, r::f, : n_W * f].reshape(shape),
            out=dA_prev[:, r::f, : n_W * f].reshape(shape),
        )
