"""Create rate: instances created per second through ``create_batch`` and through ``create``.

On a fresh database with no worker running (so nothing competes with the writes):

- ``create_batch`` of 500 instances at a time, 10,000 instances (20 batches, one after another);
- single ``create`` calls one after another (1,000; 500 on PostgreSQL, where each costs a WAL
  flush);
- single ``create`` calls from 50 concurrent callers (asyncio tasks of one client), 2,000
  instances: what group commit does for acknowledged writes.

Every create is acknowledged, so it must be on disk when the call returns: the floor is the
acknowledged-write commit (SQLite ``synchronous=FULL``; PostgreSQL's ordinary commit), and the
per-instance and per-batch times are divided by it.

Run: ``python -m benchmarks create``.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Sequence

from ._common import client, create_in_batches
from ._config import BenchConfig, database, parse, work_directory
from ._floors import ack_floor
from ._report import Figure, Floor, Report, median
from ._run import execute
from ._workflows import Trivial

NAME = "create"
BATCH = 500
CONCURRENT_CALLERS = 50


async def run(config: BenchConfig) -> list[Report]:
    """One report per store in ``config.stores``."""
    return [await _run_store(config, store) for store in config.stores]


async def _single(url: str, count: int) -> float:
    async with client(url) as engine:
        binding = engine.workflow(Trivial.name)
        params = {"steps": 1}
        await binding.create(params=params)  # warm up: workflow check, connections
        start = time.perf_counter()
        for _ in range(count):
            await binding.create(params=params)
        return time.perf_counter() - start


async def _concurrent(url: str, count: int, callers: int) -> float:
    async with client(url) as engine:
        binding = engine.workflow(Trivial.name)
        params = {"steps": 1}
        await binding.create(params=params)

        async def caller(n: int) -> None:
            for _ in range(n):
                await binding.create(params=params)

        start = time.perf_counter()
        await asyncio.gather(*(caller(count // callers) for _ in range(callers)))
        return time.perf_counter() - start


async def _batched(url: str, count: int) -> float:
    async with client(url) as engine:
        await create_in_batches(engine, Trivial.name, [{"params": {"steps": 1}}], BATCH)
        return await create_in_batches(
            engine, Trivial.name, ({"params": {"steps": 1}} for _ in range(count)), BATCH
        )


async def _run_store(config: BenchConfig, store: str) -> Report:
    batched = 2_000 if config.quick else 10_000
    single = (200 if config.quick else 1_000) // (2 if store == "postgres" else 1)
    concurrent = 500 if config.quick else 2_000
    runs = config.repetitions(heavy=False)
    series: dict[str, list[float]] = defaultdict(list)
    floor_name = ""
    with work_directory(config) as directory:
        for _ in range(runs):
            floor = ack_floor(store, directory, config.pg_url)
            floor_name = floor.name
            series["floor"].append(floor.value)
            with database(config, store, directory) as url:
                seconds = await _batched(url, batched)
            series["batch_rate"].append(batched / seconds)
            series["batch_us"].append(seconds / (batched / BATCH) * 1e6)
            with database(config, store, directory) as url:
                seconds = await _single(url, single)
            series["single_rate"].append(single / seconds)
            series["single_us"].append(seconds / single * 1e6)
            with database(config, store, directory) as url:
                seconds = await _concurrent(url, concurrent, CONCURRENT_CALLERS)
            series["concurrent_rate"].append(concurrent / seconds)
            series["concurrent_us"].append(seconds / concurrent * 1e6)
    floor = Floor(floor_name, median(series["floor"]), "µs", tuple(series["floor"]))

    def fig(label: str, key: str, unit: str, with_floor: bool = False) -> Figure:
        return Figure(
            label, median(series[key]), unit, floor if with_floor else None, tuple(series[key])
        )

    report = Report(NAME, f"Create rate on {store} (median of {runs} runs)")
    report.figures = [
        fig(f"create_batch of {BATCH}: instances/s ({batched:,} instances)", "batch_rate", "/s"),
        fig(f"create_batch of {BATCH}: time per batch", "batch_us", "µs", True),
        fig(f"create, one caller: instances/s ({single:,} calls)", "single_rate", "/s"),
        fig("create, one caller: time per call", "single_us", "µs", True),
        fig(
            f"create, {CONCURRENT_CALLERS} concurrent callers: instances/s ({concurrent:,})",
            "concurrent_rate",
            "/s",
        ),
        fig(
            f"create, {CONCURRENT_CALLERS} concurrent callers: wall time per instance",
            "concurrent_us",
            "µs",
            True,
        ),
        fig("floor: acknowledged-write commit", "floor", "µs"),
    ]
    report.details = {
        "store": store,
        "batched": batched,
        "batch": BATCH,
        "single": single,
        "concurrent": concurrent,
        "callers": CONCURRENT_CALLERS,
        "runs": runs,
        "series": dict(series),
    }
    report.notes = [
        "no worker runs meanwhile; every create is durable (acknowledged) when it returns",
        "ratio = time per call (or per batch) / one single-row acknowledged commit",
    ]
    return report


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse(__doc__ or NAME, argv))


if __name__ == "__main__":
    main()
