"""Virtual time: the env runs the real engine, and moves its clock only by jumps, from timer to
timer, on both stores."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from stepline import Engine, WorkflowEvent, WorkflowStep, workflow
from stepline.testing import StallError, StepError, StuckError, WorkflowTestEnv

from ._flows import approve, flaky, hangs, naps, timed


async def test_advance_fires_each_timer_at_its_own_time(store_url: str) -> None:
    async with WorkflowTestEnv([naps], store=store_url) as env:
        start = env.now()
        inst = await env.create(naps)
        await env.advance("3 days")
        assert env.now() == start + 3 * 86400
        assert (await inst.status()).output == "rested"
        sleeps = [s for s in await inst.steps() if s.kind == "sleep"]
        assert [s.ended_at for s in sleeps] == [start + 86400, start + 2 * 86400]


async def test_run_until_idle_never_moves_the_clock(store_url: str) -> None:
    async with WorkflowTestEnv([naps], store=store_url) as env:
        start = env.now()
        inst = await env.create(naps)
        assert await env.run_until_idle() == 1
        assert env.now() == start
        assert await inst.steps_run() == ["start", "first"]
        await env.advance("23 hours")
        assert (await inst.status()).status == "waiting"


async def test_advance_says_how_many_activations_it_ran(store_url: str) -> None:
    """So a test can check that passing time woke nothing (a timer not a moment early)."""
    async with WorkflowTestEnv([naps], store=store_url) as env:
        inst = await env.create(naps)
        assert await env.run_until_idle() == 1
        assert await env.advance(86400 - 1) == 0
        assert (await inst.steps_run()) == ["start", "first"]
        assert await env.advance(1) == 1  # the first sleep ends; the second starts
        assert await env.advance("2 days") == 1  # the second ends: done
        assert await env.advance("1 day") == 0
        assert (await inst.status()).output == "rested"


async def test_waits_pass_time_until_they_are_satisfied(store_url: str) -> None:
    async with WorkflowTestEnv([naps, flaky], store=store_url) as env:
        start = env.now()
        inst = await env.create(naps)
        assert await inst.step_result("first") is None
        assert env.now() == start + 86400  # as far as the first sleep's end, no further
        assert await inst.steps_run() == ["start", "first", "second"]
        retried = await env.create(flaky)
        retried.mock_step("call", error=StepError("down", times=3))
        assert await retried.output() == "called"
        attempts = await retried.attempts("call")
        gaps = [b.started_at - a.ended_at for a, b in itertools.pairwise(attempts)]
        assert gaps == [3600, 7200, 14400]  # exponential backoff from 1 hour
        await retried.assert_step_ran("call", times=4)
        with pytest.raises(AssertionError, match=r"'call' of flaky/.* ran 4 times, not 2"):
            await retried.assert_step_ran("call", times=2)


async def test_a_step_taking_virtual_time_times_out(store_url: str) -> None:
    async with WorkflowTestEnv([timed], store=store_url) as env:

        async def slow() -> str:
            await env.advance("61 seconds")
            return "too late"

        inst = await env.create(timed)
        inst.mock_step("slow", callback=slow)
        assert await inst.error() == {
            "name": "StepTimeoutError",
            "message": "step 'slow-1' attempt 1 timed out after 60 seconds",
        }
        quick = await env.create(timed)

        async def in_time() -> str:
            await env.advance("59 seconds")
            return "in time"

        quick.mock_step("slow", callback=in_time)
        assert await quick.output() == "in time"


async def test_a_wait_that_cannot_end_says_what_it_waits_for(store_url: str) -> None:
    async with WorkflowTestEnv([approve], store=store_url) as env:
        inst = await env.create(approve, params="1 day")
        inst.mock_event_timeout("answer")
        assert (await inst.error())["name"] == "StepTimeoutError"  # type: ignore[index]
        assert env.now() == env.clock()
        other = await env.create(approve, params="1 day")
        with pytest.raises(StuckError, match=r"approve/.* ended errored"):
            await other.step_result("never")


async def test_a_callback_that_never_returns_is_named() -> None:
    async with WorkflowTestEnv([hangs], store="memory", stall_after=0.2) as env:
        await env.create(hangs, id="h")
        with pytest.raises(StallError, match=r"hangs/h: step forever-1 attempt 1"):
            await env.run_until_idle()


def naps_v2() -> object:
    """``naps`` as version 2: code the env below does not have."""

    @workflow(name="naps", version="2")
    async def run(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await step.do("start", lambda: "v2")

    return run


async def test_time_passes_to_timers_of_instances_the_env_can_run(store_url: str) -> None:
    """An instance of a version the env's code lacks is due now: the env's worker never claims
    it, so its clock must go on to the env's own timers, as a worker's look does."""
    async with WorkflowTestEnv([naps], store=store_url) as env:
        start = env.now()
        async with Engine(env.url, [naps_v2()], worker=False, clock=env.clock) as other:
            await other.workflow("naps").create("theirs", version="2")
        mine = await env.create(naps)
        assert await mine.output() == "rested"
        assert env.now() == start + 2 * 86400
        theirs = await env.engine.store.get_instance("naps", "theirs")
        assert (theirs.status, theirs.version) == ("queued", "2")
