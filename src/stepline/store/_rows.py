"""Row <-> record conversion shared by every SQL store (same column order in every dialect)."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any, cast

from .._json import loads
from ..errors import IllegalStateError
from ..records import (
    Attempt,
    InstanceRecord,
    InstanceStatusName,
    PendingEvent,
    StepKind,
    StepRecord,
    StepStatus,
)
from .base import Claim, History, Lease

INSTANCE_COLUMNS = (
    "pk, workflow, id, status, params, output, error, rollback, trigger, created_at, updated_at,"
    " started_at, ended_at, ready_at, lease_owner, parent"
)
STEP_COLUMNS = (
    "name, count, seq, kind, status, output, error, attempts, wake_at, started_at, ended_at, info"
)

INTERRUPTED = {
    "name": "Interrupted",
    "message": "the instance was terminated while this step ran; it was not recorded",
}
"""The error of a step whose activation a termination fenced out while it ran."""

UNFINISHED = ("queued", "running", "paused", "waiting", "waitingForPause")


def instance_from_row(row: Sequence[Any]) -> InstanceRecord:
    return InstanceRecord(
        pk=row[0],
        workflow=row[1],
        id=row[2],
        status=cast(InstanceStatusName, row[3]),
        params=loads(row[4]),
        output=loads(row[5]),
        error=loads(row[6]),
        rollback=loads(row[7]),
        trigger=row[8],
        created_at=row[9],
        updated_at=row[10],
        started_at=row[11],
        ended_at=row[12],
        ready_at=row[13],
        lease_owner=row[14],
        parent=loads(row[15]),
    )


def step_from_row(row: Sequence[Any]) -> StepRecord:
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
    pks: Iterable[int], steps: list[Any], events: list[Any]
) -> dict[int, History]:
    """Histories by instance pk from the rows of ``history_steps`` and ``history_events``."""
    found: dict[int, History] = {pk: History([], []) for pk in pks}
    for row in steps:
        found[row[0]].steps.append(step_from_row(row[1:]))
    for row in events:
        found[row[0]].events.append(PendingEvent(row[1], row[2], loads(row[3]), row[4]))
    return found


def claims_on_creation(created: Iterable[InstanceRecord], owner: str) -> list[Claim]:
    """The claims :meth:`~stepline.store.base.Store.create_and_claim` made: the instances it
    created leased to ``owner`` (token 1, nothing recorded yet)."""
    return [
        Claim(record, Lease(record.pk, 1, owner), None, 0, History([], []))
        for record in created
        if record.lease_owner == owner
    ]
