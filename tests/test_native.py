"""The native engine (convcli.layers._engine.native and its C kernels) against the oracles.

The numpy engines have their own tests (test_separable.py, test_engine_tiles.py,
...); the layer tests (test_conv.py, ...) run on whichever engine is active,
and CI runs them once more with ``CONVCLI_ENGINE=numpy``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import ONE_PASS_KERNELS, built, conv_options, engine, run, run_without, vector_level
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import conv_forward_loop, depthwise_conv_forward_loop

from convcli import conv_forward, depthwise_conv_forward
from convcli.layers._engine import native

EPS32 = float(np.finfo(np.float32).eps)


def test_the_extension_is_built_where_ci_asks_for_it():
    # CI sets CONVCLI_REQUIRE_NATIVE=1: a build that silently fell back fails there.
    if os.environ.get("CONVCLI_REQUIRE_NATIVE") != "1":
        pytest.skip("CONVCLI_REQUIRE_NATIVE is not set")
    assert native._native is not None
    assert native.active()
    assert native.description().startswith("native ")


def within_float32_rounding(Z, exact, size, taps):
    """|Z - exact| within float32 rounding of the window's sum: eps * (taps + 2) * sum|a w|."""
    assert Z.dtype == np.float32 and Z.shape == exact.shape
    bound = EPS32 * (taps + 2) * size
    assert np.all(np.abs(Z.astype(np.float64) - exact) <= bound)


@st.composite
def conv_cases(draw, *, depthwise=False):
    f_h, f_w = draw(st.integers(1, 5), label="f_h"), draw(st.integers(1, 5), label="f_w")
    stride = draw(st.integers(1, 3), label="stride")
    dilation = draw(st.integers(1, 3), label="dilation")
    pad = draw(st.integers(0, 3), label="pad")
    C = draw(st.integers(1, 4 if depthwise else 5), label="C")
    n = draw(st.sampled_from([1, 2, 3, 5, 8, 9, 16] if not depthwise else [1, 2, 3]), label="n")
    span_h, span_w = dilation * (f_h - 1) + 1, dilation * (f_w - 1) + 1
    H = draw(st.integers(max(1, span_h - 2 * pad), 19), label="H")
    W = draw(st.integers(max(1, span_w - 2 * pad), 41), label="W")
    seed = draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    A = (rng.standard_normal((2, H, W, C)) * 50).astype(np.float32)
    Wt = rng.standard_normal((f_h, f_w, C, n)).astype(np.float32)
    b = rng.standard_normal((1, 1, 1, n * C if depthwise else n)).astype(np.float32)
    return A, Wt, b, {"stride": stride, "pad": pad, "dilation": dilation}


@built
@given(case=conv_cases())
@settings(max_examples=80, deadline=None)
def test_conv_forward_equals_the_loops(case):
    A, W, b, hp = case
    with engine("native"):
        Z, cache = conv_forward(A, W, b, hp)
    assert cache[0] is A
    exact = conv_forward_loop(A, W, b, hp)
    size = conv_forward_loop(np.abs(A), np.abs(W), np.abs(b), hp)
    within_float32_rounding(Z, exact, size, W.shape[0] * W.shape[1] * W.shape[2])


@built
@given(case=conv_cases(depthwise=True))
@settings(max_examples=60, deadline=None)
def test_depthwise_conv_forward_equals_the_loops(case):
    A, W, b, hp = case
    with engine("native"):
        Z, _ = depthwise_conv_forward(A, W, b, hp)
    exact = depthwise_conv_forward_loop(A, W, b, hp)
    size = depthwise_conv_forward_loop(np.abs(A), np.abs(W), np.abs(b), hp)
    within_float32_rounding(Z, exact, size, W.shape[0] * W.shape[1])


@built
@given(case=conv_cases())
@settings(max_examples=40, deadline=None)
def test_both_vector_levels_give_the_same_bits(case):
    A, W, b, hp = case
    results = []
    for level in native.vector_levels():
        with engine("native"), vector_level(level):
            results.append(conv_forward(A, W, b, hp)[0])
            results.append(
                depthwise_conv_forward(A, W[..., :1], b[..., :1].repeat(A.shape[3], axis=3), hp)[0]
            )
    for a, b_ in zip(results[2:], results[:-2], strict=False):
        np.testing.assert_array_equal(a, b_)


