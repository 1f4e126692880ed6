"""Workflow deadlines (``timeout``): past it an instance errors with WorkflowTimeoutError after
its rollbacks, whatever it was doing; on both stores, on a manual clock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stepline import (
    ManualClock,
    NonRetryableError,
    Workflow,
    WorkflowEvent,
    WorkflowStep,
    workflow,
)
from stepline.errors import DefinitionError

from ..conftest import EngineFactory, TestEnvFactory, drain

LOG: list[Any] = []
GATE: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _reset() -> None:
    LOG.clear()
    GATE.clear()


def undo(error: BaseException | None, output: Any) -> None:
    LOG.append(("undo", type(error).__name__ if error else None, output))


@workflow(name="sleepy", timeout="1 hour")
async def sleepy(event: WorkflowEvent, step: WorkflowStep) -> str:
    await step.do("book", lambda: "b1", rollback=undo)
    what = (event.payload or {}).get("wait", "sleep")
    if what == "sleep":
        await step.sleep("nap", "1 day")
    elif what == "event":
        await step.wait_for_event("approval", type="approved", timeout="1 day")
    elif what == "retry":
        await step.do("flaky", {"retries": {"limit": 5, "delay": "1 day"}}, _fail)
    return "done"


def _fail() -> None:
    raise RuntimeError("not now")


class Blocking(Workflow):
    name = "blocking"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> str:
        await step.do("book", lambda: "b1", rollback=undo)
        await step.do("slow", _slow)
        await step.do("after", lambda: LOG.append("after ran"))
        return "done"


async def _slow() -> str:
    await GATE["slow"].wait()
    return "slow done"


@pytest.mark.parametrize("wait", ["sleep", "event", "retry"])
async def test_past_its_deadline_an_instance_errors_and_rolls_back(
    make_engine: EngineFactory, clock: ManualClock, wait: str
) -> None:
    async with make_engine([sleepy], clock=clock) as engine:
        inst = await engine.workflow("sleepy").create(params={"wait": wait})
        record = await inst.record()
        assert record.deadline_at == clock() + 3600
        await drain(engine)
        assert (await inst.status()).status == "waiting"
        clock.advance(3599)
        await drain(engine)
        assert (await inst.status()).status == "waiting"
        assert LOG == []
        clock.advance(1)
        await drain(engine)
        status = await inst.status()
        assert status.status == "errored"
        assert status.error is not None and status.error["name"] == "WorkflowTimeoutError"
        assert status.rollback == {"outcome": "complete", "error": None}
        assert LOG == [("undo", "WorkflowTimeoutError", "b1")]
        assert (await inst.record()).deadline_at is None


async def test_a_queued_instance_never_started_errors_at_its_deadline(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([sleepy], clock=clock) as engine:
        inst = await engine.workflow("sleepy").create(timeout="5 minutes")
        await engine.store.control("sleepy", inst.id, "pause")
        clock.advance(300)
        await drain(engine)
        record = await inst.record()
        assert record.status == "errored"
        assert record.error is not None and record.error["name"] == "WorkflowTimeoutError"
        assert record.started_at is None and LOG == []
        assert await inst.steps() == []


async def test_the_deadline_is_carried_out_by_the_store_even_without_a_claim(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    """Held by flow control or not served: the store's sweep still ends it."""
    async with make_engine([sleepy], clock=clock) as engine:
        inst = await engine.workflow("sleepy").create(timeout=60)
        clock.advance(30)
        ahead = await engine.store.closing.expire_deadlines(["sleepy"], clock())
        assert ahead == clock() + 30
        clock.advance(30)
        assert await engine.store.closing.expire_deadlines(["sleepy"], clock()) is None
        assert (await inst.status()).status == "errored"


