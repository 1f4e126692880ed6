"""Worker liveness: the store's worker rows, the worker's heartbeat, the "no live worker" flag.

Contract tests of ``heartbeat`` / ``list_workers`` / ``forget_worker`` on both stores, the
worker's own heartbeat (driven by a manual clock), the warning on instances nobody serves in
the client, the CLI's describe and the HTTP API. The process-level test (a real ``stepline
worker`` killed with SIGKILL) is in tests/test_workers_procs.py; the dashboard panel in
tests/test_dashboard_workers.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import pytest

from stepline import Engine, ManualClock, SyncEngine, WorkflowEvent, WorkflowStep, workflow
from stepline.http import create_app
from stepline.records import WORKER_EXPIRE_BEATS, WORKER_LIVE_BEATS, WorkerInfo

from ..conftest import EngineFactory, drain


@workflow(name="served")
async def served(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.sleep("nap", "1 minute")
    return await step.do("done", lambda: "ok")


@workflow(name="orphan")
async def orphan(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("only", lambda: "ran")


def info(worker_id: str, now: float, **changes: Any) -> WorkerInfo:
    base = WorkerInfo(worker_id, "host-a", 4242, now - 10, 0.0, 2.0, ("served",), 8, 1)
    return replace(base, **changes)


# -- the store contract ------------------------------------------------------------------------


async def test_heartbeat_inserts_then_replaces_the_row(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine(clock=clock) as engine:
        store = engine.store
        assert await store.workers.list_workers() == []
        now = store.now()
        await store.workers.heartbeat(info("w1", now, last_seen=123.0), now)
        (row,) = await store.workers.list_workers()
        # last_seen is the heartbeat's time, whatever the record carried
        assert row == info("w1", now, last_seen=now)
        assert isinstance(row.workflows, tuple) and isinstance(row.pid, int)
        clock.advance(2)
        later = store.now()
        await store.workers.heartbeat(
            info("w1", now, running=5, workflows=("a", "served"), concurrency=9), later
        )
        (row,) = await store.workers.list_workers()
        assert (row.last_seen, row.running, row.workflows, row.concurrency) == (
            later,
            5,
            ("a", "served"),
            9,
        )
        assert row.started_at == now - 10


async def test_list_workers_oldest_start_first(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine(clock=clock) as engine:
        store = engine.store
        now = store.now()
        for worker_id, started in (("b", now - 1), ("c", now - 5), ("a", now - 1)):
            await store.workers.heartbeat(info(worker_id, now, started_at=started), now)
        assert [w.id for w in await store.workers.list_workers()] == ["c", "a", "b"]


async def test_forget_worker_deletes_only_that_row(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine(clock=clock) as engine:
        store = engine.store
        now = store.now()
        await store.workers.heartbeat(info("keep", now), now)
        await store.workers.heartbeat(info("gone", now), now)
        await store.workers.forget_worker("gone")
        await store.workers.forget_worker("never-registered")
        assert [w.id for w in await store.workers.list_workers()] == ["keep"]


async def test_a_heartbeat_expires_rows_by_their_own_interval(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine(clock=clock) as engine:
        store = engine.store
        t0 = store.now()
        await store.workers.heartbeat(info("fast", t0, heartbeat=1.0), t0)
        await store.workers.heartbeat(info("slow", t0, heartbeat=10.0), t0)
        # Just inside the fast one's expiry bound: nothing goes.
        clock.advance(WORKER_EXPIRE_BEATS * 1.0 - 0.5)
        await store.workers.heartbeat(info("beater", t0, heartbeat=1.0), store.now())
        assert {w.id for w in await store.workers.list_workers()} == {"fast", "slow", "beater"}
        # Past it: the fast one's row goes, the slow one (a longer interval) stays.
        clock.advance(1.0)
        await store.workers.heartbeat(info("beater", t0, heartbeat=1.0), store.now())
        assert {w.id for w in await store.workers.list_workers()} == {"slow", "beater"}
        # Much later the slow one beats again: the beater, silent since, has expired in turn.
        clock.advance(WORKER_EXPIRE_BEATS * 10.0 + 1)
        await store.workers.heartbeat(info("slow", t0, heartbeat=10.0), store.now())
        assert {w.id for w in await store.workers.list_workers()} == {"slow"}


def test_live_means_within_a_few_of_its_own_intervals() -> None:
    row = info("w", 1000.0, last_seen=1000.0, heartbeat=2.0)
    assert row.live(1000.0 + 2.0 * WORKER_LIVE_BEATS)
    assert not row.live(1000.0 + 2.0 * WORKER_LIVE_BEATS + 0.01)
    data = row.to_json(1000.0)
    assert data["live"] is True and data["workflows"] == ["served"]
    assert row.to_json(2000.0)["live"] is False


# -- the worker's heartbeat --------------------------------------------------------------------


async def test_worker_beat_describes_the_worker(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([served, orphan], clock=clock, concurrency=7, heartbeat=3) as engine:
        worker = engine.worker
        await worker.beat_now()
        (row,) = await engine.list_workers()
        assert row.id == worker.id
        assert row.workflows == ("orphan", "served")
        assert (row.concurrency, row.heartbeat, row.running) == (7, 3.0, 0)
        assert row.last_seen == engine.store.now()
        assert row.live(engine.store.now())
        clock.advance(3 * WORKER_LIVE_BEATS + 1)
        assert not row.live(engine.store.now())


async def test_a_running_worker_registers_beats_and_deregisters(make_engine: EngineFactory) -> None:
    async with make_engine([served], heartbeat=0.05, poll_interval=0.05) as engine:
        task = asyncio.create_task(engine.worker.run())
        try:
            first = await _wait_for_worker(engine, lambda rows: len(rows) == 1)
            assert first[0].id == engine.worker.id
            # it keeps beating: last_seen moves on
            await _wait_for_worker(
                engine, lambda rows: rows and rows[0].last_seen > first[0].last_seen
            )
        finally:
            engine.worker.stop()
            await task
        assert await engine.list_workers() == []


async def _wait_for_worker(engine: Engine, done: Any, timeout: float = 20.0) -> list[WorkerInfo]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        rows = await engine.list_workers()
        if done(rows):
            return rows
        assert asyncio.get_running_loop().time() < deadline, rows
        await asyncio.sleep(0.02)


def test_sync_engine_lists_workers(store_url: str) -> None:
    with SyncEngine(store_url, [served], worker=True, heartbeat=0.05) as engine:
        deadline = time.monotonic() + 20
        while not (rows := engine.list_workers()):
            assert time.monotonic() < deadline, "the in-process worker never registered"
            time.sleep(0.02)
        assert [row.workflows for row in rows] == [("served",)]


def test_heartbeat_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"invalid heartbeat 0: it must be at least 0\.05 seconds"):
        Engine("sqlite:///unused.db", heartbeat=0)


# -- the "no live worker serves" warning -------------------------------------------------------


async def test_unserved_warnings(make_engine: EngineFactory, clock: ManualClock) -> None:
    async with make_engine([served, orphan], clock=clock) as engine:
        queued = await engine.workflow("served").create(id="q")
        other = await engine.workflow("orphan").create(id="o")
        records = [await queued.record(), await other.record()]
        # No worker has registered: both are flagged.
        assert await engine.unserved_warnings(records) == [
            "no live worker serves 'served'",
            "no live worker serves 'orphan'",
        ]
        # A live worker for "served" only.
        now = engine.store.now()
        await engine.store.workers.heartbeat(info("w", now, workflows=("served",)), now)
        records = [await queued.record(), await other.record()]
        assert await engine.unserved_warnings(records) == [
            None,
            "no live worker serves 'orphan'",
        ]
        # status() says it too, as describe and the dashboard do
        assert (await queued.status()).warning is None
        assert (await other.status()).warning == "no live worker serves 'orphan'"
        # The worker dies: after its live window, "served" is flagged again.
        clock.advance(2.0 * WORKER_LIVE_BEATS + 1)
        assert (await engine.unserved_warnings(records))[0] == "no live worker serves 'served'"
        assert (await queued.status()).warning == "no live worker serves 'served'"


async def test_instances_not_due_are_not_flagged(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([served], clock=clock) as engine:
        sleeper = await engine.workflow("served").create(id="s")
        paused = await engine.workflow("served").create(id="p")
        await paused.pause()
        await drain(engine)  # "s" now sleeps for a minute
        queued = await engine.workflow("served").create(id="q")
        records = [await sleeper.record(), await paused.record(), await queued.record()]
        assert [r.status for r in records] == ["waiting", "paused", "queued"]
        assert await engine.unserved_warnings(records) == [
            None,
            None,
            "no live worker serves 'served'",
        ]
        await queued.terminate()
        clock.advance(61)  # the nap is over: due, and no worker runs it
        record = await sleeper.record()
        assert await engine.unserved_warnings([record]) == ["no live worker serves 'served'"]
        assert (await sleeper.status()).warning == "no live worker serves 'served'"
        await drain(engine)
        assert await engine.unserved_warnings([await sleeper.record()]) == [None]  # complete
        assert (await sleeper.status()).warning is None


# -- the HTTP API ------------------------------------------------------------------------------


@pytest.fixture
async def client(make_engine: EngineFactory, clock: ManualClock) -> AsyncIterator[Any]:
    async with make_engine([served, orphan], clock=clock) as engine:
        app = create_app(engine)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://stepline") as http:
            yield engine, http


async def test_api_lists_workers(client: Any) -> None:
    engine, http = client
    assert (await http.get("/api/workers")).json() == {"workers": []}
    now = engine.store.now()
    await engine.store.workers.heartbeat(info("w1", now, workflows=("served",)), now)
    resp = await http.get("/api/workers")
    assert resp.status_code == 200
    (row,) = resp.json()["workers"]
    assert row == {
        "id": "w1",
        "host": "host-a",
        "pid": 4242,
        "started_at": now - 10,
        "last_seen": now,
        "heartbeat": 2.0,
        "workflows": ["served"],
        "versions": {"served": ["1"]},
        "concurrency": 8,
        "running": 1,
        "live": True,
    }


async def test_api_flags_instances_no_live_worker_serves(client: Any) -> None:
    engine, http = client
    for name in ("served", "orphan"):
        resp = await http.post(f"/api/workflows/{name}/instances", json={"id": "i"})
        assert resp.status_code == 201, resp.text
    now = engine.store.now()
    await engine.store.workers.heartbeat(info("w1", now, workflows=("served",)), now)
    detail = (await http.get("/api/workflows/orphan/instances/i")).json()
    assert detail["workflow"]["warning"] == "no live worker serves 'orphan'"
    detail = (await http.get("/api/workflows/served/instances/i")).json()
    assert detail["workflow"]["warning"] is None
    listed = (await http.get("/api/instances")).json()["instances"]
    assert {(row["workflow"], row["warning"]) for row in listed} == {
        ("served", None),
        ("orphan", "no live worker serves 'orphan'"),
    }