INTEGER_KERNELS = {
    "vertical": [[1, 0, -1]] * 3,
    "sobel 5x5": np.outer([1, 4, 6, 4, 1], [1, 2, 0, -2, -1]),
    "laplacian": [[0, 1, 0], [1, -4, 1], [0, 1, 0]],
    "box 7x7": np.ones((7, 7)),
    "emboss": [[-2, -1, 0], [-1, 1, 1], [0, 1, 2]],
}


@built
@pytest.mark.parametrize("name", list(INTEGER_KERNELS))
@pytest.mark.parametrize("stride", [1, 2])
def test_integer_samples_and_kernels_equal_the_numpy_engine_bit_for_bit(name, stride):
    rng = np.random.default_rng(7)
    A = rng.integers(0, 256, (2, 61, 83, 3)).astype(np.float32)
    K = np.asarray(INTEGER_KERNELS[name], np.float32)
    calls = [
        (conv_forward, K[:, :, None, None].repeat(3, axis=2), np.zeros((1, 1, 1, 1))),
        (conv_forward, K[:, :, None, None], np.zeros((1, 1, 1, 1))),  # one channel
        (depthwise_conv_forward, K[:, :, None, None].repeat(3, axis=2), np.zeros((1, 1, 1, 3))),
    ]
    for layer, W, b in calls:
        A_in = A[..., :1] if W.shape[2] == 1 else A
        hp = {"stride": stride, "pad": K.shape[0] // 2}
        with engine("native"):
            Z_native, _ = layer(A_in, W, b.astype(np.float32), hp)
        with engine("numpy"):
            Z_numpy, _ = layer(A_in, W, b.astype(np.float32), hp)
        np.testing.assert_array_equal(Z_native, Z_numpy)


@built
def test_a_gaussian_by_two_passes_is_within_rounding_of_the_loops():
    rng = np.random.default_rng(3)
    g = np.exp(-0.5 * ((np.arange(15) - 7) / 3.0) ** 2)
    K = np.outer(g, g / g.sum()).astype(np.float32)[:, :, None, None]
    A = rng.random((1, 40, 57, 1), dtype=np.float32) * 255
    b = np.full((1, 1, 1, 1), 0.5, np.float32)
    hp = {"stride": 1, "pad": 7}
    with engine("native"):
        Z, _ = conv_forward(A, K, b, hp)
    exact = conv_forward_loop(A, K, b, hp)
    size = conv_forward_loop(np.abs(A), np.abs(K), np.abs(b), hp)
    within_float32_rounding(Z, exact, size, 30)


@built
@pytest.mark.parametrize("kernel", ["gaussian", "general"])
def test_nan_and_inf_reach_the_outputs_their_windows_hold(kernel):
    # The separable passes give way to the plain path for rows that are not finite;
    # the direct correlation multiplies only under the taps, as the loops do.
    rng = np.random.default_rng(5)
    A = rng.standard_normal((1, 30, 37, 1)).astype(np.float32)
    A[0, 10, 11], A[0, 20, 30], A[0, 3, 3] = np.inf, np.nan, -np.inf
    if kernel == "gaussian":
        g = np.array([1, 4, 6, 4, 1, 0.5], np.float32)
        K = np.outer(g, g)[:, :, None, None]
    else:
        K = rng.standard_normal((5, 6, 1, 1)).astype(np.float32)
    b = np.zeros((1, 1, 1, 1), np.float32)
    hp = {"stride": 1, "pad": 2, "dilation": 1}
    with engine("native"):
        Z, _ = conv_forward(A, K, b, hp)
    exact = conv_forward_loop(A, K, b, hp)
    np.testing.assert_array_equal(np.isnan(Z), np.isnan(exact))
    np.testing.assert_array_equal(np.isinf(Z), np.isinf(exact))
    finite = np.isfinite(exact)
    size = conv_forward_loop(np.abs(np.nan_to_num(A, posinf=0, neginf=0)), np.abs(K), b, hp)
    assert np.all(np.abs(Z[finite] - exact[finite]) <= EPS32 * 40 * size[finite])


@built
def test_a_band_of_rows_gets_the_whole_images_values():
    # Each output is its own sum: any band of rows, wherever it starts, is bit-exact.
    rng = np.random.default_rng(11)
    A = rng.standard_normal((1, 300, 90, 3)).astype(np.float32)
    W = rng.standard_normal((5, 5, 3, 4)).astype(np.float32)
    b = np.zeros((1, 1, 1, 4), np.float32)
    with engine("native"):
        whole, _ = conv_forward(A, W, b, {"stride": 1, "pad": 0})
        band, _ = conv_forward(A[:, 37:120], W, b, {"stride": 1, "pad": 0})
    np.testing.assert_array_equal(band, whole[:, 37:116])


@built
def test_version_and_debug_name_the_engine(tmp_path):
    result = run("--version")
    assert f"engine: native {native._native.vector_level()}" in result.output
    env = {**os.environ, "CONVCLI_ENGINE": "numpy"}
    forced = subprocess.run(
        [sys.executable, "-m", "convcli", "--version"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "engine: numpy (CONVCLI_ENGINE=numpy)" in forced.stdout
    picture = tmp_path / "a.png"
    from helpers import make_image

    make_image(picture, "RGB", seed=1)
    result = run("conv", "-k", "vertical", "--debug", picture, "-o", tmp_path / "out")
    assert result.exit_code == 0
    assert "convcli: engine: native" in result.stderr


def test_without_the_extension_the_numpy_engines_run_and_say_so(tmp_path):
    result = run_without("convcli.layers._engine._native", "--version")
    assert result.returncode == 0
    assert "engine: numpy (no compiled extension" in result.stdout


def test_a_bad_engine_setting_is_one_line(tmp_path):
    env = {**os.environ, "CONVCLI_ENGINE": "fast"}
    result = subprocess.run(
        [sys.executable, "-m", "convcli", "kernels"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "CONVCLI_ENGINE must be native or numpy, got 'fast'" in result.stderr
    assert "Traceback" not in result.stderr


# --- channel sums and 8-bit levels ------------------------------------------------------------


@built
@pytest.mark.parametrize("channels", [2, 3, 4, 5])
def test_the_channel_sum_equals_numpys(channels):
    from convcli.app.conv_pixels import channel_sum_padded

    rng = np.random.default_rng(channels)
    colour = rng.integers(0, 256, (2, 23, 37, channels), dtype=np.uint8)
    colour[0, 0, 0] = 255  # the largest sum
    for widths, border in (((0, 0, 0, 0), "constant"), ((2, 1, 3, 4), "reflect")):
        with engine("native"):
            ours = channel_sum_padded(colour, widths, border)
        with engine("numpy"):
            reference = channel_sum_padded(colour, widths, border)
        np.testing.assert_array_equal(ours, reference)
        top, _, left, _ = widths
        inside = ours[:, top : top + 23, left : left + 37, 0]
        np.testing.assert_array_equal(inside, colour.sum(axis=3, dtype=np.int64))


@built
@given(
    seed=st.integers(0, 2**32 - 1),
    shape=st.tuples(st.integers(1, 2), st.integers(1, 19), st.integers(1, 41), st.integers(1, 4)),
    kernel=st.sampled_from(sorted(ONE_PASS_KERNELS)),
    widths=st.tuples(*[st.integers(0, 6)] * 4),
    border=st.sampled_from(["constant", "edge", "reflect", "symmetric", "wrap"]),
    bias=st.sampled_from([0.0, 0.5, -3.0]),
    streamed=st.booleans(),
)
@settings(max_examples=150, deadline=None)
def test_the_channel_sum_correlated_in_one_pass_has_the_bits_of_the_summed_picture(
    seed, shape, kernel, widths, border, bias, streamed
):
    # The 8-bit channels summed row by row inside the passes give what the float32 sum,
    # bordered and handed to conv_forward, gives: the same bits, at every vector level,
    # the results stored past the caches (as a photo's are) or not.
    from convcli.app import conv_pixels

    rng = np.random.default_rng(seed)
    colour = rng.integers(0, 256, shape, dtype=np.uint8)
    weights = np.asarray(ONE_PASS_KERNELS[kernel], np.float32)
    top, bottom, left, right = widths
    if shape[1] + top + bottom < weights.shape[0] or shape[2] + left + right < weights.shape[1]:
        return  # no window fits
    op = conv_options([weights], widths, border, bias, channels="sum")
    with engine("native"), pytest.MonkeyPatch.context() as patch:
        patch.setattr(conv_pixels, "summed_in_one_pass", lambda *_: None)
        expected = conv_pixels.summed_maps(op, colour)
    for level in native.vector_levels():
        with engine("native"), vector_level(level), pytest.MonkeyPatch.context() as patch:
            patch.setattr(native, "STREAMED_BYTES", 0 if streamed else 1 << 62)
            got = conv_pixels.summed_in_one_pass(op, colour, op.kernels[0])
        if kernel == "laplacian":
            assert got is None
            continue
        assert got is not None and got.shape == expected.shape
        np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


@built
def test_a_channel_sum_whose_passes_overflow_takes_the_summed_picture():
    # inf from huge weights: the rows are the plain path's, as conv_forward gives them.
    from convcli.app import conv_pixels

    colour = np.full((1, 9, 11, 3), 255, np.uint8)
    op = conv_options(
        [np.outer([1, 1, 1], [3e38, 0, -3e38])], (1, 1, 1, 1), "reflect", 0.0, channels="sum"
    )
    with engine("native"):
        assert conv_pixels.summed_in_one_pass(op, colour, op.kernels[0]) is None
        Z = conv_pixels.summed_maps(op, colour)
    assert np.isnan(Z).any() or np.isinf(Z).any()


@built
@pytest.mark.parametrize("f_h", [native.SEPARABLE_MAX_TAPS, native.SEPARABLE_MAX_TAPS + 1])
def test_a_rank_1_kernel_taller_than_the_passes_take_gives_the_numpy_engines_values(f_h):
    # _native.c's passes take at most 4096 rows (MAX_TAPS); a taller kernel takes another path.
    A = np.arange(f_h * 3, dtype=np.float32).reshape(1, f_h, 3, 1) % 7
    K = np.ones((f_h, 2, 1, 1), np.float32)
    b = np.full((1, 1, 1, 1), 0.5, np.float32)
    with engine("numpy"):
        expected, _ = conv_forward(A, K, b, {"stride": 1, "pad": 0})
    with engine("native"):
        got, _ = conv_forward(A, K, b, {"stride": 1, "pad": 0})
    np.testing.assert_array_equal(got, expected)
    assert (native.separable_factors(K[:, :, 0, 0]) is None) == (f_h > native.SEPARABLE_MAX_TAPS)


@built
@pytest.mark.parametrize("f_h", [native.SEPARABLE_MAX_TAPS, native.SEPARABLE_MAX_TAPS + 1])
def test_a_channel_sum_with_a_kernel_taller_than_the_passes_take_is_the_summed_pictures(f_h):
    # A picture 3 columns wide keeps the sum's rows under SUM_RING_BYTES: only the taps' limit
    # turns the one-pass path away.
    from convcli.app import conv_pixels

    colour = (np.arange(f_h * 9).reshape(1, f_h, 3, 3) % 251).astype(np.uint8)
    op = conv_options([np.ones((f_h, 2))], (0, 0, 0, 0), "constant", 0.0, channels="sum")
    with engine("numpy"):
        expected = conv_pixels.summed_maps(op, colour)
    with engine("native"):
        got = conv_pixels.summed_maps(op, colour)
        ring = native.sum_correlate_separable(
            colour, np.ones(f_h), np.ones(2), np.arange(f_h), np.arange(3), 0, 0.0
        )
    np.testing.assert_array_equal(got, expected)
    assert (ring is None) == (f_h > native.SEPARABLE_MAX_TAPS)


@built
def test_a_border_source_outside_the_picture_is_refused():
    colour = np.zeros((1, 4, 5, 3), np.uint8)
    rows, columns = np.array([0, 0, 1, 2, 3, 3]), np.array([0, 0, 1, 2, 3, 4, 4])  # edge
    u = v = np.ones(3, np.float32)
    rows[0] = 4  # the picture has rows 0..3
    with pytest.raises(ValueError, match="row source outside"):
        native.sum_correlate_separable(colour, u, v, rows, columns, 1, 0.0)
    rows[0], columns[-1] = -1, 5  # -1: a zero, allowed
    with pytest.raises(ValueError, match="column source outside"):
        native.sum_correlate_separable(colour, u, v, rows, columns, 1, 0.0)


@built
@given(seed=st.integers(0, 2**32 - 1), shift=st.sampled_from([8, 12, 16]))
@settings(max_examples=40, deadline=None)
def test_magnitude_bins_count_numpys_patterns(seed, shift):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((23, 31)) * 10.0 ** float(rng.integers(-40, 30))).astype(np.float32)
    whole = rng.random(x.shape) < 0.3
    x[whole] = np.round(x[whole])
    x.flat[rng.integers(0, x.size, 5)] = [np.nan, np.inf, -np.inf, -0.0, 1e-45]
    r0, c0 = int(rng.integers(0, 23)), int(rng.integers(0, 31))
    r1, c1 = int(rng.integers(r0, 24)), int(rng.integers(c0, 32))
    bins, mixed = np.zeros(1 << (31 - shift), np.int64), np.zeros(1 << (31 - shift), np.uint8)
    bins[3], mixed[5] = 7, 1  # counted on top of what is there
    count, largest = native.magnitude_bins(x, (r0, r1, c0, c1), bins, mixed, shift)
    window = np.abs(x[r0:r1, c0:c1])
    finite = window[np.isfinite(window)]
    patterns = finite.view(np.uint32)
    expected = np.bincount(patterns >> shift, minlength=bins.size)
    expected[3] += 7
    np.testing.assert_array_equal(bins, expected)
    expected_mixed = np.zeros_like(mixed)
    expected_mixed[patterns[(patterns & ((1 << shift) - 1)) != 0] >> shift] = 1
    expected_mixed[5] = 1
    np.testing.assert_array_equal(mixed, expected_mixed)
    assert count == finite.size
    assert largest == (float(finite.max()) if finite.size else 0.0)


def _levels_by_numpy(x, scale):
    """The float32 steps of the numpy path: |x|, times scale, clip, rint."""
    v = np.abs(x) * np.float32(scale)
    return np.rint(np.clip(v, 0, 255)).astype(np.uint8)


@built
def test_levels_round_halves_to_even_as_numpy_does():
    halves = np.arange(0, 256, dtype=np.float32) + np.float32(0.5)
    x = np.concatenate([halves, -halves, np.float32([0, -0.0, 254.49998, 300, 1e30])])
    for level in native.vector_levels():
        with vector_level(level):
            levels = native.levels_u8(x, np.float32(1), 3e38)
        np.testing.assert_array_equal(levels, _levels_by_numpy(x, 1))
    assert levels[:4].tolist() == [0, 2, 2, 4]  # 0.5, 1.5, 2.5, 3.5 to even
    for bad in (np.nan, np.inf, 1e38):
        assert native.levels_u8(np.float32([1, bad, 2]), np.float32(1), 1e37) is None


@built
@pytest.mark.parametrize("margin", [0, 3])
def test_values_at_least_a_threshold_are_numpys(margin):
    rng = np.random.default_rng(margin)
    x = (rng.standard_normal((61, 203)) * 10).astype(np.float32)
    threshold = np.float32(17.5)
    inside = x[margin : 61 - margin, margin : 203 - margin]
    expected = np.abs(inside)[np.abs(inside) >= threshold]
    found = native.abs_at_least(x, margin, threshold, x.size)
    np.testing.assert_array_equal(found, expected)
    assert native.abs_at_least(x, margin, threshold, expected.size - 1) is None


@built
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_large_maps_bands_give_the_whole_maps_values(threads, monkeypatch):
    # Over a band's worth of values (TILE_VALUES): bands on the layer threads, each scan
    # into room for an eighth of its values; a band with more is scanned again.
    from convcli.layers._engine import tiles

    monkeypatch.setattr(tiles, "THREADS", threads)
    rng = np.random.default_rng(threads)
    x = (rng.standard_normal((1500, 1500)) * 10).astype(np.float32)
    x[300:340] = 100  # one band's values nearly all at the threshold
    margin, threshold = 5, np.float32(17.5)
    assert (len(native._bands(range(margin, 1500 - margin), 1500)) > 1) == (threads > 1)
    inside = np.abs(x[margin:-margin, margin:-margin])
    expected = inside[inside >= threshold]
    np.testing.assert_array_equal(native.abs_at_least(x, margin, threshold, x.size), expected)
    assert native.abs_at_least(x, margin, threshold, expected.size) is not None
    assert native.abs_at_least(x, margin, threshold, expected.size - 1) is None
    np.testing.assert_array_equal(native.levels_u8(x, np.float32(3), 3e38), _levels_by_numpy(x, 3))
    x[-1, -1] = np.nan  # in the last band only
    assert native.levels_u8(x, np.float32(3), 3e38) is None


@built
@given(
    seed=st.integers(0, 2**32 - 1),
    margin=st.sampled_from([0, 1, 5]),
    spread=st.sampled_from([1.0, 1e-3, 1e4]),
)
@settings(max_examples=30, deadline=None)
def test_robust_levels_equal_the_numpy_engines(seed, margin, spread):
    from convcli.levels.mapping import map_levels

    rng = np.random.default_rng(seed)
    x = (rng.laplace(size=(300, 310)) * spread).astype(np.float32)
    with engine("native"):
        ours, scale = map_levels(x, "robust", white=255, depth=8, margin=margin)
    with engine("numpy"):
        reference, reference_scale = map_levels(x, "robust", white=255, depth=8, margin=margin)
    np.testing.assert_array_equal(ours, reference)
    assert scale == reference_scale


@built
@pytest.mark.parametrize("f", [2, 3])
def test_max_pool_backward_equals_the_numpy_engine(f):
    from convcli import pool_backward, pool_forward

    rng = np.random.default_rng(f)
    A = rng.integers(0, 4, (2, 7 * f + 1, 5 * f + 2, 3)).astype(np.float32)  # ties, margins
    hp = {"f": f, "stride": f}
    out, cache = pool_forward(A, hp, mode="max")
    dA = rng.standard_normal(out.shape).astype(np.float32)
    dA[0, 1, 1, 0], dA[1, 2, 3, 2], dA[0, 0, 0, 1] = np.nan, np.inf, -2.0
    with engine("native"):
        ours = pool_backward(dA, cache, mode="max")
    with engine("numpy"):
        reference = pool_backward(dA, cache, mode="max")
    np.testing.assert_array_equal(ours.view(np.uint32), reference.view(np.uint32))


@built
@pytest.mark.parametrize("kernel", ["box", "vertical", "gaussian 7x7"])
def test_a_channel_gets_the_same_bits_alone_or_with_others(kernel):
    # Depthwise calls of one rank-1 kernel run the channels interleaved; each channel,
    # NaN and inf included, equals its call alone (as --channels each makes it).
    rng = np.random.default_rng(9)
    A = (rng.standard_normal((2, 37, 41, 3)) * 60).astype(np.float32)
    A[0, 5, 7, 1], A[1, 20, 3, 2], A[0, 30, 40, 0] = np.nan, np.inf, -np.inf
    g = np.array([1, 6, 15, 20, 15, 6, 1], np.float32) / 64
    K = {
        "box": np.full((3, 3), 1 / 9),
        "vertical": [[1, 0, -1]] * 3,
        "gaussian 7x7": np.outer(g, g),
    }[kernel]
    W = np.asarray(K, np.float32)[:, :, None, None].repeat(3, axis=2)
    b = np.float32([0.5, -2.0, 0.0]).reshape(1, 1, 1, 3)
    hp = {"stride": 1, "pad": W.shape[0] // 2}
    with engine("native"):
        together, _ = depthwise_conv_forward(A, W, b, hp)
        for c in range(3):
            alone, _ = depthwise_conv_forward(
                A[..., c : c + 1], W[:, :, c : c + 1], b[..., c : c + 1], hp
            )
            np.testing.assert_array_equal(
                together[..., c].view(np.uint32), alone[..., 0].view(np.uint32)
            )


@st.composite
def _halved_rows(draw):
    """Float32 rows (2k, W, C) of any magnitude, with NaN, inf and subnormal values."""
    k, width, channels = draw(st.integers(0, 4)), draw(st.integers(1, 37)), draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    scale = 10.0 ** float(rng.integers(-44, 38))
    rows = (rng.standard_normal((2 * k, width, channels)) * scale).astype(np.float32)
    if rows.size:
        specials = [np.nan, np.inf, -np.inf, 3.4e38, -3.4e38, 1e-45]
        rows.flat[rng.integers(0, rows.size, 4)] = rng.choice(specials, 4)
    return rows


@built
@given(rows=_halved_rows())
@settings(max_examples=200, deadline=None)
def test_the_pyramids_2x2_means_are_numpys_bits_at_every_vector_level(rows):
    from convcli.io.pyramid import _mean_2x2

    with engine("numpy"), np.errstate(all="ignore"):
        expected = _mean_2x2(rows)
    for level in native.vector_levels():
        with engine("native"), vector_level(level):
            got = native.mean_2x2(rows)
        assert got.shape == expected.shape
        np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


# --- arrays at odd addresses --------------------------------------------------------------------


def _unaligned(x):
    """A copy of `x` one byte past an aligned address: C-contiguous, not aligned."""
    out = np.frombuffer(bytearray(x.nbytes + 1), x.dtype, x.size, offset=1).reshape(x.shape)
    out[...] = x
    assert out.flags.c_contiguous and not out.flags.aligned
    return out


def _handed_over(monkeypatch, name):
    """The arrays handed to the C kernel `name` in each of its calls during the test; the
    kernel still runs."""
    kernel, calls = getattr(native._native, name), []

    def record(*args):
        calls.append([a for a in args if isinstance(a, np.ndarray)])
        return kernel(*args)

    monkeypatch.setattr(native._native, name, record)
    return calls


def _all_aligned(calls):
    return all(a.flags.c_contiguous and a.flags.aligned for arrays in calls for a in arrays)


@built
@pytest.mark.parametrize(
    ("kernel", "c_kernel"), [("general", "correlate"), ("gaussian", "separable")]
)
def test_an_unaligned_input_is_copied_before_the_c_kernels_read_it(monkeypatch, kernel, c_kernel):
    # np.ascontiguousarray keeps a float32 array at an odd address: the C code's float
    # reads of it are undefined behaviour (UBSan: misaligned address).
    rng = np.random.default_rng(13)
    A = (rng.standard_normal((2, 30, 37, 1)) * 50).astype(np.float32)
    g = np.array([1, 6, 15, 20, 15, 6, 1], np.float32) / 64
    K = {"general": rng.standard_normal((3, 4, 1, 2)), "gaussian": np.outer(g, g)[:, :, None, None]}
    W = K[kernel].astype(np.float32)
    b = np.full((1, 1, 1, W.shape[3]), 0.5, np.float32)
    hp = {"stride": 1, "pad": 0}
    with engine("native"):
        expected, _ = conv_forward(A, W, b, hp)
        calls = _handed_over(monkeypatch, c_kernel)
        got, _ = conv_forward(_unaligned(A), W, b, hp)
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))
    assert calls and _all_aligned(calls)


@built
def test_max_pooling_of_unaligned_arrays_hands_the_c_kernels_aligned_ones(monkeypatch):
    from convcli import pool_backward, pool_forward

    rng = np.random.default_rng(17)
    A = rng.integers(0, 4, (2, 14, 11, 3)).astype(np.float32)  # ties
    hp = {"f": 2, "stride": 2}
    with engine("native"):
        out, cache = pool_forward(A, hp, mode="max")
        dA = rng.standard_normal(out.shape).astype(np.float32)
        expected = pool_backward(dA, cache, mode="max")
        calls = _handed_over(monkeypatch, "spread_claims")
        out_unaligned, cache_unaligned = pool_forward(_unaligned(A), hp, mode="max")
        got = pool_backward(_unaligned(dA), cache_unaligned, mode="max")
    np.testing.assert_array_equal(out_unaligned, out)
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))
    assert _all_aligned(calls)  # the unaligned dA: numpy's spread, not the C kernel's


@built
def test_ranks_of_unaligned_values_are_selected_from_an_aligned_copy(monkeypatch):
    rng = np.random.default_rng(19)
    values = rng.standard_normal(1001).astype(np.float32)
    values[[5, 500]] = np.nan, -np.inf
    expected = np.partition(values, [3, 700])[[3, 700]]
    calls = _handed_over(monkeypatch, "select_ranks")
    got = native.select_ranks(_unaligned(values), 3, 700)
    np.testing.assert_array_equal(np.array(got), expected)
    assert calls and _all_aligned(calls)


@built
def test_arrays_written_in_place_at_odd_addresses_are_refused():
    # A copy would be written, not the caller's array: a clear error instead.
    x = np.ones((3, 4), np.float32)
    bins, mixed = _unaligned(np.zeros(1 << 15, np.int64)), np.zeros(1 << 15, np.uint8)
    with pytest.raises(ValueError, match="magnitude_bins: .* aligned"):
        native.magnitude_bins(x, (0, 3, 0, 4), bins, mixed, 16)
    with pytest.raises(ValueError, match="undo_differencing: .* aligned"):
        native.undo_differencing(_unaligned(np.zeros((2, 3, 1), np.uint16)))
    with pytest.raises(ValueError, match="sum_channels: .* aligned"):
        native.sum_channels(
            np.zeros((1, 2, 2, 3), np.uint8), _unaligned(x.reshape(1, 3, 4, 1)), 0, 0
        )


@built
@pytest.mark.parametrize("bias", [0.0, -0.0])
@pytest.mark.parametrize("sign", [1, -1])
@pytest.mark.parametrize("kernel", ["sobel 5x5", "box 7x7"])
def test_zero_sums_of_the_two_passes_have_the_numpy_engines_sign(monkeypatch, kernel, sign, bias):
    """Each pass starts from its first term, so a zero sum of negative terms (-box on
    zeros) is -0 there; the bias added last (a zero bias taken as +0) makes it +0, as
    numpy's sums give it: the bits, signs of zeros included, are the numpy engine's."""
    calls, passes = [], native.correlate_separable
    monkeypatch.setattr(native, "separable_is_cheaper", lambda *_: True)
    monkeypatch.setattr(native, "correlate_separable", lambda *a: calls.append(1) or passes(*a))
    A = np.zeros((1, 12, 14, 1), np.float32)
    A[0, 6:, 7:] = np.random.default_rng(5).integers(1, 256, (6, 7, 1))
    K = sign * np.asarray(INTEGER_KERNELS[kernel], np.float32)[:, :, None, None]
    b = np.full((1, 1, 1, 1), bias, np.float32)
    hp = {"stride": 1, "pad": K.shape[0] // 2}
    with engine("native"):
        Z_native, _ = conv_forward(A, K, b, hp)
    with engine("numpy"):
        Z_numpy, _ = conv_forward(A, K, b, hp)
    assert calls and (Z_native == 0).any()
    np.testing.assert_array_equal(Z_native.view(np.uint32), Z_numpy.view(np.uint32))
