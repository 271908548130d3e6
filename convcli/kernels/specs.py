"""The ``--kernel`` spec grammar: names and aliases, ``NAME:ANGLE``, and kernel files' paths.

A shipped name, with or without an angle, always wins over a file of that name;
``NAME:ANGLE`` rotates the kernel (see :mod:`convcli.kernels.rotation`).

Where a name is also an ImageMagick kernel whose argument is not an angle there,
``NAME:ARG`` means what it means in ImageMagick or is an error saying so:
``laplacian:0``, ``:1`` and ``:15`` are ImageMagick's Laplacian types (``edge``,
``laplacian``, ``log-5x5``); ``gaussian:...``, ``log:...``, ``roberts:...`` and the
other Laplacian types are refused with what ImageMagick means by them.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from .files import load_kernel_file
from .kernel import Kernel, KernelError
from .rotation import _rotated
from .shipped import _registered, get_kernel

_ANGLE_RE = re.compile(r"[+-]?\d+(\.0*)?")


# Names that are also ImageMagick kernels (``-morphology Convolve Name:ARG``) but whose ARG is
# not an angle there. Sobel, Prewitt and Kirsch take an angle in ImageMagick as here, and give
# the same grids at every angle; these take a type, a size or a sigma.
_IMAGEMAGICK_LAPLACIANS = {0: "edge", 1: "laplacian", 15: "log-5x5"}
_IMAGEMAGICK_MEANINGS = {
    "gaussian": (
        "Gaussian:RADIUSxSIGMA is a sampled Gaussian of that radius and sigma",
        "gaussian (the 3x3 binomial, sigma about 0.71) or gaussian-5x5, with no "
        "number, or the grid in a kernel file",
    ),
    "log": (
        "LoG:RADIUS,SIGMA is a Laplacian of Gaussian of that radius and sigma",
        "log (ImageMagick's Laplacian:15) with no number, or the grid in a kernel file",
    ),
    "roberts": (
        "Roberts:ANGLE is a 3x3 kernel of two neighbouring cells turned by ANGLE",
        "roberts-nw or roberts-ne (the 2x2 Roberts cross, run with --pad 0), NAME:90 to turn them",
    ),
}


def _imagemagick_kernel(name: str, arg: str, spec: str) -> Kernel | None:
    """The kernel ImageMagick means by ``NAME:ARG`` where ARG is not an angle there, else None.

    ``Laplacian:TYPE`` gives the shipped Laplacian of that type (0 ``edge``,
    1 ``laplacian``, 15 ``log-5x5``); any other Laplacian type, and any
    ``Gaussian:``, ``LoG:`` or ``Roberts:`` argument, raise a KernelError saying
    what ImageMagick means and what to write here.
    """
    key = name.strip().lower()
    if key == "laplacian":
        if _ANGLE_RE.fullmatch(arg.strip()) and int(float(arg)) in _IMAGEMAGICK_LAPLACIANS:
            return get_kernel(_IMAGEMAGICK_LAPLACIANS[int(float(arg))])
        raise KernelError(
            f"kernel spec {spec!r}: in ImageMagick the number after Laplacian: is a type, "
            "not an angle: Laplacian:0 is edge here, Laplacian:1 laplacian and Laplacian:15 "
            "log-5x5; its types 2, 3, 5, 7 and 19 are not shipped (write the grid in a kernel file)"
        )
    if key in _IMAGEMAGICK_MEANINGS:
        meaning, instead = _IMAGEMAGICK_MEANINGS[key]
        raise KernelError(f"kernel spec {spec!r}: in ImageMagick {meaning}; write {instead}")
    return None


def _looks_like_path(text: str) -> bool:
    """Whether a spec is written as a path: a separator, or a '.' in its last component.

    Shipped names never contain ``/``, ``.`` or a separator, so such a spec is never a name.
    """
    separators = {"/", os.sep, os.altsep} - {None}
    return any(s in text for s in separators) or "." in Path(text).name


def _exists(text: str) -> bool:
    return os.path.isfile(text) or os.path.isdir(text)  # False for a name too long


def _not_a_file(text: str) -> str:
    """What `text` names, where it exists but is neither a file nor a folder (never opened)."""
    try:
        mode = os.stat(text).st_mode
    except OSError as exc:  # a link to nothing, or a loop of links
        return f"a link that leads nowhere ({exc.strerror or exc})"
    return (
        "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a device"
        if (stat.S_ISCHR(mode) or stat.S_ISBLK(mode))
        else "a socket or other special file"
    )


def _load_named(text: str) -> Kernel:
    """A kernel name, else a kernel file (no angle): a shipped name always wins."""
    kernel = _registered(text)
    if kernel is not None:
        return kernel
    if _exists(text):
        return load_kernel_file(text)
    if os.path.lexists(text):
        raise KernelError(f"{text}: {_not_a_file(text)}, not a kernel file")
    if _looks_like_path(text):
        raise KernelError(f"{text}: no such kernel file")
    return get_kernel(text)  # unknown: the message suggests close names


def _spec_text(spec) -> str:
    text = os.fspath(spec)
    if not isinstance(text, str):
        raise TypeError(f"spec must be a string or a path, got {type(spec).__name__}")
    if not text.strip():
        raise KernelError("empty kernel spec: give a kernel name, NAME:ANGLE or a file path")
    return text


def parse_kernel_spec(spec) -> Kernel:
    """Resolve a ``--kernel`` value: a name, ``NAME:ANGLE``, or a kernel file's path.

    Parameters
    ----------
    spec : str or os.PathLike
        A shipped kernel's name or alias (any case); ``NAME:ANGLE`` for that
        kernel rotated clockwise by ANGLE degrees (see :func:`rotate_kernel`);
        or the path of a kernel file, optionally followed by ``:ANGLE``.

        A shipped name, with or without an angle, always wins: files and
        folders in the working directory never hide it. A spec is a file's path
        when it contains a path separator (``./sobel-y``, ``dir/k``) or a ``.``
        in its last component (``my.txt``), or when it is no shipped name but
        an existing file has that name (an extension-less ``mykernel``). A
        path that exists is taken whole, even with a ``:`` in its name.

    Returns
    -------
    Kernel
        A rotated kernel is named ``"NAME:DEGREES"`` with DEGREES in 0..359.

    Raises
    ------
    KernelError
        One line: an unknown name (with close matches), ``"<spec>: no such
        kernel file"`` for a missing path, a bad angle, or the file's problem.

    Examples
    --------
    >>> parse_kernel_spec("vertical:90").weights.tolist()
    [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [-1.0, -1.0, -1.0]]
    """
    text = _spec_text(spec)
    base, sep, angle_text = text.rpartition(":")
    rotated = bool(sep and base.strip())
    if _registered(base if rotated else text) is None and _exists(text):
        return load_kernel_file(text)
    if not rotated:
        return _load_named(text.strip())
    imagemagick = _imagemagick_kernel(base, angle_text, text)
    if imagemagick is not None:
        return imagemagick
    if not _ANGLE_RE.fullmatch(angle_text.strip()):
        raise KernelError(
            f"kernel spec {text!r}: the angle {angle_text!r} is not a whole number of "
            "degrees (write NAME:90, for example)"
        )
    return _rotated(_load_named(base.strip()), angle_text.strip())


def parse_kernel_specs(spec) -> list[Kernel]:
    """Resolve a comma-separated list of ``--kernel`` specs, in order.

    Parameters
    ----------
    spec : str or os.PathLike
        Specs as :func:`parse_kernel_spec` reads them, separated by commas
        (``"sobel-x:90, edge"``); whitespace around each is ignored. An
        existing file written as a path (see :func:`parse_kernel_spec`),
        optionally followed by ``:ANGLE``, is taken whole even when its name
        holds a comma.

    Returns
    -------
    list of Kernel
        One per spec, in the order given.

    Raises
    ------
    KernelError
        For an empty item (``"a,,b"``, a trailing comma), naming the whole
        spec, or the first spec that cannot be resolved.

    Examples
    --------
    >>> [k.name for k in parse_kernel_specs("sobel-x, sobel-x:90")]
    ['sobel-x', 'sobel-x:90']
    """
    text = _spec_text(spec)
    base, sep, angle_text = text.rpartition(":")
    whole = [text, base] if sep and _ANGLE_RE.fullmatch(angle_text.strip()) else [text]
    if "," not in text or any(_looks_like_path(t) and _exists(t) for t in whole):
        return [parse_kernel_spec(text)]
    items = [item.strip() for item in text.split(",")]
    for number, item in enumerate(items, start=1):
        if not item:
            raise KernelError(
                f"kernel spec {text!r}: item {number} of {len(items)} is empty "
                "(separate kernels with single commas, no trailing comma)"
            )
    return [parse_kernel_spec(item) for item in items]
