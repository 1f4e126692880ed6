"""Sequential workflows: the engine's fixed cost per step.

200 workflows of 10 trivial steps run one after another (each created, then awaited to completion
before the next), with an in-process worker. The per-step overhead (wall time / steps) is compared
with the floor measured in the same run on the same disk: one single-row INSERT + COMMIT on SQLite
in WAL mode with ``synchronous=NORMAL``, the setting the engine uses for step checkpoints (for
PostgreSQL: one single-row committed INSERT over loopback).

Also measured: the same with sync callbacks (run in the thread pool), and 200 one-step workflows,
which give the fixed cost of a workflow (durable create, claim, finish, wait) and, by difference,
the marginal cost of one more step.

Run: ``python -m benchmarks.sequential`` (or ``python -m benchmarks`` for everything).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from stepline import Engine

from ._config import BenchConfig, database, parse, work_directory
from ._floors import ack_floor, step_floor
from ._report import Figure, Floor, Report, median
from ._run import execute
from ._workflows import Trivial

NAME = "sequential"


@dataclass(frozen=True)
class Timing:
    """Wall time of a sequential run, the part of it spent in ``create``, and the CPU time
    the process used meanwhile (all threads)."""

    total: float
    create: float
    cpu: float


async def run_sequential(url: str, *, workflows: int, steps: int, sync: bool) -> Timing:
    """Run ``workflows`` workflows of ``steps`` steps one after another (each created, then
    awaited to completion), with an in-process worker."""
    params = {"steps": steps, "sync": sync}
    async with Engine(url, [Trivial]) as engine:
        binding = engine.workflow(Trivial)
        for _ in range(max(workflows // 20, 3)):  # warm up: caches, thread pool, code paths
            await (await binding.create(params=params)).wait(timeout=60)
        creating = 0.0
        cpu = time.process_time()
        start = time.perf_counter()
        for _ in range(workflows):
            before = time.perf_counter()
            instance = await binding.create(params=params)
            creating += time.perf_counter() - before
            status = await instance.wait(timeout=60)
            if status.status != "complete":
                raise RuntimeError(f"benchmark workflow ended {status.status}: {status.error}")
        return Timing(time.perf_counter() - start, creating, time.process_time() - cpu)


def _floors(config: BenchConfig, store: str, directory: Path) -> tuple[Floor, Floor]:
    """(floor of a step checkpoint, floor of an acknowledged write such as create)."""
    step = step_floor(store, directory, config.pg_url)
    return step, (ack_floor(store, directory, config.pg_url) if store == "sqlite" else step)


async def run(config: BenchConfig) -> list[Report]:
    """One report per store in ``config.stores``."""
    return [await _run_store(config, store) for store in config.stores]


async def _run_store(config: BenchConfig, store: str) -> Report:
    workflows = 40 if config.quick else 200
    steps = 10
    series: dict[str, list[float]] = defaultdict(list)
    names: dict[str, str] = {}
    with work_directory(config) as directory:
        for _ in range(config.runs):
            step_floor, ack_floor = _floors(config, store, directory)
            names["step"], names["ack"] = step_floor.name, ack_floor.name
            series["step_floor"].append(step_floor.value)
            series["ack_floor"].append(ack_floor.value)
            timings: dict[str, Timing] = {}
            for key, n_steps, sync in (
                ("async", steps, False),
                ("sync", steps, True),
                ("one", 1, False),
            ):
                with database(config, store, directory) as url:
                    timings[key] = await run_sequential(
                        url, workflows=workflows, steps=n_steps, sync=sync
                    )
            us = 1e6 / workflows  # seconds over all workflows -> µs per workflow
            for key in ("async", "sync"):
                t = timings[key]
                series[f"{key}_e2e"].append(t.total * us / steps)
                series[f"{key}_run"].append((t.total - t.create) * us / steps)
                series[f"{key}_cpu"].append(t.cpu * us / steps)
            one = timings["one"]
            series["create"].append((timings["async"].create + one.create) * us / 2)
            series["one_run"].append((one.total - one.create) * us)
            series["marginal"].append(
                (
                    (timings["async"].total - timings["async"].create) * us
                    - (one.total - one.create) * us
                )
                / (steps - 1)
            )
    step_floor = Floor(names["step"], median(series["step_floor"]), "µs")
    ack_floor = Floor(names["ack"], median(series["ack_floor"]), "µs")

    def fig(label: str, key: str, floor: Floor | None) -> Figure:
        return Figure(label, median(series[key]), "µs", floor, tuple(series[key]))

    shape = f"{workflows} x {steps}"
    report = Report(
        NAME, f"Sequential workflows on {store} ({shape}, median of {config.runs} runs)"
    )
    report.figures = [
        fig(f"per step, async callbacks ({shape}, end to end)", "async_e2e", step_floor),
        fig(f"per step, sync callbacks ({shape}, end to end)", "sync_e2e", step_floor),
        fig("per step, async, excluding create", "async_run", step_floor),
        fig("per step, sync, excluding create", "sync_run", step_floor),
        fig("marginal cost of one more async step", "marginal", step_floor),
        fig("CPU time per step, async (end to end)", "async_cpu", None),
        fig("CPU time per step, sync (end to end)", "sync_cpu", None),
        fig("create (durable), per workflow", "create", ack_floor),
        fig("1-step workflow, create to complete", "one_run", step_floor),
        fig("floor: step checkpoint commit", "step_floor", None),
    ]
    if ack_floor != step_floor:
        report.figures.append(fig("floor: acknowledged-write commit", "ack_floor", None))
    report.details = {
        "store": store,
        "workflows": workflows,
        "steps": steps,
        "runs": config.runs,
        "floors": names,
    }
    report.notes = [
        "end to end = wall time / (workflows x steps), including each workflow's durable "
        "create and its wait",
        "excluding create = the same without the time spent in create()",
        "marginal = (10-step workflow - 1-step workflow, both excluding create) / 9",
        "CPU time = process CPU (all threads) / steps: less sensitive than wall time to other "
        "load on the machine",
    ]
    return report


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse(__doc__ or NAME, argv))


if __name__ == "__main__":
    main()
