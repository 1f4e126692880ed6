"""The SQLite store's keyed creates (``ClosingStore.create_keyed`` and
``create_keyed_batch``): debounce and replace_queued, in one write transaction (under the write
lock: concurrent creates for a key see each other)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ...records import InstanceRecord
from .._rows import instance_from_row
from ..base import BatchItem, KeyedConflict, NewInstance
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


def create_keyed_batch(
    c: sqlite3.Connection, workflow: str, items: Sequence[BatchItem], trigger: str, now: float
) -> list[InstanceRecord | None]:
    """``ClosingStore.create_keyed_batch``, in the caller's write transaction."""
    out: list[InstanceRecord | None] = []
    seen: set[str] = set()
    for batched in items:
        item = batched.item
        if item.id in seen or c.execute(sql.existing_ids(1), (workflow, item.id)).fetchone():
            out.append(None)  # skipped before its key is settled: a retried batch ends nothing
            continue
        seen.add(item.id)
        if batched.on_conflict is None:
            (created,) = tx.create(
                c, workflow, [item], trigger, False, now, owner=None, lease_expires=0.0, limit=0
            )
            out.append(created)
        else:
            out.append(
                create_keyed(c, workflow, item, trigger, batched.on_conflict, batched.ready_at, now)
            )
    return out
