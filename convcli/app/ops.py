"""The operations the commands apply to each picture: pad, conv and pool (no click, no Pillow).

Every operation follows :class:`Operation`; :data:`OPERATIONS` lists them, and
output names are built and recognised from their ``name`` (see
:mod:`convcli.app.names`). An operation checks its options when it is made,
each value and the rules that span them: :class:`OptionError` names the option.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from ..choices import (
    CHANNEL_MODES,
    COMBINE_MODES,
    DEFAULT_BORDER,
    LOSSES,
    NORMALIZE_CHOICES,
    RAW_VALUES,
    keyed_by,
)
from ..errors import OptionError
from ..io.figures import Grid, Panel
from ..kernels import Kernel, format_kernel_grid
from ..layers.conv import conv_forward, depthwise_conv_forward
from ..layers.padding import fill_border, pad_images, pad_images_as, pad_mode
from ..layers.pooling import pool_forward, pool_mode
from ..levels.mapping import Mapping, luminance, robust_top
from .grad import conv_grads, pool_input_grad, unpad_grad
from .names import Tags, number

_FLOAT32_MAX = float(np.finfo(np.float32).max)

_COMBINERS = keyed_by(COMBINE_MODES, {
    "magnitude": lambda stack: np.sqrt(np.square(stack).sum(axis=-2)),
    "max": lambda stack: stack.max(axis=-2),
    "sum": lambda stack: stack.sum(axis=-2),
}, what="conv's --combine table")
"""``--combine``: one map of the kernels' results, stacked on axis -2 of (..., kernels, maps)."""


def as_batch(pixels: np.ndarray) -> np.ndarray:
    """A picture's (H, W, C) pixels as the layers' (1, H, W, C); a stack's (m, H, W, C) as it is."""
    return pixels if pixels.ndim == 4 else pixels[None]


def channels_as_images(A: np.ndarray, dtype=None) -> np.ndarray:
    """(m, H, W, C) as (m*C, H, W, 1), contiguous: each channel of each frame an image, frame-major.

    >>> channels_as_images(np.arange(12).reshape(1, 2, 2, 3))[:, :, :, 0].tolist()
    [[[0, 3], [6, 9]], [[1, 4], [7, 10]], [[2, 5], [8, 11]]]
    """
    return np.ascontiguousarray(A.transpose(0, 3, 1, 2).reshape((-1,) + A.shape[1:3] + (1,)),
                                dtype)


def like_picture(result: np.ndarray, pic) -> np.ndarray:
    """A layer's (m, H', W', C') `result` shaped as `pic`'s pixels: (H', W', C') for one picture."""
    return result if len(pic.shape) == 4 else result[0]


def frame_size(pic) -> tuple[int, int]:
    """(height, width) of `pic`'s frames: its pixels are (H, W, C) or a stack (m, H, W, C)."""
    return pic.shape[-3:-1]


class Operation(Protocol):
    """What :mod:`convcli.app.process` needs of an operation (frozen and picklable).

    A picture (:class:`convcli.io.images.Picture`) has ``pixels`` (H, W, C) float32,
    or (m, H, W, C) for a stack of frames of one size (the result is then
    (m, H', W', C'): the frames go through each layer call as its m),
    ``channels`` (``("R", "G", "B")`` ...), ``colour_channels``, ``has_alpha``,
    ``white`` and ``depth``.
    """

    name: ClassVar[str]
    """The ``<op>`` of output names: also the command's name."""

    def tags(self, channels: tuple[str, ...]) -> Tags:
        """The output tags for an input with these channels (known from its header)."""

    def check(self, pic) -> None:
        """Raise ValueError, one line for the user, if `pic` cannot be processed."""

    def compute(self, pic) -> np.ndarray:
        """The (H', W', C') result, one channel per entry of ``tags(...).channels``.

        An operation that also reports something beside its files (grad conv:
        dW) has ``compute_with_summary(pic)``, the result and that text from one
        computation: see :func:`result_and_summary`.
        """

    def mappings(self, pic) -> list[Mapping]:
        """The value mapping (:class:`convcli.levels.mapping.Mapping`) of each result channel."""

    def figure(self, pic, data: np.ndarray) -> Grid:
        """The figure grid of the picture and its result (``--figure``)."""


def result_and_summary(op: Operation, pic) -> tuple[np.ndarray, str]:
    """`op`'s float32 result for `pic`, and what it reports beside its files ("" for nothing)."""
    with_summary = getattr(op, "compute_with_summary", None)
    data, summary = with_summary(pic) if with_summary is not None else (op.compute(pic), "")
    return np.asarray(data, dtype=np.float32), summary


