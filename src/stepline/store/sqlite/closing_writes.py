"""The SQLite store's executions of ``store.closing``: deadlines carried out, a parent's end
applied to its children, each a function run inside a write transaction (``transactions``
calls them too; :class:`~stepline.store.sqlite.closing.SqliteClosing` submits them)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ..._json import dumps, loads
from ...errors import LeaseLostError
from .._rows import INTERRUPTED
from ..closing import ERRORS, Interruption, interruption
from ..types import Lease
from . import flow, sql

_UNFINISHED = "status NOT IN ('complete', 'errored', 'terminated')"
_ERRORS = {kind: dumps(error, what="error") for kind, error in ERRORS.items()}
_INTERRUPTED = dumps(INTERRUPTED, what="error")

_STATE = "SELECT status, started_at, lease_owner, control, parent FROM instances WHERE pk = ?"
_END_ERRORED = (
    "UPDATE instances SET status = 'errored', error = ?, ready_at = NULL, held_ready_at = NULL,"
    " control = NULL, ended_at = ?, updated_at = ? WHERE pk = ?"
)
_MARK = (
    "UPDATE instances SET status = ?, control = ?, ready_at = ?, held_ready_at = NULL,"
    " parked_on = NULL, updated_at = ? WHERE pk = ?"
)
_FENCE = (
    "UPDATE instances SET lease_token = lease_token + 1, lease_owner = NULL,"
    " lease_expires_at = NULL WHERE pk = ?"
)
_TERMINATE = (
    "UPDATE instances SET status = 'terminated', ready_at = NULL, held_ready_at = NULL,"
    " control = NULL, ended_at = ?, updated_at = ?, lease_token = lease_token + 1,"
    " lease_owner = NULL, lease_expires_at = NULL WHERE pk = ?"
)
_CHILDREN = (
    "SELECT pk, status, on_parent_close FROM instances INDEXED BY instances_parent_pk"
    f" WHERE parent_pk = ? AND parent_pk IS NOT NULL AND {_UNFINISHED}"
)
_CLEAR_DEADLINE = "UPDATE instances SET deadline_at = NULL WHERE pk = ?"
_FENCED = "SELECT 1 FROM instances WHERE pk = ? AND lease_token = ? AND lease_owner = ?"


def deadlines(n_workflows: int, *, due: bool) -> str:
    """The pks of the unfinished instances of the workflows whose deadline is due (the
    workflows, ``now``, a limit), or their deadlines in order (the workflows, a limit)."""
    marks = ",".join("?" * n_workflows)
    where = f"deadline_at IS NOT NULL AND {_UNFINISHED} AND workflow IN ({marks})" + (
        " AND deadline_at <= ?" if due else ""
    )
    what = "pk" if due else "deadline_at"
    return (
        f"SELECT {what} FROM instances INDEXED BY instances_deadline WHERE {where}"
        " ORDER BY deadline_at LIMIT ?"
    )


def interrupt(c: sqlite3.Connection, pk: int, kind: Interruption, now: float) -> bool:
    """Stop unfinished instance ``pk`` as ``store.closing`` says; whether that made another
    instance runnable (itself, its parent, or what its slots held back)."""
    row = c.execute(_STATE, (pk,)).fetchone()
    if row is None:
        return False
    status, started_at, owner, control, parent = row
    if status in ("complete", "errored", "terminated"):
        return False
    change = interruption(status, started_at is not None, owner is not None, control)
    if change is None:
        return False
    if change.get("end"):
        c.execute(_END_ERRORED, (_ERRORS[kind], now, now, pk))
        _wake_parent(c, parent, now)
        return True
    c.execute(_MARK, (change["status"], kind, now, now, pk))
    if change["fence"]:
        c.execute(_FENCE, (pk,))
        c.execute(sql.INTERRUPT_RUNNING_STEPS, (_INTERRUPTED, now, pk))
        if status in ("running", "waitingForPause"):
            flow.freed_pk(c, pk, now)
    return True


def _wake_parent(c: sqlite3.Connection, parent: str | None, now: float) -> None:
    found = loads(parent)
    if found:
        c.execute(sql.WAKE_PARENT, (now, found["workflow"], found["id"]))


def expire_deadlines(
    c: sqlite3.Connection, workflows: Sequence[str], now: float, limit: int
) -> tuple[float | None, bool]:
    """``ClosingStore.expire_deadlines``: the next deadline (``now`` if more are due), and
    whether an instance became runnable."""
    due = c.execute(deadlines(len(workflows), due=True), (*workflows, now, limit)).fetchall()
    woke = False
    for (pk,) in due:
        c.execute(_CLEAR_DEADLINE, (pk,))
        woke = interrupt(c, pk, "timeout", now) or woke
    if len(due) >= limit:
        return now, woke
    ahead = c.execute(deadlines(len(workflows), due=False), (*workflows, 1)).fetchone()
    return (None if ahead is None else float(ahead[0])), woke


def close_children(c: sqlite3.Connection, parent_pk: int, now: float) -> bool:
    """Apply each unfinished child's ``on_parent_close`` (its parent ended errored or
    terminated): ``terminate`` ends it at once, and so on down its own children; whether an
    instance became runnable."""
    woke = False
    pending = [parent_pk]
    while pending:
        for pk, status, policy in c.execute(_CHILDREN, (pending.pop(),)).fetchall():
            if policy == "request_cancel":
                woke = interrupt(c, pk, "cancel", now) or woke
            elif policy == "terminate":
                c.execute(_TERMINATE, (now, now, pk))
                c.execute(sql.INTERRUPT_RUNNING_STEPS, (_INTERRUPTED, now, pk))
                if status in ("running", "waitingForPause"):
                    woke = any(flow.freed_pk(c, pk, now)) or woke
                pending.append(pk)
    return woke


def close_children_fenced(c: sqlite3.Connection, lease: Lease, now: float) -> bool:
    """``ClosingStore.close_children``: :func:`close_children` if ``lease`` is still held."""
    if c.execute(_FENCED, (lease.pk, lease.token, lease.owner)).fetchone() is None:
        raise LeaseLostError(f"lease on instance {lease.pk} lost by worker {lease.owner}")
    return close_children(c, lease.pk, now)
