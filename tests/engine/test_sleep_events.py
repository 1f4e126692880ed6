"""step.sleep, step.sleep_until and step.wait_for_event: durable waits."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from stepline import (
    IllegalStateError,
    ManualClock,
    StepTimeoutError,
    WorkflowEvent,
    WorkflowStep,
    workflow,
)

from ..conftest import EngineFactory, TestEnvFactory, drain

pytestmark = pytest.mark.both_loops  # the engine on the CLI's loop too

RUNS: list[str] = []


@workflow(name="sleeper")
async def sleeper(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.do("before", lambda: RUNS.append("before"))
    await step.sleep("nap", "2 hours")
    return await step.do("after", lambda: RUNS.append("after") or "woke")


@workflow(name="waiter")
async def waiter(event: WorkflowEvent, step: WorkflowStep) -> Any:
    first = await step.wait_for_event("first", type="approval", timeout="1 hour")
    second = await step.wait_for_event("second", type="approval", timeout="1 hour")
    return [first.payload, second.payload, first.type]


@workflow(name="timeouts")
async def timeouts(event: WorkflowEvent, step: WorkflowStep) -> Any:
    try:
        await step.wait_for_event("reply", type="reply", timeout="10 minutes")
    except StepTimeoutError:
        return "gave up"
    return "answered"


@pytest.fixture(autouse=True)
def _reset() -> None:
    RUNS.clear()


async def test_sleep_suspends_and_wakes_on_time(
    make_test_env: TestEnvFactory, clock: ManualClock
) -> None:
    async with make_test_env([sleeper]) as env:
        inst = await env.create("sleeper")
        await env.run_until_idle()
        rec = await inst.client.record()
        assert rec.status == "waiting" and rec.ready_at == pytest.approx(clock() + 7200)
        assert env.engine.worker.active_count == 0  # nothing held in memory while sleeping
        assert await env.advance(7199) == 0  # not a moment early
        assert await env.advance(1) == 1
        assert (await inst.status()).output == "woke"
        assert RUNS == ["before", "after"]
        nap = next(s for s in await inst.steps() if s.kind == "sleep")
        assert nap.status == "complete" and nap.ended_at == pytest.approx(nap.wake_at)


async def test_sleep_survives_engine_restart(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([sleeper], clock=clock) as engine:
        inst = await engine.workflow("sleeper").create(id="s1")
        await drain(engine)
    clock.advance(7200)
    async with make_engine([sleeper], clock=clock) as engine2:
        await drain(engine2)
        status = await (await engine2.workflow("sleeper").get("s1")).status()
        assert status.status == "complete"
    assert RUNS == ["before", "after"]
    del inst


async def test_sleep_until(make_test_env: TestEnvFactory, clock: ManualClock) -> None:
    target = datetime.fromtimestamp(clock() + 500, UTC)

    @workflow(name="until")
    async def until(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.sleep_until("alarm", target)
        await step.sleep_until("past", clock() - 100)  # already due: no wait
        return "rang"

    async with make_test_env([until]) as env:
        inst = await env.create("until")
        await env.run_until_idle()
        assert (await inst.client.record()).ready_at == pytest.approx(target.timestamp())
        await env.advance(500)
        await env.run_until_idle()
        assert (await inst.status()).output == "rang"


async def test_real_time_sleep_wakes_with_running_worker(make_engine: EngineFactory) -> None:
    @workflow(name="short")
    async def short(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.sleep("tiny", "200 milliseconds")
        return "done"

    async with make_engine([short], worker=True, poll_interval=30) as engine:
        inst = await engine.workflow("short").create()
        # the worker sleeps until the timer, not until the 30 s poll
        assert (await inst.wait(timeout=10)).output == "done"


async def test_events_sent_before_the_wait_are_buffered_in_order(
    make_test_env: TestEnvFactory,
) -> None:
    async with make_test_env([waiter]) as env:
        inst = await env.create("waiter")
        await inst.send_event("approval", {"n": 1})
        await inst.send_event("other", {"ignored": True})
        await inst.send_event("approval", {"n": 2})
        await env.run_until_idle()
        assert (await inst.status()).output == [{"n": 1}, {"n": 2}, "approval"]


async def test_event_wakes_a_waiting_instance(make_test_env: TestEnvFactory) -> None:
    async with make_test_env([waiter]) as env:
        inst = await env.create("waiter")
        await env.run_until_idle()
        assert (await inst.status()).status == "waiting"
        await inst.send_event("approval", "yes")
        await env.run_until_idle()
        assert (await inst.status()).status == "waiting"
        await inst.send_event("approval", "again")
        await env.run_until_idle()
        status = await inst.status()
        assert status.output == ["yes", "again", "approval"]
        steps = await inst.steps()
        assert [s.output["payload"] for s in steps] == ["yes", "again"]


async def test_wait_timeout_raises_and_is_catchable(
    make_test_env: TestEnvFactory, clock: ManualClock
) -> None:
    async with make_test_env([timeouts]) as env:
        inst = await env.create("timeouts")
        await env.run_until_idle()
        assert (await inst.client.record()).ready_at == pytest.approx(clock() + 600)
        await env.advance(600)
        await env.run_until_idle()
        assert (await inst.status()).output == "gave up"
        (wait,) = await inst.steps()
        assert wait.status == "errored" and wait.error["name"] == "StepTimeoutError"  # type: ignore[index]


async def test_uncaught_wait_timeout_errors_the_instance(
    make_test_env: TestEnvFactory, clock: ManualClock
) -> None:
    async with make_test_env([waiter]) as env:
        inst = await env.create("waiter")
        await env.run_until_idle()
        await env.advance(3600)
        await env.run_until_idle()
        status = await inst.status()
        assert status.status == "errored"
        assert status.error is not None and status.error["name"] == "StepTimeoutError"


async def test_wait_survives_engine_restart(make_engine: EngineFactory) -> None:
    async with make_engine([waiter]) as engine:
        inst = await engine.workflow("waiter").create(id="w")
        await drain(engine)
        await inst.send_event("approval", 1)
    async with make_engine([waiter]) as engine2:
        await drain(engine2)
        inst2 = await engine2.workflow("waiter").get("w")
        await inst2.send_event("approval", 2)
        await drain(engine2)
        assert (await inst2.status()).output == [1, 2, "approval"]


@pytest.mark.parametrize("bad", ["", "has space", "-leading", "x" * 101, "semi;colon"])
async def test_invalid_event_types_are_rejected(make_engine: EngineFactory, bad: str) -> None:
    async with make_engine([waiter]) as engine:
        inst = await engine.workflow("waiter").create()
        with pytest.raises(ValueError, match="event type"):
            await inst.send_event(bad, None)


async def test_event_to_finished_instance_is_refused(make_engine: EngineFactory) -> None:
    async with make_engine([sleeper]) as engine:
        inst = await engine.workflow("sleeper").create()
        await inst.terminate()
        with pytest.raises(IllegalStateError, match="terminated"):
            await inst.send_event("late", None)


async def test_event_payload_must_be_json(make_engine: EngineFactory) -> None:
    async with make_engine([waiter]) as engine:
        inst = await engine.workflow("waiter").create()
        with pytest.raises(ValueError, match="not JSON"):
            await inst.send_event("approval", object())


async def test_event_sent_while_running_is_not_lost(make_test_env: TestEnvFactory) -> None:
    """An event that arrives after the activation read its events must still wake it."""
    sent = {"done": False}
    holder: dict[str, Any] = {}

    async def send_now() -> int:
        if not sent["done"]:
            sent["done"] = True
            await holder["inst"].send_event("go", "late")
        return 1

    @workflow(name="race")
    async def race(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("send", send_now)
        return (await step.wait_for_event("go", type="go", timeout="1 day")).payload

    async with make_test_env([race]) as env:
        holder["inst"] = inst = await env.create("race")
        await env.run_until_idle()
        assert (await inst.status()).output == "late"


@workflow(name="naps")
async def naps(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.sleep("first", 10)
    await step.sleep("second", 10)
    if event.payload == "slow":
        await step.do("slow", _slow_step)
    return "rested"


SLOW_GATE: dict[str, Any] = {}


async def _slow_step() -> str:
    await SLOW_GATE["event"].wait()
    return "slow done"


async def test_a_sleep_is_written_once_and_read_complete_after_its_wake_time(
    make_test_env: TestEnvFactory, clock: ManualClock
) -> None:
    """Waking writes nothing for the sleep: its one record (written when it started) reads as
    complete, ended at its wake time, once that time has passed."""
    async with make_test_env([naps]) as env:
        inst = await env.create("naps")
        await env.run_until_idle()
        writes: list[tuple[str, str]] = []
        record_step = env.engine.store.record_step

        async def counting(lease: Any, write: Any, now: float) -> str:
            writes.append((write.name, write.status))
            return await record_step(lease, write, now)

        finish = env.engine.store.finish

        async def finishing(lease: Any, end: Any, now: float) -> str:
            writes.extend((write.name, write.status) for write in end.steps)
            return await finish(lease, end, now)

        env.engine.store.record_step = counting  # type: ignore[method-assign]
        env.engine.store.finish = finishing  # type: ignore[method-assign]
        [first] = await inst.steps()
        assert (first.status, first.ended_at) == ("waiting", None)
        clock.advance(10)  # the clock alone: nothing runs
        # due, not yet woken: the sleep is over
        [first] = await inst.client.steps()
        assert (first.status, first.ended_at) == ("complete", first.wake_at)
        await env.run_until_idle()
        await env.advance(10)
        await env.run_until_idle()
        assert (await inst.status()).output == "rested"
        steps = await inst.steps()
        assert [(s.name, s.status, s.ended_at) for s in steps] == [
            ("first", "complete", steps[0].wake_at),
            ("second", "complete", steps[1].wake_at),
        ]
        # the second sleep's start (with its activation's finish); the wake-ups wrote nothing
        assert writes == [("second", "waiting")]


async def test_a_sleep_cut_short_by_termination_stays_waiting(
    make_test_env: TestEnvFactory, clock: ManualClock
) -> None:
    async with make_test_env([naps]) as env:
        inst = await env.create("naps")
        await env.run_until_idle()
        await env.advance(5)
        await inst.client.terminate()
        await env.advance(60)
        [first] = await inst.steps()
        assert (first.status, first.ended_at) == ("waiting", None)
        assert (await inst.status()).status == "terminated"


async def test_a_long_step_after_a_sleep_shows_the_sleep_complete_while_it_runs(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    SLOW_GATE["event"] = asyncio.Event()
    async with make_engine([naps], clock=clock) as engine:
        inst = await engine.workflow("naps").create(params="slow")
        await drain(engine)
        clock.advance(20)
        await drain(engine)  # second sleep recorded
        clock.advance(10)
        running = asyncio.create_task(drain(engine))
        try:
            for _ in range(200):  # the running record comes ~0.2 s into the attempt
                steps = {s.name: s for s in await inst.steps()}
                if "slow" in steps:
                    break
                await asyncio.sleep(0.01)
            assert steps["slow"].status == "running"
            assert steps["second"].status == "complete"
        finally:
            SLOW_GATE["event"].set()
            await running
        assert (await inst.status()).output == "rested"
