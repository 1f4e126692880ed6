"""The SQLite store's writes: each function runs on the connection, inside one group commit's
transaction (``BEGIN IMMEDIATE``: under the database's write lock), and either returns its
result or raises, having written nothing that its caller sees (see ``db.Database``).

Being under the lock is what makes the checks here final: a create's dedup check and the
claim's limits (``flow``) see every committed instance, and nothing changes before their writes
(the dedup index is there as the last guard all the same)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, cast

from ..._json import dumps, loads
from ...errors import (
    DuplicateInstanceError,
    IllegalStateError,
    InstanceAlreadyExistsError,
    InstanceNotFoundError,
    LeaseLostError,
)
from ...flow.claiming import NextLook
from ...limits import Limit
from ...records import WORKER_EXPIRE_BEATS, InstanceRecord, WorkerInfo
from .._rows import (
    INTERRUPTED,
    InstanceRow,
    add_history_rows,
    claim_from_row,
    control_assignments,
    control_transition,
    instance_from_row,
    worker_patches_json,
    worker_versions_json,
)
from ..base import Claim, ControlAction, Finish, Lease, NewInstance, StepWrite, WorkflowMeta
from ..types import Routing, new_lease_token, patch_id
from . import closing_writes, flow, flow_sql, message_writes, sql
from .sql import Fence, Lookup

_INTERRUPTED = dumps(INTERRUPTED, what="error")


# -- workflows -------------------------------------------------------------------------------


def register_workflows(
    c: sqlite3.Connection, metas: Sequence[WorkflowMeta], limits: Sequence[Limit], now: float
) -> None:
    for meta in metas:
        definition = dumps(meta.definition, what="workflow definition", limit=1 << 24)
        declared = meta.limits.to_json()
        stored = None if declared is None else dumps(declared, what="workflow limits")
        before = c.execute(sql.LIMITS_OF, (meta.name,)).fetchone()
        retention = None if meta.retention is None else dumps(meta.retention, what="retention")
        c.execute(
            sql.REGISTER_WORKFLOW,
            (meta.name, meta.class_name, definition, stored, now, now, retention),
        )
        if before is not None and before[0] != stored:
            # A changed key limit applies to the instances set aside under the old one too.
            c.execute(flow_sql.UNPARK_WORKFLOW, (meta.name,))
    for limit in limits:
        rate = limit.rate
        c.execute(
            sql.UPSERT_LIMIT,
            (
                limit.name,
                limit.concurrency,
                None if rate is None else rate.count,
                None if rate is None else rate.period,
                now,
            ),
        )


# -- instances -------------------------------------------------------------------------------


def create(
    c: sqlite3.Connection,
    workflow: str,
    items: Sequence[NewInstance],
    trigger: str,
    skip_existing: bool,
    now: float,
    *,
    owner: str | None,
    lease_expires: float,
    limit: int,
) -> list[InstanceRecord]:
    """Both creates: the first ``limit`` distinct ids leased to ``owner`` until
    ``lease_expires`` (see ``Store.create_and_claim``)."""
    ids = [item.id for item in items]
    existing: set[str] = set()
    for start in range(0, len(ids), sql.ID_CHUNK):
        chunk = ids[start : start + sql.ID_CHUNK]
        found = c.execute(sql.existing_ids(len(chunk)), (workflow, *chunk))
        existing.update(instance_id for (instance_id,) in found)
    if existing and not skip_existing:
        raise InstanceAlreadyExistsError(workflow, sorted(existing)[0])
    created: list[InstanceRecord] = []
    for position, item in _creatable(c, workflow, items, existing, skip_existing):
        leased_to: str | None = None
        expires: float | None = None
        status, ready, token, started = "queued", now, 0, None
        if position < limit:
            leased_to, expires = owner, lease_expires
            status, ready, token, started = "running", expires, 1, now
        try:
            inserted = c.execute(
                sql.INSERT_INSTANCE,
                (
                    workflow, item.id, status, item.params, trigger, item.parent, ready, now,
                    now, leased_to, token, expires, started, item.schedule, item.key,
                    item.priority, item.dedup_key, item.traceparent, item.version,
                    item.retention, item.deadline_at, item.parent_pk, item.on_parent_close,
                    item.tags,
                ),
            )  # fmt: skip
        except sqlite3.IntegrityError:
            if item.dedup_key is not None:
                _check_dedup_key(c, workflow, item.dedup_key)
            raise
        # The record from what was written: SQLite's RETURNING is slow per row.
        row = InstanceRow(
            pk=cast(int, inserted.lastrowid),  # set by every INSERT
            workflow=workflow,
            id=item.id,
            status=status,
            params=item.params,
            output=None,
            error=None,
            rollback=None,
            trigger=trigger,
            created_at=now,
            updated_at=now,
            started_at=started,
            ended_at=None,
            ready_at=ready,
            lease_owner=leased_to,
            parent=item.parent,
            schedule=item.schedule,
            key=item.key,
            priority=item.priority,
            dedup_key=item.dedup_key,
            traceparent=item.traceparent,
            version=item.version,
            delete_at=None,
            deadline_at=item.deadline_at,
            patches=None,
        )
        created.append(instance_from_row(row))
    return created


def _creatable(
    c: sqlite3.Connection,
    workflow: str,
    items: Sequence[NewInstance],
    existing: set[str],
    skip_existing: bool,
) -> list[tuple[int, NewInstance]]:
    """The items to insert, each with its position among the distinct ids: an id repeated
    counts once, an existing id is skipped, and so is a dedup key that an unfinished instance
    or an earlier item holds (``DuplicateInstanceError`` unless ``skip_existing``)."""
    wanted = list(dict.fromkeys(i.dedup_key for i in items if i.dedup_key is not None))
    holders: dict[str, str] = {}
    for start in range(0, len(wanted), sql.ID_CHUNK):
        chunk = wanted[start : start + sql.ID_CHUNK]
        holders.update(c.execute(sql.dedup_holders(len(chunk)), (workflow, *chunk)))
    creatable: list[tuple[int, NewInstance]] = []
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            continue
        seen.add(item.id)
        if item.id in existing:
            continue
        if item.dedup_key is not None:
            holder = holders.get(item.dedup_key)
            if holder is not None:
                if skip_existing:
                    continue
                raise DuplicateInstanceError(workflow, item.dedup_key, holder)
            holders[item.dedup_key] = item.id
        creatable.append((len(seen) - 1, item))
    return creatable


def _check_dedup_key(c: sqlite3.Connection, workflow: str, dedup_key: str) -> None:
    """``DuplicateInstanceError`` if an unfinished instance of ``workflow`` holds the key."""
    for _, holder in c.execute(sql.dedup_holders(1), (workflow, dedup_key)).fetchall():
        raise DuplicateInstanceError(workflow, dedup_key, holder)


def _lookup(c: sqlite3.Connection, workflow: str, instance_id: str) -> Lookup:
    row = c.execute(sql.LOOKUP, (workflow, instance_id)).fetchone()
    if row is None:
        raise InstanceNotFoundError(workflow, instance_id)
    return Lookup._make(row)


def control(
    c: sqlite3.Connection,
    workflow: str,
    instance_id: str,
    action: ControlAction,
    rollback: bool,
    from_step: tuple[str, int] | None,
    now: float,
    version: str | None = None,
) -> tuple[InstanceRecord, bool]:
    """The instance after the action, and whether it made another runnable: its parent (it
    ended a child), or the next in line of its key."""
    found = _lookup(c, workflow, instance_id)
    ended = freed = False
    if action == "restart":
        _restart(c, found.pk, from_step, now, version)
    else:
        change = control_transition(
            workflow, instance_id, found.status, found.lease_owner is not None, action, rollback
        )
        assignments, params = control_assignments(change, now, "?")
        c.execute(sql.control(assignments), (*params, found.pk))
        if change.get("fence"):
            # A fenced-out activation never records its running steps: close them.
            c.execute(sql.INTERRUPT_RUNNING_STEPS, (_INTERRUPTED, now, found.pk))
            if found.status in ("running", "waitingForPause"):
                freed = any(flow.freed_pk(c, found.pk, now))  # it ran: its slots are free
        ended = bool(change.get("end"))
        if ended:  # its children's on_parent_close applies
            freed = closing_writes.close_children(c, found.pk, now) or freed
    record = instance_from_row(c.execute(sql.INSTANCE_BY_PK, (found.pk,)).fetchone())
    return record, (ended and _wake_parent(c, record.parent, now)) or freed


def _restart(
    c: sqlite3.Connection,
    pk: int,
    from_step: tuple[str, int] | None,
    now: float,
    version: str | None,
) -> None:
    for workflow, dedup_key in c.execute(sql.DEDUP_OF_FINISHED, (pk,)).fetchall():
        # Unfinished again, it would hold its dedup key: unless another instance took it since.
        _check_dedup_key(c, workflow, dedup_key)
    if from_step is None:
        c.execute(sql.DELETE_STEPS, (pk,))
        c.execute(sql.UNCONSUME_EVENTS, (pk,))
    else:
        name, count = from_step
        row = c.execute(sql.STEP_SEQ, (pk, name, count)).fetchone()
        if row is None:
            raise ValueError(
                f"instance has no recorded step {name!r} (count {count}) to restart from"
            )
        (seq,) = row
        for removed, removed_count in c.execute(sql.DELETE_STEPS_FROM, (pk, seq)).fetchall():
            c.execute(sql.UNCONSUME_EVENT, (pk, f"{removed}-{removed_count}"))
    c.execute(sql.RESTART, (now, now, version, pk))


def send_event(
    c: sqlite3.Connection,
    workflow: str,
    instance_id: str,
    event_type: str,
    payload: str | None,
    now: float,
) -> None:
    found = _lookup(c, workflow, instance_id)
    if found.status in ("complete", "errored", "terminated"):
        raise IllegalStateError(workflow, instance_id, found.status, "send an event to")
    c.execute(sql.INSERT_EVENT, (found.pk, event_type, payload, now))
    c.execute(sql.EVENT_SENT, (now, found.pk))


# -- activations -----------------------------------------------------------------------------


def claim(
    c: sqlite3.Connection,
    owner: str,
    workflows: Sequence[str],
    limit: int,
    expires: float,
    now: float,
    caps: Mapping[str, int] | None = None,
    routes: Routing | None = None,
) -> tuple[list[Claim], NextLook | None]:
    """The instances the limits let run, offered to the claim in claim order with their claimed
    columns (``flow.pick``, under the write lock), leased in one UPDATE, then their histories:
    two queries per batch. With them, when the worker should look again, if the claim can tell
    (``flow.next_look``)."""
    rules = flow.read_rules(c)
    token = new_lease_token()
    flow.bring_back_expired(c, rules, workflows, now)
    session = flow.claim_session(c, rules, workflows, limit, now, caps)
    rows = flow.pick(c, session, now, (now, now, expires, owner, token), routes)
    for pk in session.pauses:
        c.execute(sql.PAUSE_UNCLAIMED, (now, pk))
        flow.freed_pk(c, pk, now)
    flow.park(c, session, now)
    if not rows:
        return [], flow.next_look(c, session, now, routes)
    claims = [claim_from_row(row, owner) for row in rows]
    pks = [taken.lease.pk for taken in claims]
    c.execute(sql.take_leases(len(pks)), (owner, token, expires, expires, now, now, *pks))
    look = flow.next_look(c, session, now, routes)  # after the leases: their expiry is a timer too
    add_history_rows(
        {taken.lease.pk: taken.history for taken in claims},
        c.execute(sql.history_steps(len(pks)), pks).fetchall(),
        c.execute(sql.pending_events(len(pks)), pks).fetchall(),
    )
    return claims, look


def record_step(c: sqlite3.Connection, lease: Lease, write: StepWrite) -> str:
    """The step written under the lease; the instance's status."""
    row = c.execute(sql.FENCE_STATUS, (lease.pk, lease.token, lease.owner)).fetchone()
    if row is None:
        raise _lease_lost(lease)
    _write_step(c, lease, write)
    status: str
    (status,) = row
    return status


