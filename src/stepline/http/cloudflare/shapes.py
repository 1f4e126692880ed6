"""Stepline's records in the shapes of Cloudflare's Workflows API: workflows, their one version,
instances as listed and as described (the ``steps`` that ``wrangler workflows instances
describe`` prints), and single steps. docs/cloudflare.md tables what maps to what.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from ...records import INSTANCE_STATUSES, Attempt, InstanceRecord, StepRecord, WorkflowInfo
from ...values import readable

_IDS = uuid.UUID("6d3c1f0e-5b1a-4f7e-9a52-7f0c2b8e4d11")
"""Namespace of the ids stepline derives for what Cloudflare has and stepline has not: a
workflow's id and its version's id (stepline keeps no versions: each workflow has one)."""

#: stepline's trigger -> Cloudflare's trigger source. The HTTP APIs are Cloudflare's REST API;
#: a Python call (``WorkflowBinding.create``) is what a Worker's binding is there.
TRIGGER_SOURCES = {"http": "api", "cli": "api", "api": "binding", "cron": "cron", "queue": "event"}
#: stepline's step kind -> Cloudflare's step type (a child workflow's start is a step).
STEP_TYPES = {
    "do": "step",
    "rollback": "rollback",
    "start_workflow": "step",
    "sleep": "sleep",
    "wait_for_event": "waitForEvent",
    "wait_for_workflow": "waitForEvent",
}


def iso(timestamp: float | None) -> str | None:
    """Seconds since the epoch as Cloudflare writes times: UTC, milliseconds, ``Z``; strings of
    one length, so that sorting them as text (as wrangler does) sorts them in time."""
    if timestamp is None:
        return None
    moment = datetime.fromtimestamp(timestamp, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def workflow_id(name: str) -> str:
    return str(uuid.uuid5(_IDS, f"workflow:{name}"))


def version_id(name: str) -> str:
    return str(uuid.uuid5(_IDS, f"version:{name}"))


def trigger_source(trigger: str) -> str:
    return TRIGGER_SOURCES.get(trigger, "unknown")


def _script_and_class(class_name: str) -> tuple[str, str]:
    """``module:Class`` as Cloudflare's (script name, class name): the module is the script."""
    module, _, attribute = class_name.rpartition(":")
    return (module, attribute) if module else ("", class_name)


def workflow_json(info: WorkflowInfo) -> dict[str, Any]:
    """A workflow as listed and described, with its instance counts by status."""
    script, cls = _script_and_class(info.class_name)
    return {
        "id": workflow_id(info.name),
        "name": info.name,
        "class_name": cls,
        "script_name": script,
        "created_on": iso(info.created_at),
        "modified_on": iso(info.updated_at),
        "triggered_on": None,
        "instances": {**dict.fromkeys(INSTANCE_STATUSES, 0), **info.counts},
    }


def version_json(info: WorkflowInfo) -> dict[str, Any]:
    """The one version of a workflow: its current registration."""
    concurrency = (info.limits or {}).get("concurrency")
    return {
        "id": version_id(info.name),
        "workflow_id": workflow_id(info.name),
        "class_name": _script_and_class(info.class_name)[1],
        "created_on": iso(info.created_at),
        "modified_on": iso(info.updated_at),
        "has_dag": False,
        "language": "python",
        "concurrency": {"limit": concurrency} if concurrency is not None else None,
    }


def created_json(record: InstanceRecord) -> dict[str, Any]:
    """What a create answers for each instance."""
    return {
        "id": record.id,
        "status": record.status,
        "version_id": version_id(record.workflow),
        "workflow_id": workflow_id(record.workflow),
        "trigger_source": trigger_source(record.trigger),
    }


def instance_summary(record: InstanceRecord) -> dict[str, Any]:
    """An instance as listed."""
    return {
        **created_json(record),
        "created_on": iso(record.created_at),
        "modified_on": iso(record.updated_at),
        "started_on": iso(record.started_at),
        "ended_on": iso(record.ended_at),
    }


def _success(status: str) -> bool | None:
    return True if status == "complete" else False if status == "errored" else None


def instance_detail(
    record: InstanceRecord,
    steps: list[StepRecord],
    *,
    simple: bool = False,
    newest_first: bool = False,
) -> dict[str, Any]:
    """An instance as ``GET .../instances/{id}`` describes it; ``simple`` leaves the steps out."""
    shown = [step_json(step) for step in steps]
    if record.status == "terminated":
        shown.append({"type": "termination", "trigger": {"source": "unknown"}})
    if newest_first:
        shown.reverse()
    detail: dict[str, Any] = {
        "status": record.status,
        "params": readable(record.params),
        "output": readable(record.output),
        "error": record.error,
        "success": _success(record.status),
        "queued": iso(record.created_at),
        "start": iso(record.started_at),
        "end": iso(record.ended_at),
        "trigger": {"source": trigger_source(record.trigger)},
        "versionId": version_id(record.workflow),
        "step_count": len(steps),
        "steps": [] if simple else shown,
    }
    if record.rollback is not None:
        detail["rollback"] = {
            "outcome": record.rollback.get("outcome"),
            "error": record.rollback.get("error"),
        }
    if record.schedule is not None:
        detail["schedule"] = {
            "cron": record.schedule.get("cron"),
            "scheduledTime": (record.schedule.get("tick") or 0) * 1000,
        }
    return detail


def _attempt_json(attempt: Attempt) -> dict[str, Any]:
    return {
        "start": iso(attempt.started_at),
        "end": iso(attempt.ended_at),
        "success": {"success": True, "running": None}.get(attempt.state, False),
        "error": attempt.error,
    }


def _retry_delay(step: StepRecord) -> float | None:
    """Milliseconds from a failed last attempt to the retry it waits for: wrangler shows when a
    waiting step runs again from this. Stepline records no other part of a step's config."""
    if step.status != "waiting" or not step.attempts or step.wake_at is None:
        return None
    last = step.attempts[-1]
    if last.error is None or last.ended_at is None:
        return None
    return max(0.0, (step.wake_at - last.ended_at) * 1000)


def step_json(step: StepRecord) -> dict[str, Any]:
    """One step as ``describe`` lists it: ``name`` is ``name-count``, as in Cloudflare."""
    kind = STEP_TYPES.get(step.kind, "step")
    data: dict[str, Any] = {
        "name": step.display_name,
        "type": kind,
        "start": iso(step.started_at),
        "end": iso(step.ended_at),
    }
    if kind in ("step", "rollback"):
        data["success"] = _success(step.status)
        data["attempts"] = [_attempt_json(attempt) for attempt in step.attempts]
        data["config"] = {
            "retries": {"limit": None, "delay": _retry_delay(step), "backoff": None},
            "timeout": None,
        }
        if step.status == "complete":
            data["output"] = readable(step.output)
        return data
    finished = step.status == "complete"
    if not finished and step.wake_at is not None:
        data["end"] = iso(step.wake_at)  # when the sleep ends or the wait times out
    data["finished"] = finished
    data["error"] = step.error
    if kind == "waitForEvent":
        data["event_type"] = (step.info or {}).get("type")
        if finished:
            data["output"] = readable(step.output)
    return data


def step_status(step: StepRecord, attempt: Attempt | None) -> str:
    """A step's (or one attempt's) status as ``GET .../step`` reports it."""
    if attempt is None:
        return step.status
    return {"success": "complete", "running": "running"}.get(attempt.state, "errored")
