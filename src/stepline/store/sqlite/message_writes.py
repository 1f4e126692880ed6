"""The SQLite store's messaging statements and the functions that run them on the connection
(inside a group commit's transaction, see ``transactions``): updates with their replies, stream
items, routed queries. ``transactions`` writes the effects of a step record that answers an
update or publishes an item (:func:`write_message_step`) and deletes an instance's messages
(:data:`DELETE_OF_INSTANCE`) with it; ``messages`` runs the rest as the contract's
operations."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from ..._json import dumps, loads
from ...errors import IllegalStateError, InstanceNotFoundError, LeaseLostError
from ...limits import WorkflowLimits
from ...records import FINISHED_STATUSES
from .._rows import add_history_rows, claim_from_row, update_from_row
from ..messages import QUERY_EXPIRY
from ..types import (
    UPDATE_EVENT,
    Claim,
    Lease,
    NewStreamItem,
    QueryAnswer,
    QueryRequest,
    Routing,
    StepWrite,
    UpdateRecord,
)
from . import sql

_UPDATE_COLUMNS = "update_id, name, status, reply, error, created_at, ended_at"
UPDATE_OF = f"SELECT {_UPDATE_COLUMNS} FROM updates WHERE instance_pk = ? AND update_id = ?"
INSERT_UPDATE = (
    "INSERT INTO updates (instance_pk, update_id, name, event_pk, status, created_at)"
    " VALUES (?, ?, ?, ?, 'pending', ?)"
)
GET_UPDATE = (
    f"SELECT i.status, {', '.join('u.' + c for c in _UPDATE_COLUMNS.split(', '))}"
    " FROM instances i LEFT JOIN updates u ON u.instance_pk = i.pk AND u.update_id = ?"
    " WHERE i.workflow = ? AND i.id = ?"
)
UPDATE_RUNNING = (
    "UPDATE updates SET status = 'running' WHERE instance_pk = ? AND update_id = ?"
    " AND status = 'pending'"
)
UPDATE_ANSWERED = (
    "UPDATE updates SET status = ?, reply = ?, error = ?, ended_at = ?"
    " WHERE instance_pk = ? AND update_id = ? AND status IN ('pending', 'running')"
)
INSTANCE_NAME = "SELECT workflow, id FROM instances WHERE pk = ?"

NEXT_SEQ = (
    "INSERT INTO streams (instance_pk, stream, last_seq) VALUES (?, ?, 1)"
    " ON CONFLICT (instance_pk, stream) DO UPDATE SET last_seq = last_seq + 1 RETURNING last_seq"
)
ORIGIN_TAKEN = "SELECT 1 FROM stream_items WHERE instance_pk = ? AND stream = ? AND origin = ?"
INSERT_ITEM = (
    "INSERT INTO stream_items (instance_pk, stream, seq, origin, value, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
TRIM_ITEMS = (
    "DELETE FROM stream_items WHERE instance_pk = ? AND stream = ? AND (seq <= ? OR created_at < ?)"
)
READ_STREAM = (
    "SELECT i.status, s.seq, s.value, s.created_at FROM instances i"
    " LEFT JOIN (SELECT instance_pk, seq, value, created_at FROM stream_items"
    "   WHERE stream = ? AND seq > ? ORDER BY seq LIMIT ?) s ON s.instance_pk = i.pk"
    " WHERE i.workflow = ? AND i.id = ? ORDER BY s.seq"
)
LATEST_ITEMS = (
    "SELECT s.stream, t.seq, t.value, t.created_at FROM streams s"
    " JOIN stream_items t ON t.instance_pk = s.instance_pk AND t.stream = s.stream"
    "   AND t.seq = (SELECT max(seq) FROM stream_items m"
    "     WHERE m.instance_pk = s.instance_pk AND m.stream = s.stream)"
    " WHERE s.instance_pk = ? ORDER BY s.stream"
)
INSTANCE_PK = "SELECT pk FROM instances WHERE workflow = ? AND id = ?"

INSERT_QUERY = (
    "INSERT INTO query_requests (workflow, instance_id, name, args, created_at)"
    " VALUES (?, ?, ?, ?, ?)"
)


def _in(n: int) -> str:
    return ",".join("?" * n)


def open_queries(n: int) -> str:
    return (
        "SELECT pk, workflow, instance_id, name, args FROM query_requests"
        f" WHERE workflow IN ({_in(n)}) AND answered = 0"
        " AND (taken_until IS NULL OR taken_until <= ?) ORDER BY pk LIMIT ?"
    )


def take_query(n: int) -> str:
    return f"UPDATE query_requests SET taken_by = ?, taken_until = ? WHERE pk IN ({_in(n)})"


ANSWER_QUERY = (
    "UPDATE query_requests SET answered = 1, answer = ?, error = ? WHERE pk = ? AND answered = 0"
    " RETURNING workflow, instance_id"
)
QUERY_ANSWER = "SELECT answered, answer, error FROM query_requests WHERE pk = ?"
EXPIRE_QUERIES = "DELETE FROM query_requests WHERE created_at < ?"
DELETE_QUERY = "DELETE FROM query_requests WHERE pk = ?"

DELETE_OF_INSTANCE = (
    "DELETE FROM updates WHERE instance_pk = ?",
    "DELETE FROM streams WHERE instance_pk = ?",
    "DELETE FROM stream_items WHERE instance_pk = ?",
)
"""What an instance's deletion deletes besides its steps and events (``transactions``)."""


