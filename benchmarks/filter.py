"""Filter: a filtered list and count over 1,000,000 instances (``--quick``: 100,000).

The instances are seeded in SQL: workflows ``charge`` and ``mail``; 90 % complete, 5 % errored,
4 % waiting, 1 % queued; three tags each: ``customer`` (10,000 customers, 100 instances each),
``tenant`` (50 tenants) and ``n`` (a number), plus ``campaign = 'spring'`` on one in a
thousand. The tags go straight into the tags table (the load is the benchmark's, not the
create path's), then ``ANALYZE``. Each figure is the median of 50 calls of the store's
operation, on a store opened in this process; the floor is a primary-key lookup
(``get_instance``) measured in the same run. The plan of every query is printed
(PostgreSQL's ``EXPLAIN ANALYZE``, SQLite's ``EXPLAIN QUERY PLAN``).

Run: ``python -m benchmarks filter [--stores postgres]``.
"""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import closing
from typing import Any

import psycopg
from psycopg import sql

from stepline.operations.language import parse, render
from stepline.store import create_store
from stepline.store.base import Store
from stepline.store.postgres import split_url
from stepline.store.postgres.search_sql import Statements
from stepline.store.sqlite import path_from_url
from stepline.store.sqlite.operations import TAGS_TABLE, search_statement

from ._config import BenchConfig, database, work_directory
from ._config import parse as parse_args
from ._report import Figure, Floor, Report, median
from ._run import execute

NAME = "filter"
CALLS = 50
START = 1_790_000_000.0

QUERIES = [
    ("list", "customer = 'c-42' and status = 'errored' and created >= '2026-09-21T00:00Z'"),
    ("list", "campaign = 'spring' and workflow = 'charge'"),
    ("list", "status = 'waiting'"),
    ("list", "tenant = 't-7' and n >= 500000 and status != 'complete'"),
    ("count", "tenant = 't-7' and status = 'waiting'"),
    ("count", "customer = 'c-42'"),
]

_INSTANCES = """
INSERT INTO instances (workflow, id, status, trigger, created_at, updated_at, ended_at)
SELECT CASE WHEN n % 2 = 0 THEN 'charge' ELSE 'mail' END, 'i' || n,
    CASE WHEN n % 100 < 90 THEN 'complete' WHEN n % 100 < 95 THEN 'errored'
         WHEN n % 100 < 99 THEN 'waiting' ELSE 'queued' END,
    'api', {start} + n, {start} + n,
    CASE WHEN n % 100 < 95 THEN {start} + n + 1 END
FROM {numbers}
"""
_TAGS = [
    "INSERT INTO instance_tags (instance_pk, key, kind, text_value, num_value)"
    " SELECT pk, 'customer', 's', 'c-' || (pk % 10000), NULL FROM instances",
    "INSERT INTO instance_tags (instance_pk, key, kind, text_value, num_value)"
    " SELECT pk, 'tenant', 's', 't-' || (pk % 50), NULL FROM instances",
    "INSERT INTO instance_tags (instance_pk, key, kind, text_value, num_value)"
    " SELECT pk, 'n', 'n', NULL, pk FROM instances",
    "INSERT INTO instance_tags (instance_pk, key, kind, text_value, num_value)"
    " SELECT pk, 'campaign', 's', 'spring', NULL FROM instances WHERE pk % 1000 = 0",
]
_NUMBERS = (  # PostgreSQL's numeric tags have a table of their own
    "INSERT INTO instance_tag_numbers (instance_pk, key, kind, num_value)"
    " SELECT instance_pk, key, kind, num_value FROM instance_tags WHERE kind <> 's'"
)


async def run(config: BenchConfig) -> list[Report]:
    """One report per store in ``config.stores``."""
    return [await _run_store(config, store) for store in config.stores]


def _seed(url: str, count: int) -> None:
    if url.startswith("sqlite:"):
        cte = (
            "WITH RECURSIVE numbers(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM numbers"
            f" WHERE n < {count}) "
        )
        first = _INSTANCES.format(start=START, numbers="numbers")
        first = first.replace("SELECT CASE", cte + "SELECT CASE", 1)
        with closing(sqlite3.connect(path_from_url(url))) as conn:
            for statement in [first, *_TAGS, "ANALYZE"]:
                conn.execute(statement)
            conn.commit()
        return
    conninfo, schema = split_url(url)
    numbers = f"generate_series(1, {count}) AS numbers(n)"
    with psycopg.connect(conninfo) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        for statement in [_INSTANCES.format(start=START, numbers=numbers), *_TAGS, _NUMBERS]:
            conn.execute(statement.encode())
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE instances")
        conn.execute("VACUUM ANALYZE instance_tags")
        conn.execute("VACUUM ANALYZE instance_tag_numbers")


