"""Learning a kernel: the f x f weights and bias whose convolution turns one image into another.

``convcli fit``: BEFORE and AFTER read and checked, the kernel learned by
:mod:`convcli.app.fit_solver`, the closest named kernel found, the kernel file
(and its figure) written. No click.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..choices import RAW_VALUES
from ..io.figures import save_fit_figure
from ..io.image_files import written_by_convcli
from ..io.images import read_stack
from ..io.npyfiles import load_npy_checked
from ..io.safeio import write_atomic
from ..kernels import Kernel, KernelError, get_kernel, list_kernels, load_kernel_file
from ..layers.padding import pad_images
from ..levels.mapping import RULES, values_from_levels
from ..startup import startup_over
from .conv_op import ConvOp
from .conv_pixels import size_cause
from .fit_solver import UNEXPLAINED, Fit, fit_kernel, layer_output_shape
from .manifest import MANIFEST_NAME, record_of
from .op_helpers import as_batch, channels_as_images, check_padded_size, pad_option
from .process import describe_error


def _dilation_option(dilation: int) -> str:
    """`` --dilation D`` where it is not the default."""
    return f" --dilation {dilation}" if dilation != 1 else ""


def zero_padded(A: np.ndarray, pad: int, cause: str) -> np.ndarray:
    """`A` with conv_forward's own zero padding made part of it (so the input can be centred);
    `cause`, the options that set it, in the error where it would not fit the memory."""
    if not pad:
        return A
    check_padded_size(A.shape, (pad,) * 4, cause)
    return pad_images(A, pad)


@dataclass(frozen=True)
class Match:
    """How close a learned kernel is to a named one: ``weights ~ scale * named``."""

    name: str
    cosine: float
    scale: float


def closest_kernel(weights: np.ndarray, kernels) -> Match | None:
    """The kernel among `kernels` (same size only) most parallel to `weights`, sign and scale aside.

    Parameters
    ----------
    weights : (f_h, f_w) ndarray
    kernels : iterable of :class:`convcli.kernels.Kernel`

    Returns
    -------
    Match or None
        The best ``|cosine|`` between the flattened grids, and the least-squares
        ``scale`` (negative when the signs are opposite); None if no kernel
        fits, or `weights` is all zeros. A smaller kernel is compared as the
        centre of the grid (a 3x3 kernel is a 5x5 one with a border of zeros).
    """
    weights = np.asarray(weights, np.float64)
    w = weights.ravel()
    norm_w = float(np.linalg.norm(w))
    best = None
    for kernel in kernels:
        k = _centred_in(kernel.weights, weights.shape)
        if k is None or norm_w == 0:
            continue
        k = k.ravel()
        norm_k = float(np.linalg.norm(k))
        cosine = float(w @ k) / (norm_w * norm_k)
        if best is None or abs(cosine) > abs(best.cosine):
            best = Match(kernel.name, cosine, float(w @ k) / norm_k**2)
    return best


def _centred_in(weights: np.ndarray, shape: tuple[int, int]) -> np.ndarray | None:
    """`weights` in the middle of a zero grid of `shape`, or None if it does not sit centred."""
    extra = (shape[0] - weights.shape[0], shape[1] - weights.shape[1])
    if min(extra) < 0 or extra[0] % 2 or extra[1] % 2:
        return None
    return np.pad(weights, ((extra[0] // 2,) * 2, (extra[1] // 2,) * 2))


CLOSE = 0.5
"""The |cosine| from which a named kernel is reported as close to a learned one."""


def kernel_toml(weights: np.ndarray, *, description: str, comments: list[str]) -> str:
    """A kernel file (see docs/kernels.md) with every weight in full digits.

    The weights are written as Python's ``repr``, the shortest text that reads
    back as exactly the same float64, so the file gives back `weights` exactly.
    """
    lines = [f"# {_one_line(c)}" for c in comments]
    lines.append(f"description = {_toml_string(description)}")
    lines.append("weights = [")
    for row in np.asarray(weights, np.float64):
        lines.append("    [" + ", ".join(repr(float(x)) for x in row) + "],")
    lines.append("]")
    return "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    """`text` with each character that is not printable escaped as Python writes it.

    A line break becomes a backslash and ``n``: a comment or a one-line
    description can then hold any file name.
    """
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _toml_string(text: str) -> str:
    """A TOML basic string of `text`: backslashes, quotes and control characters escaped."""
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\u{ord(m.group()):04x}", text) + '"'


# --- the command: files in, kernel file (and figure) out -------------------------------------


class FitError(ValueError):
    """A file that cannot be used; the message starts with the file's name."""