def side_widths(pad) -> tuple[int, int, int, int] | int:
    """A pad of four widths (top, bottom, left, right), or one number when all are equal.

    One number keeps the output names of a single ``--pad N``.

    >>> side_widths((1, 1, 1, 1)), side_widths([0, 2, 1, 1])
    (1, (0, 2, 1, 1))
    """
    widths = tuple(pad)
    whole = all(isinstance(w, (int, np.integer)) and not isinstance(w, bool) for w in widths)
    if len(widths) != 4 or not whole or min(widths) < 0:
        raise OptionError(f"needs 4 whole numbers >= 0 (top, bottom, left, right), got {pad!r}",
                          "--pad")
    widths = tuple(int(w) for w in widths)
    return widths[0] if len(set(widths)) == 1 else widths


def pad_text(pad) -> str:
    """A pad for names and titles: ``2``, or ``0-2-1-1`` for top, bottom, left and right."""
    return "-".join(map(str, pad)) if isinstance(pad, tuple) else str(pad)


def pad_option(pad) -> str:
    """A pad as ``--pad`` takes it: ``same``, ``2``, or ``1,1,2,2`` (top, bottom, left, right)."""
    return ",".join(map(str, pad)) if isinstance(pad, tuple) else str(pad)


def _finite(value: float, option: str) -> float:
    """`value` if it is a finite real number; else an OptionError naming `option`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise OptionError(f"must be a finite number, got {value!r}", option)
    return value


def _whole(value, option: str, *, minimum: int) -> int:
    """`value` as an int if it is a whole number >= `minimum`; else an OptionError."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise OptionError(f"must be a whole number >= {minimum}, got {value!r}", option)
    return int(value)


def _one_of(names: tuple[str, ...], value, option: str) -> str:
    """`value` if it is one of `names`; else an OptionError naming `option`."""
    if not (isinstance(value, str) and value in names):
        raise OptionError(f"{option.lstrip('-')} must be one of {', '.join(names)}; "
                          f"got {value!r}", option)
    return value


def _mode(check, value, option: str) -> str:
    """``check(value)`` (:func:`pad_mode`, :func:`pool_mode`), its ValueError an OptionError."""
    try:
        return check(value)
    except ValueError as exc:
        raise OptionError(str(exc), option) from None


def _original_panel(pic) -> Panel:
    """The input as the first panel of a figure: colour, or grey (alpha left out)."""
    white = pic.white if pic.white > 0 else 1.0
    original = pic.pixels / white
    np.clip(original, 0.0, 1.0, out=original)  # in place: one copy of the picture, not two
    if original.shape[2] == 2:  # grey + alpha: show the grey
        original = original[:, :, :1]
    return Panel("original", original[:, :, 0] if original.shape[2] == 1 else original)


class _Channelwise:
    """Pad and pool: the same work on every channel, values kept in the input's scale.

    One file per channel and one for the whole colour image, all tagged with
    the operation's ``details``.
    """

    details: str
    name: ClassVar[str]

    def tags(self, channels: tuple[str, ...]) -> Tags:
        return Tags(
            channels=[f"{self.details}-{c}" for c in channels],
            whole=self.details if len(channels) > 1 else None,
            raw=self.details,
        )

    def mappings(self, pic) -> list[Mapping]:
        return [Mapping("clip", pic.white)] * len(pic.channels)

    def figure(self, pic, data: np.ndarray) -> Grid:
        white = pic.white if pic.white > 0 else 1.0
        panels = [_original_panel(pic)]
        if data.shape[2] in (3, 4):
            colour = data / white
            np.clip(colour, 0.0, 1.0, out=colour)
            panels.append(Panel(f"{self.name} {self.details}", colour))
        panels += [Panel(t, data[:, :, c], vmax=white, colorbar=True)
                   for c, t in enumerate(self.titles(pic.channels))]
        return Grid(panels, min(len(panels), 5), f"{self.name} {self.details}")


