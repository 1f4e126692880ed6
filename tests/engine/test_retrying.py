"""What a retrying instance looks like to a client: ``status().retry`` and ``Engine.retries``
name the step, its attempt that failed last, that attempt's error and when the next attempt is
due, where the status alone says only ``waiting``; a page of instances costs one read."""

from __future__ import annotations

from typing import Any

import pytest

from stepline import ManualClock, PendingRetry, WorkflowEvent, WorkflowStep, workflow
from stepline.store.base import Store

from ..conftest import EngineFactory, drain

MINUTE = 60.0


def _declined(ctx: Any) -> None:
    raise ValueError(f"card declined on attempt {ctx.attempt}")


@workflow(name="flaky")
async def flaky(event: WorkflowEvent, step: WorkflowStep) -> Any:
    retries = {"limit": 2, "delay": "1 minute", "backoff": "constant"}
    await step.do("prepare", lambda: "ready")
    return await step.do("charge", {"retries": retries}, _declined)


@workflow(name="napper")
async def napper(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.sleep("nap", "1 hour")


@workflow(name="quick")
async def quick(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("once", lambda: 1)


def declined(attempt: int) -> dict[str, str]:
    return {"name": "ValueError", "message": f"card declined on attempt {attempt}"}


async def test_status_of_a_retrying_instance_names_the_failed_attempt_and_the_next(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([flaky], clock=clock) as engine:
        instance = await engine.workflow("flaky").create("a")
        await drain(engine)
        first = clock()
        status = await instance.status()
        assert status.status == "waiting"
        assert status.retry == PendingRetry("charge-1", 1, declined(1), first + MINUTE)
        assert status.retry.to_json() == {
            "step": "charge-1",
            "attempt": 1,
            "error": declined(1),
            "next_attempt_at": first + MINUTE,
        }
        clock.advance(MINUTE)
        await drain(engine)
        assert (await instance.status()).retry == PendingRetry(
            "charge-1", 2, declined(2), first + 2 * MINUTE
        )
        clock.advance(MINUTE)
        await drain(engine)
        ended = await instance.status()
        assert (ended.status, ended.retry) == ("errored", None)


async def test_a_page_of_instances_reads_its_retries_in_one_query(
    make_engine: EngineFactory, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with make_engine([flaky, napper, quick], clock=clock) as engine:
        for n in range(3):
            await engine.workflow("flaky").create(f"flaky-{n}")
        await engine.workflow("napper").create("asleep")
        await engine.workflow("quick").create("done")
        await drain(engine)
        page = await engine.list_instances(limit=10)
        reads: list[str] = []
        store: Store = engine.store
        reading = (
            (store.operations, "unfinished_steps"),
            (store, "get_steps"),
            (store, "get_instance"),
        )
        for target, name in reading:
            real = getattr(target, name)

            async def counted(*args: Any, _name: str = name, _real: Any = real) -> Any:
                reads.append(_name)
                return await _real(*args)

            monkeypatch.setattr(target, name, counted)
        retries = dict(
            zip([r.id for r in page.instances], await engine.retries(page.instances), strict=True)
        )
        assert reads == ["unfinished_steps"]
        expected = PendingRetry("charge-1", 1, declined(1), clock() + MINUTE)
        assert retries == {
            "done": None,
            "asleep": None,
            "flaky-2": expected,
            "flaky-1": expected,
            "flaky-0": expected,
        }
        reads.clear()
        finished = [r for r in page.instances if r.status == "complete"]
        assert await engine.retries(finished) == [None]
        assert reads == []  # nothing unfinished: nothing to read
