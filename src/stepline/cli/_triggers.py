"""The project's queue triggers, as ``stepline consume`` and ``stepline worker`` run them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ..engine import Engine
from ..triggers import QueueTrigger
from ..triggers.queues import Consumer
from ._common import State, cli_errors, fail


def configured_triggers(state: State, names: Sequence[str] = ()) -> list[QueueTrigger]:
    """The ``[[triggers.queue]]`` triggers of the project, all or those named (checked)."""
    project = state.project
    entries = project.queue_triggers
    if names:
        known = [entry.name for entry in entries]
        for name in names:
            if name not in known:
                fail(
                    f"no queue trigger named {name!r} in {project.describe_source()}; "
                    f"configured: {', '.join(known) or 'none'}"
                )
        entries = tuple(entry for entry in entries if entry.name in names)
    with cli_errors():
        return [QueueTrigger.from_entry(entry, project.path) for entry in entries]


async def start_consumers(
    engine: Engine, triggers: Sequence[QueueTrigger]
) -> tuple[list[Consumer], list[asyncio.Task[None]]]:
    """One running consumer per trigger on the opened ``engine``. A configured workflow the
    database does not know stops everything before anything is received."""
    consumers = [Consumer(engine, trigger) for trigger in triggers]
    for consumer in consumers:
        await consumer.check_workflow()
    tasks = [asyncio.create_task(c.run(), name=f"consume-{c.trigger.name}") for c in consumers]
    return consumers, tasks
