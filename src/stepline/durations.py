"""Durations as users write them: ``timedelta``, seconds, or strings like ``"5 minutes"``."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from ._shown import shown

Duration = timedelta | int | float | str

_UNITS: dict[str, float] = {
    "millisecond": 0.001,
    "second": 1.0,
    "minute": 60.0,
    "hour": 3600.0,
    "day": 86400.0,
    "week": 604800.0,
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s+([a-z]+?)s?\s*$")


def parse_duration(value: object, *, what: str = "duration") -> float:
    """Return ``value`` as a number of seconds (>= 0).

    Accepts a :class:`datetime.timedelta`, a number of seconds, or a string ``"N unit"`` /
    ``"N units"`` with unit one of millisecond, second, minute, hour, day, week. Anything else
    raises :class:`ValueError` quoting the input.
    """
    if isinstance(value, bool):
        raise ValueError(
            f"invalid {what} {shown(value)}: use seconds, a timedelta or e.g. '5 minutes'"
        )
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:  # an int too large for a float
            seconds = math.inf
    elif isinstance(value, str):
        match = _PATTERN.match(value.lower())
        if match is None or match.group(2) not in _UNITS:
            raise ValueError(
                f"invalid {what} {shown(value)}: expected 'N unit' with unit one of "
                "millisecond, second, minute, hour, day, week (e.g. '10 seconds')"
            )
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise ValueError(
            f"invalid {what} {shown(value)}: use seconds, a timedelta or e.g. '5 minutes'"
        )
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise ValueError(f"invalid {what} {shown(value)}: must be a finite, non-negative duration")
    return seconds


def format_duration(seconds: float) -> str:
    """Format seconds the way wrangler does: ``"0 seconds"``, ``"1 minute"``, ``"2.5 hours"``."""
    if seconds < 1:
        millis = round(seconds * 1000)
        return f"{millis} millisecond{'' if millis == 1 else 's'}" if seconds > 0 else "0 seconds"
    for unit, size in (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            value = seconds / size
            text = f"{value:.1f}".rstrip("0").rstrip(".")
            return f"{text} {unit}" + ("" if text == "1" else "s")
    text = f"{seconds:.1f}".rstrip("0").rstrip(".")
    return f"{text} second" + ("" if text == "1" else "s")
