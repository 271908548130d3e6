"""The options the commands share, as click decorators (rasterio's ``rio/options.py``).

``common_options`` (INPUT... and the batch's options), ``pad_options``,
``conv_options``, ``normalize_option``, ``pool_options``, ``fit_options`` and
``target_option`` (explain's ``--as``), each list of options applied in order;
:class:`PadParam` parses ``--pad``.
Their choices come from :mod:`convcli.choices` and :data:`convcli.engines.base.ENGINES`.
"""

from __future__ import annotations

import click

from ..choices import (
    BORDER_MODES,
    CHANNEL_MODES,
    COMBINE_MODES,
    DEFAULT_BORDER,
    DEFAULT_MAX_PIXELS,
    EXPLAIN_TARGETS,
    FORMAT_ALIASES,
    FORMAT_NAMES,
    NORMALIZE_CHOICES,
    PAD_MODES,
    POOL_MODE_ALIASES,
    POOL_MODES,
)
from ..engines.base import ENGINES
from ..io.frames import DEFAULT_FRAMES, parse_frames

DEFAULT_KERNELS = ("vertical", "horizontal", "edge")


def _apply(decorators, command):
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


def _storage_options(ctx, param, values):
    from ..io.storage import parse_option

    options = {}
    for text in values:
        try:
            key, value = parse_option(text)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
        if key in options:
            # Only the name is said: the values may be secrets.
            raise click.BadParameter(f"{key!r} is given twice: give each option once", ctx, param)
        options[key] = value
    return options or None


def _named_inputs(ctx, param, values):
    """The inputs as given; an empty name (an unset shell variable) is a usage error."""
    if "" in values:
        raise click.BadParameter("one is empty: give a file, folder or URL name", ctx, param)
    return values


def _named_file(ctx, param, value):
    """A file argument as given; an empty name is a usage error."""
    if value == "":
        raise click.BadParameter("is empty: give a file name", ctx, param)
    return value


def _named_output(ctx, param, value):
    """``-o`` as given; an empty name (an unset shell variable) is a usage error.

    An empty name used to stand for the current folder, or for fit's default file
    (its default is None).
    """
    if value == "":
        named = "a file name" if param.name == "out" else "a folder or file name"  # fit: a file
        raise click.BadParameter(f"is empty: give {named}", ctx, param)
    return value


def _frames(ctx, param, value):
    try:
        return parse_frames(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


_FRAMES_OPTION = click.option(
    "--frames",
    default=DEFAULT_FRAMES,
    show_default=True,
    metavar="first|all|LIST",
    callback=_frames,
    help="Frames of multi-page TIFFs and animations (GIF, WebP, PNG) to process, as the "
    "batch axis m: first, all, or numbers from 0 such as 0,2-5.",
)


_FORMAT_OPTION = click.option(
    "--format",
    "fmt",
    type=click.Choice([*FORMAT_NAMES, *FORMAT_ALIASES], case_sensitive=False),
    default=None,
    help="The format of every output (one raw float32 .npy per input with npy)  [default: pad "
    "and pool keep the input's (PNG for one convcli cannot write), conv and grad maps "
    "are PNG]",
)


def _side_widths(text: str):
    """``T,B,L,R``: four whole numbers >= 0; None when `text` has no comma."""
    if "," not in text:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 4 or not all(p.isdigit() for p in parts):
        raise ValueError(
            f"{text!r} is not T,B,L,R: four whole numbers >= 0 (top, bottom, left, right)"
        )
    return tuple(int(p) for p in parts)


class SizeParam(click.ParamType):
    """A number of bytes: ``512M``, ``2G``, ``1.5GB``, ``800MiB`` or a plain number."""

    name = "SIZE"
    _UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        text = str(value).strip().lower().removesuffix("ib").removesuffix("b")
        unit = text[-1:] if text[-1:] in ("k", "m", "g", "t") else ""
        number = text[: len(text) - len(unit)]
        try:
            size = float(number)
        except ValueError:
            self.fail(f"{value!r} is not a size such as 512M or 2G", param, ctx)
        if not size > 0 or size == float("inf"):
            self.fail(f"{value!r} is not a size above 0", param, ctx)
        return max(1, int(size * self._UNITS[unit]))


class PadParam(click.ParamType):
    """``same``, ``valid``, an integer >= 0, or ``T,B,L,R`` (with `words`: ``same``, ``valid``)."""

    def __init__(self, words: bool = True):
        self.words = words
        self.name = "N|T,B,L,R|same|valid" if words else "N|T,B,L,R"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, tuple)):
            return value
        text = str(value).strip().lower()
        if self.words and text in ("same", "valid"):
            return text
        try:
            sides = _side_widths(text)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if sides is not None:
            return sides
        try:
            number = int(text)
        except ValueError:
            words = "same, valid, " if self.words else ""
            self.fail(f"{value!r} is not {words}a whole number or T,B,L,R", param, ctx)
        if number < 0:
            self.fail(f"must be >= 0, got {number}", param, ctx)
        return number


