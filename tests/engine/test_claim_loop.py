"""The claim loop learns when the next timer is only when it is about to wait for it: woken
while a claim was in flight (a notification, or one of its own activations ending), it claims
again at once, and a timer read then would be thrown away. (What it waits for after that is
the claim's own answer, ``Claimed.next_look``, or a read if the claim could not tell.)"""

from __future__ import annotations

import asyncio
from typing import Any

from stepline import WorkflowEvent, WorkflowStep, workflow

from ..conftest import EngineFactory


@workflow(name="looked-for")
async def looked_for(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("only", lambda: "done")


async def test_a_wake_during_a_claim_sends_the_loop_straight_to_the_next_claim(
    make_engine: EngineFactory,
) -> None:
    async with make_engine([looked_for]) as engine:
        store, worker = engine.store, engine.worker
        claim, next_wakeup = store.claim, store.next_wakeup
        calls: list[str] = []

        async def spied_claim(*args: Any, **kwargs: Any) -> Any:
            claims = await claim(*args, **kwargs)
            calls.append("claim")
            if len(calls) == 1:
                worker.wake()  # something became runnable while this claim was in flight
            return claims

        async def spied_next_wakeup(workflows: Any, *routing: Any) -> Any:
            calls.append("look")
            await asyncio.sleep(0)  # SQLite may answer without yielding: no busy loop here
            return await next_wakeup(workflows, *routing)

        store.claim = spied_claim  # type: ignore[method-assign]
        store.next_wakeup = spied_next_wakeup  # type: ignore[method-assign]
        task = asyncio.create_task(worker.run())
        try:
            for _ in range(500):
                if len(calls) >= 2:
                    break
                await asyncio.sleep(0.01)
        finally:
            worker.stop()
            await task
    # Both claims found nothing; the first, woken, is followed by the second at once.
    assert calls[:2] == ["claim", "claim"], calls
