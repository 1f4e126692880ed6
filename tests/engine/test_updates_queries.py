"""Queries and updates on instances (docs/messaging.md): queries answered from a replay of the
recorded history (no callback runs, nothing is written), updates run once in the activation,
their replies recorded, their steps namespaced, their effect on ``self`` replayed in place."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import stepline
from stepline import (
    IllegalStateError,
    QueryError,
    UpdateFailedError,
    UpdateRejectedError,
    Workflow,
    WorkflowEvent,
    WorkflowStep,
)

from ..conftest import EngineFactory, drain

RUNS: list[Any] = []
LEDGER: list[Any] = []


class Order(Workflow):
    """Prices items in steps, takes updates that add items, ends on a 'close' event."""

    name = "order"

    def __init__(self) -> None:
        self.items: list[int] = []
        self.status = "open"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        for n in range(event.payload.get("steps", 0)):
            price = await step.do(f"price {n}", lambda n=n: RUNS.append(n) or n + 1)
            self.items.append(price)
        self.step = step
        await step.wait_for_event("close", type="close", timeout="1 day")
        self.status = "closed"
        return {"total": sum(self.items), "items": self.items}

    @stepline.query
    def total(self) -> int:
        return sum(self.items)

    @stepline.query("over")
    async def items_over(self, limit: int) -> list[int]:
        return [i for i in self.items if i > limit]

    @stepline.query
    def broken(self) -> int:
        raise KeyError("nothing here")

    @stepline.query
    def sneaky(self) -> int:
        self.items.append(100)
        return 0

    @stepline.query
    def stepping(self) -> int:
        self.step.do("more", lambda: 1)
        return 0

    @stepline.update
    async def add(self, step: WorkflowStep, amount: int) -> dict[str, Any]:
        checked = await step.do("check", lambda: LEDGER.append(amount) or amount)
        self.items.append(checked)
        return {"total": sum(self.items)}

    @add.validator
    def _positive(self, amount: int) -> None:
        if amount <= 0:
            raise ValueError(f"amount must be positive, got {amount}")

    @stepline.update
    async def fail(self, step: WorkflowStep) -> None:
        await step.do("try", lambda: LEDGER.append("try"))
        raise RuntimeError("cannot do that")


@pytest.fixture(autouse=True)
def _reset() -> None:
    RUNS.clear()
    LEDGER.clear()


async def _update(engine: stepline.Engine, inst: stepline.Instance, *args: Any, **kw: Any) -> Any:
    """An update whose reply needs the engine's worker driven meanwhile."""
    task = asyncio.create_task(inst.update(*args, **kw))
    for _ in range(200):
        await drain(engine)
        if task.done():
            break
        await asyncio.sleep(0.005)
    return await task


async def test_a_query_answers_from_the_replayed_history_running_and_writing_nothing(
    make_engine: EngineFactory,
) -> None:
    async with make_engine([Order]) as engine:
        inst = await engine.workflow("order").create(id="o1", params={"steps": 3})
        await drain(engine)
        assert (await inst.status()).status == "waiting"
        steps = await inst.steps()
        assert RUNS == [0, 1, 2]
        assert await inst.query("total") == 6
        assert await inst.query("over", 1) == [2, 3]
        assert RUNS == [0, 1, 2]  # no callback ran
        assert await inst.steps() == steps  # nothing written
        await inst.pause()
        assert await inst.query("total") == 6  # a paused instance answers too


async def test_a_query_on_a_new_instance_sees_run_before_its_first_step(
    make_engine: EngineFactory,
) -> None:
    async with make_engine([Order]) as engine:
        inst = await engine.workflow("order").create(id="o1", params={"steps": 2})
        assert await inst.query("total") == 0
        assert RUNS == []


