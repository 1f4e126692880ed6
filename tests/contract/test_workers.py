"""Worker liveness: heartbeat (insert or replace, and expiry of dead workers' rows),
list_workers, forget_worker."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from stepline import ManualClock
from stepline.records import WORKER_EXPIRE_BEATS, WorkerInfo
from stepline.store.base import Store

from .conftest import OpenStore


def info(worker_id: str, started_at: float, **changes: Any) -> WorkerInfo:
    base = WorkerInfo(worker_id, "host-a", 4242, started_at, 0.0, 2.0, ("wf",), 8, 1)
    return replace(base, **changes)


async def test_heartbeat_inserts_then_replaces_the_row_with_last_seen_now(
    store: Store, clock: ManualClock
) -> None:
    t0 = store.now()
    await store.workers.heartbeat(info("w1", t0 - 10, last_seen=123.0), t0)
    assert await store.workers.list_workers() == [info("w1", t0 - 10, last_seen=t0)]
    clock.advance(2)
    changed = info(
        "w1", t0 - 5, host="host-b", pid=7, heartbeat=3.0, workflows=("a", "b"), concurrency=9,
        running=4, last_seen=1.0,
    )  # fmt: skip
    await store.workers.heartbeat(changed, t0 + 2)
    (row,) = await store.workers.list_workers()
    assert row == replace(changed, last_seen=t0 + 2)
    assert isinstance(row.workflows, tuple)
    assert all(isinstance(v, float) for v in (row.started_at, row.last_seen, row.heartbeat))


async def test_heartbeat_is_safe_to_repeat(store: Store) -> None:
    now = store.now()
    for _ in range(3):
        await store.workers.heartbeat(info("w1", now), now)
    assert await store.workers.list_workers() == [info("w1", now, last_seen=now)]


async def test_heartbeat_deletes_rows_more_than_expire_beats_of_their_own_interval_old(
    store: Store, clock: ManualClock
) -> None:
    t0 = store.now()
    await store.workers.heartbeat(info("fast", t0, heartbeat=1.0), t0)
    await store.workers.heartbeat(info("slow", t0, heartbeat=10.0), t0)
    clock.advance(WORKER_EXPIRE_BEATS * 1.0)  # exactly that old: not more
    await store.workers.heartbeat(info("beater", t0), store.now())
    assert {w.id for w in await store.workers.list_workers()} == {"fast", "slow", "beater"}
    clock.advance(0.5)
    await store.workers.heartbeat(info("beater", t0), store.now())
    assert {w.id for w in await store.workers.list_workers()} == {"slow", "beater"}
    clock.advance(WORKER_EXPIRE_BEATS * 10.0)
    # its own row is replaced, never expired by itself, however old
    await store.workers.heartbeat(info("slow", t0, heartbeat=10.0), store.now())
    assert [w.id for w in await store.workers.list_workers()] == ["slow"]


async def test_a_heartbeat_from_another_store_expires_rows_too(
    store: Store, open_store: OpenStore, clock: ManualClock
) -> None:
    t0 = store.now()
    await store.workers.heartbeat(info("dead", t0, heartbeat=1.0), t0)
    clock.advance(WORKER_EXPIRE_BEATS + 1)
    other = await open_store()
    await other.workers.heartbeat(info("alive", t0), other.now())
    assert [w.id for w in await store.workers.list_workers()] == ["alive"]


async def test_list_workers_lists_every_row_live_or_not_oldest_start_first(
    store: Store, clock: ManualClock
) -> None:
    t0 = store.now()
    await store.workers.heartbeat(info("late", t0 - 1), t0)
    await store.workers.heartbeat(info("early", t0 - 50, heartbeat=100.0), t0)
    clock.advance(10)  # "late" (2 s beats) is no longer live; its row stays until it expires
    await store.workers.heartbeat(info("middle", t0 - 5), store.now())
    rows = await store.workers.list_workers()
    assert [w.id for w in rows] == ["early", "middle", "late"]
    assert [w.live(store.now()) for w in rows] == [True, True, False]


async def test_forget_worker_deletes_only_its_row_and_ignores_an_unknown_id(store: Store) -> None:
    now = store.now()
    await store.workers.heartbeat(info("keep", now), now)
    await store.workers.heartbeat(info("gone", now), now)
    await store.workers.forget_worker("gone")
    await store.workers.forget_worker("gone")
    await store.workers.forget_worker("never-registered")
    assert [w.id for w in await store.workers.list_workers()] == ["keep"]
