"""``convcli pad`` and ``convcli pool``: the same work on every channel, alpha included.

Both check their options when they are made (:class:`OptionError` names the
option) and keep the values in the input's scale; see :mod:`convcli.app.ops`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..errors import OptionError
from ..io.figures import Grid, Panel
from ..layers.padding import pad_images, pad_mode
from ..layers.pooling import _pooled_size, pool_forward, pool_mode
from ..levels.mapping import Mapping
from .geometry import RowGeometry
from .names import Tags, number
from .op_helpers import (
    as_batch,
    check_padded_size,
    float32_option,
    frame_size,
    like_picture,
    mode_option,
    original_panel,
    pad_option,
    pad_text,
    side_widths,
    whole_option,
)
from .work import whole_work_bytes


class _Channelwise:
    """Pad and pool: the same work on every channel, values kept in the input's scale.

    The whole colour image, in the input's format (:attr:`writes_image`); one
    grey file per channel too with ``--separate``; all tagged with the
    operation's ``details``.
    """

    details: str
    name: ClassVar[str]
    writes_image: ClassVar[bool] = True

    def tags(self, channels: tuple[str, ...]) -> Tags:
        return Tags(
            channels=[f"{self.details}-{c}" for c in channels],
            whole=self.details if len(channels) > 1 else None,
            raw=self.details,
            bands=tuple(range(len(channels))),
        )

    def mappings(self, pic) -> list[Mapping]:
        return [Mapping("clip", pic.white)] * len(pic.channels)

    def figure(self, pic, data: np.ndarray) -> Grid:
        white = pic.white if pic.white > 0 else 1.0
        panels = [original_panel(pic)]
        if data.shape[2] in (3, 4):
            colour = data / white
            np.clip(colour, 0.0, 1.0, out=colour)
            panels.append(Panel(f"{self.name} {self.details}", colour))
        panels += [
            Panel(t, data[:, :, c], vmax=white, colorbar=True)
            for c, t in enumerate(self.titles(pic.channels))
        ]
        return Grid(panels, min(len(panels), 5), f"{self.name} {self.details}")

    def work_bytes(self, height: int, width: int, channels: int, sample_bytes: int) -> int:
        """Every channel in float32, and per result channel 9 bytes an output pixel (20 with
        16-bit levels): :mod:`convcli.app.work`."""
        return whole_work_bytes(
            self,
            height,
            width,
            channels,
            sample_bytes,
            float_channels=channels,
            maps=channels,
            per_map=(9, 20),
        )


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
        object.__setattr__(self, "mode", mode_option(pad_mode, self.mode, "--mode"))
        if isinstance(self.pad, (tuple, list)):
            object.__setattr__(self, "pad", side_widths(self.pad))
        else:
            object.__setattr__(self, "pad", whole_option(self.pad, "--pad", minimum=0))
        float32_option(self.value, "--value")

    @property
    def widths(self) -> tuple[int, int, int, int]:
        """The pad's (top, bottom, left, right) widths."""
        return self.pad if isinstance(self.pad, tuple) else (self.pad,) * 4

    @property
    def details(self) -> str:
        text = f"{self.mode}-{pad_text(self.pad)}"
        if self.mode == "constant" and self.value != 0:
            text += f"-v{number(self.value)}"
        return text

    def check(self, pic) -> None:
        pass

    def compute_with_summary(self, pic) -> tuple[np.ndarray, str]:
        """The padded picture, and :meth:`fill_note` for it."""
        return self.compute(pic), self.fill_note(pic.white, pic.floats)

    def fill_note(self, white: float, floats: bool) -> str:
        """What the border holds where ``--value`` is no level of an image of integer
        samples (not `floats`), 0 to `white`: image files hold the nearest level, as they
        hold any value (the nearest end past the range, the even level at a half), and
        npy files the value; "" where it is a level."""
        if self.mode != "constant" or floats:
            return ""
        held = float(np.rint(np.clip(np.float32(self.value), 0, white)))  # as levels are made
        if held == self.value:
            return ""
        what = "is no whole level" if 0 <= self.value <= white else "is past the samples' range"
        return (
            f"--value {number(self.value)} {what}, 0 to {number(white)}: "
            f"the border is {number(held)} in image files ({number(self.value)} in npy)"
        )

    def compute(self, pic) -> np.ndarray:
        n = pic.colour_channels
        pixels = as_batch(pic.pixels)
        check_padded_size(pixels.shape, self.widths, f"--pad {pad_option(self.pad)}")
        _, fill = self.border_fill(pic.channels, pic.white)
        colour = pad_images(pixels[..., :n], self.pad, mode=self.mode, value=float(fill[0]))
        if pic.carried.nodata is not None:  # a border of GDAL's nodata value is missing
            colour[colour == np.float32(pic.carried.nodata)] = np.nan
        if not pic.has_alpha:
            return like_picture(colour, pic)
        alpha = pad_images(pixels[..., n:], self.pad, mode=self.mode, value=float(fill[-1]))
        return like_picture(np.concatenate([colour, alpha], axis=3), pic)

    def titles(self, channels: tuple[str, ...]) -> list[str]:
        return [f"pad {self.mode} {pad_text(self.pad)}: {c}" for c in channels]

    computed_whole: ClassVar[bool] = False
    """Computed in strips where the whole image's work would not fit the memory budget."""

    def row_geometry(self, height: int, width: int = 1) -> RowGeometry:
        """How the output rows read the input rows (:class:`RowGeometry`)."""
        top, bottom = self.widths[:2]
        return RowGeometry(1, (top,), (1,), height + top + bottom)

    def output_grid(self) -> tuple[int, float, float]:
        """The input's grid, moved by the pad above and on the left."""
        top, left = self.widths[0::2]
        return 1, float(-top), float(-left)

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """The (height, width) of the result on an image of `height` x `width`."""
        left, right = self.widths[2:]
        return self.row_geometry(height).out_rows, width + left + right

    def border_fill(self, channels: tuple[str, ...], white: float) -> tuple[str | None, np.ndarray]:
        """The border rows beyond the image hold, and its constant: ``--value``, alpha opaque
        (the border is drawn around the image, as ImageMagick's ``-border`` draws it)."""
        fill = np.full(len(channels), self.value, np.float32)
        if channels[-1] == "A":
            fill[-1] = white
        return self.mode, fill


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
        object.__setattr__(self, "mode", mode_option(pool_mode, self.mode, "--mode"))
        object.__setattr__(self, "size", whole_option(self.size, "--size", minimum=1))
        stride = (
            self.size if self.stride is None else whole_option(self.stride, "--stride", minimum=1)
        )
        object.__setattr__(self, "stride", stride)
        object.__setattr__(self, "pad", whole_option(self.pad, "--pad", minimum=0))
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
        self._check_size(*frame_size(pic))

    def _check_size(self, h: int, w: int) -> None:
        """A ValueError where an image of `h` x `w` pixels is smaller than the window."""
        if min(h, w) + 2 * self.pad < self.size:
            with_pad = f" with pad {self.pad}" if self.pad else ""
            raise ValueError(
                f"image is {w}x{h} pixels, too small for the {self.size}x{self.size} "
                f"pooling window (--size){with_pad}"
            )

    def compute(self, pic) -> np.ndarray:
        hp = {"f": self.size, "stride": self.stride, "pad": self.pad, "ceil_mode": self.ceil}
        if pic.carried.nodata is not None:
            return like_picture(_pool_of_valid(pic, hp, self.mode), pic)
        if pic.has_alpha:
            return like_picture(_alpha_weighted_pool(pic, hp, self.mode), pic)
        out, _ = pool_forward(as_batch(pic.pixels), hp, self.mode)
        return like_picture(out, pic)

    def titles(self, channels: tuple[str, ...]) -> list[str]:
        options = (f" p={self.pad}" if self.pad else "") + (" ceil" if self.ceil else "")
        return [f"{self.mode} pool f={self.size} s={self.stride}{options}: {c}" for c in channels]

    computed_whole: ClassVar[bool] = False
    """Computed in strips where the whole image's work would not fit the memory budget."""

    def row_geometry(self, height: int, width: int = 1) -> RowGeometry:
        """How the output rows read the input rows (:class:`RowGeometry`): no border."""
        rows = _pooled_size(height, self.size, self.stride, self.pad, self.ceil)
        return RowGeometry(self.stride, (self.pad,), (self.size,), rows, bordered=False)

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """The (height, width) of the result on an image of `height` x `width` (a ValueError,
        as :meth:`check` raises, where the image is smaller than the window)."""
        self._check_size(height, width)
        return (
            self.row_geometry(height).out_rows,
            _pooled_size(width, self.size, self.stride, self.pad, self.ceil),
        )

    def border_fill(self, channels: tuple[str, ...], white: float) -> tuple[str | None, np.ndarray]:
        """No border: pooling's padding is counted by no window."""
        return None, np.zeros(len(channels), np.float32)

    def output_grid(self) -> tuple[int, float, float]:
        """One output pixel a stride, centred on its window."""
        offset = -self.pad + (self.size - self.stride) / 2
        return self.stride, offset, offset


