"""Result maps to image levels strip by strip, never holding a map whole.

An image larger than memory is processed in row strips (full width,
consecutive row ranges, top to bottom). :class:`StreamedMapping` maps each
strip of a result map to the levels :func:`convcli.levels.mapping.map_levels` gives
those rows of the whole map, bit for bit, with the same :class:`LevelScale`.
The mappings that scale by statistics of the whole map take them first, in
passes over the strips:

- ``clip``: none (its scale is that of the input);
- ``abs``, ``minmax``, ``offset``: one (the smallest and largest values, and
  whether there are NaN or infinite ones);
- ``robust``: one where the largest magnitudes that decide its percentile
  (and at least 65536 of them) fit in `max_kept`; otherwise an exact radix
  selection on the float32 bit patterns of |x|: a histogram of their high 19
  bits, which ends it where every pattern in the one or two bins that hold the
  ranks numpy interpolates between has its low 12 bits zero (whole numbers
  below 2**12, as a conv of 8-bit samples by an integer kernel gives), else a
  second pass counts the low 12 bits of the patterns in those bins.

The statistics of a pass may also be taken in parts, rows in any order and
anywhere (the bands of a Dask cluster): :meth:`StreamedMapping.part` gives an
empty :class:`MappingPart`, parts are merged, and :meth:`StreamedMapping.take`
ends the pass with the merged part. Every statistic is a smallest or largest
value, a count, a histogram or the multiset of the largest magnitudes, so the
result is that of the strips in order, whatever the split.
"""

from __future__ import annotations

import copy
import numbers
from collections.abc import Iterator

import numpy as np

from ..layers._engine import native
from .mapping import (
    RULES,
    LevelScale,
    _check_mapping_arguments,
    _cleaned,
    _level_arithmetic,
    _level_scale,
    _rounded_levels,
    _scale_record,
    top_level,
)
from .percentiles import (
    ROBUST_PERCENTILE,
    _interpolate,
    _linear_rank,
    _margin_left_out,
    _percentile_of_largest,
    _top_of_magnitudes,
    _top_or_largest,
)

KEPT_MAGNITUDES = 1 << 20
"""How many magnitudes (4 MiB of float32) ``robust`` keeps between strips to need one pass."""

_LOW_BITS = 12  # of a float32 pattern: those the second pass counts
_HIGH_BINS = 1 << (31 - _LOW_BITS)  # the high bits of finite non-negative patterns (sign 0)
_LOW_BINS = 1 << _LOW_BITS
_SELECTION_VALUES = 1 << 16  # values counted at a time by the numpy engine's selection


