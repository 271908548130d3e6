"""The tiled engines on tiny tiles: every tile boundary, image group and thread path.

convcli's convolution and pooling engines work through cache-sized row tiles,
on one or more threads. With the real tile sizes the inputs of the other test
modules fit in one or a few tiles; here the tiles are shrunk so that small
inputs cross many of them: rows of one image split into tiles with a short last
tile, groups of whole images with a partial last group, matmul chunks, stride
phases, neighbouring pooling tiles that share input rows, and two threads.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from reference import (
    assert_matches,
    conv_backward_windows,
    conv_forward_loop,
    conv_forward_windows,
    depthwise_conv_forward_loop,
    pool_backward_windows,
    pool_forward_windows,
)

from convcli import conv_backward, conv_forward, pool_backward, pool_forward
from convcli.choices import POOL_MODES
from convcli.layers import depthwise as depthwise_layer
from convcli.layers._engine import correlate as correlate_engine
from convcli.layers._engine import depthwise as depthwise_engine
from convcli.layers._engine import pool as pool_engine
from convcli.layers._engine import tiles
from convcli.layers.depthwise import depthwise_conv_forward

# The numpy engines themselves (the native engine has tests/test_native.py).
pytestmark = pytest.mark.usefixtures("numpy_engine")

# Values per tile: one row per tile, a few rows, one image, a few images, all.
TILE_SIZES = [1, 60, 400, 3000, 10**7]


@contextmanager
def engine(tile_values, threads):
    """Run the engines with `tile_values` per tile, 16-row matmuls and `threads` threads.

    Every call uses the threads, however small its work (tiles.WORK_PER_THREAD).
    """
    saved = (
        correlate_engine.TILE_VALUES,
        correlate_engine.MATMUL_WORK,
        correlate_engine.MIN_CHUNK,
        pool_engine.TILE_VALUES,
        depthwise_engine.TILE_VALUES,
        tiles.THREADS,
        tiles.WORK_PER_THREAD,
    )
    correlate_engine.TILE_VALUES = pool_engine.TILE_VALUES = tile_values
    tiles.WORK_PER_THREAD = 1e-9  # tiny calls on every thread too
    depthwise_engine.TILE_VALUES = tile_values
    correlate_engine.MATMUL_WORK = 1
    correlate_engine.MIN_CHUNK = 16
    tiles.THREADS = threads
    try:
        yield
    finally:
        (
            correlate_engine.TILE_VALUES,
            correlate_engine.MATMUL_WORK,
            correlate_engine.MIN_CHUNK,
            pool_engine.TILE_VALUES,
            depthwise_engine.TILE_VALUES,
            tiles.THREADS,
            tiles.WORK_PER_THREAD,
        ) = saved


@st.composite
def conv_cases(draw):
    f_h, f_w = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    stride, pad = draw(st.integers(1, 3)), draw(st.integers(0, 2))
    n_H = draw(st.integers(max(1, f_h - 2 * pad), 19))
    n_W = draw(st.integers(max(1, f_w - 2 * pad), 19))
    shape = (draw(st.integers(1, 5)), n_H, n_W, draw(st.integers(1, 4)))
    n_C = draw(st.integers(1, 5))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    A = rng.standard_normal(shape).astype(dtype)
    W = rng.standard_normal((f_h, f_w, shape[3], n_C)).astype(dtype)
    b = rng.standard_normal((1, 1, 1, n_C)).astype(dtype)
    return A, W, b, {"stride": stride, "pad": pad}, rng


@given(
    case=conv_cases(),
    tile_values=st.sampled_from(TILE_SIZES),
    threads=st.sampled_from([1, 2]),
)
def test_conv_on_tiny_tiles_matches_window_reference(case, tile_values, threads):
    A, W, b, hparameters, rng = case
    with engine(tile_values, threads):
        Z, cache = conv_forward(A, W, b, hparameters)
        dZ = rng.standard_normal(Z.shape).astype(A.dtype)
        grads = conv_backward(dZ, cache)
    assert_matches(Z, conv_forward_windows(A, W, b, hparameters), A.dtype)
    for got, want in zip(grads, conv_backward_windows(dZ, A, W, hparameters), strict=True):
        assert_matches(got, want, A.dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("stride", [1, 2])
def test_conv_backward_gives_the_same_bits_on_any_number_of_threads(stride, dtype):
    # dW sums the row tiles' parts: it must not depend on which thread took which
    # tile, so that convcli fit writes the same weights on any machine.
    rng = np.random.default_rng(15)
    A = rng.standard_normal((3, 40, 23, 3)).astype(dtype)
    W = rng.standard_normal((3, 3, 3, 2)).astype(dtype)
    b = rng.standard_normal((1, 1, 1, 2)).astype(dtype)
    hparameters = {"stride": stride, "pad": 1}
    Z, cache = conv_forward(A, W, b, hparameters)
    dZ = rng.standard_normal(Z.shape).astype(dtype)
    grads = {}
    for threads in (1, 2, 3, 5):
        with engine(400, threads):
            grads[threads] = conv_backward(dZ, cache)
    for threads in (2, 3, 5):
        for got, want in zip(grads[threads], grads[1], strict=True):
            assert got.tobytes() == want.tobytes()
    for got, want in zip(grads[1], conv_backward_windows(dZ, A, W, hparameters), strict=True):
        assert_matches(got, want, dtype)


@given(
    case=conv_cases(),
    tile_values=st.sampled_from(TILE_SIZES),
    threads=st.sampled_from([1, 2]),
    zero_taps=st.booleans(),
)
def test_depthwise_on_tiny_tiles_matches_loop(case, tile_values, threads, zero_taps):
    A, W, _, hparameters, rng = case
    if zero_taps:  # some taps weigh nothing: they are skipped
        W = W * (rng.random(W.shape[:2]) < 0.5)[:, :, None, None]
    b = rng.standard_normal((1, 1, 1, W.shape[3] * A.shape[3])).astype(A.dtype)
    with engine(tile_values, threads):
        Z, _ = depthwise_conv_forward(A, W, b, hparameters)
    assert_matches(Z, depthwise_conv_forward_loop(A, W, b, hparameters), A.dtype)


@st.composite
def pool_cases(draw):
    f, stride = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    shape = (
        draw(st.integers(1, 5)),
        draw(st.integers(f, 21)),
        draw(st.integers(f, 21)),
        draw(st.integers(1, 4)),
    )
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # Few distinct values, so that windows hold tied maxima.
    A = rng.integers(0, 4, shape).astype(dtype)
    return A, {"f": f, "stride": stride}, draw(st.sampled_from(POOL_MODES)), rng


@given(
    case=pool_cases(),
    tile_values=st.sampled_from(TILE_SIZES),
    threads=st.sampled_from([1, 2]),
)
def test_pool_on_tiny_tiles_matches_window_reference(case, tile_values, threads):
    A, hparameters, mode, rng = case
    with engine(tile_values, threads):
        out, cache = pool_forward(A, hparameters, mode)
        dA = rng.standard_normal(out.shape).astype(A.dtype)
        dA_prev = pool_backward(dA, cache, mode)
    assert_matches(out, pool_forward_windows(A, hparameters, mode), A.dtype)
    assert_matches(dA_prev, pool_backward_windows(dA, A, hparameters, mode), A.dtype)


# inf - inf in a window is NaN: numpy warns about it, in the plain path as in the loops.
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_input_in_a_late_tile_takes_the_plain_path(threads, value):
    # The engine meets the NaN only in its last tiles, after writing others.
    rng = np.random.default_rng(5)
    A = rng.standard_normal((3, 12, 10, 2))
    A[2, 11, 9, 1] = value
    W, b = rng.standard_normal((3, 3, 2, 3)), rng.standard_normal((1, 1, 1, 3))
    hparameters = {"stride": 1, "pad": 1}
    with engine(60, threads):
        Z, _ = conv_forward(A, W, b, hparameters)
    want = conv_forward_loop(A, W, b, hparameters)
    np.testing.assert_array_equal(np.isnan(Z), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(Z), np.isinf(want))
    np.testing.assert_allclose(Z, want, rtol=1e-12, atol=1e-12)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("shape", [(3, 5), (300, 301)])  # min and max; BLAS's sums, with a tail
def test_finiteness_check_finds_each_position_and_is_not_fooled_by_overflowing_sums(
    dtype, value, shape
):
    # Large results are checked by sums of runs: finite values near the largest
    # overflow those sums, and must still count as finite (min and max decide).
    big = np.finfo(dtype).max / 2
    x = np.full(shape, big, dtype)
    x[1] = -big
    assert correlate_engine._finite(x) and correlate_engine._finite(x[:, ::2])
    size = x.size
    places = {0, 1, size - 1, size - size % correlate_engine.FINITE_RUN, 4097}
    places |= set(np.random.default_rng(3).integers(0, size, 20).tolist())
    for place in sorted(p for p in places if p < size):
        y = x.copy()
        y.flat[place] = value
        assert not correlate_engine._finite(y)
        assert not correlate_engine._finite(np.where(np.isfinite(y), 0, y).astype(dtype))
        assert not correlate_engine._finite(y[:, ::-1])  # not contiguous


def test_large_odd_image_across_many_tiles():
    # Real tile sizes: an odd-sized image much larger than one tile.
    rng = np.random.default_rng(7)
    A = rng.standard_normal((1, 613, 487, 3)).astype(np.float32)
    W = rng.standard_normal((3, 3, 3, 5)).astype(np.float32)
    b = rng.standard_normal((1, 1, 1, 5)).astype(np.float32)
    for hparameters in ({"stride": 1, "pad": 1}, {"stride": 2, "pad": 2}):
        Z, _ = conv_forward(A, W, b, hparameters)
        assert_matches(Z, conv_forward_windows(A, W, b, hparameters), np.float32)
    for f, stride in ((2, 2), (3, 1), (3, 2)):
        out, cache = pool_forward(A, {"f": f, "stride": stride}, "max")
        assert_matches(out, pool_forward_windows(A, {"f": f, "stride": stride}), np.float32)


# --- tiling and window geometry ----------------------------------------------------------------


@pytest.mark.parametrize(
    "m, n_H, rows_fit", [(1, 1, 1), (3, 4, 9), (5, 4, 4), (2, 7, 3), (4, 9, 1)]
)
def test_row_tiles_cover_every_output_row_once(m, n_H, rows_fit):
    tiling = tiles.RowTiles(m, n_H, rows_fit)
    seen = np.zeros((m, n_H), int)
    for i0, i1, h0, h1 in tiling:
        assert (i1 - i0) * (h1 - h0) <= max(rows_fit, n_H)
        assert i1 - i0 == 1 or (h0, h1) == (0, n_H)  # several images only when whole
        seen[i0:i1, h0:h1] += 1
    assert (seen == 1).all()


@pytest.mark.parametrize("size, window, stride", [(7, 3, 2), (5, 5, 1), (10, 1, 3), (9, 2, 4)])
def test_window_geometry_matches_the_positions(size, window, stride):
    starts = range(0, size - window + 1, stride)
    count = tiles.window_count(size, window, stride)
    assert count == len(starts)
    assert tiles.covered(count, window, stride) == starts[-1] + window
    last = window - 1  # the last offset in each window
    assert list(range(size))[tiles.window_slice(last, count, stride)] == [
        start + last for start in starts
    ]


# --- the thread helper -------------------------------------------------------------------------


def test_run_tiles_gives_each_thread_its_own_state_and_covers_every_tile(monkeypatch):
    monkeypatch.setattr(tiles, "THREADS", 2)
    states = tiles.run_tiles(range(7), lambda state, tile: state.append(tile), list)
    assert len(states) == 2
    assert sorted(t for state in states for t in state) == list(range(7))


def test_run_tiles_runs_neighbours_in_separate_rounds(monkeypatch):
    monkeypatch.setattr(tiles, "THREADS", 2)
    order = []
    tiles.run_tiles(range(6), lambda state, tile: order.append(tile), list, neighbours_overlap=True)
    assert sorted(order[:3]) == [0, 2, 4]
    assert sorted(order[3:]) == [1, 3, 5]


def test_run_tiles_as_free_hands_each_tile_to_the_thread_that_is_free(monkeypatch):
    # A thread held up on tile 0 until tile 9 is done leaves tiles 1 to 9 to the
    # other thread (in fixed turns it would have run 2, 4, 6 and 8 too).
    monkeypatch.setattr(tiles, "THREADS", 2)
    last_done = threading.Event()

    def work(state, tile):
        if tile == 0:
            state.append(last_done.wait(10))
        state.append(tile)
        if tile == 9:
            last_done.set()

    states = tiles.run_tiles(range(10), work, list, as_free=True)
    assert sorted(map(len, states)) == [2, 9]
    held, other = sorted(states, key=len)
    assert held == [True, 0] and sorted(other) == list(range(1, 10))


def test_run_tiles_raises_a_worker_exception(monkeypatch):
    monkeypatch.setattr(tiles, "THREADS", 2)

    def work(state, tile):
        if tile == 3:
            raise ZeroDivisionError("tile 3")

    with pytest.raises(ZeroDivisionError, match="tile 3"):
        tiles.run_tiles(range(6), work, list)


@pytest.mark.parametrize("value, expected", [("3", 3), (" 1 ", 1), ("0", 1), ("", None)])
def test_threads_from_the_environment(monkeypatch, value, expected):
    monkeypatch.setenv("CONVCLI_THREADS", value)
    if expected is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        expected = max(1, cores or os.cpu_count() or 1)
    assert tiles._default_threads() == expected


def test_threads_from_the_environment_must_be_a_number(monkeypatch):
    monkeypatch.setenv("CONVCLI_THREADS", "two")
    with pytest.raises(ValueError, match="CONVCLI_THREADS"):
        tiles._default_threads()


def test_run_tiles_threads_take_the_callers_error_handling(monkeypatch):
    monkeypatch.setattr(tiles, "THREADS", 2)
    inf = np.array([np.inf])

    def work(state, tile):
        state.append(
            float((inf - inf)[0])
        )  # invalid: a RuntimeWarning (an error here) unless ignored

    with np.errstate(invalid="ignore"):
        states = tiles.run_tiles(range(4), work, list)
    assert all(np.isnan(v) for state in states for v in state) and len(states) == 2


@pytest.mark.parametrize("mode", POOL_MODES)
def test_pooling_non_finite_input_across_threads_emits_no_warnings(mode):
    A = np.zeros((2, 40, 40, 3))
    A[:, ::7, ::5, 0], A[:, 3::11, ::3, 1], A[:, 1::9, 2::4, 2] = np.inf, -np.inf, np.nan
    with engine(400, 2):
        P, cache = pool_forward(A, {"f": 3, "stride": 2}, mode)
        dA = pool_backward(np.full_like(P, np.inf), cache, mode)
    assert dA.shape == A.shape


def test_conv_infinite_bias_and_input_give_nan_without_warnings():
    A = np.full((1, 3, 3, 1), -np.inf)
    Z, cache = conv_forward(
        A, np.ones((1, 1, 1, 1)), np.full((1, 1, 1, 1), np.inf), {"stride": 1, "pad": 0}
    )
    assert np.isnan(Z).all()
    dZ = np.zeros_like(Z)
    dZ[0, 0, 0, 0], dZ[0, 1, 1, 0] = np.inf, -np.inf
    _, _, db = conv_backward(dZ, cache)
    assert np.isnan(db).all()


def blas_threads():
    return [
        lib.num_threads for lib in tiles._blas_controller().select(user_api="blas").lib_controllers
    ]


def test_blas_runs_on_the_calling_thread_while_tiles_run():
    before = blas_threads()
    if not before:
        pytest.skip("no BLAS library that threadpoolctl can see")
    seen = []
    with tiles.blas_on_calling_thread():  # nested blocks: the outer one restores
        tiles.run_tiles(range(4), lambda state, tile: seen.append(blas_threads()), list)
        assert blas_threads() == [1] * len(before)
    assert seen and all(threads == [1] * len(before) for threads in seen)
    assert blas_threads() == before


def test_small_calls_stay_on_the_calling_thread(monkeypatch):
    """More threads never slow a small call down: it is not handed to the thread pool."""
    handed = []
    pool = tiles._pool
    monkeypatch.setattr(tiles, "_pool", lambda: handed.append(1) or pool())
    monkeypatch.setattr(tiles, "THREADS", 4)
    rng = np.random.default_rng(0)
    A = rng.standard_normal((1, 48, 48, 3)).astype(np.float32)
    W = rng.standard_normal((3, 3, 3, 1)).astype(np.float32)
    b = np.zeros((1, 1, 1, 3), np.float32)
    hp = {"stride": 1, "pad": 1}
    Z, _ = depthwise_conv_forward(A, W, b, hp)  # 48 rows: 3 tiles a thread before
    assert_matches(Z, depthwise_conv_forward_loop(A, W, b, hp), np.float32)
    pool_forward(A, {"f": 2, "stride": 2}, "max")
    conv_forward(A, np.repeat(W, 3, axis=3), b, hp)
    assert handed == []
    assert tiles.thread_count(100, 10.5 * tiles.WORK_PER_THREAD) == 4
    assert tiles.thread_count(100, 1.5 * tiles.WORK_PER_THREAD) == 1
    # A call with the work for several threads hands tiles to them (the tap engine's
    # tiles: the matmul engine's are larger than this image).
    monkeypatch.setattr(tiles, "WORK_PER_THREAD", 1)
    monkeypatch.setattr(depthwise_layer, "DENSE_DEPTHWISE_CHANNELS", 0)
    Z, _ = depthwise_conv_forward(A, W, b, hp)
    assert handed and np.array_equal(Z, depthwise_conv_forward(A, W, b, hp)[0])


# --- merged forward tiles ----------------------------------------------------------------------


def plan_dtype():
    return np.dtype(np.float32)


def _forward(A, W, b, hparameters, merged_values, threads, monkeypatch):
    """conv_forward on row tiles of 2 output rows (4 blocks, K at most 210) and `merged_values`."""
    monkeypatch.setattr(correlate_engine, "TILE_VALUES", 2 * 4 * 210)
    monkeypatch.setattr(correlate_engine, "MERGED_VALUES", merged_values)
    monkeypatch.setattr(correlate_engine, "MIN_CHUNK", 5)  # chunks that cross output rows
    monkeypatch.setattr(correlate_engine, "MATMUL_WORK", 1)
    monkeypatch.setattr(tiles, "THREADS", threads)
    monkeypatch.setattr(tiles, "WORK_PER_THREAD", 1e-9)
    return conv_forward(A, W, b, hparameters)[0]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("stride, width", [(2, 31), (2, 29), (3, 46), (3, 44)])
def test_merged_forward_tiles_give_the_row_tiles_values_bit_for_bit(
    stride, width, threads, monkeypatch
):
    # With a stride above 1, several row tiles of one image are staged at once, and
    # X built and multiplied row tile by row tile: the same matmuls, so the same
    # values to the last bit, with results laid out as Z (n_W a multiple of the
    # block width 4) and not.
    rng = np.random.default_rng(11)
    A = rng.standard_normal((2, 150, width, 3)).astype(np.float32)
    W = rng.standard_normal((5, 5, 3, 3)).astype(np.float32)
    b = rng.standard_normal((1, 1, 1, 3)).astype(np.float32)
    hparameters = {"stride": stride, "pad": 2}
    alone = _forward(A, W, b, hparameters, 1, threads, monkeypatch)  # a row tile at a time
    merged = _forward(A, W, b, hparameters, 10**6, threads, monkeypatch)
    shape, n_C = A.shape, W.shape[3]
    plan = correlate_engine._Plan(shape, (5, 5), stride, (2,) * 4, n_C, plan_dtype())
    assert plan.tiles.images == 1 and plan.merge > 1
    assert correlate_engine._Plan(shape, (5, 5), 1, (2,) * 4, n_C, plan_dtype()).merge == 1
    assert np.array_equal(merged, alone)
    assert_matches(merged, conv_forward_windows(A, W, b, hparameters), np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_merged_forward_tiles_with_matmul_chunks_longer_than_a_row_tile(dtype, monkeypatch):
    # A matmul chunk of 20 rows, row tiles of 8 blocks, results laid out as Z: a row
    # tile followed by a single one of its merged tile has 16 rows of Z from its start,
    # fewer than its chunk, so its last matmul goes through the scratch Y; its 8 rows,
    # not the 16, are the ones written from it (the next row tile writes its own).
    monkeypatch.setattr(correlate_engine, "TILE_VALUES", 2 * 4 * 210)
    monkeypatch.setattr(correlate_engine, "MERGED_VALUES", 10**6)
    monkeypatch.setattr(correlate_engine, "MIN_CHUNK", 20)
    monkeypatch.setattr(correlate_engine, "MATMUL_WORK", 1)
    monkeypatch.setattr(tiles, "THREADS", 1)
    rng = np.random.default_rng(14)
    A = rng.standard_normal((1, 150, 31, 3)).astype(dtype)
    W = rng.standard_normal((5, 5, 3, 3)).astype(dtype)
    b = rng.standard_normal((1, 1, 1, 3)).astype(dtype)
    hparameters = {"stride": 2, "pad": 2}
    plan = correlate_engine._Plan(A.shape, (5, 5), 2, (2,) * 4, 3, np.dtype(dtype))
    assert plan.merge > 2 and plan.chunk == 20 and plan.tiles.rows * plan.nbw == 8
    Z, _ = conv_forward(A, W, b, hparameters)
    assert_matches(Z, conv_forward_windows(A, W, b, hparameters), dtype)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize(
    "height, width, nan_at, rows_hit",
    [
        (120, 31, (50, 7), range(24, 27)),
        (121, 29, (113, 0), range(56, 58)),  # only in the first matmul chunk of row tile 56-58
    ],
)
def test_merged_forward_tile_with_nan_replaces_only_its_row_tile(
    height, width, nan_at, rows_hit, monkeypatch
):
    # The finiteness check runs per row tile inside a merged tile: only the row
    # tile that met the NaN takes the plain path, as when it runs alone. The
    # second case: results not laid out as Z, and the NaN's row tiles share a
    # merged tile with the image's last, shorter row tile.
    rng = np.random.default_rng(12)
    A = rng.standard_normal((1, height, width, 3)).astype(np.float32)
    A[0, nan_at[0], nan_at[1], 1] = np.nan  # in the windows of output rows `rows_hit`
    W = rng.standard_normal((5, 5, 3, 3)).astype(np.float32)
    b = np.zeros((1, 1, 1, 3), np.float32)
    hparameters = {"stride": 2, "pad": 2}
    alone = _forward(A, W, b, hparameters, 1, 1, monkeypatch)
    merged = _forward(A, W, b, hparameters, 10**6, 1, monkeypatch)
    assert np.array_equal(merged, alone, equal_nan=True)
    want = conv_forward_loop(A.astype(np.float64), W, b, hparameters)
    np.testing.assert_array_equal(np.isnan(merged), np.isnan(want))
    Wd = W.astype(np.float32)
    _, tiles_out = correlate_engine.correlate(A, Wd, 2, (2,) * 4, plan_dtype(), partial=True)
    plan = correlate_engine._Plan(A.shape, (5, 5), 2, (2,) * 4, 3, plan_dtype())
    assert plan.merge > 1
    assert tiles_out and all(h1 - h0 <= plan.tiles.rows for _, _, h0, h1 in tiles_out)
    assert {h for _, _, h0, h1 in tiles_out for h in range(h0, h1)} >= set(rows_hit)
    merged_tiles = [h for (_, _, h, _), _ in plan.merged_tiles()]
    last_merged = next(h for h in reversed(merged_tiles) if h <= rows_hit[0])  # the NaN's
    shorter_last = plan.n_H % plan.tiles.rows and last_merged == merged_tiles[-1]
    assert (plan.nbw * plan.B != plan.n_W and shorter_last) == (width == 29)


@pytest.mark.parametrize("width", [31, 29])
def test_merged_forward_tiles_without_partial_give_none_for_a_nan(width, monkeypatch):
    # Without `partial`, a merged tile whose results are not finite makes the call
    # return None (the callers' plain path); finite inputs give the partial call's Z.
    rng = np.random.default_rng(13)
    A = rng.standard_normal((1, 121, width, 3)).astype(np.float32)
    W = rng.standard_normal((5, 5, 3, 3)).astype(np.float32)
    _forward(
        A, W, np.zeros((1, 1, 1, 3), np.float32), {"stride": 2, "pad": 2}, 10**6, 2, monkeypatch
    )  # the small tiles and chunks, two threads
    plan = correlate_engine._Plan(A.shape, (5, 5), 2, (2,) * 4, 3, plan_dtype())
    assert plan.merge > 1
    Z, tiles_out = correlate_engine.correlate(A, W, 2, (2,) * 4, plan_dtype(), partial=True)
    assert tiles_out == []
    assert np.array_equal(correlate_engine.correlate(A, W, 2, (2,) * 4, plan_dtype()), Z)
    A[0, 60, 3, 0] = np.nan
    with np.errstate(invalid="ignore"):
        assert correlate_engine.correlate(A, W, 2, (2,) * 4, plan_dtype()) is None