_COMMON_OPTIONS = [
    # Not checked for reading here: an unreadable file or folder fails on its own
    # line in the batch, and the rest runs.
    click.argument(
        "inputs",
        metavar="INPUT...",
        nargs=-1,
        required=True,
        type=click.Path(path_type=str, readable=False),
        callback=_named_inputs,
    ),
    click.option(
        "-o",
        "--out-dir",
        default="convcli-out",
        show_default=True,
        metavar="DIR|FILE|-",
        callback=_named_output,
        help="Folder for the results (created if needed); or, for one input "
        "giving one image, a file named with its format's extension, or "
        "- for standard output.",
    ),
    _FORMAT_OPTION,
    click.option(
        "--figure",
        is_flag=True,
        help="Also draw <stem>_<op>-<options>_grid.png: the original beside every channel.",
    ),
    click.option(
        "-r",
        "--recursive",
        is_flag=True,
        help="Also take images in subfolders (mirrored under --out-dir).",
    ),
    click.option("-q", "--quiet", is_flag=True, help="Only report errors."),
    click.option(
        "--overwrite",
        is_flag=True,
        help="Replace existing outputs (otherwise a done file is skipped).",
    ),
    click.option(
        "-n",
        "--dry-run",
        is_flag=True,
        help="List each input's outputs (name, size, format) and the files that "
        "would be skipped; write nothing.",
    ),
    click.option(
        "--max-pixels",
        type=click.IntRange(min=0),
        default=DEFAULT_MAX_PIXELS,
        show_default=True,
        help="Refuse larger images, a stack's frames counted "
        "together, and TIFF or Zarr files storing no image for their size "
        "(0: no limit).",
    ),
    _FRAMES_OPTION,
    click.option(
        "--memory",
        type=SizeParam(),
        default=None,
        help="Memory one image's work may take (512M, 4G); a larger TIFF is read, "
        "computed and written in strips  [default: half the memory "
        "available, shared by --jobs]",
    ),
    click.option(
        "-j",
        "--jobs",
        type=click.IntRange(min=1),
        default=None,
        help="Files processed in parallel, each in its own process  [default: the number of CPUs]",
    ),
    click.option("-v", "--verbose", is_flag=True, help="One line per file."),
    click.option("--fail-fast", is_flag=True, help="Stop at the first file that fails."),
    click.option("--debug", is_flag=True, help="Show the traceback of an unexpected error."),
    click.option(
        "--engine",
        type=click.Choice(list(ENGINES), case_sensitive=False),
        default=None,
        help="Where the files are processed: worker processes here, or a Dask "
        "cluster  [default: dask with --scheduler, else processes]",
    ),
    click.option(
        "--scheduler",
        metavar="ADDRESS|local",
        help="Run the batch on a Dask cluster (tcp://HOST:PORT), or on a local one "
        "of --jobs worker processes (needs convcli[dask]).",
    ),
    click.option(
        "--scheduler-file",
        type=click.Path(dir_okay=False, path_type=str),
        help="Run the batch on the Dask cluster that this scheduler file names.",
    ),
    click.option(
        "--files-per-task",
        type=click.IntRange(min=1),
        default=None,
        help="Files in each Dask task  [default: 8]",
    ),
    click.option(
        "--storage-option",
        "storage_options",
        multiple=True,
        metavar="KEY=VALUE",
        callback=_storage_options,
        help="An fsspec option for s3://, gs:// ... inputs and outputs "
        "(endpoint_url=..., anon=true); repeatable.",
    ),
]


