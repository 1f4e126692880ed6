"""The store contract's fleet-wide figures (:class:`~stepline.store.stats.StatsStore`) on
SQLite: a base of :class:`~stepline.store.sqlite.SqliteStore`.

Every count is a ``LIMIT`` over one index range, so that it stops at ``cap`` entries: by status
``instances_status`` (workflow, status); what is due ``instances_workflow_ready`` (workflow,
ready_at), whose first entry is also the earliest due time; what is set aside
``instances_key_parked``; what ended ``instances_ended``.
"""

from __future__ import annotations

import sqlite3

from ..._json import loads
from ..stats import UNFINISHED_STATUSES, EndedCount, FleetCounts, StatsStore, check_cap
from .db import Database

_WORKFLOWS = "SELECT name, limits FROM workflows ORDER BY name"
_BY_STATUS = (
    "SELECT count(*) FROM (SELECT 1 FROM instances WHERE workflow = ? AND status = ? LIMIT ?)"
)
_DUE = (
    "SELECT count(*) FROM (SELECT 1 FROM instances"
    " WHERE workflow = ? AND ready_at IS NOT NULL AND ready_at <= ? LIMIT ?)"
)
_EARLIEST = (
    "SELECT ready_at FROM instances WHERE workflow = ? AND ready_at IS NOT NULL"
    " ORDER BY ready_at LIMIT 1"
)
_SET_ASIDE = (
    "SELECT count(*) FROM (SELECT 1 FROM instances"
    " WHERE workflow = ? AND held_ready_at IS NOT NULL LIMIT ?)"
)
_ENDED = (
    "SELECT status, count(*) FROM (SELECT status FROM instances"
    " WHERE ended_at IS NOT NULL AND ended_at >= ? AND ended_at < ? LIMIT ?)"
    " GROUP BY status ORDER BY status"
)


def fleet_counts(c: sqlite3.Connection, now: float, cap: int) -> list[FleetCounts]:
    found: list[FleetCounts] = []
    for name, limits in c.execute(_WORKFLOWS).fetchall():
        statuses = {
            status: c.execute(_BY_STATUS, (name, status, cap)).fetchone()[0]
            for status in UNFINISHED_STATUSES
        }
        due = c.execute(_DUE, (name, now, cap)).fetchone()[0]
        earliest = c.execute(_EARLIEST, (name,)).fetchone()
        oldest = earliest[0] if earliest is not None and earliest[0] <= now else None
        set_aside = c.execute(_SET_ASIDE, (name, cap)).fetchone()[0]
        found.append(FleetCounts(name, statuses, due, set_aside, oldest, loads(limits)))
    return found


def ended_counts(
    c: sqlite3.Connection, since: float, bucket: float, buckets: int, cap: int
) -> list[EndedCount]:
    found: list[EndedCount] = []
    for n in range(buckets):
        start = since + n * bucket
        for status, count in c.execute(_ENDED, (start, start + bucket, cap)).fetchall():
            found.append(EndedCount(start, status, count))
    return found


class SqliteStats(StatsStore):
    """The fleet-wide figures on SQLite (``Store.stats``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def fleet_counts(self, now: float, cap: int) -> list[FleetCounts]:
        check_cap(cap)
        counts: list[FleetCounts] = await self._db.read_with(lambda c: fleet_counts(c, now, cap))
        return counts

    async def ended_counts(
        self, since: float, bucket: float, buckets: int, cap: int
    ) -> list[EndedCount]:
        check_cap(cap)
        counts: list[EndedCount] = await self._db.read_with(
            lambda c: ended_counts(c, since, bucket, buckets, cap)
        )
        return counts
