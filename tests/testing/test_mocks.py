"""Mocks and stubs apply to the instance they were set on (or every instance), through the
runtime's hooks; mistakes in a test are named."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stepline import WorkflowEvent, WorkflowStep, workflow
from stepline.testing import MockError, NotAwaitedError, StepError, WorkflowTestEnv

from ._flows import flaky, naps, parent


async def test_mocks_of_one_instance_leave_the_others_alone(store_url: str) -> None:
    async with WorkflowTestEnv([naps, flaky], store=store_url) as env:
        quick, slow = await env.create(naps, id="quick"), await env.create(naps, id="slow")
        quick.disable_sleeps()
        quick.mock_step("end", "mocked")
        await env.run_until_idle()
        assert (await quick.status()).output == "mocked"
        assert (await slow.status()).status == "waiting"
        failing = await env.create(flaky)
        failing.mock_step("call", error=StepError("down"))
        assert (await failing.error()) == {"name": "StepError", "message": "down"}
        await failing.assert_step_ran("call", times=4)


async def test_every_instance_mocks_and_forced_timeouts() -> None:
    async with WorkflowTestEnv([flaky]) as env:
        env.mock_step("call", timeout=2, result="mocked")
        inst = await env.create(flaky)
        assert await inst.output() == "mocked"
        states = [a.error["name"] if a.error else "ok" for a in await inst.attempts("call")]
        assert states == ["StepTimeoutError", "StepTimeoutError", "ok"]


@workflow(name="billing")
async def billing(event: WorkflowEvent, step: WorkflowStep) -> Any:
    fee = await step.do("charge fee", lambda: "real fee")
    charge = await step.do("charge", lambda: "real charge")
    upper = await step.do("Charge", lambda: "real Charge")
    return [fee, charge, upper]


async def test_a_mock_matches_its_step_name_exactly(store_url: str) -> None:
    """For every instance or for one: a mock of "charge" is not one of "charge fee" or
    "Charge", nor one of "charge fee" one of "charge"; a mock of "charg" matches nothing."""
    async with WorkflowTestEnv([billing], store=store_url) as env:
        env.mock_step("charge", "every charge")
        every = await env.create(billing, id="every")
        assert await every.output() == ["real fee", "every charge", "real Charge"]
        fee = await env.create(billing, id="fee")
        fee.mock_step("charge fee", "own fee")
        assert await fee.output() == ["own fee", "every charge", "real Charge"]
        own = await env.create(billing, id="own")
        own.mock_step("charge", "own charge")
        assert await own.output() == ["real fee", "own charge", "real Charge"]
        short = await env.create(billing, id="short")
        short.mock_step("charg", "x")
        with pytest.raises(MockError, match=r"mock_step\('charg'\) matched nothing"):
            await short.output()


async def test_children_stubbed_for_every_instance_or_one() -> None:
    @workflow(name="helper")
    async def helper(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await step.do("work", lambda: "real")

    env = WorkflowTestEnv([parent])
    env.stub_workflow("helper", "stubbed")  # not registered: the stub is (before it opens)
    async with env:
        assert await (await env.create(parent)).output() == "stubbed"
    async with WorkflowTestEnv([parent, helper]) as env:
        real, stubbed = await env.create(parent, id="r"), await env.create(parent, id="s")
        stubbed.stub_child("helper", error="no helper today")
        assert await real.output() == "real"
        assert await stubbed.error() == {
            "name": "WorkflowFailedError",
            "message": "workflow 'helper' instance 's-helper-1' ended errored: StubError: "
            "no helper today",
        }


async def test_a_mock_of_a_step_that_never_ran_is_named() -> None:
    async with WorkflowTestEnv([naps]) as env:
        inst = await env.create(naps)
        inst.mock_step("ende", "x")
        with pytest.raises(MockError, match=r"mock_step\('ende'\).*did you mean 'end'\?"):
            await inst.output()
    env = WorkflowTestEnv([naps])
    env.mock_step("strat", "x")
    await (await env.create(naps)).wait()
    with pytest.raises(MockError, match=r"every instance: mock_step\('strat'\).*'start'"):
        await env.close()


async def test_bad_mocks_are_refused_at_once() -> None:
    async with WorkflowTestEnv([naps]) as env:
        with pytest.raises(ValueError, match="give a result, callback=, error= or timeout="):
            env.mock_step("end")
        with pytest.raises(ValueError, match="invalid step name"):
            env.mock_step("x:rollback", 1)
        with pytest.raises(ValueError, match="times must be a whole number"):
            StepError("no", times=0)
        await env.run_until_idle()
        with pytest.raises(MockError, match="register workflows before"):
            env.register(flaky)


async def test_a_call_never_awaited_is_named_by_the_next_one() -> None:
    async with WorkflowTestEnv([naps]) as env:
        inst = await env.create(naps)
        env.advance("1 day")  # type: ignore[unused-coroutine]
        with pytest.raises(NotAwaitedError, match=r"env.advance\('1 day'\) was never awaited"):
            await inst.status()
        # scheduled calls are not forgotten ones
        task = asyncio.ensure_future(env.advance("1 day"))
        both = asyncio.gather(inst.steps_run(), env.run_until_idle())
        steps, _ = await both
        await task
        assert steps[:2] == ["start", "first"]
    env = WorkflowTestEnv([naps])
    inst = await env.create(naps)
    inst.wait()  # type: ignore[unused-coroutine]
    with pytest.raises(NotAwaitedError, match=r"inst.wait\(\) was never awaited"):
        await env.close()
