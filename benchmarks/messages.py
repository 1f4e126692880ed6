"""Messages (docs/messaging.md): an update's round trip beside a step's cost, and a query's cost.

The bar (issue 54): an update round trip (send, run a one-step handler, reply) costs at most 2
commit round trips more than a step. So the figure compared is the update round trip minus the
cost of **one step**, in commits of the acknowledged-write floor:

- **update round trip**: ``instance.update("bump")`` until its reply is back, one at a time
  (50 ms apart), each on a fresh ``bench-updatable`` instance parked on a ``wait_for_event``:
  the update is recorded, a worker takes the instance, accepts the update, runs the handler's
  one step and records the reply, and the caller reads it;
- **a step**: the marginal cost of one more step in a running activation, measured in the same
  run on a fresh database as ``sequential`` measures it (10-step and 1-step workflows taking
  turns in one process: (10-step - 1-step) / 9, end to end);
- **update minus a step**: (update round trip p50, or p99, - the step) / the floor;
- the **event round trip** is shown beside it for context (``send_event("go")`` then ``wait()``
  until the instance has consumed it, run one step and ended: the same hops as an update).

Round trips are measured in the same process as the worker and with two worker processes; the
engines and workers run ``bench-updatable`` alone, as ``sequential``'s engine runs its one
workflow (a registry that includes a workflow with limits makes every claim take the limits'
path, a few more round trips). The **query** figure is ``instance.query("total")`` on an
instance with a 100-step history, answered in the calling process (it has the code): reading the
history and replaying it (target: under 20 ms on SQLite).

Run: ``python -m benchmarks messages`` (``--quick``: fewer calls).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from stepline import Engine, Instance

from ._config import BenchConfig, database, parse, work_directory
from ._floors import ack_floor
from ._procs import WorkerOptions, worker_pool
from ._report import Figure, Floor, Report, median, percentile
from ._run import execute
from ._workflows import Updatable
from .sequential import ASYNC, run_sequential

NAME = "messages"
GAP = 0.05
HISTORY = 100
STEPS = 10


async def run(config: BenchConfig) -> list[Report]:
    """One report per store in ``config.stores``."""
    return [await _run_store(config, store) for store in config.stores]


async def _parked(engine: Engine, count: int, steps: int = 0) -> list[Instance]:
    binding = engine.workflow(Updatable.name)
    instances = [await binding.create(params={"steps": steps}) for _ in range(count)]
    for instance in instances:
        for _ in range(6000):
            if (await instance.record()).status == "waiting":
                break
            await asyncio.sleep(0.01)
        else:
            raise RuntimeError(f"{instance} did not park")
    await asyncio.sleep(1.0)  # let the workers go idle between the set-up and the probes
    return instances


async def _round_trips(engine: Engine, count: int) -> tuple[list[float], list[float]]:
    """Seconds of each update's and each event's round trip (fresh instances each)."""
    updated = await _parked(engine, count)
    ended = await _parked(engine, count)
    updates: list[float] = []
    events: list[float] = []
    for up, ev in zip(updated, ended, strict=True):
        start = time.perf_counter()
        await up.update("bump", timeout=60)
        updates.append(time.perf_counter() - start)
        await asyncio.sleep(GAP)
        start = time.perf_counter()
        await ev.send_event("go")
        await ev.wait(timeout=60)
        events.append(time.perf_counter() - start)
        await asyncio.sleep(GAP)
    return updates, events


async def _step_cost(url: str, workflows: int) -> float:
    """Seconds of one more step in a running activation (``sequential``'s marginal step)."""
    shapes = [(STEPS, ASYNC), (1, ASYNC)]
    many, one = await run_sequential(url, workflows=workflows, shapes=shapes)
    return (many.total - one.total) / workflows / (STEPS - 1)


async def _queries(url: str, count: int) -> list[float]:
    """Seconds of each query on a 100-step history, answered in this process."""
    async with Engine(url, [Updatable]) as engine:
        (instance,) = await _parked(engine, 1, HISTORY)
        await instance.query("total")  # warm-up: imports, statements prepared
        times = []
        for _ in range(count):
            start = time.perf_counter()
            answer = await instance.query("total")
            times.append(time.perf_counter() - start)
        if answer != HISTORY:
            raise RuntimeError(f"the query answered {answer}, not {HISTORY}")
        return times


async def _run_store(config: BenchConfig, store: str) -> Report:
    count = 20 if config.quick else 100
    runs = config.repetitions(heavy=True)
    series: dict[str, list[float]] = defaultdict(list)
    floor_name = ""
    with work_directory(config) as directory:
        for _ in range(runs):
            floor = ack_floor(store, directory, config.pg_url)
            floor_name = floor.name
            series["floor"].append(floor.value / 1000)
            with database(config, store, directory) as url:
                series["step"].append(await _step_cost(url, 50 if config.quick else 200) * 1000)
            for key in ("same", "cross"):
                with database(config, store, directory) as url:
                    if key == "same":
                        async with Engine(url, [Updatable]) as engine:
                            updates, events = await _round_trips(engine, count)
                    else:
                        logs = Path(directory) / "logs"
                        only = WorkerOptions(workflows=(Updatable.name,))
                        async with (
                            worker_pool(url, logs, 2, only) as pool,
                            Engine(url, [Updatable], worker=False) as engine,
                        ):
                            updates, events = await _round_trips(engine, count)
                        if pool.problems:
                            raise RuntimeError("workers logged errors: " + pool.problems[0])
                for what, seconds in (("update", updates), ("event", events)):
                    ms = [s * 1000 for s in seconds]
                    series[f"{what}_{key}_p50"].append(percentile(ms, 50))
                    series[f"{what}_{key}_p99"].append(percentile(ms, 99))
                for q in (50, 99):
                    beyond = series[f"update_{key}_p{q}"][-1] - series["step"][-1]
                    series[f"extra_{key}_p{q}"].append(beyond / series["floor"][-1])
            with database(config, store, directory) as url:
                ms = [s * 1000 for s in await _queries(url, count * 5)]
            series["query_p50"].append(percentile(ms, 50))
            series["query_p99"].append(percentile(ms, 99))
            print(
                f"  {NAME} {store}: update p50 {series['update_same_p50'][-1]:.2f} ms (same "
                f"process), {series['update_cross_p50'][-1]:.2f} ms (2 processes); step "
                f"{series['step'][-1]:.3f} ms; floor {series['floor'][-1]:.3f} ms; query "
                f"{series['query_p50'][-1]:.1f} ms",
                flush=True,
            )
    floor = Floor(floor_name, median(series["floor"]), "ms", tuple(series["floor"]))

    def fig(label: str, key: str, unit: str = "ms", with_floor: bool = False) -> Figure:
        return Figure(
            label, median(series[key]), unit, floor if with_floor else None, tuple(series[key])
        )

    labels = {"same": "same process", "cross": "2 worker processes"}
    report = Report(NAME, f"Update round trips and queries on {store} (median of {runs} runs)")
    for key in ("same", "cross"):
        report.figures += [
            fig(f"update round trip p50, {labels[key]}", f"update_{key}_p50", with_floor=True),
            fig(f"update round trip p99, {labels[key]}", f"update_{key}_p99", with_floor=True),
            fig(f"update minus a step, p50, {labels[key]}", f"extra_{key}_p50", "commits"),
            fig(f"update minus a step, p99, {labels[key]}", f"extra_{key}_p99", "commits"),
            fig(f"event round trip p50, {labels[key]}", f"event_{key}_p50", with_floor=True),
            fig(f"event round trip p99, {labels[key]}", f"event_{key}_p99", with_floor=True),
        ]
    report.figures += [
        fig(f"query on a {HISTORY}-step history p50, in process", "query_p50"),
        fig(f"query on a {HISTORY}-step history p99, in process", "query_p99"),
        fig("a step: marginal cost of one more step, same process", "step", with_floor=True),
        fig("floor: acknowledged-write commit", "floor"),
    ]
    report.details = {"store": store, "calls": count, "runs": runs, "series": dict(series)}
    report.notes = [
        "round trip = the caller's wall time, from the call to the reply (update) or to the "
        "instance's end seen by wait() (event); one call at a time, 50 ms apart",
        "'update minus a step': (the update round trip's p50 or p99 - a step's marginal cost) "
        "in acknowledged-write commits (target: at most 2)",
        f"a step: (a {STEPS}-step workflow - a 1-step workflow) / {STEPS - 1}, end to end, the "
        "two taking turns in one process, as in 'sequential'",
        "SQLite workers in another process find new work by polling (2 ms doubling to 0.5 s)",
    ]
    return report


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse(__doc__ or NAME, argv))


if __name__ == "__main__":
    main()