async def test_a_query_that_cannot_answer_says_why(make_engine: EngineFactory) -> None:
    async with make_engine([Order]) as engine:
        inst = await engine.workflow("order").create(id="o1", params={"steps": 1})
        await drain(engine)
        cases = {
            ("nope",): ("UnknownQueryError", "no query 'nope'"),
            ("total", 1): ("InvalidArgumentsError", "takes ()"),
            ("broken",): ("KeyError", "nothing here"),
            ("sneaky",): (
                "DefinitionError",
                "changed the workflow's state (it changed self.items)",
            ),
            ("stepping",): ("DefinitionError", "called step.do('more')"),
        }
        for args, (name, text) in cases.items():
            with pytest.raises(QueryError) as caught:
                await inst.query(*args)
            assert caught.value.error_name == name, args
            assert text in caught.value.message, args
        assert await inst.query("total") == 1  # the instance is unchanged
        assert (await inst.status()).status == "waiting"


async def test_an_update_runs_once_its_reply_recorded_and_its_steps_namespaced(
    make_engine: EngineFactory,
) -> None:
    async with make_engine([Order]) as engine:
        inst = await engine.workflow("order").create(id="o1", params={"steps": 2})
        await drain(engine)
        reply = await _update(engine, inst, "add", 10, update_id="u1")
        assert reply == {"total": 13}
        assert LEDGER == [10]
        assert await inst.query("total") == 13
        # the same update id: the recorded reply, no second run
        assert await inst.update("add", 10, update_id="u1") == {"total": 13}
        assert await inst.update_result("u1") == {"total": 13}
        assert LEDGER == [10]
        names = [s.display_name for s in await inst.steps()]
        assert "@update:add-1" in names and "@update:add-1/check-1" in names
        # a second update, then run() goes on with both in its state
        assert await _update(engine, inst, "add", 5) == {"total": 18}
        await inst.send_event("close")
        await drain(engine)
        status = await inst.status()
        assert status.status == "complete"
        assert status.output == {"total": 18, "items": [1, 2, 10, 5]}
        assert LEDGER == [10, 5] and RUNS == [0, 1]


async def test_a_turned_down_update_changes_nothing(make_engine: EngineFactory) -> None:
    async with make_engine([Order]) as engine:
        inst = await engine.workflow("order").create(id="o1", params={"steps": 1})
        await drain(engine)
        steps = await inst.steps()
        with pytest.raises(UpdateRejectedError, match="amount must be positive, got -1"):
            await _update(engine, inst, "add", -1, update_id="bad")
        # the validator ran here, on the replayed state: nothing was recorded
        with pytest.raises(LookupError, match="has no update 'bad'"):
            await inst.update_result("bad")
        # with the code here, an unknown name or arguments that do not fit are refused at once
        with pytest.raises(UpdateRejectedError, match="has no update 'nope'"):
            await inst.update("nope")
        with pytest.raises(UpdateRejectedError, match="InvalidArgumentsError"):
            await inst.update("add", 1, 2)
        assert await inst.steps() == steps
        assert (await inst.status()).status == "waiting"
        assert LEDGER == []


async def test_a_client_without_the_code_gets_the_workers_refusal(
    make_engine: EngineFactory, store_url: str
) -> None:
    async with make_engine([Order]) as engine:
        inst = await engine.workflow("order").create(id="o1", params={"steps": 1})
        await drain(engine)
        async with stepline.Engine(store_url, worker=False) as client:
            remote = await client.workflow("order").get("o1")
            for args, error in [(("nope", 1), "UnknownUpdateError"), (("add", -1), "got -1")]:
                task = asyncio.create_task(remote.update(*args))
                while not task.done():
                    await drain(engine)
                    await asyncio.sleep(0.01)
                with pytest.raises(UpdateRejectedError, match=error):
                    await task
        assert (await inst.status()).status == "waiting"
        assert not [s for s in await inst.steps() if s.kind == "update"]  # nothing accepted


async def test_a_failing_handler_answers_with_its_error_and_run_goes_on(
    make_engine: EngineFactory,
) -> None:
    async with make_engine([Order]) as engine:
        inst = await engine.workflow("order").create(id="o1", params={"steps": 1})
        await drain(engine)
        with pytest.raises(UpdateFailedError, match="RuntimeError: cannot do that"):
            await _update(engine, inst, "fail", update_id="f")
        with pytest.raises(UpdateFailedError, match="cannot do that"):
            await inst.update("fail", update_id="f")
        assert LEDGER == ["try"]
        await inst.send_event("close")
        await drain(engine)
        assert (await inst.status()).status == "complete"