class StreamedMapping:
    """:func:`convcli.levels.mapping.map_levels` of one (H, W) float32 map, from its row strips.

    Parameters
    ----------
    method : {"abs", "minmax", "clip", "offset", "robust"}
        As for :func:`~convcli.levels.mapping.map_levels`.
    white : float
        Full intensity in the input's scale (used by ``clip``).
    depth : {8, 16}
        Bits per sample of the levels.
    height, width : int
        The shape of the whole map.
    margin : int
        For ``robust``: rows and columns on every side left out of the percentile.
    max_kept : int
        The most magnitudes ``robust`` keeps between strips; where the
        percentile needs more, it takes a second pass instead.

    Attributes
    ----------
    passes : int
        Passes of statistics over the strips before :meth:`scale` (0, 1 or 2); a
        ``robust`` mapping's 2 may become 1 at the end of the first pass.

    Notes
    -----
    Give every strip of each pass, top to bottom, to :meth:`add`; then
    :meth:`levels` maps any rows. Memory is that of a strip, plus at most
    ``2 * max_kept`` float32 magnitudes (or 4.5 MB of histograms) for ``robust``.

    Examples
    --------
    >>> x = np.arange(12, dtype=np.float32).reshape(4, 3) - 4
    >>> plan = StreamedMapping("minmax", white=255, depth=8, height=4, width=3)
    >>> for pass_index in pass_indices(plan):
    ...     for row0 in (0, 2):
    ...         plan.add(pass_index, row0, x[row0:row0 + 2])
    >>> plan.scale()
    LevelScale(mapping='minmax', scale=23.18181800842285, offset=92.7272720336914, absolute=False)
    >>> plan.levels(x[2:])
    array([[139, 162, 185],
           [209, 232, 255]], dtype=uint8)
    """

    def __init__(
        self,
        method: str,
        *,
        white: float,
        depth: int,
        height: int,
        width: int,
        margin: int = 0,
        max_kept: int = KEPT_MAGNITUDES,
    ):
        _check_mapping_arguments(method, white, depth)
        for name, value, least in (
            ("height", height, 1),
            ("width", width, 1),
            ("margin", margin, 0),
            ("max_kept", max_kept, 0),
        ):
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < least:
                raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")
        self.method, self.white, self.depth = method, white, depth
        self.height, self.width = int(height), int(width)
        self._real, self._big = _level_arithmetic(depth)
        self._range = _ValueRange()
        self._robust = (
            _RobustTop(self.height, self.width, int(margin), int(max_kept))
            if RULES[method].percentile
            else None
        )
        self._pass = self._next_row = 0
        self._scale = None

    @property
    def passes(self) -> int:
        """Passes of statistics before :meth:`scale`; none for the white's scale."""
        if not RULES[self.method].from_values:
            return 0
        return self._robust.passes if self._robust else 1

    def add(self, pass_index: int, row0: int, values: np.ndarray) -> None:
        """Take the statistics of one strip: rows ``row0 .. row0 + h`` of the map.

        Parameters
        ----------
        pass_index : int
            The pass under way (0 .. ``passes - 1``), each in turn.
        row0 : int
            The strip's first row: each pass gives the rows in order, each once.
        values : (h, W) float32 ndarray
            The strip, left unchanged.
        """
        _check_strip(values, self.width)
        self._check_pass(pass_index)
        if row0 != self._next_row or row0 + values.shape[0] > self.height:
            raise ValueError(
                f"row0 must be {self._next_row} (strips in order, within "
                f"{self.height} rows) for {values.shape[0]} rows, got {row0!r}"
            )
        if pass_index == 0:
            self._range.add(values)
        if self._robust is not None:
            self._robust.add(pass_index, row0, values)
        self._next_row += values.shape[0]
        if self._next_row == self.height:
            if self._robust is not None:
                self._robust.end_pass(pass_index)
            self._pass, self._next_row = self._pass + 1, 0

    def part(self, pass_index: int) -> MappingPart:
        """An empty :class:`MappingPart` of the pass `pass_index` (the pass under way).

        The parts of a pass, each given any rows, are merged and handed to
        :meth:`take`; they may be made, filled and merged in other processes.
        """
        self._check_pass(pass_index)
        robust = self._robust.empty_copy(pass_index) if self._robust is not None else None
        return MappingPart(
            pass_index, self.width, _ValueRange() if pass_index == 0 else None, robust
        )

    def take(self, part: MappingPart) -> None:
        """End the pass under way with `part`, the merge of parts that hold every row once."""
        self._check_pass(part.pass_index)
        if self._next_row or part.rows != self.height:
            raise ValueError(
                f"the parts of a pass must hold the map's {self.height} rows once "
                f"and alone; they hold {part.rows}"
            )
        if part.range is not None:
            self._range.merge(part.range)
        if self._robust is not None:
            self._robust.merge(part.robust)
            self._robust.end_pass(part.pass_index)
        self._pass += 1

    def _check_pass(self, pass_index: int) -> None:
        if pass_index != self._pass or self._pass >= self.passes:
            raise ValueError(
                f"pass_index must be {self._pass} of {self.passes} passes, got {pass_index!r}"
            )

    def scale(self) -> LevelScale:
        """The :class:`LevelScale` of :func:`~convcli.levels.mapping.map_levels` on the map."""
        return _scale_record(self.method, *self._scale_and_offset()[:2])

    def levels(self, values: np.ndarray) -> np.ndarray:
        """The levels of some rows of the map, as those rows of ``map_levels(map)[0]``.

        Parameters
        ----------
        values : (h, W) float32 ndarray
            Consecutive rows of the map (any of them, after the passes), left unchanged.

        Returns
        -------
        (h, W) ndarray of uint8 or uint16
        """
        _check_strip(values, self.width)
        scale, offset, lo = self._scale_and_offset()
        low, high = float(values.min()), float(values.max())
        if not max(-low, high) <= self._big:  # NaN, inf or huge values: as map_levels cleans them
            values = _cleaned(values, self._big)
        return _rounded_levels(
            values.astype(self._real, copy=False),
            self.method,
            scale,
            offset,
            lo,
            None,
            depth=self.depth,
        )

    def _scale_and_offset(self):
        """``(scale, offset, lo)`` of :func:`~convcli.levels.mapping._level_scale`, passes done."""
        if self._pass < self.passes:
            raise RuntimeError(
                f"the statistics need {self.passes} passes over the strips; "
                f"{self._pass} done, row {self._next_row} reached"
            )
        if self._scale is None:
            lo, hi = self._range.bounds(self._big)
            robust = self._robust.top() if self._robust is not None else None
            scale, offset = _level_scale(
                self.method,
                lo,
                hi,
                robust,
                top=top_level(self.depth),
                white=self.white,
                big=self._big,
                real=self._real,
            )
            self._scale = scale, offset, lo
        return self._scale


