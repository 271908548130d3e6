"""``convcli explain``: one operation written for scipy, OpenCV, PyTorch, scikit-image, ImageMagick.

:func:`explain` gives, for the Python tools, a script that reads an image path
from ``argv[1]`` and saves to ``argv[2]`` a ``.npy`` with the values of
``convcli ... --format npy`` (float32, (H', W', C')); for ImageMagick, the
command line and what differs in its result. :func:`conventions` is the
table of the names each tool gives to the same things.

The scripts do what convcli does, step by step: the picture in the file's own
scale as float32 (0-255 for 8-bit), alpha weighing the colours
(:mod:`convcli.app.explain_alpha`), the channel mode (``sum``, ``gray`` with ITU-R 601-2 weights,
``each``), the border of each side, cross-correlation (no flip), the stride,
the bias, then ``--combine`` (:mod:`convcli.app.explain_scripts` writes them).
"""

from __future__ import annotations

import functools
import shlex
import shutil
import subprocess
import textwrap

from ..choices import EXPLAIN_TARGETS
from ..errors import OptionError
from ..levels.mapping import LUMA_WEIGHTS
from .borders import BORDERS, NO_EQUIVALENT, Nearest, border_name
from .conv_op import ConvOp, alpha_weighted
from .explain_scripts import INSTALL, conv_script, kernel_taps, pad_script, pool_script
from .op_helpers import pad_text
from .pad_pool import PadOp, PoolOp


def _virtual_pixel(mode: str) -> tuple[str, str]:
    """ImageMagick's -virtual-pixel method for `mode`; if only the nearest, what differs."""
    name = border_name(mode, "magick")
    if isinstance(name, Nearest):
        return name.name, f"{name.name} {name.how} ({name.mode!r})"
    return name, ""


def _magick_conv(op: ConvOp) -> list[str]:
    """The lines of :func:`_magick` for conv: one command line per kernel, and what differs."""
    method, nearest = _virtual_pixel(op.border)
    lines = [
        "# Correlate lays the kernel as written (Convolve flips it), over each channel on its own:",
        "# --channels each. No channel sum (--channels sum adds them: "
        "-separate -evaluate-sequence Add after).",
    ]
    gray, said = _magick_gray(op)
    lines += said
    # Over black, as convcli convolves the colour of an image with alpha; by channel with
    # kernels that keep levels, ImageMagick weighs the colours by alpha itself, as convcli.
    alpha = (
        []
        if alpha_weighted(op, ("R", "G", "B", "A"))
        else ["-background", "black", "-alpha", "remove"]
    )
    for k in op.kernels:
        h, w = op.span(k)
        values = ",".join(format(float(v), "g") for v in kernel_taps(op, k).ravel())
        bias = ["-define", f"convolve:bias={op.bias!r}"] if op.bias else []
        lines.append(
            shlex.join(
                [
                    magick_program(),
                    "IN.png",
                    *alpha,
                    *gray,
                    "-virtual-pixel",
                    method,
                    "-define",
                    "convolve:scale=1",
                    *bias,
                    "-morphology",
                    "Correlate",
                    f"{w}x{h}:{values}",
                    f"OUT_{k.label}.tiff",
                ]
            )
        )
    return lines + _magick_conv_differs(op, nearest)


def _magick_gray(op: ConvOp) -> tuple[list[str], list[str]]:
    """For ``--channels gray``: the words that make the luminance, and the lines that say so."""
    if op.channels != "gray":
        return [], []
    weights = " ".join(format(w, "g") for w in LUMA_WEIGHTS)
    words = [
        "-color-matrix",
        f"{weights} {weights} {weights}",
        "-channel",
        "R",
        "-separate",
        "+channel",
    ]
    return words, [
        "# --channels gray: convcli's luminance, R, G and B weighted "
        f"{', '.join(map(str, LUMA_WEIGHTS))} as they are",
        "# (ImageMagick 6's -colorspace Gray makes the values linear first).",
    ]


def _magick_conv_differs(op: ConvOp, nearest: str) -> list[str]:
    """The lines after the conv command lines: what ImageMagick does otherwise than convcli."""
    lines = []
    if nearest:
        lines.append(f"# nearest to {op.border!r}: {nearest}")
    if op.pad not in ("same",) or op.stride != 1:
        lines.append(
            f"# The size is kept (pad same); --pad {pad_text(op.pad)} and "
            f"--stride {op.stride} have no equivalent: crop (-crop) and "
            "subsample (-sample) after."
        )
    if op.combine:
        lines.append("# --combine: -evaluate-sequence (Add, Max) or -fx over the results.")
    return lines


