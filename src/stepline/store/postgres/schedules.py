"""The PostgreSQL store's cron schedule operations (``Store``'s "cron schedules" section): their
statements and transactions; a tick's instance is created by :class:`.instances.InstanceWrites`
inside the same transaction."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from psycopg import sql

from ...errors import ScheduleExistsError, ScheduleNotFoundError, ScheduleReadOnlyError
from ...records import ScheduleRecord
from .._rows import ScheduleRow, columns, schedule_from_row
from ..base import NewInstance, ScheduleDefinition
from ..schedules import ScheduleStore
from .db import Database
from .instances import InstanceWrites
from .pools import Conn

_DECLARED = ("workflow", "cron", "timezone", "params", "catch_up", "catch_up_limit", "overlap")
_TEMPLATES = {
    "list": "SELECT {cols} FROM {s}.schedules ORDER BY name",
    "of_workflow": "SELECT {cols} FROM {s}.schedules WHERE workflow = %s ORDER BY name",
    "of_workflows": "SELECT {cols} FROM {s}.schedules WHERE workflow = ANY(%s) ORDER BY name",
    "get": "SELECT {cols} FROM {s}.schedules WHERE name = %s",
    "delete_unlisted": (
        "DELETE FROM {s}.schedules WHERE source = 'code' AND workflow = ANY(%s)"
        " AND NOT (name = ANY(%s))"
    ),
    "upsert": (
        "INSERT INTO {s}.schedules (name, workflow, cron, timezone, params, catch_up,"
        " catch_up_limit, overlap, created_at, updated_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (name) DO UPDATE SET "
        + ", ".join(f"{c} = excluded.{c}" for c in _DECLARED)
        + ", updated_at = CASE WHEN "
        + " AND ".join(f"schedules.{c} IS NOT DISTINCT FROM excluded.{c}" for c in _DECLARED)
        + " AND schedules.source = 'code' THEN schedules.updated_at ELSE excluded.updated_at END,"
        " source = 'code'"
    ),
    "insert_api": (
        "INSERT INTO {s}.schedules (name, workflow, cron, timezone, params, catch_up,"
        " catch_up_limit, overlap, created_at, updated_at, source)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 'api')"
        " ON CONFLICT (name) DO NOTHING RETURNING {cols}"
    ),
    "get_for_update": "SELECT {cols} FROM {s}.schedules WHERE name = %s FOR UPDATE",
    "update_api": (
        "UPDATE {s}.schedules SET "
        + ", ".join(f"{c} = %s" for c in _DECLARED)
        + ", updated_at = %s WHERE name = %s AND source = 'api'"
    ),
    "delete_api": "DELETE FROM {s}.schedules WHERE name = %s AND source = 'api'",
    "set_paused": (
        "UPDATE {s}.schedules SET paused = %s, updated_at = %s WHERE name = %s AND paused <> %s"
    ),
    "advance": (
        "UPDATE {s}.schedules SET last_tick = %s, buffered_tick = %s, updated_at = %s,"
        " last_instance = coalesce(%s, last_instance)"
        " WHERE name = %s AND last_tick IS NOT DISTINCT FROM %s"
        " AND buffered_tick IS NOT DISTINCT FROM %s RETURNING workflow"
    ),
}


def _declared(s: ScheduleDefinition) -> tuple[object, ...]:
    return (s.workflow, s.cron, s.timezone, s.params, s.catch_up, s.catch_up_limit, s.overlap)


class ScheduleWrites:
    """The schedule operations on one schema."""

    def __init__(self, db: Database, schema: str, instances: InstanceWrites) -> None:
        self._db = db
        self._instances = instances
        parts = {"s": sql.Identifier(schema), "cols": sql.SQL(columns(ScheduleRow._fields))}
        self._sql = {
            name: sql.SQL(text).format(**parts).as_string() for name, text in _TEMPLATES.items()
        }

    async def sync(
        self, workflows: Sequence[str], schedules: Sequence[ScheduleDefinition], now: float
    ) -> list[ScheduleRecord]:
        if not workflows:
            if schedules:
                raise ValueError("schedules given without their workflows")
            return []
        for s in schedules:
            if s.workflow not in workflows:
                raise ValueError(
                    f"schedule {s.name!r} is of workflow {s.workflow!r}, not one of those synced"
                )
        q = self._sql

        async def body(conn: Conn) -> list[Any]:
            await conn.execute(q["delete_unlisted"], (list(workflows), [s.name for s in schedules]))
            for s in sorted(schedules, key=lambda d: d.name):
                await conn.execute(
                    q["upsert"],
                    (
                        s.name, s.workflow, s.cron, s.timezone, s.params, s.catch_up,
                        s.catch_up_limit, s.overlap, now, now,
                    ),
                )  # fmt: skip
            cur = await conn.execute(q["of_workflows"], (list(workflows),))
            return await cur.fetchall()

        rows = await self._db.transaction("syncing schedules", body, pipelined=False)
        return [r for r in map(schedule_from_row, rows) if r.source == "code"]

    async def create_api(self, s: ScheduleDefinition, now: float) -> ScheduleRecord:
        q = self._sql

        async def body(conn: Conn) -> Any:
            cur = await conn.execute(q["insert_api"], (s.name, *_declared(s), now, now))
            inserted = await cur.fetchone()
            if inserted is None:  # the name is taken (a concurrent create included)
                cur = await conn.execute(q["get"], (s.name,))
                found = await cur.fetchone()
                source = "api" if found is None else schedule_from_row(found).source
                raise ScheduleExistsError(s.name, source)
            return inserted

        row = await self._db.transaction(f"creating schedule {s.name!r}", body, pipelined=False)
        return schedule_from_row(row)

    async def update_api(self, s: ScheduleDefinition, now: float) -> ScheduleRecord:
        q = self._sql

        async def body(conn: Conn) -> list[Any]:
            await self._writable(conn, s.name)
            await conn.execute(q["update_api"], (*_declared(s), now, s.name))
            cur = await conn.execute(q["get"], (s.name,))
            return await cur.fetchall()

        rows = await self._db.transaction(f"updating schedule {s.name!r}", body, pipelined=False)
        return schedule_from_row(rows[0])

    async def delete_api(self, name: str) -> ScheduleRecord:
        q = self._sql

        async def body(conn: Conn) -> ScheduleRecord:
            record = await self._writable(conn, name)
            await conn.execute(q["delete_api"], (name,))
            return record

        return await self._db.transaction(f"deleting schedule {name!r}", body, pipelined=False)

    async def _writable(self, conn: Conn, name: str) -> ScheduleRecord:
        cur = await conn.execute(self._sql["get_for_update"], (name,))
        row = await cur.fetchone()
        if row is None:
            raise ScheduleNotFoundError(name)
        record = schedule_from_row(row)
        if record.source != "api":
            raise ScheduleReadOnlyError(name)
        return record

    async def list(self, workflow: str | None) -> list[ScheduleRecord]:
        if workflow is None:
            rows = await self._db.read("listing schedules", self._sql["list"])
        else:
            rows = await self._db.read("listing schedules", self._sql["of_workflow"], (workflow,))
        return [schedule_from_row(row) for row in rows]

    async def get(self, name: str) -> ScheduleRecord:
        rows = await self._db.read(f"reading schedule {name!r}", self._sql["get"], (name,))
        if not rows:
            raise ScheduleNotFoundError(name)
        return schedule_from_row(rows[0])

    async def set_paused(self, name: str, paused: bool, now: float) -> ScheduleRecord:
        q = self._sql

        async def body(conn: Conn) -> list[Any]:
            await conn.execute(q["set_paused"], (paused, now, name, paused))
            cur = await conn.execute(q["get"], (name,))
            return await cur.fetchall()

        rows = await self._db.transaction(f"pausing schedule {name!r}", body, pipelined=False)
        if not rows:
            raise ScheduleNotFoundError(name)
        return schedule_from_row(rows[0])

    async def advance(
        self,
        name: str,
        expected: tuple[float | None, float | None],
        new: tuple[float | None, float | None],
        create: NewInstance | None,
        now: float,
    ) -> bool:
        q = self._sql

        async def body(conn: Conn) -> bool:
            # Concurrent updates of the row wait for each other and then re-check the WHERE
            # clause: of several expecting the same state, one matches.
            instance_id = None if create is None else create.id
            cur = await conn.execute(q["advance"], (*new, now, instance_id, name, *expected))
            row = await cur.fetchone()
            if row is None:
                found = await conn.execute(q["get"], (name,))
                if await found.fetchone() is None:
                    raise ScheduleNotFoundError(name)
                return False
            if create is not None:
                await self._instances.insert(conn, row[0], create, "cron", now)
            return True

        return await self._db.transaction(f"advancing schedule {name!r}", body, pipelined=False)


class PostgresSchedules(ScheduleStore):
    """The schedule operations on PostgreSQL (``Store.schedules``)."""

    def __init__(
        self,
        schedules: ScheduleWrites,
        now: Callable[[], float],
        notify_ready: Callable[[], None],
    ) -> None:
        self._schedules = schedules
        self._now = now
        self._notify_ready = notify_ready

    async def sync_schedules(
        self, workflows: Sequence[str], schedules: Sequence[ScheduleDefinition]
    ) -> list[ScheduleRecord]:
        return await self._schedules.sync(workflows, schedules, self._now())

    async def create_schedule(self, schedule: ScheduleDefinition) -> ScheduleRecord:
        return await self._schedules.create_api(schedule, self._now())

    async def update_schedule(self, schedule: ScheduleDefinition) -> ScheduleRecord:
        return await self._schedules.update_api(schedule, self._now())

    async def delete_schedule(self, name: str) -> ScheduleRecord:
        return await self._schedules.delete_api(name)

    async def list_schedules(self, workflow: str | None = None) -> list[ScheduleRecord]:
        return await self._schedules.list(workflow)

    async def get_schedule(self, name: str) -> ScheduleRecord:
        return await self._schedules.get(name)

    async def set_schedule_paused(self, name: str, paused: bool) -> ScheduleRecord:
        return await self._schedules.set_paused(name, paused, self._now())

    async def advance_schedule(
        self,
        name: str,
        *,
        expected_last_tick: float | None,
        expected_buffered_tick: float | None,
        last_tick: float | None,
        buffered_tick: float | None,
        create: NewInstance | None = None,
    ) -> bool:
        expected = (expected_last_tick, expected_buffered_tick)
        new = (last_tick, buffered_tick)
        applied = await self._schedules.advance(name, expected, new, create, self._now())
        if applied and create is not None:
            self._notify_ready()
        return applied
