"""convcli's native engine: its C kernels, which engine runs, and the calls the layers make.

The compiled module ``_native`` (``_native.c``) is built with the package
where a C compiler is at hand; without it, or with ``CONVCLI_ENGINE=numpy``
in the environment, the layers run their numpy engines, which stay the
reference. The C kernels run at the best vector level the CPU has (AVX2 on
x86-64 where present, else the baseline: SSE2, NEON), chosen at import;
both levels give the same bits.

What the C kernels compute:

- :func:`correlate`: the direct correlation of A (m, H, W, C) with a few
  channels in and out, any stride and dilation, or each channel with its
  own kernels (depthwise). Each output adds its products over the kernel's
  rows, columns and channels, in that order, from zero, then the bias: as
  the plain definition does, so NaN and inf reach exactly the outputs whose
  windows hold them, and a row's value never depends on the rows computed
  with it (bands of an image get its values).
- :func:`correlate_separable`: one channel with a rank-1 kernel
  ``outer(u, v)``, as a vertical then a horizontal pass per output row.
- :func:`spread_claims`: max pooling's backward pass where the windows
  tile the input, from the claims the forward pass kept.
- Around the layers, for a photo's edge map: :func:`sum_channels` (8-bit
  channels summed into the float32 layer input), :func:`abs_at_least`,
  :func:`select_ranks` (the ranks np.partition finds, for the robust
  percentile) and :func:`levels_u8` (the robust 8-bit levels, as numpy's
  float32 steps give them).

With integer samples and integer weights every sum is exact, so the
results equal the numpy engines' bit for bit; otherwise they agree within
float32 rounding. The other kernels give numpy's values exactly.
"""

from __future__ import annotations

import numpy as np

from .separable import rank_one_factors
from .tiles import RowTiles, Scratch, covered, run_tiles, thread_count, window_count
from .which import (  # noqa: F401  (the engine's state, for the layers and the tests)
    _native,
    active,
    description,
    set_vector_level,
    setting_problem,
    use_engine,
    vector_levels,
)

# Staged values of a row tile (1 MB of float32): they stay in the L2 cache
# while the tile's output rows read them.
TILE_VALUES = 1 << 18
# Channels in and out up to which the direct correlation beats the matmul engine.
DIRECT_CHANNELS = 16
# The two passes of a rank-1 kernel cost a little more per tap than the direct
# correlation's (a line written and read again, scalar tails).
SEPARABLE_SHARE = 0.75
# Output rows whose vertical passes _native.c makes together (its ROWS_AT_ONCE).
SEPARABLE_ROWS_AT_ONCE = 4
# The most rows of a kernel that the separable passes take (_native.c's MAX_TAPS, the size
# of a stack array of row pointers): a taller rank-1 kernel takes the direct correlation.
SEPARABLE_MAX_TAPS = 4096
# Multiply-adds per pass of numpy over one value (tiles.WORK_PER_THREAD's unit).
MULTIPLY_ADDS_PER_PASS = 8
# The most bytes of a thread's channel-sum rows (sum_correlate_separable): a kernel taller
# than that leaves the sum to a picture-sized array.
SUM_RING_BYTES = 4 << 20
# Results of at least so many bytes are stored past the caches (sum_correlate_separable): a
# photo's 17 MB map, 6.84 to 5.81 ms a conv stage on one thread (medians of 8 interleaved
# stage splits of 16 photos). Smaller ones stay in the cache for the mapping that reads them.
STREAMED_BYTES = 8 << 20


def _c_array(x, dtype) -> np.ndarray:
    """`x` as the C kernels read it: a C-contiguous, aligned `dtype` array, copied only where
    it is not one.

    The kernels read through ``float *`` and ``uint32_t *``: a float32 array at an odd
    address, which ``np.ascontiguousarray`` keeps as it is, is undefined behaviour there.
    """
    return np.require(x, dtype, ["C", "A"])


def _c_ready(*arrays) -> bool:
    """Whether the C kernels may take `arrays` as they are (to write them in place): each
    C-contiguous and aligned (:func:`_c_array`)."""
    return all(a.flags.c_contiguous and a.flags.aligned for a in arrays)


def _written_in_place(name: str, *arrays) -> None:
    """A ValueError naming the kernel `name` unless the `arrays` it writes are
    :func:`_c_ready`: a copy of them would not be written."""
    if not _c_ready(*arrays):
        raise ValueError(f"{name}: the arrays written in place must be C-contiguous and aligned")


