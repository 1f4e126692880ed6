"""Running a benchmark: one event loop (the kind ``stepline worker`` runs on, see
:mod:`stepline._loop`), load averages around it, then the tables and JSON."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from stepline import _loop

from ._config import BenchConfig
from ._report import Report, load_average, report_all

Benchmark = Callable[[BenchConfig], Coroutine[Any, Any, list[Report]]]


def execute(benchmark: Benchmark, config: BenchConfig) -> list[Report]:
    """Run ``benchmark`` under ``config``, print its reports and (unless told not to) write them
    as JSON; each report notes the load averages at the start and the end of the benchmark."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    loop = _loop.loop_name()
    before = load_average()
    start = time.monotonic()
    reports = _loop.run(benchmark(config))
    elapsed = time.monotonic() - start
    after = load_average()
    for report in reports:
        report.load = {"start": before, "end": after}
        report.details["elapsed_seconds"] = elapsed
        report.details.setdefault("event_loop", loop)
    report_all(reports, write_json=config.write_json)
    if reports:
        print(f"  ({reports[0].benchmark}: {elapsed:.0f} s)", flush=True)
    return reports
