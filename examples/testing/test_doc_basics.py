"""docs/testing.md, "A first test" and "Time": the environment, virtual time, the end."""

from __future__ import annotations

import pytest
from shopflows import checkout

from stepline.testing import WorkflowTestEnv

ORDER = {"id": "o1", "amount": 42}


@pytest.mark.asyncio
async def test_checkout_ships_after_approval() -> None:
    async with WorkflowTestEnv([checkout]) as env:
        inst = await env.create(checkout, id="o1", params=ORDER)
        await inst.wait_for_status("waiting")  # at the approval
        await inst.send_event("approval", {"by": "ada"})
        assert await inst.output() == {"status": "shipped o1", "approved_by": "ada"}
        assert await inst.steps_run() == ["reserve", "charge", "approval", "cooling-off", "ship"]


@pytest.mark.asyncio
async def test_time_moves_only_when_told() -> None:
    async with WorkflowTestEnv([checkout], store="memory") as env:
        inst = await env.create(checkout, id="o1", params=ORDER)
        await env.run_until_idle()  # runs what can run now: up to the approval
        await inst.send_event("approval", {"by": "ada"})
        await env.run_until_idle()  # the cooling-off sleep starts
        await env.advance("2 days")
        assert (await inst.status()).status == "waiting"
        await env.advance("1 day")  # the sleep ends: shipped
        assert (await inst.status()).status == "complete"


@pytest.mark.asyncio
async def test_an_approval_that_never_comes() -> None:
    async with WorkflowTestEnv([checkout]) as env:
        inst = await env.create(checkout, id="o1", params=ORDER)
        # the wait passes virtual time, timer after timer: the 7 days of the approval pass
        assert await inst.output() == {"status": "expired", "charge": "ch-o1"}
