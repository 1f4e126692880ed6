"""Sequential workflows: the engine's fixed cost per step.

200 workflows of 10 trivial steps run one after another (each created, then awaited to completion
before the next), with the worker in the same process. The time per step is compared with the
floor measured in the same run on the same disk, alone, right before and right after the
workflows (the mean of the two): one single-row INSERT + COMMIT on SQLite in WAL mode with
``synchronous=NORMAL``, the setting the engine uses for step checkpoints (for PostgreSQL: one
single-row committed INSERT over loopback).

Figures:

- end to end: wall time from each create to its workflow's completion, over all steps;
- marginal cost of a step: what one more step adds, (10-step workflow - 1-step workflow) / 9,
  both end to end: the engine's cost per step without the fixed costs of a workflow (its
  durable create, its finish, the wait), which the end-to-end figure spreads over 10 steps;
- the same end to end with sync callbacks, in a step thread and in-line (``{"inline": True}``),
  each against the async figure of the same run (the kinds take turns in one run);
- a 1-step workflow, create to complete: the fixed cost of a workflow plus one step;
- create alone: ``create()`` with no worker running, per instance, against the floor of an
  acknowledged write (SQLite ``synchronous=FULL``; PostgreSQL's floor is the same commit).

In this process the engine's worker takes each new instance as it is created (no claim round
trip), as an application that creates and runs its workflows in one process gets it.

Run: ``python -m benchmarks.sequential`` (or ``python -m benchmarks`` for everything).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepline import Engine

from ._config import BenchConfig, database, parse, work_directory
from ._floors import ack_floor, postgres_commit_async, step_floor
from ._report import Figure, Floor, Report, median
from ._run import execute
from ._workflows import Trivial

NAME = "sequential"


@dataclass(frozen=True)
class Timing:
    """Wall time of a sequential run and the CPU time the process used meanwhile (all
    threads)."""

    total: float
    cpu: float


ASYNC: dict[str, Any] = {}
THREAD: dict[str, Any] = {"sync": True}
INLINE: dict[str, Any] = {"sync": True, "inline": True}
"""The kinds of callback of :class:`~benchmarks._workflows.Trivial`, as its params."""


async def run_sequential(
    url: str, *, workflows: int, shapes: Sequence[tuple[int, Mapping[str, Any]]]
) -> list[Timing]:
    """Run ``workflows`` workflows of each shape ``(steps, kind)`` one after another (each
    created, then awaited to completion), with an in-process worker; one :class:`Timing` per
    shape. ``kind``: :data:`ASYNC`, :data:`THREAD` or :data:`INLINE`.

    The shapes take turns (a workflow of the first, then one of the second, ...), so that a
    drift of the machine during the run (the disk's fsync time varies from minute to minute)
    weighs on every shape alike and cancels out of their difference.
    """
    params = [{"steps": steps, **kind} for steps, kind in shapes]
    totals = [0.0] * len(shapes)
    cpus = [0.0] * len(shapes)
    async with Engine(url, [Trivial]) as engine:
        binding = engine.workflow(Trivial)
        for _ in range(max(workflows // 20, 3)):  # warm up: caches, thread pool, code paths
            for p in params:
                await (await binding.create(params=p)).wait(timeout=60)
        for _ in range(workflows):
            for index, p in enumerate(params):
                cpu = time.process_time()
                start = time.perf_counter()
                instance = await binding.create(params=p)
                status = await instance.wait(timeout=60)
                totals[index] += time.perf_counter() - start
                cpus[index] += time.process_time() - cpu
                if status.status != "complete":
                    raise RuntimeError(f"benchmark workflow ended {status.status}: {status.error}")
    return [Timing(total, cpu) for total, cpu in zip(totals, cpus, strict=True)]


async def run_creates(url: str, *, count: int) -> float:
    """Seconds per ``create()`` with no worker running (nothing else competes)."""
    async with Engine(url, [Trivial], worker=False) as engine:
        binding = engine.workflow(Trivial)
        for _ in range(max(count // 20, 3)):
            await binding.create(params={"steps": 1})
        start = time.perf_counter()
        for _ in range(count):
            await binding.create(params={"steps": 1})
        return (time.perf_counter() - start) / count


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
            before, ack_floor = _floors(config, store, directory)
            names["step"], names["ack"] = before.name, ack_floor.name
            series["floor_before"].append(before.value)
            series["ack_floor"].append(ack_floor.value)
            if store == "postgres":
                series["async_floor"].append((await postgres_commit_async(config.pg_url)).value)
            timings: dict[str, Timing] = {}
            with database(config, store, directory) as url:
                shapes = [(steps, ASYNC), (1, ASYNC), (steps, THREAD), (steps, INLINE)]
                found = await run_sequential(url, workflows=workflows, shapes=shapes)
                timings["async"], timings["one"], timings["sync"], timings["inline"] = found
            # The floor again, alone, right after the workflows: the disk's fsync time drifts
            # within minutes, and the mean of the two brackets the run it is compared with.
            after = step_floor(store, directory, config.pg_url)
            series["floor_after"].append(after.value)
            series["step_floor"].append((before.value + after.value) / 2)
            with database(config, store, directory) as url:
                series["create"].append(await run_creates(url, count=workflows) * 1e6)
            us = 1e6 / workflows  # seconds over all workflows -> µs per workflow
            for key in ("async", "sync", "inline"):
                series[f"{key}_e2e"].append(timings[key].total * us / steps)
                series[f"{key}_cpu"].append(timings[key].cpu * us / steps)
            for key in ("sync", "inline"):
                series[f"{key}_e2e_ratio"].append(timings[key].total / timings["async"].total)
                series[f"{key}_cpu_ratio"].append(timings[key].cpu / timings["async"].cpu)
            series["one"].append(timings["one"].total * us)
            series["marginal"].append(
                (timings["async"].total - timings["one"].total) * us / (steps - 1)
            )
    checkpoint = Floor(
        f"{names['step']}; the mean of right before and right after the workflows",
        median(series["step_floor"]),
        "µs",
        tuple(series["step_floor"]),
    )
    ack_floor = Floor(names["ack"], median(series["ack_floor"]), "µs", tuple(series["ack_floor"]))

    def fig(label: str, key: str, floor: Floor | None, unit: str = "µs") -> Figure:
        return Figure(label, median(series[key]), unit, floor, tuple(series[key]))

    shape = f"{workflows} x {steps}"
    report = Report(
        NAME, f"Sequential workflows on {store} ({shape}, median of {config.runs} runs)"
    )
    report.figures = [
        fig("marginal cost of one more step (async)", "marginal", checkpoint),
        fig(f"per step, async callbacks ({shape}, end to end)", "async_e2e", checkpoint),
        fig(f"per step, sync callbacks in a thread ({shape}, end to end)", "sync_e2e", checkpoint),
        fig(f"per step, sync callbacks inline ({shape}, end to end)", "inline_e2e", checkpoint),
        fig("1-step workflow, create to complete", "one", checkpoint),
        fig("create alone (durable, no worker running)", "create", ack_floor),
        fig("CPU time per step, async (end to end)", "async_cpu", None),
        fig("CPU time per step, sync in a thread (end to end)", "sync_cpu", None),
        fig("CPU time per step, sync inline (end to end)", "inline_cpu", None),
        fig("sync in a thread / async, per step end to end", "sync_e2e_ratio", None, "x"),
        fig("sync in a thread / async, CPU per step", "sync_cpu_ratio", None, "x"),
        fig("sync inline / async, per step end to end", "inline_e2e_ratio", None, "x"),
        fig("sync inline / async, CPU per step", "inline_cpu_ratio", None, "x"),
        fig("floor: step checkpoint commit (mean of before and after)", "step_floor", None),
        fig("  the same, measured right before the workflows", "floor_before", None),
        fig("  the same, measured right after them", "floor_after", None),
    ]
    if store == "sqlite":  # PostgreSQL commits every write alike
        report.figures.append(fig("floor: acknowledged-write commit", "ack_floor", None))
    if series["async_floor"]:
        report.figures.append(
            fig("floor's INSERT through psycopg's asyncio connection", "async_floor", checkpoint)
        )
    report.details = {
        "store": store,
        "workflows": workflows,
        "steps": steps,
        "runs": config.runs,
        "floors": names,
    }
    report.notes = [
        "the step floor is measured alone right before and right after each run's workflows; "
        "the run's ratios use the mean of the two",
        "marginal = (10-step workflow - 1-step workflow, both end to end) / 9: the cost of a "
        "step without the fixed costs of a workflow (the two kinds take turns in one run)",
        "sync / async: the run's own ratio (the kinds of callback take turns in one run), its "
        "median over the runs; inline = {'inline': True}, the callback on the event loop",
        "end to end = wall time / (workflows x steps), from each create to its completion, "
        "including the durable create, the finish and the wait",
        "CPU time = process CPU (all threads) / steps: less sensitive than wall time to other "
        "load on the machine",
    ]
    return report


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse(__doc__ or NAME, argv))


if __name__ == "__main__":
    main()
