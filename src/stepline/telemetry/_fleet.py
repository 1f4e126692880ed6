"""The fleet's figures, read from the store: instances by status, the backlog and its oldest
instance, what each limit holds back, live workers. The same for every process of a fleet, read
with bounded reads (:class:`~stepline.store.stats.StatsStore`) and kept a few seconds, so that
frequent scrapes of many workers cost the database little.

What a limit holds (:attr:`WorkflowFigures.held`) is read from the limits' use now
(:meth:`~stepline.store.base.Store.limit_states`): the instances due of a workflow whose
concurrency, rate or named limit is full count as held by it, and those set aside behind busy
keys as held by ``key``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import StoreError
from ..store.base import EndedCount, FleetCounts, Store

CAP = 100_000
"""Counts stop here (a gauge at this value means at least this many)."""
TTL = 5.0
"""Seconds a reading is kept before the next scrape reads the store again."""


@dataclass(frozen=True)
class WorkflowFigures:
    """One workflow's figures."""

    workflow: str
    statuses: dict[str, int]
    """Instances by unfinished status."""
    backlog: int
    """Instances due to run that no worker runs: due, plus set aside behind busy keys."""
    oldest_due: float | None
    """When the oldest of those due became due (None: none is due)."""
    held: dict[str, int] = field(default_factory=dict)
    """Due instances held back, by what holds them: ``concurrency``, ``rate``, ``key``, or the
    name of a named limit. An instance held by two limits counts under both."""


@dataclass(frozen=True)
class Fleet:
    """A reading of the whole fleet."""

    at: float
    """When it was read (the store's clock)."""
    workflows: list[WorkflowFigures]
    workers_live: int


def figures(counts: FleetCounts, full: dict[str, bool]) -> WorkflowFigures:
    """A workflow's figures from its counts and which of its limits are full now."""
    held = {limit: counts.due for limit, is_full in full.items() if is_full}
    if counts.set_aside:
        held["key"] = counts.set_aside
    return WorkflowFigures(
        counts.workflow,
        dict(counts.statuses),
        min(counts.due + counts.set_aside, CAP),
        counts.oldest_due,
        held,
    )


async def read_fleet(store: Store, cap: int = CAP) -> Fleet:
    """Read the fleet's figures now: one :meth:`fleet_counts`, one :meth:`limit_states` per
    workflow with limits, one :meth:`list_workers`."""
    now = store.now()
    found: list[WorkflowFigures] = []
    for counts in await store.stats.fleet_counts(now, cap):
        full: dict[str, bool] = {}
        if counts.limits is not None and counts.due:
            for state in await store.flow.limit_states(counts.workflow, None):
                if state.scope == "workflow":
                    if state.concurrency is not None:
                        full["concurrency"] = state.running >= state.concurrency
                    if state.rate_count is not None:
                        full["rate"] = state.next_start is not None
                elif state.scope == "limit":
                    full[state.name] = state.full
        found.append(figures(counts, full))
    workers = await store.workers.list_workers()
    return Fleet(now, found, sum(1 for w in workers if w.live(now)))


class FleetReadings:
    """The last reading, read again when it is older than ``ttl`` seconds (one read at a time:
    concurrent callers wait for the same one)."""

    def __init__(self, store: Store, ttl: float = TTL, cap: int = CAP) -> None:
        self.store = store
        self.ttl = ttl
        self.cap = cap
        self.last: Fleet | None = None
        self.store_up = True
        """Whether the last read succeeded (a failed one keeps the previous reading)."""
        self._read_at = -1e18
        self._lock = asyncio.Lock()

    async def get(self) -> Fleet | None:
        """The reading, refreshed if stale; None if the store was never read successfully."""
        async with self._lock:
            if time.monotonic() - self._read_at >= self.ttl:
                try:
                    self.last = await read_fleet(self.store, self.cap)
                    self.store_up = True
                except StoreError:
                    self.store_up = False
                self._read_at = time.monotonic()
        return self.last


BUCKET = 60.0
BUCKETS = 60
"""The activity chart: the last hour, a bucket a minute."""
BUCKET_CAP = 10_000
"""Ended instances counted per bucket at most."""


@dataclass(frozen=True)
class Activity:
    """What the dashboard's chart shows: instances ended per minute over the last hour, by
    status, and the fleet's figures now."""

    since: float
    bucket: float
    ended: list[EndedCount]
    fleet: Fleet

    def to_json(self) -> dict[str, Any]:
        """``{"now", "since", "bucket", "bucket_cap", "ended": [{"start", "complete",
        "errored", "terminated"}, ...], "backlog", "held", "workers_live", "workflows":
        [{"name", "statuses", "backlog", "oldest_due", "held"}, ...]}``; ``ended`` has one
        entry per bucket, oldest first."""
        starts = [self.since + n * self.bucket for n in range(BUCKETS)]
        rows = {start: {"start": start, **dict.fromkeys(_ENDED, 0)} for start in starts}
        for count in self.ended:
            row = rows.get(count.start)
            if row is not None and count.status in _ENDED:
                row[count.status] = count.count
        workflows = self.fleet.workflows
        return {
            "now": self.fleet.at,
            "since": self.since,
            "bucket": self.bucket,
            "bucket_cap": BUCKET_CAP,
            "ended": list(rows.values()),
            "backlog": sum(w.backlog for w in workflows),
            "held": sum(max(w.held.values(), default=0) for w in workflows),
            "workers_live": self.fleet.workers_live,
            "workflows": [
                {
                    "name": w.workflow,
                    "statuses": w.statuses,
                    "backlog": w.backlog,
                    "oldest_due": w.oldest_due,
                    "held": w.held,
                }
                for w in workflows
            ],
        }


_ENDED = ("complete", "errored", "terminated")


async def read_activity(store: Store) -> Activity:
    """The last hour's ends (whole minutes, the current one last) and the fleet now."""
    fleet = await read_fleet(store)
    since = (fleet.at // BUCKET + 1) * BUCKET - BUCKETS * BUCKET
    ended = await store.stats.ended_counts(since, BUCKET, BUCKETS, BUCKET_CAP)
    return Activity(since, BUCKET, ended, fleet)


class ActivityReadings:
    """The last :func:`read_activity`, read again when older than ``ttl`` seconds."""

    def __init__(self, store: Store, ttl: float = TTL) -> None:
        self.store = store
        self.ttl = ttl
        self._last: Activity | None = None
        self._read_at = -1e18
        self._lock = asyncio.Lock()

    async def get(self) -> Activity:
        async with self._lock:
            if self._last is None or time.monotonic() - self._read_at >= self.ttl:
                self._last = await read_activity(self.store)
                self._read_at = time.monotonic()
            return self._last