@dataclass(frozen=True)
class FitRun:
    """What ``convcli fit`` does: the inputs, the layer's options and where the results go."""

    before: str
    after: str
    size: int = 3
    channels: str = "sum"
    pad: int | str = "same"
    border: str = "reflect"
    stride: int = 1
    dilation: int = 1
    steps: int = 200
    out: str = ""
    figure: bool = False
    overwrite: bool = False
    max_pixels: int = 0

    def conv_op(self):
        """The :class:`ConvOp` whose input and layer the fit uses (options checked there)."""

        placeholder = Kernel("learned", "", np.ones((self.size, self.size)))
        return ConvOp(
            (placeholder,),
            stride=self.stride,
            pad=self.pad,
            channels=self.channels,
            border=self.border,
            dilation=self.dilation,
        )

    def out_path(self) -> str:
        """``-o``, or ``convcli-out/<stem of BEFORE>_fit-<f>x<f>.toml``."""
        if self.out:
            return self.out
        stem = os.path.splitext(os.path.basename(self.before))[0] or "stdin"
        return os.path.join("convcli-out", f"{stem}_fit-{self.size}x{self.size}.toml")

    def figure_path(self) -> str:
        return os.path.splitext(self.out_path())[0] + "_grid.png"


def _read_after(path: str, max_pixels: int, said: list[str]) -> tuple[np.ndarray, bool]:
    """AFTER as (H', W', C') values: a ``.npy`` as ``conv --format npy`` writes it, or an
    image (its read notes added to `said`); and whether they are raw values (a ``.npy``, a
    float TIFF), not levels."""
    raw = True
    if path.lower().endswith(".npy"):
        try:
            Y = load_npy_checked(path)
        except (OSError, ValueError) as exc:
            raise FitError(
                f"{path}: cannot read the .npy: {getattr(exc, 'strerror', None) or exc}"
            ) from None
        if Y.ndim == 2:
            Y = Y[:, :, None]
        if Y.ndim not in (3, 4) or not np.issubdtype(Y.dtype, np.number) or np.iscomplexobj(Y):
            raise FitError(
                f"{path}: expected a real (H, W, C) or (m, H, W, C) array, got {Y.dtype} {Y.shape}"
            )
    else:
        pic = _read_picture(path, max_pixels, said)
        Y, raw = pic.pixels[..., : pic.colour_channels], pic.floats
    if not np.isfinite(Y).all():
        raise FitError(f"{path}: holds values that are not finite (NaN or inf)")
    return Y, raw


CLIPPED = 0.01
"""The share of AFTER's levels at black or white from which they are taken to be clipped."""


def clipped_share(levels: np.ndarray, raw: bool) -> float:
    """The share of an image's levels at 0 or at its top (255, or 65535 past 255): 0 for
    `raw` values (a ``.npy``, a float TIFF), which were never cut."""
    if raw or not levels.size:
        return 0.0
    top = 255.0 if float(levels.max()) <= 255 else 65535.0
    return float(np.mean((levels <= 0) | (levels >= top)))