def common_options(command):
    """INPUT... and the options every image command takes (files, formats, the batch)."""
    return _apply(_COMMON_OPTIONS, command)


SEPARATE_OPTION = click.option(
    "--separate",
    is_flag=True,
    help="Also write each channel as a grey image (as ImageMagick's -separate does).",
)
"""pad's and pool's ``--separate``: an image changed is written whole, its channels too
with it (:func:`convcli.app.names.channels_written`)."""


_PAD_OPTIONS = [
    click.option(
        "--pad",
        "pad",
        type=PadParam(words=False),
        default="2",
        show_default=True,
        help="Pixels added on every side, or T,B,L,R: on the top, bottom, left and right.",
    ),
    click.option(
        "--value",
        type=float,
        default=0.0,
        show_default=True,
        help="Fill value for --mode constant, in the image's scale (0-255 for 8-bit).",
    ),
    click.option(
        "--mode",
        type=click.Choice(PAD_MODES, case_sensitive=False),
        default="constant",
        show_default=True,
        help="How the border is filled.",
    ),
]


def pad_options(command):
    """pad's options: for pad, and explain pad."""
    return _apply(_PAD_OPTIONS, command)


def _kernels(ctx, param, values):
    from ..kernels import KernelError, parse_kernel_specs

    kernels = []
    for spec in values or DEFAULT_KERNELS:
        try:
            kernels.extend(parse_kernel_specs(spec))
        except KernelError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
    return tuple(kernels)


_CONV_OPTIONS = [
    click.option(
        "-k",
        "--kernel",
        "kernels",
        multiple=True,
        callback=_kernels,
        metavar="SPEC",
        help="Kernel name (see 'convcli kernels'), NAME:ANGLE, or a kernel file "
        "(a path with / or an extension); repeatable, or a comma list. "
        "Default: vertical, horizontal and edge.",
    ),
    click.option(
        "--stride",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        help="Step between kernel positions.",
    ),
    click.option(
        "--pad",
        "pad",
        type=PadParam(),
        default="same",
        show_default=True,
        help="same: keep the size (odd kernels, stride 1); valid: 0; "
        "N pixels on every side, or T,B,L,R (top, bottom, left, right), "
        "filled as --border says.",
    ),
    click.option(
        "--bias",
        type=float,
        default=0.0,
        show_default=True,
        help="Added to each kernel's result, before --combine (as conv_forward's b).",
    ),
    click.option(
        "--channels",
        type=click.Choice(CHANNEL_MODES, case_sensitive=False),
        default="sum",
        show_default=True,
        help="sum: each kernel over all channels, summed; each: every channel "
        "separately (and each kernel's result in colour); gray: luminance "
        "first.",
    ),
    click.option(
        "--border",
        type=click.Choice(BORDER_MODES, case_sensitive=False),
        default=DEFAULT_BORDER,
        show_default=True,
        help="How the pad is filled (as pad --mode); constant is zeros.",
    ),
    click.option(
        "--combine",
        type=click.Choice(COMBINE_MODES, case_sensitive=False),
        default=None,
        help="One map of all kernels: magnitude (sqrt of the sum of squares), max or sum.",
    ),
    click.option(
        "--dilation",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        help="Pixels between a kernel's taps (as PyTorch's dilation); --pad same "
        "pads for the dilated kernel.",
    ),
]


def conv_options(command):
    """The kernels and conv_forward's options: for conv, and any command that convolves."""
    return _apply(_CONV_OPTIONS, command)


