"""The operations the commands apply to each picture: pad, conv and pool (no click, no Pillow).

Every operation follows :class:`Operation`; :data:`OPERATIONS` lists them, and
output names are built and recognised from their ``name`` (see
:mod:`convcli.app.names`). An operation checks the rules that span its options
when it is made (:class:`OptionError` names the option); single values are
checked by the library functions it calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from ..conv import conv_forward, depthwise_conv_forward
from ..figures import Grid, Panel
from ..kernels import Kernel
from ..levels import MAPPINGS, luminance
from ..padding import pad_images, pad_mode
from ..pooling import pool_forward, pool_mode
from .names import Tags, number

CHANNEL_MODES = ("sum", "each", "gray")
NORMALIZE_CHOICES = ("auto", *MAPPINGS)

_FLOAT32_MAX = float(np.finfo(np.float32).max)


class OptionError(ValueError):
    """Options that cannot work together, or a value out of range; `option` names the option."""

    def __init__(self, message: str, option: str):
        super().__init__(message)
        self.option = option


class Operation(Protocol):
    """What :mod:`convcli.app.process` needs of an operation (frozen and picklable).

    A picture (:class:`convcli.images.Picture`) has ``pixels`` (H, W, C) float32,
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
        """The (H', W', C') result, one channel per entry of ``tags(...).channels``."""

    def mappings(self, pic) -> list[str]:
        """The value mapping (:data:`convcli.levels.MAPPINGS`) of each result channel."""

    def figure(self, pic, data: np.ndarray) -> Grid:
        """The figure grid of the picture and its result (``--figure``)."""


def _finite(value: float, option: str) -> float:
    if not math.isfinite(value):
        raise OptionError(f"must be a finite number, got {value!r}", option)
    return value


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

    def mappings(self, pic) -> list[str]:
        return ["clip"] * len(pic.channels)

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

    pad: int = 2
    value: float = 0.0
    mode: str = "constant"
    name: ClassVar[str] = "pad"

    def __post_init__(self):
        object.__setattr__(self, "mode", pad_mode(self.mode))
        _finite(self.value, "--value")
        if abs(self.value) > _FLOAT32_MAX:
            raise OptionError(
                f"{number(self.value)} is beyond the float32 range of the results "
                "(magnitude at most about 3.4e38)",
                "--value",
            )

    @property
    def details(self) -> str:
        text = f"{self.mode}-{self.pad}"
        if self.mode == "constant" and self.value != 0:
            text += f"-v{number(self.value)}"
        return text

    def check(self, pic) -> None:
        pass

    def compute(self, pic) -> np.ndarray:
        n = pic.colour_channels
        colour = pad_images(pic.pixels[None, :, :, :n], self.pad, mode=self.mode, value=self.value)
        if not pic.has_alpha:
            return colour[0]
        alpha = pad_images(pic.pixels[None, :, :, n:], self.pad, mode=self.mode, value=pic.white)
        return np.concatenate([colour, alpha], axis=3)[0]

    def titles(self, channels: tuple[str, ...]) -> list[str]:
        return [f"pad {self.mode} {self.pad}: {c}" for c in channels]


@dataclass(frozen=True)
class PoolOp(_Channelwise):
    """``convcli pool``: :func:`convcli.pool_forward` on every channel, alpha included."""

    mode: str = "max"
    size: int = 2
    stride: int | None = None
    name: ClassVar[str] = "pool"

    def __post_init__(self):
        object.__setattr__(self, "mode", pool_mode(self.mode))
        if self.stride is None:
            object.__setattr__(self, "stride", self.size)

    @property
    def details(self) -> str:
        return f"{self.mode}-f{self.size}-s{self.stride}"

    def check(self, pic) -> None:
        h, w = pic.pixels.shape[:2]
        if h < self.size or w < self.size:
            raise ValueError(
                f"image is {w}x{h} pixels, too small for the {self.size}x{self.size} "
                "pooling window (--size)"
            )

    def compute(self, pic) -> np.ndarray:
        out, _ = pool_forward(pic.pixels[None], {"f": self.size, "stride": self.stride}, self.mode)
        return out[0]

    def titles(self, channels: tuple[str, ...]) -> list[str]:
        return [f"{self.mode} pool f={self.size} s={self.stride}: {c}" for c in channels]


def _robust_peak(values: np.ndarray) -> float:
    """The 99.5th percentile of |values|, or their maximum if that is 0; 1.0 if empty.

    `values` (a temporary array) is overwritten: no copies of a picture's size are made.
    """
    if not values.size:
        return 1.0
    a = np.abs(values, out=values)
    peak = float(np.percentile(a, 99.5, overwrite_input=True))
    return peak if peak > 0 else float(a.max()) or 1.0


