"""The flow-control fleet test: three worker processes on each store run 1,000 instances of
limited workflows; the ledger their steps return (each callback's start and end) proves that no
concurrency, key or shared limit was exceeded, the rate limit's starts (``started_at``) never
exceeded its count in any period, and a fleet-wide serial workflow started its instances in
priority order. A second test SIGKILLs a worker holding both slots of a limit: the slots free
only when its leases expire."""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import pytest

from stepline import Engine, InstanceRecord
from stepline.held import read_held_reasons

from .._procs import WorkerPool
from ._fleet_flows import (
    CAPPED,
    CAPPED_LIMIT,
    HELD,
    KEYED,
    LIMITS,
    RATE,
    RATED,
    SERIAL,
    SHARED_A,
    SHARED_B,
    SHARED_LIMIT,
    WORKFLOWS,
)

pytestmark = pytest.mark.slow

FLOWS = "tests.flow._fleet_flows"
KEYS = 10
COUNTS = {CAPPED: 340, KEYED: 300, RATED: 100, SHARED_A: 100, SHARED_B: 100, SERIAL: 60}


def max_overlap(spans: Iterable[tuple[float, float]]) -> int:
    """The most spans open at one moment (a span ending as another begins does not overlap)."""
    edges = sorted(
        [(begin, 1) for begin, _ in spans] + [(end, -1) for _, end in spans],
        key=lambda edge: (edge[0], edge[1]),
    )
    most = open_now = 0
    for _, change in edges:
        open_now += change
        most = max(most, open_now)
    return most


async def records_of(client: Engine, workflow: str) -> list[InstanceRecord]:
    found: list[InstanceRecord] = []
    cursor = None
    while True:
        page = await client.list_instances(workflow, limit=500, cursor=cursor, oldest_first=True)
        found += page.instances
        cursor = page.cursor
        if cursor is None:
            return found


async def wait_complete(
    client: Engine, pool: WorkerPool, counts: dict[str, int], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        pool.check_alive()
        infos = {info.name: info.counts for info in await client.list_workflows()}
        done = {name: infos.get(name, {}).get("complete", 0) for name in counts}
        if done == counts:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not all complete after {timeout} s: {done}\n{pool.report()}")
        await asyncio.sleep(0.1)


def spans(records: Iterable[InstanceRecord]) -> list[tuple[float, float]]:
    return [(float(r.output[0]), float(r.output[1])) for r in records]


async def test_three_workers_never_exceed_a_limit(store_url: str, tmp_path: Path) -> None:
    pool = WorkerPool(store_url, tmp_path, lease=30, concurrency=50, workflows=FLOWS)
    rng = random.Random(20)
    priorities = [rng.randint(-3, 3) for _ in range(COUNTS[SERIAL])]
    try:
        # The client registers the workflows and limits, so that everything is queued before
        # any worker claims (the priority check needs the whole backlog there).
        async with Engine(store_url, WORKFLOWS, worker=False, limits=LIMITS) as client:
            for name in (CAPPED, RATED, SHARED_A, SHARED_B):
                await client.workflow(name).create_batch([{} for _ in range(COUNTS[name])])
            await client.workflow(KEYED).create_batch(
                [{"key": f"k{i % KEYS}"} for i in range(COUNTS[KEYED])]
            )
            await client.workflow(SERIAL).create_batch(
                [{"id": f"s{i:03d}", "priority": p} for i, p in enumerate(priorities)]
            )
            workers = [pool.start() for _ in range(3)]
            pool.wait_ready(workers)
            await wait_complete(client, pool, COUNTS, timeout=120)
            found = {name: await records_of(client, name) for name in COUNTS}
        pool.stop_all()
    finally:
        pool.cleanup()

    capped = max_overlap(spans(found[CAPPED]))
    assert 2 <= capped <= CAPPED_LIMIT, capped
    by_key: dict[str | None, list[InstanceRecord]] = defaultdict(list)
    for record in found[KEYED]:
        by_key[record.key].append(record)
    assert sorted(by_key) == sorted(f"k{i}" for i in range(KEYS))
    assert all(max_overlap(spans(records)) == 1 for records in by_key.values())
    assert max_overlap(spans(found[KEYED])) > 1  # the keys ran side by side
    shared = max_overlap(spans(found[SHARED_A] + found[SHARED_B]))
    assert 2 <= shared <= SHARED_LIMIT, shared

    count, period = RATE
    starts = sorted(float(r.started_at or 0) for r in found[RATED])
    for first, later in zip(starts, starts[count:], strict=False):
        assert later - first >= period - 1e-6, (first, later)

    assert max_overlap(spans(found[SERIAL])) == 1
    # In the order they ran: the ledger's spans, on the machine's one clock (``started_at`` is
    # each worker's estimate of the PostgreSQL server's clock, which may differ by a few ms
    # between processes, more than the gap between two serial instances).
    by_start = sorted(found[SERIAL], key=lambda r: float(r.output[0]))
    expected = sorted(range(len(priorities)), key=lambda i: (priorities[i], i))
    assert [r.id for r in by_start] == [f"s{i:03d}" for i in expected]


async def test_a_killed_workers_slots_free_when_its_leases_expire(
    store_url: str, tmp_path: Path
) -> None:
    # Renewed every third of a lease: a lease of 6 s leaves 2 s for a worker or this test
    # slowed by a busy machine before the checks below could see a slot freed early.
    lease = 6.0
    pool = WorkerPool(store_url, tmp_path, lease=lease, workflows=FLOWS)
    try:
        async with Engine(store_url, WORKFLOWS, worker=False, limits=LIMITS) as client:
            binding = client.workflow(HELD)
            hung = [await binding.create(f"hung-{n}", {"hang": True}) for n in range(2)]
            first = pool.start()
            pool.wait_ready([first])
            deadline = time.monotonic() + 20
            while [(await h.record()).status for h in hung] != ["running", "running"]:
                assert time.monotonic() < deadline, pool.report()
                await asyncio.sleep(0.05)
            later = [await binding.create(f"later-{n}") for n in range(2)]
            others = [pool.start(), pool.start()]
            pool.wait_ready(others)
            await asyncio.sleep(0.5)
            for handle in later:
                record = await handle.record()
                assert record.status == "queued", record
                assert await read_held_reasons(client.store, record) == ["concurrency 2/2"]
            pool.kill(first)
            killed_at = time.time()
            # Its leases were renewed at most a third of a lease before the kill: for at least
            # two thirds of a lease after it, both slots stay taken.
            await asyncio.sleep(lease / 3)
            assert [(await h.record()).status for h in later] == ["queued", "queued"]
            await wait_complete(client, pool, {HELD: 4}, timeout=lease + 20)
            records = await records_of(client, HELD)
        pool.stop_all()
    finally:
        pool.cleanup()
    started = {r.id: float(r.started_at or 0) for r in records}
    assert min(started["later-0"], started["later-1"]) >= killed_at + lease / 3
    reruns = [r for r in records if r.id.startswith("hung")]
    assert all(float(r.output[0]) >= killed_at for r in reruns)  # the second attempt's span