def _undo_levels(path: str, Y: np.ndarray, raw: bool) -> tuple[np.ndarray, list[str]]:
    """AFTER's values, where it is an image of levels convcli wrote (not `raw` values: a
    ``.npy``, a float TIFF): its levels undone, and what was done.

    The manifest beside it records how values became levels (``level = scale
    * x + offset``): a signed mapping is undone, ``x = (level - offset) /
    scale``, to within half a level. ``|x|`` (``abs``, ``robust``) lost the sign:
    a FitError. Without a record the levels are fitted as they are, with a note.
    """

    if raw or not written_by_convcli(path):
        return Y, []
    raw = "--format npy keeps the raw values"
    record = record_of(path)
    if record is None or "mapping" not in record:
        return Y, [
            f"{path}: written by convcli, so it holds levels mapped from the values; "
            f"{MANIFEST_NAME} beside it does not say how: fitted as it is ({raw})"
        ]
    mappings = [str(m) for m in np.atleast_1d(record["mapping"])]
    if all(m == RAW_VALUES for m in mappings):
        return Y, []
    named = "/".join(dict.fromkeys(mappings))
    if any(np.atleast_1d(record.get("absolute", False))):
        raise FitError(
            f"{path}: holds |x| mapped to levels ({named}, as convcli wrote it): the sign is gone "
            f"and the values cannot be had back; {raw}, and --normalize offset or minmax "
            "levels are undone here"
        )
    scale = np.asarray(record.get("scale"), dtype=np.float64)
    offset = np.asarray(record.get("offset"), dtype=np.float64)
    if (
        scale.ndim > 1
        or scale.size not in (1, Y.shape[-1])
        or offset.shape != scale.shape
        or not (np.isfinite(scale).all() and np.isfinite(offset).all() and scale.all())
    ):
        return Y, [
            f"{path}: written by convcli, so it holds levels mapped from the values; "
            f"{MANIFEST_NAME} gives no usable scale: fitted as it is ({raw})"
        ]
    note = (
        f"{path}: holds levels convcli mapped ({named}); fitted on the values undone "
        f"from {MANIFEST_NAME}, x = (level - offset) / scale, to within half a level ({raw})"
    )
    top = record.get("top")
    cutting = [m for m in dict.fromkeys(mappings) if m in RULES and RULES[m].cuts]
    if cutting and isinstance(top, (int, float)):
        cut = float(np.mean((Y <= 0) | (Y >= top)))
        if cut:
            note += (
                f"; {cut:.1%} of its levels are 0 or {top:g}, where {'/'.join(cutting)} "
                "may have cut values"
            )
    return values_from_levels(record, Y), [note]


def _read_picture(path: str, max_pixels: int, said: list[str]):
    """The picture of `path`: (H, W, C), or (m, H, W, C) for the frames of a stack; what
    reading it lost or changed (its notes, as conv says them) added to `said`."""
    try:
        pic = read_stack(path, max_pixels=max_pixels)
    except (OSError, ValueError) as exc:
        raise FitError(f"{path}: {describe_error(exc, path)}") from None
    said += [f"{path}: {note}" for note in pic.notes]
    return pic


def _shape_text(shape) -> str:
    return "x".join(str(n) for n in shape)