def pass_indices(plan) -> Iterator[int]:
    """0, 1, ... while under ``plan.passes``, read again after each pass: a ``robust``
    mapping's second pass may turn out not to be needed (`plan`: anything with ``passes``).

    >>> list(pass_indices(StreamedMapping("minmax", white=255, depth=8, height=2, width=2)))
    [0]
    """
    pass_index = 0
    while pass_index < plan.passes:
        yield pass_index
        pass_index += 1


class MappingPart:
    """The statistics of one pass over some rows of a map, mergeable with other parts.

    Made by :meth:`StreamedMapping.part`; picklable. Rows are given with
    :meth:`add` in any order; :meth:`merge` adds another part's. The merged
    part of all the rows goes to :meth:`StreamedMapping.take`.

    Attributes
    ----------
    pass_index : int
    rows : int
        The rows given so far, in all the merged parts.
    """

    def __init__(self, pass_index: int, width: int, value_range, robust):
        self.pass_index, self.width, self.rows = pass_index, width, 0
        self.range, self.robust = value_range, robust

    def add(self, row0: int, values: np.ndarray) -> None:
        """Take the statistics of rows ``row0 .. row0 + h`` of the map: (h, W) float32."""
        _check_strip(values, self.width)
        if self.range is not None:
            self.range.add(values)
        if self.robust is not None:
            self.robust.add(self.pass_index, row0, values)
        self.rows += values.shape[0]

    def merge(self, other: MappingPart) -> MappingPart:
        """Add `other`'s statistics (of other rows of the same pass) to this part; this part."""
        if other.pass_index != self.pass_index or other.width != self.width:
            raise ValueError("parts of another pass or another map cannot be merged")
        if self.range is not None:
            self.range.merge(other.range)
        if self.robust is not None:
            self.robust.merge(other.robust)
        self.rows += other.rows
        return self


def _check_strip(values, width: int) -> None:
    """Refuse anything but a (h, `width`) float32 array with h >= 1."""
    if not isinstance(values, np.ndarray) or values.dtype != np.float32:
        got = getattr(values, "dtype", type(values).__name__)
        raise TypeError(f"values must be a float32 ndarray, got {got}")
    if values.ndim != 2 or values.shape[0] < 1 or values.shape[1] != width:
        raise ValueError(
            f"values must be (rows, {width}): rows of the map; got shape {values.shape}"
        )


class _ValueRange:
    """The smallest and largest values of a map, over its strips, as map_levels takes them."""

    def __init__(self):
        self.low, self.high, self.nan = np.inf, -np.inf, False  # low, high: of the non-NaN

    def add(self, values: np.ndarray) -> None:
        low, high = float(values.min()), float(values.max())
        if np.isnan(low) or np.isnan(high):
            self.nan = True
            low = float(np.fmin.reduce(values, axis=None))  # NaN only where all are
            high = float(np.fmax.reduce(values, axis=None))
        if not np.isnan(low):
            self.low, self.high = min(self.low, low), max(self.high, high)

    def merge(self, other: _ValueRange) -> None:
        self.nan = self.nan or other.nan
        self.low, self.high = min(self.low, other.low), max(self.high, other.high)

    def bounds(self, big: float) -> tuple[float, float]:
        """map_levels's ``(lo, hi)``: those of the values as they are or, where some are
        NaN, infinite or beyond +-`big`, of the cleaned values (NaN 0, the rest clipped)."""
        if not self.nan and max(-self.low, self.high) <= big:
            return self.low, self.high
        low, high = (min(self.low, 0.0), max(self.high, 0.0)) if self.nan else (self.low, self.high)
        return min(max(low, -big), big), min(max(high, -big), big)


