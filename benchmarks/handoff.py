"""The hand-off of a sync callback to a thread and back, alone, per call.

What a sync step pays on top of an async one, taken apart: a trivial function called 20,000
times one after another (each awaited before the next), then by 50 tasks at once, in these ways:

- ``await`` of an ``async def`` (no hand-off: what an async step's callback costs);
- ``copy_context().run`` on the loop (the context copy a thread gets, without the thread);
- the trip back alone: a future settled through ``loop.call_soon_threadsafe`` from the loop's
  own thread (the self-pipe or eventfd write and the loop's wake-up, no thread);
- ``loop.run_in_executor(None, ...)`` with a copy of the context (the path before issue 56);
- stepline's step threads (``stepline._threads``, the path now).

Figures per call: wall time, process CPU, and context switches of all the process's threads
(from ``/proc``, where there is one). No database: see ``sequential`` for the step around it.

Run: ``python -m benchmarks handoff`` (or ``python -m benchmarks.handoff``).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from stepline import _threads

from ._config import BenchConfig, parse
from ._report import Figure, Report, median
from ._run import execute

NAME = "handoff"
TASKS = 50


def _one() -> int:
    return 1


async def _one_async() -> int:
    return 1


def _settle(future: asyncio.Future[int]) -> None:
    if not future.done():
        future.set_result(1)


async def _awaited() -> int:
    return await _one_async()


async def _copied() -> int:
    return int(contextvars.copy_context().run(_one))


async def _woken() -> int:
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon_threadsafe(_settle, future)
    return await future


async def _executor() -> int:
    run = contextvars.copy_context().run
    result: int = await asyncio.get_running_loop().run_in_executor(
        None, functools.partial(run, _one)
    )
    return result


async def _step_thread() -> int:
    result: int = await _threads.call(asyncio.get_running_loop(), _one, ())
    return result


WAYS: dict[str, tuple[str, Callable[[], Awaitable[int]]]] = {
    "await": ("await of an async def (no hand-off)", _awaited),
    "copy": ("copy_context().run on the loop (no thread)", _copied),
    "wake": ("the trip back alone: call_soon_threadsafe, no thread", _woken),
    "executor": ("run_in_executor with a context copy (before)", _executor),
    "threads": ("stepline's step threads (now)", _step_thread),
}
THREADED = ("executor", "threads")


def _switches() -> int | None:
    """Context switches of all the process's threads so far (None without ``/proc``)."""
    total = 0
    try:
        for task in Path("/proc/self/task").iterdir():
            for line in (task / "status").read_text().splitlines():
                if "ctxt_switches:" in line:
                    total += int(line.split()[-1])
    except OSError:
        return None
    return total


async def _measure(way: Callable[[], Awaitable[int]], calls: int, tasks: int) -> dict[str, float]:
    """Per call: wall and CPU µs, context switches; ``tasks`` tasks share the ``calls``."""

    async def worker(count: int) -> None:
        for _ in range(count):
            await way()

    await asyncio.gather(*(worker(max(calls // 50 // tasks, 1)) for _ in range(tasks)))  # warm up
    switches = _switches()
    cpu = time.process_time()
    start = time.perf_counter()
    await asyncio.gather(*(worker(calls // tasks) for _ in range(tasks)))
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu
    after = _switches()
    done = calls // tasks * tasks
    figures = {"wall": wall / done * 1e6, "cpu": cpu / done * 1e6}
    if switches is not None and after is not None:
        figures["switches"] = (after - switches) / done
    return figures


async def run(config: BenchConfig) -> list[Report]:
    """One report (no database: ``config.stores`` does not matter)."""
    calls = 4_000 if config.quick else 20_000
    series: dict[str, list[float]] = defaultdict(list)
    for _ in range(config.runs):
        for key, (_label, way) in WAYS.items():  # the ways take turns within each run
            for tasks, mode in ((1, "seq"), (TASKS, "conc")):
                if mode == "conc" and key not in THREADED:
                    continue
                for name, value in (await _measure(way, calls, tasks)).items():
                    series[f"{key}_{mode}_{name}"].append(value)
    _threads.release_idle()
    report = Report(NAME, f"A sync callback's hand-off, per call (median of {config.runs} runs)")

    def add(label: str, key: str, unit: str) -> None:
        if series[key]:
            report.figures.append(
                Figure(label, median(series[key]), unit, None, tuple(series[key]))
            )

    for mode, how in (("seq", "one at a time"), ("conc", f"{TASKS} tasks at once")):
        for key, (label, _way) in WAYS.items():
            add(f"{label}, {how}: wall", f"{key}_{mode}_wall", "µs")
            add(f"{label}, {how}: CPU", f"{key}_{mode}_cpu", "µs")
            add(f"{label}, {how}: context switches", f"{key}_{mode}_switches", "")
    report.details = {"calls": calls, "tasks": TASKS, "runs": config.runs}
    report.notes = [
        "per call: wall and process CPU (all threads) over the calls; context switches of all "
        "the process's threads, voluntary and not, from /proc",
        "no database and a trivial function: the cost of the hand-off itself",
    ]
    return [report]


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse(__doc__ or NAME, argv))


if __name__ == "__main__":
    main()
