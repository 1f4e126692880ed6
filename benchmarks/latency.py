"""Latency: ``send_event`` to the waiting step resuming, and ``create`` to the first step start.

Two set-ups on each store, each on a fresh database:

- **cross-process** (issue 4): the client is the benchmark process (an engine without a worker),
  the workers are two other processes (``python -m benchmarks._worker``, engine defaults: poll
  interval 0.5 s). PostgreSQL delivers wake-ups with LISTEN/NOTIFY; SQLite has no notification
  between processes, so its workers find the work by polling (2 ms doubling to 0.5 s when idle).
- **same process**: the client and the worker share one engine (``Engine(url, workflows)``), so
  the store signals its worker directly.

Event latency: ``bench-waiter`` instances wait for a ``go`` event, then run one step that returns
``time.time()``. The client takes ``time.time()``, calls ``send_event``, and the latency is the
step's time minus the client's. Events go one at a time, 50 ms apart ("busy": the workers have
just been active and poll often), and, cross-process, also 1.2 s apart ("idle": every worker has
backed off to its longest poll interval). Create latency: the same with ``create`` of a
``bench-first-step`` instance, whose one step returns ``time.time()``.

The duration of the ``send_event`` and ``create`` calls themselves (acknowledged writes, on disk
when they return) is compared with the acknowledged-write floor.

Run: ``python -m benchmarks latency`` (``--quick``: fewer events).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson

from stepline import Engine

from ._common import client, create_in_batches, wait_for_status
from ._config import BenchConfig, database, parse, work_directory
from ._db import fetch
from ._floors import ack_floor
from ._procs import worker_pool
from ._report import Figure, Floor, Report, median, percentile
from ._run import execute
from ._workflows import WORKFLOWS, FirstStep, Waiter

NAME = "latency"
BUSY_GAP = 0.05
IDLE_GAP = 1.2


@dataclass(frozen=True)
class Probe:
    """Latencies (seconds) of a series of events or creates, and the client call times."""

    latency: list[float]
    call: list[float]


async def run(config: BenchConfig) -> list[Report]:
    """One report per store in ``config.stores``."""
    return [await _run_store(config, store) for store in config.stores]


@asynccontextmanager
async def setup(url: str, logs: Path, cross_process: bool) -> AsyncIterator[Engine]:
    """A client engine; with ``cross_process`` two worker processes, else an in-process worker."""
    if cross_process:
        async with worker_pool(url, logs, 2) as pool, client(url) as engine:
            yield engine
        if pool.problems:
            raise RuntimeError("latency workers logged errors:\n" + "\n".join(pool.problems[:20]))
    else:
        async with Engine(url, WORKFLOWS) as engine:
            yield engine


async def _outputs(url: str, workflow: str) -> dict[str, float]:
    rows = await fetch(
        url, "SELECT id, output FROM {t}instances WHERE workflow = '" + workflow + "'"
    )
    return {str(i): float(orjson.loads(out)) for i, out in rows if out is not None}


async def events(engine: Engine, url: str, count: int, gap: float) -> Probe:
    """``count`` waiting instances; an event to each, ``gap`` seconds apart."""
    ids = [f"w{n}" for n in range(count)]
    await create_in_batches(engine, Waiter.name, [{"id": i} for i in ids])
    await wait_for_status(url, Waiter.name, count, ("waiting",), timeout=120)
    await asyncio.sleep(max(gap, 1.0))  # let the workers go idle
    binding = engine.workflow(Waiter.name)
    sent: dict[str, float] = {}
    calls: list[float] = []
    for instance_id in ids:
        instance = await binding.get(instance_id)
        before = time.time()
        await instance.send_event("go")
        calls.append(time.time() - before)
        sent[instance_id] = before
        await asyncio.sleep(gap)
    await wait_for_status(url, Waiter.name, count, ("complete",), timeout=120)
    resumed = await _outputs(url, Waiter.name)
    return Probe([resumed[i] - sent[i] for i in ids], calls)


async def creates(engine: Engine, url: str, count: int, gap: float) -> Probe:
    """``count`` creates, ``gap`` seconds apart; latency to each first step."""
    binding = engine.workflow(FirstStep.name)
    await binding.create(id="warm-up")
    await wait_for_status(url, FirstStep.name, 1, ("complete",), timeout=60)
    await asyncio.sleep(max(gap, 1.0))
    sent: dict[str, float] = {}
    calls: list[float] = []
    for n in range(count):
        before = time.time()
        instance = await binding.create(id=f"c{n}")
        calls.append(time.time() - before)
        sent[instance.id] = before
        await asyncio.sleep(gap)
    await wait_for_status(url, FirstStep.name, count + 1, ("complete",), timeout=120)
    started = await _outputs(url, FirstStep.name)
    return Probe([started[i] - sent[i] for i in sent], calls)


async def _run_store(config: BenchConfig, store: str) -> Report:
    busy_n = 40 if config.quick else 100
    idle_n = 3 if config.quick else 6
    runs = config.repetitions(heavy=True)
    series: dict[str, list[float]] = defaultdict(list)
    floor_name = ""
    plan = [
        ("cross", True, busy_n, BUSY_GAP),
        ("cross_idle", True, idle_n, IDLE_GAP),
        ("same", False, busy_n, BUSY_GAP),
    ]
    with work_directory(config) as directory:
        for _ in range(runs):
            floor = ack_floor(store, directory, config.pg_url)
            floor_name = floor.name
            series["floor"].append(floor.value)
            for key, cross, count, gap in plan:
                with database(config, store, directory) as url:
                    async with setup(url, directory / "logs", cross) as engine:
                        event = await events(engine, url, count, gap)
                        create = await creates(engine, url, count, gap)
                for what, probe in (("event", event), ("create", create)):
                    ms = [x * 1000 for x in probe.latency]
                    series[f"{what}_{key}_p50"].append(percentile(ms, 50))
                    series[f"{what}_{key}_p99"].append(percentile(ms, 99))
                    series[f"{what}_{key}_max"].append(max(ms))
                    series[f"{what}_{key}_call"].append(median(probe.call) * 1e6)
            print(
                f"  {NAME} {store}: event p50 cross {series['event_cross_p50'][-1]:.1f} ms, "
                f"same {series['event_same_p50'][-1]:.1f} ms",
                flush=True,
            )
    floor = Floor(floor_name, median(series["floor"]), "µs", tuple(series["floor"]))

    def fig(label: str, key: str, unit: str = "ms", with_floor: bool = False) -> Figure:
        return Figure(
            label, median(series[key]), unit, floor if with_floor else None, tuple(series[key])
        )

    labels = {
        "cross": f"2 worker processes, events {BUSY_GAP * 1000:.0f} ms apart",
        "cross_idle": f"2 worker processes, idle ({IDLE_GAP:g} s apart)",
        "same": f"same process, {BUSY_GAP * 1000:.0f} ms apart",
    }
    report = Report(NAME, f"Event and create latency on {store} (median of {runs} runs)")
    for what, title in (
        ("event", "send_event -> step resumed"),
        ("create", "create -> first step"),
    ):
        for key, _cross, _count, _gap in plan:
            report.figures += [
                fig(f"{title} p50, {labels[key]}", f"{what}_{key}_p50"),
                fig(f"{title} p99, {labels[key]}", f"{what}_{key}_p99"),
            ]
    report.figures += [
        fig("send_event call (acknowledged), median", "event_cross_call", "µs", True),
        fig("create call (acknowledged), median", "create_cross_call", "µs", True),
        fig("floor: acknowledged-write commit", "floor", "µs"),
    ]
    report.details = {
        "store": store,
        "busy_events": busy_n,
        "idle_events": idle_n,
        "runs": runs,
        "series": dict(series),
    }
    report.notes = [
        "latency = time.time() inside the step - time.time() just before the client's call "
        "(the call's own durable commit included); the client is the benchmark process",
        "PostgreSQL wakes idle workers with LISTEN/NOTIFY; SQLite workers in another process "
        "poll (2 ms doubling to 0.5 s when idle), so their idle latency is up to 0.5 s",
        f"median of {runs} runs (--heavy-runs); p99 of {busy_n} events is about their second "
        f"largest, of {idle_n} idle ones about the largest",
    ]
    return report


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse(__doc__ or NAME, argv))


if __name__ == "__main__":
    main()
