"""Output file names: one grammar that both builds and recognises them.

For an input ``<stem>.<ext>`` and operation ``<op>``, in the output folder::

    <stem>_<op>-<tag>.<fmt>      a channel, the whole image, or the raw .npy
    <stem>_<op>-<raw>_grid.png   --figure: the figure grid, named as the .npy
    <stem>_<op>-<tag>_f<k>.<fmt> frame k of a stack written one file per frame

(Grids of earlier versions, ``<stem>_<op>_grid.png``, are still recognised.)

Each operation writes its own tags (:meth:`convcli.app.ops.Operation.tags`),
with numbers in :func:`number`; this module puts the names together
(:func:`planned_outputs`), gives clashing inputs distinct stems
(:func:`output_stems`) and recognises the outputs of earlier runs
(:func:`earlier_outputs`) from the same tables: the operations' names and
:data:`FORMATS`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from ..choices import FORMAT_ALIASES
from ..io.formats import FORMATS, Format  # noqa: F401  (the table, for the app)
from ..io.frames import frame_label
from ..io.safeio import path_order


def format_name(name: str) -> str:
    """The key of :data:`FORMATS` for a format name, alias or extension (any case, dot or not).

    >>> format_name("JPEG"), format_name(".tif"), format_name("npy")
    ('jpg', 'tiff', 'npy')
    """
    key = name.lower().lstrip(".")
    key = FORMAT_ALIASES.get(key, key)
    if key not in FORMATS:
        raise ValueError(f"{name!r} is not an output format ({', '.join(FORMATS)})")
    return key


def file_format(path: str) -> str | None:
    """The format that the extension of `path` names, or None.

    >>> file_format("edges.PNG"), file_format("out/photo.jpeg"), file_format("results")
    ('png', 'jpg', None)
    """
    try:
        return format_name(Path(path).suffix) if Path(path).suffix else None
    except ValueError:
        return None


def ome_tiff_name(path) -> bool:
    """Whether `path` is named as an OME-TIFF: ``.ome.tif`` or ``.ome.tiff`` (any case).

    >>> ome_tiff_name("cells_pool.OME.tif"), ome_tiff_name("cells.tiff")
    (True, False)
    """
    return Path(path).name.lower().endswith((".ome.tif", ".ome.tiff"))


GRID_FORMAT = "png"


def number(value: float) -> str:
    """A number for a file name, in the fewest digits that give it back exactly.

    >>> number(50.0), number(0.5), number(-1e-07), number(0.1234567)
    ('50', '0.5', '-1e-07', '0.1234567')
    """
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


@dataclass(frozen=True)
class Tags:
    """What an operation writes after ``<stem>_<op>-`` for an input's channels.

    Attributes
    ----------
    channels : list of str
        One tag per output channel, in the order of the result's channels.
    whole : str or None
        The tag of the whole result as one colour image, or None.
    raw : str
        The tag of the raw ``.npy``, and of the figure grid.
    groups : tuple of (str, tuple of int)
        More colour images: the tag of each, and the result channels it holds
        (conv's per-kernel colour results with ``--channels each``).
    bands : tuple of (int or None)
        For each result channel, the input channel it is made from alone (pad, pool, a
        kernel over each channel or over the one colour channel), or None (a sum of
        channels); empty where none is. Whether it holds that channel's values (and so
        its scale and offset) is :func:`convcli.app.outputs.carried_for`'s to say.
    """

    channels: list[str]
    whole: str | None
    raw: str
    groups: tuple[tuple[str, tuple[int, ...]], ...] = ()
    bands: tuple[int | None, ...] = ()


@dataclass(frozen=True)
class Output:
    """One planned output file."""

    path: Path
    kind: str  # "channel", "whole", "group", "raw" or "grid"
    index: int = -1  # the result's channel, for kind "channel"
    group: tuple[int, ...] = ()  # the result's channels, for kind "group"
    frame: int = -1  # the input's frame, for an output of one frame of a stack
    bands: tuple[int | None, ...] = ()  # the input channel each of its channels is made from


_GRID_TAIL = f"_grid.{GRID_FORMAT}"


def named_for_stem(name: str, stem: str) -> bool:
    """Whether the file `name` could be an output of the input with output stem `stem`.

    Every output is named ``<stem>_...`` (compared ignoring case).

    >>> named_for_stem("Photo_conv-edge-sum.png", "photo"), named_for_stem("photo.png", "photo")
    (True, False)
    """
    return name.casefold().startswith((stem + "_").casefold())


def single_output(outputs: list[Output]) -> Output | None:
    """The one image that stands for a run's result, or None if it has several.

    The raw ``.npy``; else the whole image, or the one colour group (a
    kernel's result in colour), or the one channel: what ``-o FILE`` writes.
    """
    for kind in ("raw", "whole", "group", "channel"):
        found = [o for o in outputs if o.kind == kind]
        if found:
            return found[0] if len(found) == 1 else None
    return None


def channels_written(task, tags: Tags) -> bool:
    """Whether `task` writes its result's channels one grey file each.

    Maps always are; an image changed (an operation's ``writes_image``: pad,
    pool) is written whole alone, its channels too with ``--separate``
    (``task.separate``), as ImageMagick's ``-separate`` writes them; a grey
    image's one channel is the image.
    """
    if not getattr(task.op, "writes_image", False) or tags.whole is None:
        return True
    return bool(getattr(task, "separate", False))


def planned_outputs(
    task,
    channels: tuple[str, ...],
    *,
    frames: tuple[tuple[int, ...], int] | None = None,
    per_frame: bool = False,
) -> list[Output]:
    """The files `task` writes for an input with these channels, in writing order.

    `task` has ``out_dir``, ``stem``, ``op``, ``fmt``, ``figure``, ``separate`` and
    ``out_file`` (a :class:`convcli.app.plan.Task`); channels as
    :func:`channels_written` says. With ``out_file``, the
    one output of :func:`single_output`, written to that path; a ValueError
    if the run makes several images. `frames`, ``(frame numbers, the file's
    frame count)``: the frames ``--frames`` picks, named in every output
    (:func:`frames_tag`) unless they are all the file's, in order; `per_frame`
    writes each output one file per frame (the figure grid stays one), named
    with :func:`convcli.io.frames.frame_label`.
    """
    outputs = _outputs(task, channels, frames_tag(*frames) if frames is not None else "")
    if not per_frame:
        return outputs
    numbers, count = frames
    return [
        out
        if out.kind == "grid"
        else replace(
            out,
            path=out.path.with_name(f"{out.path.stem}_{frame_label(k, count)}{out.path.suffix}"),
            frame=k,
        )
        for out in outputs
        for k in (numbers if out.kind != "grid" else (-1,))
    ]


def frames_tag(numbers: tuple[int, ...], count: int) -> str:
    """The end of output names for frames `numbers` of a file of `count`: none for all of
    them in order, else ``-frames`` and the numbers, runs of three or more as ranges, so
    that a run with other frames never takes these files for its own.

    >>> frames_tag((0, 1, 2), 3), frames_tag((0,), 3), frames_tag((3, 1, 0), 4)
    ('', '-frames0', '-frames3,1,0')
    >>> frames_tag((0, *range(10, 20)), 24)
    '-frames0,10-19'

    A list longer than 60 characters is named by its count, ends and digest:

    >>> frames_tag(tuple(range(0, 100, 2)), 100)
    '-frames50-of-0-to-98-751d2d24841a'
    """
    if numbers == tuple(range(count)):
        return ""
    runs: list[list[int]] = []
    for k in numbers:
        if runs and k == runs[-1][-1] + 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    parts = [f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)) for run in runs]
    listed = ",".join(parts)
    if len(listed) > _FRAMES_LISTED:  # a name the file system takes: the list's digest instead
        import hashlib  # long frame lists only (OpenSSL's start, 4 ms)

        digest = hashlib.sha256(listed.encode()).hexdigest()[:12]
        listed = f"{len(numbers)}-of-{numbers[0]}-to-{numbers[-1]}-{digest}"
    return "-frames" + listed


_FRAMES_LISTED = 60
"""The longest list of frames :func:`frames_tag` writes out in a name."""


def _outputs(task, channels: tuple[str, ...], frames: str) -> list[Output]:
    """:func:`planned_outputs` of a picture; `frames`, the names' :func:`frames_tag`."""
    op, out, fmt = task.op, Path(task.out_dir), FORMATS[task.fmt]
    tags = op.tags(channels)
    base = f"{task.stem}_{op.name}-"
    ext = f"{frames}.{fmt.extension}"
    if fmt.raw:
        outputs = [Output(out / f"{base}{tags.raw}{ext}", "raw")]
    else:
        separate = channels_written(task, tags)
        bands = tags.bands or (None,) * len(tags.channels)
        outputs = [
            Output(out / f"{base}{tag}{ext}", "channel", i, bands=(bands[i],))
            for i, tag in enumerate(tags.channels)
            if separate
        ]
        if tags.whole is not None:
            outputs.append(Output(out / f"{base}{tags.whole}{ext}", "whole", bands=bands))
        outputs += [
            Output(
                out / f"{base}{tag}{ext}",
                "group",
                group=group,
                bands=tuple(bands[i] for i in group),
            )
            for tag, group in tags.groups
        ]
    if task.out_file:
        single = single_output(outputs)
        if single is None:
            count = sum(o.kind != "whole" for o in outputs)
            raise ValueError(
                f"the result is {count} images, and -o names one file: give a folder instead"
            )
        return [replace(single, path=Path(task.out_file))]
    if task.figure:
        outputs.append(Output(out / f"{base}{tags.raw}{frames}{_GRID_TAIL}", "grid"))
    return outputs


def output_stems(paths: list[Path]) -> list[str]:
    """The stems used in output names for files that share one output folder.

    Stems that clash (ignoring case) get the file's extension appended; names
    that still clash are numbered ``-2``, ``-3`` ... in the order of the files'
    full paths (resolved, compared ignoring case), so the same files get the
    same names whatever order they are given in.

    Examples
    --------
    >>> output_stems([Path("a/photo.png"), Path("a/photo.webp"), Path("a/cat.png")])
    ['photo-png', 'photo-webp', 'cat']
    """
    counts: dict[str, int] = defaultdict(int)
    for p in paths:
        counts[p.stem.casefold()] += 1
    stems = [
        f"{p.stem}-{p.suffix.lstrip('.')}" if counts[p.stem.casefold()] > 1 and p.suffix else p.stem
        for p in paths
    ]
    sharing: dict[str, list[int]] = defaultdict(list)
    for i, stem in enumerate(stems):
        sharing[stem.casefold()].append(i)
    result = list(stems)
    for indices in sharing.values():
        if len(indices) > 1:  # resolved only here: following links costs a call per component
            indices.sort(key=lambda i: path_order(paths[i]))
            for n, i in enumerate(indices[1:], start=2):
                result[i] = f"{stems[i]}-{n}"
    return result


@lru_cache(maxsize=8)
def _output_tail(op_names: tuple[str, ...]) -> re.Pattern:
    """The end of an output name after its stem: ``_<op>-<tag>.<fmt>`` or the grid's."""
    ops = "|".join(map(re.escape, op_names))
    extensions = "|".join(re.escape(f.extension) for f in FORMATS.values())
    grid = re.escape(_GRID_TAIL)
    return re.compile(rf"_(?:{ops})(?:-.+\.(?:{extensions})|{grid})", re.I)


_NUMBERED = re.compile(r"(.+)-[1-9][0-9]*")


def earlier_outputs(names: list[str], op_names: Iterable[str]) -> set[str]:
    """The names among `names` (files of one folder) that are outputs of another.

    An output's name is ``<stem>_<op>-<tag>.<fmt>`` or ``<stem>_<op>_grid.png``,
    with ``<op>`` one of `op_names` and ``<fmt>`` a format of :data:`FORMATS`,
    where ``<stem>`` is the output stem (see :func:`output_stems`) of one of
    `names`: its plain stem, ``<stem>-<ext>``, or either numbered ``-2``,
    ``-3`` ... Compared ignoring case.
    """
    tail = _output_tail(tuple(sorted(op_names)))
    stems = set()
    for name in names:
        p = Path(name)
        stems.add(p.stem.casefold())
        if p.suffix:
            stems.add(f"{p.stem}-{p.suffix[1:]}".casefold())
    found = set()
    for name in names:
        for i, char in enumerate(name):
            if char != "_" or i == 0 or not tail.fullmatch(name, i):
                continue
            prefix = name[:i].casefold()
            numbered = _NUMBERED.fullmatch(prefix)
            if prefix in stems or (numbered and numbered.group(1) in stems):
                found.add(name)
                break
    return found