def prepare(run: FitRun) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The layer input (m, H, W, 1), zero pad included, the target (m, H', W', 1), notes, and
    the share of AFTER's levels at black or white (:func:`clipped_share`).

    Channels become the batch: ``sum`` and ``gray`` give one image, ``each``
    one per colour channel, all learning the same kernel. The notes say how
    the levels of an AFTER convcli wrote were undone (:func:`_undo_levels`).
    """
    conv = run.conv_op()
    said: list[str] = []
    pic = _read_picture(run.before, run.max_pixels, said)
    try:
        conv.check(pic)
    except ValueError as exc:
        raise FitError(f"{run.before}: {exc}") from None
    A = conv.conv_input(pic)
    if not np.isfinite(A).all():
        raise FitError(f"{run.before}: holds values that are not finite (NaN or inf)")
    frames = A.shape[0]
    # A channel of a frame per image, frame-major: every pair teaches the one kernel.
    A = channels_as_images(A, np.float64)
    try:  # errors in the options' words: a pad (or dilated kernel) too large for memory
        A_in, pad = conv.layer_input(A, conv.kernels[0])
        A_in = zero_padded(A_in, pad, size_cause(conv))
    except ValueError as exc:
        raise FitError(f"{run.before}: {exc}") from None
    levels, raw = _read_after(run.after, run.max_pixels, said)
    Y, notes = _undo_levels(run.after, levels, raw)
    notes = said + notes
    Y_frames = _frames_of_after(Y, frames, run)
    Y = Y_frames[0]
    m = A_in.shape[0] // frames
    expected = layer_output_shape(A_in.shape, (run.size, run.size), run.stride, run.dilation)
    _check_after_shape(Y.shape, (expected[1], expected[2], m), pic.colour_channels, run)
    return (A_in, channels_as_images(Y_frames, np.float64), notes, clipped_share(levels, raw))


def _check_after_shape(
    shape: tuple[int, ...], wanted: tuple[int, int, int], colour: int, run: FitRun
) -> None:
    """A FitError unless a frame of AFTER has the `wanted` shape that BEFORE's layer makes."""
    if shape == wanted:
        return
    hint = ""
    if shape[:2] == wanted[:2] and run.channels != "each" and shape[2] == colour:
        hint = "; --channels each learns one kernel for every colour channel"
    raise FitError(
        f"{run.after}: is {_shape_text(shape)} (H x W x channels), but a "
        f"{run.size}x{run.size} kernel with --pad {pad_option(run.pad)}, "
        f"--stride {run.stride}{_dilation_option(run.dilation)} and "
        f"--channels {run.channels} makes {_shape_text(wanted)} from {run.before}{hint}"
    )


def _frames_of_after(Y: np.ndarray, frames: int, run: FitRun) -> np.ndarray:
    """AFTER as (m, H', W', C') frames; a FitError unless it has as many as BEFORE."""
    Y = as_batch(Y)
    if len(Y) != frames:
        raise FitError(
            f"{run.after}: has {len(Y)} frame{'s' if len(Y) > 1 else ''} and "
            f"{run.before} {frames}: fit takes two stacks of the same frames"
        )
    return Y


def describe(fit: Fit, run: FitRun, match: Match | None, clipped: float = 0.0) -> list[str]:
    """The lines ``convcli fit`` prints about a fit: how well, and `match`, the closest named
    kernel; `clipped`, the share of AFTER's levels at black or white (:func:`clipped_share`)."""
    why = "converged" if fit.stopped == "converged" else "--steps reached: raise it"
    lines = [
        f"relative error {fit.relative_error:.3g} after {fit.steps} steps ({why}); "
        f"bias {fit.bias:.3g}"
    ]
    if fit.relative_error > UNEXPLAINED and clipped >= CLIPPED:
        lines.append(
            f"{run.after} is not {run.before} convolved with one {run.size}x{run.size} kernel: "
            f"the best one leaves a relative error of {fit.relative_error:.3g} (over "
            f"{UNEXPLAINED}), and {clipped:.1%} of its levels are black or white: values "
            "past them were cut (clipped), which no kernel does; fit on the values "
            "(conv --format npy, or --normalize none --format tiff)"
        )
    elif fit.relative_error > UNEXPLAINED:
        lines.append(
            f"{run.after} is not {run.before} convolved with one {run.size}x{run.size} kernel: "
            f"the best one leaves a relative error of {fit.relative_error:.3g} (over "
            f"{UNEXPLAINED}); try another --size, --pad or --border, or the pair differs by more "
            "than a convolution"
        )
    if match is not None and abs(match.cosine) >= CLOSE:
        lines.append(
            f"closest named kernel: {match.name} x {match.scale:.6g} "
            f"(cosine {abs(match.cosine):.4f})"
        )
    elif match is not None:
        lines.append(
            f"no named kernel is close (the closest, {match.name}, has cosine "
            f"{abs(match.cosine):.2f})"
        )
    return lines