def _magick_pad(op: PadOp) -> list[str]:
    """The lines of :func:`_magick` for pad: the command line, and what differs."""
    t, b, l, r = op.pad if isinstance(op.pad, tuple) else (op.pad,) * 4  # noqa: E741
    method, nearest = _virtual_pixel(op.mode)
    fill = [method]
    if op.mode == "constant":  # the fill value, in the 0-255 scale of an 8-bit image
        fill = ["Background", "-background", f"gray({op.value:g})"]
    lines = [
        "# A viewport larger than the picture, filled by the virtual pixels; point sampling",
        "# copies the pixels exactly.",
        shlex.join(
            [
                magick_program(),
                "IN.png",
                "-virtual-pixel",
                *fill,
                "-filter",
                "point",
                "-interpolate",
                "integer",
                "-set",
                "option:distort:viewport",
                f"%[fx:w+{l + r}]x%[fx:h+{t + b}]-{l}-{t}",
                "-distort",
                "SRT",
                "0",
                "+repage",
                "OUT.tiff",
            ]
        ),
    ]
    if nearest:
        lines.append(f"# {op.mode!r} has no virtual-pixel method: {nearest}.")
    return lines


@functools.cache
def magick_program() -> str:
    """The ImageMagick command the scripts use: ``magick`` (version 7), or ``convert`` where only
    ImageMagick 6 is installed (Debian 12's), which has no ``magick``."""
    if shutil.which("magick") is None and _is_imagemagick(shutil.which("convert")):
        return "convert"
    return "magick"


