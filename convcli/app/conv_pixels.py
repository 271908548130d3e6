"""The pixels of ``convcli conv``: its layer input, the library calls and the combined maps.

Each function takes the operation (:class:`convcli.app.conv_op.ConvOp`) as
`op` and reads its options; :meth:`ConvOp.compute` puts them together.
"""

from __future__ import annotations

import numpy as np

from ..choices import COMBINE_MODES, keyed_by
from ..layers._engine import native
from ..layers.conv import conv_forward
from ..layers.depthwise import depthwise_conv_forward
from ..layers.padding import border_copies, fill_border, pad_images, pad_images_as
from ..layers.validation import check_result_size
from ..levels.mapping import luminance
from .op_helpers import as_batch, check_padded_size, pad_option

COMBINERS = keyed_by(
    COMBINE_MODES,
    {
        "magnitude": lambda stack: np.sqrt(np.square(stack).sum(axis=-2)),
        "max": lambda stack: stack.max(axis=-2),
        "sum": lambda stack: stack.sum(axis=-2),
    },
    what="conv's --combine table",
)
"""``--combine``: one map of the kernels' results, stacked on axis -2 of (..., kernels, maps)."""

MIN_WEIGHT = 1e-3
"""The least alpha weight, a share of white (``conv(alpha) / white``), that
:func:`alpha_weighted_maps` divides by: an output alpha of a quarter of an 8-bit level,
where the weights that sharpen's negative taps leave are rounding errors."""

# Values of the uint16 block that channel_sum_padded sums a few rows in (64 kB: in cache).
SUM_BLOCK_VALUES = 1 << 15


def layer_source(op, pic, *, sum_later: bool = False) -> np.ndarray:
    """`op`'s :meth:`~ConvOp.conv_input`, or its integers where the picture's samples are integers.

    The channels' sum of 8-bit samples is summed in uint16 (exact, as in
    float32), and ``each`` takes the samples as they are: :func:`padded`
    writes them straight into the float32 layer input, so that no float32
    copy of the picture is made (52 MB for a 2400x1800 photo, 3 ms to
    convert and more to touch fresh). With `sum_later`, 8-bit channels
    to be summed are returned as they are, for :func:`padded` to sum
    straight into the layer input (:func:`channel_sum_padded`). A picture with
    alpha gives its colour as it shows over black (:func:`over_black`).
    """
    integers = pic.integer_samples() if op.channels != "gray" and not pic.has_alpha else None
    if integers is not None:
        colour = as_batch(integers)[..., : pic.colour_channels]
        if op.channels == "each" or colour.shape[3] == 1 or sum_later:
            return colour
        total = np.empty(colour.shape[:3], np.uint16)
        return sum_channels(colour, total)[..., None]
    colour = over_black(pic)
    if op.channels == "gray" and colour.shape[3] == 3:
        return luminance(colour)
    if op.channels == "sum" and colour.shape[3] > 1:
        # A kernel repeated over the channels gives the correlation of their sum.
        return colour @ np.ones((colour.shape[3], 1), np.float32)
    return colour


def alpha_weight(pic) -> np.ndarray:
    """The (m, H, W, 1) opacity of a picture with alpha, 0 to 1: alpha / white."""
    return as_batch(pic.pixels)[..., pic.colour_channels :] / np.float32(pic.white or 1.0)


def over_black(pic) -> np.ndarray:
    """The (m, H, W, C) colour channels of `pic`, as they show over black where it has alpha.

    Each colour weighted by its pixel's opacity (premultiplied): the colour
    hidden under transparent pixels is 0, so that an edge map finds the edges
    that show, the alpha boundary among them where the shape meets the black.
    """
    colour = as_batch(pic.pixels)[..., : pic.colour_channels]
    return colour * alpha_weight(pic) if pic.has_alpha else colour


def alpha_weighted_maps(op, pic) -> np.ndarray:
    """``--channels each`` of kernels that keep levels on a picture with alpha, as
    ImageMagick convolves: weighted by alpha, alpha itself convolved.

    For each kernel, the colours ``conv(c * alpha) / conv(alpha)`` (colour 0 where
    ``conv(alpha)`` is not above :data:`MIN_WEIGHT` of white, a sum of rounding
    errors as much as of opacity), so that the colour hidden under transparent
    pixels never reaches an output pixel, then alpha, ``conv(alpha)``: (m, H', W',
    kernels * (colours + 1)), kernel-major. The bias is added to the colours.
    Alpha is convolved as its whole levels, not as the opacity ``alpha / white``:
    a blur's weights (sixteenths, 256ths) then give it exactly, the same on
    either engine, and its halves round to even.
    """
    n = pic.colour_channels
    alpha = as_batch(pic.pixels)[..., n:].astype(np.float32, copy=False)
    A = np.concatenate([as_batch(pic.pixels)[..., :n] * alpha, alpha], axis=3)
    Z = depthwise_maps(op, A, bias=0.0)
    least = MIN_WEIGHT * np.float32(pic.white or 1.0)
    for start in range(0, Z.shape[3], n + 1):
        colours, total = Z[..., start : start + n], Z[..., start + n : start + n + 1]
        np.divide(colours, total, out=colours, where=total > least)
        colours[np.broadcast_to(total <= least, colours.shape)] = 0
        colours += np.float32(op.bias)
    return Z


