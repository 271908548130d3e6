"""conv, pool and pad over row strips equal the whole-image results bit for bit."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import numpy as np
import pytest
from helpers import assert_same_file
from hypothesis import given
from hypothesis import strategies as st

from convcli.app import ops
from convcli.app.conv_op import alpha_weighted
from convcli.app.strips import (
    PictureRows,
    plan_strips,
    row_geometry,
    source_rows,
    strip_results,
)
from convcli.choices import CHANNEL_MODES, COMBINE_MODES, PAD_MODES, POOL_MODES
from convcli.io.images import Picture
from convcli.kernels import Kernel
from convcli.layers import depthwise
from convcli.layers._engine import correlate

CHANNELS = {1: ("L",), 2: ("L", "A"), 3: ("R", "G", "B"), 4: ("R", "G", "B", "A")}


def _picture(seed: int, height: int, width: int, n_channels: int, *, odd: bool = False):
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (height, width, n_channels)).astype(np.float32)
    if odd:  # non-integers, a NaN and an infinity
        pixels += rng.standard_normal(pixels.shape).astype(np.float32)
        pixels.flat[rng.integers(pixels.size)] = np.nan
        pixels.flat[rng.integers(pixels.size)] = np.inf
    return Picture(pixels, CHANNELS[n_channels], 255.0, 8)


def _kernel(seed: int, f_h: int, f_w: int, label: str, *, keeps_levels=False) -> Kernel:
    weights = np.random.default_rng(seed).integers(-3, 4, (f_h, f_w)).astype(np.float64) / 2
    if keeps_levels:  # weights that sum to 1 (halves: exactly), as a blur's or sharpen's
        weights.flat[0] += 1 - weights.sum()
    return Kernel(label, "random", weights)


def assert_strips_equal_whole(
    op, pic, rows_per_strip: int, *, dense: bool = True, cuts: tuple[int, ...] = ()
) -> None:
    """Strips equal the whole result; with `dense`, depthwise layers of up to 4 channels take
    the matmul engine (as they do), else the tap engine.

    With `cuts`, the result is computed in bands cut at those output rows (as
    a cluster's tasks compute it), each band in strips from its first row.
    """
    dense_channels = 4 if dense else 0
    with (
        np.errstate(all="ignore"),
        mock.patch.object(depthwise, "DENSE_DEPTHWISE_CHANNELS", dense_channels),
    ):
        # As a file is processed: inf - inf is NaN, no warning.
        whole = np.asarray(op.compute(pic), np.float32)
        geometry = row_geometry(op, pic.pixels.shape[0], pic.pixels.shape[1])
        ends = sorted(
            {c for c in cuts if 0 < c < geometry.out_rows}
            if geometry.out_rows > geometry.align
            else ()
        )
        bounds = [0, *ends, geometry.out_rows]
        parts = [
            rows
            for band in zip(bounds, bounds[1:], strict=False)
            for _, rows in strip_results(
                op, PictureRows.of(pic), rows_per_strip=rows_per_strip, band=band
            )
        ]
    strips = np.concatenate(parts, axis=0)
    assert strips.shape == whole.shape
    # Bit for bit (-0.0 told from 0.0); NaN where the whole result has NaN, of either sign.
    nan = np.isnan(whole)
    np.testing.assert_array_equal(np.isnan(strips), nan)
    np.testing.assert_array_equal(strips.view(np.uint32)[~nan], whole.view(np.uint32)[~nan])


pads = st.one_of(
    st.sampled_from(["same", "valid"]), st.integers(0, 4), st.tuples(*[st.integers(0, 4)] * 4)
)


@st.composite
def conv_ops(draw, *, alpha_weighted=False):
    """Conv operations; with `alpha_weighted`, those whose maps of a picture with alpha are
    weighted by it (``each``, uncombined, kernels that keep levels)."""
    n = draw(st.integers(1, 3))
    size = draw(st.tuples(st.integers(1, 5), st.integers(1, 5)))
    odd_square = size[0] == size[1] and size[0] % 2
    pad = draw(pads.filter(lambda p: p != "same" or odd_square))
    keeps = alpha_weighted or draw(st.booleans())
    kernels = tuple(
        _kernel(draw(st.integers(0, 99)), *size, f"k{i}", keeps_levels=keeps) for i in range(n)
    )
    return ops.ConvOp(
        kernels,
        stride=draw(st.integers(1, 3)),
        pad=pad,
        dilation=draw(st.integers(1, 3)),
        border=draw(st.sampled_from(PAD_MODES)),
        channels="each" if alpha_weighted else draw(st.sampled_from(CHANNEL_MODES)),
        combine=None if alpha_weighted else draw(st.sampled_from((None, *COMBINE_MODES))),
        bias=draw(st.sampled_from([0, 1.5])),
    )


@pytest.mark.usefixtures("numpy_engine")
def test_a_strip_whose_last_tile_runs_past_the_image_gets_the_whole_values():
    # The matmul engine's last tile of a band holds a row past the image's (from the
    # band's own border), infinite here: only the rows that are not finite go the
    # plain path, not the whole tile, so rows 35 and 37 keep the whole image's bits.
    kernel = Kernel("k0", "random", np.array([[1.0, -1.5], [-1.0, -1.0]]))
    op = ops.ConvOp((kernel,), stride=1, pad=1, channels="sum", border="wrap")
    pic = _picture(1, 42, 1, 4, odd=True)
    with mock.patch.object(correlate, "TILE_VALUES", 512):
        assert_strips_equal_whole(op, pic, 1, dense=False)


@given(
    op=conv_ops(),
    seed=st.integers(0, 2**16),
    height=st.integers(1, 60),
    width=st.integers(1, 30),
    n_channels=st.integers(1, 4),
    rows=st.integers(1, 20),
    odd=st.booleans(),
    tile_values=st.sampled_from([1 << 7, 1 << 9, 1 << 11, 1 << 19]),
    dense=st.booleans(),
    cuts=st.lists(st.integers(1, 30), max_size=3),
)
def test_conv_in_strips_is_the_whole_conv(
    op, seed, height, width, n_channels, rows, odd, tile_values, dense, cuts
):
    # Small engine tiles make a small image several tiles tall, as a wide one is.
    pic = _picture(seed, height, width, n_channels, odd=odd)
    try:
        op.check(pic)
    except ValueError:
        return  # too small for the kernel: refused whole as in strips
    with mock.patch.object(correlate, "TILE_VALUES", tile_values):
        assert_strips_equal_whole(op, pic, rows, dense=dense, cuts=tuple(cuts))


@pytest.fixture(scope="module")
def eight_bit_tiffs(tmp_path_factory):
    """Tiled deflate TIFFs of 8-bit samples, grey, RGB and RGBA: channels -> path."""
    import tifffile

    folder, rng, paths = tmp_path_factory.mktemp("eight-bit"), np.random.default_rng(8), {}
    for n, options in ((1, {}), (3, {"photometric": "rgb"}), (4, {"photometric": "rgb"})):
        values = rng.integers(0, 256, (37, 29, n)).astype(np.uint8)
        if n == 4:
            options = {**options, "extrasamples": ["unassalpha"]}
        paths[n] = folder / f"c{n}.tif"
        tifffile.imwrite(paths[n], values[..., 0] if n == 1 else values, tile=(16, 16),
                         compression="zlib", **options)  # fmt: skip
    return paths


@given(op=conv_ops(), n_channels=st.sampled_from([1, 3, 4]), rows=st.integers(1, 12))
def test_strips_of_an_8_bit_tiff_read_as_stored_are_the_whole_conv(
    eight_bit_tiffs, op, n_channels, rows
):
    # The strips' bands hold the stored uint8 values, as a whole read's picture does (the
    # border rows copied from them, or float32 where a fill needs it).
    from convcli.io.images import read_image
    from convcli.io.regions import open_regions

    path = eight_bit_tiffs[n_channels]
    pic = read_image(path)
    try:
        op.check(pic)
    except ValueError:
        return  # too small for the kernel
    with np.errstate(all="ignore"), open_regions(path) as source:
        assert source.reads_as_stored
        whole = np.asarray(op.compute(pic), np.float32)
        parts = [rows for _, rows in strip_results(op, source, rows_per_strip=rows)]
    strips = np.concatenate(parts, axis=0)
    assert strips.shape == whole.shape
    np.testing.assert_array_equal(strips.view(np.uint32), whole.view(np.uint32))


@pytest.mark.parametrize("border", PAD_MODES)
@pytest.mark.parametrize("n_channels", [1, 3])
def test_bordered_strips_of_an_8_bit_tiff_are_the_whole_conv(eight_bit_tiffs, border, n_channels):
    # Strips of 1 to 7 rows: the first and last hold border rows, which a wrapped border
    # reads from both ends of the image in two runs.
    from convcli.io.images import read_image
    from convcli.io.regions import open_regions

    kernel = _kernel(4, 5, 5, "k5")
    op = ops.ConvOp((kernel,), stride=1, pad="same", border=border, channels="sum")
    path = eight_bit_tiffs[n_channels]
    whole = np.asarray(op.compute(read_image(path)), np.float32)
    for rows in range(1, 8):
        with open_regions(path) as source:
            parts = [part for _, part in strip_results(op, source, rows_per_strip=rows)]
        np.testing.assert_array_equal(np.concatenate(parts, axis=0), whole)


@given(
    op=conv_ops(alpha_weighted=True),
    seed=st.integers(0, 2**16),
    height=st.integers(1, 40),
    width=st.integers(1, 20),
    n_channels=st.sampled_from([2, 4]),
    rows=st.integers(1, 12),
)
def test_alpha_weighted_conv_in_strips_is_the_whole_conv(op, seed, height, width, n_channels, rows):
    # Colours weighted by alpha and alpha convolved: the border beyond the image's rows
    # holds what the whole image's layer input holds there (a constant border: transparent).
    pic = _picture(seed, height, width, n_channels)
    try:
        op.check(pic)
    except ValueError:
        return
    assert alpha_weighted(op, pic.channels)
    assert_strips_equal_whole(op, pic, rows)


@given(
    op=conv_ops(),
    seed=st.integers(0, 2**16),
    height=st.integers(1, 30),
    width=st.integers(1, 20),
    n_channels=st.sampled_from([2, 4]),
    rows=st.integers(1, 12),
)
def test_a_computed_border_of_a_picture_with_alpha_in_strips_is_the_whole_conv(
    op, seed, height, width, n_channels, rows
):
    # A border computed from several pixels (numpy's odd reflection stands in for one
    # here) does not commute with weighting the colours by alpha: both the whole image and
    # its strips border the samples first.
    from convcli.layers import padding

    odd = {"mode": "reflect", "reflect_type": "odd"}
    op = replace(op, border="reflect")
    pic = _picture(seed, height, width, n_channels)
    with mock.patch.dict(padding.NP_PAD_ARGUMENTS, {"reflect": odd}):
        try:
            op.check(pic)
        except ValueError:
            return
        assert_strips_equal_whole(op, pic, rows)


@given(
    mode=st.sampled_from(POOL_MODES),
    size=st.integers(1, 5),
    stride=st.integers(1, 4),
    pad=st.integers(0, 2),
    ceil=st.booleans(),
    seed=st.integers(0, 2**16),
    height=st.integers(1, 40),
    width=st.integers(1, 12),
    n_channels=st.integers(1, 4),
    rows=st.integers(1, 20),
    odd=st.booleans(),
    cuts=st.lists(st.integers(1, 30), max_size=3),
)
def test_pool_in_strips_is_the_whole_pool(
    mode, size, stride, pad, ceil, seed, height, width, n_channels, rows, odd, cuts
):
    if pad > size // 2:
        pad = size // 2
    op = ops.PoolOp(mode=mode, size=size, stride=stride, pad=pad, ceil=ceil)
    pic = _picture(seed, height, width, n_channels, odd=odd)
    try:
        op.check(pic)
    except ValueError:
        return
    assert_strips_equal_whole(op, pic, rows, cuts=tuple(cuts))


@given(
    pad=st.one_of(st.integers(0, 6), st.tuples(*[st.integers(0, 6)] * 4)),
    mode=st.sampled_from(PAD_MODES),
    value=st.sampled_from([0.0, 7.5]),
    seed=st.integers(0, 2**16),
    height=st.integers(1, 30),
    width=st.integers(1, 10),
    n_channels=st.integers(1, 4),
    rows=st.integers(1, 20),
)
def test_pad_in_strips_is_the_whole_pad(pad, mode, value, seed, height, width, n_channels, rows):
    op = ops.PadOp(pad=pad, mode=mode, value=value)
    assert_strips_equal_whole(op, _picture(seed, height, width, n_channels), rows)


def test_a_photo_in_strips_of_any_height():
    from pathlib import Path

    from convcli.io.images import read_image
    from convcli.kernels import parse_kernel_spec

    pic = read_image(Path(__file__).parents[1] / "sample_images" / "chelsea.png")
    op = ops.ConvOp(
        (parse_kernel_spec("sobel-x"), parse_kernel_spec("log-5x5")),
        combine="magnitude",
        channels="each",
    )
    for rows in (1, 7, 64, 1000):
        assert_strips_equal_whole(op, pic, rows)
    gray = ops.ConvOp(
        (parse_kernel_spec("gaussian-5x5"), parse_kernel_spec("box-blur")),
        channels="gray",
        border="wrap",
        stride=2,
    )
    with mock.patch.object(correlate, "TILE_VALUES", 1 << 14):  # tiles of a few rows
        assert_strips_equal_whole(gray, pic, 5)


def test_strips_cover_the_result_once_and_read_only_their_band(numpy_engine):
    geometry = row_geometry(ops.PoolOp(size=3, stride=2, pad=1, ceil=True), 101)
    strips = plan_strips(geometry, 101, 8)
    assert geometry.out_rows == 51
    assert [(s.out0, s.out1) for s in strips] == [
        (0, 8),
        (8, 16),
        (16, 24),
        (24, 32),
        (32, 40),
        (40, 51),
    ]  # no short strip
    assert all(0 <= s.in0 < s.in1 <= 101 and s.in1 - s.in0 <= 11 * 2 + 3 for s in strips)
    conv = ops.ConvOp((_kernel(0, 5, 5, "k"),), stride=2)
    geometry = row_geometry(conv, 5000, 3000)
    assert geometry.align > 1  # a wide image's engine tiles are few rows tall
    for strip in plan_strips(geometry, 5000, 100):
        first = strip.out0 - strip.skip
        assert first % geometry.align == 0 and strip.in0 == first * 2


def test_border_rows_are_those_np_pad_gives():
    for mode in PAD_MODES:
        if mode == "constant":
            continue
        expected = np.pad(np.arange(5), (7, 9), mode=mode)
        sources, weights = source_rows(-7, 14, 5, mode)
        assert sources[:, 0].tolist() == expected.tolist() and np.all(weights == 1)
    assert source_rows(-2, 3, 3, "constant")[0][:, 0].tolist() == [-1, -1, 0, 1, 2]


def test_the_gradients_have_no_strips():
    conv = ops.ConvOp((_kernel(0, 3, 3, "k"),))
    assert row_geometry(ops.GradConvOp(conv), 10) is None
    with pytest.raises(ValueError, match="computed whole"):
        next(
            strip_results(
                ops.GradConvOp(conv), PictureRows.of(_picture(0, 9, 9, 1)), rows_per_strip=2
            )
        )


def test_a_last_pooling_window_over_the_edge_in_a_strip_of_its_own():
    """--ceil: the last window of an odd height starts on the last row; its strip reads a
    whole window (it read one row, and pool_forward refused it)."""
    for height in (3, 5, 9):
        op = ops.PoolOp(mode="max", size=2, stride=2, ceil=True)
        assert_strips_equal_whole(op, _picture(height, height, 4, 1), 1)
        op = ops.PoolOp(mode="average", size=3, stride=2, pad=1, ceil=True)
        assert_strips_equal_whole(op, _picture(height, height, 4, 2), 1, cuts=(1, 2))


# --- the command line: strips written as the whole image is -----------------------------------


def _conv_npy(tmp_path, image, *options) -> tuple[np.ndarray, np.ndarray]:
    """The npy result of ``conv`` on `image` whole and in strips of a 1M budget."""
    from helpers import ok

    results = []
    for name, extra in (("whole", ()), ("strips", ("--memory", "1M"))):
        ok("conv", image, "-o", tmp_path / name, "-q", "--format", "npy", *options, *extra)
        (written,) = (tmp_path / name).glob("*.npy")
        results.append(np.load(written))
    return results[0], results[1]


def test_a_depthwise_conv_in_strips_takes_the_whole_images_engine(tmp_path):
    # The layers chose their depthwise engine by the input's size: this image whole
    # (under 2^20 values) by taps, its strips by matmuls (106,715 values differed).
    import tifffile

    values = np.random.default_rng(1).integers(0, 256, (1000, 900)).astype(np.uint8)
    tifffile.imwrite(tmp_path / "g1000.tif", values)
    (tmp_path / "k.txt").write_text("0.3 -1.7 2.9\n1.1 0.5 -0.25\n-2 0.7 1.3\n")
    whole, strips = _conv_npy(
        tmp_path,
        tmp_path / "g1000.tif",
        "-k",
        tmp_path / "k.txt",
        "--stride",
        "2",
        "--channels",
        "each",
    )
    assert whole.shape == (500, 450, 1)
    np.testing.assert_array_equal(strips, whole)


def test_a_blur_of_an_image_with_alpha_in_strips_has_the_whole_images_border(tmp_path):
    # With --border constant the rows beyond the image were opaque black in strips and
    # transparent whole: a blur's top and bottom rows differed by up to 120 levels.
    import tifffile

    values = np.random.default_rng(5).integers(0, 256, (300, 400, 4)).astype(np.uint8)
    tifffile.imwrite(tmp_path / "rgba.tif", values, photometric="rgb", extrasamples=[2])
    whole, strips = _conv_npy(
        tmp_path,
        tmp_path / "rgba.tif",
        *("-k", "gaussian-5x5", "--channels", "each", "--border", "constant"),
    )
    assert whole.shape == (300, 400, 4)
    np.testing.assert_array_equal(strips, whole)
    assert whole[0, :, 3].max() < 255 * 0.9  # alpha fades at the top: outside is transparent


def test_strips_of_more_than_four_maps_are_written_to_npy(tmp_path):
    # "channels must be 1, 2, 3 or 4; got 6" where the whole run wrote them.
    import tifffile

    values = np.random.default_rng(2).integers(0, 256, (215, 1160, 3)).astype(np.uint8)
    tifffile.imwrite(tmp_path / "rgb.tif", values, photometric="rgb")
    whole, strips = _conv_npy(
        tmp_path, tmp_path / "rgb.tif", "-k", "sharpen", "-k", "emboss", "--channels", "each"
    )
    assert whole.shape == (215, 1160, 6)
    np.testing.assert_array_equal(strips, whole)


@pytest.mark.parametrize("options", [(), ("--normalize", "none"), ("--channels", "each")])
def test_a_tiff_output_is_the_same_file_whole_and_in_strips(tmp_path, options, small_strips):
    # Whole: an untiled TIFF; in strips: a tiled BigTIFF with reduced levels. The format,
    # tiling, compression and levels depend on the file and the options alone.
    import tifffile
    from helpers import ok

    values = np.random.default_rng(3).integers(0, 256, (300, 520, 3)).astype(np.uint8)
    tifffile.imwrite(tmp_path / "a.tif", values, photometric="rgb")
    for name, extra in (("whole", ()), ("strips", ("--memory", small_strips))):
        ok(
            "conv",
            "-k",
            "sobel-x",
            tmp_path / "a.tif",
            "-o",
            tmp_path / name,
            "-q",
            "--format",
            "tiff",
            *options,
            *extra,
        )
    whole = sorted((tmp_path / "whole").glob("*.tiff"))
    assert whole
    for path in whole:
        assert_same_file(path, tmp_path / "strips" / path.name)
        with tifffile.TiffFile(path) as tif:
            assert tif.pages[0].is_tiled and tif.pages[0].compression == 8
            assert len(tif.pages[0].pages) == 2  # reduced levels of 260 and 130 columns
