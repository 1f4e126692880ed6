"""A worker whose claims a fleet-wide limit held back claims again as soon as one of its own
activations of that workflow ends (the slot it freed is written), not at its next poll: with a
poll interval of an hour (and no quick polls after activity), a backlog under
``concurrency = 1`` still drains."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from stepline import Engine, WorkflowEvent, WorkflowStep, workflow

from ..conftest import EngineFactory

COUNT = 6


@workflow(name="one-at-a-time", concurrency=1)
async def one_at_a_time(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("only", lambda: "done")


async def test_a_backlog_under_a_limit_drains_without_polling(make_engine: EngineFactory) -> None:
    async with make_engine([one_at_a_time], poll_interval=3600.0) as engine:
        engine_: Engine = engine
        binding = engine_.workflow("one-at-a-time")
        handles = [await binding.create(f"i{n}") for n in range(COUNT)]
        worker = engine_.worker
        # No poll at all: on SQLite the loop would otherwise look again within milliseconds.
        worker.settings = dataclasses.replace(worker.settings, min_poll_interval=3600.0)
        task = asyncio.create_task(worker.run())
        try:
            # A generous bound: without the wake-up every instance after the first waits for a
            # poll an hour away, so this fails; with it, they all end within moments.
            await asyncio.wait_for(asyncio.gather(*(h.wait() for h in handles)), timeout=60)
        finally:
            engine_.worker.stop()
            await task
        assert [(await h.status()).status for h in handles] == ["complete"] * COUNT
