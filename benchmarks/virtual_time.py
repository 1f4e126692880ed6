"""Virtual time: a workflow that takes four months of its own time, tested in a fraction of a
second of wall time under :mod:`stepline.testing`.

The workflow sleeps 30 days between each of 5 steps, one step fails 3 times and is retried with
exponential backoff from 1 hour (1 h, 2 h, 4 h), and it then waits 7 days for an event that never
comes (the wait times out). Under the toolkit the real engine runs it from creation to the end on
a virtual clock: ``await inst.output()`` passes the time from timer to timer.

Figures: wall time for the whole scenario (creating the environment's database, running the
instance to its end, closing), the activations it took, and the floor of the store's step
commit, so the ratio reads as "so many commits' worth". The target is under 1 s of wall time.

Run: ``python -m benchmarks virtual-time``.
"""

from __future__ import annotations

import time
from typing import Any

from stepline import StepTimeoutError, WorkflowEvent, WorkflowStep, workflow
from stepline.testing import StepError, WorkflowTestEnv

from ._config import BenchConfig, database, work_directory
from ._floors import step_floor
from ._report import Figure, Floor, Report, median

NAME = "virtual-time"
RETRY = {"retries": {"limit": 3, "delay": "1 hour", "backoff": "exponential"}}


@workflow(name="bench-months")
async def months(event: WorkflowEvent, step: WorkflowStep) -> Any:
    done = []
    for n in range(1, 6):
        done.append(await step.do(f"step {n}", RETRY if n == 3 else {}, lambda n=n: n))
        if n < 5:
            await step.sleep(f"month {n}", "30 days")
    try:
        await step.wait_for_event("answer", type="answer", timeout="7 days")
    except StepTimeoutError:
        return {"steps": done, "answer": None}
    return {"steps": done, "answer": "given"}


async def scenario(store: str) -> dict[str, float]:
    """Run the scenario once on ``store`` (a kind or URL); its wall time and what it did."""
    start = time.perf_counter()
    async with WorkflowTestEnv([months], store=store) as env:
        began = env.now()
        inst = await env.create(months)
        inst.mock_step("step 3", error=StepError("flaky", times=3))
        output = await inst.output()
        if output != {"steps": [1, 2, 3, 4, 5], "answer": None}:
            raise RuntimeError(f"the scenario ended with {output!r}")
        await inst.assert_step_ran("step 3", times=4)
        days = (env.now() - began) / 86400
        steps = len(await inst.steps())
    return {"wall": time.perf_counter() - start, "days": days, "steps": steps}


async def run(config: BenchConfig) -> list[Report]:
    """One report per store in ``config.stores``."""
    reports = []
    with work_directory(config) as directory:
        for store in config.stores:
            walls: list[float] = []
            floors: list[float] = []
            days = 0.0
            floor_name = ""
            for _ in range(config.repetitions(heavy=False)):
                floor = step_floor(store, directory, config.pg_url)
                floor_name = floor.name
                floors.append(floor.value)
                with database(config, store, directory) as url:
                    result = await scenario(url)
                walls.append(result["wall"] * 1e6)
                days = result["days"]
            floor_figure = Floor(floor_name, median(floors), "µs", tuple(floors))
            reports.append(
                Report(
                    NAME,
                    f"virtual time ({store}): {days:.1f} days of workflow time, target < 1 s",
                    [
                        Figure(
                            "whole scenario (wall)", median(walls), "µs", floor_figure, tuple(walls)
                        ),
                        Figure("floor: step checkpoint commit", floor_figure.value, "µs"),
                    ],
                    details={"virtual_days": days, "target_wall_seconds": 1.0},
                )
            )
    return reports
