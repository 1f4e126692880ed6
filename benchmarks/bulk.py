"""Bulk: a bulk restart by filter of 100,000 errored instances (``--quick``: 10,000), with the
worker running it SIGKILLed midway and another started.

The instances are seeded in SQL (the load is the benchmark's, not the create path's): workflow
``bulk-charge``, which no benchmark worker serves (the restarted instances stay queued), each
errored with tags ``customer = 'c-42'`` and ``n``, a complete step ``prepare`` and an errored
step ``charge``. A job restarts ``customer = 'c-42' and status = 'errored'`` from ``charge``;
a benchmark worker runs it (the bulk runner every worker has, batches of
``operations.runner.BATCH``), is SIGKILLed once half is done, and a second worker finishes it.
The check: the job ends with every instance done and none skipped, and every instance is queued
with step ``prepare`` alone (a second restart of one would have found no step ``charge`` and
been skipped), so each was restarted exactly once.

The figure is the wall time per instance from the first worker's start to the job's end (the
kill and the second worker's start-up included), against the floor of one acknowledged write
(a single-row committed insert): below 1, a batch restarts instances for less than a commit
each.

Run: ``python -m benchmarks bulk [--stores postgres]``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from stepline.operations.language import parse
from stepline.store import create_store
from stepline.store.base import Store
from stepline.store.operations import NewBulkJob
from stepline.store.postgres import split_url
from stepline.store.sqlite import path_from_url

from ._config import BenchConfig, database, work_directory
from ._config import parse as parse_args
from ._floors import ack_floor
from ._procs import WorkerOptions, WorkerProcess
from ._report import Figure, Floor, Report, median
from ._run import execute

NAME = "bulk"
WORKFLOW = "bulk-charge"
FILTER = "customer = 'c-42' and status = 'errored'"
POLL = 0.05
TIMEOUT = 1800.0

_SEED = [
    f"""INSERT INTO instances (workflow, id, status, trigger, created_at, updated_at, started_at,
        ended_at, error, tags)
    SELECT '{WORKFLOW}', 'i' || n, 'errored', 'api', 1000.0 + n, 1000.0 + n, 1000.0 + n,
        1000.0 + n, '{{"name": "NonRetryableError", "message": "declined"}}',
        '{{"customer": "c-42", "n": ' || n || '}}'
    FROM numbers""",
    f"""INSERT INTO steps (instance_pk, name, count, seq, kind, status, output, started_at,
        ended_at)
    SELECT pk, 'prepare', 1, 1, 'do', 'complete', '1', created_at, created_at
    FROM instances WHERE workflow = '{WORKFLOW}'""",
    f"""INSERT INTO steps (instance_pk, name, count, seq, kind, status, error, started_at,
        ended_at)
    SELECT pk, 'charge', 1, 2, 'do', 'errored', error, created_at, created_at
    FROM instances WHERE workflow = '{WORKFLOW}'""",
]
_RESTARTED_ONCE = f"""
    SELECT count(*), sum(CASE WHEN (SELECT count(*) FROM steps s WHERE s.instance_pk = i.pk)
        = 1 THEN 1 ELSE 0 END)
    FROM instances i WHERE workflow = '{WORKFLOW}' AND status = 'queued'