def _plan(url: str, kind: str, text: str) -> list[str]:
    """The plan of one query as the store runs it (a list: a page of 51, newest first)."""
    where = parse(text)
    if url.startswith("sqlite:"):
        if kind == "list":
            statement, params = search_statement(where, after=None, oldest_first=False)
            params = [*params, 51]
        else:
            cond = render(where, "sqlite", tags_table=TAGS_TABLE)
            statement, params = f"SELECT count(*) FROM instances i WHERE {cond.sql}", cond.params
        with closing(sqlite3.connect(path_from_url(url))) as conn:
            rows = conn.execute("EXPLAIN QUERY PLAN " + statement, params).fetchall()
        return [str(row[-1]) for row in rows]
    conninfo, schema = split_url(url)
    q = Statements(schema)
    statements = [q.count(where)]
    with psycopg.connect(conninfo) as conn:
        if kind == "list":
            first = q.search(where, 51, after=None, oldest_first=False)
            statements = [(first.sql, first.params)]
            rows = conn.execute(first.sql.encode(), first.params).fetchall()
            found = sum(row[0] is not None for row in rows)
            if first.driven and found < 51 and rows[0][-2]:  # the store's second statement
                statements.append(q.beyond(where, 51 - found, edge=rows[0][-1], oldest_first=False))
        lines: list[str] = []
        for statement, params in statements:
            lines += ["then:"] if lines else []
            explained = conn.execute(("EXPLAIN ANALYZE " + statement).encode(), params)
            lines += [str(row[0]) for row in explained.fetchall()]
    return lines


async def _timed(call: Callable[[], Awaitable[Any]]) -> float:
    times = []
    for _ in range(CALLS):
        start = time.perf_counter()
        await call()
        times.append(time.perf_counter() - start)
    return median(times)


async def measure(url: str) -> dict[str, float]:
    """Milliseconds (median of ``CALLS``) of each query, and of the floor."""
    store: Store = create_store(url)
    await store.open()
    found: dict[str, float] = {}
    try:
        found["floor"] = 1e3 * await _timed(lambda: store.get_instance("charge", "i42"))
        for kind, text in QUERIES:
            where = parse(text)
            call: Callable[[], Awaitable[Any]] = (
                functools.partial(store.operations.search, where, 50, None)
                if kind == "list"
                else functools.partial(store.operations.count, where)
            )
            found[f"{kind}: {text}"] = 1e3 * await _timed(call)
    finally:
        await store.close()
    return found


async def _run_store(config: BenchConfig, store: str) -> Report:
    count = 100_000 if config.quick else 1_000_000
    runs = config.repetitions(heavy=True)
    series: dict[str, list[float]] = {}
    plans: dict[str, list[str]] = {}
    with work_directory(config) as directory, database(config, store, directory) as url:
        opened = create_store(url)
        await opened.open()  # creates the schema
        await opened.close()
        began = time.perf_counter()
        _seed(url, count)
        print(f"  {NAME} {store}: seeded {count:,} in {time.perf_counter() - began:.0f} s")
        for kind, text in QUERIES:
            plans[f"{kind}: {text}"] = lines = _plan(url, kind, text)
            print(f"  {NAME} {store} plan of {kind}: {text}", flush=True)
            print("\n".join(f"    {line}" for line in lines), flush=True)
        for _ in range(runs):
            for name, value in (await measure(url)).items():
                series.setdefault(name, []).append(value)
                print(f"  {NAME} {store} {name}: {value:.2f} ms", flush=True)
    floor = Floor(
        "get_instance (primary key)", median(series["floor"]), "ms", tuple(series["floor"])
    )
    report = Report(NAME, f"Filter on {store}: {count:,} instances (median of {CALLS} calls)")
    for name, values in series.items():
        if name != "floor":
            report.figures.append(Figure(name, median(values), "ms", floor, tuple(values)))
    report.details = {"store": store, "instances": count, "plans": plans, "series": series}
    report.notes = [
        "list: a page of 50, newest first; count: every match",
        "ratio = the query's time / a primary-key lookup's, in the same run",
    ]
    return report


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse_args(__doc__ or NAME, argv))


if __name__ == "__main__":
    main()