def write_results(fit: Fit, run: FitRun, match: Match | None, match_lines: list[str]) -> list[str]:
    """Write the kernel file (and the figure, beside the `match`); the paths written."""
    path = run.out_path()
    text = kernel_toml(
        fit.weights,
        description=_one_line(
            f"learned by convcli fit from {os.path.basename(run.before)} "
            f"and {os.path.basename(run.after)}; bias {fit.bias!r}"
        ),
        comments=[
            f"{_MARK} {run.before} -> {run.after}",
            *match_lines,
            f"convcli conv -k {shlex.quote(os.path.basename(path))} --bias {fit.bias!r} "
            f"--stride {run.stride}{_dilation_option(run.dilation)} "
            f"--pad {pad_option(run.pad)} --border {run.border} "
            f"--channels {run.channels} gives the refit",
        ],
    )

    def write(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")
        _check_read_back(tmp, path, fit.weights)

    written = []
    with _writing(path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        if not write_atomic(path, write, overwrite=run.overwrite, replaceable=_written_by_fit):
            raise FitError(f"{path}: exists (--overwrite replaces it, or choose another -o)")
    written.append(path)
    if run.figure:
        named = None
        if match is not None and abs(match.cosine) >= CLOSE:
            grid = _centred_in(get_kernel(match.name).weights, fit.weights.shape)
            named = (
                f"{match.name} x {match.scale:.3g} (cosine {abs(match.cosine):.3f})",
                grid * match.scale,
            )
        figure = run.figure_path()
        with _writing(figure):
            saved = save_fit_figure(
                figure,
                fit.weights,
                fit.losses,
                named=named,
                title=f"convcli fit: {os.path.basename(run.before)} -> "
                f"{os.path.basename(run.after)}",
                overwrite=run.overwrite,
            )
        if not saved:
            raise FitError(f"{figure}: exists (--overwrite replaces it, or choose another -o)")
        written.append(figure)
    return written


@contextmanager
def _writing(path: str) -> Iterator[None]:
    """Turn the OSError of writing `path` (its folder cannot be made, a read-only or full
    disk) into a FitError naming it."""
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise FitError(f"{_one_line(path)}: cannot be written: {reason}") from None


_MARK = "convcli fit:"


def _check_read_back(tmp: Path, path: str, weights: np.ndarray) -> None:
    """Raise FitError unless the kernel file `tmp` (to be `path`) reads back as `weights`."""
    try:
        kernel = load_kernel_file(tmp)
    except KernelError as exc:
        raise FitError(
            f"{_one_line(path)}: the kernel file does not read back: {_one_line(str(exc))}"
        ) from None
    wanted = np.asarray(weights, np.float64)
    if kernel.weights.shape != wanted.shape or kernel.weights.tobytes() != wanted.tobytes():
        raise FitError(
            f"{_one_line(path)}: the kernel file does not read back as the learned kernel"
        )


def _written_by_fit(path) -> bool:
    """Whether a kernel file was written by ``convcli fit`` (its first line says so)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readline().startswith(f"# {_MARK}")
    except OSError:
        return False


def check_outputs(run: FitRun) -> None:
    """Refuse, before any work, outputs that are in the way (see :func:`write_results`)."""
    paths = [(run.out_path(), _written_by_fit)]
    if run.figure:
        paths.append((run.figure_path(), written_by_convcli))
    for path, ours in paths:
        if os.path.isdir(path):
            raise FitError(f"{path}: is a folder")
        if os.path.lexists(path):
            if not run.overwrite:
                raise FitError(f"{path}: exists (--overwrite replaces it, or choose another -o)")
            if not ours(path):
                raise FitError(
                    f"{path}: exists and was not written by convcli; it is kept (choose another -o)"
                )


def run_fit(run: FitRun, *, progress=None) -> tuple[list[str], list[str]]:
    """Check, read, fit, write: the lines to print and the paths written."""
    check_outputs(run)
    A_in, Y, notes, clipped = prepare(run)
    startup_over()
    with np.errstate(all="ignore"):
        fit = fit_kernel(
            A_in,
            Y,
            (run.size, run.size),
            stride=run.stride,
            dilation=run.dilation,
            steps=run.steps,
            progress=progress,
        )

    match = closest_kernel(fit.weights, list_kernels())
    lines = describe(fit, run, match, clipped)
    written = write_results(fit, run, match, lines)
    return notes + lines, written