"""


async def run(config: BenchConfig) -> list[Report]:
    """One report per store in ``config.stores``."""
    return [await _run_store(config, store) for store in config.stores]


def _sql(url: str, statements: list[str]) -> list[Any]:
    """Run ``statements`` in one transaction; the rows of the last."""
    if url.startswith("sqlite:"):
        with closing(sqlite3.connect(path_from_url(url), timeout=60)) as conn:
            rows: list[Any] = []
            for statement in statements:
                rows = conn.execute(statement).fetchall()
            conn.commit()
            return rows
    conninfo, schema = split_url(url)
    with psycopg.connect(conninfo) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        cur = None
        for statement in statements:
            cur = conn.execute(statement.encode())
        return cur.fetchall() if cur is not None and cur.description else []


def _seed(url: str, count: int) -> None:
    if url.startswith("sqlite:"):
        numbers = (
            "WITH RECURSIVE numbers(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM numbers"
            f" WHERE n < {count}) "
        )
        first = _SEED[0].replace(f"SELECT '{WORKFLOW}'", numbers + f"SELECT '{WORKFLOW}'", 1)
        _sql(url, [first, *_SEED[1:], "ANALYZE"])
        return
    series = f"FROM generate_series(1, {count}) AS numbers(n)"
    _sql(url, [_SEED[0].replace("FROM numbers", series), *_SEED[1:], "ANALYZE"])


async def _done(store: Store, job_id: str) -> tuple[str, int, int]:
    job = await store.operations.bulk_job(job_id)
    return job.status, job.done, job.skipped


async def restart_once(url: str, count: int, logs: Path) -> dict[str, float]:
    """Run the job with a kill midway; its figures, and the check's outcome (1.0: passed)."""
    store: Store = create_store(url)
    await store.open()
    try:
        job = await store.operations.start_bulk(
            NewBulkJob("bulk-bench", "restart", parse(FILTER), from_step="charge")
        )
        began = time.perf_counter()
        first = await WorkerProcess.start(url, logs, WorkerOptions())
        deadline = time.monotonic() + TIMEOUT
        while (await _done(store, job.id))[1] < count // 2:
            if first.proc.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the first worker stopped or stalled:\n{first.log_text()}")
            await asyncio.sleep(POLL)
        first.kill()
        await first.proc.wait()
        killed_at = (await _done(store, job.id))[1]
        second = await WorkerProcess.start(url, logs, WorkerOptions())
        try:
            while (await _done(store, job.id))[0] == "running":
                if second.proc.returncode is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the second worker stopped or stalled:\n{second.log_text()}"
                    )
                await asyncio.sleep(POLL)
            elapsed = time.perf_counter() - began
        finally:
            await second.stop()
        status, done, skipped = await _done(store, job.id)
    finally:
        await store.close()
    ((queued, one_step),) = _sql(url, [_RESTARTED_ONCE])
    once = status == "complete" and done == count and skipped == 0
    once = once and int(queued) == count and int(one_step or 0) == count
    return {
        "us_per_instance": elapsed / count * 1e6,
        "per_second": count / elapsed,
        "seconds": elapsed,
        "done_at_kill": float(killed_at),
        "exactly_once": 1.0 if once else 0.0,
    }


async def _run_store(config: BenchConfig, store: str) -> Report:
    count = 10_000 if config.quick else 100_000
    series: dict[str, list[float]] = {}
    floors: list[float] = []
    floor_name = ""
    for _ in range(config.repetitions(heavy=True)):
        with work_directory(config) as directory, database(config, store, directory) as url:
            opened = create_store(url)
            await opened.open()  # creates the schema
            await opened.close()
            _seed(url, count)
            floor = ack_floor(store, directory, config.pg_url)
            floors.append(floor.value)
            floor_name = floor.name
            found = await restart_once(url, count, directory)
            for name, value in found.items():
                series.setdefault(name, []).append(value)
            print(
                f"  {NAME} {store}: {count:,} restarted in {found['seconds']:.1f} s"
                f" ({found['us_per_instance']:.0f} µs each; killed at {found['done_at_kill']:,.0f};"
                f" exactly once: {'yes' if found['exactly_once'] else 'NO'})",
                flush=True,
            )
    ack = Floor(floor_name, median(floors), "µs", tuple(floors))
    report = Report(NAME, f"Bulk restart on {store}: {count:,} instances, a worker killed midway")
    report.figures = [
        Figure("restart, per instance", median(series["us_per_instance"]), "µs", ack,
               tuple(series["us_per_instance"])),
        Figure("restarts per second", median(series["per_second"]), "/s"),
        Figure("each restarted exactly once (1 = yes)", min(series["exactly_once"]), ""),
    ]  # fmt: skip
    report.details = {"store": store, "instances": count, "filter": FILTER, "series": series}
    report.notes = [
        "wall time from the first worker's start to the job's end, the kill and the second "
        "worker's start-up included",
        "ratio = the time per instance / one acknowledged single-row commit, in the same run",
    ]
    return report


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse_args(__doc__ or NAME, argv))


if __name__ == "__main__":
    main()
