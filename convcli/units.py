"""Sizes in words for messages (no numpy, no click)."""

from __future__ import annotations

_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB")


def size_text(nbytes: float) -> str:
    """`nbytes` in the largest binary unit that keeps it at 1 or more, to three digits.

    Examples
    --------
    >>> size_text(512), size_text(3 << 20), size_text(1536 << 20), size_text(0.4 * 2**30)
    ('512 bytes', '3.00 MiB', '1.50 GiB', '410 MiB')
    """
    value, unit = float(nbytes), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{int(value)} bytes"
    digits = 2 if value < 10 else 1 if value < 100 else 0
    return f"{value:.{digits}f} {_UNITS[unit]}"
