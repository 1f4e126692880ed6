"""Named limits on a step (``{"limit": "api"}``): at most ``concurrency`` attempts run at once,
at most ``rate`` start per period; a step with no room waits durably (its instance parked,
holding no worker slot) and runs when a release wakes it or its recheck comes; an unknown
limit ends the instance."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from rich.console import Console

from stepline import Engine, Limit, ManualClock, WorkflowEvent, WorkflowStep, workflow
from stepline.cli._render import describe_step
from stepline.config import StepConfig, parse_step_config
from stepline.store.base import Finish, NewInstance

from ..conftest import EngineFactory, TestEnvFactory, drain

SEEN = {"now": 0, "most": 0, "started": 0}
PAIR = asyncio.Event()


def _reset() -> None:
    global PAIR
    PAIR = asyncio.Event()
    SEEN.update(now=0, most=0, started=0)


async def _call() -> str:
    SEEN["now"] += 1
    SEEN["started"] += 1
    SEEN["most"] = max(SEEN["most"], SEEN["now"])
    try:
        if SEEN["started"] <= 2:  # the first two overlap for sure
            if SEEN["started"] == 2:
                PAIR.set()
            await asyncio.wait_for(PAIR.wait(), 10)
        for _ in range(5):
            await asyncio.sleep(0)
    finally:
        SEEN["now"] -= 1
    return "called"


@workflow(name="limited")
async def limited(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("call", {"limit": event.payload["limit"]}, _call)


@workflow(name="free")
async def free(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("only", lambda: "done")


FAILS = {"left": 0}


async def _flaky() -> str:
    if FAILS["left"] > 0:
        FAILS["left"] -= 1
        raise RuntimeError("flaky")
    return "ok"


@workflow(name="flaky")
async def flaky(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("call", {"limit": "api", "retries": {"limit": 2, "delay": 0}}, _flaky)


async def statuses(engine: Engine, workflow_name: str, ids: list[str]) -> list[str]:
    wf = engine.workflow(workflow_name)
    return [(await (await wf.get(i)).status()).status for i in ids]


async def test_no_more_attempts_run_at_once_than_the_limit_allows(
    make_test_env: TestEnvFactory,
) -> None:
    _reset()
    api = Limit("api", concurrency=2)
    async with make_test_env([limited], limits=[api]) as env:
        ids = [f"i{n}" for n in range(5)]
        for instance_id in ids:
            await env.create("limited", instance_id, {"limit": "api"})
        for _ in range(6):
            await env.run_until_idle()
            if set(await statuses(env.engine, "limited", ids)) == {"complete"}:
                break
            await env.advance(30)  # the recheck of a step whose wake-up came before it parked
        assert await statuses(env.engine, "limited", ids) == ["complete"] * 5
        assert (SEEN["most"], SEEN["started"]) == (2, 5)


async def test_a_step_waiting_for_a_slot_holds_no_worker_slot_and_a_release_wakes_it(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    _reset()
    SEEN["started"] = 2  # no pairing
    api = Limit("api", concurrency=1)
    async with make_engine([limited, free], clock=clock, limits=[api], concurrency=1) as engine:
        store = engine.store
        await store.create_instances(
            "holder", [NewInstance("h", None)], trigger="api", skip_existing=False
        )
        (holder,) = (await store.claim("elsewhere", ["holder"], 1, 300, store.now())).claims
        assert await store.flow.acquire_limit(holder.lease, "api", "call-1", store.now()) is None
        waiting = await engine.workflow("limited").create("w", {"limit": "api"})
        other = await engine.workflow("free").create("f")
        await drain(engine)
        assert (await other.status()).status == "complete"  # ran while w waited
        assert (await waiting.status()).status == "waiting"
        (step,) = await waiting.steps()
        assert (step.status, step.info, step.wake_at) == (
            "waiting",
            {"limit": "api"},
            store.now() + 30,
        )
        assert step.attempts == ()
        console = Console(record=True, width=120)
        for part in describe_step(step, now=store.now(), step_output=False, limit=None):
            console.print(part)
        assert "a slot of limit api" in console.export_text()
        clock.advance(1)
        await store.flow.release_limit(holder.lease, "api", "call-1", store.now())
        await drain(engine)
        assert (await waiting.status()).status == "complete"
        (step,) = await waiting.steps()
        assert (step.status, step.output, len(step.attempts)) == ("complete", "called", 1)


@workflow(name="listing", limits=("api",))
async def listing(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("only", lambda: "done")


@pytest.mark.parametrize("end", ["complete", "waiting"])
async def test_an_instance_of_a_listing_workflow_that_stops_running_wakes_a_waiting_step(
    make_engine: EngineFactory, clock: ManualClock, end: str
) -> None:
    """A running instance of a workflow that lists the limit holds a slot of it; when it ends
    or suspends, the step parked on the limit runs at once, not at its recheck."""
    _reset()
    SEEN["started"] = 2  # no pairing
    api = Limit("api", concurrency=1)
    async with make_engine([limited, listing], clock=clock, limits=[api]) as engine:
        store = engine.store
        await store.create_instances(
            "listing", [NewInstance("h", None)], trigger="api", skip_existing=False
        )
        (holder,) = (await store.claim("elsewhere", ["listing"], 1, 300, store.now())).claims
        waiting = await engine.workflow("limited").create("w", {"limit": "api"})
        await drain(engine)
        assert (await waiting.status()).status == "waiting"
        clock.advance(1)
        if end == "complete":
            finish = Finish("complete", output='"done"')
        else:
            finish = Finish("waiting", wake_at=store.now() + 3600)
        await store.finish(holder.lease, finish, store.now())
        await drain(engine)
        assert (await waiting.status()).status == "complete"


async def test_each_attempt_counts_toward_the_rate(make_test_env: TestEnvFactory) -> None:
    _reset()
    SEEN["started"] = 2
    api = Limit("api", rate="2/minute")
    async with make_test_env([limited], limits=[api]) as env:
        ids = ["a", "b", "c"]
        for instance_id in ids:
            await env.create("limited", instance_id, {"limit": "api"})
        t0 = env.now()
        await env.run_until_idle()
        found = dict(zip(ids, await statuses(env.engine, "limited", ids), strict=True))
        assert sorted(found.values()) == ["complete", "complete", "waiting"]
        late = await env.get("limited", next(i for i, s in found.items() if s == "waiting"))
        (step,) = await late.steps()
        assert step.wake_at == t0 + 30  # the recheck comes before the rate reopens
        await env.advance(30)
        (step,) = await late.steps()
        assert (step.status, step.wake_at) == ("waiting", t0 + 60)
        await env.advance(30)
        assert await statuses(env.engine, "limited", ids) == ["complete"] * 3


async def test_an_unknown_limit_ends_the_instance_naming_it(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    _reset()
    async with make_engine([limited], clock=clock, limits=[Limit("api", concurrency=1)]) as engine:
        instance = await engine.workflow("limited").create("x", {"limit": "nope"})
        await drain(engine)
        status = await instance.status()
        assert status.status == "errored"
        assert status.error is not None and status.error["name"] == "DefinitionError"
        assert "'nope'" in status.error["message"] and "'call-1'" in status.error["message"]
        (step,) = await instance.steps()
        assert step.status == "errored" and step.attempts == ()
        assert SEEN["started"] == 0


async def test_every_attempt_takes_a_slot_and_gives_it_back_before_the_next(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    FAILS["left"] = 2
    calls: list[str] = []
    async with make_engine([flaky], clock=clock, limits=[Limit("api", concurrency=1)]) as engine:
        store = engine.store
        acquire, release = store.flow.acquire_limit, store.flow.release_limit

        async def spied_acquire(*args: Any) -> Any:
            calls.append("acquire")
            return await acquire(*args)

        async def spied_release(*args: Any) -> Any:
            calls.append("release")
            return await release(*args)

        store.flow.acquire_limit = spied_acquire  # type: ignore[method-assign]
        store.flow.release_limit = spied_release  # type: ignore[method-assign]
        instance = await engine.workflow("flaky").create("x")
        await drain(engine)
        assert (await instance.status()).status == "complete"
    assert calls == ["acquire", "release"] * 3


async def test_steps_without_a_limit_make_no_store_call_for_one(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([free], clock=clock) as engine:
        store = engine.store

        async def refused(*args: Any) -> Any:
            raise AssertionError("a step without a limit took a slot")

        store.flow.acquire_limit = refused  # type: ignore[method-assign]
        store.flow.release_limit = refused  # type: ignore[method-assign]
        instance = await engine.workflow("free").create("x")
        await drain(engine)
        assert (await instance.status()).status == "complete"


@pytest.mark.parametrize("bad", [5, "", "has space", "x" * 101])
def test_a_bad_limit_in_a_step_config_raises_value_error_naming_the_key(bad: Any) -> None:
    with pytest.raises(ValueError, match="'limit'"):
        parse_step_config({"limit": bad})


def test_the_limit_is_part_of_the_step_config() -> None:
    cfg = parse_step_config({"limit": "api", "timeout": 5})
    assert cfg == StepConfig(timeout=5, limit="api")
    assert cfg.to_json()["limit"] == "api"
    assert "limit" not in StepConfig().to_json()
