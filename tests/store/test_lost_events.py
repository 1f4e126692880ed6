"""No event is ever lost while a worker is claiming, waking or suspending its instance.

The reproduction of a race seen on PostgreSQL: an event that commits while a claim of its
instance is in flight must be seen by that activation, or make the instance runnable again at
once. Each instance waits for ``approve``; a ``noise`` event wakes it (a worker claims it, finds no
``approve``, suspends it again), and ``approve`` follows straight after, so that it lands while the
instance is being claimed or suspended. Several workers with their own connections claim
concurrently; every instance must complete long before the wait's ten-minute timeout.

Runs on both stores; the race only exists where claims and sends overlap in the database
(PostgreSQL), but SQLite must keep the same promise.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest

from stepline import Engine, Workflow, WorkflowEvent, WorkflowStep

INSTANCES = 500
AT_ONCE = 20
ROUNDS = 4


class Approval(Workflow):
    name = "approval"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        approved = await step.wait_for_event("approve", type="approve", timeout="10 minutes")
        return approved.payload


async def _until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _statuses(client: Engine, ids: list[str]) -> dict[str, list[str]]:
    by_status: dict[str, list[str]] = {}
    binding = client.workflow("approval")
    for instance_id in ids:
        status = (await (await binding.get(instance_id)).status()).status
        by_status.setdefault(status, []).append(instance_id)
    return by_status


def _fleet(store_url: str) -> tuple[Engine, list[Engine]]:
    """A client and three workers, each engine with connections of its own."""
    workers = [
        Engine(store_url, [Approval], concurrency=50, poll_interval=0.05, worker_id=f"w{n}")
        for n in range(3)
    ]
    return Engine(store_url, [Approval], worker=False), workers


async def _complete_or_fail(client: Engine, ids: list[str], what: str) -> None:
    async def all_complete() -> bool:
        page = await client.store.list_instances("approval", "complete", 10_000, None)
        return sum(1 for r in page.instances if r.id in set(ids)) == len(ids)

    try:
        await _until(all_complete, 20, "every instance to complete")
    except AssertionError:
        stuck = {k: v for k, v in (await _statuses(client, ids)).items() if k != "complete"}
        pytest.fail(
            f"{what}: events lost, instances not complete: "
            f"{ {k: (len(v), v[:5]) for k, v in stuck.items()} }"
        )


@pytest.mark.slow
async def test_an_event_sent_while_the_instance_is_claimed_is_never_lost(store_url: str) -> None:
    client, workers = _fleet(store_url)
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(client)
        for engine in workers:
            await stack.enter_async_context(engine)
        binding = client.workflow("approval")
        for round_no in range(ROUNDS):
            ids = [f"r{round_no}-{n}" for n in range(INSTANCES)]
            await binding.create_batch([{"id": i} for i in ids])

            async def all_waiting(ids: list[str] = ids) -> bool:
                page = await client.store.list_instances("approval", "waiting", 10_000, None)
                return sum(1 for r in page.instances if r.id in set(ids)) == len(ids)

            await _until(all_waiting, 60, "every instance to wait for 'approve'")

            async def poke(instance_id: str) -> None:
                instance = await binding.get(instance_id)
                await instance.send_event("noise", {})
                await instance.send_event("approve", {"by": instance_id})

            for start in range(0, INSTANCES, AT_ONCE):
                await asyncio.gather(*(poke(i) for i in ids[start : start + AT_ONCE]))

            await _complete_or_fail(client, ids, f"round {round_no}")


@pytest.mark.slow
async def test_an_event_sent_right_after_create_is_never_lost(store_url: str) -> None:
    """The common create-then-send: the event lands while a worker claims the new instance."""
    client, workers = _fleet(store_url)
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(client)
        for engine in workers:
            await stack.enter_async_context(engine)
        binding = client.workflow("approval")
        ids = [f"c{n}" for n in range(INSTANCES * 2)]

        async def create_and_send(instance_id: str) -> None:
            instance = await binding.create(id=instance_id)
            await instance.send_event("approve", {"by": instance_id})

        for start in range(0, len(ids), AT_ONCE):
            await asyncio.gather(*(create_and_send(i) for i in ids[start : start + AT_ONCE]))
        await _complete_or_fail(client, ids, "create then send")
