"""The issue's fleet test: three worker processes on both stores, a shared clock moved one
minute at a time over 50 ticks of ``* * * * *``, one worker SIGKILLed at a tick (and started
again): exactly 50 instances, one per tick, with the ticks' ids, each run once.

The workers read the time from a file (tests._fileclock.FileClock) that the test writes, so
every process sees the same controllable clock; their schedulers look for due ticks every
20 ms of real time.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from stepline import Engine
from stepline.errors import InstanceNotFoundError

from .._fileclock import FileClock
from .._procs import WorkerPool
from ._fleet_flows import SCHEDULE

pytestmark = pytest.mark.slow

TICKS = 50
KILL_AT = 20
T0 = datetime(2024, 1, 1, 12, 0, 30, tzinfo=UTC).timestamp()  # 30 s past a minute
WORKFLOW = "fleet"


def tick_of(n: int) -> float:
    return T0 - 30 + 60 * n


def id_of(n: int) -> str:
    return f"{SCHEDULE}-{datetime.fromtimestamp(tick_of(n), UTC).strftime('%Y%m%dT%H%MZ')}"


async def wait_for_instance(client: Engine, pool: WorkerPool, instance_id: str) -> None:
    deadline = time.monotonic() + 15
    while True:
        try:
            await client.get_instance(WORKFLOW, instance_id)
            return
        except InstanceNotFoundError:
            pass
        pool.check_alive()
        if time.monotonic() > deadline:
            raise AssertionError(f"no instance {instance_id} after 15 s\n{pool.report()}")
        await asyncio.sleep(0.01)


async def test_three_worker_processes_fire_each_tick_once(store_url: str, tmp_path: Path) -> None:
    clock = FileClock(tmp_path / "clock")
    clock.set(T0)
    # Every tick moves the clock a minute, a jump after which each worker holds its claims
    # back for half a lease of real time: a short lease keeps the last wait short.
    pool = WorkerPool(
        store_url,
        tmp_path,
        lease=6,
        workflows="tests.triggers._fleet_flows",
        clock=clock.path,
        scheduler_wait=0.02,
    )
    try:
        workers = [pool.start() for _ in range(3)]
        pool.wait_ready(workers)
        async with Engine(store_url, worker=False, clock=clock) as client:
            schedules = client.schedules()
            deadline = time.monotonic() + 15
            while not await schedules.list(WORKFLOW):  # the workers sync it as they start
                assert time.monotonic() < deadline, f"schedule never stored\n{pool.report()}"
                await asyncio.sleep(0.02)
            for n in range(1, TICKS + 1):
                clock.set(tick_of(n))
                if n == KILL_AT:
                    pool.kill(workers[0])  # while the schedulers see the tick come
                    pool.start()
                await wait_for_instance(client, pool, id_of(n))
            await asyncio.sleep(0.5)  # time for a wrongly fired extra tick to show
            page = await client.list_instances(WORKFLOW, limit=1000, oldest_first=True)
            assert [r.id for r in page.instances] == [id_of(n) for n in range(1, TICKS + 1)]
            assert {r.trigger for r in page.instances} == {"cron"}
            info = await schedules.get(SCHEDULE)
            assert info.last_run == tick_of(TICKS)
            assert info.record.last_instance == id_of(TICKS)

            # Every instance runs to its end once (one the killed worker held is taken over
            # when its lease ends): stop the ticks, then let the leases run out.
            await schedules.pause(SCHEDULE)
            clock.set(tick_of(TICKS) + 45)
            deadline = time.monotonic() + 20
            while True:
                page = await client.list_instances(WORKFLOW, limit=1000)
                if all(r.status == "complete" for r in page.instances):
                    break
                pool.check_alive()
                assert time.monotonic() < deadline, (
                    f"unfinished: {[r.id for r in page.instances if r.status != 'complete']}\n"
                    f"{pool.report()}"
                )
                await asyncio.sleep(0.05)
            assert len(page.instances) == TICKS
            for record in page.instances:
                expected = datetime.fromtimestamp(record.schedule["tick"], UTC).isoformat()
                assert record.output == expected, record
        pool.stop_all()
    finally:
        pool.cleanup()