@dataclass(frozen=True)
class ConvOp:
    """``convcli conv``: :func:`convcli.conv_forward` (or its depthwise sibling) per image.

    Parameters
    ----------
    kernels : tuple of Kernel
        Applied in order; their labels must differ.
    stride : int
    pad : int or {"same", "valid"}
        ``same`` is ``(f - 1) // 2`` for an f x f kernel, which keeps the size at
        stride 1; it needs odd square kernels (an even or rectangular kernel has no
        centre cell with the same margin on every side: :class:`OptionError`).
        ``valid`` is 0.
    bias : float
        Added once to every output value (``b`` filled with it); named in the
        outputs as ``-b<B>`` when it is not 0.
    channels : {"sum", "each", "gray"}
        ``sum``: each kernel over every colour channel, summed (conv_forward on the
        channel sum, which is conv_forward with the kernel repeated over the input
        channels), one output channel per kernel. ``each``: depthwise, kernel-major
        (k0 on R, G, B, then k1 ...). ``gray``: luminance first, then conv_forward.
        Alpha is dropped in all three (it is not a colour).
    normalize : {"auto", "abs", "minmax", "clip", "offset"}
        Mapping of each output channel to image levels, see :meth:`mapping_for`;
        named in the image outputs (not the ``.npy``) unless it is ``auto``.

    Output tags are ``<kernel>[-s<S>][-p<N>][-b<B>][-<normalize>]-<channel>`` per
    channel (the stride, pad and bias only when they are not 1, ``same`` and 0;
    the channel ``sum``, ``gray`` or the input channel for ``each``), and for the
    ``.npy`` the kernels joined by ``+``, the same options but no mapping, and
    the channel mode: ``vertical+horizontal-b100-sum``.
    """

    kernels: tuple[Kernel, ...]
    stride: int = 1
    pad: int | str = "same"
    bias: float = 0.0
    channels: str = "sum"
    normalize: str = "auto"
    name: ClassVar[str] = "conv"

    def __post_init__(self):
        object.__setattr__(self, "kernels", tuple(self.kernels))
        if not self.kernels:
            raise ValueError("no kernel given")
        if self.channels not in CHANNEL_MODES:
            raise ValueError(f"channels must be one of {', '.join(CHANNEL_MODES)}")
        if self.normalize not in NORMALIZE_CHOICES:
            raise ValueError(f"normalize must be one of {', '.join(NORMALIZE_CHOICES)}")
        _finite(self.bias, "--bias")
        if isinstance(self.pad, str) and self.pad not in ("same", "valid"):
            raise ValueError(f"pad must be same, valid or an integer >= 0, got {self.pad!r}")
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
                        f"{where} is {k.size[0]}x{k.size[1]}: --pad same needs an odd square "
                        "size (a centre cell); use --pad valid or --pad N",
                        "--pad",
                    )
        # All kernels must give outputs of the same size, whatever the image size.
        margins = {(2 * self.pad_for(k) - k.size[0], 2 * self.pad_for(k) - k.size[1])
                   for k in self.kernels}
        if len(margins) > 1:
            sizes = ", ".join(f"{k.name} {k.size[0]}x{k.size[1]}" for k in self.kernels)
            raise OptionError(
                f"the kernels give results of different sizes with --pad {self.pad} ({sizes}); "
                "use --pad same with odd kernels, or run them separately",
                "--pad",
            )

    def pad_for(self, kernel: Kernel) -> int:
        """The integer pad passed to conv_forward for `kernel`."""
        if self.pad == "same":
            return (kernel.size[0] - 1) // 2
        if self.pad == "valid":
            return 0
        return int(self.pad)

    # --- names ---

    def _options_tag(self) -> str:
        """``-s<S>``, ``-p<N>`` and ``-b<B>``, each only when not the default."""
        text = f"-s{self.stride}" if self.stride != 1 else ""
        if self.pad != "same":
            text += f"-p{0 if self.pad == 'valid' else self.pad}"
        if self.bias != 0:
            text += f"-b{number(self.bias)}"
        return text

    def _channel_names(self, channels: tuple[str, ...]) -> list[str]:
        colour = [c for c in channels if c != "A"]
        return colour if self.channels == "each" else [self.channels]

    def tags(self, channels: tuple[str, ...]) -> Tags:
        options = self._options_tag()
        mapping = f"-{self.normalize}" if self.normalize != "auto" else ""
        return Tags(
            channels=[f"{k.label}{options}{mapping}-{c}"
                      for k in self.kernels for c in self._channel_names(channels)],
            whole=None,
            raw="+".join(k.label for k in self.kernels) + f"{options}-{self.channels}",
        )

    # --- pixels ---

    def check(self, pic) -> None:
        h, w = pic.pixels.shape[:2]
        for k in self.kernels:
            p = self.pad_for(k)
            if h + 2 * p < k.size[0] or w + 2 * p < k.size[1]:
                raise ValueError(
                    f"image is {w}x{h} pixels, too small for the {k.size[0]}x{k.size[1]} "
                    f"kernel {k.name!r} with pad {p}"
                )

    def conv_input(self, pic) -> np.ndarray:
        """The (1, H, W, C) float32 array the library is called on (C = 1 unless ``each``)."""
        colour = pic.pixels[None, :, :, : pic.colour_channels]
        if self.channels == "gray" and colour.shape[3] == 3:
            return luminance(colour)
        if self.channels == "sum" and colour.shape[3] > 1:
            # A kernel repeated over the channels gives the correlation of their sum.
            return colour @ np.ones((colour.shape[3], 1), np.float32)
        return colour

    def compute(self, pic) -> np.ndarray:
        A = self.conv_input(pic)
        if self.channels == "each":
            return self._depthwise(A)
        results = []
        # Consecutive kernels of one shape go through the library in one call.
        start = 0
        while start < len(self.kernels):
            stop = start + 1
            shape = self.kernels[start].size
            while stop < len(self.kernels) and self.kernels[stop].size == shape:
                stop += 1
            group = self.kernels[start:stop]
            hp = {"stride": self.stride, "pad": self.pad_for(group[0])}
            W = np.stack([k.weights for k in group], axis=-1).astype(np.float32)[:, :, None, :]
            b = np.full((1, 1, 1, len(group)), self.bias, np.float32)
            Z, _ = conv_forward(A, W, b, hp)
            results.append(Z[0])
            start = stop
        return np.concatenate(results, axis=2) if len(results) > 1 else results[0]

    def _depthwise(self, A: np.ndarray) -> np.ndarray:
        """``--channels each``: depthwise_conv_forward one kernel on one channel at a time.

        Each output channel is computed exactly as in one call over every kernel
        and channel (element by element, in the same order), but the library's
        temporaries are the size of one channel, not of the whole result: the
        peak memory of a 3-kernel RGB run fell from 7 to 4 times the picture's
        float32 size.
        """
        n_in = A.shape[3]
        out = None
        b = np.full((1, 1, 1, 1), self.bias, np.float32)
        for k, kernel in enumerate(self.kernels):
            hp = {"stride": self.stride, "pad": self.pad_for(kernel)}
            W = kernel.weights.astype(np.float32)[:, :, None, None]
            for c in range(n_in):
                Z, _ = depthwise_conv_forward(A[:, :, :, c:c + 1], W, b, hp)
                if out is None:
                    out = np.empty(Z.shape[1:3] + (len(self.kernels) * n_in,), Z.dtype)
                out[:, :, k * n_in + c] = Z[0, :, :, 0]
                del Z
        return out

    # --- levels and figures ---

    def mapping_for(self, kernel: Kernel, n_summed: int, white: float) -> str:
        """The value mapping ``--normalize auto`` picks for one kernel.

        ``clip`` when the result cannot leave 0..white (blur and identity
        kernels on one channel: values are shown as they are); ``abs`` for a
        zero-sum kernel (edge detectors: edge strength, bright on black); otherwise
        ``minmax`` (sharpen, emboss, or a sum over several channels).
        """
        if self.normalize != "auto":
            return self.normalize
        w = kernel.weights
        lo = n_summed * white * float(w[w < 0].sum()) + self.bias
        hi = n_summed * white * float(w[w > 0].sum()) + self.bias
        if lo >= 0 and hi <= white * (1 + 1e-6):
            return "clip"
        if abs(float(w.sum())) <= 1e-9 * float(np.abs(w).sum()):
            return "abs"
        return "minmax"

    def mappings(self, pic) -> list[str]:
        names = self._channel_names(pic.channels)
        n_summed = pic.colour_channels if self.channels == "sum" else 1
        return [self.mapping_for(k, n_summed, pic.white) for k in self.kernels for _ in names]

    def figure(self, pic, data: np.ndarray) -> Grid:
        names = self._channel_names(pic.channels)
        per_kernel = len(names)
        rows = []
        for k, kernel in enumerate(self.kernels):
            first = k * per_kernel
            chans = data[:, :, first:first + per_kernel]
            finite = chans[np.isfinite(chans)]
            signed = bool(finite.size and finite.min() < 0)
            # One symmetric scale per kernel, so that its channels can be compared;
            # its top is the 99.5th percentile of |x|, so a few extreme values (the
            # zero-padded border, specular highlights) do not wash the map out.
            limit = _robust_peak(finite)
            rows.append([
                Panel(f"{kernel.name}: {c}", data[:, :, first + i], signed=signed,
                      vmax=limit or 1.0, colorbar=True)
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
        title = f"conv, --channels {self.channels}, stride {self.stride}, pad {self.pad}"
        return Grid(panels, ncols, title)


OPERATIONS: tuple[type[Operation], ...] = (PadOp, ConvOp, PoolOp)
OPERATION_NAMES = tuple(op.name for op in OPERATIONS)
