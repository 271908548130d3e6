"""The named choices of the library and the command line, in one numpy-free module.

The command line builds its options from these names without importing
numpy or Pillow, so ``convcli --help`` starts as fast as click does. The
library modules take their constants from here: :data:`PAD_MODES` is also
:data:`convcli.layers.padding.PAD_MODES`, and so on.
"""

from __future__ import annotations

PAD_MODES = ("constant", "edge", "reflect", "symmetric", "wrap")
"""Border modes of :func:`convcli.pad_images` (``pad --mode``, ``conv --border``)."""

POOL_MODES = ("max", "average")
"""Modes of :func:`convcli.pool_forward`."""

POOL_MODE_ALIASES = {"avg": "average"}
"""Other names accepted for the pool modes (PyTorch's avg_pool2d)."""

MAPPINGS = ("abs", "minmax", "clip", "offset", "robust")
"""The value mappings of :func:`convcli.levels.mapping.to_levels` (``--normalize``)."""

CHANNEL_MODES = ("sum", "each", "gray")
"""How ``conv`` treats colour channels (``--channels``)."""

RAW_VALUES = "none"
"""``--normalize none``: the float32 values themselves, in formats that hold them."""

NORMALIZE_CHOICES = ("auto", *MAPPINGS, RAW_VALUES)
"""``--normalize``: a mapping, ``auto`` to pick one per kernel, or ``none`` (raw values)."""

EXPLAIN_TARGETS = ("scipy", "opencv", "torch", "skimage", "magick")
"""The tools ``convcli explain --as`` translates an operation for."""

BORDER_MODES = PAD_MODES
DEFAULT_BORDER = "reflect"
"""How ``conv`` fills the border (``--border``): one of :data:`PAD_MODES`."""

LOSSES = ("sum", "energy")
"""``grad conv --loss``: L = sum(Z), upstream gradient ones; L = sum(Z**2) / 2, upstream Z."""

COMBINE_MODES = ("magnitude", "max", "sum")
"""How ``--combine`` makes one map of several kernels' results."""

FORMAT_NAMES = ("png", "jpg", "tiff", "npy", "zarr")
"""The output formats (``--format``); :data:`convcli.app.names.FORMATS` describes each."""

FORMAT_ALIASES = {"jpeg": "jpg", "tif": "tiff"}
"""Other names and extensions accepted for the formats."""

DEFAULT_MAX_PIXELS = 89_478_485
"""Pillow's own decompression-bomb limit (``Image.MAX_IMAGE_PIXELS``)."""


def keyed_by(names: tuple[str, ...], table: dict, *, what: str) -> dict:
    """`table` itself if its keys are exactly `names`; else a LookupError naming the odd one.

    A table of what each choice means elsewhere (its name in another tool,
    the gradient of a border mode ...) is checked against its choices when
    it is made: a name added here and not there fails at once, by name.

    Examples
    --------
    >>> keyed_by(("max", "average"), {"max": 1, "average": 2}, what="a table")
    {'max': 1, 'average': 2}
    >>> keyed_by(("max", "average"), {"max": 1}, what="a table")
    Traceback (most recent call last):
    ...
    LookupError: a table has no entry for 'average' (one of max, average)
    """
    for name in names:
        if name not in table:
            raise LookupError(f"{what} has no entry for {name!r} (one of {', '.join(names)})")
    for name in table:
        if name not in names:
            raise LookupError(
                f"{what} has an entry for {name!r}, which is not one of {', '.join(names)}"
            )
    return table
