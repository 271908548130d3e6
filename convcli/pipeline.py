"""The work behind the command line: find inputs, plan outputs, process one file.

Nothing here imports click: the CLI parses options into an operation
(:class:`PadOp`, :class:`ConvOp` or :class:`PoolOp`), :func:`find_inputs` and
:func:`plan_tasks` turn its arguments into picklable :class:`Task` objects, and
:func:`process_file` (the worker passed to :func:`convcli.batch.iter_results`)
reads one image, calls the library and writes the results.

Output names
------------
For an input ``<stem>.<ext>`` and operation ``<op>``, in the output folder::

    <stem>_<op>-<details>-<channel>.<fmt>    one grey image per output channel
    <stem>_<op>-<details>.<fmt>              pad and pool of a colour image: the whole image
    <stem>_<op>-<details>.npy                --format npy: the raw float32 result (H', W', C')
    <stem>_<op>_grid.png                     --figure: the figure grid

with ``<details>``

- pad: ``<mode>-<N>``, plus ``-v<V>`` for a non-zero constant value
  (``photo_pad-constant-30-v50-R.png``);
- pool: ``<mode>-f<F>-s<S>`` (``photo_pool-max-f2-s2-G.png``);
- conv: ``<kernel>[-s<S>][-p<N>][-b<B>][-<normalize>]-<channel>`` per channel,
  where the stride, pad and bias appear only when they are not the defaults (1,
  ``same`` and 0), the ``--normalize`` mapping only when it is given and is not
  ``auto``, and the channel is ``sum``, ``gray`` or the input channel (``R``,
  ``G``, ``B``, ``L``) for ``--channels each`` (``photo_conv-vertical-sum.png``,
  ``photo_conv-sobel-x_rot90-R.png``, ``photo_conv-edge-b100-offset-sum.png``);
  the ``.npy`` joins the kernels with ``+``, has no mapping (its values are raw)
  and ends with the channel mode (``photo_conv-vertical+horizontal-b100-sum.npy``).

Numbers are written in the fewest digits that give them back exactly
(``-v0.1234567``, ``-b-0.5``). The figure grid is named after the operation only.

Inputs whose stems clash in one output folder (``photo.png`` and ``photo.webp``;
compared ignoring case) get their extension appended to the stem
(``photo-png_conv-...``, ``photo-webp_conv-...``); if names still clash (the
same file name in two input folders), ``-2``, ``-3``, ... are appended after the
first in the order of the files' resolved full paths compared ignoring case, so
the names do not depend on the order of the INPUT arguments.

In a folder that is also the output folder of its images, :func:`find_inputs`
passes over the outputs of earlier runs (``<stem>_<op>-...`` and
``<stem>_<op>_grid.png`` after one of its images' output stems), so a command
run again skips what is done instead of taking its outputs as inputs.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .batch import FileResult
from .conv import conv_forward, depthwise_conv_forward
from .images import (
    DEFAULT_MAX_PIXELS,
    Picture,
    is_image_name,
    luminance,
    open_image,
    save_levels,
    save_npy,
    to_levels,
)
from .kernels import Kernel
from .padding import PAD_MODES, pad_images
from .pooling import pool_forward

CHANNEL_MODES = ("sum", "each", "gray")
NORMALIZE_CHOICES = ("auto", "abs", "minmax", "clip", "offset")

# Errors that mean "this file cannot be processed"; anything else is a bug and propagates.
EXPECTED_ERRORS = (OSError, ValueError, TypeError, MemoryError)


class OptionError(ValueError):
    """An operation's parameters that cannot work together; `option` names the option."""

    def __init__(self, message: str, option: str):
        super().__init__(message)
        self.option = option


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _number(value: float) -> str:
    """A number for a file name, in the fewest digits that give it back exactly.

    >>> _number(50.0), _number(0.5), _number(-1e-07), _number(0.1234567)
    ('50', '0.5', '-1e-07', '0.1234567')
    """
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


# --- operations ----------------------------------------------------------------------------


