"""The border modes of convcli in the other tools: the one table of their names.

`convcli explain` translates a run into scipy, OpenCV, PyTorch, scikit-image
and ImageMagick with it, and says where a tool has no equivalent.
"""

from __future__ import annotations

from typing import NamedTuple

from ..choices import PAD_MODES, keyed_by

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

    scipy: str
    """scipy.ndimage's mode (scikit-image's filters take the same)."""
    opencv: str
    """OpenCV's ``cv2.BORDER_*``."""
    torch: str | None
    """F.pad's mode; None: F.pad has none, and the scripts pad with numpy."""
    magick: str | Nearest
    """ImageMagick's -virtual-pixel method, or the one nearest where it has none."""

    @property
    def skimage(self) -> str:
        return self.scipy


def _named_everywhere(table: dict[str, Border]) -> dict[str, Border]:
    """`table` itself if each row names its mode in scipy and OpenCV; else LookupError.

    The scripts have no other way to pad for these two; PyTorch and
    ImageMagick may lack a mode (numpy pads; the nearest mode is named).
    """
    for mode, row in table.items():
        if not (isinstance(row.scipy, str) and isinstance(row.opencv, str)):
            raise LookupError(f"explain's border table: {mode!r} needs a scipy and an OpenCV name")
    return table


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
