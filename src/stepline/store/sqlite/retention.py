"""Deletes on SQLite (``Store.retention``): instances deleted by id, by age, and as their
retention says (the finished instances whose ``delete_at`` has come, or, past the workers' one
retention, that ended long enough ago, a batch at a time), with their steps, events, updates and
streams. The functions run inside a write transaction (see ``transactions``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from ...errors import IllegalStateError
from ...records import FINISHED_STATUSES
from ..retention import DeletedInstance, RetentionStore
from . import flow, message_writes, sql
from .db import Database

STATUS_BY_ID = "SELECT status FROM instances WHERE workflow = ? AND id = ?"
DELETE_EVENTS = "DELETE FROM events WHERE instance_pk = ?"
DELETE_INSTANCE = (
    "DELETE FROM instances WHERE workflow = ? AND id = ?"
    " RETURNING pk, status IN ('running', 'waitingForPause'), key"
)
EXPIRED = "SELECT pk FROM instances WHERE delete_at <= ? ORDER BY delete_at LIMIT ?"
UNDATED = (
    "SELECT pk FROM instances WHERE ended_at < ? AND delete_at IS NULL"
    " AND status IN ('complete', 'errored', 'terminated') ORDER BY ended_at LIMIT ?"
)
"""Finished instances with no deadline of their own, past the workers' one retention."""
ANY_EXPIRED = (
    "SELECT EXISTS (SELECT 1 FROM instances WHERE delete_at <= ?) OR (? IS NOT NULL AND EXISTS"
    " (SELECT 1 FROM instances WHERE ended_at < ? AND delete_at IS NULL"
    " AND status IN ('complete', 'errored', 'terminated')))"
)
"""Whether anything is to be deleted: a read first, so an idle look takes no write lock."""
DELETE_EXPIRED = "DELETE FROM instances WHERE pk = ? RETURNING workflow, id, status"


def purge(n_statuses: int, *, workflow: bool) -> str:
    """Delete ended instances in ``n_statuses`` statuses ended before a time (then a workflow)."""
    clause = " AND workflow = ?" if workflow else ""
    return (
        f"DELETE FROM instances WHERE status IN ({sql.qmarks(n_statuses)}) AND ended_at < ?{clause}"
        " RETURNING pk, workflow, id, status"
    )


def delete_instances(
    c: sqlite3.Connection,
    workflow: str,
    instance_ids: Sequence[str],
    finished_only: bool,
    now: float,
) -> int:
    if finished_only:
        # Under the write lock: no status can change before the deletes below, and nothing is
        # written if one is unfinished.
        for instance_id in instance_ids:
            for (status,) in c.execute(STATUS_BY_ID, (workflow, instance_id)).fetchall():
                if status not in FINISHED_STATUSES:
                    raise IllegalStateError(workflow, instance_id, status, "delete")
    deleted = 0
    for instance_id in instance_ids:
        for pk, ran, key in c.execute(DELETE_INSTANCE, (workflow, instance_id)).fetchall():
            deleted += 1
            delete_children(c, pk)
            if ran:  # its slots are free: the next in line of its key may run now
                flow.freed(c, pk, workflow, key, now)
    return deleted


def purge_instances(
    c: sqlite3.Connection, workflow: str | None, statuses: Sequence[str], older_than: float
) -> list[DeletedInstance]:
    params: list[Any] = [*statuses, older_than]
    if workflow is not None:
        params.append(workflow)
    statement = purge(len(statuses), workflow=workflow is not None)
    deleted: list[DeletedInstance] = []
    for pk, name, instance_id, status in c.execute(statement, params).fetchall():
        delete_children(c, pk)
        deleted.append(DeletedInstance(name, instance_id, status))
    return deleted


def delete_children(c: sqlite3.Connection, pk: int) -> None:
    c.execute(sql.DELETE_STEPS, (pk,))
    c.execute(DELETE_EVENTS, (pk,))
    for statement in message_writes.DELETE_OF_INSTANCE:
        c.execute(statement, (pk,))


def purge_expired(
    c: sqlite3.Connection, now: float, limit: int, default_cutoff: float | None
) -> list[DeletedInstance]:
    pks = [pk for (pk,) in c.execute(EXPIRED, (now, limit))]
    if default_cutoff is not None and len(pks) < limit:
        pks += [pk for (pk,) in c.execute(UNDATED, (default_cutoff, limit - len(pks)))]
    deleted: list[DeletedInstance] = []
    for pk in pks:
        workflow, instance_id, status = c.execute(DELETE_EXPIRED, (pk,)).fetchone()
        deleted.append(DeletedInstance(workflow, instance_id, status))
        delete_children(c, pk)
    return deleted


class SqliteRetention(RetentionStore):
    """Deletes by id, by age and by retention, each one durable write transaction."""

    def __init__(self, db: Database, now: Callable[[], float], ready: Callable[[], None]) -> None:
        self._db = db
        self._now = now
        self._ready = ready

    async def delete_instances(
        self, workflow: str, instance_ids: Sequence[str], *, finished_only: bool = False
    ) -> int:
        now = self._now()
        count: int = await self._db.write(
            lambda c: delete_instances(c, workflow, instance_ids, finished_only, now),
            durable=True,
        )
        if count and not finished_only:
            self._ready()  # a running instance deleted frees a slot of its key
        return count

    async def purge_instances(
        self, workflow: str | None, statuses: Sequence[str], older_than: float
    ) -> list[DeletedInstance]:
        deleted: list[DeletedInstance] = await self._db.write(
            lambda c: purge_instances(c, workflow, statuses, older_than), durable=True
        )
        return deleted

    async def purge_expired(
        self, now: float, limit: int, default_cutoff: float | None = None
    ) -> list[DeletedInstance]:
        [(due,)] = await self._db.read(ANY_EXPIRED, (now, default_cutoff, default_cutoff))
        if not due:
            return []
        deleted: list[DeletedInstance] = await self._db.write(
            lambda c: purge_expired(c, now, limit, default_cutoff), durable=True
        )
        return deleted