class _ChannelwiseNames:
    """Output names of an operation that keeps the channels (pad, pool).

    One file per channel, one for the whole colour image, and the ``.npy``,
    all named by the operation's ``details``.
    """

    def channel_tags(self, channels: tuple[str, ...]) -> list[str]:
        return [f"{self.details}-{c}" for c in channels]

    def npy_tag(self, channels: tuple[str, ...]) -> str:
        return self.details

    def whole_tag(self, channels: tuple[str, ...]) -> str | None:
        return self.details if len(channels) > 1 else None


@dataclass(frozen=True)
class PadOp(_ChannelwiseNames):
    """``convcli pad``: :func:`convcli.pad_images` on every channel.

    Alpha is padded with the same mode; in ``constant`` mode its border is
    opaque, so the padding shows in the fill value.
    """

    pad: int = 2
    value: float = 0.0
    mode: str = "constant"
    name = "pad"

    def __post_init__(self):
        if self.mode not in PAD_MODES:
            raise ValueError(f"mode must be one of {', '.join(PAD_MODES)}; got {self.mode!r}")
        if not math.isfinite(self.value):
            raise ValueError(f"value must be a finite number, got {self.value!r}")
        if abs(self.value) > _FLOAT32_MAX:
            raise OptionError(
                f"{_number(self.value)} is beyond the float32 range of the results "
                "(magnitude at most about 3.4e38)",
                "--value",
            )

    @property
    def details(self) -> str:
        text = f"{self.mode}-{self.pad}"
        if self.mode == "constant" and self.value != 0:
            text += f"-v{_number(self.value)}"
        return text

    def check_size(self, pic: Picture) -> None:
        pass

    def compute(self, pic: Picture) -> np.ndarray:
        n = pic.colour_channels
        colour = pad_images(pic.pixels[None, :, :, :n], self.pad, mode=self.mode, value=self.value)
        if not pic.has_alpha:
            return colour[0]
        alpha = pad_images(pic.pixels[None, :, :, n:], self.pad, mode=self.mode, value=pic.white)
        return np.concatenate([colour, alpha], axis=3)[0]

    def methods(self, pic: Picture) -> list[str]:
        return ["clip"] * len(pic.channels)

    def titles(self, channels: tuple[str, ...]) -> list[str]:
        return [f"pad {self.mode} {self.pad}: {c}" for c in channels]