def _write_step(c: sqlite3.Connection, lease: Lease, write: StepWrite) -> None:
    # SQLite checks the key on every insert anyway: ``write.new`` would save nothing here.
    c.execute(
        sql.UPSERT_STEP,
        (
            write.name,
            write.count,
            write.seq,
            write.kind,
            write.status,
            write.output,
            dumps(write.error, what="step error") if write.error is not None else None,
            dumps([a.to_json() for a in write.attempts], what="attempts")
            if write.attempts
            else None,
            write.wake_at,
            write.started_at,
            write.ended_at,
            dumps(write.info, what="step info") if write.info is not None else None,
            lease.pk,
        ),
    )
    if write.consume_event is not None:
        c.execute(sql.CONSUME_EVENT, (f"{write.name}-{write.count}", write.consume_event))
    if write.kind == "patch":
        c.execute(sql.ADD_PATCH, (patch_id(write.name), lease.pk))
    if write.update is not None or write.publish is not None:
        message_writes.write_message_step(c, lease.pk, write)


def record_message_step(
    c: sqlite3.Connection, lease: Lease, write: StepWrite
) -> tuple[str, str, str]:
    """:func:`record_step` of a record that answers an update or publishes an item: the
    instance's status, workflow and id (whose waiters are told)."""
    status = record_step(c, lease, write)
    workflow, instance_id = c.execute(message_writes.INSTANCE_NAME, (lease.pk,)).fetchone()
    return status, workflow, instance_id


