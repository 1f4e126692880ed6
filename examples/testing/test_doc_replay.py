"""docs/testing.md, "Replay checks": today's code against an instance's recorded history."""

from __future__ import annotations

from typing import Any

import pytest
from shopflows import checkout

from stepline import WorkflowEvent, WorkflowStep, workflow
from stepline.testing import ReplayError, WorkflowTestEnv

ORDER = {"id": "o1", "amount": 42}


@workflow(name="checkout")
async def checkout_v2(event: WorkflowEvent, step: WorkflowStep) -> Any:
    """The next version: the charge step renamed."""
    order = event.payload
    await step.do("reserve", lambda: f"res-{order['id']}")
    await step.do("charge card", lambda: {"charge": "ch"})
    return await step.wait_for_event("approval", type="approval", timeout="7 days")


@pytest.mark.asyncio
async def test_replay_finds_the_renamed_step() -> None:
    async with WorkflowTestEnv([checkout]) as env:
        inst = await env.create(checkout, id="o1", params=ORDER)
        await inst.send_event("approval", {"by": "ada"})
        await inst.wait()
        await env.replay(inst)  # today's code follows its history
        with pytest.raises(ReplayError, match=r"'charge card-1'.*'charge-1'"):
            await env.replay(inst, checkout_v2)
