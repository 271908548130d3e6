"""``convcli conv``: the convolution operation, its options checked when it is made.

:class:`ConvOp` names its outputs and checks pictures here; its pixels are
computed in :mod:`convcli.app.conv_pixels` and shown as
:mod:`convcli.app.conv_levels` says.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from ..choices import CHANNEL_MODES, COMBINE_MODES, DEFAULT_BORDER, NORMALIZE_CHOICES, RAW_VALUES
from ..errors import OptionError
from ..io.figures import Grid
from ..kernels import Kernel
from ..layers._engine.alignment import tile_rows
from ..layers.padding import copies_pixels, pad_images, pad_mode
from ..layers.validation import check_axes
from ..levels.mapping import Mapping
from .conv_levels import auto_mapping, conv_figure, conv_mappings, robust_margin
from .conv_pixels import (
    COMBINERS,
    alpha_weighted_maps,
    depthwise_maps,
    layer_source,
    padded,
    size_cause,
    summed_maps,
)
from .geometry import RowGeometry
from .names import Tags, number
from .op_helpers import (
    as_batch,
    float32_option,
    frame_size,
    like_picture,
    mode_option,
    one_of,
    pad_text,
    side_widths,
    whole_option,
)
from .work import whole_work_bytes

_FINITE_BOUND = 1e17
"""The bound :meth:`ConvOp.finite_results` vouches under: a result at most this large, its
square and its kernels' sum of squares (``magnitude``) stay finite in float32."""


