"""Updates sent in a process whose worker has room go straight to that worker.

The worker reserves a slot (``Worker.reserve_update``) and the store claims the instance in the
update's send (``MessageStore.send_update_and_claim``) when it can run at once, so the handler
runs without a claim; an instance the send cannot take (limits, another worker's lease) goes
through a claim as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import pytest

import stepline
from stepline import Engine, ManualClock, Workflow, WorkflowEvent, WorkflowStep
from stepline.messages._updates import update_payload
from stepline.store.base import Store

from ..conftest import EngineFactory, drain

pytestmark = pytest.mark.both_loops  # the engine on the CLI's loop too


class Tally(Workflow):
    """Waits for 'close'; its updates add to a total in a step each."""

    name = "tally"

    def __init__(self) -> None:
        self.total = 0

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.wait_for_event("close", type="close")
        return self.total

    @stepline.update
    async def add(self, step: WorkflowStep, n: int) -> int:
        self.total += await step.do("add", lambda: ADDED.append(n) or n)
        return self.total


ADDED: list[int] = []


class LimitedTally(Tally):
    name = "limited-tally"
    concurrency = 5


@contextmanager
def claimed_ids(store: Store) -> Iterator[list[str]]:
    """The ids of the instances the store's claims take while the block runs."""
    claims: list[str] = []
    real_claim = store.claim

    async def claim(*args: Any, **kwargs: Any) -> Any:
        claimed = await real_claim(*args, **kwargs)
        claims.extend(taken.instance.id for taken in claimed.claims)
        return claimed

    store.claim = claim  # type: ignore[method-assign]
    try:
        yield claims
    finally:
        store.claim = real_claim  # type: ignore[method-assign]


async def waiting(engine: Engine, workflow: str) -> stepline.Instance:
    """A new instance once it waits for its event."""
    instance = await engine.workflow(workflow).create()
    for _ in range(200):
        if (await instance.status()).status == "waiting":
            return instance
        await asyncio.sleep(0.02)
    raise AssertionError(f"{workflow} never waited")


async def test_updates_in_the_workers_process_make_no_claims(store_url: str) -> None:
    async with Engine(store_url, [Tally], poll_interval=30) as engine:
        instance = await waiting(engine, "tally")
        await asyncio.sleep(0.05)  # the worker's look after the suspension, if any, is over
        with claimed_ids(engine.store) as claimed:
            for n in range(1, 11):
                assert await instance.update("add", n, timeout=5) == n * (n + 1) // 2
        # (SQLite's worker polls meanwhile: claims that find nothing.)
        assert claimed == [], "a claim took an instance its update's send could"
        assert engine.worker._slots.reserved == 0
        await instance.send_event("close")
        assert (await instance.wait(timeout=5)).output == 55


async def test_an_update_of_a_limited_workflow_goes_through_a_claim(store_url: str) -> None:
    async with Engine(store_url, [LimitedTally], poll_interval=30) as engine:
        assert engine.worker.reserve_update("limited-tally") is None
        instance = await waiting(engine, "limited-tally")
        with claimed_ids(engine.store) as claimed:
            assert await instance.update("add", 3, timeout=5) == 3
        assert claimed == [instance.id], "an instance under limits ran without a claim"


async def test_a_cancelled_update_still_hands_its_instance_over(store_url: str) -> None:
    async with Engine(store_url, [Tally], poll_interval=30) as engine:
        instance = await waiting(engine, "tally")
        task = asyncio.create_task(instance.update("add", 4, update_id="u1"))
        await asyncio.sleep(0)  # the send is under way
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for _ in range(200):  # the send goes on, shielded, and hands over or gives back
            if not engine.worker._slots.reserved:
                break
            await asyncio.sleep(0.02)
        assert engine.worker._slots.reserved == 0
        # Whether or not the send had committed when it was cancelled, nothing waits for a
        # lease to expire: the update was never recorded, or it is answered now.
        with suppress(LookupError):
            assert await instance.update_result("u1", timeout=5) == 4


async def test_an_update_claimed_for_a_worker_that_died_runs_once_its_lease_expires(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    ADDED.clear()
    async with make_engine([Tally], clock=clock) as engine:
        instance = await engine.workflow("tally").create()
        await drain(engine)
        payload = update_payload("u1", "add", [5], engine.settings.max_payload)
        _, claim = await engine.store.messages.send_update_and_claim(
            "tally", instance.id, "u1", "add", payload, owner="gone", lease_seconds=30.0
        )
        assert claim is not None  # its worker dies before it runs anything
        assert await drain(engine) == 0  # leased: no claim takes it
        clock.advance(31)
        assert await drain(engine) == 1
        assert await instance.update_result("u1", timeout=5) == 5
        assert ADDED == [5]