@dataclass(frozen=True)
class PadOp(_Channelwise):
    """``convcli pad``: :func:`convcli.pad_images` on every channel.

    Alpha is padded with the same mode; in ``constant`` mode its border is
    opaque, so the padding shows in the fill value.
    """

    pad: int | tuple[int, int, int, int] = 2
    value: float = 0.0
    mode: str = "constant"
    name: ClassVar[str] = "pad"

    def __post_init__(self):
        object.__setattr__(self, "mode", _mode(pad_mode, self.mode, "--mode"))
        if isinstance(self.pad, (tuple, list)):
            object.__setattr__(self, "pad", side_widths(self.pad))
        else:
            object.__setattr__(self, "pad", _whole(self.pad, "--pad", minimum=0))
        _finite(self.value, "--value")
        if abs(self.value) > _FLOAT32_MAX:
            raise OptionError(
                f"{number(self.value)} is beyond the float32 range of the results "
                "(magnitude at most about 3.4e38)",
                "--value",
            )

    @property
    def details(self) -> str:
        text = f"{self.mode}-{pad_text(self.pad)}"
        if self.mode == "constant" and self.value != 0:
            text += f"-v{number(self.value)}"
        return text

    def check(self, pic) -> None:
        pass

    def compute(self, pic) -> np.ndarray:
        n = pic.colour_channels
        pixels = as_batch(pic.pixels)
        colour = pad_images(pixels[..., :n], self.pad, mode=self.mode, value=self.value)
        if not pic.has_alpha:
            return like_picture(colour, pic)
        alpha = pad_images(pixels[..., n:], self.pad, mode=self.mode, value=pic.white)
        return like_picture(np.concatenate([colour, alpha], axis=3), pic)

    def titles(self, channels: tuple[str, ...]) -> list[str]:
        return [f"pad {self.mode} {pad_text(self.pad)}: {c}" for c in channels]


