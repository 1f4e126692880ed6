"""docs/testing.md, "Mocks": step results, failures, timeouts, events, sleeps, children."""

from __future__ import annotations

import pytest
from shopflows import checkout, order, payment

from stepline import NonRetryableError
from stepline.testing import StepError, WorkflowTestEnv

ORDER = {"id": "o1", "amount": 42}


@pytest.mark.asyncio
async def test_mocked_result() -> None:
    async with WorkflowTestEnv([checkout]) as env:
        inst = await env.create(checkout, id="o1", params=ORDER)
        inst.mock_step("charge", {"charge": "ch-test", "amount": 0})
        assert await inst.step_result("charge") == {"charge": "ch-test", "amount": 0}


@pytest.mark.asyncio
async def test_a_card_declined_twice() -> None:
    async with WorkflowTestEnv([checkout]) as env:
        inst = await env.create(checkout, id="o1", params=ORDER)
        inst.mock_step("charge", error=StepError("card declined", times=2))
        assert await inst.step_result("charge") == {"charge": "ch-o1", "amount": 42}
        attempts = await inst.attempts("charge")
        assert [a.error["message"] if a.error else "ok" for a in attempts] == [
            "card declined",
            "card declined",
            "ok",
        ]
        assert attempts[1].started_at - attempts[0].ended_at == 3600  # the backoff: 1 hour
        assert attempts[2].started_at - attempts[1].ended_at == 7200  # then 2 hours
        await inst.assert_step_ran("charge", times=3)


@pytest.mark.asyncio
async def test_a_card_always_declined_rolls_back() -> None:
    async with WorkflowTestEnv([checkout]) as env:
        inst = await env.create(checkout, id="o1", params=ORDER)
        inst.mock_step("charge", error=NonRetryableError("stolen card"))
        assert await inst.error() == {"name": "NonRetryableError", "message": "stolen card"}
        assert (await inst.rollback())["outcome"] == "complete"  # the reservation released
        assert await inst.steps_run() == ["reserve", "charge", "reserve:rollback"]


@pytest.mark.asyncio
async def test_a_charge_that_times_out() -> None:
    async with WorkflowTestEnv([checkout]) as env:
        inst = await env.create(checkout, id="o1", params=ORDER)
        inst.mock_step("charge", timeout=True)  # every attempt runs past its 1 minute
        error = await inst.error()
        assert error == {
            "name": "StepTimeoutError",
            "message": "step 'charge-1' attempt 4 timed out after 60 seconds",
        }


@pytest.mark.asyncio
async def test_a_slow_charge_times_out_in_virtual_time() -> None:
    async with WorkflowTestEnv([checkout]) as env:
        calls = []

        async def slow_then_quick() -> dict[str, object]:
            calls.append(env.now())
            if len(calls) == 1:
                await env.advance("2 minutes")  # past the step's 1-minute timeout
            return {"charge": "ch-2", "amount": 42}

        inst = await env.create(checkout, id="o1", params=ORDER)
        inst.mock_step("charge", callback=slow_then_quick)
        assert await inst.step_result("charge") == {"charge": "ch-2", "amount": 42}
        first, second = await inst.attempts("charge")
        assert first.error == {
            "name": "StepTimeoutError",
            "message": "step 'charge-1' attempt 1 timed out after 60 seconds",
        }
        assert second.started_at == first.ended_at + 3600  # after the retry's delay


@pytest.mark.asyncio
async def test_events_and_their_timeouts() -> None:
    async with WorkflowTestEnv([checkout]) as env:
        approved = await env.create(checkout, id="o1", params=ORDER)
        await env.send_event(approved, "approval", {"by": "ada"})  # kept until the wait
        approved.disable_sleeps()  # no cooling-off for this one
        assert (await approved.output())["approved_by"] == "ada"

        expired = await env.create(checkout, id="o2", params={"id": "o2", "amount": 1})
        expired.mock_event_timeout("approval")
        assert (await expired.output())["status"] == "expired"
        assert (await expired.steps())[-1].status == "errored"  # the wait, timed out


@pytest.mark.asyncio
async def test_a_stubbed_child() -> None:
    async with WorkflowTestEnv([order, payment]) as env:
        paid = await env.create(order, id="a", params={"amount": 5})
        assert await paid.output() == {"receipt": {"paid": 5}}  # the real child

        refused = await env.create(order, id="b", params={"amount": 5})
        refused.stub_child("payment", error="bank offline")
        assert (await refused.error())["name"] == "WorkflowFailedError"