# -- on the connection ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Taker:
    """Who a send that claims leases the instance to (``send_update_and_claim``): the lease,
    and the routing of its worker."""

    owner: str
    token: int
    lease_seconds: float
    routing: Routing | None


def send_update(
    c: sqlite3.Connection,
    workflow: str,
    instance_id: str,
    update: tuple[str, str, str],
    now: float,
    taker: Taker | None,
) -> tuple[UpdateRecord, Claim | None]:
    """Record ``update`` (its id, name and payload) at ``now``; with ``taker``, lease the
    instance to it if it can run at once (``MessageStore.send_update_and_claim``)."""
    update_id, name, payload = update
    found = c.execute(sql.LOOKUP, (workflow, instance_id)).fetchone()
    if found is None:
        raise InstanceNotFoundError(workflow, instance_id)
    pk, status, _owner = found
    row = c.execute(UPDATE_OF, (pk, update_id)).fetchone()
    if row is not None:
        return update_from_row(row, status), None
    if status in FINISHED_STATUSES:
        raise IllegalStateError(workflow, instance_id, status, "send an update to")
    event = c.execute(sql.INSERT_EVENT, (pk, UPDATE_EVENT, payload, now)).lastrowid
    c.execute(INSERT_UPDATE, (pk, update_id, name, event, now))
    c.execute(sql.EVENT_SENT, (now, pk))
    record = UpdateRecord(update_id, name, "pending", None, None, now, None, status)
    if taker is None or _limited(c, workflow):
        return record, None
    return record, _lease_woken(c, pk, taker, now)


def _limited(c: sqlite3.Connection, workflow: str) -> bool:
    """Whether ``workflow`` has a limit registered that applies across workers."""
    found = c.execute(sql.LIMITS_OF, (workflow,)).fetchone()
    return found is not None and WorkflowLimits.from_json(loads(found[0])).fleet_wide


def _lease_woken(c: sqlite3.Connection, pk: int, taker: Taker, now: float) -> Claim | None:
    """The instance ``pk`` leased to ``taker`` with its history, if it can run at once."""
    routing = taker.routing
    statement = sql.lease_woken(None if routing is None else routing.shape)
    params = (taker.owner, taker.token, now + taker.lease_seconds, now, pk)
    row = c.execute(statement, params + (() if routing is None else routing.params)).fetchone()
    if row is None:
        return None
    claim = claim_from_row(row, taker.owner)
    add_history_rows(
        {pk: claim.history},
        c.execute(sql.history_steps(1), (pk,)).fetchall(),
        c.execute(sql.pending_events(1), (pk,)).fetchall(),
    )
    return claim