async def test_updates_to_finished_instances_are_refused(make_engine: EngineFactory) -> None:
    async with make_engine([Order]) as engine:
        inst = await engine.workflow("order").create(id="o1")
        await drain(engine)
        await inst.send_event("close")
        await drain(engine)
        with pytest.raises(IllegalStateError, match="cannot send an update to"):
            await inst.update("add", 1)


async def test_an_update_left_pending_when_the_instance_ends_fails(
    make_engine: EngineFactory,
) -> None:
    async with make_engine([Order]) as engine:
        inst = await engine.workflow("order").create(id="o1")
        await drain(engine)
        update_id = await inst.send_update("add", 1)
        await inst.terminate()
        with pytest.raises(UpdateFailedError, match="ended terminated before it ran"):
            await inst.update_result(update_id, timeout=5)


async def test_create_and_update_creates_once_and_runs_the_update_once(
    make_engine: EngineFactory,
) -> None:
    async with make_engine([Order]) as engine:
        binding = engine.workflow("order")

        async def call() -> Any:
            return await binding.create_and_update(
                "o9", "add", 4, params={"steps": 1}, update_id="first"
            )

        for _ in range(2):
            task = asyncio.create_task(call())
            while not task.done():
                await drain(engine)
                await asyncio.sleep(0.005)
            assert await task == {"total": 5}
        assert LEDGER == [4]
        assert (await engine.list_instances("order")).instances[0].id == "o9"


async def test_a_client_without_the_code_asks_a_live_worker(
    make_engine: EngineFactory, store_url: str
) -> None:
    async with make_engine([Order], worker=True) as engine:
        inst = await engine.workflow("order").create(id="o1", params={"steps": 2})
        for _ in range(500):
            if (await inst.status()).status == "waiting":
                break
            await asyncio.sleep(0.01)
        async with stepline.Engine(store_url, worker=False) as client:
            remote = await client.workflow("order").get("o1")
            assert await remote.query("total", timeout=10) == 3
            assert await remote.query("over", 1, timeout=10) == [2]
            with pytest.raises(QueryError, match="UnknownQueryError"):
                await remote.query("nope", timeout=10)
    assert RUNS == [0, 1]
    async with stepline.Engine(store_url, worker=False) as client:
        remote = await client.workflow("order").get("o1")
        with pytest.raises(QueryError, match="no live worker serves it"):
            await remote.query("total")


def test_the_sync_facade_queries_and_updates(store_url: str) -> None:
    with stepline.SyncEngine(store_url, [Order], worker=True, poll_interval=0.05) as engine:
        instance = engine.workflow("order").create("s1", {"steps": 1})
        for _ in range(500):
            if instance.status().status == "waiting":
                break
            time.sleep(0.01)
        assert instance.query("total") == 1
        assert instance.update("add", 4, update_id="s-u1", timeout=30) == {"total": 5}
        update_id = instance.send_update("add", 1)
        assert instance.update_result(update_id, timeout=30) == {"total": 6}
        assert instance.read_stream("none").items == []
        reply = engine.workflow("order").create_and_update("s2", "add", 2, timeout=30)
        assert reply == {"total": 2}


async def test_an_update_answered_in_this_process_reaches_its_caller_without_a_read(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker of the caller's process writes the answer: the caller takes it from the
    store's signal, and never reads the answered update back."""
    async with stepline.Engine(store_url, [Order]) as engine:
        inst = await engine.workflow("order").create(id="o1", params={"steps": 1})
        for _ in range(1000):
            if (await inst.record()).status == "waiting":
                break
            await asyncio.sleep(0.01)
        messages = engine.store.messages
        reads: list[Any] = []
        real = messages.get_update

        async def get_update(*args: Any) -> Any:
            found = await real(*args)
            reads.append(found)
            return found

        monkeypatch.setattr(messages, "get_update", get_update)
        assert await inst.update("add", 4, update_id="u1", timeout=10) == {"total": 5}
        assert not [r for r in reads if r is not None and r.answered]
        monkeypatch.undo()
        assert (await inst.update_result("u1")) == {"total": 5}
