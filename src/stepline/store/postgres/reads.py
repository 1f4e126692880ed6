"""The PostgreSQL store's reads of one instance and of pages of them, each answered in one
round trip (an unknown instance is ``InstanceNotFoundError``)."""

from __future__ import annotations

from collections.abc import Callable

from ..._json import loads
from ...errors import InstanceNotFoundError
from ...records import InstanceEvent, InstancePage, InstanceRecord, StepRecord
from .._rows import decode_cursor, encode_cursor, instance_from_row, settle_sleeps, step_from_row
from . import sql
from .db import Database
from .sql import Statements


class InstanceReads:
    """One store's reads of instances, their steps and their events."""

    def __init__(
        self, db: Database, statements: Statements, schema: str, now: Callable[[], float]
    ) -> None:
        self._db = db
        self._sql = statements
        self._schema = schema
        self._now = now

    async def get_instance(self, workflow: str, instance_id: str) -> InstanceRecord:
        rows = await self._db.read(
            f"reading instance {instance_id!r}", self._sql.get_instance, (workflow, instance_id)
        )
        if not rows:
            raise InstanceNotFoundError(workflow, instance_id)
        return instance_from_row(rows[0])

    async def list_instances(
        self,
        workflow: str | None,
        status: str | None,
        limit: int,
        cursor: str | None,
        *,
        oldest_first: bool = False,
    ) -> InstancePage:
        after = decode_cursor(cursor)
        query = sql.list_instances(
            self._schema,
            workflow=workflow is not None,
            status=status is not None,
            after=after is not None,
            oldest_first=oldest_first,
        )
        params = [value for value in (workflow, status, after) if value is not None]
        rows = await self._db.read("listing instances", query, (*params, limit + 1))
        records = [instance_from_row(r) for r in rows[:limit]]
        next_cursor = encode_cursor(records[-1].pk) if len(rows) > limit else None
        return InstancePage(records, next_cursor)

    async def get_steps(self, workflow: str, instance_id: str) -> list[StepRecord]:
        found, steps = await self._db.read_many(
            f"reading the steps of instance {instance_id!r}",
            [
                (self._sql.get_instance, (workflow, instance_id)),
                (self._sql.steps_of_instance, (workflow, instance_id)),
            ],
        )
        if not found:
            raise InstanceNotFoundError(workflow, instance_id)
        return settle_sleeps(
            [step_from_row(r) for r in steps], instance_from_row(found[0]), self._now()
        )

    async def get_events(self, workflow: str, instance_id: str) -> list[InstanceEvent]:
        found, events = await self._db.read_many(
            f"reading the events of instance {instance_id!r}",
            [
                (self._sql.get_instance, (workflow, instance_id)),
                (self._sql.events_of_instance, (workflow, instance_id)),
            ],
        )
        if not found:
            raise InstanceNotFoundError(workflow, instance_id)
        return [
            InstanceEvent(kind, loads(payload), created, consumed_by)
            for kind, payload, created, consumed_by in events
        ]
