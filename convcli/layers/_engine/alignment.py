"""Where bands of rows start so that they get a whole image's values (convcli's strips).

A result row's value depends on where it falls in its engine's row tiles
(BLAS's blocks): rows computed from tiles starting on the same row are equal
bit for bit. :func:`tile_rows` gives the tile of every engine a convolution
may take, so that a band starting on a multiple of it has the whole image's
values. The native engine computes each row on its own: where it takes the
call, any band has the whole image's values (a tile of one row).
"""

from __future__ import annotations

import numpy as np

from . import native
from .correlate import _crop, _Plan, tile_rows_fit
from .separable import passes
from .separable import tile_rows as separable_rows


def tile_rows(shape, kernel, stride, pads, n_C) -> int:
    """The output rows of a row tile of the matmul engine on A of `shape`: a power of two.

    `kernel` is (f_h, f_w), `pads` (top, bottom, left, right). Where the
    separable engine may take the call (one channel, stride 1, a kernel size
    it takes), the larger of its tile and this engine's (both powers of two:
    a multiple of both). 1 where the native engine takes the call (float32,
    as the convolutions of ``convcli conv`` are): its direct correlation and
    its separable passes compute every row alike, wherever a band starts.
    """
    if native.active() and native.direct_takes(shape[3], n_C, depthwise=False):
        return 1
    A = np.broadcast_to(np.float32(0), shape)
    A, pads = _crop(A, pads)
    plan = _Plan(A.shape, kernel, stride, pads, n_C, np.dtype(np.float32))
    rows = tile_rows_fit(plan.nbw * plan.K)
    if stride == 1 and shape[3] == 1 and min(kernel) > 1:
        if passes(*kernel) < kernel[0] * kernel[1] + 2:  # the separable engine may run
            rows = max(rows, separable_rows(plan.n_W, kernel[1]))
    return rows
