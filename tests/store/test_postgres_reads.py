"""What the PostgreSQL store's hot statements read does not grow with the instances table: each
statement a claim, a batch of step writes or a finish ran is run again under ``EXPLAIN
(ANALYZE, BUFFERS)`` with the same parameters, on a table of 300 instances and of 20,000, and
the pages it touched are compared. The tables are fresh and never analysed, as in a deployment
whose autovacuum has not yet come by."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from stepline.limits import WorkflowLimits
from stepline.store.base import Finish, NewInstance, StepWrite, WorkflowMeta
from stepline.store.postgres import PostgresStore

from .._pg import connect
from ..conftest import STORES
from .test_postgres import fresh, schemas, url_for

__all__ = ["schemas"]  # the fixture, used by name

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif("postgres" not in STORES, reason="STEPLINE_TEST_STORES leaves out postgres"),
]

SMALL, LARGE = 300, 20_000


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, Any]]]:
    """Every statement (with its parameters) run through psycopg's asyncio cursors while the
    list is not frozen (appending ``None`` stops the capture)."""
    seen: list[Any] = []
    execute = psycopg.AsyncCursor.execute

    async def capturing(
        self: psycopg.AsyncCursor[Any], query: Any, params: Any = None, **kw: Any
    ) -> Any:
        if not seen or seen[-1] is not None:
            seen.append((str(query), params))
        return await execute(self, query, params, **kw)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", capturing)
    yield seen


def pages_read(url: str, captured: list[Any], marker: str) -> int:
    """Buffers (hit or read) the captured statements containing ``marker`` touch, run again
    under ``EXPLAIN (ANALYZE, BUFFERS)`` each in a transaction rolled back afterwards, with the
    planner settings the store's transactions chose (``SET LOCAL``)."""
    ran = [c for c in captured if c is not None]
    chosen = [(q, p) for q, p in ran if marker in q]
    assert chosen, f"no statement with {marker!r} ran"
    settings = dict.fromkeys(q for q, _ in ran if q.startswith("SET LOCAL"))
    total = 0
    with connect(url) as conn:
        for query, params in chosen:
            with conn.transaction(force_rollback=True):
                for setting in settings:
                    conn.execute(setting)
                row = conn.execute(
                    "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query, params
                ).fetchone()
            assert row is not None
            document: Any = row[0]  # psycopg parses the json column
            plan = document[0]["Plan"]
            total += plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
    return total


async def _store_with(
    schemas: list[str], size: int, limits: WorkflowLimits | None
) -> PostgresStore:
    store = PostgresStore(url_for(fresh(schemas)), max_connections=2)
    await store.open()
    await store.register_workflows([WorkflowMeta("w", "tests:W", None, limits or WorkflowLimits())])
    items = [NewInstance(f"i{n}", None) for n in range(size)]
    await store.create_instances("w", items, trigger="api", skip_existing=False)
    return store


async def test_a_claim_under_a_full_limit_does_not_read_the_backlog_it_holds_back(
    schemas: list[str], statements: list[Any]
) -> None:
    """With the workflow's concurrency taken, a claim finds nothing to start: what it reads to
    learn that is the same for a backlog of 300 and of 20,000."""
    cost: dict[int, int] = {}
    for size in (SMALL, LARGE):
        store = await _store_with(schemas, size, WorkflowLimits(concurrency=2))
        try:
            assert len(await store.claim("me", ["w"], 10, 30.0, store.now())) == 2
            statements.clear()
            assert await store.claim("me", ["w"], 10, 30.0, store.now()) == []
            statements.append(None)
            cost[size] = pages_read(store.url, statements, "instances")
        finally:
            await store.close()
    assert cost[LARGE] < cost[SMALL] * 2, cost


async def test_step_writes_and_finishes_read_only_the_instances_they_write(
    schemas: list[str], statements: list[Any]
) -> None:
    """Five activations record a step each at once (one batch) and finish at once: the batch
    statements find their instances by key, whatever the size of the table."""
    cost: dict[int, int] = {}
    for size in (SMALL, LARGE):
        store = await _store_with(schemas, size, None)
        try:
            claims = await store.claim("me", ["w"], 5, 30.0, store.now())
            assert len(claims) == 5
            statements.clear()
            now = store.now()
            write = StepWrite("s", 1, 1, "do", "complete", output="1", ended_at=now, new=True)
            await asyncio.gather(*(store.record_step(c.lease, write, now) for c in claims))
            done = Finish("complete", output="null")
            await asyncio.gather(*(store.finish(c.lease, done, now) for c in claims))
            statements.append(None)
            cost[size] = pages_read(store.url, statements, "json_to_recordset")
        finally:
            await store.close()
    assert cost[LARGE] < cost[SMALL] * 2, cost
