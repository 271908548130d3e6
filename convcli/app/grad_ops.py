"""``convcli grad``: the backward passes of pool and conv as pictures.

:class:`GradPoolOp` and :class:`GradConvOp` take the layer of a
:class:`~convcli.app.pad_pool.PoolOp` or a :class:`~convcli.app.conv_op.ConvOp`
and write the gradient with respect to its input (:mod:`convcli.app.grad`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..choices import LOSSES, NORMALIZE_CHOICES
from ..errors import OptionError
from ..io.figures import Grid, Panel
from ..kernels import format_kernel_grid
from ..levels.mapping import Mapping, robust_top
from .conv_op import ConvOp
from .grad import conv_grads, pool_input_grad, unpad_grad
from .names import Tags
from .op_helpers import as_batch, channels_as_images, like_picture, original_panel
from .pad_pool import PoolOp
from .work import whole_work_bytes


def _gradient_panels(data: np.ndarray, titles: list[str], *, signed: bool) -> list[Panel]:
    """One panel per gradient map, on one robust scale for all (signed: symmetric about zero).

    The top is the 99.5th percentile of |x|, as for conv's figures: the few
    pixels that many overlapping windows route to do not leave the rest dark.
    """
    top = robust_top(data)
    return [
        Panel(t, data[:, :, c], signed=signed, vmax=top or 1.0, colorbar=True)
        for c, t in enumerate(titles)
    ]


class _Gradient:
    """What the gradients' geometry is: the input's size, computed whole, never in strips."""

    computed_whole: ClassVar[bool] = True
    """A gradient is computed whole, never in strips."""

    def row_geometry(self, height: int, width: int = 1) -> None:
        """None: a gradient is computed whole, never in strips."""
        return None

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """The input's size: a gradient with respect to the input, of a size its forward
        operation takes (a ValueError, as :meth:`check` raises, where it does not)."""
        self.forward.output_size(height, width)
        return height, width

    def border_fill(self, channels: tuple[str, ...], white: float) -> tuple[str | None, np.ndarray]:
        return None, np.zeros(len(channels), np.float32)

    def output_grid(self) -> tuple[int, float, float]:
        """The input's own grid."""
        return 1, 0.0, 0.0

    def work_bytes(self, height: int, width: int, channels: int, sample_bytes: int) -> int:
        """The input, the upstream gradient and the result in float32, and 20 bytes an
        output pixel per channel: an upper bound (a gradient is never read in strips)."""
        return whole_work_bytes(
            self,
            height,
            width,
            channels,
            sample_bytes,
            float_channels=3 * channels,
            maps=channels,
            per_map=(20, 20),
        )


@dataclass(frozen=True)
class GradPoolOp(_Gradient):
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
    writes_image: ClassVar[bool] = False

    def __post_init__(self):
        if self.normalize not in NORMALIZE_CHOICES or self.normalize == "auto":
            raise OptionError(f"must be one of {', '.join(NORMALIZE_CHOICES[1:])}", "--normalize")

    @property
    def details(self) -> str:
        return f"pool-{self.pool.details}"

    def tags(self, channels: tuple[str, ...]) -> Tags:
        mapping = f"-{self.normalize}" if self.normalize != "robust" else ""
        return Tags(
            channels=[f"{self.details}{mapping}-{c}" for c in channels],
            whole=None,
            raw=self.details,
        )

    @property
    def forward(self) -> PoolOp:
        return self.pool

    def check(self, pic) -> None:
        self.pool.check(pic)

    def compute(self, pic) -> np.ndarray:
        pool = self.pool
        return like_picture(
            pool_input_grad(
                as_batch(pic.pixels),
                f=pool.size,
                stride=pool.stride,
                mode=pool.mode,
                pad=pool.pad,
                ceil=pool.ceil,
            ),
            pic,
        )

    def mappings(self, pic) -> list[Mapping]:
        return [Mapping(self.normalize, pic.white)] * len(pic.channels)

    def figure(self, pic, data: np.ndarray) -> Grid:
        titles = [f"dA_prev: {c}" for c in pic.channels]
        panels = [original_panel(pic)] + _gradient_panels(data, titles, signed=False)
        pool = self.pool
        return Grid(
            panels,
            min(len(panels), 4),
            f"grad {pool.mode} pool f={pool.size} s={pool.stride}, upstream ones",
        )


