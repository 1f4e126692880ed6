"""An update's handler replays in its place: run() does not pass the steps it was parked in
when the handler ran until the handler has replayed, so what run() reads on ``self`` is the
same on every replay; a handler that waits (a retry delay) holds run() until it ends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import stepline
from stepline import ManualClock, RetryAfter, Workflow, WorkflowEvent, WorkflowStep

from ..conftest import EngineFactory, drain

CALLS: list[str] = []


class Gate(Workflow):
    """run() reads, after a wait, what an update set during it."""

    name = "gate"

    def __init__(self) -> None:
        self.approved: bool | None = None
        self.seen: list[Any] = []

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("start", lambda: CALLS.append("start"))
        await step.wait_for_event("tick", type="tick", timeout="1 day")
        self.seen.append(self.approved)
        if self.approved:
            await step.do("approved path", lambda: CALLS.append("approved"))
        else:
            await step.do("other path", lambda: CALLS.append("other"))
        await step.wait_for_event("end", type="end", timeout="1 day")
        return {"seen": self.seen, "approved": self.approved}

    @stepline.update
    async def approve(self, step: WorkflowStep, value: bool) -> str:
        await step.do("note", lambda: CALLS.append(f"note {value}"))
        self.approved = value
        return "noted"

    @stepline.update
    async def slow(self, step: WorkflowStep) -> str:
        await step.do("flaky", {"retries": {"limit": 3}}, _flaky)
        self.approved = True
        return "slow done"

    @stepline.query
    def state(self) -> Any:
        return {"approved": self.approved, "seen": self.seen}


def _flaky() -> str:
    CALLS.append("flaky")
    if CALLS.count("flaky") < 2:
        raise RetryAfter("1 hour", ConnectionError("busy"))
    return "ok"


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()


async def _until_done(engine: stepline.Engine, task: asyncio.Task[Any]) -> Any:
    for _ in range(400):
        await drain(engine)
        if task.done():
            break
        await asyncio.sleep(0.005)
    return await task


async def test_run_reads_what_the_update_set_on_every_replay(make_engine: EngineFactory) -> None:
    async with make_engine([Gate]) as engine:
        inst = await engine.workflow("gate").create(id="g")
        await drain(engine)
        reply = await _until_done(engine, asyncio.create_task(inst.update("approve", True)))
        assert reply == "noted"
        await inst.send_event("tick")
        await drain(engine)  # replays the handler before the tick's wait returns
        assert await inst.query("state") == {"approved": True, "seen": [True]}
        await inst.send_event("end")
        await drain(engine)  # and again, with every step recorded
        status = await inst.status()
        assert status.status == "complete", status
        assert status.output == {"seen": [True], "approved": True}
        assert CALLS == ["start", "note True", "approved"]


async def test_a_waiting_handler_holds_run_until_it_ends(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([Gate], clock=clock) as engine:
        inst = await engine.workflow("gate").create(id="g")
        await drain(engine)
        update_id = await inst.send_update("slow")
        await drain(engine)
        task = asyncio.create_task(inst.update_result(update_id))
        await asyncio.sleep(0.05)
        assert not task.done()  # its step waits an hour for its retry
        await inst.send_event("tick")
        await drain(engine)
        # run() is held where it was (the tick's wait) while the handler waits
        assert await inst.query("state") == {"approved": None, "seen": []}
        clock.advance(3601)
        assert await _until_done(engine, task) == "slow done"
        await drain(engine)
        assert await inst.query("state") == {"approved": True, "seen": [True]}
        await inst.send_event("end")
        await drain(engine)
        status = await inst.status()
        assert status.output == {"seen": [True], "approved": True}
        assert CALLS == ["start", "flaky", "flaky", "approved"]


async def test_updates_run_one_at_a_time_in_the_order_they_came(
    make_engine: EngineFactory,
) -> None:
    async with make_engine([Gate]) as engine:
        inst = await engine.workflow("gate").create(id="g")
        await drain(engine)
        first = await inst.send_update("approve", False)
        second = await inst.send_update("approve", True)
        await drain(engine)
        assert await inst.update_result(first, timeout=5) == "noted"
        assert await inst.update_result(second, timeout=5) == "noted"
        assert CALLS == ["start", "note False", "note True"]
        await inst.send_event("tick")
        await inst.send_event("end")
        await drain(engine)
        assert (await inst.status()).output == {"seen": [True], "approved": True}


async def test_a_termination_with_rollback_ends_an_instance_that_took_updates(
    make_engine: EngineFactory,
) -> None:
    async with make_engine([Gate]) as engine:
        inst = await engine.workflow("gate").create(id="g")
        await drain(engine)
        assert await _until_done(engine, asyncio.create_task(inst.update("approve", True)))
        pending = await inst.send_update("approve", False)
        await inst.terminate(rollback=True)
        await drain(engine)
        assert (await inst.status()).status == "terminated"
        with pytest.raises(stepline.UpdateFailedError, match="ended terminated before it ran"):
            await inst.update_result(pending, timeout=5)
