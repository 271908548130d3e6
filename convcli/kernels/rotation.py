"""Rotating a kernel's grid clockwise, as ImageMagick does.

A spec ``NAME:ANGLE`` rotates a kernel *clockwise* as the grid is printed
(rows downward), by ``ANGLE`` degrees: a multiple of 90 for any kernel, or of
45 for a 3x3 kernel, whose 8 outer cells then move one place clockwise around
the centre per 45 degrees. This is ImageMagick's convention for
``-morphology Convolve Sobel:90`` (``RotateKernelInfo`` in MagickCore's
morphology.c), and convcli's ``sobel:90`` prints the same grid as ImageMagick's
``Sobel:90``: ``[[1, 2, 1], [0, 0, 0], [-1, -2, -1]]``, which is ``sobel-y``.
Rotating a kernel clockwise rotates its bright side clockwise too
(``vertical:90`` is ``horizontal``, ``kirsch-n:45`` is ``kirsch-ne``), and
``:180`` negates an antisymmetric kernel (``sobel-x:180`` responds where the
image is brighter on the *right*).
"""

from __future__ import annotations

import math

import numpy as np

from .kernel import Kernel, KernelError, _checked_weights, _is_number

# The 8 outer cells of a 3x3 grid, in clockwise order from the top-left corner.
_RING = ((0, 0), (0, 1), (0, 2), (1, 2), (2, 2), (2, 1), (2, 0), (1, 0))


def rotate_kernel(weights, angle) -> np.ndarray:
    """Rotate a kernel grid clockwise by `angle` degrees, as ImageMagick does.

    Parameters
    ----------
    weights : (f_h, f_w) array_like
        The grid, rows downward as printed.
    angle : int or float
        Degrees clockwise (negative: anticlockwise): a multiple of 90 for any
        kernel, or of 45 for a 3x3 kernel, whose 8 outer cells move one place
        clockwise around the centre per 45 degrees.

    Returns
    -------
    (f_h, f_w) or (f_w, f_h) ndarray
        A new float64 array.

    Examples
    --------
    >>> rotate_kernel([[1, 0, -1]] * 3, 90)
    array([[ 1.,  1.,  1.],
           [ 0.,  0.,  0.],
           [-1., -1., -1.]])
    >>> rotate_kernel([[1, 0, -1]] * 3, 45)
    array([[ 1.,  1.,  0.],
           [ 1.,  0., -1.],
           [ 0., -1., -1.]])
    """
    w = _checked_weights(weights, "weights")
    if not _is_number(angle) or not math.isfinite(angle) or not float(angle).is_integer():
        raise KernelError(
            f"cannot rotate by {angle!r} degrees: use a multiple of 90 (or of 45 for a 3x3 kernel)"
        )
    degrees = int(angle) % 360
    if degrees % 90 == 0:
        return np.ascontiguousarray(np.rot90(w, k=-(degrees // 90)))
    if degrees % 45 != 0:
        raise KernelError(
            f"cannot rotate by {angle} degrees: use a multiple of 90 (or of 45 for a 3x3 kernel)"
        )
    if w.shape != (3, 3):
        h, wd = w.shape
        raise KernelError(
            f"cannot rotate a {h}x{wd} kernel by {angle} degrees: "
            "45-degree steps need a 3x3 kernel (use a multiple of 90)"
        )
    rows, cols = zip(*_RING, strict=True)
    out = w.copy()
    out[rows, cols] = np.roll(w[rows, cols], degrees // 45)
    return out


def _rotated(kernel: Kernel, angle_text: str) -> Kernel:
    angle = int(float(angle_text))
    degrees = angle % 360
    weights = rotate_kernel(kernel.weights, angle)
    if degrees == 0:
        return kernel
    description = f"{kernel.name} rotated {degrees} degrees clockwise"
    if kernel.description:
        description += f"; unrotated: {kernel.description}"
    return Kernel(f"{kernel.name}:{degrees}", description, weights, (), kernel.source)
