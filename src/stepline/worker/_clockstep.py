"""Detecting the store's clock stepped forward (an NTP step, an operator), which makes fresh
leases look expired: the claim loop then renews its leases before it claims again."""

from __future__ import annotations

import time
from collections.abc import Callable

CLOCK_STEP = 0.5
"""Seconds the store's clock may run ahead of the monotonic clock between two looks before the
worker takes it for a clock stepped forward (an NTP step, an operator)."""


class ClockStepWatch:
    """Compares the store's clock (``now``) with the monotonic clock at each look."""

    __slots__ = ("_mark", "_now")

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._mark: tuple[float, float] | None = None
        """(store time, monotonic time) at the last look."""

    def step(self) -> float:
        """How far the store's clock moved ahead of the monotonic clock since the last call, if
        more than :data:`CLOCK_STEP` (else 0). A clock stepped back needs nothing: leases then
        look longer, and timers wait at most the step longer (the loop re-reads them)."""
        now, mono = self._now(), time.monotonic()
        last, self._mark = self._mark, (now, mono)
        if last is None:
            return 0.0
        ahead = (now - last[0]) - (mono - last[1])
        return ahead if ahead > CLOCK_STEP else 0.0
