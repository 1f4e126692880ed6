"""Row <-> record conversion shared by every SQL store (same column order in every dialect).

Each row shape is a named type whose fields are the selected columns, in order: the SQL selects
``columns(RowType._fields)`` and the converter reads the row by those names.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, cast

from .._json import dumps, loads
from ..errors import IllegalStateError
from ..records import (
    Attempt,
    InstanceEvent,
    InstanceRecord,
    InstanceStatusName,
    PendingEvent,
    ScheduleRecord,
    ScheduleSource,
    StepKind,
    StepRecord,
    StepStatus,
    WorkerInfo,
    WorkflowInfo,
)
from .base import Claim, History, Lease, UpdateRecord


def columns(fields: Iterable[str]) -> str:
    """The column list of a row type, for a SELECT: ``columns(InstanceRow._fields)``."""
    return ", ".join(fields)


class InstanceRow(NamedTuple):
    """An ``instances`` row as every store reads it; JSON columns are text."""

    pk: int
    workflow: str
    id: str
    status: str
    params: str | None
    output: str | None
    error: str | None
    rollback: str | None
    trigger: str
    created_at: float
    updated_at: float
    started_at: float | None
    ended_at: float | None
    ready_at: float | None
    lease_owner: str | None
    parent: str | None
    schedule: str | None
    key: str | None
    priority: int
    dedup_key: str | None
    traceparent: str | None
    version: str
    delete_at: float | None
    deadline_at: float | None
    patches: str | None


class ScheduleRow(NamedTuple):
    """A ``schedules`` row; ``params`` is JSON text, ``paused`` a boolean or 0/1."""

    name: str
    workflow: str
    cron: str
    timezone: str
    params: str | None
    catch_up: str
    catch_up_limit: int
    overlap: str
    paused: Any
    last_tick: float | None
    last_instance: str | None
    buffered_tick: float | None
    created_at: float
    updated_at: float
    source: str


class PendingEventRow(NamedTuple):
    """An unconsumed event, read with the instance it belongs to (for histories)."""

    instance_pk: int
    pk: int
    type: str
    payload: str | None
    created_at: float


class EventRow(NamedTuple):
    """An event as :meth:`~stepline.store.base.Store.get_events` lists it."""

    type: str
    payload: str | None
    created_at: float
    consumed_by: str | None


class WorkflowRow(NamedTuple):
    """A ``workflows`` row."""

    name: str
    class_name: str
    created_at: float
    updated_at: float
    definition: str | None
    limits: str | None
    retention: str | None


class WorkerRow(NamedTuple):
    """A ``workers`` row; ``workflows`` is a JSON list."""

    id: str
    host: str
    pid: int
    started_at: float
    last_seen: float
    heartbeat: float
    workflows: str
    concurrency: int
    running: int
    versions: str | None
    patches: str | None


INSTANCE_COLUMNS = columns(InstanceRow._fields)
N_INSTANCE_COLUMNS = len(InstanceRow._fields)
STEP_COLUMNS = (
    "name, count, seq, kind, status, output, error, attempts, wake_at, started_at, ended_at, info"
)
"""A ``steps`` row as every store reads it, in :func:`step_from_row`'s order (not a NamedTuple:
a field ``count`` would hide ``tuple.count``)."""

INTERRUPTED = {
    "name": "Interrupted",
    "message": "the instance was terminated while this step ran; it was not recorded",
}
"""The error of a step whose activation a termination fenced out while it ran."""

UNFINISHED = ("queued", "running", "paused", "waiting", "waitingForPause")


def instance_from_row(row: Sequence[Any]) -> InstanceRecord:
    """The record of a row that begins with the :class:`InstanceRow` columns (more may follow)."""
    (
        pk, workflow, id_, status, params, output, error, rollback, trigger, created_at,
        updated_at, started_at, ended_at, ready_at, lease_owner, parent, schedule, key,
        priority, dedup_key, traceparent, version, delete_at, deadline_at, patches,
    ) = row[:N_INSTANCE_COLUMNS]  # fmt: skip
    return InstanceRecord(
        pk=pk,
        workflow=workflow,
        id=id_,
        status=cast(InstanceStatusName, status),
        params=loads(params),
        output=loads(output),
        error=loads(error),
        rollback=loads(rollback),
        trigger=trigger,
        created_at=created_at,
        updated_at=updated_at,
        started_at=started_at,
        ended_at=ended_at,
        ready_at=ready_at,
        lease_owner=lease_owner,
        parent=loads(parent),
        schedule=loads(schedule),
        key=key,
        priority=priority,
        dedup_key=dedup_key,
        traceparent=traceparent,
        version=version,
        delete_at=delete_at,
        deadline_at=deadline_at,
        patches=tuple(loads(patches)) if patches is not None else (),
    )


def schedule_from_row(row: Sequence[Any]) -> ScheduleRecord:
    """The record of a :class:`ScheduleRow`."""
    r = ScheduleRow._make(row)
    return ScheduleRecord(
        r.name, r.workflow, r.cron, r.timezone, loads(r.params), r.catch_up, r.catch_up_limit,
        r.overlap, bool(r.paused), r.last_tick, r.last_instance, r.buffered_tick, r.created_at,
        r.updated_at, cast(ScheduleSource, r.source),
    )  # fmt: skip


def step_from_row(row: Sequence[Any]) -> StepRecord:
    """The record of a row of the ``STEP_COLUMNS``."""
    # Every activation parses its whole history, row by row: the empty columns (most of them,
    # for most steps) are skipped here rather than in a call each.
    name, count, seq, kind, status, output, error, attempts, wake_at, started, ended, info = row
    return StepRecord(
        name,
        count,
        seq,
        cast(StepKind, kind),
        cast(StepStatus, status),
        None if output is None else loads(output),
        None if error is None else loads(error),
        () if attempts is None else tuple(Attempt.from_json(a) for a in loads(attempts)),
        wake_at,
        started,
        ended,
        None if info is None else loads(info),
    )


def settle_sleeps(
    steps: list[StepRecord], instance: InstanceRecord, now: float
) -> list[StepRecord]:
    """The steps as readers see them: a sleep whose wake time has passed is complete.

    A sleep is written once, when it starts, with its wake time; waking writes nothing more (the
    activation's replay finds it over by the clock too). So a stored ``waiting`` sleep is over
    once its wake time is past, unless the instance ended first (terminated while asleep).
    """
    until = now if instance.ended_at is None else min(now, instance.ended_at)
    return [
        dataclasses.replace(step, status="complete", ended_at=step.wake_at)
        if step.kind == "sleep"
        and step.status == "waiting"
        and step.wake_at is not None
        and step.wake_at <= until
        else step
        for step in steps
    ]


def encode_cursor(pk: int) -> str:
    return base64.urlsafe_b64encode(str(pk).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> int | None:
    if not cursor:
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        pk = int(base64.urlsafe_b64decode(padded.encode()).decode())
        if not 0 <= pk < 2**63:  # a pk is a signed 64-bit integer in every store
            raise ValueError(pk)
        return pk
    except (ValueError, UnicodeDecodeError):
        raise ValueError(
            f"invalid cursor {cursor!r}: pass back a cursor from a previous page"
        ) from None


def control_transition(
    workflow: str, instance_id: str, status: str, leased: bool, action: str, rollback: bool
) -> dict[str, Any]:
    """The column changes a control action makes, or ``IllegalStateError``.

    One state machine for every store. Keys of the result: ``status``, and optionally
    ``ready`` ("now" or None), ``fence`` (bump the lease token and drop the lease), ``control``,
    ``end`` (set ``ended_at``). Restart is handled by the stores (it also deletes steps).
    """
    if action == "pause":
        if status in ("queued", "waiting"):
            return {"status": "paused", "ready": None}
        if status == "running":
            return {"status": "waitingForPause"}
        raise IllegalStateError(workflow, instance_id, status, "pause")
    if action == "resume":
        if status == "paused":
            return {"status": "queued", "ready": "now"}
        if status == "waitingForPause":
            return {"status": "running"}
        raise IllegalStateError(workflow, instance_id, status, "resume")
    if action == "terminate":
        if status not in UNFINISHED:
            raise IllegalStateError(workflow, instance_id, status, "terminate")
        if rollback:
            return {
                "status": "running" if status in ("running", "waitingForPause") else "queued",
                "ready": "now",
                "fence": leased,
                "control": "terminate_rollback",
            }
        return {"status": "terminated", "ready": None, "fence": leased, "end": True}
    raise ValueError(f"unknown action {action!r}")


def control_assignments(change: dict[str, Any], now: float, mark: str) -> tuple[str, list[Any]]:
    """The ``SET`` clause (with ``mark`` as the placeholder) and parameters of a control change."""
    sets = [f"status = {mark}", f"updated_at = {mark}"]
    params: list[Any] = [change["status"], now]
    if "ready" in change:
        sets.append(f"ready_at = {mark}")
        params.append(now if change["ready"] == "now" else None)
    if change.get("fence"):
        sets.append("lease_token = lease_token + 1, lease_owner = NULL, lease_expires_at = NULL")
    if "control" in change:
        sets.append(f"control = {mark}")
        params.append(change["control"])
    if change.get("end"):
        sets.append(f"ended_at = {mark}, control = NULL")
        params.append(now)
    return ", ".join(sets), params


def histories_from_rows(
    pks: Iterable[int], steps: Iterable[Sequence[Any]], events: Iterable[Sequence[Any]]
) -> dict[int, History]:
    """Histories by instance pk from rows of ``instance_pk`` and the ``STEP_COLUMNS`` (``steps``)
    and of :class:`PendingEventRow` (``events``)."""
    found: dict[int, History] = {pk: History([], []) for pk in pks}
    add_history_rows(found, steps, events)
    return found


def add_history_rows(
    histories: Mapping[int, History],
    steps: Iterable[Sequence[Any]],
    events: Iterable[Sequence[Any]],
) -> None:
    """Append the rows of :func:`histories_from_rows` to the histories of their instances."""
    for instance_pk, *step in steps:
        histories[instance_pk].steps.append(step_from_row(step))
    for instance_pk, pk, type_, payload, created_at in events:
        histories[instance_pk].events.append(PendingEvent(pk, type_, loads(payload), created_at))


def claim_from_row(row: Sequence[Any], owner: str) -> Claim:
    """A claim from a row of the instance's :class:`InstanceRow` columns as claimed, then its new
    lease token, ``control`` and ``event_seq``; its history empty, for the caller to fill
    (:func:`add_history_rows`)."""
    token, control, event_seq = row[N_INSTANCE_COLUMNS : N_INSTANCE_COLUMNS + 3]
    record = instance_from_row(row)
    return Claim(record, Lease(record.pk, token, owner), control, event_seq, History([], []))


def event_from_row(row: Sequence[Any]) -> InstanceEvent:
    """The event of an :class:`EventRow`."""
    type_, payload, created_at, consumed_by = row
    return InstanceEvent(type_, loads(payload), created_at, consumed_by)


def workflow_from_row(row: Sequence[Any], counts: Mapping[str, dict[str, int]]) -> WorkflowInfo:
    """The workflow of a :class:`WorkflowRow`, with its instance counts by status (``counts``:
    by workflow name, then status)."""
    name, class_name, created_at, updated_at, definition, limits, retention = row
    return WorkflowInfo(
        name,
        class_name,
        created_at,
        updated_at,
        loads(definition),
        counts.get(name, {}),
        loads(limits),
        loads(retention),
    )


def count_by_version(rows: Iterable[Sequence[Any]]) -> dict[str, dict[str, int]]:
    """Instance counts by version, then status, from rows of (version, status, count)."""
    counts: dict[str, dict[str, int]] = {}
    for version, status, n in rows:
        counts.setdefault(version, {})[status] = int(n)
    return counts


def worker_from_row(row: Sequence[Any]) -> WorkerInfo:
    """The worker of a :class:`WorkerRow`."""
    (
        id_, host, pid, started_at, last_seen, heartbeat, workflows, concurrency, running,
        versions, patches,
    ) = row  # fmt: skip
    served = loads(versions) or {}
    had = loads(patches) if patches is not None else None
    return WorkerInfo(
        id_, host, pid, started_at, last_seen, heartbeat, tuple(loads(workflows)), concurrency,
        running, {name: tuple(found) for name, found in served.items()},
        None if had is None else {
            name: {version: tuple(ids) for version, ids in by_version.items()}
            for name, by_version in had.items()
        },
    )  # fmt: skip


def worker_versions_json(info: WorkerInfo) -> str:
    """What a heartbeat stores of the versions ``info`` serves (JSON text)."""
    served = {name: list(found) for name, found in info.versions.items()}
    return dumps(served, what="worker versions", limit=1 << 24)


def worker_patches_json(info: WorkerInfo) -> str | None:
    """What a heartbeat stores of the patches ``info``'s code has (JSON text; None: unsaid)."""
    if info.patches is None:
        return None
    had = {
        name: {version: sorted(ids) for version, ids in by_version.items()}
        for name, by_version in info.patches.items()
    }
    return dumps(had, what="worker patches", limit=1 << 24)


def claims_on_creation(created: Iterable[InstanceRecord], owner: str) -> list[Claim]:
    """The claims :meth:`~stepline.store.base.Store.create_and_claim` made: the instances it
    created leased to ``owner`` (token 1, nothing recorded yet)."""
    return [
        Claim(record, Lease(record.pk, 1, owner), None, 0, History([], []))
        for record in created
        if record.lease_owner == owner
    ]


def update_from_row(row: Sequence[Any], instance_status: str) -> UpdateRecord:
    """An update of a row of its columns (``update_id, name, status, reply, error, created_at,
    ended_at``; reply and error JSON text), with its instance's status."""
    update_id, name, status, reply, error, created_at, ended_at = row
    return UpdateRecord(
        update_id, name, status, loads(reply), loads(error), created_at, ended_at, instance_status
    )
