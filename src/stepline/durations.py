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
UNIT_NAMES = ", ".join(_UNITS)
# A sign is read so that "-5 days" is refused for being negative, not for its form.
_PATTERN = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)(?:\s+([a-z]+?)s?)?\s*$")
_FORMS = f"'N unit' (units: {UNIT_NAMES}), e.g. '10 seconds'"
NOT_A_DURATION = f"is not a duration: expected a number of seconds or {_FORMS}"
_NOT_A_DURATION_PYTHON = f"is not a duration: expected a number of seconds, a timedelta or {_FORMS}"


def parse_duration(
    value: object,
    *,
    what: str = "duration",
    allow_zero: bool = False,
    at_least: float | None = None,
) -> float:
    """Return ``value`` as a number of seconds: the one parser of every duration stepline takes
    (Python arguments, CLI options, ``stepline.toml``).

    Accepts a :class:`datetime.timedelta`, a number of seconds, or a string: a number of seconds
    (``"30"``, ``"0.5"``) or ``"N unit"`` / ``"N units"`` with unit one of millisecond, second,
    minute, hour, day, week. A duration must be positive; ``allow_zero`` also accepts zero
    (where waiting for nothing means something: a sleep, a retry delay, an age), ``at_least``
    sets a larger minimum. Anything else raises :class:`ValueError` saying what is wrong:
    ``invalid <what> <value>: it must be positive``.
    """
    seconds = check_duration(value, allow_zero=allow_zero, at_least=at_least)
    if isinstance(seconds, str):
        raise ValueError(f"invalid {what} {shown(value)}: it {seconds}")
    return seconds


def check_duration(
    value: object, *, allow_zero: bool = False, at_least: float | None = None
) -> float | str:
    """:func:`parse_duration` for a message that quotes a larger value the duration is part of:
    the seconds, or what is wrong (``"must be positive"``)."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an int too large for a float
            seconds = math.inf
    elif isinstance(value, str):
        match = _PATTERN.match(value.lower())
        if match is None or (match.group(2) is not None and match.group(2) not in _UNITS):
            return NOT_A_DURATION
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "second"]
    else:
        return _NOT_A_DURATION_PYTHON
    if math.isnan(seconds) or math.isinf(seconds):
        return "must be a finite duration"
    if at_least is not None and seconds < at_least:
        return f"must be at least {at_least:g} seconds"
    if seconds < 0 or (seconds == 0 and not allow_zero):
        return "must not be negative" if allow_zero else "must be positive"
    return seconds


_WORKER_RULES: dict[str, tuple[bool, float | None]] = {
    "lease": (False, 0.1),  # renewed every third of it: shorter leases expire under load
    "heartbeat": (False, 0.05),
    "poll_interval": (False, None),  # zero would be a busy loop
    "grace_period": (True, None),  # zero: running steps are cancelled at once
    "retention": (True, None),  # zero: an instance is deleted as soon as it ends
}


def parse_worker_duration(setting: str, value: object, *, what: str) -> float:
    """A worker's ``setting`` (``lease``, ``heartbeat``, ``poll_interval``, ``grace_period`` or
    ``retention``) in seconds, by the same rules whether it comes from ``Engine(...)``, the
    ``[worker]`` table of ``stepline.toml`` or a ``stepline worker`` option (named ``what``)."""
    allow_zero, at_least = _WORKER_RULES[setting]
    return parse_duration(value, what=what, allow_zero=allow_zero, at_least=at_least)


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
