"""Clocks. The engine reads time only through one, so tests can drive it."""

from __future__ import annotations

import time


class SystemClock:
    """Wall-clock time (seconds since the epoch): ``Engine.clock`` when the engine was given no
    clock. The store then keeps real time itself (on PostgreSQL, the server's clock); a clock
    given to the engine, this one included, is followed as it is."""

    def __call__(self) -> float:
        return time.time()


class ManualClock:
    """A clock that moves only when told to: for tests of retries, sleeps and timeouts.

    >>> clock = ManualClock(1_000.0)
    >>> clock.advance(30); clock()
    1030.0
    """

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else float(start)

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a ManualClock only moves forward")
        self._now += seconds

    def set(self, now: float) -> None:
        self._now = float(now)