def size_cause(op) -> str:
    """The options that set the padding of `op`, as the command line gives them, for the
    errors of sizes: ``--pad same with --dilation 9``."""
    cause = f"--pad {pad_option(op.pad)}"
    return cause + f" with --dilation {op.dilation}" if op.dilation != 1 else cause


def padded(op, A: np.ndarray, widths: tuple[int, int, int, int]) -> tuple[np.ndarray, int]:
    """The float32 layer input and the pad conv_forward adds: zeros are its own, the rest ours.

    conv_forward pads every side alike; other widths are padded here first, as
    `op`'s border fills them. Integers (:func:`layer_source`) are written
    straight into the padded input; for ``sum``, several 8-bit channels are
    summed into it. Its size is checked first, in the options' words.
    """
    channels = 1 if op.channels == "sum" else A.shape[3]
    check_padded_size(A.shape[:3] + (channels,), widths, size_cause(op))
    zeros_by_the_layer = len(set(widths)) == 1 and (op.border == "constant" or widths[0] == 0)
    if op.channels == "sum" and A.shape[3] > 1 and A.dtype == np.uint8:
        own = (0, 0, 0, 0) if zeros_by_the_layer else widths
        return (channel_sum_padded(A, own, op.border), widths[0] if zeros_by_the_layer else 0)
    if zeros_by_the_layer:
        return A.astype(np.float32, copy=False), widths[0]
    if A.dtype == np.float32:
        return pad_images(A, widths, mode=op.border), 0
    return pad_images_as(A, widths, np.float32, mode=op.border), 0


def summed_maps(op, A: np.ndarray) -> np.ndarray:
    """One conv_forward call per run of `op`'s kernels of one shape."""
    results = []
    # Consecutive kernels of one shape go through the library in one call.
    start = 0
    while start < len(op.kernels):
        stop = start + 1
        shape = op.kernels[start].size
        while stop < len(op.kernels) and op.kernels[stop].size == shape:
            stop += 1
        group = op.kernels[start:stop]
        Z = summed_in_one_pass(op, A, group[0]) if len(group) == 1 else None
        if Z is None:
            A_in, pad = padded(op, A, op.pad_widths(group[0]))
            hp = {"stride": op.stride, "pad": pad, "dilation": op.dilation}
            W = np.stack([k.weights for k in group], axis=-1).astype(np.float32)[:, :, None, :]
            b = np.full((1, 1, 1, len(group)), op.bias, np.float32)
            Z, _ = conv_forward(A_in, W, b, hp)
            del A_in
        results.append(Z)
        start = stop
    return np.concatenate(results, axis=3) if len(results) > 1 else results[0]


def summed_in_one_pass(op, A: np.ndarray, kernel) -> np.ndarray | None:
    """:func:`summed_maps`' Z for one `kernel` of the sum of 8-bit `A`'s channels (one channel:
    itself), made from the 8-bit pixels in one pass (:func:`one_pass_arguments`); None where
    that pass is not taken.

    The same values, without the picture-sized float32 input written and read again (17 MB
    for a 2400x1800 photo, 1 GB for a 16000x16000 grey one): each bordered row of the sum
    is made once, in cache, as the passes need it
    (:func:`convcli.layers._engine.native.sum_correlate_separable`).
    """
    arguments = one_pass_arguments(op, A, kernel) if op.channels == "sum" else None
    if arguments is None:
        return None
    return native.sum_correlate_separable(A, *arguments, op.bias)