@dataclass(frozen=True)
class PoolOp(_ChannelwiseNames):
    """``convcli pool``: :func:`convcli.pool_forward` on every channel, alpha included."""

    mode: str = "max"
    size: int = 2
    stride: int | None = None
    name = "pool"

    def __post_init__(self):
        mode = {"avg": "average"}.get(self.mode, self.mode)
        if mode not in ("max", "average"):
            raise ValueError(f"mode must be max or average (or avg), got {self.mode!r}")
        object.__setattr__(self, "mode", mode)
        if self.stride is None:
            object.__setattr__(self, "stride", self.size)
        if self.size < 1 or self.stride < 1:
            raise ValueError(f"size and stride must be >= 1, got {self.size} and {self.stride}")

    @property
    def details(self) -> str:
        return f"{self.mode}-f{self.size}-s{self.stride}"

    def check_size(self, pic: Picture) -> None:
        h, w = pic.pixels.shape[:2]
        if h < self.size or w < self.size:
            raise ValueError(
                f"image is {w}x{h} pixels, too small for the {self.size}x{self.size} "
                "pooling window (--size)"
            )

    def compute(self, pic: Picture) -> np.ndarray:
        out, _ = pool_forward(pic.pixels[None], {"f": self.size, "stride": self.stride}, self.mode)
        return out[0]

    def methods(self, pic: Picture) -> list[str]:
        return ["clip"] * len(pic.channels)

    def titles(self, channels: tuple[str, ...]) -> list[str]:
        return [f"{self.mode} pool f={self.size} s={self.stride}: {c}" for c in channels]


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
        ``sum``: conv_forward with ``W[:, :, k, c]`` = kernel c for every input
        channel k, one output channel per kernel. ``each``: depthwise, kernel-major
        (k0 on R, G, B, then k1 ...). ``gray``: luminance first, then conv_forward.
        Alpha is dropped in all three (it is not a colour).
    normalize : {"auto", "abs", "minmax", "clip", "offset"}
        Mapping of each output channel to image levels, see :meth:`methods`;
        named in the image outputs (not the ``.npy``) unless it is ``auto``.
    """

    kernels: tuple[Kernel, ...]
    stride: int = 1
    pad: int | str = "same"
    bias: float = 0.0
    channels: str = "sum"
    normalize: str = "auto"
    name = "conv"

    def __post_init__(self):
        object.__setattr__(self, "kernels", tuple(self.kernels))
        if not self.kernels:
            raise ValueError("no kernel given")
        if self.channels not in CHANNEL_MODES:
            raise ValueError(f"channels must be one of {', '.join(CHANNEL_MODES)}")
        if self.normalize not in NORMALIZE_CHOICES:
            raise ValueError(f"normalize must be one of {', '.join(NORMALIZE_CHOICES)}")
        if not math.isfinite(self.bias):
            raise ValueError(f"bias must be a finite number, got {self.bias!r}")
        if self.stride < 1:
            raise ValueError(f"stride must be >= 1, got {self.stride}")
        if isinstance(self.pad, str) and self.pad not in ("same", "valid"):
            raise ValueError(f"pad must be same, valid or an integer >= 0, got {self.pad!r}")
        if isinstance(self.pad, int) and self.pad < 0:
            raise ValueError(f"pad must be >= 0, got {self.pad}")
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
                h, w = k.size
                if h != w or h % 2 == 0:
                    where = f"kernel {k.name!r}"
                    if k.source != "builtin":
                        where += f" ({k.source})"
                    raise OptionError(
                        f"{where} is {h}x{w}: --pad same needs an odd square size (a centre "
                        "cell); use --pad valid or --pad N",
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

    @property
    def _suffix(self) -> str:
        """``-s<S>``, ``-p<N>`` and ``-b<B>``, each only when not the default."""
        text = f"-s{self.stride}" if self.stride != 1 else ""
        if self.pad != "same":
            text += f"-p{0 if self.pad == 'valid' else self.pad}"
        if self.bias != 0:
            text += f"-b{_number(self.bias)}"
        return text

    def _channel_names(self, channels: tuple[str, ...]) -> list[str]:
        colour = [c for c in channels if c != "A"]
        return colour if self.channels == "each" else [self.channels]

    def channel_tags(self, channels: tuple[str, ...]) -> list[str]:
        names = self._channel_names(channels)
        suffix = self._suffix
        if self.normalize != "auto":  # the mapping changes the image files, not the .npy
            suffix += f"-{self.normalize}"
        return [f"{k.label}{suffix}-{c}" for k in self.kernels for c in names]

    def npy_tag(self, channels: tuple[str, ...]) -> str:
        return "+".join(k.label for k in self.kernels) + f"{self._suffix}-{self.channels}"

    def whole_tag(self, channels: tuple[str, ...]) -> str | None:
        return None

    def check_size(self, pic: Picture) -> None:
        h, w = pic.pixels.shape[:2]
        for k in self.kernels:
            p = self.pad_for(k)
            if h + 2 * p < k.size[0] or w + 2 * p < k.size[1]:
                raise ValueError(
                    f"image is {w}x{h} pixels, too small for the {k.size[0]}x{k.size[1]} "
                    f"kernel {k.name!r} with pad {p}"
                )

    def conv_input(self, pic: Picture) -> np.ndarray:
        """The (1, H, W, C) float32 array the library is called on."""
        colour = pic.pixels[:, :, : pic.colour_channels]
        if self.channels == "gray" and colour.shape[2] == 3:
            colour = luminance(colour)
        return colour[None]

    def compute(self, pic: Picture) -> np.ndarray:
        A = self.conv_input(pic)
        n_in = A.shape[3]
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
            stack = np.stack([k.weights for k in group], axis=-1).astype(np.float32)
            if self.channels == "each":
                W = np.repeat(stack[:, :, None, :], n_in, axis=2)
                b = np.full((1, 1, 1, len(group) * n_in), self.bias, np.float32)
                Z, _ = depthwise_conv_forward(A, W, b, hp)
            else:
                W = np.repeat(stack[:, :, None, :], n_in, axis=2)
                b = np.full((1, 1, 1, len(group)), self.bias, np.float32)
                Z, _ = conv_forward(A, W, b, hp)
            results.append(Z[0])
            start = stop
        return np.concatenate(results, axis=2) if len(results) > 1 else results[0]

    def method_for(self, kernel: Kernel, n_summed: int, white: float) -> str:
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

    def methods(self, pic: Picture) -> list[str]:
        names = self._channel_names(pic.channels)
        n_summed = pic.colour_channels if self.channels == "sum" else 1
        return [self.method_for(k, n_summed, pic.white) for k in self.kernels for _ in names]

    def titles(self, channels: tuple[str, ...]) -> list[str]:
        names = self._channel_names(channels)
        return [f"{k.name}: {c}" for k in self.kernels for c in names]


Operation = PadOp | PoolOp | ConvOp


# --- inputs and tasks ----------------------------------------------------------------------


@dataclass(frozen=True)
class InputFile:
    """One input and the folder its outputs go to."""

    path: str
    out_dir: str


@dataclass
class Inputs:
    """What :func:`find_inputs` found: files in order, and notes for the user."""

    files: list[InputFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


def _same_path(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


# The end of an output name after its stem: ``_<op>-<details>.<fmt>`` or ``_<op>_grid.png``.
_OUTPUT_TAIL = re.compile(r"_(?:pad|conv|pool)(?:-.+\.(?:png|jpg|tiff|npy)|_grid\.png)", re.I)
_NUMBERED = re.compile(r"(.+)-[1-9][0-9]*")


def _earlier_outputs(names: list[str]) -> set[str]:
    """The names among `names` (files of one folder) that are convcli outputs of another.

    An output's name is ``<stem>_<op>-...<.fmt>`` or ``<stem>_<op>_grid.png``
    where ``<stem>`` is the output stem (see :func:`output_stems`) of one of
    `names`: its plain stem, ``<stem>-<ext>``, or either numbered ``-2``, ``-3`` ...
    Compared ignoring case.
    """
    stems = set()
    for name in names:
        p = Path(name)
        stems.add(p.stem.casefold())
        if p.suffix:
            stems.add(f"{p.stem}-{p.suffix[1:]}".casefold())
    found = set()
    for name in names:
        for i, char in enumerate(name):
            if char != "_" or i == 0 or not _OUTPUT_TAIL.fullmatch(name, i):
                continue
            prefix = name[:i].casefold()
            numbered = _NUMBERED.fullmatch(prefix)
            if prefix in stems or (numbered and numbered.group(1) in stems):
                found.add(name)
                break
    return found


def find_inputs(args, *, out_dir: str | os.PathLike, recursive: bool = False) -> Inputs:
    """Expand the command line's INPUT arguments into image files.

    A file is taken as it is (whatever its extension: if it is not an image,
    that file fails). A folder gives the image files directly in it, sorted by
    name, recognised by extension ignoring case; with `recursive` also those
    in its subfolders, whose outputs go to the same subfolders under `out_dir`.
    Hidden files and folders (name starting with ``.``) and the output folder
    itself are passed over. In a folder that is also the output folder of its
    own images, the outputs of earlier runs are passed over too: files named
    ``<stem>_<op>-...`` or ``<stem>_<op>_grid.png`` after one of its images
    (see :func:`_earlier_outputs`), so that running a command again does not
    take its own outputs as inputs.
    """
    out_root = Path(out_dir)
    found = Inputs()
    for arg in args:
        top = Path(arg)
        if not top.is_dir():
            found.files.append(InputFile(str(arg), str(out_root)))
            continue
        count = 0
        skipped_dirs = False
        for folder, dirs, files in os.walk(top):
            folder_path = Path(folder)
            dirs.sort()
            kept = []
            for d in dirs:
                if _is_hidden(d) or _same_path(folder_path / d, out_root):
                    continue
                kept.append(d)
            skipped_dirs = skipped_dirs or bool(kept and not recursive)
            dirs[:] = kept if recursive else []
            rel = folder_path.relative_to(top)
            names = [n for n in sorted(files) if not _is_hidden(n) and is_image_name(n)]
            if _same_path(out_root / rel, folder_path):
                outputs = _earlier_outputs(names)
                names = [n for n in names if n not in outputs]
            for name in names:
                found.files.append(InputFile(str(folder_path / name), str(out_root / rel)))
                count += 1
        if count == 0:
            hint = " (use -r to include its subfolders)" if skipped_dirs else ""
            found.notes.append(f"{arg}: no image files in this folder{hint}")
    return found


@dataclass(frozen=True)
class Task:
    """Everything :func:`process_file` needs for one input (picklable)."""

    source: str
    out_dir: str
    stem: str
    op: Operation
    fmt: str = "png"
    figure: bool = False
    overwrite: bool = False
    max_pixels: int = DEFAULT_MAX_PIXELS
    protected: tuple[str, ...] = ()


def _key(path: Path) -> str:
    """A path compared the way a case-insensitive file system would."""
    try:
        path = path.resolve()
    except OSError:
        path = path.absolute()
    return os.path.normcase(str(path)).casefold()


def output_stems(paths: list[Path]) -> list[str]:
    """The stems used in output names for files that share one output folder.

    Stems that clash (ignoring case) get the file's extension appended; names
    that still clash are numbered ``-2``, ``-3`` ... in the order of the files'
    full paths (resolved, compared ignoring case), so the same files get the
    same names whatever order they are given in.

    Examples
    --------
    >>> output_stems([Path("a/photo.png"), Path("a/photo.webp"), Path("a/cat.png")])
    ['photo-png', 'photo-webp', 'cat']
    """
    stems = [p.stem for p in paths]
    counts = defaultdict(int)
    for s in stems:
        counts[s.casefold()] += 1
    stems = [
        f"{p.stem}-{p.suffix.lstrip('.')}" if counts[p.stem.casefold()] > 1 and p.suffix else s
        for p, s in zip(paths, stems, strict=True)
    ]
    seen: dict[str, int] = defaultdict(int)
    result = list(stems)
    for i in sorted(range(len(paths)), key=lambda i: _order_key(paths[i])):
        s = stems[i]
        seen[s.casefold()] += 1
        n = seen[s.casefold()]
        result[i] = s if n == 1 else f"{s}-{n}"
    return result


def _order_key(path: Path) -> tuple[str, str]:
    """Sorts paths by their resolved full path ignoring case, then with case."""
    try:
        full = str(path.resolve())
    except OSError:
        full = str(path.absolute())
    return _key(path), full


def plan_tasks(inputs: list[InputFile], op: Operation, *, fmt: str = "png",
               figure: bool = False, overwrite: bool = False,
               max_pixels: int = DEFAULT_MAX_PIXELS) -> list[Task]:
    """One task per distinct input file, with output stems that cannot clash.

    The same file named twice (or named and found in a folder) is processed
    once. Inputs that live in an output folder are recorded in the tasks as
    protected, so that no output is ever written over an input.
    """
    unique: list[InputFile] = []
    seen = set()
    for item in inputs:
        key = _key(Path(item.path))
        if key not in seen:
            seen.add(key)
            unique.append(item)
    by_dir: dict[str, list[int]] = defaultdict(list)
    for i, item in enumerate(unique):
        by_dir[_key(Path(item.out_dir))].append(i)
    inputs_in_dir: dict[str, list[str]] = defaultdict(list)
    for item in unique:
        inputs_in_dir[_key(Path(item.path).parent)].append(item.path)
    stems = [""] * len(unique)
    for indices in by_dir.values():
        for i, stem in zip(
            indices, output_stems([Path(unique[i].path) for i in indices]), strict=True
        ):
            stems[i] = stem
    tasks = []
    for item, stem in zip(unique, stems, strict=True):
        prefix = (stem + "_").casefold()
        protected = tuple(
            p for p in inputs_in_dir.get(_key(Path(item.out_dir)), ())
            if Path(p).name.casefold().startswith(prefix)
        )
        tasks.append(Task(item.path, item.out_dir, stem, op, fmt, figure, overwrite,
                          max_pixels, protected))
    return tasks


# --- one file ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Output:
    path: Path
    kind: str  # "channel", "whole", "npy" or "grid"
    index: int = -1  # the channel, for kind "channel"


def planned_outputs(task: Task, channels: tuple[str, ...]) -> list[_Output]:
    """The files `task` writes for an input with these channels, in writing order."""
    op, out = task.op, Path(task.out_dir)
    base = f"{task.stem}_{op.name}-"
    outputs = []
    if task.fmt == "npy":
        outputs.append(_Output(out / f"{base}{op.npy_tag(channels)}.npy", "npy"))
    else:
        for i, tag in enumerate(op.channel_tags(channels)):
            outputs.append(_Output(out / f"{base}{tag}.{task.fmt}", "channel", i))
        whole = op.whole_tag(channels)
        if whole is not None:
            outputs.append(_Output(out / f"{base}{whole}.{task.fmt}", "whole"))
    if task.figure:
        outputs.append(_Output(out / f"{task.stem}_{op.name}_grid.png", "grid"))
    return outputs


def describe_error(exc: BaseException, source: str = "") -> str:
    """One line for the user from an expected exception about the file `source`."""
    if isinstance(exc, MemoryError):
        return "not enough memory for this image"
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
        if exc.filename is not None and str(exc.filename) != source:
            text = f"{exc.filename}: {text}"
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def process_file(task: Task) -> FileResult:
    """Read one image, apply the task's operation, write its outputs.

    The module-level worker for :func:`convcli.batch.iter_results`. A file
    that cannot be processed gives a ``"failed"`` result whose message is one
    line; unexpected exceptions (bugs) propagate.
    """
    timings: dict[str, float] = {}
    written: list[str] = []
    try:
        # Overflow and NaN are reported once per file (below), not as numpy warnings.
        with np.errstate(all="ignore"):
            return _process(task, timings, written)
    except EXPECTED_ERRORS as exc:
        return FileResult(
            task.source, "failed", describe_error(exc, task.source), tuple(written), timings
        )


def _process(task: Task, timings: dict, written: list[str]) -> FileResult:
    start = time.perf_counter()
    with open_image(task.source, max_pixels=task.max_pixels) as source:
        outputs = planned_outputs(task, source.channels)
        todo = outputs if task.overwrite else [o for o in outputs if not o.path.exists()]
        protected = {_key(Path(p)) for p in task.protected}
        for out in todo:
            if _key(out.path) in protected:
                raise ValueError(
                    f"output {out.path.name} would replace an input file of this run; "
                    "choose another --out-dir"
                )
        if not todo:
            return FileResult(task.source, "skipped",
                              "outputs exist (use --overwrite to replace them)")
        pic = source.read()
    timings["decode"] = time.perf_counter() - start

    start = time.perf_counter()
    task.op.check_size(pic)
    data = np.asarray(task.op.compute(pic), dtype=np.float32)
    timings["compute"] = time.perf_counter() - start

    start = time.perf_counter()
    Path(task.out_dir).mkdir(parents=True, exist_ok=True)
    depth = 8 if task.fmt == "jpg" else pic.depth
    methods = task.op.methods(pic)
    kept = 0
    for out in todo:
        if out.kind == "npy":
            ok = save_npy(out.path, data, overwrite=task.overwrite)
        elif out.kind == "channel":
            levels = to_levels(data[:, :, out.index], methods[out.index],
                               white=pic.white, depth=depth)
            ok = save_levels(out.path, levels, fmt=task.fmt, overwrite=task.overwrite)
        elif out.kind == "whole":
            levels = to_levels(data, "clip", white=pic.white, depth=depth)
            ok = save_levels(out.path, levels, fmt=task.fmt, overwrite=task.overwrite)
        else:
            ok = _save_figure(out.path, task, pic, data)
        if ok:
            written.append(str(out.path))
        else:
            kept += 1
    timings["encode"] = time.perf_counter() - start

    notes = list(pic.notes)
    not_finite = data.size - int(np.count_nonzero(np.isfinite(data)))
    if not_finite:
        notes.append(f"{not_finite:,} result values are not finite (overflow, or NaN/inf in "
                     "the input)")
    kept += len(outputs) - len(todo)
    if kept:
        notes.append(f"kept {kept} existing output(s) (use --overwrite to replace them)")
    return FileResult(task.source, "done", "; ".join(notes), tuple(written), timings)


def _robust_peak(values: np.ndarray) -> float:
    """The 99.5th percentile of |values|, or their maximum if that is 0; 1.0 if empty."""
    if not values.size:
        return 1.0
    a = np.abs(values)
    peak = float(np.percentile(a, 99.5))
    return peak if peak > 0 else float(a.max()) or 1.0


def _save_figure(path: Path, task: Task, pic: Picture, data: np.ndarray) -> bool:
    """The figure grid: the original beside every output channel, each titled."""
    from . import figures  # imports matplotlib: only when a figure is drawn

    op = task.op
    white = pic.white if pic.white > 0 else 1.0
    original = np.clip(pic.pixels / white, 0.0, 1.0)
    if original.shape[2] == 2:  # grey + alpha: show the grey
        original = original[:, :, :1]
    original_panel = figures.Panel(
        "original", original[:, :, 0] if original.shape[2] == 1 else original
    )
    titles = op.titles(pic.channels)
    if isinstance(op, ConvOp):
        per_kernel = len(titles) // len(op.kernels)
        rows = []
        for k in range(len(op.kernels)):
            chans = data[:, :, k * per_kernel:(k + 1) * per_kernel]
            finite = chans[np.isfinite(chans)]
            signed = bool(finite.size and finite.min() < 0)
            # One symmetric scale per kernel, so that its channels can be compared;
            # its top is the 99.5th percentile of |x|, so a few extreme values (the
            # zero-padded border, specular highlights) do not wash the map out.
            limit = _robust_peak(finite)
            rows.append([
                figures.Panel(titles[c], data[:, :, c], signed=signed, vmax=limit or 1.0,
                              colorbar=True)
                for c in range(k * per_kernel, (k + 1) * per_kernel)
            ])
        if per_kernel == 1:  # one row: the original, then every kernel
            panels = [original_panel] + [row[0] for row in rows]
            ncols = min(len(panels), 4)
        else:  # a row per kernel, the original above the first column
            panels = []
            for k, row in enumerate(rows):
                panels += [original_panel if k == 0 else None] + row
            ncols = 1 + per_kernel
        title = f"conv, --channels {op.channels}, stride {op.stride}, pad {op.pad}"
    else:
        panels = [original_panel]
        if data.shape[2] in (3, 4):
            panels.append(figures.Panel(f"{op.name} {op.details}",
                                        np.clip(data / white, 0.0, 1.0)))
        panels += [figures.Panel(t, data[:, :, c], vmax=white, colorbar=True)
                   for c, t in enumerate(titles)]
        ncols = min(len(panels), 5)
        title = f"{op.name} {op.details}"
    return figures.save_grid(path, panels, ncols=ncols, title=f"{Path(task.source).name}: {title}",
                             overwrite=task.overwrite)
