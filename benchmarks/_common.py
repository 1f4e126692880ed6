"""Helpers the process-level benchmarks share: creating instances, waiting for them, timings."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepline import Engine

from ._db import fetch, status_counts
from ._workflows import WORKFLOWS

FINISHED = ("complete", "errored", "terminated")
_CLOCK_TICKS = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


def client(url: str) -> Engine:
    """An engine without a worker that knows every benchmark workflow (``async with`` it)."""
    return Engine(url, WORKFLOWS, worker=False)


async def create_in_batches(
    engine: Engine, workflow: str, items: Iterable[Mapping[str, Any]], batch: int = 500
) -> float:
    """Create instances with ``create_batch`` in batches of ``batch``; return the seconds taken."""
    binding = engine.workflow(workflow)
    pending = list(items)
    start = time.perf_counter()
    for offset in range(0, len(pending), batch):
        await binding.create_batch(pending[offset : offset + batch])
    return time.perf_counter() - start


async def wait_for_status(
    url: str,
    workflow: str,
    count: int,
    statuses: tuple[str, ...],
    *,
    timeout: float,
    interval: float = 0.1,
    what: str = "",
) -> float:
    """Poll until ``count`` instances of ``workflow`` are in ``statuses``; return ``time.time()``
    when that was seen. Raises ``TimeoutError`` (with the counts by status) after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        counts = await status_counts(url, workflow)
        if sum(counts.get(s, 0) for s in statuses) >= count:
            return time.time()
        errored = {s: counts[s] for s in ("errored", "terminated") if counts.get(s)}
        if errored and statuses == ("complete",):
            raise RuntimeError(f"benchmark instances of {workflow} failed: {counts}")
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{what or workflow}: {count} instances not {'/'.join(statuses)} within "
                f"{timeout:.0f} s; by status: {counts}"
            )
        await asyncio.sleep(interval)


@dataclass(frozen=True)
class Span:
    """First claim to last completion of a workflow's instances, from the stored timestamps
    (``instances.started_at`` is set by the first claim, ``ended_at`` at completion; both on
    the store's clock)."""

    first_claim: float
    last_end: float

    @property
    def seconds(self) -> float:
        return self.last_end - self.first_claim


async def span(url: str, workflow: str) -> Span:
    rows = await fetch(
        url,
        "SELECT min(started_at), max(ended_at) FROM {t}instances WHERE workflow = '"
        + workflow
        + "'",
    )
    first, last = rows[0]
    if first is None or last is None:
        raise RuntimeError(f"no finished instance of {workflow} to time")
    return Span(float(first), float(last))


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat``)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text.rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / _CLOCK_TICKS
