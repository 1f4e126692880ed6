"""Retention on PostgreSQL: the finished instances whose ``delete_at`` has come (or, past the
workers' one retention, that ended long enough ago) deleted a batch at a time, with their steps,
events, updates and streams, in one statement (:meth:`Store.purge_expired`)."""

from __future__ import annotations

from typing import Any

from .db import Database
from .pools import Conn
from .sql import render

_TEMPLATES = {
    "purge_expired": """
        WITH expired AS (
            SELECT pk FROM {s}.instances WHERE delete_at <= %(now)s
            ORDER BY delete_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED
        ), undated AS (
            SELECT pk FROM {s}.instances WHERE %(cutoff)s::float8 IS NOT NULL
                AND ended_at < %(cutoff)s::float8 AND delete_at IS NULL
                AND status IN ('complete', 'errored', 'terminated')
            ORDER BY ended_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED
        ), chosen AS (
            SELECT pk FROM (SELECT pk FROM expired UNION ALL SELECT pk FROM undated) AS u
            LIMIT %(limit)s
        ), d AS (
            DELETE FROM {s}.instances WHERE pk IN (SELECT pk FROM chosen)
            RETURNING pk, workflow, status
        ), ds AS (
            DELETE FROM {s}.steps WHERE instance_pk IN (SELECT pk FROM d)
        ), de AS (
            DELETE FROM {s}.events WHERE instance_pk IN (SELECT pk FROM d)
        ), du AS (
            DELETE FROM {s}.updates WHERE instance_pk IN (SELECT pk FROM d)
        ), dst AS (
            DELETE FROM {s}.streams WHERE instance_pk IN (SELECT pk FROM d)
        ), dsi AS (
            DELETE FROM {s}.stream_items WHERE instance_pk IN (SELECT pk FROM d)
        )
        SELECT workflow, status, count(*) FROM d GROUP BY workflow, status
    """,
}


class Expiry:
    """One store's deletes of expired instances."""

    def __init__(self, db: Database, schema: str) -> None:
        self._db = db
        self._sql = render(_TEMPLATES, schema)["purge_expired"]

    async def purge(
        self, now: float, limit: int, default_cutoff: float | None
    ) -> dict[tuple[str, str], int]:
        """:meth:`~stepline.store.base.Store.purge_expired`."""
        params = {"now": now, "limit": limit, "cutoff": default_cutoff}

        async def body(conn: Conn) -> list[Any]:
            cur = await conn.execute(self._sql, params)
            return await cur.fetchall()

        rows = await self._db.transaction("deleting expired instances", body)
        return {(workflow, status): int(n) for workflow, status, n in rows}
