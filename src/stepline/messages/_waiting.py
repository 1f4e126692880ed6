"""Waiting on one instance for something a worker writes (an update's reply, a stream item, a
routed query's answer): the store's change watch, and a poll beside it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

from ..durations import Duration, parse_duration
from ..store.base import Store
from ..store.types import ChangeWatch


def deadline_of(timeout: Duration | None, what: str) -> float | None:
    """The monotonic time a wait of ``timeout`` ends (None: no limit)."""
    if timeout is None:
        return None
    return time.monotonic() + parse_duration(timeout, what=what, allow_zero=True)


async def changes(
    store: Store,
    workflow: str,
    instance_id: str,
    deadline: float | None,
    *,
    watch: ChangeWatch | None = None,
) -> AsyncIterator[None]:
    """Yield at once, then each time the instance may have changed, until ``deadline``.

    Watching begins before the first yield, so a change that lands while the caller reads is
    not missed. ``watch``: one the caller began before what it waits for could happen (an
    update's reply, watched from before its send); then the first yield comes after the first
    wait, not at once. A store that notifies other processes' changes (PostgreSQL) is polled
    only as a fallback (every second); otherwise quickly at first, then backing off (5 ms to
    250 ms).
    """
    notified = store.pushes_notifications
    interval, longest = (1.0, 1.0) if notified else (0.005, 0.25)
    given = watch is not None
    with (
        contextlib.nullcontext(watch)
        if watch is not None
        else store.signals.watch_changes(workflow, instance_id)
    ) as watching:
        while True:
            if given:
                given = False
            else:
                yield
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return
            await watching.wait(interval if remaining is None else min(interval, remaining))
            interval = min(interval * 2, longest)