def _is_imagemagick(program: str | None) -> bool:
    """Whether `program` (a path, or None) is ImageMagick's: ``-version`` says so."""
    if program is None:
        return False
    try:
        done = subprocess.run(
            [program, "-version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.stdout.startswith("Version: ImageMagick")


def _magick(op, kind: str) -> str:
    """The ImageMagick command line for `op`, and what differs in its result.

    Each command line is made by ``shlex.join`` of its words.
    """
    program = magick_program()
    version = (
        "ImageMagick 6 (`convert`, the one installed here; ImageMagick 7: `magick`)"
        if program == "convert"
        else "ImageMagick 7 (`magick`; ImageMagick 6: `convert`)"
    )
    lines = [
        f"# Needs ImageMagick: {INSTALL['magick']}.",
        f"# {version}. It clips every result to",
        "# the image's range (0..white): negative responses become 0 unless it is built",
        "# with HDRI and writes floats (-define quantum:format=floating-point -depth 32,",
        "# values then in 0..1, not the file's 0-255 scale). It has no stride.",
    ]
    if kind == "conv":
        lines += _magick_conv(op)
    elif kind == "pool":
        stat = "Maximum" if op.mode == "max" else "Mean"
        lines += [
            shlex.join(
                [program, "IN.png", "-statistic", stat, f"{op.size}x{op.size}", "OUT_filtered.tiff"]
            ),
            "# then every stride-th window: -statistic centres each window on its pixel; "
            "for --stride equal",
            f"# to --size, {'-scale' if op.mode == 'average' else '-sample'} does it at "
            f"once (average: {program} IN.png -scale 50% for --size 2).",
        ]
    else:
        lines += _magick_pad(op)
    return "\n".join(lines) + "\n"


def explain(op, target: str) -> str:
    """The translation of `op` (a ConvOp, PoolOp or PadOp) for `target` (see EXPLAIN_TARGETS).

    Examples
    --------
    >>> from convcli.kernels import parse_kernel_spec
    >>> script = explain(PoolOp(mode="max", size=2), "torch")
    >>> "F.max_pool2d(x, kernel_size=F_SIZE, stride=STRIDE)" in script
    True
    """
    if target not in EXPLAIN_TARGETS:
        raise ValueError(f"target must be one of {', '.join(EXPLAIN_TARGETS)}; got {target!r}")
    kind = op.name
    if kind == "conv":
        _check_taps(op)
    if target == "magick":
        return _magick(op, kind)
    build = {"conv": conv_script, "pool": pool_script, "pad": pad_script}[kind]
    return build(op, target)


SCRIPT_TAPS = 65536
"""The most taps of a dilated kernel a script writes out (256 x 256): each is a number in it."""


def _check_taps(op: ConvOp) -> None:
    """An OptionError naming ``--dilation`` where a kernel it spreads out has more taps than
    a script writes (:data:`SCRIPT_TAPS`), before any is made."""
    for k in op.kernels:
        h, w = op.span(k)
        if h * w > SCRIPT_TAPS:
            raise OptionError(
                f"{op.dilation} spreads kernel {k.label} over {h}x{w} taps, and the "
                f"scripts write each: at most {SCRIPT_TAPS:,} (256x256)",
                "--dilation",
            )


def _conv_rows(op: ConvOp) -> tuple[list[tuple[str, ...]], list[str]]:
    """The rows of :func:`conventions` for conv, and its notes."""
    border = op.border
    row = BORDERS[border]
    magick = row.magick if isinstance(row.magick, str) else f"(none; {row.magick.name} nearest)"
    np_pad, S = f"{NO_EQUIVALENT} (np.pad)", "slice [::s]"  # noqa: N806
    rows = [
        ("tool", "call", "kernel", f"border {border!r}", "stride"),
        ("convcli", "conv_forward", "as written", border, "--stride"),
        ("scipy", "ndimage.correlate", "as written (convolve flips)", row.scipy or np_pad, S),
        (
            "OpenCV",
            "cv2.filter2D",
            "as written",
            (row.opencv or np_pad) + (" (copyMakeBorder)" if border == "wrap" else ""),
            "slice [::s]",
        ),
        ("PyTorch", "F.conv2d", "as written", row.torch or f"{NO_EQUIVALENT} (np.pad)", "stride="),
        (
            "skimage",
            "filters.sobel_v ...",
            "sobel_v = -sobel-x / 4",
            row.skimage or np_pad,
            S,
        ),
        ("ImageMagick", "-morphology Correlate", "as written (Convolve flips)", magick, "none"),
    ]
    notes = [
        "OpenCV's default border is BORDER_REFLECT_101, convcli's 'reflect'; scipy's "
        "and scikit-image's 'reflect' (skimage.filters' default) is convcli's "
        "'symmetric'.",
        "Values: convcli, scipy, OpenCV and PyTorch keep floats; ImageMagick clips to "
        "the image's range; skimage.color.rgb2gray is 0-1 with other weights.",
    ]
    return rows, notes


def _pool_rows(op: PoolOp) -> tuple[list[tuple[str, ...]], list[str]]:
    """The rows of :func:`conventions` for pool, and its notes."""
    fn = {
        "max": (
            "maximum_filter",
            "cv2.dilate",
            "F.max_pool2d",
            "block_reduce np.max",
            "-statistic Maximum",
        ),
        "average": (
            "uniform_filter",
            "cv2.blur",
            "F.avg_pool2d",
            "block_reduce np.mean",
            "-statistic Mean / -scale",
        ),
    }[op.mode]
    rows = [
        ("tool", "call", "windows", "stride"),
        ("convcli", "pool_forward", "whole windows only", "--stride"),
        ("scipy", f"ndimage.{fn[0]}", "centred on each pixel", "slice"),
        ("OpenCV", fn[1], "centred on each pixel", "slice"),
        ("PyTorch", fn[2], "whole windows only", "stride="),
        ("skimage", f"measure.{fn[3]}", "blocks (pads the last)", "= size only"),
        ("ImageMagick", fn[4], "centred on each pixel", "none"),
    ]
    return rows, [
        "Every channel is pooled, alpha included; the colours weighted by alpha "
        "(the largest visible one for max), so that no hidden colour shows."
    ]


def _pad_rows(op: PadOp) -> tuple[list[tuple[str, ...]], list[str]]:
    """The rows of :func:`conventions` for pad, and its notes."""
    mode = op.mode
    row = BORDERS[mode]
    magick = (
        row.magick
        if isinstance(row.magick, str)
        else f"none ({row.magick.name} is {row.magick.mode!r})"
    )
    rows = [
        ("tool", "call", f"mode {mode!r}"),
        ("convcli", "pad_images", mode),
        ("numpy/scipy", "np.pad", mode),
        ("OpenCV", "cv2.copyMakeBorder", row.opencv or f"{NO_EQUIVALENT} (np.pad)"),
        ("PyTorch", "F.pad (left, right, top, bottom)", row.torch or NO_EQUIVALENT),
        ("skimage", "skimage.util.pad = np.pad", mode),
        ("ImageMagick", "-virtual-pixel + -distort viewport", magick),
    ]
    return rows, ["Sides are (top, bottom, left, right) in convcli's --pad T,B,L,R."]


def conventions(op) -> str:
    """A short table: how each tool names and does what `op` (a ConvOp, PoolOp or PadOp) does."""
    rows, notes = {"conv": _conv_rows, "pool": _pool_rows, "pad": _pad_rows}[op.name](op)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes.append(
        f"convcli explain ... --as {'|'.join(EXPLAIN_TARGETS)} prints the whole translation."
    )
    return "\n".join(lines) + "\n\n" + "\n".join(textwrap.fill(n, 100) for n in notes) + "\n"
