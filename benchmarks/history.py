"""Long history: one instance with 10,000 sequential steps.

Time per step over the first and over the last 1,000 steps, and their ratio (target: last/first
at most 1.3, i.e. a step does not cost more as the history grows). Two measures of each window:

- wall time, from the stored step records: ``ended_at`` of the window's last step minus
  ``started_at`` of its first, over the window's length;
- CPU time of the engine's process: every step returns ``time.process_time()``, so the
  difference between the window's last and the previous window's last step output is the CPU
  the process spent on those steps. It is much less disturbed than wall time by other load on
  the machine (other engineers' tests share these 2 cores); for PostgreSQL it leaves out the
  server's CPU.

One in-process worker, one activation: this is the cost of recording step n while n - 1 are
recorded. A second instance does the same with a durable sleep (1 ms) after every 1,000 steps,
so it is activated 10 times and each activation replays the whole history recorded so far (up
to 9,000 steps): the replay figure is the gap at each sleep (the sleep itself, the claim,
loading the history and replaying it) divided by the steps replayed.

Run: ``python -m benchmarks history`` (``--quick``: 2,000 steps, windows of 200).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from stepline import Engine, StepRecord

from ._config import BenchConfig, database, parse, work_directory
from ._floors import step_floor
from ._report import Figure, Floor, Report, median
from ._run import execute
from ._workflows import WORKFLOWS, Long

NAME = "history"
NAP = 0.001


async def run(config: BenchConfig) -> list[Report]:
    """One report per store in ``config.stores``."""
    return [await _run_store(config, store) for store in config.stores]


async def _history(url: str, params: dict[str, Any]) -> list[StepRecord]:
    """Run one ``bench-long`` instance to completion; its ``do`` steps in order."""
    async with Engine(url, WORKFLOWS) as engine:
        instance = await engine.workflow(Long.name).create(params=params)
        status = await instance.wait(timeout=1800)
        if status.status != "complete":
            raise RuntimeError(f"long-history instance ended {status.status}: {status.error}")
        return [s for s in await instance.steps() if s.kind == "do"]


def _wall_us(steps: list[StepRecord], first: int, last: int) -> float:
    """µs of wall time per step from the start of step ``first`` to the end of step ``last``."""
    start, end = steps[first].started_at, steps[last].ended_at
    if start is None or end is None:
        raise RuntimeError(f"steps {first}..{last} lack timestamps")
    return (end - start) / (last - first + 1) * 1e6


def _cpu_us(steps: list[StepRecord], first: int, last: int) -> float:
    """µs of process CPU per step for steps ``first + 1`` .. ``last`` (from their outputs)."""
    return (float(steps[last].output) - float(steps[first].output)) / (last - first) * 1e6


def _replay_us(steps: list[StepRecord], every: int) -> float:
    """Median over the sleeps of (gap at the sleep - the sleep) / steps replayed after it."""
    per_step: list[float] = []
    for index in range(every, len(steps), every):
        before, after = steps[index - 1], steps[index]
        if before.ended_at is None or after.started_at is None:
            continue
        gap = after.started_at - before.ended_at - NAP
        per_step.append(gap / index * 1e6)
    return median(per_step)


async def _run_store(config: BenchConfig, store: str) -> Report:
    steps = 2_000 if config.quick else 10_000
    window = steps // 10
    runs = config.repetitions(heavy=True)
    series: dict[str, list[float]] = defaultdict(list)
    trend: list[list[float]] = []  # wall µs per step in each window, per run
    floor_name = ""
    with work_directory(config) as directory:
        for _ in range(runs):
            floor = step_floor(store, directory, config.pg_url)
            floor_name = floor.name
            series["floor"].append(floor.value)
            with database(config, store, directory) as url:
                records = await _history(url, {"steps": steps})
            first = _wall_us(records, 0, window - 1)
            last = _wall_us(records, steps - window, steps - 1)
            series["first"].append(first)
            series["last"].append(last)
            series["ratio"].append(last / first)
            cpu_first = _cpu_us(records, 0, window)
            cpu_last = _cpu_us(records, steps - window - 1, steps - 1)
            series["cpu_first"].append(cpu_first)
            series["cpu_last"].append(cpu_last)
            series["cpu_ratio"].append(cpu_last / cpu_first)
            trend.append([_wall_us(records, i, i + window - 1) for i in range(0, steps, window)])
            with database(config, store, directory) as url:
                records = await _history(url, {"steps": steps, "nap_every": window, "nap": NAP})
            series["replay"].append(_replay_us(records, window))
            series["nap_last"].append(_wall_us(records, steps - window, steps - 1))
            print(
                f"  {NAME} {store}: wall {first:,.0f} -> {last:,.0f} µs, "
                f"CPU {cpu_first:,.0f} -> {cpu_last:,.0f} µs",
                flush=True,
            )
    floor = Floor(floor_name, median(series["floor"]), "µs", tuple(series["floor"]))

    def fig(label: str, key: str, unit: str = "µs", with_floor: bool = False) -> Figure:
        return Figure(
            label, median(series[key]), unit, floor if with_floor else None, tuple(series[key])
        )

    w = f"{window:,}"
    report = Report(
        NAME, f"Long history on {store}: one instance, {steps:,} steps (median of {runs} runs)"
    )
    report.figures = [
        fig(f"per step, first {w} steps (wall)", "first", with_floor=True),
        fig(f"per step, last {w} steps (wall)", "last", with_floor=True),
        fig("last / first, wall (target <= 1.3)", "ratio", "x"),
        fig(f"CPU per step, first {w} steps (engine process)", "cpu_first"),
        fig(f"CPU per step, last {w} steps (engine process)", "cpu_last"),
        fig("last / first, CPU (target <= 1.3)", "cpu_ratio", "x"),
        fig(f"replay per recorded step (a sleep every {w} steps)", "replay"),
        fig(f"per step, last {w} steps, with those sleeps (wall)", "nap_last", with_floor=True),
        fig("floor: step checkpoint commit", "floor"),
    ]
    report.details = {
        "store": store,
        "steps": steps,
        "window": window,
        "runs": runs,
        "series": dict(series),
        "windows_us": trend,
    }
    report.notes = [
        "wall = (ended_at of the window's last step - started_at of its first) / window, from "
        "the stored step records; CPU = process_time() returned by the steps; one activation "
        "runs every step",
        "replay = (gap between the steps around each sleep - the 1 ms sleep) / steps recorded "
        "before it: claim, history load and replay, per step of history",
        f"wall µs per step in each window of {w} steps (last run): "
        + ", ".join(f"{us:.0f}" for us in trend[-1]),
        f"heavy benchmark: median of {runs} runs (--heavy-runs)",
    ]
    return report


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse(__doc__ or NAME, argv))


if __name__ == "__main__":
    main()