@dataclass(frozen=True)
class ConvOp:
    """``convcli conv``: :func:`convcli.conv_forward` (or its depthwise sibling) per image.

    Parameters
    ----------
    kernels : tuple of Kernel
        Applied in order; their labels must differ.
    stride : int
    pad : int, (top, bottom, left, right) or {"same", "valid"}
        ``same`` is ``(f_h - 1) // 2`` above and below and ``(f_w - 1) // 2`` left
        and right of an f_h x f_w kernel, which keeps the size at stride 1; it needs
        an odd number of rows and of columns (a kernel with an even side has no
        centre cell: :class:`OptionError`).
        ``valid`` is 0. Four widths pad each side on its own (named ``-p<T>-<B>-<L>-<R>``).
    bias : float
        Added once to every output value (``b`` filled with it); named in the
        outputs as ``-b<B>`` when it is not 0.
    channels : {"sum", "each", "gray"}
        ``sum``: each kernel over every colour channel, summed (conv_forward on the
        channel sum, which is conv_forward with the kernel repeated over the input
        channels), one output channel per kernel. ``each``: depthwise, kernel-major
        (k0 on R, G, B, then k1 ...). ``gray``: luminance first, then conv_forward.
        Alpha weighs the colours: they show over black, or for ``each`` with
        kernels that keep levels, alpha is convolved too (:func:`alpha_weighted`).
    normalize : {"auto", "abs", "minmax", "clip", "offset", "robust", "none"}
        Mapping of each output channel to image levels, see :meth:`mapping_for`;
        named in the image outputs (not the ``.npy``) unless it is ``auto``.
        ``none`` writes the float32 values themselves (TIFF), one file per channel.
    border : {"reflect", "constant", "edge", "symmetric", "wrap"}
        How the pad is filled (:func:`convcli.pad_images` modes). ``constant`` is
        zeros: conv_forward's own padding. The others pad with
        :func:`convcli.pad_images` first, then call conv_forward with pad 0.
        ``reflect`` (the default, as in scipy, scikit-image and OpenCV) continues
        the picture past its edge, so the border gives no false edges.
    combine : {None, "magnitude", "max", "sum"}
        Make one map of the kernels' results (per channel for ``each``):
        ``magnitude`` the square root of the sum of their squares, ``max`` the
        largest response, ``sum`` their sum.

    Output tags are ``<kernel>[-s<S>][-d<D>][-p<N>][-b<B>][-B<border>][-<normalize>]-<channel>``
    per channel (the stride, dilation, pad, bias and border only when they are not 1,
    1, ``same``, 0 and ``reflect``; no border with no padding; the channel ``sum``,
    ``gray`` or the input channel for ``each``), and for the ``.npy`` the
    kernels joined by ``+``, the same options but no mapping, and the channel
    mode: ``vertical+horizontal-b100-sum``. With ``each``, each kernel's
    channels are also written as one colour image, ``<kernel>...-each``. With
    `combine`, the kernels joined by ``+`` and the combination take the
    kernel's place: ``sobel-x+sobel-y-magnitude-sum``.
    """

    kernels: tuple[Kernel, ...]
    stride: int = 1
    pad: int | str | tuple[int, int, int, int] = "same"
    bias: float = 0.0
    channels: str = "sum"
    normalize: str = "auto"
    border: str = DEFAULT_BORDER
    combine: str | None = None
    dilation: int = 1
    name: ClassVar[str] = "conv"
    writes_image: ClassVar[bool] = False

    def __post_init__(self):
        for field_name, value in _checked_options(self).items():
            object.__setattr__(self, field_name, value)
        _check_kernels(self)

    def pad_widths(self, kernel: Kernel) -> tuple[int, int, int, int]:
        """The pad of `kernel` on each side: (top, bottom, left, right).

        ``same`` pads half the kernel's span above and below, and half its width
        left and right: ``(0, 0, 1, 1)`` for a 1x3 kernel.
        """
        if isinstance(self.pad, tuple):
            return self.pad
        if self.pad == "same":
            rows, cols = ((n - 1) // 2 for n in self.span(kernel))
            return (rows, rows, cols, cols)
        return (self.pad_for(kernel),) * 4

    def span(self, kernel: Kernel) -> tuple[int, int]:
        """The pixels `kernel` spans with its taps `dilation` apart."""
        return tuple(self.dilation * (n - 1) + 1 for n in kernel.size)

    def pad_for(self, kernel: Kernel) -> int:
        """The integer pad of `kernel` on every side, for a pad that is one number or a word.

        Four widths (``--pad T,B,L,R``), and ``same`` for a kernel that is not
        square, are :meth:`pad_widths` (a ValueError here).
        """
        if self.pad == "same":
            top, _, left, _ = self.pad_widths(kernel)
            if top != left:
                raise ValueError(
                    f"--pad same pads a {kernel.size[0]}x{kernel.size[1]} kernel "
                    "by side: use pad_widths"
                )
            return top
        if self.pad == "valid":
            return 0
        return int(self.pad)

    # --- names ---

    def options_tag(self) -> str:
        """The options in output names: ``-s<S>``, ``-d<D>``, ``-p<N>``, ``-b<B>``, ``-B<border>``.

        Each only when not the default (no border with no padding).
        """
        text = f"-s{self.stride}" if self.stride != 1 else ""
        text += f"-d{self.dilation}" if self.dilation != 1 else ""
        if self.pad != "same":
            text += f"-p{0 if self.pad == 'valid' else pad_text(self.pad)}"
        if self.bias != 0:
            text += f"-b{number(self.bias)}"
        if self.border != DEFAULT_BORDER and self.pad not in ("valid", 0):
            text += f"-B{self.border}"
        return text

    def hints(self, channels: tuple[str, ...]) -> list[str]:
        """A tip for an input with these `channels`: a colour picture blurred into one grey map.

        With ``--channels sum``, a kernel whose weights sum to 1 (a blur,
        ``sharpen``) gives the grey picture of R + G + B: ``each`` keeps the colour.
        """
        keeping = [k.name for k in self.kernels if keeps_levels(k)]
        if self.channels != "sum" or not keeping or not {"R", "G", "B"} <= set(channels):
            return []
        return [
            f"{', '.join(keeping)} on colour pictures with --channels sum: one grey map of "
            "R + G + B; --channels each gives the colour result"
        ]

    def channel_names(self, channels: tuple[str, ...]) -> list[str]:
        """What each map of a kernel is named after, for an input with these `channels`.

        The colour channels for ``each`` (and alpha where :meth:`alpha_weighted`), else
        the channel mode.
        """
        colour = [c for c in channels if c != "A"]
        return (
            colour + ["A"] * alpha_weighted(self, channels)
            if self.channels == "each"
            else [self.channels]
        )

    def tags(self, channels: tuple[str, ...]) -> Tags:
        return _tags(self, channels)

    # --- pixels ---

    def check(self, pic) -> None:
        _check_size(self, *frame_size(pic))

    def conv_input(self, pic) -> np.ndarray:
        """The (m, H, W, C) float32 array the library is called on (C = 1 unless ``each``).

        m is 1 for a picture, its frames for a stack.
        """
        return layer_source(self, pic).astype(np.float32, copy=False)

    def layer_input(self, A: np.ndarray, kernel: Kernel) -> tuple[np.ndarray, int]:
        """`A` as the layer takes it for `kernel` (bordered unless zeros) and conv_forward's pad."""
        return padded(self, A, self.pad_widths(kernel))

    def compute(self, pic) -> np.ndarray:
        weighted = alpha_weighted(self, pic.channels)
        if pic.has_alpha and not copies_pixels(self.border) and self._borders():
            Z = _maps_of_bordered(self, pic, weighted)  # a computed border: of the samples
        else:
            Z = _maps(self, pic, weighted)
        if self.combine is not None:
            n = pic.colour_channels if self.channels == "each" else 1
            Z = COMBINERS[self.combine](Z.reshape(Z.shape[:3] + (len(self.kernels), n)))
        return like_picture(Z, pic)

    def _borders(self) -> bool:
        """Whether some kernel's pad is not zeros."""
        return any(any(self.pad_widths(k)) for k in self.kernels)

    # --- levels and figures ---

    def mapping_for(self, kernel: Kernel, n_summed: int, white: float) -> str:
        """The value mapping ``--normalize auto`` picks for one kernel: see
        :func:`convcli.app.conv_levels.auto_mapping`."""
        return auto_mapping(self, kernel, n_summed, white)

    def margin(self) -> int:
        """Pixels on every side of a map left out of its robust scale: half the kernel, and 3."""
        return robust_margin(self)

    def mappings(self, pic) -> list[Mapping]:
        """Each result channel's mapping (:func:`convcli.app.conv_levels.conv_mappings`)."""
        return conv_mappings(self, pic)

    def figure(self, pic, data: np.ndarray) -> Grid:
        return conv_figure(self, pic, data)

    def finite_results(self, pic) -> bool:
        """Whether every result value of `pic` is finite, known without a pass over them
        (:func:`_finite_results`)."""
        return _finite_results(self, pic)

    computed_whole: ClassVar[bool] = False
    """Computed in strips where the whole image's work would not fit the memory budget."""

    def row_geometry(self, height: int, width: int = 1) -> RowGeometry:
        """How the output rows read the input rows (:class:`RowGeometry`), one window a kernel."""
        pads = [self.pad_widths(k) for k in self.kernels]
        spans = [self.span(k)[0] for k in self.kernels]
        (top, bottom), span = pads[0][:2], spans[0]
        rows = (height + top + bottom - span) // self.stride + 1
        return RowGeometry(
            self.stride,
            tuple(p[0] for p in pads),
            tuple(spans),
            rows,
            align=_engine_alignment(self, width),
        )

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """The (height, width) of the result on an image of `height` x `width` (a ValueError,
        as :meth:`check` raises, where it cannot be computed)."""
        _check_size(self, height, width)
        (left, right), span = self.pad_widths(self.kernels[0])[2:], self.span(self.kernels[0])[1]
        return (
            self.row_geometry(height, width).out_rows,
            (width + left + right - span) // self.stride + 1,
        )

    def output_grid(self) -> tuple[int, float, float]:
        """One output pixel a stride, centred on the first kernel's window."""
        return _output_grid(self)

    def work_bytes(self, height: int, width: int, channels: int, sample_bytes: int) -> int:
        """:mod:`convcli.app.work`'s estimate (:func:`_work_bytes`)."""
        return _work_bytes(self, height, width, channels, sample_bytes)

    def border_fill(self, channels: tuple[str, ...], white: float) -> tuple[str | None, np.ndarray]:
        """The border rows beyond the image hold (``--border``); its constant is zeros, alpha
        too: outside the image is transparent, as the whole image's layer input pads it
        (its colours weighted by alpha, :func:`convcli.app.conv_pixels.alpha_weighted_maps`)."""
        return self.border, np.zeros(len(channels), np.float32)


def _finite_results(op: ConvOp, pic) -> bool:
    """True where the picture's samples are still integers (no NaN: a nodata pixel reads
    as float), it has no alpha (whose weighting divides by a convolved alpha), and the
    largest value `op`'s kernels and bias can give, times the number of kernels (their
    ``sum``, and their squares' for ``magnitude``), stays far inside float32's range.
    """
    if pic.samples.dtype.kind not in "ui" or pic.has_alpha:
        return False
    largest = float(np.iinfo(pic.samples.dtype).max)
    weights = max(float(np.abs(k.weights).sum()) for k in op.kernels)
    bound = (largest * len(pic.channels) * weights + abs(op.bias)) * len(op.kernels)
    return bool(np.isfinite(bound)) and bound < _FINITE_BOUND


def _maps(op: ConvOp, pic, weighted: bool) -> np.ndarray:
    """`op`'s uncombined (m, H', W', C') maps of `pic`; `weighted`: colours weighted by alpha
    and alpha convolved (:func:`alpha_weighted`)."""
    if weighted:
        return alpha_weighted_maps(op, pic)
    # Kernels of one size make one layer input: the channels are summed into it.
    A = layer_source(op, pic, sum_later=len({k.size for k in op.kernels}) == 1)
    return depthwise_maps(op, A) if op.channels == "each" else summed_maps(op, A)


def _maps_of_bordered(op: ConvOp, pic, weighted: bool) -> np.ndarray:
    """`op`'s uncombined maps of a picture with alpha under a computed border: each kernel's
    on the picture's samples, alpha included, bordered as its strips' rows beyond the image
    are (then weighted by alpha), so that the whole image and its strips agree bit for bit.

    A border that copies pixels gives the same values either way (the weighting commutes
    with copying), and the layer input is bordered after the weighting, as it is cheaper.
    """
    widths_of = [op.pad_widths(k) for k in op.kernels]
    blocks: list[np.ndarray | None] = [None] * len(op.kernels)
    for widths in dict.fromkeys(widths_of):
        at = [i for i, w in enumerate(widths_of) if w == widths]
        pixels = pad_images(as_batch(pic.pixels), widths, mode=op.border)
        bordered = replace(pic, samples=pixels if pic.pixels.ndim == 4 else pixels[0])
        kernels = tuple(op.kernels[i] for i in at)
        flat = replace(op, kernels=kernels, pad=(0, 0, 0, 0), combine=None)
        Z = _maps(flat, bordered, weighted)
        per_kernel = Z.shape[3] // len(at)
        for j, i in enumerate(at):
            blocks[i] = Z[..., j * per_kernel : (j + 1) * per_kernel]
    return np.concatenate(blocks, axis=3)


def alpha_weighted(op: ConvOp, channels: tuple[str, ...]) -> bool:
    """Whether `op`'s maps of an input with these `channels` are weighted by alpha, with alpha
    convolved and kept (:func:`convcli.app.conv_pixels.alpha_weighted_maps`): ``each`` on a
    picture with alpha, with kernels that all keep levels, uncombined."""
    return (
        op.channels == "each"
        and "A" in channels
        and op.combine is None
        and all(keeps_levels(k) for k in op.kernels)
    )


def keeps_levels(kernel: Kernel) -> bool:
    """Whether `kernel`'s weights sum to 1 (a blur, ``sharpen``): a flat image stays as it is."""
    weights = kernel.weights
    return abs(float(weights.sum()) - 1) <= 1e-6 * float(np.abs(weights).sum())


def _checked_options(op: ConvOp) -> dict[str, object]:
    """Each option of `op` on its own: the values to keep, or an :class:`OptionError`
    naming the first option that cannot work."""
    kernels = tuple(op.kernels)
    if not kernels:
        raise OptionError("no kernel given", "--kernel")
    for k in kernels:
        if not isinstance(k, Kernel):
            raise OptionError(f"must be a convcli.kernels.Kernel, got {k!r}", "--kernel")
    checked = {
        "kernels": kernels,
        "stride": whole_option(op.stride, "--stride", minimum=1),
        "dilation": whole_option(op.dilation, "--dilation", minimum=1),
    }
    one_of(CHANNEL_MODES, op.channels, "--channels")
    one_of(NORMALIZE_CHOICES, op.normalize, "--normalize")
    float32_option(op.bias, "--bias")
    checked["border"] = mode_option(pad_mode, op.border, "--border")
    if op.combine is not None:
        one_of(COMBINE_MODES, op.combine, "--combine")
    if isinstance(op.pad, (tuple, list)):
        checked["pad"] = side_widths(op.pad)
    elif isinstance(op.pad, str):
        if op.pad not in ("same", "valid"):
            raise OptionError(f"must be same, valid or an integer >= 0, got {op.pad!r}", "--pad")
    else:
        checked["pad"] = whole_option(op.pad, "--pad", minimum=0)
    return checked


def _check_kernels(op: ConvOp) -> None:
    """The rules between `op`'s kernels and its pad: one name each, results of one size."""
    seen: dict[str, Kernel] = {}
    for k in op.kernels:
        if k.label in seen:
            other = seen[k.label]
            raise OptionError(
                f"{k.name!r} is given twice"
                if other.name == k.name
                else f"{other.name!r} and {k.name!r} would both be written as {k.label!r}",
                "--kernel",
            )
        seen[k.label] = k
    if op.pad == "same":
        for k in op.kernels:
            if not k.centred:
                where = f"kernel {k.name!r}"
                if k.source != "builtin":
                    where += f" ({k.source})"
                raise OptionError(
                    f"{where} is {k.size[0]}x{k.size[1]}: --pad same needs an odd number "
                    "of rows and of columns (a centre cell); use --pad valid or --pad N",
                    "--pad",
                )
    # All kernels must give outputs of the same size, whatever the image size.
    margins = set()
    for k in op.kernels:
        top, bottom, left, right = op.pad_widths(k)
        span = op.span(k)
        margins.add((top + bottom - span[0], left + right - span[1]))
    if len(margins) > 1:
        sizes = ", ".join(f"{k.name} {k.size[0]}x{k.size[1]}" for k in op.kernels)
        raise OptionError(
            f"the kernels give results of different sizes with --pad {pad_text(op.pad)} "
            f"({sizes}); "
            "use --pad same with odd kernels, or run them separately",
            "--pad",
        )


def _engine_alignment(op: ConvOp, width: int) -> int:
    """The largest row tile of the convolution engine among `op`'s calls (powers of two)."""
    tiles = [1]
    for kernel in op.kernels:
        span = op.span(kernel)
        pads = op.pad_widths(kernel)
        for n_C in {1, len(op.kernels)}:
            tiles.append(tile_rows((1, max(span[0], 1), width, 1), span, op.stride, pads, n_C))
    return max(tiles)


def _output_grid(op: ConvOp) -> tuple[int, float, float]:
    kernel = op.kernels[0]
    (rows, columns), (top, _, left, _) = op.span(kernel), op.pad_widths(kernel)
    return op.stride, -top + (rows - op.stride) / 2, -left + (columns - op.stride) / 2


def _work_bytes(op: ConvOp, height: int, width: int, channels: int, sample_bytes: int) -> int:
    """The samples in float32 (8-bit colour summed first: one channel), per map 4.5 bytes
    an output pixel (8.7 with 16-bit levels), and once 14 bytes an output pixel with 16-bit
    levels, 4 with 8-bit ones by channel."""
    each = op.channels == "each"
    summed_first = not each and channels > 1 and sample_bytes == 1
    return whole_work_bytes(
        op,
        height,
        width,
        channels,
        sample_bytes,
        float_channels=1 if summed_first else channels,
        maps=len(op.kernels) * (channels if each else 1),
        per_map=(4.5, 8.7),
        per_result=(4 if each else 0, 14),
    )


def _map_names(op: ConvOp) -> list[str]:
    """What each map is named after: every kernel, or all of them combined."""
    if op.combine is None:
        return [k.label for k in op.kernels]
    return ["+".join(k.label for k in op.kernels) + f"-{op.combine}"]


def _tags(op: ConvOp, channels: tuple[str, ...]) -> Tags:
    """:meth:`ConvOp.tags`: the names of its outputs, as its docstring says."""
    options = op.options_tag()
    mapping = f"-{op.normalize}" if op.normalize != "auto" else ""
    names = op.channel_names(channels)
    maps = _map_names(op)
    groups = ()
    if op.channels == "each" and len(names) > 1 and op.normalize != RAW_VALUES:
        n = len(names)
        groups = tuple(
            (f"{m}{options}{mapping}-each", tuple(range(i * n, (i + 1) * n)))
            for i, m in enumerate(maps)
        )
    raw = "+".join(k.label for k in op.kernels) + options
    if op.combine is not None:
        raw += f"-{op.combine}"
    return Tags(
        channels=[f"{m}{options}{mapping}-{c}" for m in maps for c in names],
        whole=None,
        raw=f"{raw}-{op.channels}",
        groups=groups,
        bands=_bands(op, channels) * len(maps),
    )


def _bands(op: ConvOp, channels: tuple[str, ...]) -> tuple[int | None, ...]:
    """The input channel each map of one kernel is made from alone (:attr:`Tags.bands`):
    each channel's own with ``--channels each``; else the one colour channel where there
    is one, or None (a sum or a luminance of several)."""
    if op.channels == "each":
        return tuple(channels.index(c) for c in op.channel_names(channels))
    colour = [i for i, c in enumerate(channels) if c != "A"]
    return (colour[0] if len(colour) == 1 else None,)


def _check_size(op: ConvOp, h: int, w: int) -> None:
    """:meth:`ConvOp.check` of an `h` x `w` picture: a ValueError where padded it is smaller
    than a kernel, or longer on a side than any array can be (the memory a whole image's
    padding would take is checked where it is made: in strips it never is)."""
    cause = size_cause(op)
    for k in op.kernels:
        top, bottom, left, right = op.pad_widths(k)
        span = op.span(k)
        check_axes((h + top + bottom, w + left + right), cause, "the image")
        if h + top + bottom < span[0] or w + left + right < span[1]:
            p = top if len({top, bottom, left, right}) == 1 else pad_text(op.pad)
            dilated = f" (dilation {op.dilation}: {span[0]}x{span[1]})"
            raise ValueError(
                f"image is {w}x{h} pixels, too small for the {k.size[0]}x{k.size[1]} "
                f"kernel {k.name!r}{dilated if op.dilation != 1 else ''} with pad {p}"
            )
