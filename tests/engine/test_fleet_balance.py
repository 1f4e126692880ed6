"""Key-limited work spreads over the workers that run it: while a peer with room runs fewer of
a workflow's instances than an even split, a worker takes no more than that split, leaving the
keys its instances free to the peer (``worker._balance``)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from stepline import Engine, WorkflowEvent, WorkflowStep, workflow
from stepline.records import WorkerInfo
from stepline.worker import _shares
from stepline.worker._balance import Balance

from .test_fleet_shares import until_listed
from .test_worker_caps import until

GATES: dict[int, asyncio.Event] = {}


@workflow(name="keyed", key_concurrency=1)
async def keyed(event: WorkflowEvent, step: WorkflowStep) -> Any:
    number: int = event.payload["n"]

    async def gated() -> int:
        await GATES[number].wait()
        return number

    return await step.do("gate", gated)


def _worker(
    worker_id: str,
    *,
    workflows: tuple[str, ...] = ("keyed",),
    running: int = 0,
    age: float = 0,
) -> WorkerInfo:
    now = time.time()
    return WorkerInfo(worker_id, "host", 1, now - 60, now - age, 5.0, workflows, 10, running)


def test_a_worker_caps_itself_at_an_even_split_only_while_a_peer_lags() -> None:
    now = time.time()
    balance = Balance({"keyed": None}, "me", 10)
    me, peer = _worker("me"), _worker("b")
    assert balance.caps({("me", "keyed"): 8}, [me], now) == {}  # alone
    assert balance.caps({("me", "keyed"): 8}, [me, peer], now) == {"keyed": 4}
    # Within SLACK of even is even: no cap, each worker keeps the keys it frees.
    assert balance.caps({("me", "keyed"): 5, ("b", "keyed"): 3}, [me, peer], now) == {}
    assert balance.caps({("me", "keyed"): 7, ("b", "keyed"): 2}, [me, peer], now) == {"keyed": 5}
    three = [me, peer, _worker("c")]
    assert balance.caps({("me", "keyed"): 9}, three, now) == {"keyed": 3}


def test_a_peer_that_does_not_take_the_freed_keys_does_not_shrink_the_split() -> None:
    now = time.time()
    balance = Balance({"keyed": None}, "me", 10)
    workers = [_worker("me"), _worker("b")]
    assert balance.caps({("me", "keyed"): 10}, workers, now) == {"keyed": 5}
    # The worker drained to its split, the peer took nothing: the split stays at 5.
    assert balance.caps({("me", "keyed"): 5}, workers, now) == {"keyed": 5}
    assert balance.caps({("me", "keyed"): 4, ("b", "keyed"): 4}, workers, now) == {}
    # Once even, the largest count seen is forgotten.
    assert balance.caps({("me", "keyed"): 6}, workers, now) == {"keyed": 3}


def test_a_fleet_that_runs_nothing_yet_splits_each_workers_slots() -> None:
    """Workers that start together with a backlog of keys waiting: the first to claim would
    otherwise take every key it has slots for, and keep them as they end."""
    now = time.time()
    workers = [_worker("me"), _worker("b"), _worker("c")]
    assert Balance({"keyed": None}, "me", 10).caps({}, workers, now) == {"keyed": 4}
    assert Balance({"keyed": 2}, "me", 10).caps({}, workers, now) == {"keyed": 1}
    assert Balance({"keyed": None}, "me", 10).caps({}, [_worker("me")], now) == {}  # alone
    # Once something runs, the split goes by what runs.
    balance = Balance({"keyed": None}, "me", 10)
    assert balance.caps({("me", "keyed"): 4, ("b", "keyed"): 3}, workers[:2], now) == {}


def test_peers_that_cannot_take_more_are_not_waited_for() -> None:
    now = time.time()
    counts = {("me", "keyed"): 8}
    not_peers = [
        _worker("dead", age=60),  # its heartbeat is too old
        _worker("full", running=10),  # no free slot at its last heartbeat
        _worker("other", workflows=("something-else",)),
    ]
    assert Balance({"keyed": None}, "me", 10).caps(counts, [_worker("me"), *not_peers], now) == {}
    # At its worker_concurrency for the workflow, a peer has no room for it either.
    capped = Balance({"keyed": 3}, "me", 10)
    assert capped.caps({**counts, ("b", "keyed"): 3}, [_worker("me"), _worker("b")], now) == {}
    assert capped.caps({**counts, ("b", "keyed"): 1}, [_worker("me"), _worker("b")], now) == {
        "keyed": 5
    }


async def test_a_second_worker_gets_the_keys_the_first_frees_until_the_split_is_even(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_shares, "REFRESH", 0.05)
    GATES.clear()
    GATES.update({n: asyncio.Event() for n in range(16)})
    url = f"sqlite:///{tmp_path}/x.db"
    first = Engine(url, [keyed], worker=False, worker_id="first")
    second = Engine(url, [keyed], worker=False, worker_id="second")
    async with first, second:
        tasks = [asyncio.create_task(first.worker.run())]
        try:
            handles = [
                await first.workflow("keyed").create(params={"n": n}, key=f"k{n % 8}")
                for n in range(16)
            ]
            await until(lambda: first.worker.active_count == 8, "the first runs one per key")
            tasks.append(asyncio.create_task(second.worker.run()))
            await until_listed(first, {"first", "second"})
            await until(lambda: bool(first.worker._caps.shares), "the first sees a lagging peer")
            assert first.worker._caps.shares == {"keyed": 4}
            for n in range(4):  # four of the first's instances end: their keys go to the second
                GATES[n].set()
            await until(lambda: second.worker.active_count == 4, "the second takes four")
            await asyncio.sleep(0.1)
            assert (first.worker.active_count, second.worker.active_count) == (4, 4)
            # Even now: the cap lifts, and each worker keeps the keys it frees.
            await until(lambda: not first.worker._caps.shares, "the cap lifts")
            for gate in GATES.values():
                gate.set()
            outputs = [(await h.wait(timeout=10)).output for h in handles]
            assert outputs == list(range(16))
        finally:
            for gate in GATES.values():
                gate.set()
            first.worker.stop()
            second.worker.stop()
            await asyncio.gather(*tasks)
