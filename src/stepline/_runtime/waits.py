"""Steps that wait: ``step.sleep``, ``step.sleep_until`` and ``step.wait_for_event``.

A wait that cannot end now parks (:mod:`.quiesce`): once the activation is idle it suspends, and
the instance runs again at the wake-up time or when an event arrives.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from .. import _json
from .._shown import shown
from ..durations import Duration, parse_duration
from ..errors import StepTimeoutError
from ..payloads import event_column, step_column
from ..records import EventRecord, InstanceRecord, PendingEvent
from ..step import EventMatch
from ..workflow import validate_name
from .replay import validate_step_name
from .state import ActivationState
from .writer import StepRef

log = logging.getLogger("stepline.runtime")


def _matches(match: EventMatch, event: PendingEvent, label: str, instance: InstanceRecord) -> bool:
    """Whether ``event`` ends a wait with ``match``: its payload has every key and value of a
    dict, or the predicate returns true for it. A predicate that raises does not match (the
    event stays pending for other waits), and says so in the log."""
    payload = event.payload
    if isinstance(match, Mapping):
        return isinstance(payload, Mapping) and all(
            key in payload and payload[key] == value for key, value in match.items()
        )
    try:
        return bool(match(payload))
    except Exception as exc:
        log.warning(
            "instance %s/%s: the predicate of wait_for_event %r raised %s: %s on the %r event "
            "sent at %s; the event does not match and stays pending",
            instance.workflow, instance.id, label, type(exc).__name__, exc, event.type,
            event.timestamp,
        )  # fmt: skip
        return False


async def sleep(state: ActivationState, name: str, duration: Duration) -> None:
    seconds = parse_duration(duration, what=f"duration of sleep {name!r}", allow_zero=True)
    await _sleep(state, name, lambda now: now + seconds)


async def sleep_until(state: ActivationState, name: str, when: datetime | float | int) -> None:
    if isinstance(when, datetime):
        target = (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    elif isinstance(when, int | float) and not isinstance(when, bool):
        target = float(when)
    else:
        raise ValueError(f"sleep_until {name!r}: expected a datetime or epoch seconds")
    await _sleep(state, name, lambda _now: target)


async def _sleep(state: ActivationState, name: str, wake: Callable[[float], float]) -> None:
    validate_step_name(name)
    replay, quiet = state.replay, state.quiet
    quiet.progress += 1
    key, record = replay.find(name, "sleep")
    turns = state.turns
    if turns is not None:
        await turns.reach(key, record)
    if record is not None and record.status == "complete":
        return
    if record is None and replay.check.unvisited:
        await quiet.hold(key)
    step = StepRef(key, replay.seq_for(record), "sleep")
    await quiet.gate(key)
    now = state.store.now()
    if record is not None and record.wake_at:
        wake_at = record.wake_at
    else:
        wake_at = wake(now)
        hooks = state.settings.hooks
        if hooks is not None:
            wake_at = hooks.timer(state.instance, "sleep", name, key[1], wake_at, now)
    step.started_at = record.started_at if record is not None else now
    if record is None and state.observed is not None:
        state.observed.waited("sleep", name, key[1], now, max(now, wake_at), "complete")
    if now >= wake_at:
        # A sleep is recorded once, when it starts, with its wake time: from then on it is over
        # by the clock, for replay here and for readers (the store shows it complete), so
        # waking costs no write. One found over on its first call is recorded complete.
        if record is None:
            await state.writer.write(step, "complete", wake_at=wake_at, ended_at=wake_at)
        return
    if record is None:
        state.emit("step_sleep", {"step": step.label, "until": wake_at})
        state.writer.send(step, "waiting", wake_at=wake_at)
    await quiet.park(wake_at, key)


async def wait_for_event(
    state: ActivationState,
    name: str,
    event_type: str,
    timeout: Duration,
    match: EventMatch | None = None,
) -> EventRecord:
    validate_step_name(name)
    validate_name(event_type, what="event type")
    if not (match is None or isinstance(match, Mapping) or callable(match)):
        raise TypeError(
            f"wait_for_event {name!r}: match must be a dict of payload keys and values or a "
            f"predicate of the payload, not {shown(match)}"
        )
    seconds = parse_duration(timeout, what=f"timeout of wait_for_event {name!r}", allow_zero=True)
    replay, quiet, writer = state.replay, state.quiet, state.writer
    quiet.progress += 1
    key, record = replay.find(name, "wait_for_event")
    turns = state.turns
    if turns is not None:
        await turns.reach(key, record)
    label = f"{name}-{key[1]}"
    if record is not None and record.status == "complete":
        out = await state.open(record.output, step_column(*key))
        return EventRecord(out["type"], out["payload"], out["timestamp"])
    if record is not None and record.status == "errored":
        raise StepTimeoutError(f"wait_for_event {label!r} timed out waiting for {event_type!r}")
    if record is None and replay.check.unvisited:
        await quiet.hold(key)
    step = StepRef(key, replay.seq_for(record), "wait_for_event")
    await quiet.gate(key)
    now = state.store.now()
    if record is not None and record.wake_at:
        deadline = record.wake_at
    else:
        deadline = now + seconds
        hooks = state.settings.hooks
        if hooks is not None:
            deadline = hooks.timer(state.instance, "wait_for_event", name, key[1], deadline, now)
    step.started_at = record.started_at if record is not None else now
    info = {"type": event_type}
    for index, pending in enumerate(state.events):
        if pending.type == event_type and state.settings.payloads.is_sealed(pending.payload):
            opened = await state.open(pending.payload, event_column(pending.type))
            pending = state.events[index] = dataclasses.replace(pending, payload=opened)
        if pending.type == event_type and (
            match is None or _matches(match, pending, label, state.instance)
        ):
            del state.events[index]
            event = EventRecord(pending.type, pending.payload, pending.timestamp)
            output = await state.settings.payloads.seal(
                _json.dumps(event.to_json(), what="event", limit=1 << 62),
                state.slot(step_column(*key)),
            )
            await writer.write(
                step, "complete",
                output=output, wake_at=deadline, ended_at=now, info=info, consume_event=pending.pk,
            )  # fmt: skip
            if state.observed is not None:
                state.observed.waited(
                    "wait_for_event", name, key[1], step.started_at, now, "received"
                )
            state.emit("event_received", {"step": label, "type": event_type})
            return event
    if now >= deadline:
        message = f"no {event_type!r} event within {seconds:g} seconds"
        error = {"name": "StepTimeoutError", "message": message}
        await writer.write(step, "errored", error=error, wake_at=deadline, ended_at=now, info=info)
        if state.observed is not None:
            state.observed.waited("wait_for_event", name, key[1], step.started_at, now, "timeout")
        raise StepTimeoutError(f"wait_for_event {label!r} timed out waiting for {event_type!r}")
    if record is None:
        state.emit("step_wait", {"step": label, "type": event_type, "until": deadline})
        await writer.write(step, "waiting", wake_at=deadline, info=info)
    await quiet.park(deadline, key)