@dataclass(frozen=True)
class GradConvOp(_Gradient):
    """``convcli grad conv``: conv_backward's dA_prev for L = sum(Z) or L = sum(Z**2) / 2.

    The input and the layer are those of `conv` (:class:`ConvOp`, without
    ``combine``): with ``--channels sum`` the gradient with respect to the
    channel sum, which is that of every colour channel; with ``each`` one map
    per colour channel (of the colours over black where there is alpha); a
    border other than zeros is folded back onto the pixels it copies. One
    map per kernel, written as
    ``<stem>_grad-conv-<kernel><options>-<loss>-<channel>``, mapped
    ``offset`` (zero mid-grey) unless `normalize` says otherwise. Each file's message
    gives dW, the gradient of L with respect to the kernel, as a grid.
    """

    conv: ConvOp
    loss: str = "energy"
    normalize: str = "offset"
    name: ClassVar[str] = "grad"
    writes_image: ClassVar[bool] = False

    def __post_init__(self):
        if self.loss not in LOSSES:
            raise OptionError(f"must be one of {', '.join(LOSSES)}", "--loss")
        if self.conv.combine is not None:
            raise OptionError("combines results; grad conv makes one map per kernel", "--combine")
        if self.normalize not in NORMALIZE_CHOICES or self.normalize == "auto":
            raise OptionError(f"must be one of {', '.join(NORMALIZE_CHOICES[1:])}", "--normalize")

    def _options(self) -> str:
        return f"{self.conv.options_tag()}-{self.loss}"

    def tags(self, channels: tuple[str, ...]) -> Tags:
        options = self._options()
        mapping = f"-{self.normalize}" if self.normalize != "offset" else ""
        names = self.map_names(channels)
        kernels = "+".join(k.label for k in self.conv.kernels)
        return Tags(
            channels=[
                f"conv-{k.label}{options}{mapping}-{c}" for k in self.conv.kernels for c in names
            ],
            whole=None,
            raw=f"conv-{kernels}{options}-{self.conv.channels}",
        )

    @property
    def forward(self) -> ConvOp:
        return self.conv

    def map_names(self, channels: tuple[str, ...]) -> list[str]:
        """What each map of a kernel is named after: the channels of the layer's input.

        The colour channels for ``each``, never alpha: the layer takes the
        colours as they show over black (also for a blur, which ``conv``
        weighs by alpha), else the channel mode.
        """
        if self.conv.channels == "each":
            return [c for c in channels if c != "A"]
        return [self.conv.channels]

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
            dA, dW = conv_grads(A_in, W, b, hp, loss=self.loss, finite_only=True)
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
        blocks = [
            f"dW of {k.name} (L = {self._loss_text()}):\n{format_kernel_grid(dW)}"
            for k, dW in zip(self.conv.kernels, dWs, strict=True)
        ]
        return "\n".join(blocks)

    def _loss_text(self) -> str:
        return "sum(Z)" if self.loss == "sum" else "sum(Z^2)/2"

    def mappings(self, pic) -> list[Mapping]:
        n = len(self.map_names(pic.channels)) * len(self.conv.kernels)
        return [Mapping(self.normalize, pic.white)] * n

    def figure(self, pic, data: np.ndarray) -> Grid:
        names = self.map_names(pic.channels)
        titles = [f"dA_prev, {k.name}: {c}" for k in self.conv.kernels for c in names]
        panels = [original_panel(pic)] + _gradient_panels(data, titles, signed=True)
        return Grid(
            panels,
            min(len(panels), 4),
            f"grad conv, L = {self._loss_text()}, --channels {self.conv.channels}",
        )
