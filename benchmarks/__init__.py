"""Stepline's benchmarks: printed, never asserted.

``python -m benchmarks`` runs them all; ``python -m benchmarks sequential --runs 3`` one of them;
``python -m benchmarks.sequential`` also works. Every figure is shown next to a floor measured in
the same run (the cheapest durable write the database can do) and their ratio, and every report
is written as JSON to ``benchmarks/results/`` (git-ignored).

Adding a benchmark: a module with ``async def run(config: BenchConfig) -> list[Report]`` (one
report per store in ``config.stores``, using :func:`benchmarks._config.database` for a fresh
database and :mod:`benchmarks._floors` for the floor), registered in :data:`BENCHMARKS`.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from . import sequential
from ._config import BenchConfig
from ._report import Report

Benchmark = Callable[[BenchConfig], Coroutine[Any, Any, list[Report]]]

BENCHMARKS: dict[str, Benchmark] = {
    sequential.NAME: sequential.run,
}

__all__ = ["BENCHMARKS", "BenchConfig", "Benchmark", "Report"]
