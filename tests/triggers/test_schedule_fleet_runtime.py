"""Schedules made at run time, across processes, on both stores: three worker processes are
running when a client process creates a schedule; they pick it up without a restart and fire
each tick once; an update and a delete reach them the same way.

As in test_schedule_fleet, the workers read the time from a file the test moves, and their
schedulers look at the table every 20 ms of real time.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from stepline import Engine

from .._fileclock import FileClock
from .._procs import WorkerPool
from .test_schedule_fleet import T0, WORKFLOW

pytestmark = pytest.mark.slow

NAME = "made-at-run-time"


def stamp(ts: float) -> str:
    return f"{NAME}-{datetime.fromtimestamp(ts, UTC).strftime('%Y%m%dT%H%MZ')}"


async def ids(client: Engine) -> list[str]:
    page = await client.list_instances(WORKFLOW, limit=1000, oldest_first=True)
    return [r.id for r in page.instances if r.id.startswith(NAME)]


async def wait_for(client: Engine, pool: WorkerPool, expected: list[str]) -> None:
    deadline = time.monotonic() + 15
    while (found := await ids(client)) != expected:
        pool.check_alive()
        assert time.monotonic() < deadline, f"{found} != {expected}\n{pool.report()}"
        await asyncio.sleep(0.02)


async def test_running_workers_fire_a_schedule_created_elsewhere_once_per_tick(
    store_url: str, tmp_path: Path
) -> None:
    clock = FileClock(tmp_path / "clock")
    clock.set(T0)
    pool = WorkerPool(
        store_url, tmp_path, lease=6, workflows="tests.triggers._fleet_flows",
        clock=clock.path, scheduler_wait=0.02,
    )  # fmt: skip
    try:
        pool.wait_ready([pool.start() for _ in range(3)])
        async with Engine(store_url, worker=False, clock=clock) as client:
            schedules = client.schedules()
            deadline = time.monotonic() + 15
            while not await schedules.list(WORKFLOW):  # the workers are up and synced
                assert time.monotonic() < deadline, pool.report()
                await asyncio.sleep(0.02)
            await schedules.pause("fleet-minute")  # only the run-time schedule fires
            await schedules.create(NAME, WORKFLOW, "*/2 * * * *")
            expected: list[str] = []
            for minute in range(1, 9):
                clock.set(T0 - 30 + 60 * minute)
                if minute % 2 == 0:
                    expected.append(stamp(T0 - 30 + 60 * minute))
                await wait_for(client, pool, expected)
            await schedules.update(NAME, cron="* * * * *")
            clock.set(T0 - 30 + 60 * 9)
            expected.append(stamp(T0 - 30 + 60 * 9))
            await wait_for(client, pool, expected)
            await schedules.delete(NAME)
            await asyncio.sleep(0.3)  # the schedulers see the delete
            clock.set(T0 - 30 + 60 * 10)
            await asyncio.sleep(0.5)  # time for a wrongly fired tick to show
            assert await ids(client) == expected
        pool.stop_all()
    finally:
        pool.cleanup()