def renew(c: sqlite3.Connection, leases: Sequence[Lease], expires: float) -> dict[int, str]:
    held: dict[int, str] = {}
    for lease in leases:
        renewed = c.execute(sql.RENEW, (expires, expires, lease.pk, lease.token, lease.owner))
        for (status,) in renewed.fetchall():
            held[lease.pk] = status
    return held


def finish(
    c: sqlite3.Connection, lease: Lease, end: Finish, now: float
) -> tuple[str, str, str, bool, float | None]:
    """The new status, the instance's workflow and id, whether it made another instance
    runnable (its parent, or one parked on a limit its workflow lists), and when it becomes
    runnable again (None: not by time)."""
    row = c.execute(sql.FENCE, (lease.pk, lease.token, lease.owner)).fetchone()
    if row is None:
        raise _lease_lost(lease)
    fence = Fence._make(row)
    for write in end.steps:
        _write_step(c, lease, write)
    woke = False
    ready: float | None = None
    if end.status == "waiting":
        if fence.status == "waitingForPause":
            status, ready = "paused", None
        elif fence.event_seq != end.event_seq:  # an event came meanwhile: run again at once
            status, ready = "waiting", now
        else:
            status, ready = "waiting", end.wake_at
        c.execute(sql.SUSPEND, (status, ready, now, end.parked_on, lease.pk))
    else:
        status = end.status
        error = dumps(end.error, what="error") if end.error is not None else None
        rollback = dumps(end.rollback, what="rollback") if end.rollback is not None else None
        c.execute(sql.END, (status, end.output, error, rollback, now, now, lease.pk))
        if fence.parent is not None:
            woke = _wake_parent(c, loads(fence.parent), now)
    # It runs no more: its slots are free. (A key's next in line brought back wakes nobody: a
    # worker claims after the end of an instance under a limit anyway, asking for as many as
    # ended; a step parked on a named limit is woken.)
    parks_on = end.parked_on if end.status == "waiting" else None
    if flow.freed(c, lease.pk, fence.workflow, fence.key, now, parks_on=parks_on).limit_waiters:
        woke = True
    return status, fence.workflow, fence.id, woke, ready


