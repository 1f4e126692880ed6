"""The SQLite store's cron schedule statements and write transactions (see ``Store``'s
"cron schedules" operations), kept apart from the instance machinery of ``sql`` and
``transactions``."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

from ...errors import ScheduleExistsError, ScheduleNotFoundError, ScheduleReadOnlyError
from ...records import ScheduleRecord
from .._rows import ScheduleRow, columns, schedule_from_row
from ..base import NewInstance, ScheduleDefinition
from ..schedules import ScheduleStore
from . import transactions as tx
from .db import Database

SCHEDULE_COLUMNS = columns(ScheduleRow._fields)
_DECLARED = ("workflow", "cron", "timezone", "params", "catch_up", "catch_up_limit", "overlap")

LIST_SCHEDULES = f"SELECT {SCHEDULE_COLUMNS} FROM schedules ORDER BY name"
SCHEDULES_OF = f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE workflow = ? ORDER BY name"
SCHEDULE_BY_NAME = f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE name = ?"
UPSERT_SCHEDULE = (
    "INSERT INTO schedules (name, workflow, cron, timezone, params, catch_up, catch_up_limit,"
    " overlap, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (name) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _DECLARED)
    + ", updated_at = CASE WHEN "
    + " AND ".join(f"schedules.{c} IS excluded.{c}" for c in _DECLARED)
    + " AND schedules.source = 'code' THEN schedules.updated_at ELSE excluded.updated_at END,"
    " source = 'code'"
)
INSERT_API = (
    "INSERT INTO schedules (name, workflow, cron, timezone, params, catch_up, catch_up_limit,"
    " overlap, created_at, updated_at, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'api')"
)
UPDATE_API = (
    "UPDATE schedules SET " + ", ".join(f"{c} = ?" for c in _DECLARED) + ", updated_at = ?"
    " WHERE name = ? AND source = 'api'"
)
DELETE_API = "DELETE FROM schedules WHERE name = ? AND source = 'api'"
SET_PAUSED = "UPDATE schedules SET paused = ?, updated_at = ? WHERE name = ? AND paused != ?"
ADVANCE = (
    "UPDATE schedules SET last_tick = ?, buffered_tick = ?, updated_at = ?,"
    " last_instance = coalesce(?, last_instance)"
    " WHERE name = ? AND last_tick IS ? AND buffered_tick IS ?"
    " RETURNING workflow"
)


def delete_unlisted(n_workflows: int, n_names: int) -> str:
    """Delete the schedules of ``n_workflows`` workflows whose name is none of ``n_names``."""
    names = f" AND name NOT IN ({','.join('?' * n_names)})" if n_names else ""
    return (
        f"DELETE FROM schedules WHERE source = 'code'"
        f" AND workflow IN ({','.join('?' * n_workflows)}){names}"
    )


def sync(
    c: sqlite3.Connection,
    workflows: Sequence[str],
    schedules: Sequence[ScheduleDefinition],
    now: float,
) -> list[ScheduleRecord]:
    for s in schedules:
        if s.workflow not in workflows:
            raise ValueError(
                f"schedule {s.name!r} is of workflow {s.workflow!r}, not one of those synced"
            )
    names = [s.name for s in schedules]
    c.execute(delete_unlisted(len(workflows), len(names)), (*workflows, *names))
    for s in schedules:
        c.execute(
            UPSERT_SCHEDULE,
            (
                s.name, s.workflow, s.cron, s.timezone, s.params, s.catch_up, s.catch_up_limit,
                s.overlap, now, now,
            ),
        )  # fmt: skip
    found = [
        schedule_from_row(row)
        for workflow in workflows
        for row in c.execute(SCHEDULES_OF, (workflow,)).fetchall()
    ]
    return sorted((r for r in found if r.source == "code"), key=lambda record: record.name)


def _declared(s: ScheduleDefinition) -> tuple[object, ...]:
    return (s.workflow, s.cron, s.timezone, s.params, s.catch_up, s.catch_up_limit, s.overlap)


def create_api(c: sqlite3.Connection, s: ScheduleDefinition, now: float) -> ScheduleRecord:
    found = c.execute(SCHEDULE_BY_NAME, (s.name,)).fetchone()
    if found is not None:
        raise ScheduleExistsError(s.name, schedule_from_row(found).source)
    c.execute(INSERT_API, (s.name, *_declared(s), now, now))
    return _get(c, s.name)


def update_api(c: sqlite3.Connection, s: ScheduleDefinition, now: float) -> ScheduleRecord:
    _writable(c, s.name)
    c.execute(UPDATE_API, (*_declared(s), now, s.name))
    return _get(c, s.name)


def delete_api(c: sqlite3.Connection, name: str) -> ScheduleRecord:
    record = _writable(c, name)
    c.execute(DELETE_API, (name,))
    return record


def _writable(c: sqlite3.Connection, name: str) -> ScheduleRecord:
    record = _get(c, name)
    if record.source != "api":
        raise ScheduleReadOnlyError(name)
    return record


def set_paused(c: sqlite3.Connection, name: str, paused: bool, now: float) -> ScheduleRecord:
    c.execute(SET_PAUSED, (int(paused), now, name, int(paused)))
    return _get(c, name)


def advance(
    c: sqlite3.Connection,
    name: str,
    expected: tuple[float | None, float | None],
    new: tuple[float | None, float | None],
    create: NewInstance | None,
    now: float,
) -> bool:
    """Whether the compare-and-set applied (and ``create`` was created)."""
    instance_id = create.id if create is not None else None
    row = c.execute(ADVANCE, (*new, now, instance_id, name, *expected)).fetchone()
    if row is None:
        _get(c, name)  # an unknown name raises
        return False
    if create is not None:
        (workflow,) = row
        tx.create(c, workflow, [create], "cron", True, now, owner=None, lease_expires=now, limit=0)
    return True


def _get(c: sqlite3.Connection, name: str) -> ScheduleRecord:
    row = c.execute(SCHEDULE_BY_NAME, (name,)).fetchone()
    if row is None:
        raise ScheduleNotFoundError(name)
    return schedule_from_row(row)


class SqliteSchedules(ScheduleStore):
    """The schedule operations on SQLite (``Store.schedules``)."""

    def __init__(
        self, db: Database, now: Callable[[], float], notify_ready: Callable[[], None]
    ) -> None:
        self._db = db
        self._now = now
        self._notify_ready = notify_ready

    async def sync_schedules(
        self, workflows: Sequence[str], schedules: Sequence[ScheduleDefinition]
    ) -> list[ScheduleRecord]:
        if not workflows:
            if schedules:
                raise ValueError("schedules given without their workflows")
            return []
        now = self._now()
        synced: list[ScheduleRecord] = await self._db.write(
            lambda c: sync(c, workflows, schedules, now), durable=True
        )
        return synced

    async def create_schedule(self, schedule: ScheduleDefinition) -> ScheduleRecord:
        now = self._now()
        record: ScheduleRecord = await self._db.write(
            lambda c: create_api(c, schedule, now), durable=True
        )
        return record

    async def update_schedule(self, schedule: ScheduleDefinition) -> ScheduleRecord:
        now = self._now()
        record: ScheduleRecord = await self._db.write(
            lambda c: update_api(c, schedule, now), durable=True
        )
        return record

    async def delete_schedule(self, name: str) -> ScheduleRecord:
        record: ScheduleRecord = await self._db.write(lambda c: delete_api(c, name), durable=True)
        return record

    async def list_schedules(self, workflow: str | None = None) -> list[ScheduleRecord]:
        if workflow is None:
            rows = await self._db.read(LIST_SCHEDULES)
        else:
            rows = await self._db.read(SCHEDULES_OF, (workflow,))
        return [schedule_from_row(row) for row in rows]

    async def get_schedule(self, name: str) -> ScheduleRecord:
        rows = await self._db.read(SCHEDULE_BY_NAME, (name,))
        if not rows:
            raise ScheduleNotFoundError(name)
        return schedule_from_row(rows[0])

    async def set_schedule_paused(self, name: str, paused: bool) -> ScheduleRecord:
        now = self._now()
        record: ScheduleRecord = await self._db.write(
            lambda c: set_paused(c, name, paused, now), durable=True
        )
        return record

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
        now = self._now()
        expected = (expected_last_tick, expected_buffered_tick)
        new = (last_tick, buffered_tick)
        applied: bool = await self._db.write(
            lambda c: advance(c, name, expected, new, create, now), durable=True
        )
        if applied and create is not None:
            self._notify_ready()
        return applied
