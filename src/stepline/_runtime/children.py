"""Child workflows: ``step.start_workflow`` and ``step.wait_for_workflow``.

Starting a child is a step: its record holds the child's id, so a replay never starts a second
one. Waiting for a child parks until its deadline; the child's end makes the parent runnable
again (the store does that), and the next activation reads how it ended.
"""

from __future__ import annotations

from typing import Any

from .. import _json
from ..durations import Duration, parse_duration
from ..errors import StepTimeoutError, WorkflowFailedError
from ..payloads import Slot, step_column
from ..records import DEFAULT_VERSION
from ..step import ChildOptions
from ..store.base import NewInstance
from ..workflow import validate_name
from .state import ActivationState
from .writer import StepRef

DEFAULT_CHILD = ChildOptions()


async def start_workflow(
    state: ActivationState,
    workflow: str,
    params: Any,
    child_id: str | None,
    options: ChildOptions = DEFAULT_CHILD,
) -> str:
    validate_name(workflow, what="workflow name")
    # With an explicit id the step is named after it, so concurrent starts of one workflow
    # (DAG branches, gather) replay correctly whatever order they run in.
    name = f"start {workflow}" if child_id is None else f"start {workflow} {child_id}"
    replay, quiet, writer = state.replay, state.quiet, state.writer
    quiet.progress += 1
    key, record = replay.find(name, "start_workflow")
    turns = state.turns
    if turns is not None:
        await turns.reach(key, record)
    if record is not None and record.status == "complete":
        return str(record.output)
    if record is None and replay.check.unvisited:
        await quiet.hold(key)
    step = StepRef(key, replay.seq_for(record), "start_workflow")
    await quiet.gate(key)
    instance = state.instance
    if child_id is None:
        child_id = f"{instance.id[:60]}-{workflow[:30]}-{key[1]}"
    validate_name(child_id, what="instance id")
    what = f"params of child workflow {workflow!r}"
    encoded = await state.settings.payloads.seal(
        _json.dumps(params, what=what, limit=state.encode_limit),
        Slot(workflow, child_id, "params"),
    )
    parent = {"workflow": instance.workflow, "id": instance.id, "step": step.label}
    await writer.committed()  # earlier steps' records, before the child can run
    step.started_at = state.store.now()
    observed = state.observed
    traceparent = None if observed is None else observed.child_traceparent()
    quiet.begin()  # nothing suspends between the child's creation and its record
    state.parenting = True
    try:
        child = NewInstance(
            child_id,
            encoded,
            _json.dumps(parent, what="parent"),
            traceparent=traceparent,
            version=state.settings.child_versions.get(workflow, DEFAULT_VERSION),
            deadline_at=_child_deadline(state, workflow, options, step.started_at),
            parent_pk=instance.pk,
            on_parent_close=options.on_parent_close,
        )
        created = await state.store.create_instances(
            workflow, [child], trigger="workflow", skip_existing=True
        )
        if observed is not None:
            observed.created(workflow, "workflow", len(created))
        await writer.write(
            step, "complete",
            output=_json.dumps(child_id, what="id"), ended_at=state.store.now(),
            info={"workflow": workflow, "id": child_id},
        )  # fmt: skip
    finally:
        quiet.end()
    return child_id


def _child_deadline(
    state: ActivationState, workflow: str, options: ChildOptions, now: float
) -> float | None:
    """The child's own timeout (given here, else its workflow's if this worker knows it) from
    now; without one, the parent's deadline."""
    own = options.timeout
    if own is None and state.settings.timeout_of is not None:
        own = state.settings.timeout_of(workflow)
    return state.instance.deadline_at if own is None else now + own


async def wait_for_workflow(
    state: ActivationState, workflow: str, child_id: str, timeout: Duration
) -> Any:
    seconds = parse_duration(timeout, what="timeout of wait_for_workflow", allow_zero=True)
    name = f"wait {workflow} {child_id}"
    replay, quiet, writer = state.replay, state.quiet, state.writer
    quiet.progress += 1
    key, record = replay.find(name, "wait_for_workflow")
    turns = state.turns
    if turns is not None:
        await turns.reach(key, record)
    info = {"workflow": workflow, "id": child_id}
    if record is not None and record.status == "complete":
        return await state.open(record.output, step_column(*key))
    if record is not None and record.status == "errored":
        error = record.error or {}
        if error.get("name") == "StepTimeoutError":
            raise StepTimeoutError(error.get("message", ""))
        recorded = record.info or {}
        raise WorkflowFailedError(
            workflow, child_id, recorded.get("status", "errored"), recorded.get("child_error")
        )
    if record is None and replay.check.unvisited:
        await quiet.hold(key)
    step = StepRef(key, replay.seq_for(record), "wait_for_workflow")
    await quiet.gate(key)
    now = state.store.now()
    deadline = record.wake_at if record is not None and record.wake_at else now + seconds
    step.started_at = record.started_at if record is not None else now
    quiet.begin()  # nothing suspends between reading the child and recording what was read
    try:
        child = await state.store.get_instance(workflow, child_id)
        observed = state.observed
        if child.status == "complete":
            value = await state.settings.payloads.open(
                child.output, Slot(workflow, child_id, "output")
            )
            output = await state.seal(value, "child output", step_column(*key))
            await writer.write(step, "complete", output=output, ended_at=now, info=info)
            if observed is not None:
                observed.waited("wait_for_workflow", name, key[1], step.started_at, now, "complete")
            return value
        if child.status in ("errored", "terminated"):
            message = f"{workflow} {child_id} ended {child.status}"
            failed = {**info, "status": child.status, "child_error": child.error}
            error = {"name": "WorkflowFailedError", "message": message}
            await writer.write(step, "errored", error=error, ended_at=now, info=failed)
            if observed is not None:
                observed.waited("wait_for_workflow", name, key[1], step.started_at, now, "errored")
            raise WorkflowFailedError(workflow, child_id, child.status, child.error)
        if now >= deadline:
            message = f"{workflow} {child_id} did not end within {seconds:g} seconds"
            error = {"name": "StepTimeoutError", "message": message}
            await writer.write(
                step, "errored", error=error, wake_at=deadline, ended_at=now, info=info
            )
            if observed is not None:
                observed.waited("wait_for_workflow", name, key[1], step.started_at, now, "timeout")
            raise StepTimeoutError(message)
        if record is None:
            await writer.write(step, "waiting", wake_at=deadline, info=info)
    finally:
        quiet.end()
    await quiet.park(deadline, key)
