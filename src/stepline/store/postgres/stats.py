"""The store contract's fleet-wide figures (:class:`~stepline.store.stats.StatsStore`) on
PostgreSQL: a base of :class:`~stepline.store.postgres.PostgresStore`.

Two round trips for :meth:`fleet_counts` (the registered workflows, then one statement per
workflow, pipelined) and one for :meth:`ended_counts` (a statement per bucket, pipelined). Every
count is a ``LIMIT`` over one index range: by status ``instances_status`` (workflow, status);
what is due ``instances_workflow_ready`` (workflow, priority, ready_at), read a priority at a
time (the priorities in use found by a loose index scan, as the claim finds them), the first
entry of each giving the earliest due time; what is set aside ``instances_key_parked``; what
ended ``instances_ended``.
"""

from __future__ import annotations

import functools

from ..._json import loads
from ..stats import UNFINISHED_STATUSES, EndedCount, FleetCounts, StatsStore, check_cap
from .db import Database
from .sql import render

_BY_STATUS = ",\n".join(
    "(SELECT count(*) FROM (SELECT 1 FROM {s}.instances"
    f" WHERE workflow = %(w)s AND status = '{status}' LIMIT %(cap)s) c)"
    for status in UNFINISHED_STATUSES
)

_TEMPLATES = {
    "workflows": "SELECT name, limits FROM {s}.workflows ORDER BY name",
    "fleet": """
        WITH RECURSIVE prio(p) AS (
            (SELECT priority FROM {s}.instances WHERE workflow = %(w)s AND ready_at IS NOT NULL
             ORDER BY priority LIMIT 1)
            UNION ALL
            SELECT (SELECT i.priority FROM {s}.instances i
                    WHERE i.workflow = %(w)s AND i.ready_at IS NOT NULL AND i.priority > prio.p
                    ORDER BY i.priority LIMIT 1)
            FROM prio WHERE prio.p IS NOT NULL
        ), due AS (
            SELECT (SELECT count(*) FROM (SELECT 1 FROM {s}.instances i
                        WHERE i.workflow = %(w)s AND i.priority = prio.p
                        AND i.ready_at IS NOT NULL AND i.ready_at <= %(now)s LIMIT %(cap)s) c) AS n,
                   (SELECT i.ready_at FROM {s}.instances i
                        WHERE i.workflow = %(w)s AND i.priority = prio.p AND i.ready_at IS NOT NULL
                        ORDER BY i.ready_at LIMIT 1) AS first
            FROM prio WHERE prio.p IS NOT NULL
        )
        SELECT """
    + _BY_STATUS
    + """,
            (SELECT LEAST(COALESCE(sum(n), 0), %(cap)s)::bigint FROM due),
            (SELECT min(first) FROM due WHERE first <= %(now)s),
            (SELECT count(*) FROM (SELECT 1 FROM {s}.instances
                WHERE workflow = %(w)s AND held_ready_at IS NOT NULL LIMIT %(cap)s) c)
    """,
    "ended": """
        SELECT status, count(*) FROM (SELECT status FROM {s}.instances
            WHERE ended_at IS NOT NULL AND ended_at >= %(start)s AND ended_at < %(end)s
            LIMIT %(cap)s) c
        GROUP BY status ORDER BY status
    """,
}


@functools.cache
def _statements(schema: str) -> dict[str, str]:
    return render(_TEMPLATES, schema)


class PostgresStats(StatsStore):
    """The fleet-wide figures on PostgreSQL (``Store.stats``)."""

    def __init__(self, db: Database, schema: str) -> None:
        self._db = db
        self.schema = schema

    async def fleet_counts(self, now: float, cap: int) -> list[FleetCounts]:
        check_cap(cap)
        sql = _statements(self.schema)
        workflows = await self._db.read("reading the workflows", sql["workflows"])
        if not workflows:
            return []
        queries = [(sql["fleet"], {"w": name, "now": now, "cap": cap}) for name, _ in workflows]
        rows = await self._db.read_many("counting instances", queries)
        found: list[FleetCounts] = []
        n = len(UNFINISHED_STATUSES)
        for (name, limits), ((*counts, due, oldest, set_aside),) in zip(
            workflows, rows, strict=True
        ):
            statuses = dict(zip(UNFINISHED_STATUSES, counts[:n], strict=True))
            found.append(FleetCounts(name, statuses, due, set_aside, oldest, loads(limits)))
        return found

    async def ended_counts(
        self, since: float, bucket: float, buckets: int, cap: int
    ) -> list[EndedCount]:
        check_cap(cap)
        if buckets < 1:
            return []
        statement = _statements(self.schema)["ended"]
        starts = [since + n * bucket for n in range(buckets)]
        queries = [(statement, {"start": s, "end": s + bucket, "cap": cap}) for s in starts]
        rows = await self._db.read_many("counting ended instances", queries)
        return [
            EndedCount(start, status, count)
            for start, found in zip(starts, rows, strict=True)
            for status, count in found
        ]