def _alpha_weighted_pool(pic, hp: dict, mode: str) -> np.ndarray:
    """Pooling of a picture with alpha: the colour under transparent pixels never shows.

    Average: each colour weighted by its pixel's opacity (premultiplied, as
    ImageMagick's resizes and convolutions are), ``sum(c * a) / sum(a)``;
    max: the largest colour among the visible pixels (alpha above 0). A window
    of transparent pixels alone gives colour 0. Alpha is pooled as any channel.
    Opaque pictures get the values of plain pooling, bit for bit (their weights are 1).
    """
    pixels = as_batch(pic.pixels)
    n = pic.colour_channels
    colour, alpha = pixels[..., :n], pixels[..., n:]
    alpha_out, _ = pool_forward(alpha, hp, mode)
    weight = alpha / np.float32(pic.white or 1.0)
    colour_out = _weighted_pool(colour, weight, hp, mode, np.float32(0))
    return np.concatenate([colour_out, alpha_out], axis=3)


def _pool_of_valid(pic, hp: dict, mode: str) -> np.ndarray:
    """Pooling of a GeoTIFF with GDAL's nodata value: its missing values (NaN) never reach a
    window's average or maximum, the mean or the largest of the others; a window of missing
    values alone is missing, and with alpha (never missing), one where no valid pixel shows
    (the colour weighted as :func:`_alpha_weighted_pool` weighs it, alpha pooled as it
    pools it). Windows without missing values get the values of plain pooling, bit for bit
    (their weights are 1)."""
    pixels = as_batch(pic.pixels)
    n = pic.colour_channels
    colour, alpha = pixels[..., :n], pixels[..., n:]
    lost = np.isnan(colour)
    if not pic.has_alpha and not lost.any():
        return pool_forward(pixels, hp, mode)[0]
    weight = np.where(lost, np.float32(0), np.float32(1))
    if pic.has_alpha:
        weight *= alpha / np.float32(pic.white or 1.0)
    values = np.where(lost, np.float32(0), colour)
    colour_out = _weighted_pool(values, weight, hp, mode, np.float32(np.nan))
    if not pic.has_alpha:
        return colour_out
    return np.concatenate([colour_out, pool_forward(alpha, hp, mode)[0]], axis=3)


def _weighted_pool(values, weight, hp: dict, mode: str, empty: np.float32) -> np.ndarray:
    """Pooling of `values` with a `weight` each (0 leaves a value out): average
    ``sum(v * w) / sum(w)``, max the largest value of weight above 0; `empty` for a window
    whose weights are all 0."""
    n = values.shape[3]
    if mode == "average":
        pooled, _ = pool_forward(np.concatenate([values * weight, weight], axis=3), hp, mode)
        total = pooled[..., n:]
        out = np.full_like(pooled[..., :n], empty)
        return np.divide(pooled[..., :n], total, out=out, where=total > 0)
    hidden = np.float32(-np.inf)
    pooled, _ = pool_forward(np.where(weight > 0, values, hidden), hp, mode)
    return np.where(pooled == hidden, empty, pooled)