async def test_a_step_running_past_the_deadline_is_interrupted(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    GATE["slow"] = asyncio.Event()
    async with make_engine([Blocking], clock=clock) as engine:
        inst = await engine.workflow("blocking").create(timeout="10 minutes")
        running = asyncio.create_task(engine.worker.run_once())
        for _ in range(200):
            steps = await inst.steps()
            if any(s.name == "slow" and s.status == "running" for s in steps):
                break
            await asyncio.sleep(0.01)
        clock.advance(600)
        await engine.store.closing.expire_deadlines(["blocking"], clock())
        GATE["slow"].set()  # the step ends, but its activation was fenced out
        await running
        await drain(engine)
        status = await inst.status()
        assert status.status == "errored"
        assert status.error is not None and status.error["name"] == "WorkflowTimeoutError"
        assert "after ran" not in LOG
        assert ("undo", "WorkflowTimeoutError", "b1") in LOG


async def test_create_timeout_overrides_the_workflows(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([sleepy], clock=clock) as engine:
        inst = await engine.workflow("sleepy").create(timeout="2 hours")
        assert (await inst.record()).deadline_at == clock() + 7200


@pytest.mark.parametrize("bad", ["soon", -5, 0, "2 fortnights", True])
async def test_a_bad_timeout_is_refused_naming_it_and_nothing_is_stored(
    make_engine: EngineFactory, bad: Any
) -> None:
    async with make_engine([sleepy]) as engine:
        with pytest.raises(ValueError, match="timeout"):
            await engine.workflow("sleepy").create("x", timeout=bad)
        assert (await engine.workflow("sleepy").list()).instances == []


def test_a_bad_class_timeout_is_a_definition_error() -> None:
    class Bad(Workflow):
        timeout = "whenever"

        async def run(self, event: WorkflowEvent, step: WorkflowStep) -> None:
            pass

    from stepline.workflow import definition_of

    with pytest.raises(DefinitionError, match="whenever"):
        definition_of(Bad)
    assert definition_of(Blocking).timeout is None


async def test_without_a_timeout_nothing_expires(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([Blocking], clock=clock) as engine:
        inst = await engine.workflow("blocking").create()
        assert (await inst.record()).deadline_at is None
        assert await engine.store.closing.expire_deadlines(["blocking"], clock() + 10**9) is None


__all__ = ["NonRetryableError"]


async def test_a_worker_dying_while_carrying_out_a_deadline_leaves_it_to_the_next(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    """The timeout is durable (the instance's control): a worker that claimed the timed-out
    instance and died before ending it is replaced once its lease expires."""
    async with make_engine([sleepy], clock=clock) as engine:
        inst = await engine.workflow("sleepy").create(timeout="10 minutes")
        await drain(engine)
        clock.advance(600)
        await engine.store.closing.expire_deadlines(["sleepy"], clock())
        dead = await engine.store.claim("dead-worker", ["sleepy"], 10, 30, clock())
        assert [c.control for c in dead.claims] == ["timeout"]
        await drain(engine)
        assert (await inst.status()).status == "running"  # the dead worker's lease still lives
        clock.advance(31)
        await drain(engine)
        status = await inst.status()
        assert status.status == "errored"
        assert status.error is not None and status.error["name"] == "WorkflowTimeoutError"
        assert LOG == [("undo", "WorkflowTimeoutError", "b1")]


async def test_a_pending_termination_is_kept_over_a_deadline(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([sleepy], clock=clock) as engine:
        inst = await engine.workflow("sleepy").create(timeout="10 minutes")
        await drain(engine)
        await inst.terminate(rollback=True)
        clock.advance(600)
        await engine.store.closing.expire_deadlines(["sleepy"], clock())
        await drain(engine)
        assert (await inst.status()).status == "terminated"
        assert LOG == [("undo", None, "b1")]


async def test_a_client_without_the_code_applies_the_registered_timeout(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([sleepy], clock=clock):
        pass  # registers "sleepy" with its timeout
    async with make_engine([], clock=clock) as client:
        inst = await client.workflow("sleepy").create()
        assert (await inst.record()).deadline_at == clock() + 3600


async def test_a_running_worker_carries_out_a_deadline_on_time(
    make_engine: EngineFactory,
) -> None:
    """The worker's own loop (real time): it wakes for the deadline while the instance sleeps."""
    async with make_engine([sleepy], worker=True) as engine:
        inst = await engine.workflow("sleepy").create(timeout=0.5)
        status = await inst.wait(timeout=20)
        assert status.status == "errored"
        assert status.error is not None and status.error["name"] == "WorkflowTimeoutError"
        assert LOG == [("undo", "WorkflowTimeoutError", "b1")]


async def test_the_testing_toolkit_passes_time_to_a_deadline(
    make_test_env: TestEnvFactory,
) -> None:
    """A wait passes virtual time from timer to timer: a deadline is one of them."""
    async with make_test_env([sleepy]) as env:
        inst = await env.create(sleepy, id="t1", params={"wait": "event"})
        status = await inst.wait()
        assert status.status == "errored"
        assert status.error is not None and status.error["name"] == "WorkflowTimeoutError"