def _wake_parent(c: sqlite3.Connection, parent: dict[str, Any] | None, now: float) -> bool:
    """A child instance ended: make its parent runnable now if it waits (for the child), and
    bump its ``event_seq`` so a parent activation running meanwhile does not go to sleep."""
    if not parent:
        return False
    c.execute(sql.WAKE_PARENT, (now, parent["workflow"], parent["id"]))
    return True


def release(c: sqlite3.Connection, lease: Lease, now: float) -> None:
    if c.execute(sql.RELEASE, (now, lease.pk, lease.token, lease.owner)).rowcount:
        # Runnable again from now: behind the next in line of its key, who came earlier.
        flow.freed_pk(c, lease.pk, now)
    c.execute(sql.UNREADY_PAUSED, (lease.pk,))


def _lease_lost(lease: Lease) -> LeaseLostError:
    return LeaseLostError(f"lease on instance {lease.pk} lost by worker {lease.owner}")


# -- worker liveness -------------------------------------------------------------------------


def heartbeat(c: sqlite3.Connection, info: WorkerInfo, workflows: str, now: float) -> None:
    """``workflows``: the worker's workflows, as JSON text."""
    c.execute(sql.EXPIRE_WORKERS, (info.id, WORKER_EXPIRE_BEATS, now))
    c.execute(
        sql.UPSERT_WORKER,
        (
            info.id,
            info.host,
            info.pid,
            info.started_at,
            now,
            info.heartbeat,
            workflows,
            info.concurrency,
            info.running,
            worker_versions_json(info),
            worker_patches_json(info),
        ),
    )


def forget_worker(c: sqlite3.Connection, worker_id: str) -> None:
    c.execute(sql.FORGET_WORKER, (worker_id,))
