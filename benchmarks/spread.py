"""Spread: a fleet-wide limit over 2 worker processes, when the steps do work of their own.

2,000 instances x 10 steps that each keep the CPU busy for 0.5 ms (``Trivial`` with ``burn``),
on a fresh database each time, run by 2 worker processes as ``throughput`` runs them: unlimited,
then under a fleet-wide ``concurrency = 50``, then unlimited by a single process. The limit's
instances take about as much CPU as the machine's 2 cores give only if they spread over both
workers (each takes its share of the limit); run by one process, they would get one core. The
floor is the unlimited 2-process run of the same repetition.

Run: ``python -m benchmarks spread`` (``--quick``: 500 instances).
"""

from __future__ import annotations

from collections import defaultdict

from ._config import BenchConfig, database, work_directory
from ._report import Figure, Floor, Report, median
from ._workflows import Trivial, TrivialKeyed, TrivialLimited
from .throughput import KEYS, measure

NAME = "spread"
STEPS = 10
BURN = 0.0005
"""Seconds of CPU each step takes."""
RUNS = (
    ("unlimited", "2 processes, unlimited", {"processes": 2}),
    ("limited", "2 processes, concurrency 50", {"processes": 2, "workflow": TrivialLimited.name}),
    (
        "keyed",
        f"2 processes, key_concurrency 1 over {KEYS} keys",
        {"processes": 2, "workflow": TrivialKeyed.name, "keys": KEYS},
    ),
    ("one", "1 process, unlimited", {"processes": 1, "workflow": Trivial.name}),
)


async def run(config: BenchConfig) -> list[Report]:
    """One report per store in ``config.stores``."""
    return [await _run_store(config, store) for store in config.stores]


async def _run_store(config: BenchConfig, store: str) -> Report:
    instances = 500 if config.quick else 2_000
    runs = config.repetitions(heavy=True)
    series: dict[str, list[float]] = defaultdict(list)
    with work_directory(config) as directory:
        for _ in range(runs):
            for key, label, options in RUNS:
                with database(config, store, directory) as url:
                    result = await measure(
                        url,
                        directory / "logs",
                        instances=instances,
                        steps=STEPS,
                        burn=BURN,
                        **options,
                    )
                series[key].append(result["steps_per_s"])
                series[f"{key}_cpu"].append(result["cpu_us_per_step"])
                print(f"  {NAME} {store} {label}: {result['steps_per_s']:,.0f} steps/s", flush=True)
    floor = Floor(
        "unlimited, 2 processes", median(series["unlimited"]), "/s", tuple(series["unlimited"])
    )
    report = Report(
        NAME,
        f"Spread on {store}: {instances:,} instances x {STEPS} steps of {BURN * 1e3:g} ms CPU "
        f"(median of {runs} runs)",
    )
    for key, label, _options in RUNS:
        report.figures.append(
            Figure(f"steps/s, {label}", median(series[key]), "/s", floor, tuple(series[key]))
        )
    for key, label, _options in RUNS:
        values = series[f"{key}_cpu"]
        report.figures.append(Figure(f"worker CPU per step, {label}", median(values), "µs"))
    report.details = {
        "store": store,
        "instances": instances,
        "steps": STEPS,
        "burn_seconds": BURN,
        "runs": runs,
        "series": dict(series),
    }
    report.notes = [
        "steps/s as in throughput: from the first claim to the last completion",
        "ratio = steps/s / the unlimited 2-process run of the same repetition",
        "a step's CPU holds its worker's event loop: one process runs one step at a time",
    ]
    return report