@dataclass(frozen=True)
class PoolOp(_Channelwise):
    """``convcli pool``: :func:`convcli.pool_forward` on every channel, alpha included."""

    mode: str = "max"
    size: int = 2
    stride: int | None = None
    pad: int = 0
    ceil: bool = False
    name: ClassVar[str] = "pool"

    def __post_init__(self):
        object.__setattr__(self, "mode", _mode(pool_mode, self.mode, "--mode"))
        object.__setattr__(self, "size", _whole(self.size, "--size", minimum=1))
        stride = self.size if self.stride is None else _whole(self.stride, "--stride", minimum=1)
        object.__setattr__(self, "stride", stride)
        object.__setattr__(self, "pad", _whole(self.pad, "--pad", minimum=0))
        if not isinstance(self.ceil, (bool, np.bool_)):
            raise OptionError(f"must be True or False, got {self.ceil!r}", "--ceil")
        if self.pad > self.size // 2:
            raise OptionError(
                f"{self.pad} is more than half the {self.size}x{self.size} window (--size): "
                f"at most {self.size // 2}",
                "--pad",
            )

    @property
    def details(self) -> str:
        """``<mode>-f<F>-s<S>``, then ``-p<P>`` and ``-ceil`` when not the default."""
        text = f"{self.mode}-f{self.size}-s{self.stride}"
        return text + (f"-p{self.pad}" if self.pad else "") + ("-ceil" if self.ceil else "")

    def check(self, pic) -> None:
        h, w = frame_size(pic)
        if min(h, w) + 2 * self.pad < self.size:
            with_pad = f" with pad {self.pad}" if self.pad else ""
            raise ValueError(
                f"image is {w}x{h} pixels, too small for the {self.size}x{self.size} "
                f"pooling window (--size){with_pad}"
            )

    def compute(self, pic) -> np.ndarray:
        hp = {"f": self.size, "stride": self.stride, "pad": self.pad, "ceil_mode": self.ceil}
        out, _ = pool_forward(as_batch(pic.pixels), hp, self.mode)
        return like_picture(out, pic)

    def titles(self, channels: tuple[str, ...]) -> list[str]:
        options = (f" p={self.pad}" if self.pad else "") + (" ceil" if self.ceil else "")
        return [f"{self.mode} pool f={self.size} s={self.stride}{options}: {c}" for c in channels]


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
        Alpha is dropped in all three (it is not a colour).
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

    def __post_init__(self):
        self._check_options()
        self._check_kernels()

    def _check_options(self) -> None:
        """Each option on its own: an :class:`OptionError` naming the first that cannot work."""
        object.__setattr__(self, "kernels", tuple(self.kernels))
        if not self.kernels:
            raise OptionError("no kernel given", "--kernel")
        for k in self.kernels:
            if not isinstance(k, Kernel):
                raise OptionError(f"must be a convcli.kernels.Kernel, got {k!r}", "--kernel")
        object.__setattr__(self, "stride", _whole(self.stride, "--stride", minimum=1))
        object.__setattr__(self, "dilation", _whole(self.dilation, "--dilation", minimum=1))
        _one_of(CHANNEL_MODES, self.channels, "--channels")
        _one_of(NORMALIZE_CHOICES, self.normalize, "--normalize")
        _finite(self.bias, "--bias")
        object.__setattr__(self, "border", _mode(pad_mode, self.border, "--border"))
        if self.combine is not None:
            _one_of(COMBINE_MODES, self.combine, "--combine")
        if isinstance(self.pad, (tuple, list)):
            object.__setattr__(self, "pad", side_widths(self.pad))
        elif isinstance(self.pad, str):
            if self.pad not in ("same", "valid"):
                raise OptionError(f"must be same, valid or an integer >= 0, got {self.pad!r}",
                                  "--pad")
        else:
            object.__setattr__(self, "pad", _whole(self.pad, "--pad", minimum=0))

    def _check_kernels(self) -> None:
        """The rules between the kernels and the pad: one name each, results of one size."""
        seen: dict[str, Kernel] = {}
        for k in self.kernels:
            if k.label in seen:
                other = seen[k.label]
                raise OptionError(
                    f"{k.name!r} is given twice" if other.name == k.name else
                    f"{other.name!r} and {k.name!r} would both be written as {k.label!r}",
                    "--kernel",
                )
            seen[k.label] = k
        if self.pad == "same":
            for k in self.kernels:
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
        for k in self.kernels:
            top, bottom, left, right = self.pad_widths(k)
            span = self.span(k)
            margins.add((top + bottom - span[0], left + right - span[1]))
        if len(margins) > 1:
            sizes = ", ".join(f"{k.name} {k.size[0]}x{k.size[1]}" for k in self.kernels)
            raise OptionError(
                f"the kernels give results of different sizes with --pad {pad_text(self.pad)} "
                f"({sizes}); "
                "use --pad same with odd kernels, or run them separately",
                "--pad",
            )

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
                raise ValueError(f"--pad same pads a {kernel.size[0]}x{kernel.size[1]} kernel "
                                 "by side: use pad_widths")
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
        keeping = [k.name for k in self.kernels
                   if abs(float(k.weights.sum()) - 1) <= 1e-6 * float(np.abs(k.weights).sum())]
        if self.channels != "sum" or not keeping or not {"R", "G", "B"} <= set(channels):
            return []
        return [f"{', '.join(keeping)} on colour pictures with --channels sum: one grey map of "
                "R + G + B; --channels each gives the colour result"]

    def channel_names(self, channels: tuple[str, ...]) -> list[str]:
        """What each map of a kernel is named after, for an input with these `channels`.

        The colour channels for ``each`` (alpha left out), else the channel mode.
        """
        colour = [c for c in channels if c != "A"]
        return colour if self.channels == "each" else [self.channels]

    def _maps(self) -> list[str]:
        """What each map is named after: every kernel, or all of them combined."""
        if self.combine is None:
            return [k.label for k in self.kernels]
        return ["+".join(k.label for k in self.kernels) + f"-{self.combine}"]

    def tags(self, channels: tuple[str, ...]) -> Tags:
        options = self.options_tag()
        mapping = f"-{self.normalize}" if self.normalize != "auto" else ""
        names = self.channel_names(channels)
        maps = self._maps()
        groups = ()
        if self.channels == "each" and len(names) > 1 and self.normalize != RAW_VALUES:
            n = len(names)
            groups = tuple((f"{m}{options}{mapping}-each", tuple(range(i * n, (i + 1) * n)))
                           for i, m in enumerate(maps))
        raw = "+".join(k.label for k in self.kernels) + options
        if self.combine is not None:
            raw += f"-{self.combine}"
        return Tags(
            channels=[f"{m}{options}{mapping}-{c}" for m in maps for c in names],
            whole=None,
            raw=f"{raw}-{self.channels}",
            groups=groups,
        )

    # --- pixels ---

    def check(self, pic) -> None:
        h, w = frame_size(pic)
        for k in self.kernels:
            top, bottom, left, right = self.pad_widths(k)
            span = self.span(k)
            if h + top + bottom < span[0] or w + left + right < span[1]:
                p = top if len({top, bottom, left, right}) == 1 else pad_text(self.pad)
                dilated = f" (dilation {self.dilation}: {span[0]}x{span[1]})"
                raise ValueError(
                    f"image is {w}x{h} pixels, too small for the {k.size[0]}x{k.size[1]} "
                    f"kernel {k.name!r}{dilated if self.dilation != 1 else ''} with pad {p}"
                )

    def conv_input(self, pic) -> np.ndarray:
        """The (m, H, W, C) float32 array the library is called on (C = 1 unless ``each``).

        m is 1 for a picture, its frames for a stack.
        """
        return self._layer_source(pic).astype(np.float32, copy=False)

    def _layer_source(self, pic, *, sum_later: bool = False) -> np.ndarray:
        """:meth:`conv_input`, or its integers where the picture's samples are integers.

        The channels' sum of 8-bit samples is summed in uint16 (exact, as in
        float32), and ``each`` takes the samples as they are: :meth:`_padded`
        writes them straight into the float32 layer input, so that no float32
        copy of the picture is made (52 MB for a 2400x1800 photo, 3 ms to
        convert and more to touch fresh). With `sum_later`, 8-bit channels
        to be summed are returned as they are, for :meth:`_padded` to sum
        straight into the layer input (:func:`channel_sum_padded`).
        """
        integers = pic.integer_samples() if self.channels != "gray" else None
        if integers is not None:
            colour = as_batch(integers)[..., : pic.colour_channels]
            if self.channels == "each" or colour.shape[3] == 1 or sum_later:
                return colour
            total = np.empty(colour.shape[:3], np.uint16)
            return sum_channels(colour, total)[..., None]
        colour = as_batch(pic.pixels)[..., : pic.colour_channels]
        if self.channels == "gray" and colour.shape[3] == 3:
            return luminance(colour)
        if self.channels == "sum" and colour.shape[3] > 1:
            # A kernel repeated over the channels gives the correlation of their sum.
            return colour @ np.ones((colour.shape[3], 1), np.float32)
        return colour

    def layer_input(self, A: np.ndarray, kernel: Kernel) -> tuple[np.ndarray, int]:
        """`A` as the layer takes it for `kernel` (bordered unless zeros) and conv_forward's pad."""
        return self._padded(A, self.pad_widths(kernel))

    def _padded(self, A: np.ndarray, widths: tuple[int, int, int, int]
                ) -> tuple[np.ndarray, int]:
        """The float32 layer input and the pad conv_forward adds: zeros are its own, the rest ours.

        conv_forward pads every side alike; other widths are padded here first.
        Integers (:meth:`_layer_source`) are written straight into the padded input;
        for ``sum``, several 8-bit channels are summed into it.
        """
        zeros_by_the_layer = len(set(widths)) == 1 and (self.border == "constant"
                                                         or widths[0] == 0)
        if self.channels == "sum" and A.shape[3] > 1 and A.dtype == np.uint8:
            own = (0, 0, 0, 0) if zeros_by_the_layer else widths
            return (channel_sum_padded(A, own, self.border),
                    widths[0] if zeros_by_the_layer else 0)
        if zeros_by_the_layer:
            return A.astype(np.float32, copy=False), widths[0]
        if A.dtype == np.float32:
            return pad_images(A, widths, mode=self.border), 0
        return pad_images_as(A, widths, np.float32, mode=self.border), 0

    def compute(self, pic) -> np.ndarray:
        # Kernels of one size make one layer input: the channels are summed into it.
        A = self._layer_source(pic, sum_later=len({k.size for k in self.kernels}) == 1)
        Z = self._depthwise(A) if self.channels == "each" else self._summed(A)
        if self.combine is not None:
            n = A.shape[3] if self.channels == "each" else 1
            Z = _COMBINERS[self.combine](Z.reshape(Z.shape[:3] + (len(self.kernels), n)))
        return like_picture(Z, pic)

    def _summed(self, A: np.ndarray) -> np.ndarray:
        """One conv_forward call per run of kernels of one shape."""
        results = []
        # Consecutive kernels of one shape go through the library in one call.
        start = 0
        while start < len(self.kernels):
            stop = start + 1
            shape = self.kernels[start].size
            while stop < len(self.kernels) and self.kernels[stop].size == shape:
                stop += 1
            group = self.kernels[start:stop]
            A_in, pad = self._padded(A, self.pad_widths(group[0]))
            hp = {"stride": self.stride, "pad": pad, "dilation": self.dilation}
            W = np.stack([k.weights for k in group], axis=-1).astype(np.float32)[:, :, None, :]
            b = np.full((1, 1, 1, len(group)), self.bias, np.float32)
            Z, _ = conv_forward(A_in, W, b, hp)
            del A_in
            results.append(Z)
            start = stop
        return np.concatenate(results, axis=3) if len(results) > 1 else results[0]

    def _depthwise(self, A: np.ndarray) -> np.ndarray:
        """``--channels each``: depthwise_conv_forward one kernel on one channel at a time.

        Each output channel is computed exactly as in one call over every kernel
        and channel (element by element, in the same order), but the library's
        temporaries are the size of one channel, not of the whole result: the
        peak memory of a 3-kernel RGB run fell from 7 to 4 times the picture's
        float32 size. The result is a (m, H, W, n) view of (n, m, H, W) planes, so
        that each map is contiguous for its mapping and file.
        """
        n_in = A.shape[3]
        out = None
        b = np.full((1, 1, 1, 1), self.bias, np.float32)
        for k, kernel in enumerate(self.kernels):
            pad = self.pad_widths(kernel)
            W = kernel.weights.astype(np.float32)[:, :, None, None]
            for c in range(n_in):
                A_in, p = self._padded(A[:, :, :, c:c + 1], pad)
                hp = {"stride": self.stride, "pad": p, "dilation": self.dilation}
                Z, _ = depthwise_conv_forward(A_in, W, b, hp)
                del A_in
                if out is None:  # channel-first: each map written and later read whole
                    out = np.empty((len(self.kernels) * n_in,) + Z.shape[:3], Z.dtype)
                out[k * n_in + c] = Z[..., 0]
                del Z
        return out.transpose(1, 2, 3, 0)

    # --- levels and figures ---

    def mapping_for(self, kernel: Kernel, n_summed: int, white: float) -> str:
        """The value mapping ``--normalize auto`` picks for one kernel.

        ``robust`` for a zero-sum kernel (edge detectors: edge strength, bright
        on black, scaled by a high percentile so that sparse edges show);
        ``clip`` for a kernel that keeps the level (weights summing to 1: blur,
        sharpen, identity), or whose results cannot leave 0..white: the picture
        as it is (a sum over `n_summed` channels is shown as their mean, see
        :meth:`mappings`); otherwise ``minmax`` (emboss, a bias ...).
        """
        if self.normalize != "auto":
            return self.normalize
        w = kernel.weights
        total, size = float(w.sum()), float(np.abs(w).sum())
        if abs(total) <= 1e-9 * size:
            return "robust"
        lo = white * float(w[w < 0].sum()) + self.bias / n_summed
        hi = white * float(w[w > 0].sum()) + self.bias / n_summed
        if lo >= 0 and hi <= white * (1 + 1e-6):
            return "clip"
        if abs(total - 1) <= 1e-6 * size:
            return "clip"
        return "minmax"

    def margin(self) -> int:
        """Pixels on every side of a map left out of its robust scale: half the kernel, and 3."""
        half = max(max(self.span(k)) // 2 for k in self.kernels)
        return -(-(half + 3) // self.stride)

    def mappings(self, pic) -> list[Mapping]:
        """Each result channel's mapping; a channel sum keeping the level is shown as the mean.

        With ``--channels sum`` the result of a kernel whose weights sum to 1 is
        R + G + B of the blurred (sharpened ...) picture: ``clip`` at
        n_channels x white shows their mean, the picture as a grey photo.
        """
        names = self.channel_names(pic.channels)
        n_summed = pic.colour_channels if self.channels == "sum" else 1
        if self.combine is None:
            methods = [self.mapping_for(k, n_summed, pic.white) for k in self.kernels]
        elif self.normalize != "auto":
            methods = [self.normalize]
        else:
            edges = all(self.mapping_for(k, n_summed, pic.white) == "robust" for k in self.kernels)
            methods = ["robust" if edges else "minmax"]
        # The auto clip of a channel sum shows the mean; an explicit one, the values.
        mean = pic.white * n_summed if self.normalize == "auto" else pic.white
        margin = self.margin()
        return [Mapping(m, mean if m == "clip" else pic.white, margin)
                for m in methods for _ in names]

    def figure(self, pic, data: np.ndarray) -> Grid:
        names = self.channel_names(pic.channels)
        per_kernel = len(names)
        titles = ([k.name for k in self.kernels] if self.combine is None
                  else [" + ".join(k.name for k in self.kernels) + f" ({self.combine})"])
        rows = []
        for k, title in enumerate(titles):
            first = k * per_kernel
            chans = data[:, :, first:first + per_kernel]
            finite = chans[np.isfinite(chans)]
            signed = bool(finite.size and finite.min() < 0)
            # A constant map has no scale to show: its value goes in the title instead.
            constant = bool(finite.size and finite.min() == finite.max())
            note = f" (all {number(float(finite[0]))})" if constant else ""
            del finite
            # One symmetric scale per kernel, so that its channels can be compared;
            # its top is the robust top of the image outputs (the 99.5th percentile
            # of |x| away from the border), so that a few extreme values (a
            # zero-padded frame, specular highlights) do not wash the map out.
            limit = robust_top(chans, margin=self.margin())
            rows.append([
                Panel(f"{title}: {c}{note}", data[:, :, first + i], signed=signed,
                      vmax=limit or 1.0, colorbar=not constant)
                for i, c in enumerate(names)
            ])
        original = _original_panel(pic)
        if per_kernel == 1:  # one row: the original, then every kernel
            panels = [original] + [row[0] for row in rows]
            ncols = min(len(panels), 4)
        else:  # a row per kernel, the original above the first column
            panels = []
            for k, row in enumerate(rows):
                panels += [original if k == 0 else None] + row
            ncols = 1 + per_kernel
        title = (f"conv, --channels {self.channels}, stride {self.stride}, "
                 f"pad {pad_text(self.pad)}")
        title += f", dilation {self.dilation}" if self.dilation != 1 else ""
        return Grid(panels, ncols, title)




# --- grad: the backward passes as pictures ---------------------------------------------------


def _gradient_panels(data: np.ndarray, titles: list[str], *, signed: bool) -> list[Panel]:
    """One panel per gradient map, on one robust scale for all (signed: symmetric about zero).

    The top is the 99.5th percentile of |x|, as for conv's figures: the few
    pixels that many overlapping windows route to do not leave the rest dark.
    """
    top = robust_top(data)
    return [Panel(t, data[:, :, c], signed=signed, vmax=top or 1.0, colorbar=True)
            for c, t in enumerate(titles)]


@dataclass(frozen=True)
class GradPoolOp:
    """``convcli grad pool``: pool_backward's dA_prev for an upstream gradient of ones.

    The window is that of `pool` (:class:`PoolOp`). Max pooling gives each
    window's routing (1 at its first maximum, more where overlapping windows
    share one); average pooling the windows covering each pixel, each over
    its real pixels. Every channel on its own, alpha included; written as
    ``<stem>_grad-pool-<pool's details>-<channel>``, mapped ``robust`` (the
    99.5th percentile white: 1 for windows that do not overlap) unless
    `normalize` says otherwise.
    """

    pool: PoolOp
    normalize: str = "robust"
    name: ClassVar[str] = "grad"

    def __post_init__(self):
        if self.normalize not in NORMALIZE_CHOICES or self.normalize == "auto":
            raise OptionError(f"must be one of {', '.join(NORMALIZE_CHOICES[1:])}", "--normalize")

    @property
    def details(self) -> str:
        return f"pool-{self.pool.details}"

    def tags(self, channels: tuple[str, ...]) -> Tags:
        mapping = f"-{self.normalize}" if self.normalize != "robust" else ""
        return Tags(channels=[f"{self.details}{mapping}-{c}" for c in channels], whole=None,
                    raw=self.details)

    def check(self, pic) -> None:
        self.pool.check(pic)

    def compute(self, pic) -> np.ndarray:
        pool = self.pool
        return like_picture(pool_input_grad(as_batch(pic.pixels), f=pool.size, stride=pool.stride,
                                            mode=pool.mode, pad=pool.pad, ceil=pool.ceil), pic)

    def mappings(self, pic) -> list[Mapping]:
        return [Mapping(self.normalize, pic.white)] * len(pic.channels)

    def figure(self, pic, data: np.ndarray) -> Grid:
        titles = [f"dA_prev: {c}" for c in pic.channels]
        panels = [_original_panel(pic)] + _gradient_panels(data, titles, signed=False)
        pool = self.pool
        return Grid(panels, min(len(panels), 4),
                    f"grad {pool.mode} pool f={pool.size} s={pool.stride}, upstream ones")


@dataclass(frozen=True)
class GradConvOp:
    """``convcli grad conv``: conv_backward's dA_prev for L = sum(Z) or L = sum(Z**2) / 2.

    The input and the layer are those of `conv` (:class:`ConvOp`, without
    ``combine``): with ``--channels sum`` the gradient with respect to the
    channel sum, which is that of every colour channel; with ``each`` one map
    per channel; a border other than zeros is folded back onto the pixels it
    copies. One map per kernel, written as
    ``<stem>_grad-conv-<kernel><options>-<loss>-<channel>``, mapped ``offset``
    (zero mid-grey) unless `normalize` says otherwise. Each file's message
    gives dW, the gradient of L with respect to the kernel, as a grid.
    """

    conv: ConvOp
    loss: str = "energy"
    normalize: str = "offset"
    name: ClassVar[str] = "grad"

    def __post_init__(self):
        if self.loss not in LOSSES:
            raise OptionError(f"must be one of {', '.join(LOSSES)}", "--loss")
        if self.conv.combine is not None:
            raise OptionError("combines results; grad conv makes one map per kernel",
                              "--combine")
        if self.normalize not in NORMALIZE_CHOICES or self.normalize == "auto":
            raise OptionError(f"must be one of {', '.join(NORMALIZE_CHOICES[1:])}", "--normalize")

    def _options(self) -> str:
        return f"{self.conv.options_tag()}-{self.loss}"

    def tags(self, channels: tuple[str, ...]) -> Tags:
        options = self._options()
        mapping = f"-{self.normalize}" if self.normalize != "offset" else ""
        names = self.conv.channel_names(channels)
        kernels = "+".join(k.label for k in self.conv.kernels)
        return Tags(
            channels=[f"conv-{k.label}{options}{mapping}-{c}"
                      for k in self.conv.kernels for c in names],
            whole=None,
            raw=f"conv-{kernels}{options}-{self.conv.channels}",
        )

    def check(self, pic) -> None:
        self.conv.check(pic)

    def gradients(self, pic) -> tuple[np.ndarray, list[np.ndarray]]:
        """The (H, W, n_kernels * n_maps) dA_prev maps, and each kernel's (f_h, f_w) dW.

        For a stack, (m, H, W, ...) maps, and dW summed over its frames.
        """
        A = self.conv.conv_input(pic)
        frames, channels = A.shape[0], A.shape[3]
        # A channel of a frame per image: frame-major.
        A = channels_as_images(A)
        maps, dWs = [], []
        b = np.full((1, 1, 1, 1), self.conv.bias, np.float32)
        for kernel in self.conv.kernels:
            A_in, pad = self.conv.layer_input(A, kernel)
            W = kernel.weights.astype(np.float32)[:, :, None, None]
            hp = {"stride": self.conv.stride, "pad": pad, "dilation": self.conv.dilation}
            dA, dW = conv_grads(A_in, W, b, hp, loss=self.loss)
            del A_in
            if pad == 0:  # bordered by us: fold the border's gradient back onto its pixels
                dA = unpad_grad(dA, self.conv.pad_widths(kernel), mode=self.conv.border)
            dA = dA[..., 0].reshape((frames, channels) + dA.shape[1:3])
            maps.append(like_picture(np.moveaxis(dA, 1, 3), pic))
            dWs.append(dW[:, :, 0, 0])
        return np.concatenate(maps, axis=-1), dWs

    def compute(self, pic) -> np.ndarray:
        return self.gradients(pic)[0]

    def compute_with_summary(self, pic) -> tuple[np.ndarray, str]:
        """The dA_prev maps of `pic`, and its dW as :meth:`dW_text` writes it."""
        data, dWs = self.gradients(pic)
        return data, self.dW_text(dWs)

    def dW_text(self, dWs: list[np.ndarray]) -> str:
        """Each kernel's dW (from :meth:`gradients`) as a grid in full digits."""
        blocks = [f"dW of {k.name} (L = {self._loss_text()}):\n{format_kernel_grid(dW)}"
                  for k, dW in zip(self.conv.kernels, dWs, strict=True)]
        return "\n".join(blocks)

    def _loss_text(self) -> str:
        return "sum(Z)" if self.loss == "sum" else "sum(Z^2)/2"

    def mappings(self, pic) -> list[Mapping]:
        n = len(self.conv.channel_names(pic.channels)) * len(self.conv.kernels)
        return [Mapping(self.normalize, pic.white)] * n

    def figure(self, pic, data: np.ndarray) -> Grid:
        names = self.conv.channel_names(pic.channels)
        titles = [f"dA_prev, {k.name}: {c}" for k in self.conv.kernels for c in names]
        panels = [_original_panel(pic)] + _gradient_panels(data, titles, signed=True)
        return Grid(panels, min(len(panels), 4),
                    f"grad conv, L = {self._loss_text()}, --channels {self.conv.channels}")


OPERATIONS: tuple[type[Operation], ...] = (PadOp, ConvOp, PoolOp, GradPoolOp, GradConvOp)
# One name per command: both grad operations write <stem>_grad-...
OPERATION_NAMES = tuple(dict.fromkeys(op.name for op in OPERATIONS))


# Values of the uint16 block that channel_sum_padded sums a few rows in (64 kB: in cache).
SUM_BLOCK_VALUES = 1 << 15


def channel_sum_padded(colour: np.ndarray, widths: tuple[int, int, int, int],
                       border: str) -> np.ndarray:
    """The channels' sum of 8-bit `colour` (m, H, W, C), padded by `widths` as `border` fills
    it, in float32 (m, H + top + bottom, W + left + right, 1).

    The same values as ``pad_images_as(colour.sum(axis=3, keepdims=True), ...)``:
    the sum is exact in uint16, made a block of rows at a time in a buffer that
    stays in cache and written straight into the padded array, with no
    picture-sized sum (8.6 MB for a 2400x1800 photo) and no pass to convert it.
    """
    top, bottom, left, right = widths
    m, H, W, _ = colour.shape
    padded = np.empty((m, H + top + bottom, W + left + right, 1), np.float32)
    inside = padded[:, top:top + H, left:left + W, 0]
    rows = max(1, SUM_BLOCK_VALUES // max(1, W))
    block = np.empty((rows, W), np.uint16)
    for i in range(m):
        for r in range(0, H, rows):
            inside[i, r:r + rows] = sum_channels(colour[i, r:r + rows], block[:min(rows, H - r)])
    return fill_border(padded, widths, mode=border)


def sum_channels(colour: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The sum of 8-bit `colour`'s channels (its last axis, two or more) into `out` (uint16:
    exact, as in float32); returns `out`."""
    np.add(colour[..., 0], colour[..., 1], out=out, dtype=np.uint16)
    for c in range(2, colour.shape[-1]):
        out += colour[..., c]
    return out
