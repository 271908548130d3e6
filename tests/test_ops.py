"""The operations made through the Python API: every bad option is an OptionError naming it.

The command line checks most values before it makes an operation (click's
choices and ranges); these are the checks an operation makes itself, for
callers that are not the command line.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import convcli.app.conv_pixels as ops_module
from convcli.app.conv_pixels import channel_sum_padded
from convcli.app.ops import (
    ConvOp,
    GradConvOp,
    GradPoolOp,
    OptionError,
    PadOp,
    PoolOp,
    result_and_summary,
)
from convcli.io.images import Picture
from convcli.kernels import get_kernel
from convcli.layers.padding import pad_images_as

SOBEL = (get_kernel("sobel-x"),)

BAD_OPTIONS = [
    (PadOp, {"mode": "mirror"}, "--mode"),
    (PadOp, {"mode": None}, "--mode"),
    (PadOp, {"pad": -1}, "--pad"),
    (PadOp, {"pad": 1.5}, "--pad"),
    (PadOp, {"pad": "2"}, "--pad"),
    (PadOp, {"pad": (1, 2)}, "--pad"),
    (PadOp, {"value": float("inf")}, "--value"),
    (PadOp, {"value": "0"}, "--value"),
    (PadOp, {"value": 1e39}, "--value"),
    (PoolOp, {"mode": "min"}, "--mode"),
    (PoolOp, {"size": 0}, "--size"),
    (PoolOp, {"size": 2.0}, "--size"),
    (PoolOp, {"stride": 0}, "--stride"),
    (PoolOp, {"stride": True}, "--stride"),
    (PoolOp, {"pad": -1}, "--pad"),
    (PoolOp, {"size": 3, "pad": 2}, "--pad"),
    (PoolOp, {"ceil": "yes"}, "--ceil"),
    (ConvOp, {"kernels": ()}, "--kernel"),
    (ConvOp, {"kernels": ("sobel-x",)}, "--kernel"),
    (ConvOp, {"kernels": SOBEL * 2}, "--kernel"),
    (ConvOp, {"stride": 0}, "--stride"),
    (ConvOp, {"stride": 1.0}, "--stride"),
    (ConvOp, {"dilation": 0}, "--dilation"),
    (ConvOp, {"pad": -1}, "--pad"),
    (ConvOp, {"pad": "full"}, "--pad"),
    (ConvOp, {"pad": (0, 0, 1)}, "--pad"),
    (ConvOp, {"kernels": (get_kernel("roberts-nw"),)}, "--pad"),
    (ConvOp, {"bias": float("nan")}, "--bias"),
    (ConvOp, {"bias": None}, "--bias"),
    (ConvOp, {"channels": "rgb"}, "--channels"),
    (ConvOp, {"normalize": "none-at-all"}, "--normalize"),
    (ConvOp, {"border": "mirror"}, "--border"),
    (ConvOp, {"combine": "mean"}, "--combine"),
]


@pytest.mark.parametrize(("op", "options", "option"), BAD_OPTIONS)
def test_a_bad_option_is_an_option_error_naming_it(op, options, option):
    if op is ConvOp:
        options = {"kernels": SOBEL, **options}
    with pytest.raises(OptionError) as info:
        op(**options)
    assert info.value.option == option
    assert isinstance(info.value, ValueError)  # as the library's own checks


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"loss": "mean"}, "--loss"),
        ({"normalize": "auto"}, "--normalize"),
        ({"normalize": "bright"}, "--normalize"),
    ],
)
def test_grad_conv_options(options, option):
    with pytest.raises(OptionError) as info:
        GradConvOp(ConvOp(SOBEL), **options)
    assert info.value.option == option


def test_grad_conv_refuses_a_combined_conv():
    with pytest.raises(OptionError) as info:
        GradConvOp(ConvOp(SOBEL + (get_kernel("sobel-y"),), combine="max"))
    assert info.value.option == "--combine"


@pytest.mark.parametrize("normalize", ["auto", "bright", None])
def test_grad_pool_normalize(normalize):
    with pytest.raises(OptionError) as info:
        GradPoolOp(PoolOp(), normalize=normalize)
    assert info.value.option == "--normalize"


def test_good_options_are_kept_as_plain_numbers():
    op = ConvOp(SOBEL, stride=np.int64(2), pad=np.int64(1), dilation=np.int32(2))
    assert (op.stride, op.pad, op.dilation) == (2, 1, 2)
    assert all(type(v) is int for v in (op.stride, op.pad, op.dilation))
    pool = PoolOp(mode="avg", size=np.int64(3), pad=1, ceil=np.bool_(True))
    assert (pool.mode, pool.size, pool.stride, pool.pad) == ("average", 3, 3, 1)
    assert PadOp(pad=np.int16(3)).details == "constant-3"


def _picture(seed=0) -> Picture:
    pixels = np.random.default_rng(seed).integers(0, 256, (9, 11, 3)).astype(np.float32)
    return Picture(pixels, ("R", "G", "B"), 255.0, 8)


def test_grad_conv_returns_its_dw_and_keeps_no_state():
    op = GradConvOp(ConvOp(SOBEL + (get_kernel("edge"),)), loss="sum")
    before = pickle.dumps(op)
    data, summary = result_and_summary(op, _picture())
    assert pickle.dumps(op) == before  # nothing kept on the (frozen) operation
    maps, dWs = op.gradients(_picture())
    np.testing.assert_array_equal(data, maps.astype(np.float32))
    assert summary == op.dW_text(dWs)
    assert summary.startswith("dW of sobel-x (L = sum(Z)):\n")
    assert "\ndW of edge (L = sum(Z)):\n" in summary
    np.testing.assert_array_equal(op.compute(_picture()), maps)


def test_an_operation_without_a_summary_reports_nothing():
    data, summary = result_and_summary(PoolOp(), _picture())
    assert summary == "" and data.dtype == np.float32 and data.shape == (4, 5, 3)


def test_conv_names_its_options_and_channels_in_public():
    op = ConvOp(SOBEL, stride=2, bias=1, border="constant", channels="each")
    assert op.options_tag() == "-s2-b1-Bconstant"
    assert op.channel_names(("R", "G", "B", "A")) == ["R", "G", "B"]
    assert ConvOp(SOBEL).channel_names(("R", "G", "B")) == ["sum"]


# --- pictures whose samples are still 8-bit integers ----------------------------------------


def _integer_and_float_pictures(seed: int, shape, channels):
    samples = np.random.default_rng(seed).integers(0, 256, shape).astype(np.uint8)
    return (
        Picture(samples, channels, 255.0, 8),
        Picture(samples.astype(np.float32), channels, 255.0, 8),
    )


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"channels": "each"},
        {"channels": "gray"},
        {"pad": 2},
        {"pad": "valid"},
        {"pad": (0, 1, 2, 3), "channels": "each"},
        {"border": "constant"},
        {"border": "constant", "pad": (1, 1, 2, 2)},
        {"border": "wrap", "stride": 2},
        {"border": "symmetric", "dilation": 2},
        {"border": "edge", "channels": "each"},
        {"combine": "magnitude", "bias": 0.5},
    ],
)
@pytest.mark.parametrize("channels", [("R", "G", "B"), ("R", "G", "B", "A"), ("L",), ("L", "A")])
def test_conv_of_integer_samples_is_conv_of_their_floats(options, channels):
    """The channels' sum in uint16 and the samples written straight into the padded
    input give the float32 picture's results bit for bit; no float32 picture is made."""
    kernels = (get_kernel("sobel-x"), get_kernel("box-blur"), get_kernel("vertical"))
    if options.get("channels") == "gray" and channels[0] == "L":
        return
    op = ConvOp(kernels, **options)
    integers, floats = _integer_and_float_pictures(3, (13, 17, len(channels)), channels)
    op.check(integers)
    result = op.compute(integers)
    expected = op.compute(floats)
    assert result.dtype == expected.dtype == np.float32
    np.testing.assert_array_equal(result, expected)
    if options.get("channels") != "gray" and "A" not in channels:
        # pixels never asked for (alpha weighs the colours: they are floats then)
        assert integers.samples.dtype == np.uint8
    np.testing.assert_array_equal(op.conv_input(integers), op.conv_input(floats))
    assert op.conv_input(integers).dtype == np.float32


