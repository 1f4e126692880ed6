"""A fleet-wide ``concurrency`` spreads over the live workers that run the workflow: each takes
at most its share, ``ceil(concurrency / n)``, of those with room; a worker alone, or whose peers
are full, takes the whole limit. Two workers (two engines on one database file) in one process."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

from stepline import Engine, WorkflowEvent, WorkflowStep, workflow
from stepline.records import WorkerInfo
from stepline.worker._planning import shares

from .test_worker_caps import until

GATE = asyncio.Event()


async def _gated() -> str:
    await GATE.wait()
    return "through"


@workflow(name="limited", concurrency=4)
async def limited(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("gate", _gated)


def _worker(
    worker_id: str, *, workflows: tuple[str, ...] = ("limited",), running: int = 0, age: float = 0
) -> WorkerInfo:
    now = time.time()
    return WorkerInfo(worker_id, "host", 1, now - 60, now - age, 5.0, workflows, 10, running)


def test_the_share_counts_live_peers_with_room_that_run_the_workflow() -> None:
    now = time.time()
    me = _worker("me")
    assert shares({"limited": 4}, [me], "me", now) == {}  # alone: the whole limit
    assert shares({"limited": 4}, [me, _worker("b")], "me", now) == {"limited": 2}
    assert shares({"limited": 5}, [me, _worker("b"), _worker("c")], "me", now) == {"limited": 2}
    assert shares({"limited": 1}, [me, _worker("b"), _worker("c")], "me", now) == {"limited": 1}
    not_peers = [
        _worker("dead", age=60),  # its heartbeat is too old
        _worker("full", running=10),  # no free slot at its last heartbeat
        _worker("other", workflows=("something-else",)),
    ]
    assert shares({"limited": 4}, [me, *not_peers], "me", now) == {}


async def test_two_workers_split_a_fleet_wide_limit_and_one_alone_takes_it_all(
    tmp_path: Path,
) -> None:
    global GATE
    GATE = asyncio.Event()
    url = f"sqlite:///{tmp_path}/x.db"
    first = Engine(url, [limited], worker=False, worker_id="first")
    second = Engine(url, [limited], worker=False, worker_id="second")
    async with first, second:
        tasks = [asyncio.create_task(first.worker.run())]
        try:
            # The first joins alone; the second joins seeing it, and the first sees the second
            # at its next read of the worker list.
            await until_listed(first, {"first"})
            tasks.append(asyncio.create_task(second.worker.run()))
            await until_listed(first, {"first", "second"})
            await until(lambda: bool(first.worker._caps.shares), "the first sees the second")
            batch = await first.workflow("limited").create_batch([{} for _ in range(8)])
            await until(
                lambda: first.worker.active_count + second.worker.active_count == 4, "4 run"
            )
            await asyncio.sleep(0.1)  # time to take more, if either would
            assert (first.worker.active_count, second.worker.active_count) == (2, 2)
            statuses = Counter([(await i.status()).status for i in batch])
            assert statuses == {"running": 4, "queued": 4}
            # The second stops, giving its instances back: the first, alone again, takes the
            # whole limit once it reads the worker list.
            second.worker.stop(at_once=True)
            await tasks.pop()
            await until(lambda: first.worker.active_count == 4, "the first takes all 4")
            GATE.set()
            for instance in batch:
                assert (await instance.wait(timeout=10)).output == "through"
        finally:
            GATE.set()
            first.worker.stop()
            second.worker.stop()
            await asyncio.gather(*tasks)


async def until_listed(engine: Engine, ids: set[str]) -> None:
    for _ in range(500):
        workers = await engine.store.workers.list_workers()
        if {w.id for w in workers} >= ids:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for workers {sorted(ids)}")


async def test_a_stopping_worker_leaves_the_worker_list_before_it_drains(tmp_path: Path) -> None:
    """It takes no more work from the moment it stops: its peers must not keep its share for
    it while what it runs finishes."""
    global GATE
    GATE = asyncio.Event()
    async with Engine(f"sqlite:///{tmp_path}/x.db", [limited], worker=False, worker_id="w") as e:
        task = asyncio.create_task(e.worker.run())
        try:
            instance = await e.workflow("limited").create()
            await until(lambda: e.worker.active_count == 1, "it runs")
            await until_listed(e, {"w"})
            e.worker.stop()
            for _ in range(500):
                if "w" not in {w.id for w in await e.store.workers.list_workers()}:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the stopping worker is still listed")
            assert e.worker.active_count == 1  # still draining
            GATE.set()
            await task
            assert (await instance.wait(timeout=5)).output == "through"
        finally:
            GATE.set()
            e.worker.stop()
            await asyncio.gather(task, return_exceptions=True)
