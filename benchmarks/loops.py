"""Event loops: what one PostgreSQL round trip costs the client on each loop.

psycopg's asyncio connection (the one the store uses) registers the socket with the event loop
and arms a timer for every wait. This measures it on asyncio's own loop and on uvloop (the loop
stepline's CLI runs on where it is installed), against psycopg's blocking connection, which
waits in C: a single-row ``INSERT`` one after another, with ``synchronous_commit=off`` for the
session so that no WAL flush (whose time drifts by more than the difference measured) hides the
client's share. Wall and CPU time per statement; CPU is the measuring thread's own (user +
system), so it is what the client spends per round trip.

SQLite is not measured: its store waits on no socket.

Run: ``python -m benchmarks loops``.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from ._config import BenchConfig, parse
from ._floors import floor_table
from ._report import Figure, Floor, Report, median
from ._run import execute

NAME = "loops"
STATEMENTS = 2000


def _blocking(url: str, insert: str, n: int) -> tuple[float, float]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        for _ in range(100):
            conn.execute(insert, ("warm-up",))
        wall, cpu = time.perf_counter(), time.thread_time()
        for i in range(n):
            conn.execute(insert, (f"row {i}",))
        return time.perf_counter() - wall, time.thread_time() - cpu


async def _async(
    url: str, insert: str, n: int, cls: type[psycopg.AsyncConnection[Any]]
) -> tuple[float, float]:
    async with await cls.connect(url, autocommit=True) as conn:
        await conn.execute("SET synchronous_commit = off")
        for _ in range(100):
            await conn.execute(insert, ("warm-up",))
        wall, cpu = time.perf_counter(), time.thread_time()
        for i in range(n):
            await conn.execute(insert, (f"row {i}",))
        return time.perf_counter() - wall, time.thread_time() - cpu


Measure = Callable[[str, str, int], tuple[float, float]]


def _on_loop(
    factory: Callable[[], asyncio.AbstractEventLoop], cls: type[psycopg.AsyncConnection[Any]]
) -> Measure:
    def measure(url: str, insert: str, n: int) -> tuple[float, float]:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(_async(url, insert, n, cls))

    return measure


def _modes() -> dict[str, Measure]:
    loops: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {"asyncio": asyncio.new_event_loop}
    try:
        import uvloop
    except ImportError:
        pass
    else:
        loops["uvloop"] = uvloop.new_event_loop
    modes: dict[str, Measure] = {"blocking": _blocking}
    for loop, factory in loops.items():
        modes[f"psycopg's asyncio connection on {loop}"] = _on_loop(
            factory, psycopg.AsyncConnection
        )
    return modes


async def run(config: BenchConfig) -> list[Report]:
    """One report, for PostgreSQL (when ``config.stores`` has it)."""
    if "postgres" not in config.stores:
        return []
    n = 500 if config.quick else STATEMENTS
    modes = _modes()
    series: dict[str, list[float]] = defaultdict(list)
    url = config.pg_url.split("?")[0]
    with floor_table(config.pg_url) as insert:
        for _ in range(config.runs):
            for mode, measure in modes.items():  # the modes take turns: drift weighs alike
                # Each in a thread of its own, on a loop of its own (or none).
                wall, cpu = await asyncio.to_thread(measure, url, insert, n)
                series[f"{mode}_wall"].append(wall / n * 1e6)
                series[f"{mode}_cpu"].append(cpu / n * 1e6)

    def floor(kind: str) -> Floor:
        runs = series[f"blocking_{kind}"]
        name = f"psycopg's blocking connection, {'CPU' if kind == 'cpu' else kind} time per INSERT"
        return Floor(name, median(runs), "µs", tuple(runs))

    report = Report(
        NAME,
        f"One PostgreSQL round trip per event loop ({n} INSERTs, median of {config.runs} runs)",
    )
    for kind, label in (("wall", "wall time"), ("cpu", "client CPU")):
        base = floor(kind)
        report.figures.append(
            Figure(f"{label}, blocking connection", base.value, "µs", None, base.runs)
        )
        for mode in modes:
            if mode != "blocking":
                runs = tuple(series[f"{mode}_{kind}"])
                report.figures.append(Figure(f"{label}, {mode}", median(runs), "µs", base, runs))
    report.details = {"store": "postgres", "statements": n, "runs": config.runs}
    report.notes = [
        "one single-row INSERT per round trip, autocommit, synchronous_commit=off for the session",
        "client CPU = user + system CPU of the measuring thread, per INSERT",
    ]
    return [report]


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse(__doc__ or NAME, argv))


if __name__ == "__main__":
    main()
