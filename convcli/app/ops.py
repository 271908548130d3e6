"""The operations the commands apply to each picture: pad, conv and pool (no click, no Pillow).

Every operation follows :class:`Operation`; :data:`OPERATIONS` lists them, and
output names are built and recognised from their ``name`` (see
:mod:`convcli.app.names`). An operation checks its options when it is made,
each value and the rules that span them: :class:`OptionError` names the option.

The operations live in :mod:`convcli.app.pad_pool` (:class:`PadOp`,
:class:`PoolOp`), :mod:`convcli.app.conv_op` (:class:`ConvOp`) and
:mod:`convcli.app.grad_ops` (:class:`GradPoolOp`, :class:`GradConvOp`), what
they share in :mod:`convcli.app.op_helpers`; all of them can be taken from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Protocol

import numpy as np

from ..errors import OptionError
from ..levels.mapping import Mapping, count_not_finite
from .conv_op import ConvOp
from .conv_pixels import channel_sum_padded, sum_channels
from .geometry import RowGeometry
from .grad_ops import GradConvOp, GradPoolOp
from .names import Tags
from .op_helpers import (
    as_batch,
    channels_as_images,
    frame_size,
    like_picture,
    pad_option,
    pad_text,
    side_widths,
)
from .pad_pool import PadOp, PoolOp

if TYPE_CHECKING:
    from ..io.figures import Grid

__all__ = [
    "OPERATIONS",
    "OPERATION_NAMES",
    "ConvOp",
    "GradConvOp",
    "GradPoolOp",
    "Operation",
    "OptionError",
    "PadOp",
    "PoolOp",
    "as_batch",
    "channel_sum_padded",
    "channels_as_images",
    "frame_size",
    "like_picture",
    "not_finite_count",
    "pad_option",
    "pad_text",
    "result_and_summary",
    "side_widths",
    "sum_channels",
]


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

    writes_image: ClassVar[bool]
    """Whether its result is the input image changed (pad, pool): written whole, in the
    input's format, its channels as grey files only with ``--separate``
    (:func:`convcli.app.outputs.output_format`); else maps, one file each, PNG by default."""

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

    computed_whole: ClassVar[bool]
    """Whether it is always computed whole (never in strips): then :meth:`row_geometry`
    is None."""

    def row_geometry(self, height: int, width: int = 1) -> RowGeometry | None:
        """How its output rows read the input rows, or None where it is computed whole
        (never in strips): :class:`convcli.app.geometry.RowGeometry`."""

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """The (height, width) of its result on an image of `height` x `width`: what the dry
        run says and the memory budget counts. Raises the ValueError of :meth:`check` where
        an image of that size cannot be processed."""

    def border_fill(self, channels: tuple[str, ...], white: float) -> tuple[str | None, np.ndarray]:
        """The border rows beyond the image hold (a ``--border`` mode), None where no window
        reads beyond the image's values; and the constant of each of `channels` (float32),
        alpha's included, where the mode is ``constant``: the one rule of the border's values
        for the whole image and its strips alike."""

    def output_grid(self) -> tuple[int, float, float]:
        """Where its output pixels lie on the input's: ``(step, top, left)``, the input pixels
        between output pixels, and the input coordinates (pixel corners) of output pixel
        (0, 0)'s top-left corner, centred on its window: ``-pad + (window - step) / 2``."""

    def work_bytes(self, height: int, width: int, channels: int, sample_bytes: int) -> int:
        """About the peak memory of its whole-image run on an image of `height` x `width`
        with `channels` samples of `sample_bytes` each (:mod:`convcli.app.work`)."""


def result_and_summary(op: Operation, pic) -> tuple[np.ndarray, str]:
    """`op`'s float32 result for `pic`, and what it reports beside its files ("" for nothing)."""
    with_summary = getattr(op, "compute_with_summary", None)
    data, summary = with_summary(pic) if with_summary is not None else (op.compute(pic), "")
    return np.asarray(data, dtype=np.float32), summary


def not_finite_count(op: Operation, pic, data: np.ndarray) -> int:
    """How many of `data` (`op`'s result for `pic`, or some of its rows) are NaN or infinite:
    0 without a pass over them where `op` vouches for every result on `pic` (an operation's
    optional ``finite_results(pic)``: a conv of integer samples, :class:`ConvOp`)."""
    vouches = getattr(op, "finite_results", None)
    return 0 if vouches is not None and vouches(pic) else count_not_finite(data)


OPERATIONS: tuple[type[Operation], ...] = (PadOp, ConvOp, PoolOp, GradPoolOp, GradConvOp)
# One name per command: both grad operations write <stem>_grad-...
OPERATION_NAMES = tuple(dict.fromkeys(op.name for op in OPERATIONS))
