"""What a file's outputs are written as, with one home for each rule.

The rules that every path (a whole image, a frame stack, strips, a cluster's
bands) follows for an output: its format (:func:`output_format`), which outputs are written
(:func:`outputs_to_write`, and a Dask worker's say in it:
:func:`checking_outputs`), the depth of its levels (:func:`output_depth`),
where a Zarr store goes (:func:`store_place`, :func:`save_store`) and what
the manifest records of it (:func:`output_record`). A ``task`` is a
:class:`convcli.app.plan.Task` (not imported: planning asks :func:`output_format`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Protocol

import numpy as np

from ..choices import RAW_VALUES
from ..engines.process_state import library_section
from ..io import storage
from ..io.carried import NOTHING, Carried, kept_record, kept_text
from ..io.exif import IMAGE_DESCRIPTION, dpi_or_exifs, exif_beyond_text, exif_text
from ..io.formats import is_store_name, load
from ..io.image_files import save_levels, save_npy, written_by_convcli
from ..io.ownership import refusal
from ..io.png_text import TIFF_TAGS, keywords, tiff_tags
from ..io.safeio import check_kept, path_key, published_identity
from ..levels.mapping import LevelScale, Mapping, level_type, scale_fields, top_level
from .names import FORMATS, Output, file_format, ome_tiff_name

KEPT_FORMAT_FALLBACK = "png"
"""What an image changed (pad, pool) of a format convcli cannot write is written as."""


def output_format(op, source: str, fmt: str | None) -> str:
    """The format of `op`'s outputs of the input `source`: `fmt` (``--format``) where given.

    Else an image changed (:attr:`Operation.writes_image`: pad, pool) keeps its
    input's format, as every peer tool does (a JPEG stays a JPEG, a TIFF a TIFF,
    a Zarr store a store), and one in a format convcli does not write (not in
    :data:`convcli.io.formats.FORMATS`), or standard input, becomes PNG
    (:func:`run_hints` says so); maps (conv, grad) are PNG.

    >>> from convcli.app.ops import ConvOp, PoolOp
    >>> from convcli.kernels import get_kernel
    >>> output_format(PoolOp(), "a/photo.JPEG", None), output_format(PoolOp(), "a.bmp", None)
    ('jpg', 'png')
    >>> edges = ConvOp([get_kernel("edge")])
    >>> output_format(edges, "photo.jpg", None), output_format(PoolOp(), "a.jpg", "tiff")
    ('png', 'tiff')
    """
    if fmt is not None:
        return fmt
    if not getattr(op, "writes_image", False):
        return "png"
    kept = file_format(source)
    return kept if kept is not None and not FORMATS[kept].raw else KEPT_FORMAT_FALLBACK


def output_depth(depth: int, fmt: str) -> int:
    """The bits per level of an output in format `fmt` of a result of `depth` bits.

    A 16-bit picture written as JPEG (8 bits at most) has 8-bit levels, and
    its manifest record says so (``top`` 255).

    >>> output_depth(16, "jpg"), output_depth(16, "png"), output_depth(8, "tiff")
    (8, 16, 8)
    """
    return min(depth, FORMATS[fmt].max_depth)


_OUTPUTS_CHECK: ContextVar[Callable | None] = ContextVar("convcli_outputs_check", default=None)


@contextmanager
def checking_outputs(check: Callable[[list[Output], list[Output]], list[Output]]) -> Iterator[None]:
    """Inside the block (in this thread), ``check(outputs, todo)`` decides the outputs to write.

    It is given a file's planned outputs and those :func:`outputs_to_write`
    found to write, before anything is written, and returns the outputs to
    write: a Dask worker records them, and writes again the outputs that a
    lost run of the same task wrote (:mod:`convcli.engines.dask`).
    """
    token = _OUTPUTS_CHECK.set(check)
    try:
        yield
    finally:
        _OUTPUTS_CHECK.reset(token)


def outputs_to_write(task, outputs: list[Output], exists=None) -> list[Output]:
    """The outputs to write: all with ``--overwrite``, else those that do not exist.

    A ValueError if one of them would replace an input file of the run. An existing
    output on this disk is kept as done only where convcli wrote it; another program's
    file, a folder or a link to nothing at its name raises as writing it would
    (:func:`~convcli.io.safeio.check_kept`).
    `exists(output)` says whether an output exists (default: on this disk, where a
    symbolic link at its name, even one that names nothing, is one, as
    :func:`~convcli.io.safeio.write_atomic` finds it). Inside :func:`checking_outputs`,
    its check has the last word.
    """
    on_disk = not (task.staged or task.existing is not None or storage.is_url(task.out_dir))
    exists = exists or (lambda out: os.path.lexists(out.path))
    since = getattr(task, "again_since", None)  # a task run again (Task.again)
    if task.overwrite and since is None:
        todo = outputs
    else:
        todo = [o for o in outputs if not exists(o) or _changed_since(o.path, since)]
        for out in outputs if on_disk else ():  # kept as done only where convcli wrote it
            if out not in todo:
                check_kept(out.path, written_by_convcli, folder=is_store_name(str(out.path)))
    check = _OUTPUTS_CHECK.get()
    if check is not None:
        todo = check(outputs, todo)
    protected = {path_key(p) for p in task.protected}
    for out in todo:
        if path_key(out.path) in protected:
            raise ValueError(
                f"output {out.path.name} would replace an input file of this run; choose another -o"
            )
    if task.out_file and not storage.is_url(task.out_file):
        _check_named_outputs(task, todo, exists)
    return todo


def _changed_since(path, since: float | None) -> bool:
    """Whether the file at `path` was changed at `since` or later (50 ms of leeway: the
    file system's clock ticks coarser than ``time.time()``); False for None."""
    if since is None:
        return False
    try:
        return os.lstat(path).st_mtime >= since - 0.05
    except OSError:
        return False


def _check_named_outputs(task, todo: list[Output], exists) -> None:
    """A FileExistsError, before anything is written, for an existing output of ``-o FILE``
    that convcli may not replace: the file named, unless ``--overwrite``, and each frame's
    file made from its name, whatever, unless convcli's mark says it wrote it."""
    ours = partial(written_by_convcli, marked=True)
    for out in todo:
        if exists(out):
            refused = refusal(out.path, ours, task.out_file, task.replace_any, marked=True)
            if refused is not None:
                raise refused


def save_store(path: Path, image: np.ndarray, task, carried: Carried = NOTHING) -> bool:
    """Write levels or float32 values as a TIFF or Zarr store, through the strips path's row
    writer: the same file whole or in strips."""
    return load("row writer").save_rows(
        path,
        image,
        fmt=task.fmt,
        overwrite=task.overwrite,
        **store_place(task, path),
        carried=carried,
    )


def save_output(out: Output, array: np.ndarray, task, carried: Carried = NOTHING) -> bool:
    """Write `array` (:func:`output_array`) as output `out`'s file, whole; whether it was
    written (not kept). The one writer of a whole image's and a frame's files: the raw
    values as npy, values and the levels of a TIFF or Zarr store through the row writer
    (the same file as in strips), other levels through Pillow."""
    if out.kind != "raw" and (FORMATS[task.fmt].by_rows or array.dtype == np.float32):
        return save_store(out.path, array, task, carried)
    with library_section():  # the image libraries, one thread at a time
        if out.kind == "raw":
            return save_npy(out.path, array, overwrite=task.overwrite)
        return save_levels(out.path, array, fmt=task.fmt, overwrite=task.overwrite, carried=carried)


def store_place(task, path) -> dict:
    """Where the Zarr output `path` is written: ``store_url`` and ``storage_options`` for
    :func:`convcli.io.row_writers.open_row_writer` where it goes to object storage, else none."""
    if not task.stores_at:
        return {}
    return {
        "store_url": storage.join(task.stores_at, Path(path).name),
        "storage_options": task.storage_options,
    }


def mappings_for(task, pic) -> list:
    """Each result channel's mapping to levels (:meth:`Operation.mappings`), where a float
    file's values stay floats: a result in the input's scale (mapping ``clip``: pad, pool,
    ``--normalize auto``'s for a kernel that keeps levels) of a file of float samples is
    written as its values (``none``) in a format that holds floats (TIFF, Zarr), never
    clipped to levels; an explicit ``--normalize clip`` clips. The input's levels of a
    GeoTIFF with GDAL's nodata value keep it, in a format that holds it: their missing level
    (:func:`kept_missing`), the level nearest it where the levels cannot hold it
    (:meth:`Carried.for_samples`), alpha's aside (a mask of its own, never missing)."""
    mappings = task.op.mappings(pic)
    chosen = getattr(task.op, "normalize", "auto") != "auto"  # --normalize given
    if pic.floats and FORMATS[task.fmt].floats and not chosen:
        mappings = [Mapping(RAW_VALUES, m.white) if m.method == "clip" else m for m in mappings]
    depth = output_depth(pic.depth, task.fmt)
    nodata = pic.carried.held_by(task.fmt).for_samples(level_type(depth)).nodata
    if nodata is None:
        return mappings
    names = getattr(task.op, "channel_names", list)(pic.channels)  # each kernel's, in turn
    return [
        m._replace(missing=nodata) if m.method == "clip" and names[i % len(names)] != "A" else m
        for i, m in enumerate(mappings)
    ]


def kept_missing(levels: np.ndarray, values: np.ndarray, mapping: Mapping) -> np.ndarray:
    """`levels` of `values` (same shape) with their missing values (NaN) at the mapping's
    missing level (GDAL's nodata value), and no other value there: a value whose level it
    would be goes to the next level on its side (above, for the nodata value itself, unless
    that is the top level)."""
    missing = mapping.missing
    if missing is None:
        return levels
    lost = np.isnan(values)
    clash = levels == missing
    clash &= ~lost
    if clash.any():
        top = np.iinfo(levels.dtype).max
        above = values[clash] * np.float64(top / mapping.white) >= missing
        levels[clash] = np.where(above & (missing < top) | (missing == 0), missing + 1, missing - 1)
    levels[lost] = missing
    return levels


RAW_SCALE = LevelScale(RAW_VALUES, 1.0, 0.0)
"""The scale of a channel written as its values (``--normalize none``)."""


def channels_of(out: Output) -> tuple[int, ...]:
    """The result channels an output holds as channels: a channel's, a colour image's
    group; none for the raw values, the whole result and a figure.

    >>> red, raw = Output(Path("a-R.png"), "channel", 0), Output(Path("a.npy"), "raw")
    >>> channels_of(red), channels_of(raw)
    ((0,), ())
    """
    if out.kind == "channel":
        return (out.index,)
    if out.kind == "group":
        return tuple(out.group)
    return ()


def mapped_channels(todo: list[Output], mappings: list[Mapping]) -> list[int]:
    """The result channels that the outputs `todo` write as levels (not as values), in order."""
    return sorted({i for out in todo for i in channels_of(out) if mappings[i].method != RAW_VALUES})


def written_as_values(out: Output, mappings: list[Mapping]) -> bool:
    """Whether `out` is an image written as its float values, not as levels: a channel, a
    colour image's group or the whole result whose every channel is (``--normalize none``,
    or a float file's result in its scale, into a format that holds floats)."""
    channels = range(len(mappings)) if out.kind == "whole" else channels_of(out)
    return bool(channels) and all(mappings[i].method == RAW_VALUES for i in channels)


class ResultLevels(Protocol):
    """How one path maps a result's values to levels: a whole image's mapping at once, a
    stack's or the strips' streamed mappings (:class:`convcli.levels.stats.StreamedMapping`).

    `result` is what the path holds of the result at a time (the whole, a frame, a strip's
    rows), (h, w, C'); ``mappings`` are the result channels' (:func:`mappings_for`).
    """

    mappings: list[Mapping]

    def channel_levels(self, index: int, result: np.ndarray) -> np.ndarray:
        """The (h, w) levels of channel `index` of `result`."""

    def whole_levels(self, result: np.ndarray) -> np.ndarray:
        """The (h, w, C') levels of `result` in the input's scale (``clip``)."""

    def channel_scale(self, index: int) -> LevelScale:
        """The scale of channel `index`'s levels (once they are known)."""

    def whole_scale(self) -> LevelScale:
        """The scale of the whole result's levels (once they are known)."""


def output_array(out: Output, result: np.ndarray, levels: ResultLevels) -> np.ndarray:
    """What output `out` holds of `result` (the whole, a frame, a strip's rows, (h, w, C')):
    every value for the raw values; for a channel, its (h, w) levels; a colour image's
    (h, w, c) levels; the whole result's levels; each its values instead where it is
    :func:`written_as_values`. The one rule for every path (not for a figure, drawn from
    the picture too)."""
    if out.kind == "raw":
        return result
    mappings = levels.mappings
    if out.kind == "whole":
        if written_as_values(out, mappings):
            return result
        whole = levels.whole_levels(result)
        for i, mapping in enumerate(mappings):  # in place, channel by channel
            kept_missing(whole[:, :, i], result[:, :, i], mapping)
        return whole
    planes = [
        result[:, :, i]
        if mappings[i].method == RAW_VALUES
        else kept_missing(levels.channel_levels(i, result), result[:, :, i], mappings[i])
        for i in channels_of(out)
    ]
    return planes[0] if out.kind == "channel" else np.stack(planes, axis=2)


def output_scales(out: Output, levels: ResultLevels) -> list[LevelScale]:
    """The scales of `out`'s levels, for the manifest: none for the raw values and a figure,
    the input's for the whole result, each channel's for the others; :data:`RAW_SCALE`
    where the values are written (:func:`written_as_values`)."""
    if out.kind == "whole":
        return [RAW_SCALE if written_as_values(out, levels.mappings) else levels.whole_scale()]
    return [
        RAW_SCALE if levels.mappings[i].method == RAW_VALUES else levels.channel_scale(i)
        for i in channels_of(out)
    ]


def carried_for(op, carried: Carried, out, scales: list[LevelScale]) -> Carried:
    """What output `out` keeps of what its input carries (profile, resolution, EXIF,
    georeference, physical size).

    The one rule for every path: images keep the resolution, divided by the
    operation's stride (``--stride``, or the pooling window's), and the
    georeference and physical pixel size, moved to the output's grid
    (:meth:`Operation.output_grid`); those whose
    every channel holds the input's levels (mapping ``clip``: pad, pool, a
    kernel that keeps levels) keep the colour profile and EXIF too, the profile
    only where it is for the pixels written (:meth:`Carried.for_pixels`: no RGB
    profile on one channel written grey). A channel of one input band's values
    keeps GDAL's scale and offset of that band (:attr:`Output.bands`). Maps of
    other values keep none of these, raw values and figures nothing. An image named
    ``.ome.tif`` or ``.ome.tiff`` is an OME-TIFF, as is one of an OME-TIFF.
    """
    if out.kind in ("raw", "grid"):
        return NOTHING
    kept = _on_output(op, carried, bool(scales) and all(s.mapping == "clip" for s in scales))
    if not all(s.mapping in ("clip", RAW_VALUES) for s in scales):
        kept = kept.without_nodata()  # a map's levels: no missing level (kept_missing)
    if _input_values(op, [s.mapping for s in scales]):
        kept = kept.with_band_values_of(out.bands)  # each band's own, on its sample
    else:
        kept = kept.without_band_values()
    kept = kept.for_pixels(grey=out.kind == "channel")
    return _as_named(kept, out.path)


def _as_named(kept: Carried, path) -> Carried:
    """`kept` in a file named `path`: an OME-TIFF where it is named ``.ome.tif(f)``."""
    return replace(kept, ome=True) if path and ome_tiff_name(path) else kept


def _input_values(op, methods: list[str]) -> bool:
    """Whether channels of these mapping `methods` hold the input's values: pad, pool, a
    kernel that keeps levels, with no bias or combination; not a gradient, an edge map."""
    if not methods or not all(m in ("clip", RAW_VALUES) for m in methods) or op.name == "grad":
        return False
    kernels = getattr(op, "kernels", None)
    if kernels is None:
        return True
    if op.combine is not None or op.bias != 0:
        return False
    sums = [(float(k.weights.sum()), float(np.abs(k.weights).sum())) for k in kernels]
    return all(abs(total - 1) <= 1e-6 * size for total, size in sums)


def _on_output(op, carried: Carried, in_its_colours: bool) -> Carried:
    """`carried` on `op`'s output grid; its colour profile and EXIF only `in_its_colours`."""
    if carried == NOTHING:
        return NOTHING
    kept = carried.on_grid(*op.output_grid())
    return kept if in_its_colours else kept.without_colour()


def kept_by(task, carried: Carried, out, scales: list[LevelScale]) -> Carried:
    """What the file of `out` holds of what its input carries: :func:`carried_for`, as its
    format holds it (the manifest's "kept")."""
    return carried_for(task.op, carried, out, scales).held_by(task.fmt)


def carried_note(task, pic) -> tuple[str, tuple[str, ...]]:
    """What the outputs of `pic` keep of what it carries (:func:`carried_for`: the colour
    profile where one of its result channels keeps the input's levels), said with ``-v``
    ("" for nothing), and a line for each thing they lose for their format
    (:func:`not_held`): hints, said once a run however many files lose it."""
    alpha = _alpha_lost(task, pic)
    if pic.carried == NOTHING:
        return "", alpha
    mappings = mappings_for(task, pic)
    colours = any(m.method == "clip" for m in mappings)  # images of its colours: pad, pool, ...
    kept = _on_output(task.op, pic.carried, colours)
    kept = kept.for_pixels(grey=len(pic.channels) - ("A" in pic.channels) == 1)
    if _input_values(task.op, [m.method for m in mappings]):
        kept = kept.with_band_values_of(task.op.tags(pic.channels).bands)
    else:
        kept = kept.without_band_values()
    kept = _as_named(kept, task.out_file)
    held = kept.held_by(task.fmt)
    kept_said = f"kept: {kept_text(held)}" if kept_text(held) else ""
    # A PNG's raw profile text: said where EXIF is kept; maps of other values keep none, unsaid.
    unkept = tuple(f"{what} not kept: convcli writes none" for what in pic.carried.unkept * colours)
    clamped = _nodata_clamped(held, mappings, output_depth(pic.depth, task.fmt))
    return kept_said, alpha + not_held(kept, task.fmt) + clamped + unkept


def _samples_type(method: str | None, depth: int) -> type:
    """The samples an output of a result channel mapped by `method` is written in: float32
    for its values (:data:`RAW_VALUES`), else `depth`-bit levels."""
    return np.float32 if method == RAW_VALUES else level_type(depth)


def _nodata_clamped(kept: Carried, mappings: list, depth: int) -> tuple[str, ...]:
    """The line for a nodata value that outputs of the input's values or levels cannot hold,
    written as the nearest they can (:meth:`Carried.for_samples`): a Float64 file's
    -1.797e308 as float32's -3.4e38, -9999 as level 0."""
    lines = []
    for method in sorted({m.method for m in mappings} & {RAW_VALUES, "clip"}):
        clamped = kept.for_samples(_samples_type(method, depth)).nodata
        if clamped is None or clamped == kept.nodata or np.isnan([clamped, kept.nodata]).all():
            continue
        if method == RAW_VALUES:
            nearest, gdal = "float32's largest of its sign", "Float32 writes it"
        else:
            nearest = f"the {'lowest' if np.isnan(kept.nodata) else 'nearest'} {depth}-bit level"
            gdal = f"{'Byte' if depth == 8 else 'UInt16'} clamps it"
        said = f"nodata {kept.nodata:g} written as {clamped:g}, {nearest}"
        lines.append(f"{said} (as gdal_translate -ot {gdal})")
    return tuple(lines)


def _alpha_lost(task, pic) -> tuple[str, ...]:
    """The line for the alpha of an image written whole (pad, pool) in a format that drops
    it (JPEG: the colours, weighted by alpha, are written alone), naming the formats that
    keep it; none where ``--separate`` writes alpha as a file of its own."""
    if not pic.has_alpha or not task.op.writes_image or task.separate or FORMATS[task.fmt].alpha:
        return ()
    others = _listed([name for name, f in FORMATS.items() if f.alpha])
    return (f"alpha not kept: {task.fmt} outputs hold none ({others} outputs do)",)


# What a file carries that a format may not hold: its name in words, its field of Carried.
_HELD_OR_NOT = (
    ("colour profile", "icc_profile"),
    ("PNG gamma, chromaticities and sRGB", "png_colour"),
    ("resolution", "dpi"),
    ("EXIF", "exif"),
    ("XMP", "xmp"),
    ("IPTC", "iptc"),
    ("georeference", "geo"),
    ("physical pixel size", "physical"),
    ("PNG text", "png_text"),
    ("comment", "comments"),
)


def not_held(kept: Carried, fmt: str) -> tuple[str, ...]:
    """A line for each thing of `kept` (what an output keeps of its input) that outputs of
    format `fmt` cannot hold, naming the formats that do: ``georeference not kept: png
    outputs hold none (tiff and zarr outputs do)``. The same line for every file, so that
    the run says it once."""
    held = kept.held_by(fmt)
    lines = []
    for name, attr in _HELD_OR_NOT:
        value = getattr(kept, attr)
        if value is None or getattr(held, attr) is not None:
            continue
        # XMP with the resolution it is sized to: its fields decide whether a JPEG holds it.
        dpi = {"dpi": dpi_or_exifs(kept.dpi, kept.exif)} if attr == "xmp" else {}
        alone = replace(NOTHING, **{attr: value, **dpi})
        others = [f for f in FORMATS if getattr(alone.held_by(f), attr) is not None]
        do = f" ({_listed(others)} outputs do)" if others else ""
        if attr == "geo":
            name = value.what
        if attr == "exif" and fmt == "tiff":  # its text tags are the TIFF's own
            if _description_of(value) and not _description_of(held.tiff_text):
                lines.append("ImageDescription not kept: an OME-TIFF's holds its OME-XML")
            if not exif_beyond_text(value):
                continue
            name = "EXIF other than its text tags"
        if attr == "png_text":  # a TIFF holds three keywords' text in tags of its own
            mapped = tiff_tags(value)
            in_tags = {code for code, text in held.tiff_text or () if mapped.get(code) == text}
            lost = [word for word in keywords(value) if TIFF_TAGS.get(word) not in in_tags]
            if fmt == "tiff" and kept.ome_tiff and IMAGE_DESCRIPTION in mapped:
                lost.remove("Description")
                said = "an OME-TIFF's ImageDescription holds its OME-XML"
                lines.append(f"PNG text (Description) not kept: {said}")
            if not lost:
                continue
            name = f"{name} ({', '.join(lost)})"
        if attr in ("exif", "xmp", "iptc", "comments") and fmt == "jpg":  # over a segment
            name = f"{name} over 64 KB"
        if attr == "dpi" and fmt == "jpg":  # beyond the JFIF header's whole numbers
            dpi = "x".join(f"{d:.6g}" for d in value)
            lines.append(f"{dpi} dpi not kept: a jpg's JFIF header holds 1 to 65535 dpi{do}")
            continue
        lines.append(f"{name} not kept: {fmt} outputs hold none{do}")
    return tuple(lines)


def _description_of(exif_or_text) -> bool:
    """Whether EXIF bytes, or (tag, text) pairs of them, give an ImageDescription."""
    pairs = exif_text(exif_or_text) if isinstance(exif_or_text, bytes) else exif_or_text
    return IMAGE_DESCRIPTION in dict(pairs or ())


def _listed(words: list[str]) -> str:
    """`words` in a sentence: "tiff", "tiff and zarr", "png, jpg and tiff"."""
    return " and ".join(filter(None, [", ".join(words[:-1]), words[-1]]))


def run_hints(task, channels: tuple[str, ...]) -> tuple[str, ...]:
    """What a run says once (not for each file): the operation's tips for an input with
    these `channels`, and the inputs of a format convcli cannot write that keep their
    format (:func:`output_format`) written as PNG. What a format cannot hold is said once
    too (:func:`carried_note`)."""
    hints = getattr(task.op, "hints", None)
    said = tuple(hints(channels)) if hints is not None else ()
    suffix = Path(task.source).suffix.lower()
    if (
        task.kept_format
        and getattr(task.op, "writes_image", False)
        and suffix
        and file_format(task.source) != task.fmt
    ):
        said += (
            f"{suffix} inputs are written as {task.fmt}: convcli does not write "
            f"{suffix} files (--format names another)",
        )
    return said


class OutputRecord(dict):
    """An output's manifest record (a dict), and the file's identity when this process put
    it in place (:func:`convcli.io.safeio.file_identity`), for the manifest's check: not
    one of its keys, so it is never written, and records compare by what they say."""

    identity: tuple[int, ...] | None = None


def output_record(
    out, scales: list[LevelScale], depth: int, kept: Carried = NOTHING
) -> OutputRecord:
    """What the manifest says of one output file besides the run: its name and levels.

    For an image, "mapping", "scale" and "offset" with ``level = scale * x +
    offset`` (``scale * |x| + offset`` where "absolute"), before rounding and
    clipping to 0.."top"; a colour image has lists, one entry per channel; and
    "kept", what it holds of what its input carries (:func:`~convcli.io.carried.kept_record`).
    Its
    ``identity``: the file as this process put it in place, if it did (:class:`OutputRecord`).
    """
    record = OutputRecord(output=out.path.name, kind=out.kind)
    record.identity = published_identity(out.path)
    if kept != NOTHING:  # its nodata value as its samples hold it
        method = scales[0].mapping if scales else None
        record["kept"] = kept_record(kept.for_samples(_samples_type(method, depth)))
    if not scales:
        return record
    each = [scale_fields(s) for s in scales]
    fields = {key: [one[key] for one in each] for key in each[0]}
    if len(scales) == 1 and out.kind != "group":
        fields = {key: values[0] for key, values in fields.items()}
    record.update(fields)
    if scales[0].mapping != RAW_VALUES:
        record["top"] = top_level(depth)
    return record
