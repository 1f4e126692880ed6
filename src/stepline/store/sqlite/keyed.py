"""The SQLite store's keyed creates (``ClosingStore.create_keyed``): debounce and
replace_queued, in one write transaction (under the write lock: concurrent creates for a key
see each other)."""

from __future__ import annotations

import sqlite3

from ...records import InstanceRecord
from .._rows import instance_from_row
from ..base import KeyedConflict, NewInstance
from . import sql
from . import transactions as tx

_UNSTARTED = (
    "SELECT pk FROM instances INDEXED BY instances_key_unstarted WHERE workflow = ? AND key = ?"
    " AND key IS NOT NULL AND status = 'queued' AND started_at IS NULL"
)
_DEBOUNCED = _UNSTARTED + " AND conflict = 'debounce' ORDER BY pk LIMIT 1"
_REPLACED = (
    "UPDATE instances SET status = 'terminated', ready_at = NULL, held_ready_at = NULL,"
    " ended_at = ?, updated_at = ? WHERE pk = ?"
)
_JOINED = "UPDATE instances SET params = ?, ready_at = ?, updated_at = ? WHERE pk = ?"
_DEBOUNCING = "UPDATE instances SET conflict = 'debounce', ready_at = ? WHERE pk = ?"


def create_keyed(
    c: sqlite3.Connection,
    workflow: str,
    item: NewInstance,
    trigger: str,
    on_conflict: KeyedConflict,
    ready_at: float | None,
    now: float,
) -> InstanceRecord:
    if on_conflict == "replace_queued":
        for (pk,) in c.execute(_UNSTARTED, (workflow, item.key)).fetchall():
            c.execute(_REPLACED, (now, now, pk))
    else:
        joined = c.execute(_DEBOUNCED, (workflow, item.key)).fetchone()
        if joined is not None:
            c.execute(_JOINED, (item.params, ready_at or now, now, joined[0]))
            return instance_from_row(c.execute(sql.INSTANCE_BY_PK, (joined[0],)).fetchone())
    (created,) = tx.create(
        c, workflow, [item], trigger, False, now, owner=None, lease_expires=0.0, limit=0
    )
    if on_conflict == "debounce":
        c.execute(_DEBOUNCING, (ready_at or now, created.pk))
        return instance_from_row(c.execute(sql.INSTANCE_BY_PK, (created.pk,)).fetchone())
    return created