def test_conv_of_an_integer_stack_is_conv_of_its_floats():
    channels = ("R", "G", "B")
    integers, floats = _integer_and_float_pictures(4, (3, 8, 9, 3), channels)
    for options in ({}, {"channels": "each", "pad": (2, 0, 1, 0)}):
        op = ConvOp((get_kernel("sobel-y"),), **options)
        np.testing.assert_array_equal(op.compute(integers), op.compute(floats))


def test_a_picture_converts_its_integers_once_when_asked():
    integers, floats = _integer_and_float_pictures(5, (4, 6, 3), ("R", "G", "B"))
    assert integers.shape == (4, 6, 3) and integers.integer_samples() is integers.samples
    pixels = integers.pixels
    assert pixels.dtype == np.float32 and pixels.flags.c_contiguous
    np.testing.assert_array_equal(pixels, floats.pixels)
    assert integers.pixels is pixels and integers.samples is pixels  # the integers let go
    assert integers.integer_samples() is None and floats.integer_samples() is None
    assert pickle.loads(pickle.dumps(integers)).pixels.tolist() == pixels.tolist()


@pytest.mark.parametrize("border", ["constant", "edge", "reflect", "symmetric", "wrap"])
@pytest.mark.parametrize("widths", [(1, 1, 1, 1), (0, 2, 1, 3), (0, 0, 0, 0), (2, 2, 2, 2)])
def test_the_channel_sum_is_written_straight_into_the_padded_input(border, widths, monkeypatch):
    """Blocks of a few rows (here 3 of a 70-row picture, and two pictures) give the
    padded sum of the channels, value for value."""
    monkeypatch.setattr(ops_module, "SUM_BLOCK_VALUES", 3 * 41)
    colour = np.random.default_rng(5).integers(0, 256, (2, 70, 41, 3), dtype=np.uint8)
    got = channel_sum_padded(colour, widths, border)
    total = colour.sum(axis=3, keepdims=True, dtype=np.uint16)
    np.testing.assert_array_equal(got, pad_images_as(total, widths, np.float32, mode=border))
    assert got.dtype == np.float32