def write_message_step(c: sqlite3.Connection, pk: int, write: StepWrite) -> None:
    """The effects of a step record that answers an update or publishes an item (in the
    record's transaction, after its fence)."""
    if write.update is not None:
        if write.status == "running":
            c.execute(UPDATE_RUNNING, (pk, write.update))
        elif write.status in ("complete", "errored"):
            error = dumps(write.error, what="update error") if write.error is not None else None
            reply = write.output if write.status == "complete" else None
            c.execute(
                UPDATE_ANSWERED, (write.status, reply, error, write.ended_at, pk, write.update)
            )
    if write.publish is not None:
        append_item(c, pk, write.publish, write.ended_at or write.started_at or 0.0)


def append_item(c: sqlite3.Connection, pk: int, item: NewStreamItem, now: float) -> int | None:
    if c.execute(ORIGIN_TAKEN, (pk, item.stream, item.origin)).fetchone() is not None:
        return None
    (seq,) = c.execute(NEXT_SEQ, (pk, item.stream)).fetchone()
    c.execute(INSERT_ITEM, (pk, item.stream, seq, item.origin, item.value, now))
    cutoff = -1.0 if item.keep_seconds is None else now - item.keep_seconds
    c.execute(TRIM_ITEMS, (pk, item.stream, seq - item.keep, cutoff))
    return int(seq)


def _fenced(c: sqlite3.Connection, lease: Lease) -> tuple[str, str]:
    """The leased instance's workflow and id; ``LeaseLostError`` if the lease is not held."""
    if c.execute(sql.FENCE_STATUS, (lease.pk, lease.token, lease.owner)).fetchone() is None:
        raise LeaseLostError(f"lease on instance {lease.pk} lost by worker {lease.owner}")
    workflow, instance_id = c.execute(INSTANCE_NAME, (lease.pk,)).fetchone()
    return workflow, instance_id


def reject_update(
    c: sqlite3.Connection, lease: Lease, event: int, update_id: str, error: str, now: float
) -> tuple[str, str]:
    name = _fenced(c, lease)
    c.execute(sql.CONSUME_EVENT, ("rejected", event))
    c.execute(
        "UPDATE updates SET status = 'rejected', error = ?, ended_at = ?"
        " WHERE instance_pk = ? AND update_id = ? AND status = 'pending'",
        (error, now, lease.pk, update_id),
    )
    return name


def publish(
    c: sqlite3.Connection, lease: Lease, item: NewStreamItem, now: float
) -> tuple[int | None, str, str]:
    workflow, instance_id = _fenced(c, lease)
    return append_item(c, lease.pk, item, now), workflow, instance_id


def take_queries(
    c: sqlite3.Connection,
    owner: str,
    workflows: Sequence[str],
    limit: int,
    until: float,
    now: float,
) -> list[QueryRequest]:
    rows = c.execute(open_queries(len(workflows)), (*workflows, now, limit)).fetchall()
    if rows:
        c.execute(take_query(len(rows)), (owner, until, *(row[0] for row in rows)))
    return [QueryRequest(*row) for row in rows]


def answer_query(c: sqlite3.Connection, pk: int, answer: QueryAnswer) -> tuple[str, str] | None:
    error = dumps(answer.error, what="query error") if answer.error is not None else None
    row = c.execute(ANSWER_QUERY, (answer.answer, error, pk)).fetchone()
    return None if row is None else (row[0], row[1])


def ask_query(
    c: sqlite3.Connection, workflow: str, instance_id: str, name: str, args: str, now: float
) -> int:
    c.execute(EXPIRE_QUERIES, (now - QUERY_EXPIRY,))
    pk = c.execute(INSERT_QUERY, (workflow, instance_id, name, args, now)).lastrowid
    return int(pk or 0)
