"""Records as the client shows them: their sealed values opened, sensitive results redacted."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..records import InstanceEvent, InstanceRecord, StepRecord
from ..store.types import StreamItem
from .codec import (
    PayloadCodec,
    Slot,
    event_column,
    step_column,
    stream_column,
    update_column,
)

REDACTED = "[redacted]"
"""What a step run with ``{"sensitive": True}`` shows instead of its result."""


def is_sensitive(step: StepRecord) -> bool:
    """Whether the step was run with ``{"sensitive": True}`` (its result is never shown)."""
    return bool(step.info and step.info.get("sensitive"))


async def open_instance(codec: PayloadCodec, record: InstanceRecord) -> InstanceRecord:
    """``record`` with its params and output opened."""
    if not (codec.is_sealed(record.params) or codec.is_sealed(record.output)):
        return record
    params = await codec.open(record.params, Slot(record.workflow, record.id, "params"))
    output = await codec.open(record.output, Slot(record.workflow, record.id, "output"))
    return dataclasses.replace(record, params=params, output=output)


async def open_instances(
    codec: PayloadCodec, records: Sequence[InstanceRecord]
) -> list[InstanceRecord]:
    return [await open_instance(codec, record) for record in records]


async def open_steps(
    codec: PayloadCodec,
    workflow: str,
    instance_id: str,
    steps: Sequence[StepRecord],
    *,
    redact: bool = False,
) -> list[StepRecord]:
    """The steps with their results opened; with ``redact`` those of sensitive steps read
    :data:`REDACTED` (and are not even fetched)."""
    shown: list[StepRecord] = []
    for step in steps:
        slot = Slot(workflow, instance_id, _column(step))
        if step.kind == "update" and step.info and codec.is_sealed(step.info.get("args")):
            args = await codec.open(step.info["args"], slot)
            step = dataclasses.replace(step, info={**step.info, "args": args})
        if redact and is_sensitive(step) and step.output is not None:
            step = dataclasses.replace(step, output=REDACTED)
        elif codec.is_sealed(step.output):
            step = dataclasses.replace(step, output=await codec.open(step.output, slot))
        shown.append(step)
    return shown


def _column(step: StepRecord) -> str:
    """Where a step's result is sealed: an update's reply (and arguments) by its update id."""
    update_id = step.info.get("update") if step.kind == "update" and step.info else None
    if isinstance(update_id, str):
        return update_column(update_id)
    return step_column(step.name, step.count)


async def open_events(
    codec: PayloadCodec, workflow: str, instance_id: str, events: Sequence[InstanceEvent]
) -> list[InstanceEvent]:
    shown: list[InstanceEvent] = []
    for event in events:
        if codec.is_sealed(event.payload):
            slot = Slot(workflow, instance_id, event_column(event.type))
            event = dataclasses.replace(event, payload=await codec.open(event.payload, slot))
        shown.append(event)
    return shown


async def open_stream_items(
    codec: PayloadCodec, workflow: str, instance_id: str, items: Sequence[StreamItem]
) -> list[StreamItem]:
    """Stream items with their (encrypted) values opened."""
    if not any(codec.is_sealed(item.value) for item in items):
        return list(items)
    shown: list[StreamItem] = []
    for item in items:
        slot = Slot(workflow, instance_id, stream_column(item.stream))
        shown.append(dataclasses.replace(item, value=await codec.open(item.value, slot)))
    return shown
