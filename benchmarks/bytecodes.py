"""Python bytecodes the engine executes per step and per workflow: a count, not a time.

Timed figures on a shared machine move by a fifth or more from run to run, and a change of a
few percent in the engine's own Python is lost in that noise. The number of bytecode
instructions the interpreter executes for the same work does not depend on the load: it
moves only when the code's path does. So this benchmark runs ``sequential``'s workload (trivial
async steps, each workflow created and awaited before the next, the worker in the process) and
counts, with ``sys.settrace`` opcode events, every bytecode executed in the process's Python:
stepline's, the drivers' Python parts (psycopg's), the event loop's when it is asyncio's.

Figures: per 1-step workflow (create to complete), per 10-step workflow, and the marginal step
((10-step - 1-step) / 9). Compare them across commits (run this file from each checkout); a
second measurement in the same run shows how far two counts of the same code differ (timers
and the worker's periodic looks make a few tens of bytecodes of difference). With uvloop (the
default where installed) the loop's own code is C and not counted; ``STEPLINE_EVENT_LOOP=asyncio``
counts it too.

Run: ``python -m benchmarks bytecodes`` (or ``python -m benchmarks.bytecodes``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any

from stepline import Engine

from ._config import BenchConfig, database, parse, work_directory
from ._report import Figure, Report
from ._run import execute
from ._workflows import Trivial

NAME = "bytecodes"
STEPS = 10


class _Counter:
    """Counts opcode events of every Python frame while installed."""

    def __init__(self) -> None:
        self.count = 0

    def trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            self.count += 1
        return self.trace


async def _count(url: str, workflows: int) -> dict[str, float]:
    """Bytecodes per workflow of 1 and of ``STEPS`` steps, each shape counted twice."""
    counts: dict[str, float] = {}
    async with Engine(url, [Trivial]) as engine:
        binding = engine.workflow(Trivial)
        for _ in range(30):  # warm up: caches, code paths, the worker's first looks
            await (await binding.create(params={"steps": STEPS})).wait(timeout=60)
        for label, steps in (("one", 1), ("many", STEPS), ("one_again", 1), ("many_again", STEPS)):
            counter = _Counter()
            sys.settrace(counter.trace)
            try:
                for _ in range(workflows):
                    await (await binding.create(params={"steps": steps})).wait(timeout=60)
            finally:
                sys.settrace(None)
            counts[label] = counter.count / workflows
    return counts


async def run(config: BenchConfig) -> list[Report]:
    """One report per store in ``config.stores``."""
    workflows = 5 if config.quick else 20
    loop = os.environ.get("STEPLINE_EVENT_LOOP", "the default (uvloop where installed)")
    reports = []
    with work_directory(config) as directory:
        for store in config.stores:
            with database(config, store, directory) as url:
                counts = await _count(url, workflows)
            report = Report(NAME, f"Python bytecodes executed, {store} (event loop: {loop})")
            marginal = (counts["many"] - counts["one"]) / (STEPS - 1)
            again = (counts["many_again"] - counts["one_again"]) / (STEPS - 1)
            report.figures = [
                Figure("per 1-step workflow, create to complete", counts["one"], "bytecodes"),
                Figure(f"per {STEPS}-step workflow", counts["many"], "bytecodes"),
                Figure("marginal step ((10-step - 1-step) / 9)", marginal, "bytecodes"),
                Figure("per 1-step workflow, counted again", counts["one_again"], "bytecodes"),
                Figure("marginal step, counted again", again, "bytecodes"),
            ]
            report.details = {"workflows": workflows, "steps": STEPS, "event_loop": loop}
            report.notes = [
                "a count, not a time: it does not move with the machine's load; compare it "
                "across commits",
                "the second count of the same code shows the run's own spread (timers, the "
                "worker's periodic looks)",
            ]
            reports.append(report)
    return reports


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse(__doc__ or NAME, argv))


if __name__ == "__main__":
    main()
