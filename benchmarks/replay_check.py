"""Replay check: histories replayed per second by ``replay_check`` (what ``stepline workflows
replay-check NAME --all`` runs), over 10,000 finished instances of 5 steps each.

The instances are created and run first (not measured); then the check opens the database
read-only, reads the histories a page at a time and replays each through the workflow's code
on a scratch store. Target: 10,000 histories in under a minute on SQLite.

Run: ``python -m benchmarks replay_check`` (``--quick``: 1,000 instances).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence

from stepline import Engine
from stepline.replaycheck import replay_check

from ._common import create_in_batches, wait_for_status
from ._config import BenchConfig, database, parse, work_directory
from ._report import Figure, Report, median
from ._run import execute
from ._workflows import WORKFLOWS, Trivial

NAME = "replay_check"
STEPS = 5


async def run(config: BenchConfig) -> list[Report]:
    """One report per store in ``config.stores``."""
    return [await _run_store(config, store) for store in config.stores]


async def _recorded(url: str, count: int) -> None:
    """``count`` finished instances of ``Trivial`` with ``STEPS`` steps each."""
    async with Engine(url, WORKFLOWS) as engine:
        items = [{"params": {"steps": STEPS}} for _ in range(count)]
        await create_in_batches(engine, Trivial.name, items)
        await wait_for_status(url, Trivial.name, count, ("complete",), timeout=1800)


async def _run_store(config: BenchConfig, store: str) -> Report:
    count = 1_000 if config.quick else 10_000
    runs = config.repetitions(heavy=True)
    series: dict[str, list[float]] = defaultdict(list)
    with work_directory(config) as directory, database(config, store, directory) as url:
        await _recorded(url, count)
        for _ in range(runs):
            start = time.perf_counter()
            report = await replay_check(url, [Trivial], limit=None)
            seconds = time.perf_counter() - start
            if len(report.results) != count or not report.ok:
                raise RuntimeError(f"replayed {len(report.results)} of {count}, or some diverged")
            series["seconds"].append(seconds)
            series["rate"].append(count / seconds)
            print(f"  {NAME} {store}: {count:,} histories in {seconds:.1f} s", flush=True)
    result = Report(
        NAME,
        f"Replay check on {store}: {count:,} finished instances of {STEPS} steps "
        f"(median of {runs} runs)",
    )
    rates, times = tuple(series["rate"]), tuple(series["seconds"])
    result.figures = [
        Figure("histories replayed per second", median(series["rate"]), "/s", None, rates),
        Figure(f"time for {count:,} histories", median(series["seconds"]), "s", None, times),
    ]
    result.details = {"store": store, "instances": count, "steps": STEPS, "series": dict(series)}
    result.notes = [
        "replay_check(url, [workflow], limit=None): read-only store, histories read 500 at a "
        "time, each replayed on one scratch in-memory store; no callback runs",
    ]
    return result


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse(__doc__ or NAME, argv))
