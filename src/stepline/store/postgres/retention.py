"""Deletes on PostgreSQL (``Store.retention``): instances deleted by id, by age, and as their
retention says (the finished instances whose ``delete_at`` has come, or, past the workers' one
retention, that ended long enough ago, a batch at a time, in one statement), with their steps,
events, updates and streams."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...errors import IllegalStateError
from ...records import FINISHED_STATUSES
from ..retention import DeletedInstance, RetentionStore
from .db import Database
from .instances import RUNNING
from .notes import Notes
from .parking import ParkingStatements, freed_params
from .pools import Conn
from .sql import json_rows, render

# Every delete of instances (the CTE ``d``, returning their pks) takes their rows in each
# dependent table with it, in the same statement.
_DEPENDENTS = "".join(
    f", d_{table} AS (DELETE FROM {{s}}.{table} WHERE instance_pk IN (SELECT pk FROM d))"
    for table in ("steps", "events", "updates", "streams", "stream_items")
)

_TEMPLATES = {
    # A delete locks its instance rows first, in a statement of its own: the deleting statement
    # then reads their steps and events in a snapshot taken after every writer holding those
    # rows committed (a step write or an event sent while it waited would otherwise be missed
    # by its older snapshot and left behind).
    "lock_instances_by_id": """
        SELECT id, status, key FROM {s}.instances WHERE workflow = %s AND id = ANY(%s::text[])
        ORDER BY pk FOR UPDATE
    """,
    "lock_finished": """
        SELECT pk FROM {s}.instances WHERE status = ANY(%(statuses)s::text[])
            AND ended_at < %(older_than)s
            AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
        ORDER BY pk FOR UPDATE
    """,
    "delete_instances": """
        WITH d AS (
            DELETE FROM {s}.instances WHERE workflow = %s AND id = ANY(%s::text[]) RETURNING pk
        ){dependents}
        SELECT count(*) FROM d
    """,
    "purge_instances": """
        WITH d AS (
            DELETE FROM {s}.instances WHERE status = ANY(%(statuses)s::text[])
                AND ended_at < %(older_than)s
                AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
            RETURNING pk, workflow, id, status
        ){dependents}
        SELECT workflow, id, status FROM d
    """,
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
            RETURNING pk, workflow, id, status
        ){dependents}
        SELECT workflow, id, status FROM d
    """,
}
_TEMPLATES = {name: sql.replace("{dependents}", _DEPENDENTS) for name, sql in _TEMPLATES.items()}


class PostgresRetention(RetentionStore):
    """One store's deletes; each an exactly-once transaction locking the rows it deletes."""

    def __init__(self, db: Database, schema: str, notes: Notes, now: Callable[[], float]) -> None:
        self._db = db
        self._q = render(_TEMPLATES, schema)
        self._notes = notes
        self._parking = ParkingStatements.for_schema(schema)
        self._now = now

    async def delete_instances(
        self, workflow: str, instance_ids: Sequence[str], *, finished_only: bool = False
    ) -> int:
        ids, now = list(instance_ids), self._now()

        async def body(conn: Conn) -> int:
            return await self.delete_in(conn, workflow, ids, finished_only, now)

        return await self._db.transaction(f"deleting instances of {workflow!r}", body)

    async def delete_in(
        self, conn: Conn, workflow: str, ids: list[str], finished_only: bool, now: float
    ) -> int:
        """:meth:`delete_instances` in the caller's transaction; its refusal comes before it
        writes."""
        q = self._q
        cur = await conn.execute(q["lock_instances_by_id"], (workflow, ids))
        # The rows stay locked until the delete commits: no status changes meanwhile.
        locked = await cur.fetchall()
        statuses = {row[0]: row[1] for row in locked}
        if finished_only:
            for instance_id in ids:
                status = statuses.get(instance_id)
                if status is not None and status not in FINISHED_STATUSES:
                    raise IllegalStateError(workflow, instance_id, status, "delete")
        cur = await conn.execute(q["delete_instances"], (workflow, ids))
        row = await cur.fetchone()
        # A running instance deleted frees its slots: its key's next in line may run.
        stopped = [
            {"pk": None, "workflow": workflow, "key": key}
            for _id, status, key in locked
            if status in RUNNING
        ]
        if stopped:
            back = {"stopped": json_rows(stopped), **freed_params(now, self._notes)}
            await conn.execute(self._parking.freed_stopped, back)
        return int(row[0]) if row else 0

    async def purge_instances(
        self, workflow: str | None, statuses: Sequence[str], older_than: float
    ) -> list[DeletedInstance]:
        params = {"statuses": list(statuses), "older_than": older_than, "workflow": workflow}
        q = self._q

        async def body(conn: Conn) -> list[Any]:
            await conn.execute(q["lock_finished"], params)
            cur = await conn.execute(q["purge_instances"], params)
            return await cur.fetchall()

        rows = await self._db.transaction("purging finished instances", body)
        return [DeletedInstance(*row) for row in rows]

    async def purge_expired(
        self, now: float, limit: int, default_cutoff: float | None = None
    ) -> list[DeletedInstance]:
        params = {"now": now, "limit": limit, "cutoff": default_cutoff}

        async def body(conn: Conn) -> list[Any]:
            cur = await conn.execute(self._q["purge_expired"], params)
            return await cur.fetchall()

        rows = await self._db.transaction("deleting expired instances", body)
        return [DeletedInstance(*row) for row in rows]