def test_a_new_operation_gets_the_dry_run_size_and_strips_from_its_own_methods():
    # Sizes were isinstance chains: a new operation silently got its input's size.
    from dataclasses import dataclass
    from typing import ClassVar

    from convcli.app.strips import in_strips, output_size, row_geometry

    @dataclass(frozen=True)
    class Halve:
        computed_whole: ClassVar[bool] = True

        def row_geometry(self, height, width=1):
            return None

        def output_size(self, height, width):
            return height // 2, width // 2

        def border_fill(self):
            return None, 0.0

    assert output_size(Halve(), 30, 41) == (15, 20)
    assert row_geometry(Halve(), 30, 41) is None and not in_strips(Halve())


def test_every_operation_has_every_member_of_the_operation_protocol():
    # The protocol is only a type: a missing method showed as an AttributeError where it was
    # first called (a traceback in --dry-run, "internal error" for a TIFF).
    from convcli.app.ops import OPERATIONS, Operation

    members = {name for name in vars(Operation) if not name.startswith("_")}
    members |= set(Operation.__annotations__)
    assert {"row_geometry", "output_size", "border_fill", "computed_whole"} <= members
    for operation in OPERATIONS:
        missing = sorted(m for m in members if not hasattr(operation, m))
        assert not missing, f"{operation.__name__}: {missing}"
