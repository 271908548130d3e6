"""The border modes of convcli in the other tools: the one table of their names.

`convcli explain` translates a run into scipy, OpenCV, PyTorch, scikit-image
and ImageMagick with it, and says where a tool has no equivalent.
"""

from __future__ import annotations

from typing import NamedTuple

from ..choices import PAD_MODES, keyed_by
from ..layers.padding import NP_PAD_ARGUMENTS

NO_EQUIVALENT = "no equivalent"
"""What the tables say where a tool has no border mode of convcli's."""


class Nearest(NamedTuple):
    """What a tool without a border mode offers instead: its own mode nearest to it."""

    name: str
    """The tool's name for it."""
    mode: str
    """The convcli mode it is."""
    how: str
    """What it does that the missing mode does not."""


class Border(NamedTuple):
    """One border mode of convcli (numpy's name) in the other tools."""

    scipy: str | None
    """scipy.ndimage's mode (scikit-image's filters take the same); None: it has none, and
    the scripts pad with numpy."""
    opencv: str | None
    """OpenCV's ``cv2.BORDER_*``; None: as scipy."""
    torch: str | None
    """F.pad's mode; None: F.pad has none, and the scripts pad with numpy."""
    magick: str | Nearest
    """ImageMagick's -virtual-pixel method, or the one nearest where it has none."""

    @property
    def skimage(self) -> str:
        return self.scipy


def _named_everywhere(table: dict[str, Border]) -> dict[str, Border]:
    """`table` itself if each row names its mode in both scipy and OpenCV or in neither
    (numpy pads it for both: :func:`np_pad_mode`); else LookupError."""
    for mode, row in table.items():
        if (row.scipy is None) != (row.opencv is None):
            raise LookupError(f"explain's border table: {mode!r} needs a scipy and an OpenCV name")
    return table


def np_pad_mode(mode: str) -> str:
    """``np.pad``'s arguments for the border `mode`, as code
    (:data:`convcli.layers.padding.NP_PAD_ARGUMENTS`).

    >>> np_pad_mode("wrap")
    "mode='wrap'"
    """
    return ", ".join(f"{name}={value!r}" for name, value in NP_PAD_ARGUMENTS[mode].items())


# Each border mode of convcli in the other tools: a row per mode of convcli.choices.PAD_MODES.
BORDERS = _named_everywhere(
    keyed_by(
        PAD_MODES,
        {
            "constant": Border("constant", "BORDER_CONSTANT", "constant", "Black"),
            "edge": Border("nearest", "BORDER_REPLICATE", "replicate", "Edge"),
            "reflect": Border(
                "mirror",
                "BORDER_REFLECT_101",
                "reflect",
                Nearest("Mirror", "symmetric", "repeats the edge pixel"),
            ),
            "symmetric": Border("reflect", "BORDER_REFLECT", None, "Mirror"),
            "wrap": Border("grid-wrap", "BORDER_WRAP", "circular", "Tile"),
        },
        what="explain's border table",
    )
)


def border_name(mode: str, target: str):
    """`mode`'s name in `target` (a field of :class:`Border`): a str, None or a Nearest.

    Examples
    --------
    >>> border_name("edge", "opencv")
    'BORDER_REPLICATE'
    """
    if mode not in BORDERS:
        raise ValueError(f"border mode must be one of {', '.join(BORDERS)}; got {mode!r}")
    return getattr(BORDERS[mode], target)