def one_pass_arguments(op, A: np.ndarray, kernel) -> tuple | None:
    """The factors and border copies with which
    :func:`~convcli.layers._engine.native.sum_correlate_separable` correlates 8-bit `A`
    (m, H, W, C) with `kernel` in one pass: ``(u, v, row_sources, column_sources, left)``;
    None where conv_forward would not take the native engine's separable passes
    (:func:`~convcli.layers._engine.native.separable_factors`), the border is computed, not
    copied, or `A` is not 8-bit. The size of one result channel is checked first.
    """
    m, H, W, _ = A.shape
    weights = np.asarray(kernel.weights, np.float32)
    if (
        A.dtype != np.uint8
        or min(H, W) < 1
        or op.stride != 1
        or op.dilation != 1
        or not native.active()
    ):
        return None
    factors = native.separable_factors(weights)
    top, bottom, left, right = op.pad_widths(kernel)
    size = (m, H + top + bottom - len(weights) + 1, W + left + right - weights.shape[1] + 1, 1)
    if min(size[1:3]) < 1:  # no window fits: the layer says so
        return None
    check_result_size(size, np.float32, size_cause(op), "the result")  # before the borders
    rows = border_copies(H, top, bottom, op.border)
    columns = border_copies(W, left, right, op.border)
    if factors is None or rows is None or columns is None:
        return None
    return (*factors, rows, columns, left)


def depthwise_maps(op, A: np.ndarray, *, bias: float | None = None) -> np.ndarray:
    """``--channels each``: depthwise_conv_forward one kernel on one channel at a time.

    Each output channel is computed exactly as in one call over every kernel
    and channel (element by element, in the same order), but the library's
    temporaries are the size of one channel, not of the whole result: the
    peak memory of a 3-kernel RGB run fell from 7 to 4 times the picture's
    float32 size. An 8-bit channel the native passes take in one pass
    (:func:`one_pass_arguments`) is read from the pixels as they are and
    written straight into its map, with no float32 copy of it. The result is
    a (m, H, W, n) view of (n, m, H, W) planes, so that each map is
    contiguous for its mapping and file. `bias`: another than `op`'s.
    """
    n_in = A.shape[3]
    out = None
    bias = op.bias if bias is None else bias
    b = np.full((1, 1, 1, 1), bias, np.float32)
    for k, kernel in enumerate(op.kernels):
        pad = op.pad_widths(kernel)
        W = kernel.weights.astype(np.float32)[:, :, None, None]
        arguments = one_pass_arguments(op, A, kernel)
        for c in range(n_in):
            if arguments is not None:
                if out is None:  # planes on cache lines, for the passes' streamed stores
                    size = (len(arguments[2]) - len(W) + 1, len(arguments[3]) - W.shape[1] + 1)
                    out = native.aligned_empty((len(op.kernels) * n_in, A.shape[0]) + size)
                plane = out[k * n_in + c]
                Z = native.sum_correlate_separable(A, *arguments, bias, channel=c, out=plane)
                if Z is not None:
                    continue  # else a row is not finite: the plain path's values
            A_in, p = padded(op, A[:, :, :, c : c + 1], pad)
            hp = {"stride": op.stride, "pad": p, "dilation": op.dilation}
            Z, _ = depthwise_conv_forward(A_in, W, b, hp)
            del A_in
            if out is None:  # channel-first: each map written and later read whole
                out = np.empty((len(op.kernels) * n_in,) + Z.shape[:3], Z.dtype)
            out[k * n_in + c] = Z[..., 0]
            del Z
    return out.transpose(1, 2, 3, 0)


def channel_sum_padded(
    colour: np.ndarray, widths: tuple[int, int, int, int], border: str
) -> np.ndarray:
    """The channels' sum of 8-bit `colour` (m, H, W, C), padded by `widths` as `border` fills
    it, in float32 (m, H + top + bottom, W + left + right, 1).

    The same values as ``pad_images_as(colour.sum(axis=3, keepdims=True), ...)``:
    the sum is exact in uint16, made a block of rows at a time in a buffer that
    stays in cache and written straight into the padded array, with no
    picture-sized sum (8.6 MB for a 2400x1800 photo) and no pass to convert it.
    :func:`padded`, its caller, checks first that it fits the memory.
    """
    top, bottom, left, right = widths
    m, H, W, _ = colour.shape
    bordered = np.empty((m, H + top + bottom, W + left + right, 1), np.float32)
    if native.active():  # one pass, straight into the float32 input
        native.sum_channels(colour, bordered, top, left)
        return fill_border(bordered, widths, mode=border)
    inside = bordered[:, top : top + H, left : left + W, 0]
    rows = max(1, SUM_BLOCK_VALUES // max(1, W))
    block = np.empty((rows, W), np.uint16)
    for i in range(m):
        for r in range(0, H, rows):
            inside[i, r : r + rows] = sum_channels(
                colour[i, r : r + rows], block[: min(rows, H - r)]
            )
    return fill_border(bordered, widths, mode=border)


def sum_channels(colour: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The sum of 8-bit `colour`'s channels (its last axis, two or more) into `out` (uint16:
    exact, as in float32); returns `out`."""
    np.add(colour[..., 0], colour[..., 1], out=out, dtype=np.uint16)
    for c in range(2, colour.shape[-1]):
        out += colour[..., c]
    return out
