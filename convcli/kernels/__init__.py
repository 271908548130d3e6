"""Named convolution kernels, kept as data: one readable file per kernel (numpy only).

The kernels that ship with convcli live in the project's ``kernels/`` folder, one
TOML file each, installed as the package ``convcli.kernel_files``; a kernel file
given by path may also be a plain text grid of numbers. The modules:

- :mod:`~convcli.kernels.kernel`: :class:`Kernel`, :class:`KernelError` and the
  checks on weights;
- :mod:`~convcli.kernels.files`: reading a kernel file (TOML or a text grid), and
  the limits :data:`MAX_KERNEL_SIDE` and :data:`MAX_KERNEL_FILE_BYTES`;
- :mod:`~convcli.kernels.shipped`: the shipped kernels, :func:`list_kernels` and
  :func:`get_kernel`;
- :mod:`~convcli.kernels.rotation`: :func:`rotate_kernel`, ImageMagick's rotation;
- :mod:`~convcli.kernels.specs`: the ``--kernel`` spec grammar, :func:`parse_kernel_spec`
  and :func:`parse_kernel_specs`;
- :mod:`~convcli.kernels.describe`: :func:`format_kernel_grid` and
  :func:`describe_kernel` (``convcli kernels --check``).

Sign conventions
----------------
convcli's "convolution" is cross-correlation (the kernel is not flipped; see
:mod:`convcli.layers.conv`), so a kernel's grid is laid over the image as written. A
kernel with positive weights on its left and negative on its right, such as the
tutorial's ``vertical`` ``[[1, 0, -1]] * 3``, responds *positively* where the
image is brighter on the left than on the right. Every directional kernel's
description says which side must be brighter for a positive response.

Rotation
--------
A spec ``NAME:ANGLE`` rotates a kernel *clockwise* as the grid is printed, by
``ANGLE`` degrees, as ImageMagick does (see :mod:`~convcli.kernels.rotation`):
``sobel:90`` prints the same grid as ImageMagick's ``Sobel:90``, which is ``sobel-y``.

Examples
--------
>>> k = parse_kernel_spec("Sobel-X:90")
>>> print(format_kernel_grid(k))
 1   2   1
 0   0   0
-1  -2  -1
>>> k.label
'sobel-x_rot90'
"""

from __future__ import annotations

from .describe import describe_kernel, format_kernel_grid
from .files import MAX_KERNEL_FILE_BYTES, MAX_KERNEL_SIDE, load_kernel_file
from .kernel import Kernel, KernelError
from .rotation import rotate_kernel
from .shipped import _build_registry as _build_registry
from .shipped import _kernel_folder as _kernel_folder
from .shipped import get_kernel, list_kernels
from .specs import parse_kernel_spec, parse_kernel_specs

__all__ = [
    "MAX_KERNEL_FILE_BYTES",
    "MAX_KERNEL_SIDE",
    "Kernel",
    "KernelError",
    "describe_kernel",
    "format_kernel_grid",
    "get_kernel",
    "list_kernels",
    "load_kernel_file",
    "parse_kernel_spec",
    "parse_kernel_specs",
    "rotate_kernel",
]