class _RobustTop:
    """:func:`convcli.levels.percentiles.robust_top` of a map, from its strips: the exact percentile
    of the finite |x| inside the margin, by the largest kept (one pass) or a radix
    selection (one pass where the high bits decide it, else two)."""

    def __init__(self, height: int, width: int, margin: int, max_kept: int):
        left_out = _margin_left_out((height, width), margin)
        self._rows = (left_out, height - left_out)
        self._columns = slice(left_out, width - left_out)
        inside = (height - 2 * left_out) * (width - 2 * left_out)
        below, _ = _linear_rank(inside, ROBUST_PERCENTILE)
        # The ranks interpolated and up, and all of a map under 65536 values
        # (map_levels takes numpy's percentile of those): fewer values never need more.
        self._keep = max(inside - below, min(inside, 1 << 16))
        self._selects = self._keep > max_kept  # by the bit patterns' histograms
        self.passes = 2 if self._selects else 1
        self._count, self._largest = 0, 0.0
        self._kept, self._floor = np.empty(0, np.float32), None
        self._high = np.zeros(_HIGH_BINS, np.int64) if self._selects else None
        # Whether some pattern in a high bin has low bits that are not zero.
        self._mixed = np.zeros(_HIGH_BINS, np.uint8) if self._selects else None
        self._targets: list[tuple[int, int]] = []  # (high bin, rank in it) of each rank
        self._low: dict[int, np.ndarray] = {}  # low-bit histogram of each such bin

    def add(self, pass_index: int, row0: int, values: np.ndarray) -> None:
        if pass_index == 0 and self._selects and native.active():
            start, stop = self._window(row0, values.shape[0])
            if stop <= start:
                return
            window = (start - row0, stop - row0, self._columns.start, self._columns.stop)
            count, largest = native.magnitude_bins(
                values, window, self._high, self._mixed, _LOW_BITS
            )
            self._count += count
            self._largest = max(self._largest, largest)
            return
        if not self._selects:
            magnitudes = self._magnitudes(row0, values)
            self._count += magnitudes.size
            if magnitudes.size:
                self._keep_largest(magnitudes.ravel())
            return
        # A few rows at a time: the temporaries of a wide strip stay small.
        step = max(1, _SELECTION_VALUES // max(1, values.shape[1]))
        for first in range(0, values.shape[0], step):
            magnitudes = self._magnitudes(row0 + first, values[first : first + step])
            if magnitudes.size:
                self._count_bits(pass_index, magnitudes)

    def _count_bits(self, pass_index: int, magnitudes: np.ndarray) -> None:
        """The histograms of the bit patterns of some finite |x| (pass 0: high bits; 1: low)."""
        patterns = magnitudes.view(np.uint32).ravel()
        if pass_index == 1:
            self._count_low_bits(patterns)
            return
        self._count += patterns.size
        self._largest = max(self._largest, float(magnitudes.max()))
        high = patterns >> _LOW_BITS
        lowest = int(high.min())
        counts = np.bincount(high - lowest)  # the bins from the lowest used to the highest
        self._high[lowest : lowest + counts.size] += counts
        self._mixed[high[(patterns & (_LOW_BINS - 1)) != 0]] = 1

    def _window(self, row0: int, rows: int) -> tuple[int, int]:
        """The map rows of a strip's rows ``row0 .. row0 + rows`` inside the margin."""
        return max(self._rows[0], row0), min(self._rows[1], row0 + rows)

    def _magnitudes(self, row0: int, values: np.ndarray) -> np.ndarray:
        """|x| of the finite values of the strip's rows and columns inside the margin."""
        start, stop = self._window(row0, values.shape[0])
        inside = values[max(0, start - row0) : max(0, stop - row0), self._columns]
        if inside.size and np.isfinite(inside.min()) and np.isfinite(inside.max()):
            return np.abs(inside)
        return np.abs(inside[np.isfinite(inside)])

    def _keep_largest(self, magnitudes: np.ndarray) -> None:
        """Keep the `_keep` largest magnitudes so far (up to twice that many, to trim seldom)."""
        if self._floor is not None:  # the kept hold `_keep` values at least this large
            magnitudes = magnitudes[magnitudes > self._floor]
        kept = np.concatenate([self._kept, magnitudes])
        if kept.size > 2 * self._keep:
            kept.partition(kept.size - self._keep)
            kept = kept[kept.size - self._keep :].copy()
            self._floor = kept[0]
        self._kept = kept

    def empty_copy(self, pass_index: int) -> _RobustTop:
        """A copy with nothing counted, for the rows of a part of pass `pass_index`."""
        part = copy.copy(self)
        part._count, part._largest, part._kept, part._floor = 0, 0.0, np.empty(0, np.float32), None
        first = pass_index == 0 and self._selects
        part._high = np.zeros(_HIGH_BINS, np.int64) if first else None
        part._mixed = np.zeros(_HIGH_BINS, np.uint8) if first else None
        part._low = (
            {high_bin: np.zeros(_LOW_BINS, np.int64) for high_bin in self._low}
            if pass_index == 1
            else {}
        )
        part._targets = list(self._targets)
        return part

    def merge(self, other: _RobustTop) -> None:
        """Add the counts of `other` (an :meth:`empty_copy` given other rows) to these."""
        self._count += other._count
        self._largest = max(self._largest, other._largest)
        if other._kept.size:
            self._keep_largest(other._kept)
        if other._high is not None:
            self._high += other._high
            self._mixed |= other._mixed
        for high_bin, counts in other._low.items():
            self._low[high_bin] += counts

    def __getstate__(self) -> dict:
        """Pickled with the histograms' used bins only (a part goes to and from a cluster)."""
        state = dict(self.__dict__)
        if self._high is not None:
            used = np.flatnonzero(self._high)
            state["_high"] = (used, self._high[used])
            state["_mixed"] = np.flatnonzero(self._mixed)
        return state

    def __setstate__(self, state: dict) -> None:
        if state["_high"] is not None:
            used, counts = state["_high"]
            state["_high"] = np.zeros(_HIGH_BINS, np.int64)
            state["_high"][used] = counts
            mixed = np.zeros(_HIGH_BINS, np.uint8)
            mixed[state["_mixed"]] = 1
            state["_mixed"] = mixed
        self.__dict__.update(state)

    def end_pass(self, pass_index: int) -> None:
        """After the high bits: the bin of each rank numpy interpolates between, and whether
        those bins' patterns are all alike (their low bits zero), which ends the selection."""
        if pass_index != 0 or not self._selects:
            return
        if not self._count:  # nothing finite inside the margin: top() needs no more
            self.passes = 1
            return
        below, _ = _linear_rank(self._count, ROBUST_PERCENTILE)
        cumulative = np.cumsum(self._high)
        for rank in (below, min(below + 1, self._count - 1)):
            high_bin = int(np.searchsorted(cumulative, rank, side="right"))
            before_bin = int(cumulative[high_bin] - self._high[high_bin])
            self._targets.append((high_bin, rank - before_bin))
        mixed = {high_bin for high_bin, _ in self._targets if self._mixed[high_bin]}
        self._low = {high_bin: np.zeros(_LOW_BINS, np.int64) for high_bin in mixed}
        if not mixed:
            self.passes = 1

    def _count_low_bits(self, bits: np.ndarray) -> None:
        """Histograms of the low bits of the patterns in each rank's high bin."""
        high = bits >> _LOW_BITS
        for high_bin, counts in self._low.items():
            counts += np.bincount(bits[high == high_bin] & (_LOW_BINS - 1), minlength=_LOW_BINS)

    def top(self) -> float:
        """The robust top, as :func:`convcli.levels.percentiles.robust_top` of the whole map."""
        if self._count == 0:
            return 1.0
        if not self._selects:
            if self._kept.size == self._count:  # all of them: as map_levels
                return _top_of_magnitudes(self._kept, ROBUST_PERCENTILE)
            return _top_or_largest(
                _percentile_of_largest(self._kept, self._count, ROBUST_PERCENTILE), self._kept.max
            )
        patterns = [
            high_bin << _LOW_BITS
            | (
                int(np.searchsorted(np.cumsum(self._low[high_bin]), rank, side="right"))
                if high_bin in self._low
                else 0  # every pattern of the bin has low bits zero
            )
            for high_bin, rank in self._targets
        ]
        lower, upper = np.array(patterns, np.uint32).view(np.float32)
        _, weight = _linear_rank(self._count, ROBUST_PERCENTILE)
        return _top_or_largest(_interpolate(lower, upper, weight), lambda: self._largest)
