"""The tiled cross-correlation engine behind conv_forward and conv_backward (numpy only).

The layers work on NHWC arrays with few channels (images: 1 to 4), where a
plain ``window @ W[di, dj]`` per kernel offset multiplies tiny matrices and
copies a lot. This engine feeds BLAS fewer, larger matrices instead:

- **Blocks.** Each output row is cut into blocks of B neighbouring outputs.
  Their inputs under kernel row di are ``span = (B-1)*stride + f_w``
  consecutive pixels, one contiguous run of ``span*C`` values in NHWC. Side
  by side for all kernel rows, these runs make one row of a matrix X, and
  ``X @ T`` gives the B outputs of every block at once, T holding the kernel
  as banded (Toeplitz) blocks. This is im2col along rows: X holds
  ``f_h * span / B`` values per output pixel and input channel instead of
  im2col's ``f_h * f_w``, at the price of multiplying some zeros.
- **Row tiles.** The padded input is never built whole: a cache-sized tile
  of rows (several whole images when they are small) is copied into a
  reused buffer, its X built, multiplied in chunks that BLAS runs on the
  calling thread, and its outputs written straight into the result. For
  stride s > 1 the buffer stores rows by phase (row index mod s), so that
  a kernel row reads equally spaced rows again. With stride s > 1 the
  forward pass stages several row tiles of one image at once (fewer,
  longer copies) and builds X and multiplies them row tile by row tile: a
  row's value depends on its row tile only, however many are staged
  together. Their results are checked together, and one by one only when
  that fails.
- Outputs past the right or bottom edge of each image are computed and
  dropped (a few percent of the work).

The banded blocks multiply some inputs by structural zeros, and ``0 * inf``
is NaN: with a non-finite input a result could hold NaN where the
definition has a finite value. The engine returns None whenever a result
is not finite, and the callers use their plain path.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from . import tiles as _tiles
from .tiles import (
    RowTiles,
    blas_on_calling_thread,
    ceil_div,
    covered,
    run_tiles,
    window_count,
)

# Rows of one matmul: each stays under ~2.6e5 multiply-adds, which OpenBLAS
# runs on the calling thread (its hand-off to a second thread cost more than
# it saved at these sizes, and stalls when the other core is busy), but has
# at least MIN_CHUNK rows: with many channels, thinner matmuls run slowly.
MATMUL_WORK = 1 << 18
MIN_CHUNK = 128
# Values of X per row tile (2 MB in float32): a tile stays in cache while it
# is multiplied; smaller tiles cost more Python overhead than they save.
TILE_VALUES = 1 << 19
# Values of X in the row tiles of one image that the forward pass stages at
# once, for strides above 1 (fewer, longer copies, and one finiteness check
# and bias add for all); X is still built and multiplied row tile by row
# tile, with the same matmuls. W3: four row tiles (three: 4% slower on two
# threads, six: 2%).
MERGED_VALUES = 3 << 19


def tile_rows_fit(values_per_row: int) -> int:
    """Output rows of a row tile: a power of two, so that tiles start on multiples of it.

    A result row's value depends on where it falls in its tile's matmuls
    (BLAS's blocks), so rows computed from a tile starting on the same row
    are equal bit for bit: a band of rows starting on a multiple of every
    tile size in play (:mod:`convcli.app.strips`) gets the whole image's values.

    >>> tile_rows_fit(3000), tile_rows_fit(1 << 30)
    (128, 1)
    """
    fit = max(1, TILE_VALUES // max(1, values_per_row))
    return 1 << (fit.bit_length() - 1)


def _block_width(n_C_prev: int, n_C: int) -> int:
    """Outputs per block, B: 4 for RGB images, 1 when both channel counts reach 12.

    Larger blocks make larger matmuls but waste more multiplications on the
    zeros of the banded matrices; with many channels in and out the matmuls
    are large anyway and B = 1 is plain im2col.
    """
    return max(1, min(8, 12 // max(1, min(n_C_prev, n_C))))


def _records(X, offset, shape, strides, nbytes):
    """View the bytes of the contiguous array X from `offset` as records of `nbytes` bytes.

    Copying whole records moves a run of values at once, about twice as
    fast in numpy as copying the same values one float at a time.
    """
    return np.ndarray(shape, f"V{nbytes}", buffer=X, offset=offset, strides=strides)


class _Plan:
    """Geometry of the tiled correlation of A (m, H, W, C) with an (f_h, f_w) kernel."""

    def __init__(self, shape, kernel, stride, pads, n_C, dtype):
        m, H, W, C = shape
        f_h, f_w = kernel
        top, bottom, left, right = pads
        s = stride
        self.shape, self.kernel, self.s = shape, kernel, s
        self.top, self.left, self.itemsize = top, left, dtype.itemsize
        self.n_H = window_count(H + top + bottom, f_h, s)
        self.n_W = window_count(W + left + right, f_w, s)
        self.B = B = _block_width(C, n_C)
        self.N = B * n_C  # outputs per block
        self.nbw = ceil_div(self.n_W, B)  # blocks per row
        self.span = covered(B, f_w, s)  # input pixels under one block's outputs
        self.K = f_h * self.span * C  # values per row of X
        self.row_px = covered(self.nbw, self.span, B * s)  # staged pixels per row
        self.extra = (f_h - 1) // s  # phase rows read below the last output row
        self.chunk = max(MIN_CHUNK, MATMUL_WORK // max(1, self.K * self.N))
        self.tiles = RowTiles(m, self.n_H, tile_rows_fit(self.nbw * self.K))
        self.max_chunks = ceil_div(
            self.tiles.images * (self.tiles.rows + self.extra) * self.nbw, self.chunk
        )  # the matmuls of one row tile
        self.merge = self._merge()
        # BLAS multiply-adds, about a sixteenth of a numpy pass each (tiles.WORK_PER_THREAD).
        self.cost = m * self.n_H * self.nbw * self.K * self.N / 16

    def _merge(self) -> int:
        """Row tiles of one image in a forward tile: up to MERGED_VALUES of X; 1 for whole images.

        At least four merged tiles a thread are left, so that the threads share
        the work evenly. Only for strides above 1, whose rows are staged phase
        by phase: with stride 1 merging saved about 1% (W1, one thread) and
        would take more memory.
        """
        tiles = self.tiles
        if tiles.rows == self.n_H or self.s == 1:  # whole images, or stride 1
            return 1
        per_image = ceil_div(self.n_H, tiles.rows)
        fit = MERGED_VALUES // (tiles.rows * self.nbw * self.K)
        return max(1, min(fit, tiles.m * per_image // (4 * _tiles.THREADS)))

    def merged_tiles(self):
        """``(tile, groups)``: the forward's tiles and the row tiles (of :attr:`tiles`) in each."""
        if self.merge == 1:
            for tile in self.tiles:
                yield tile, [tile]
            return
        rows, step = self.tiles.rows, self.tiles.rows * self.merge
        for i in range(self.tiles.m):
            for h0 in range(0, self.n_H, step):
                h1 = min(self.n_H, h0 + step)
                yield (
                    (i, i + 1, h0, h1),
                    [(i, i + 1, g, min(h1, g + rows)) for g in range(h0, h1, rows)],
                )

    def buffers(self, dtype, merged=True):
        """Zeroed staging rows (s, rows + extra, row_px*C) and X (blocks, K).

        The staging rows hold a merged tile of the forward pass (`merged`),
        else one row tile; X holds one row tile.
        """
        C, merge = self.shape[3], self.merge if merged else 1
        tile_rows = self.tiles.images * (self.tiles.rows * merge + self.extra)  # per phase
        staged = np.zeros((self.s, tile_rows + self.extra, self.row_px * C), dtype)
        return staged, np.zeros((self.max_chunks * self.chunk, self.K), dtype)

    def fill(self, staged, X, A, i0, i1, h0, h1) -> int:
        """Copy the padded input of a tile into `staged`, build X; return its row count."""
        self.stage(staged, A, i0, i1, h0, h1)
        return self.build(staged, X, i1 - i0, h1 - h0)

    def stage(self, staged, A, i0, i1, h0, h1) -> None:
        """Copy the padded input rows of a (merged) tile into `staged`, by phase."""
        _, H, W, C = self.shape
        s, top, left = self.s, self.top, self.left
        k, n_rows = i1 - i0, h1 - h0 + self.extra
        W_in = max(0, min(W, self.row_px - left))  # image columns any block reads
        rows = staged[:, : k * n_rows].reshape(s, k, n_rows, self.row_px, C)
        for ph in range(s):
            # Phase row r holds padded row s*(h0 + r) + ph, image row y = that - top.
            r_lo = min(n_rows, max(0, ceil_div(top - ph, s) - h0))
            r_hi = min(n_rows, max(r_lo, ceil_div(H + top - ph, s) - h0))
            dst = rows[ph]
            dst[:, :r_lo] = 0
            dst[:, r_hi:] = 0
            if r_hi > r_lo:
                y0 = s * (h0 + r_lo) + ph - top
                src = A[i0:i1, y0 : y0 + s * (r_hi - r_lo - 1) + 1 : s, :W_in]
                dst[:, r_lo:r_hi, left : left + W_in] = src

    def build(self, staged, X, k, rows, first=0, views=None) -> int:
        """Build X for k images of `rows` output rows from `staged`'s rows `first` on.

        X's row (t, b) holds, for each kernel row di, the `span` pixels of
        block b in staged row first + t + di // s of phase di % s. Returns
        X's row count. `views`, a dict kept with the buffers, keeps the
        record views of the copies from tile to tile.
        """
        n_out = (k - 1) * (rows + self.extra) + rows  # output rows (with dropped ones)
        copies = None if views is None else views.get((n_out, first))
        if copies is None:
            copies = self._x_copies(staged, X, n_out, first)
            if views is not None:
                views[n_out, first] = copies
        for dst, src in copies:
            dst[...] = src
        return n_out * self.nbw

    def _x_copies(self, staged, X, n_out, first):
        """``(X's records, staged's records)`` for each kernel row, `n_out` output rows."""
        C, s, nbw, size = self.shape[3], self.s, self.nbw, self.itemsize
        run = self.span * C * size
        row_bytes, block_bytes = staged.strides[1], self.B * s * C * size
        copies = []
        for di in range(self.kernel[0]):
            offset = (di % s) * staged.strides[0] + (first + di // s) * row_bytes
            src = _records(staged, offset, (n_out, nbw), (row_bytes, block_bytes), run)
            dst = _records(X, di * run, (n_out, nbw), (nbw * X.strides[0], X.strides[0]), run)
            copies.append((dst, src))
        return copies

    def laid_out_as_Z(self, tile) -> bool:
        """Whether a tile's block results, row after row, are its rows of Z as they lie.

        So for a tile of one image whose rows hold whole blocks (n_W a
        multiple of B): nothing to drop between rows or images.
        """
        i0, i1, _, _ = tile
        return i1 - i0 == 1 and self.nbw * self.B == self.n_W

    def multiply(self, X, T, Y, out, tile):
        """`tile`'s rows of Z from its rows of X, in matmuls of `chunk` rows; returns them.

        `out` is Z's rows of the tile, then maybe rows of later row tiles of
        the same image. Straight into Z where :meth:`laid_out_as_Z` (the last
        chunk also writes the next row tile's rows when `out` holds them: they
        are computed later), else through the scratch Y.
        """
        i0, i1, h0, h1 = tile
        nq = ((i1 - i0 - 1) * (h1 - h0 + self.extra) + h1 - h0) * self.nbw
        n, chunk = ceil_div(nq, self.chunk), self.chunk
        with np.errstate(invalid="ignore", over="ignore"):  # the caller checks the results
            if self.laid_out_as_Z(tile):  # the block results are Z's rows: straight in
                y = out.reshape(-1, self.N)
                if len(y) >= n * chunk:
                    np.matmul(
                        X[: n * chunk].reshape(n, chunk, -1),
                        T,
                        out=y[: n * chunk].reshape(n, chunk, -1),
                    )
                else:
                    _chunked_matmul(X, T, nq, chunk, y, Y)
                return y[:nq]
            np.matmul(X[: n * chunk].reshape(n, chunk, -1), T, out=Y[:n])
            out[:, : h1 - h0] = self.outputs(Y.reshape(-1, self.N), *tile)
        return Y.reshape(-1, self.N)[:nq]

    def outputs(self, Y, i0, i1, h0, h1):
        """The valid outputs of a tile inside its block results Y."""
        k, n_rows = i1 - i0, h1 - h0 + self.extra
        n_C = self.N // self.B
        return Y[: k * n_rows * self.nbw].reshape(k, n_rows, -1, n_C)[:, : h1 - h0, : self.n_W]

    def toeplitz(self, W):
        """(K, N): the kernel as banded blocks, row (di, pixel, c), column (b, n)."""
        f_h, f_w, C, n_C = W.shape
        B, s = self.B, self.s
        T = np.zeros((f_h, self.span, C, B, n_C), W.dtype)
        for b in range(B):
            T[:, b * s : b * s + f_w, :, b, :] = W
        return T.reshape(self.K, self.N)


def _finite(x) -> bool:
    """Whether every value of `x` is finite.

    Sums carry NaN and inf: BLAS takes the sums of a large contiguous array's
    runs of ``FINITE_RUN`` values about twice as fast as min and max, and
    numpy's sum of a smaller one (W3's row tiles of 24,576 values) a fifth to a
    third faster. Only when a sum is not finite (which finite values near the
    dtype's largest can also make) do min and max, which cannot overflow,
    decide.
    """
    if x.dtype in (np.float32, np.float64):
        with np.errstate(over="ignore", invalid="ignore"):
            if x.size >= FINITE_SUMMED and x.flags.c_contiguous:
                flat = x.reshape(-1)
                ones = _ones(x.dtype)
                head = flat.size - flat.size % FINITE_RUN
                # One thread: a BLAS thread of its own stalls when the other cores are busy.
                with blas_on_calling_thread():
                    total = flat[head:] @ ones[: flat.size - head]
                    if head:
                        total += np.add.reduce(flat[:head].reshape(-1, FINITE_RUN) @ ones)
            else:
                total = np.add.reduce(x, axis=None)
        if math.isfinite(total):
            return True
    return bool(np.isfinite(np.min(x)) and np.isfinite(np.max(x)))


FINITE_RUN = 4096
# Smaller or strided arrays: numpy's sum (setting up BLAS's costs more there).
FINITE_SUMMED = 1 << 16


@lru_cache(maxsize=4)
def _ones(dtype):
    """A read-only vector of ``FINITE_RUN`` ones: the sums of :func:`_finite`."""
    ones = np.ones(FINITE_RUN, dtype)
    ones.flags.writeable = False
    return ones


class _NotFinite(Exception):
    """A tile's result holds NaN or inf."""


def correlate(A, W, stride, pads, dtype, bias=None, *, partial=False):
    """Cross-correlate A (m, H, W, C) with W (f_h, f_w, C, n_C), zero padding `pads`.

    `pads` is (top, bottom, left, right); negative values crop. Returns Z
    (m, n_H, n_W, n_C) in `dtype` (plus `bias`, shape (n_C,)), or None when
    a result is not finite (see the module docstring). With `partial`,
    returns ``(Z, tiles)`` instead: the row tiles ``(i0, i1, h0, h1)`` whose
    results are not finite, which the caller computes another way (their
    values in Z are the engine's). A tile's fate then depends on its own
    values only, as it does in any band of rows aligned on the tiles.
    """
    A, pads = _crop(A, pads)
    W = W.astype(dtype, copy=False)
    f_h, f_w, C, n_C = W.shape
    plan = _Plan(A.shape, (f_h, f_w), stride, pads, n_C, dtype)
    Z = np.empty((A.shape[0], plan.n_H, plan.n_W, n_C), dtype)
    if Z.size == 0 or C == 0:
        Z[...] = 0 if bias is None else bias
        return (Z, []) if partial else Z
    if bias is not None:  # one whole output row, so that adding it runs along rows
        bias = np.tile(np.asarray(bias, dtype), (plan.n_W, 1))
    T = plan.toeplitz(W)
    not_finite = []  # tiles whose results are not finite (list.append is atomic)

    def new_state():
        staged, X = plan.buffers(dtype)
        return staged, X, np.empty((plan.max_chunks, plan.chunk, plan.N), dtype), {}

    def check(row_tiles, ys, whole):
        """Note the row tiles whose results are not finite, one by one if `whole` is not."""
        if not _finite(whole):
            if not partial:
                raise _NotFinite
            not_finite.extend(g for g, y in zip(row_tiles, ys, strict=True) if not _finite(y))

    def work(state, merged):
        staged, X, Y, views = state
        (i0, i1, h0, h1), groups = merged
        plan.stage(staged, A, i0, i1, h0, h1)
        laid_out = plan.laid_out_as_Z(groups[0])
        ys = []
        for group in groups:  # row tiles: X and the matmuls of each, as if alone
            g0, g1 = group[2:]
            plan.build(staged, X, i1 - i0, g1 - g0, g0 - h0, views)
            y = plan.multiply(X, T, Y, Z[i0:i1, g0:h1], group)
            if laid_out:
                ys.append(y)
            else:  # in the scratch Y, which the next row tile takes
                check([group], [y], y)
        if laid_out:  # one check for the merged tile, row tile by row tile if it fails
            check(groups, ys, Z[i0:i1, h0:h1])
        if bias is not None:
            out = Z[i0:i1, h0:h1]
            np.add(out, bias, out=out)

    try:
        run_tiles(plan.merged_tiles(), work, new_state, cost=plan.cost, as_free=True)
    except _NotFinite:
        return None
    return (Z, not_finite) if partial else Z


def _chunked_matmul(X, T, nq, chunk, y, Y):
    """``y[:nq] = X[:nq] @ T`` in matmuls of `chunk` rows, the last one through the scratch `Y`.

    The same matmuls as one batched call over ``ceil(nq / chunk)`` chunks,
    so the same values (BLAS's sums depend on the shapes). `y` may go on
    past `nq` (the rows of later row tiles): those rows are left as they are.
    """
    full = nq // chunk
    if full:
        np.matmul(
            X[: full * chunk].reshape(full, chunk, -1),
            T,
            out=y[: full * chunk].reshape(full, chunk, -1),
        )
    rest = nq - full * chunk
    if rest:
        np.matmul(X[full * chunk : (full + 1) * chunk].reshape(1, chunk, -1), T, out=Y[:1])
        y[full * chunk : nq] = Y[0, :rest]


def correlate_weights_grad(A, dZ, kernel, stride, pads, dtype):
    """Gradient of ``correlate`` with respect to W: (f_h, f_w, C, n_C), or None.

    ``dW[di, dj] = sum over outputs of (input under kernel offset (di, dj)).T @ dZ``,
    computed with the tiles and the matrix X of the forward pass: ``X.T @ dZ``
    gives the gradient of the banded matrix T, whose bands add up to dW. The
    row tiles are summed in runs of consecutive tiles (:func:`_runs`), each
    run by one thread, and the runs' sums in their order: the same additions,
    so the same bits, on any number of threads.
    """
    f_h, f_w = kernel
    m, _, _, C = A.shape
    n_C = dZ.shape[3]
    plan = _Plan(A.shape, kernel, stride, pads, n_C, dtype)
    if m == 0 or C == 0 or n_C == 0:
        return np.zeros((f_h, f_w, C, n_C), dtype)
    tiles = list(plan.tiles)
    count = min(len(tiles), WEIGHT_GRAD_RUNS, max(1, RUN_SUMS_VALUES // (plan.K * plan.N)))
    runs = list(enumerate(_runs(tiles, count)))
    sums = [None] * count  # each run's, written by the one thread that takes the run

    def new_state():
        staged, X = plan.buffers(dtype, merged=False)
        # Outputs past the edges stay zero, so they add nothing to dW.
        Y = np.zeros((plan.max_chunks * plan.chunk, plan.N), dtype)
        return staged, X, Y, np.empty((plan.max_chunks, plan.K, plan.N), dtype)

    def work(state, run):
        staged, X, Y, part = state
        r, run_tiles_ = run
        dT = np.zeros((plan.K, plan.N), dtype)
        for tile in run_tiles_:
            nq = plan.fill(staged, X, A, *tile)
            n = ceil_div(nq, plan.chunk)
            Y[nq : n * plan.chunk] = 0
            i0, i1, h0, h1 = tile
            plan.outputs(Y, *tile)[...] = dZ[i0:i1, h0:h1]
            x = X[: n * plan.chunk].reshape(n, plan.chunk, -1)
            y = Y[: n * plan.chunk].reshape(n, plan.chunk, -1)
            with np.errstate(invalid="ignore", over="ignore"):  # dW is checked at the end
                np.matmul(x.swapaxes(1, 2), y, out=part[:n])
                dT += part[:n].sum(axis=0)
        sums[r] = dT

    run_tiles(runs, work, new_state)
    dT = sums[0]
    with np.errstate(invalid="ignore", over="ignore"):
        for other in sums[1:]:  # in the runs' order, whichever threads took them
            dT += other
    # Collect the bands: pixel b*s + dj of block b, output b.
    B, s = plan.B, plan.s
    dT = dT.reshape(f_h, plan.span, C, B, n_C)
    dW = np.zeros((f_h, f_w, C, n_C), dtype)
    for b in range(B):
        dW += dT[:, b * s : b * s + f_w, :, b, :]
    return dW if _finite(dW) else None


# dW's row tiles are summed in at most this many runs of consecutive tiles (so by at most
# this many threads), and their sums of (K, N) values take at most RUN_SUMS_VALUES in all
# (or one run): numbers of the shapes alone, never of the threads, so that the sums are
# the same on any machine.
WEIGHT_GRAD_RUNS = 16
RUN_SUMS_VALUES = 1 << 23


def _runs(items, count):
    """`items` (a list) cut into `count` runs of consecutive items, as even as can be.

    >>> _runs(list(range(7)), 3)
    [[0, 1, 2], [3, 4], [5, 6]]
    """
    size, longer = divmod(len(items), count)
    runs, start = [], 0
    for r in range(count):
        stop = start + size + (r < longer)
        runs.append(items[start:stop])
        start = stop
    return runs


def _crop(A, pads):
    """Apply negative pads by slicing A; return A and the non-negative pads."""
    top, bottom, left, right = pads
    H, W = A.shape[1:3]
    A = A[:, max(0, -top) : H - max(0, -bottom), max(0, -left) : W - max(0, -right)]
    return A, (max(0, top), max(0, bottom), max(0, left), max(0, right))
