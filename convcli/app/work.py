"""How much memory an operation's whole-image run takes: the estimate that sends an image to strips.

An image is read in strips where this would not fit ``--memory``
(:func:`convcli.app.process.strips_reason`), and a strip's height is the
budget over the work of one output row. The figures are measured peaks of
whole runs, less the peak of the same run on a 64x64 file
(``benchmarks/bench_work_memory.py``): the work is

- the decoded samples, and a float32 copy of each channel the layer reads;
- for each result channel (a map), bytes per output pixel: the float32
  result and its levels, 8-bit or 16-bit;
- bytes per output pixel once: the mapping's temporaries, one map at a time;
- about 1 MiB of engine buffers.
"""

from __future__ import annotations

from ..io.formats import load
from ..units import size_text

WORK_FIXED = 1 << 20
"""The engines' buffers, whatever the image's size."""


def whole_work_bytes(
    op,
    height: int,
    width: int,
    channels: int,
    sample_bytes: int,
    *,
    float_channels: int,
    maps: int,
    per_map: tuple[float, float],
    per_result: tuple[float, float] = (0.0, 0.0),
) -> int:
    """About the peak memory of `op`'s whole-image run on an image of this size.

    Parameters
    ----------
    op : Operation
        Its :meth:`output_size` gives the result's size.
    height, width, channels : int
        The image's size and its channels (alpha included).
    sample_bytes : int
        Bytes of one sample as decoded: 1 for 8-bit, 2 for 16-bit, 4 for float32.
    float_channels : int
        Channels of the float32 copy the layer reads.
    maps : int
        Result channels.
    per_map, per_result : (float, float)
        Bytes per output pixel, for each map and once, where the levels written are
        8-bit (an 8-bit image) and 16-bit (any other).
    """
    out_height, out_width = op.output_size(height, width)
    wide = sample_bytes > 1
    decoded = height * width * (channels * sample_bytes + 4 * float_channels)
    results = out_height * out_width * (maps * per_map[wide] + per_result[wide])
    return int(WORK_FIXED + decoded + results)


def check_whole_work(
    task,
    width: int,
    height: int,
    channels: int,
    sample_bytes: int,
    *,
    what: str = "it",
    frame: int = 0,
) -> None:
    """Refuse, before anything is decoded, an image read whole whose work is over ``--memory``.

    Only a ``--memory`` given is held so (``task.memory_given``); the default
    budget depends on the memory free at the moment, and whether a file is
    refused depends on the file and the options alone. An image that can be read
    in strips never comes here over its budget.

    `what` names the image in the message ("it", or "each frame"); `frame` is
    the one frame of the file read (a TIFF's first alone is read in strips).

    Raises
    ------
    ValueError
        One line: the work, the budget, and why the image is read whole.
    """
    if not task.memory_given or task.memory is None:
        return
    try:
        work = task.op.work_bytes(height, width, channels, sample_bytes)
    except ValueError:  # too small for the operation: its own check says so
        return
    if work - WORK_FIXED > task.memory:  # the engines' buffers are the process's, not the image's
        if what != "it":
            why = "frames are never read in strips"
        elif task.op.computed_whole:
            why = "a gradient is computed whole"
        else:
            why = load("tiff pages").whole_read_reason(task.source, frame)
        subject = "its work" if what == "it" else f"the work of {what}"
        raise ValueError(
            f"{subject} would take about {size_text(work)}, over --memory "
            f"{size_text(task.memory)}, and {what} is read whole ({why}): raise "
            "--memory"
        )
