"""Times given by people and programs to the schedule operations (``trigger --at``, ``backfill
--from/--to``, their HTTP bodies): ISO 8601 text or seconds since the epoch."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

from ..._shown import shown

EARLIEST = 0.0
LATEST = datetime(9999, 12, 31, 23, 59, tzinfo=UTC).timestamp()
"""Times outside these bounds cannot name a tick (no cron tick is computed past year 9999)."""

_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)$")


def parse_moment(value: object, what: str) -> float:
    """``value`` as seconds since the epoch: a number, a string of one, or an ISO 8601 time
    (``2024-01-31T09:00Z``, ``2024-01-31 10:00+01:00``; without an offset it is UTC).
    Anything else, or a time before 1970 or after 9999, raises ``ValueError`` naming
    ``what``."""
    seconds: float
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(_invalid(value, what))
    if isinstance(value, str):
        text = value.strip()
        if _NUMBER.match(text):
            seconds = float(text)
        else:
            try:
                moment = datetime.fromisoformat(text)
            except ValueError:
                raise ValueError(_invalid(value, what)) from None
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            seconds = moment.timestamp()
    elif isinstance(value, int) and abs(value) > LATEST:
        seconds = math.inf  # float() of a huge integer would overflow
    else:
        seconds = float(value)
    if not (math.isfinite(seconds) and EARLIEST <= seconds <= LATEST):
        raise ValueError(
            f"{what} {shown(value)} is out of range: use a time from 1970 to 9999 "
            "(ISO 8601, or seconds since the epoch)"
        )
    return seconds


def _invalid(value: object, what: str) -> str:
    return (
        f"invalid {what} {shown(value)}: use an ISO 8601 time such as 2024-01-31T09:00Z (UTC when "
        "it has no offset) or seconds since the epoch such as 1706691600"
    )
