"""StreamedMapping: map_levels of a whole map, bit for bit, from its row strips."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from helpers import engine as engine_of
from hypothesis import given
from hypothesis import strategies as st

from convcli.choices import MAPPINGS
from convcli.levels.mapping import map_levels
from convcli.levels.percentiles import ROBUST_PERCENTILE, _linear_rank
from convcli.levels.stats import StreamedMapping

LEVELS = [(8, 255), (16, 65535), (8, 1.0), (16, 1.0)]
RADIX = 0  # max_kept that makes robust take its two-pass radix selection
KINDS = [
    "normal",
    "ties",
    "constant",
    "zeros",
    "huge",
    "non-finite",
    "all non-finite",
    "negative zeros",
    "tiny",
    "positive with NaN",
]


def streamed(x, method, *, depth, white, margin=0, cuts=(), max_kept=1 << 20):
    """The levels and scale of `x` mapped strip by strip (strips cut at rows `cuts`)."""
    height, width = x.shape
    plan = StreamedMapping(
        method,
        white=white,
        depth=depth,
        height=height,
        width=width,
        margin=margin,
        max_kept=max_kept,
    )
    bounds = [0, *cuts, height]
    strips = list(zip(bounds, bounds[1:], strict=False))
    pass_index = 0
    while pass_index < plan.passes:  # robust's second pass may turn out not to be needed
        for start, stop in strips:
            plan.add(pass_index, start, x[start:stop])
        pass_index += 1
    levels = np.concatenate([plan.levels(x[start:stop]) for start, stop in strips])
    return levels, plan.scale(), plan.passes


def assert_same_mapping(x, method, *, depth, white, margin=0, cuts=(), max_kept=1 << 20):
    before = x.copy()
    want_levels, want = map_levels(x, method, white=white, depth=depth, margin=margin)
    levels, scale, _ = streamed(
        x, method, depth=depth, white=white, margin=margin, cuts=cuts, max_kept=max_kept
    )
    np.testing.assert_array_equal(levels, want_levels)
    assert levels.dtype == want_levels.dtype
    assert scale == want
    for got, expected in zip(scale[1:3], want[1:3], strict=True):  # the same bits, sign of 0 too
        assert np.float64(got).tobytes() == np.float64(expected).tobytes()
    np.testing.assert_array_equal(x, before)


def sample_map(kind: str, shape, seed: int) -> np.ndarray:
    g = np.random.default_rng(seed)
    if kind == "ties":
        x = g.integers(-3, 4, shape).astype(np.float32)
    elif kind == "constant":
        x = np.full(shape, g.standard_normal(), np.float32)
    elif kind == "zeros":
        x = np.zeros(shape, np.float32)
    elif kind == "negative zeros":
        x = np.where(g.random(shape) < 0.5, -0.0, 0.0).astype(np.float32)
        x[g.random(shape) < 0.01] = 2.0
    elif kind == "tiny":  # subnormal float32 values
        x = (g.integers(0, 5, shape) * np.float32(1e-45)).astype(np.float32)
    elif kind == "positive with NaN":  # NaN counts as 0 in the range
        x = (1 + g.random(shape)).astype(np.float32)
        x[g.random(shape) < 0.2] = np.nan
    else:
        x = (g.standard_normal(shape) * 10.0 ** g.integers(-3, 4)).astype(np.float32)
    if kind == "huge":
        x[g.random(shape) < 0.05] = np.float32(3e38) * g.choice([-1, 1])
    elif kind == "non-finite":
        x[g.random(shape) < 0.1] = g.choice(np.array([np.nan, np.inf, -np.inf], np.float32))
    elif kind == "all non-finite":
        x = g.choice(np.array([np.nan, np.inf, -np.inf], np.float32), shape)
    return x


@st.composite
def mappings(draw):
    height, width = draw(st.integers(1, 60)), draw(st.integers(1, 60))
    short = min(height, width)
    # Margins leaving all of it, nothing, one pixel or two across.
    margin = draw(st.sampled_from([0, 1, 2, short // 2, (short - 1) // 2, short]))
    cuts = draw(st.lists(st.integers(1, max(1, height - 1)), max_size=6, unique=True))
    strip = draw(st.integers(1, height))  # or strips of one height
    cuts = (
        sorted(c for c in cuts if c < height)
        if draw(st.booleans())
        else list(range(strip, height, strip))
    )
    return dict(
        shape=(height, width),
        margin=margin,
        cuts=cuts,
        kind=draw(st.sampled_from(KINDS)),
        seed=draw(st.integers(0, 2**32 - 1)),
        levels=draw(st.sampled_from(LEVELS)),
        max_kept=draw(st.sampled_from([RADIX, 1 << 20])),
    )


@given(case=mappings())
def test_strips_give_the_levels_and_scale_of_the_whole_map(case):
    x = sample_map(case["kind"], case["shape"], case["seed"])
    depth, white = case["levels"]
    for method in MAPPINGS:
        assert_same_mapping(
            x,
            method,
            depth=depth,
            white=white,
            margin=case["margin"],
            cuts=case["cuts"],
            max_kept=case["max_kept"],
        )


def merged_in_parts(x, method, *, depth, white, margin=0, cuts=(), max_kept=1 << 20, seed=0):
    """The levels and scale of `x` from parts of each pass (strips cut at `cuts`), each part
    given its strips out of order, pickled, and merged in a shuffled order and grouping."""
    import pickle

    height, width = x.shape
    plan = StreamedMapping(
        method,
        white=white,
        depth=depth,
        height=height,
        width=width,
        margin=margin,
        max_kept=max_kept,
    )
    bounds = [0, *cuts, height]
    strips = list(zip(bounds, bounds[1:], strict=False))
    g = np.random.default_rng(seed)
    pass_index = 0
    while pass_index < plan.passes:
        parts = []
        for group in np.array_split(g.permutation(len(strips)), g.integers(1, len(strips) + 1)):
            part = plan.part(pass_index)
            for k in group:
                part.add(strips[k][0], x[strips[k][0] : strips[k][1]])
            parts.append(pickle.loads(pickle.dumps(part)))
        while len(parts) > 1:  # merged pairwise, in a random order
            a = parts.pop(int(g.integers(len(parts))))
            b = parts.pop(int(g.integers(len(parts))))
            parts.append(a.merge(b))
        plan.take(parts[0])
        pass_index += 1
    return plan.levels(x), plan.scale()


@given(case=mappings())
def test_parts_merged_in_any_order_give_the_levels_and_scale_of_the_whole_map(case):
    x = sample_map(case["kind"], case["shape"], case["seed"])
    depth, white = case["levels"]
    for method in MAPPINGS:
        want_levels, want = map_levels(x, method, white=white, depth=depth, margin=case["margin"])
        levels, scale = merged_in_parts(
            x,
            method,
            depth=depth,
            white=white,
            margin=case["margin"],
            cuts=case["cuts"],
            max_kept=case["max_kept"],
            seed=case["seed"],
        )
        np.testing.assert_array_equal(levels, want_levels)
        assert scale == want
        for got, expected in zip(scale[1:3], want[1:3], strict=True):
            assert np.float64(got).tobytes() == np.float64(expected).tobytes()


@pytest.mark.parametrize("max_kept", [RADIX, 70_000, 1 << 20])
def test_large_maps_merged_in_parts_trim_the_largest_as_strips_do(max_kept):
    """700x900 in 64-row strips: parts keep and trim their largest, or count histograms."""
    x = sample_map("ties", (700, 900), seed=3)
    for method in ("robust", "minmax"):
        want_levels, want = map_levels(x, method, white=255, depth=8, margin=3)
        levels, scale = merged_in_parts(
            x,
            method,
            depth=8,
            white=255,
            margin=3,
            cuts=list(range(64, 700, 64)),
            max_kept=max_kept,
        )
        np.testing.assert_array_equal(levels, want_levels)
        assert scale == want


def test_a_part_of_too_few_rows_or_another_pass_is_refused():
    x = np.arange(12, dtype=np.float32).reshape(4, 3) + np.float32(0.1)  # two passes
    plan = StreamedMapping("robust", white=255, depth=8, height=4, width=3, max_kept=0)
    part = plan.part(0)
    part.add(0, x[:3])
    with pytest.raises(ValueError, match="hold the map's 4 rows once"):
        plan.take(part)
    with pytest.raises(ValueError, match="pass_index must be 0"):
        plan.part(1)
    part.add(3, x[3:])
    plan.take(part)
    with pytest.raises(ValueError, match="another pass"):
        plan.part(1).merge(part)


@pytest.mark.parametrize("kind", ["normal", "ties", "non-finite", "huge", "negative zeros"])
@pytest.mark.parametrize("max_kept", [RADIX, 1 << 20])
def test_large_maps_take_the_sampled_percentile_and_match(kind, max_kept):
    """700x900: map_levels's percentile takes its sampled path (>= 65536 values);
    one pass keeps and trims the largest, two select by radix."""
    x = sample_map(kind, (700, 900), seed=len(kind))
    cuts = list(range(64, 700, 64)) if max_kept else [1, 2, 300, 301, 699]
    for method in MAPPINGS:
        assert_same_mapping(x, method, depth=8, white=255, margin=3, cuts=cuts, max_kept=max_kept)
    assert_same_mapping(x, "robust", depth=16, white=65535, cuts=cuts, max_kept=max_kept)


@pytest.mark.parametrize("max_kept", [RADIX, 1 << 20])
@pytest.mark.parametrize("shape", [(5, 7), (300, 250)])
def test_the_two_ranks_in_different_high_bins(shape, max_kept):
    """The values numpy interpolates between differ in their high 16 bits (1.0 and 4.0)."""
    n = shape[0] * shape[1]
    below, _ = _linear_rank(n, ROBUST_PERCENTILE)
    x = np.where(np.arange(n) <= below, 1.0, 4.0).astype(np.float32)
    x = np.random.default_rng(n).permutation(x).reshape(shape)
    assert np.percentile(np.abs(x), ROBUST_PERCENTILE) > 1.0
    assert_same_mapping(x, "robust", depth=8, white=255, cuts=[2], max_kept=max_kept)


@pytest.mark.parametrize("method, max_kept", [(m, 1 << 20) for m in MAPPINGS] + [("robust", RADIX)])
def test_a_four_thousand_square_map_in_strips_holds_memory_to_a_strip(method, max_kept):
    """4000x4000 float32 (64 MB) in 64-row strips, made strip by strip, never whole."""
    height = width = 4000

    def strips():
        for row0 in range(0, height, 64):
            g = np.random.default_rng([7, row0])
            yield row0, g.standard_normal((min(64, height - row0), width), dtype=np.float32)

    tracemalloc.start()
    try:
        plan = StreamedMapping(
            method, white=255, depth=8, height=height, width=width, margin=2, max_kept=max_kept
        )
        pass_index = 0
        while pass_index < plan.passes:
            for row0, strip in strips():
                plan.add(pass_index, row0, strip)
            pass_index += 1
        scale = plan.scale()
        for _, strip in strips():
            plan.levels(strip)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # A strip (1 MiB), its temporaries and 4.5 MiB of histograms; the map: 64 MiB.
    assert peak < 10 * 2**20, f"{peak / 2**20:.1f} MiB"
    if method == "robust":
        whole = np.concatenate([strip for _, strip in strips()])
        assert scale == map_levels(whole, method, white=255, depth=8, margin=2)[1]


@pytest.mark.parametrize("engine", ["native", "numpy"])
@pytest.mark.parametrize("values", ["integers", "fractions"])
def test_robust_of_integer_maps_takes_one_pass_of_histograms(engine, values):
    # A conv of 8-bit samples by an integer kernel: integers, whose float32 patterns have
    # their low 12 bits zero up to 2**11, so the high bits' histogram ends the selection.
    rng = np.random.default_rng(11)
    x = rng.integers(-2295, 2296, (300, 420)).astype(np.float32)
    if values == "fractions":
        x += np.float32(0.25)
    x[5, 7], x[200, 1] = np.nan, np.inf
    with engine_of(engine):
        plan = StreamedMapping(
            "robust", white=255, depth=8, height=300, width=420, margin=2, max_kept=RADIX
        )
        assert plan.passes == 2
        levels, scale, passes = streamed(
            x, "robust", depth=8, white=255, margin=2, cuts=[1, 100, 299], max_kept=RADIX
        )
    assert passes == (1 if values == "integers" else 2)
    want_levels, want = map_levels(x, "robust", white=255, depth=8, margin=2)
    np.testing.assert_array_equal(levels, want_levels)
    assert scale == want


def test_robust_of_a_map_with_nothing_finite_inside_takes_one_pass():
    x = np.full((300, 420), np.nan, np.float32)
    x[0, :] = 7.0  # in the margin only
    levels, scale, passes = streamed(x, "robust", depth=8, white=255, margin=2, max_kept=RADIX)
    assert passes == 1
    want_levels, want = map_levels(x, "robust", white=255, depth=8, margin=2)
    np.testing.assert_array_equal(levels, want_levels)
    assert scale == want


def test_passes_of_each_mapping():
    def passes(method, **options):
        return StreamedMapping(
            method, white=255, depth=8, height=4000, width=4000, **options
        ).passes

    assert [passes(m) for m in ("clip", "abs", "minmax", "offset")] == [0, 1, 1, 1]
    assert passes("robust") == 1  # the 80000 largest magnitudes are kept
    assert passes("robust", max_kept=50_000) == 2


def test_strips_out_of_order_and_missing_passes_are_refused():
    x = np.zeros((4, 3), np.float32)
    plan = StreamedMapping("minmax", white=255, depth=8, height=4, width=3)
    with pytest.raises(RuntimeError, match="1 passes"):
        plan.scale()
    with pytest.raises(ValueError, match="row0 must be 0"):
        plan.add(0, 2, x[2:])
    with pytest.raises(ValueError, match="pass_index must be 0"):
        plan.add(1, 0, x)
    with pytest.raises(ValueError, match="row0 must be 0"):
        plan.add(0, 0, np.zeros((5, 3), np.float32))  # past the last row
    with pytest.raises(ValueError, match=r"\(rows, 3\)"):
        plan.add(0, 0, np.zeros((4, 2), np.float32))
    with pytest.raises(TypeError, match="float32"):
        plan.add(0, 0, x.astype(np.float64))
    plan.add(0, 0, x)
    with pytest.raises(ValueError, match="pass_index must be 1 of 1"):
        plan.add(0, 0, x)
    assert plan.levels(x).shape == (4, 3)


@pytest.mark.parametrize(
    "options, error",
    [
        (dict(method="median"), ValueError),
        (dict(depth=12), ValueError),
        (dict(white="255"), TypeError),
        (dict(height=0), ValueError),
        (dict(width=2.5), ValueError),
        (dict(margin=-1), ValueError),
        (dict(max_kept=True), ValueError),
    ],
)
def test_bad_options_are_refused_by_name(options, error):
    arguments = dict(method="abs", white=255, depth=8, height=4, width=3) | options
    method = arguments.pop("method")
    name = next(iter(options))
    with pytest.raises(error, match=name):
        StreamedMapping(method, **arguments)
