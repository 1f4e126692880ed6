"""Progress streams (docs/messaging.md): items published from run() are recorded steps (a replay
publishes nothing again), items published from a step's callback are written at once and a
retried attempt does not append them twice; readers get every item after their cursor, once,
in order."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stepline import ManualClock, StepContext, Workflow, WorkflowEvent, WorkflowStep

from ..conftest import EngineFactory, drain

ATTEMPTS: list[int] = []


class Import(Workflow):
    name = "import"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.publish("progress", {"done": 0})

        async def load(ctx: StepContext) -> int:
            ATTEMPTS.append(ctx.attempt)
            for n in (1, 2):
                await step.publish("progress", {"done": n})
            if ctx.attempt == 1:
                raise ConnectionError("dropped")
            await step.publish("progress", {"done": 3})
            return 3

        await step.do("load", {"retries": {"limit": 2, "delay": 0}}, load)
        await step.sleep("pause", "1 hour")
        await step.publish("progress", {"done": "all"})
        log = step.stream("log", keep=2)
        for line in ("a", "b", "c"):
            await log.publish(line)
        return "ok"


class SyncPublisher(Workflow):
    name = "sync-publisher"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        def blocking() -> None:
            step.publish("progress", 1)

        return await step.do("blocking", blocking)


@pytest.fixture(autouse=True)
def _reset() -> None:
    ATTEMPTS.clear()


async def _values(instance: Any, stream: str, after: int = 0) -> list[tuple[int, Any]]:
    return [(i.seq, i.value) async for i in instance.subscribe(stream, after=after, follow=False)]


async def test_items_are_published_once_across_retries_and_replays(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([Import], clock=clock) as engine:
        inst = await engine.workflow("import").create(id="i")
        await drain(engine)
        assert ATTEMPTS == [1, 2]
        assert await _values(inst, "progress") == [
            (1, {"done": 0}), (2, {"done": 1}), (3, {"done": 2}), (4, {"done": 3}),
        ]  # fmt: skip
        clock.advance(3601)
        await drain(engine)  # replays the first publish and the step: nothing again
        assert (await inst.status()).status == "complete"
        progress = await _values(inst, "progress")
        assert [seq for seq, _ in progress] == [1, 2, 3, 4, 5]
        assert progress[-1] == (5, {"done": "all"})
        assert await _values(inst, "progress", after=3) == progress[3:]
        assert await _values(inst, "log") == [(2, "b"), (3, "c")]  # it keeps its last 2
        latest = await inst.streams()
        assert [(i.stream, i.seq, i.value) for i in latest] == [
            ("log", 3, "c"), ("progress", 5, {"done": "all"})
        ]  # fmt: skip
        published = [s.display_name for s in await inst.steps() if s.kind == "publish"]
        assert published == ["@publish:progress-1", "@publish:progress-2"] + [
            f"@publish:log-{n}" for n in (1, 2, 3)
        ]


async def test_a_follower_gets_every_item_once_in_order_then_stops_at_the_end(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([Import], clock=clock) as engine:
        inst = await engine.workflow("import").create(id="i")
        got: list[int] = []

        async def follow() -> None:
            async for item in inst.subscribe("progress"):
                got.append(item.seq)

        reader = asyncio.create_task(follow())
        await drain(engine)
        await asyncio.sleep(0.05)
        assert got == [1, 2, 3, 4] and not reader.done()
        clock.advance(3601)
        await drain(engine)
        await asyncio.wait_for(reader, 5)  # the instance ended: the reader stops
        assert got == [1, 2, 3, 4, 5]


async def test_a_sync_callback_cannot_publish(make_engine: EngineFactory) -> None:
    async with make_engine([SyncPublisher]) as engine:
        inst = await engine.workflow("sync-publisher").create(id="s")
        await drain(engine)
        status = await inst.status()
        assert status.status == "errored"
        assert "make the callback `async def`" in (status.error or {})["message"]
        with pytest.raises(ValueError, match="invalid stream cursor"):
            await _values(inst, "progress", after=-1)


async def test_stream_names_are_checked(make_engine: EngineFactory) -> None:
    async with make_engine([Import]) as engine:
        inst = await engine.workflow("import").create(id="i")
        with pytest.raises(ValueError, match="invalid stream name"):
            await _values(inst, "no spaces")