normalize_option = click.option(
    "--normalize",
    type=click.Choice(NORMALIZE_CHOICES, case_sensitive=False),
    default="auto",
    show_default=True,
    help="Values to image levels. auto: robust for zero-sum (edge) kernels (the "
    "99.5th percentile of |x| is white), clip for kernels that keep the level "
    "(blur, sharpen; a channel sum shown as the mean), minmax otherwise; "
    "none: the float32 values (--format tiff, npy or zarr).",
)


_POOL_OPTIONS = [
    click.option(
        "--mode",
        type=click.Choice([*POOL_MODES, *POOL_MODE_ALIASES], case_sensitive=False),
        default="max",
        show_default=True,
        help="Max or average pooling.",
    ),
    click.option(
        "--size",
        type=click.IntRange(min=1),
        default=2,
        show_default=True,
        help="Window size F (F x F).",
    ),
    click.option(
        "--stride",
        type=click.IntRange(min=1),
        default=None,
        help="Step between windows  [default: the size]",
    ),
    click.option(
        "--pad",
        type=click.IntRange(min=0),
        default=0,
        show_default=True,
        help="Pixels of padding on every side, at most half the size; padding is "
        "never part of a window (max of, or mean of, the real pixels).",
    ),
    click.option(
        "--ceil",
        is_flag=True,
        help="Round the output size up (PyTorch's ceil_mode): a last, partial "
        "window where the image does not divide evenly.",
    ),
]


def pool_options(command):
    """pool's options: for pool, grad pool and explain pool."""
    return _apply(_POOL_OPTIONS, command)


target_option = click.option(
    "--as",
    "target",
    type=click.Choice(EXPLAIN_TARGETS, case_sensitive=False),
    default=None,
    help="The tool to write the operation for; without it, a table of conventions.",
)


_FIT_OPTIONS = [
    click.argument("before", type=click.Path(path_type=str, readable=False), callback=_named_file),
    click.argument("after", type=click.Path(path_type=str, readable=False), callback=_named_file),
    click.option(
        "--size",
        type=click.IntRange(min=1, max=31),
        default=3,
        show_default=True,
        help="Kernel size F (F x F).",
    ),
    click.option(
        "--channels",
        type=click.Choice(CHANNEL_MODES, case_sensitive=False),
        default="sum",
        show_default=True,
        help="As conv: sum (the channel sum), each (one kernel on every colour channel) or gray.",
    ),
    click.option(
        "--pad",
        "pad",
        type=PadParam(),
        default="same",
        show_default=True,
        help="As conv: same, valid or N.",
    ),
    click.option(
        "--border",
        type=click.Choice(BORDER_MODES, case_sensitive=False),
        default=DEFAULT_BORDER,
        show_default=True,
        help="As conv: how the pad is filled.",
    ),
    click.option(
        "--stride", type=click.IntRange(min=1), default=1, show_default=True, help="As conv."
    ),
    click.option(
        "--dilation",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        help="As conv: pixels between the kernel's taps.",
    ),
    click.option(
        "--steps",
        type=click.IntRange(min=1),
        default=200,
        show_default=True,
        help="At most this many gradient steps.",
    ),
    click.option(
        "-o",
        "--out",
        default=None,
        metavar="FILE",
        callback=_named_output,
        help="The kernel file to write  [default: convcli-out/<stem>_fit-FxF.toml]",
    ),
    click.option(
        "--figure",
        is_flag=True,
        help="Also draw FILE's stem + _grid.png: the kernel, the closest named one, "
        "the loss curve.",
    ),
    click.option("--overwrite", is_flag=True, help="Replace a kernel file (and figure) fit wrote."),
    click.option(
        "--max-pixels",
        type=click.IntRange(min=0),
        default=DEFAULT_MAX_PIXELS,
        show_default=True,
        help="Refuse larger images (0: no limit).",
    ),
    click.option("-q", "--quiet", is_flag=True, help="Only report errors."),
]


def fit_options(command):
    """fit's BEFORE and AFTER, and its options (those of conv with their meaning there)."""
    return _apply(_FIT_OPTIONS, command)