def direct_takes(C: int, n: int, *, depthwise: bool) -> bool:
    """Whether :func:`correlate` beats the numpy engines on C input channels and n kernels.

    Each channel with its own kernels always; every channel to every output
    with up to DIRECT_CHANNELS of both (beyond, BLAS's matmuls win).
    """
    return C > 0 and n > 0 and (depthwise or max(C, n) <= DIRECT_CHANNELS)


def separable_is_cheaper(f_h: int, f_w: int) -> bool:
    """Whether a rank-1 (f_h, f_w) kernel runs faster as two passes than as :func:`correlate`."""
    return f_h + f_w < SEPARABLE_SHARE * f_h * f_w


def separable_factors(K) -> tuple[np.ndarray, np.ndarray] | None:
    """``(u, v)`` of the 2-D kernel `K` where this engine runs it as two passes: rank 1
    (:func:`~convcli.layers._engine.separable.rank_one_factors`), cheaper so
    (:func:`separable_is_cheaper`) and at most :data:`SEPARABLE_MAX_TAPS` rows; else None."""
    f_h, f_w = np.shape(K)
    if f_h > SEPARABLE_MAX_TAPS or not separable_is_cheaper(f_h, f_w):
        return None
    return rank_one_factors(K)


def correlate(A, W, stride, pads, bias, *, dilation=1, depthwise=False):
    """Correlate float32 A (m, H, W, C) with W, zero padding ``pads = (top, bottom, left, right)``.

    W is (f_h, f_w, C, n_C), every input channel to every output channel; or
    with `depthwise`, (f_h, f_w, C, n_K), each channel with its own n_K
    kernels, output channel ``k * C + c``. `bias` has one value per output
    channel. No pad may be negative. Returns Z (m, n_H, n_W, n_out) float32.
    """
    A = _c_array(A, np.float32)
    m, H, W_in, C = A.shape
    f_h, f_w, _, n = W.shape
    top, bottom, left, right = pads
    n_H = window_count(H + top + bottom, covered(f_h, 1, dilation), stride)
    n_W = window_count(W_in + left + right, covered(f_w, 1, dilation), stride)
    if depthwise:  # groups = channels: (C, f_h, f_w, 1, n_K)
        K = W.astype(np.float32).transpose(2, 0, 1, 3)[:, :, :, None, :]
        groups, Cg = C, 1
    else:
        K, groups, Cg = W.astype(np.float32)[None], 1, C
    K = _c_array(K, np.float32)
    n_out = n * groups
    Z = np.empty((m, n_H, n_W, n_out), np.float32)
    bias = _c_array(np.broadcast_to(np.asarray(bias, np.float32).reshape(-1), (n_out,)), np.float32)
    if Z.size == 0:
        return Z
    if C == 0:
        Z[...] = bias
        return Z
    plane_width = -(-n_W // 8) * 8 + (f_w - 1) * dilation // stride  # as _native.c stages
    row_values = C * stride * plane_width
    rows_fit = max(1, (TILE_VALUES // row_values - (f_h - 1) * dilation - 1) // stride + 1)
    tiles = RowTiles(m, n_H, rows_fit)
    shapes = (
        (m, H, W_in, C),
        (groups, f_h, f_w, Cg, n),
        (n_H, n_W, n_out),
        (stride, dilation, top, left),
    )

    def work(scratch, tile):
        i0, i1, h0, h1 = tile
        rows = (h1 - h0 - 1) * stride + (f_h - 1) * dilation + 1
        stage = scratch.take("stage", (rows * row_values,))
        _native.correlate(A, K, Z, bias, stage, *shapes, tile)

    cost = Z.size * f_h * f_w * Cg / MULTIPLY_ADDS_PER_PASS
    run_tiles(tiles, work, lambda: Scratch(np.float32), cost=cost, as_free=True, blas=False)
    return Z


def correlate_separable(A, u, v, pads, bias):
    """Correlate each channel of float32 images A (m, H, W, C) with ``outer(u, v)``, stride 1.

    `pads` is (top, bottom, left, right), none negative; `bias` one value per
    channel; `u` at most :data:`SEPARABLE_MAX_TAPS` taps (as :func:`separable_factors`
    gives them). Each channel gets the values it gets alone: the passes run on the
    interleaved pixels, the horizontal taps C values apart, and a bias that
    differs between channels is added after them (as the C kernel adds one).
    Returns ``(Z, rows)`` as :func:`convcli.layers._engine.separable.correlate_separable`
    does: Z (m, n_H, n_W, C) float32, and the ``(image, row)`` pairs whose
    results are not finite in some channel, for the caller's plain path.
    """
    A = _c_array(A, np.float32)
    m, H, W_in, C = A.shape
    top, bottom, left, right = pads
    u32, v32 = _c_array(u, np.float32), _c_array(v, np.float32)
    n_H, n_W = H + top + bottom - len(u32) + 1, W_in + left + right - len(v32) + 1
    Z = aligned_empty((m, n_H, n_W, C))
    if Z.size == 0:
        return Z, []
    stream = Z.nbytes >= STREAMED_BYTES
    biases = np.broadcast_to(np.asarray(bias, np.float32).reshape(-1), (C,))
    same = bool(np.all(biases == biases[0]))
    line = (W_in + left + right) * C
    shapes = (
        (m, H, W_in * C),
        (len(u32), len(v32)),
        (n_H, n_W * C),
        (top, bottom, left * C, right * C),
        float(biases[0]) if same else 0.0,
        C,
    )
    not_finite = []  # list.append is atomic

    def work(scratch, tile):
        i0, i1, h0, h1 = tile
        flags = scratch.take("flags", (h1 - h0,), np.uint8)
        lines = scratch.take("line", (SEPARABLE_ROWS_AT_ONCE * line + W_in * C,))
        for i in range(i0, i1):
            _native.separable(A, u32, v32, Z, lines, flags, *shapes, stream, (i, h0, h1))
            if flags.any():
                not_finite.extend((i, h0 + int(r)) for r in np.flatnonzero(flags))

    # Its scratch is a few rows: tiles of 4 MB of output, few enough calls, and some for
    # each thread.
    tiles = RowTiles(m, n_H, max(1, 4 * TILE_VALUES // max(1, n_W * C)))
    cost = Z.size * (len(u32) + len(v32)) / MULTIPLY_ADDS_PER_PASS
    run_tiles(tiles, work, lambda: Scratch(np.float32), cost=cost, as_free=True, blas=False)
    if not same:
        np.add(Z, biases, out=Z)
    return Z, sorted(not_finite)


def sum_correlate_separable(
    colour, u, v, row_sources, column_sources, left: int, bias: float, *, channel=None, out=None
):
    """The sum of the 8-bit channels of `colour` (m, H, W, C), bordered by copies, correlated
    with ``outer(u, v)``: Z (m, n_H, n_W, 1) float32, or None where a row is not finite.
    `channel`: that channel alone, not the sum; `out`: Z's array (:func:`_result_array`).

    `row_sources` and `column_sources` (one per padded row and column) name the picture's
    row and column each copies, -1 for a zero; `left` columns come before the inside. The
    values of :func:`correlate_separable` on the padded sum, without that picture-sized
    float32 sum: each padded row is summed once into a few rows that stay in cache. None
    also where a thread's rows of the sum would not fit in :data:`SUM_RING_BYTES`, or `u`
    has more than :data:`SEPARABLE_MAX_TAPS` taps.
    """
    colour = _c_array(colour, np.uint8)
    m, H, W_in, C = colour.shape
    u32, v32 = _c_array(u, np.float32), _c_array(v, np.float32)
    rows, columns = _c_array(row_sources, np.int64), _c_array(column_sources, np.int64)
    W = len(columns)
    n_H, n_W = len(rows) - len(u32) + 1, W - len(v32) + 1
    ring_rows = len(u32) + SEPARABLE_ROWS_AT_ONCE - 1
    if len(u32) > SEPARABLE_MAX_TAPS or 4 * ring_rows * W > SUM_RING_BYTES:
        return None
    if min(m, H, W_in, n_H, n_W) < 1:
        return None
    Z = _result_array("sum_correlate_separable", (m, n_H, n_W, 1), out)
    stream = Z.nbytes >= STREAMED_BYTES
    summed = (0, C) if channel is None else (channel, 1)
    shape, geometry = (m, H, W_in, C) + summed, (W, left, ring_rows)
    not_finite = []  # list.append is atomic

    def work(scratch, tile):
        i0, i1, h0, h1 = tile
        flags = scratch.take("flags", (h1 - h0,), np.uint8)
        ring = scratch.take("ring", ((ring_rows + SEPARABLE_ROWS_AT_ONCE + 1) * W,))
        tags = scratch.take("tags", (ring_rows,), np.int64)
        for i in range(i0, i1):
            _native.sum_separable(
                colour,
                u32,
                v32,
                rows,
                columns,
                Z,
                ring,
                tags,
                flags,
                shape,
                geometry,
                float(bias),
                stream,
                (i, h0, h1),
            )
            if flags.any():
                not_finite.append(i)

    tiles = RowTiles(m, n_H, max(1, 4 * TILE_VALUES // n_W))
    cost = Z.size * (len(u32) + len(v32)) / MULTIPLY_ADDS_PER_PASS
    run_tiles(tiles, work, lambda: Scratch(np.float32), cost=cost, as_free=True, blas=False)
    return None if not_finite else Z


def _result_array(name: str, shape: tuple[int, ...], out: np.ndarray | None) -> np.ndarray:
    """`out` seen as `shape`, for kernel `name` to write (C-contiguous: else a ValueError),
    or a new :func:`aligned_empty` one where `out` is None."""
    if out is None:
        return aligned_empty(shape)
    _written_in_place(name, out)
    return out.reshape(shape)


def aligned_empty(shape: tuple[int, ...]) -> np.ndarray:
    """An uninitialised float32 array of `shape` that starts on a 64-byte boundary (a cache
    line), as the streamed stores of 32 bytes need it."""
    size = int(np.prod(shape))
    memory = np.empty(size + 16, np.float32)
    start = (-memory.ctypes.data % 64) // 4
    return memory[start : start + size].reshape(shape)


def sum_channels(colour, out, top: int, left: int) -> None:
    """The sum of the 8-bit channels of `colour` (m, H, W, C), as float32, into `out`
    (m, H + top + bottom, W + left + right, 1), from row `top` and column `left` on.

    Exact (at most ``255 * C``), so the same values as numpy's uint16 sum.
    """
    m, H, W, C = colour.shape
    if out.dtype != np.float32 or not _c_ready(out):
        raise ValueError("sum_channels: out must be a C-contiguous, aligned float32 array")
    _, H_out, W_out, _ = out.shape
    for i in range(m):
        _native.sum_channels(
            _c_array(colour[i], np.uint8),
            out,
            (H, W, C),
            ((i * H_out + top) * W_out + left, W_out),
        )


def abs_at_least(x, margin: int, threshold: float, capacity: int):
    """|x| of the float32 map `x` (H, W) at least `threshold`, `margin` rows and columns left
    out on every side, in row order; None where more than `capacity` are.

    A large map's bands of rows on the layer threads (:func:`_bands`), each into room for an
    eighth of its values, scanned again with more room where it finds more (but not more
    than `capacity`).
    """
    x = _c_array(x, np.float32)
    H, W = x.shape
    bands = _bands(range(margin, H - margin), W)

    def scan(r0: int, r1: int, room: int) -> tuple[np.ndarray, int]:
        # The band with `margin` rows of its neighbours, which the scan leaves out.
        out = np.empty(room, np.float32)
        band = x[r0 - margin : r1 + margin]
        return out, _native.abs_at_least(band, out, band.shape, margin, threshold)

    if len(bands) < 2:
        out, count = scan(margin, max(margin, H - margin), capacity)
        return out[:count] if count <= capacity else None
    found: dict[int, np.ndarray | None] = {}

    def work(_, band):
        r0, r1 = band
        out, count = scan(r0, r1, min(capacity, (r1 - r0) * W // 8))
        if out.size < count <= capacity:
            out, count = scan(r0, r1, count)
        found[r0] = out[:count] if count <= out.size else None

    cost = (bands[-1][1] - bands[0][0]) * W
    run_tiles(bands, work, lambda: None, cost=cost, as_free=True, blas=False)
    top = [found[r0] for r0, _ in bands]
    if any(band is None for band in top) or sum(band.size for band in top) > capacity:
        return None
    return np.concatenate(top)


def _bands(rows: range, width: int) -> list[tuple[int, int]]:
    """Bands ``(r0, r1)`` of `rows` of a map `width` values wide for a pass over every value
    on the layer threads (a photo's map: 1.7 to 1.0 ms a pass on two threads, the calling
    thread taking bands as the others do); one band where they would run on one thread
    (the bands' calls cost 0.3 ms on a photo's map)."""
    step = max(1, TILE_VALUES // max(1, width))
    bands = [(r, min(r + step, rows.stop)) for r in range(rows.start, rows.stop, step)]
    return bands if thread_count(len(bands), len(rows) * width) > 1 else [(rows.start, rows.stop)]


def magnitude_bins(x, window, bins, inexact, shift: int) -> tuple[int, float]:
    """Count the finite |x| of `window` ``(r0, r1, c0, c1)`` of the float32 map `x` (H, W) by
    their bit patterns' high bits (pattern >> `shift`) into the int64 `bins`, and set
    ``inexact[bin]`` (uint8) where a pattern's low `shift` bits are not all zero; returns
    their count and the largest |x| (0 where none)."""
    _written_in_place("magnitude_bins", bins, inexact)
    return _native.magnitude_bins(_c_array(x, np.float32), bins, inexact, x.shape, window, shift)


def levels_u8(x, scale: float, big: float):
    """8-bit levels ``rint(clip(|x| * scale, 0, 255))`` of float32 `x`, as numpy's float32
    arithmetic gives them; None where an |x| is NaN or over `big`. A large map's bands of
    values on the layer threads (:func:`_bands`)."""
    x = _c_array(x, np.float32)
    levels = np.empty(x.shape, np.uint8)
    bands = _bands(range(x.size), 1)
    if len(bands) < 2:
        return levels if _native.levels_u8(x, levels, scale, big) else None
    values, flat = x.reshape(-1), levels.reshape(-1)
    outside = []  # list.append is atomic

    def work(_, band):
        i0, i1 = band
        if not _native.levels_u8(values[i0:i1], flat[i0:i1], scale, big):
            outside.append(i0)

    run_tiles(bands, work, lambda: None, cost=x.size, as_free=True, blas=False)
    return None if outside else levels


def mean_2x2(rows):
    """2 x 2 means of float32 `rows` (2k, W, C), an odd last column with itself: (k, ceil(W / 2),
    C), as numpy's float64 sums rounded to float32 give them; None where the native engine is
    not active."""
    if not active() or not rows.shape[1] or not rows.shape[2]:
        return None
    k, W, C = len(rows) // 2, rows.shape[1], rows.shape[2]
    out = np.empty((k, (W + 1) // 2, C), np.float32)
    _native.mean_2x2(_c_array(rows[: 2 * k], np.float32), out, (k, W, C))
    return out


def spread_takes(dA, claimed, dA_prev) -> bool:
    """Whether :func:`spread_claims` takes these arrays: the native engine, float32,
    C-contiguous and aligned arrays (:func:`_c_ready`; the claims a forward pass kept)."""
    return (
        active()
        and dA.dtype == np.float32
        and dA_prev.dtype == np.float32
        and claimed.dtype == np.bool_
        and _c_ready(dA, claimed, dA_prev)
    )


def spread_claims(dA, claimed, dA_prev, f: int, tile) -> None:
    """``dA_prev = dA * claimed`` over the f x f windows of `tile`'s output rows
    ``(i0, i1, h0, h1)``: max pooling's backward pass where the windows tile the input.

    The same values as numpy's multiply by the boolean claims: the pixels not
    claimed get ``0 * dA``.
    """
    _native.spread_claims(
        dA, claimed, dA_prev, dA.shape, claimed.shape[1:3], dA_prev.shape[1:3], f, tile
    )


def select_ranks(values: np.ndarray, first: int, second: int) -> tuple[np.float32, np.float32]:
    """The values of ranks `first` <= `second` (0: the smallest) of the float32 array
    `values`, as ``np.partition(values, [first, second])`` puts them there (NaN last), by
    radix selection on their bits: 0.1 ms for 86,000 values, where the partition takes
    0.5. `values` is left as it is. For the native engine only (:func:`active`)."""
    flat = _c_array(values, np.float32).reshape(-1)
    scratch = np.empty(2 * flat.size, np.uint32)
    patterns = _native.select_ranks(flat, scratch, (first, second))
    low, high = np.array(patterns, np.uint32).view(np.float32)
    return low, high


def huffman_block(data, limit: int = -1) -> bytes | None:
    """The bytes of `data` (a C-contiguous buffer) as one deflate block of Huffman-coded
    literals, not the last, followed by an empty stored block so that it ends on a byte
    boundary; None where that would be more than `limit` bytes (negative: no limit). For
    the native engine only (:func:`active`)."""
    return _native.huffman_block(data, limit)


def undo_differencing(segment) -> None:
    """A TIFF's horizontal differencing (Predictor 2) undone in place in `segment`: (rows,
    columns, samples) uint8 or uint16 in native byte order, C-contiguous and aligned; native
    engine only."""
    rows, columns, samples = segment.shape
    _written_in_place("undo_differencing", segment)
    _native.undo_differencing(segment, (rows, columns, samples, segment.itemsize))
