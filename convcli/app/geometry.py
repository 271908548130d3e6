"""How an operation's output rows read its input rows (:class:`RowGeometry`).

Each operation says it of itself (``row_geometry``, ``output_size``,
``border_fill``), so that the strips, the dry run and the memory budget
follow any operation by construction.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RowGeometry:
    """How an operation's output rows read its input rows.

    Output row ``i`` of window ``k`` reads the input rows
    ``i * stride - tops[k]`` to ``i * stride - tops[k] + spans[k] - 1``.

    Attributes
    ----------
    stride : int
    tops, spans : tuple of int
        Each window's top pad and height (one per kernel of a conv).
    out_rows : int
        The number of output rows for the image's height.
    bordered : bool
        Rows beyond the image hold values (the border); else they are
        pooling's padding, which no window counts.
    align : int
        Output rows computed together start on a multiple of it: the
        convolution engine's row tiles (a row's value depends on where it
        falls in them: :func:`convcli.layers._engine.correlate.tile_rows_fit`).
    """

    stride: int
    tops: tuple[int, ...]
    spans: tuple[int, ...]
    out_rows: int
    bordered: bool = True
    align: int = 1
