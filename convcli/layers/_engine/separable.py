"""Rank-1 kernels as two 1-D passes: the separable engine behind both conv layers (numpy only).

A kernel ``K`` whose singular values say it is ``outer(u, v)`` (box, Gaussian,
Sobel, ``1 0 -1`` columns) correlates a one-channel image as a vertical pass
with ``u`` then a horizontal pass with ``v``: ``f_h + f_w`` multiply-adds an
output instead of ``f_h * f_w``. Each pass is a matmul that BLAS runs fast:

- **Vertical.** ``Bv`` neighbouring output rows read ``Bv + f_h - 1``
  consecutive input rows, one contiguous slab of the image: the slab, times a
  banded (Bv, Bv + f_h - 1) matrix, gives those rows whole. The slabs of a
  row tile are a strided view of the image (staged with their zero rows
  only at its top and bottom), and one batched matmul does them all.
- **Horizontal.** ``Bh`` neighbouring outputs of a row read ``Bh + f_w - 1``
  consecutive values of the vertical result: the columns of a block, for all
  rows of the tile, are a (rows, Bh + f_w - 1) view of it, times a banded
  (Bh + f_w - 1, Bh) matrix. Its outputs go straight into the result.

Each output is a sum of its window's products in the same order, whatever
row tile or block it falls in (the banded matrices add exact zeros), so a
row's value does not depend on the tiling. Rows whose results are not finite
(NaN or inf in the input meet the zeros: ``0 * inf`` is NaN) are reported to
the caller, which computes them by its plain path.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .correlate import _finite
from .tiles import RowTiles, Scratch, ceil_div, run_tiles

# The second singular value of a rank-1 kernel stored in float32 is at most
# about half float32's epsilon times the first: anything up to epsilon is rank 1.
RANK_ONE_TOLERANCE = float(np.finfo(np.float32).eps)
# Output rows of one vertical block and outputs of one horizontal block: with
# 8 and 16, BLAS ran the passes fastest on a 2400-wide photo (15x15 and 31x31).
BLOCK_ROWS = 8
BLOCK_COLUMNS = 16
# Values of a row tile's vertical result (2 MB): it stays in cache.
TILE_VALUES = 1 << 19
# Kernels of at most so many weights have their factors kept for the next call.
CACHED_KERNEL_WEIGHTS = 4096


def rank_one_factors(K) -> tuple[np.ndarray, np.ndarray] | None:
    """``(u, v)`` with ``K == outer(u, v)`` within float32 rounding, else None.

    The singular values of K decide (the second at most float32's epsilon
    times the first); the factors are K's column and row through its largest
    weight, the column divided by that weight (a box gives ``u`` all ones),
    and must give back every weight within that epsilon of the largest.
    Where the column scaled to a smallest weight of 1 gives float32 factors
    whose products are K's float32 weights exactly, those are returned.

    >>> u, v = rank_one_factors([[1, 2, 1], [2, 4, 2], [1, 2, 1]])
    >>> u.tolist(), v.tolist()
    ([1.0, 2.0, 1.0], [1.0, 2.0, 1.0])
    >>> rank_one_factors([[0, 1, 0], [1, -4, 1], [0, 1, 0]]) is None
    True
    """
    K = np.asarray(K, np.float64)
    if K.ndim != 2 or min(K.shape) < 2 or not np.all(np.isfinite(K)):
        return None
    if K.size > CACHED_KERNEL_WEIGHTS:
        return _factors(K)
    # A run asks for the same kernel's factors for each photo: the SVD and checks took
    # 0.1 to 0.5 ms of a photo's conv.
    factors = _cached_factors(K.shape, K.tobytes())
    return None if factors is None else (factors[0].copy(), factors[1].copy())


@lru_cache(maxsize=256)
def _cached_factors(shape: tuple[int, int], weights: bytes):
    """:func:`_factors` of the kernel of `shape` whose float64 bytes are `weights`."""
    return _factors(np.frombuffer(weights, np.float64).reshape(shape))


def _factors(K: np.ndarray):
    """:func:`rank_one_factors` of a finite float64 2-D kernel `K`."""
    top = float(np.max(np.abs(K)))
    if top == 0:
        return None
    s = np.linalg.svd(K, compute_uv=False)
    if s[1] > RANK_ONE_TOLERANCE * s[0]:
        return None
    i, j = np.unravel_index(np.argmax(np.abs(K)), K.shape)
    u, v = K[:, j] / K[i, j], K[i, :].copy()
    if np.max(np.abs(np.outer(u, v) - K)) > RANK_ONE_TOLERANCE * top:
        return None
    return _exact_scaling(K, u, v)


def _exact_scaling(K, u, v):
    """``(u * s, v / s)`` whose float32 products are K's float32 weights exactly, where one is.

    A binomial Gaussian's column ``1 4 6 4 1`` (its smallest weight 1) times
    its row over 256 multiplies integer levels without rounding, as the 2-D
    engines do; the largest weight 1 (``1/6 ... 1``) would round.
    """
    K32 = K.astype(np.float32)
    smallest = float(np.min(np.abs(u[u != 0])))
    for scale in (1 / smallest, 1.0):
        u32, v32 = (u * scale).astype(np.float32), (v / scale).astype(np.float32)
        if np.array_equal(np.outer(u32.astype(np.float64), v32), K32):
            return u32.astype(np.float64), v32.astype(np.float64)
    return u, v


def passes(f_h: int, f_w: int) -> float:
    """The separable engine's cost on one channel, in passes over the output.

    Comparable with :func:`convcli.layers._engine.depthwise.taps_are_cheaper`'s
    measure (the matmul engine: about ``f_h * f_w + 2``). Each pass costs
    its banded matrix's width, ``B + f - 1`` multiply-adds an output, which
    BLAS runs about four times as fast as a numpy pass, plus the tile's
    staging and copies. Fitted on one 1800x2400 channel, one thread.
    """
    return 4 + (BLOCK_ROWS + f_h - 1 + BLOCK_COLUMNS + f_w - 1) / 4


def tile_rows(n_W: int, f_w: int) -> int:
    """Output rows of a row tile for outputs `n_W` wide: a power of two, tiles start on multiples.

    BLAS's sums depend on the shapes of its matmuls and on where a value
    falls in them, so a row's value is the same in any band of rows that
    starts on a multiple of this and ends with a whole tile or the image
    (:mod:`convcli.app.strips` aligns its bands so,
    :func:`convcli.layers._engine.alignment.tile_rows`).

    >>> tile_rows(2400, 15), tile_rows(100, 3)
    (128, 4096)
    """
    row_len = ceil_div(n_W, BLOCK_COLUMNS) * BLOCK_COLUMNS + f_w - 1
    fit = max(1, TILE_VALUES // row_len)
    return 1 << (fit.bit_length() - 1)


def _banded_rows(u, block, dtype):
    """(block, block + f - 1): row j holds `u` from column j (the vertical pass)."""
    f = len(u)
    M = np.zeros((block, block + f - 1), dtype)
    for j in range(block):
        M[j, j : j + f] = u
    return M


class _Plan:
    """Geometry of the separable correlation of one-channel images (m, H, W)."""

    def __init__(self, shape, u, v, pads, dtype):
        m, H, W = shape
        top, bottom, left, right = pads
        self.shape, self.top, self.left = shape, top, left
        self.f_h, self.f_w = len(u), len(v)
        self.n_H = H + top + bottom - self.f_h + 1
        self.n_W = W + left + right - self.f_w + 1
        self.Mv = _banded_rows(np.asarray(u, dtype), BLOCK_ROWS, dtype)
        self.Mh = np.ascontiguousarray(_banded_rows(np.asarray(v, dtype), BLOCK_COLUMNS, dtype).T)
        self.nbw = ceil_div(self.n_W, BLOCK_COLUMNS)  # horizontal blocks
        # The vertical result's rows: `left` zeros, the image's columns, zeros
        # as far as the last block reads.
        self.row_len = (self.nbw - 1) * BLOCK_COLUMNS + self.Mh.shape[0]
        self.cols = max(0, min(W, self.row_len - left))  # image columns any block reads
        self.tiles = RowTiles(m, self.n_H, tile_rows(self.n_W, self.f_w))

    def vertical(self, scratch, A, i, h0, h1):
        """The vertical pass of output rows h0..h1 of image i: (blocks * Bv, row_len)."""
        _, H, W = self.shape
        nbv = ceil_div(h1 - h0, BLOCK_ROWS)
        n_in = (nbv - 1) * BLOCK_ROWS + self.Mv.shape[1]
        y0 = h0 - self.top  # the image row of the slab's first row
        if y0 >= 0 and y0 + n_in <= H:
            src = A[i, y0 : y0 + n_in, : self.cols]
        else:  # rows above or below the image: staged with zeros
            src = scratch.take("staged", (n_in, self.cols))
            lo, hi = max(0, -y0), max(0, min(n_in, H - y0))
            src[:lo] = 0
            src[max(lo, hi) :] = 0
            src[lo:hi] = A[i, y0 + lo : y0 + hi, : self.cols]
        row_bytes, item = src.strides
        slabs = as_strided(
            src,
            (nbv, self.Mv.shape[1], self.cols),
            (BLOCK_ROWS * row_bytes, row_bytes, item),
            writeable=False,
        )
        T = scratch.take("vertical", (nbv * BLOCK_ROWS, self.row_len))
        T[:, : self.left] = 0
        T[:, self.left + self.cols :] = 0
        inside = T.reshape(nbv, BLOCK_ROWS, self.row_len)[:, :, self.left : self.left + self.cols]
        np.matmul(self.Mv, slabs, out=inside)
        return T

    def horizontal(self, scratch, T, out):
        """The horizontal pass of the vertical result T into `out` (rows, n_W)."""
        rows, n_W = out.shape
        Bh, span = BLOCK_COLUMNS, self.Mh.shape[0]
        row_bytes, item = T.strides
        full = n_W // Bh
        if full:
            X = as_strided(T, (full, rows, span), (Bh * item, row_bytes, item), writeable=False)
            Y = as_strided(
                out, (full, rows, Bh), (Bh * out.strides[1], out.strides[0], out.strides[1])
            )
            np.matmul(X, self.Mh, out=Y)
        rest = n_W - full * Bh
        if rest:  # the last, partial block
            tail = scratch.take("tail", (rows, Bh))
            np.matmul(T[:rows, full * Bh : full * Bh + span], self.Mh, out=tail)
            out[:, full * Bh :] = tail[:, :rest]


def correlate_separable(A, u, v, pads, dtype, bias):
    """Correlate one-channel images A (m, H, W, 1) with ``outer(u, v)``, zero padding `pads`.

    `pads` is (top, bottom, left, right), none negative; stride 1. Returns
    ``(Z, rows)``: Z (m, n_H, n_W, 1) in `dtype` with `bias` (shape (1,))
    added, and the ``(image, row)`` pairs whose results are not finite, which
    the caller computes another way (their values in Z are this engine's).
    """
    m, H, W, _ = A.shape
    plan = _Plan((m, H, W), u, v, pads, np.dtype(dtype))
    Z = np.empty((m, plan.n_H, plan.n_W, 1), dtype)
    if Z.size == 0:
        return Z, []
    A2 = A.reshape(m, H, W).astype(dtype, copy=False)
    bias = np.asarray(bias, dtype).reshape(())
    not_finite = []  # list.append is atomic

    def work(scratch, tile):
        i0, i1, h0, h1 = tile
        for i in range(i0, i1):
            T = plan.vertical(scratch, A2, i, h0, h1)
            out = Z[i, h0:h1, :, 0]
            plan.horizontal(scratch, T, out)
            if bias != 0:
                np.add(out, bias, out=out)
            if not _finite(out):
                rows = np.flatnonzero(~np.all(np.isfinite(out), axis=1))
                not_finite.extend((i, h0 + int(r)) for r in rows)

    with np.errstate(invalid="ignore", over="ignore"):  # reported by row, not warned
        run_tiles(
            plan.tiles, work, lambda: Scratch(dtype), cost=Z.size * passes(plan.f_h, plan.f_w)
        )
    return Z, sorted(not_finite)
