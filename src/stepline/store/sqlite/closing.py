"""``Store.closing`` on SQLite (:class:`SqliteClosing`): deadlines, a parent's end and keyed
creates, each one durable write transaction (the writes: ``closing_writes``, ``keyed``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...records import InstanceRecord
from ..closing import DEADLINE_BATCH, ClosingStore
from ..types import BatchItem, KeyedConflict, Lease, NewInstance
from .closing_writes import close_children_fenced, deadlines, expire_deadlines
from .db import Database
from .keyed import create_keyed, create_keyed_batch


class SqliteClosing(ClosingStore):
    """Deadlines, a parent's end and keyed creates, each one durable write transaction."""

    def __init__(self, db: Database, now: Callable[[], float], ready: Callable[[], None]) -> None:
        self._db = db
        self._now = now
        self._ready = ready

    async def create_keyed(
        self,
        workflow: str,
        item: NewInstance,
        *,
        trigger: str,
        on_conflict: KeyedConflict,
        ready_at: float | None = None,
    ) -> InstanceRecord:
        now = self._now()
        record: InstanceRecord = await self._db.write(
            lambda c: create_keyed(c, workflow, item, trigger, on_conflict, ready_at, now),
            durable=True,
        )
        self._ready()
        return record

    async def create_keyed_batch(
        self, workflow: str, items: Sequence[BatchItem], *, trigger: str
    ) -> list[InstanceRecord | None]:
        now = self._now()
        records: list[InstanceRecord | None] = await self._db.write(
            lambda c: create_keyed_batch(c, workflow, items, trigger, now), durable=True
        )
        if any(record is not None for record in records):
            self._ready()
        return records

    async def expire_deadlines(self, workflows: Sequence[str], now: float) -> float | None:
        if not workflows:
            return None
        # A read first: a worker asks every second or so, and most find nothing due.
        rows = await self._db.read(deadlines(len(workflows), due=False), (*workflows, 1))
        if not rows or float(rows[0][0]) > now:
            return float(rows[0][0]) if rows else None
        result: tuple[float | None, bool] = await self._db.write(
            lambda c: expire_deadlines(c, workflows, now, DEADLINE_BATCH), durable=True
        )
        ahead, woke = result
        if woke:
            self._ready()
        return ahead

    async def close_children(self, lease: Lease, now: float) -> None:
        woke: bool = await self._db.write(
            lambda c: close_children_fenced(c, lease, now), durable=True
        )
        if woke:
            self._ready()
