"""SQLite group commit: writes queued in one loop turn commit together, and a write that fails
fails alone, whether it failed before writing anything or after; while other processes write to
the file, a lone write waits a turn to share its commit."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from stepline.errors import StoreError
from stepline.store.sqlite import SqliteStore
from stepline.store.sqlite import db as sqlite_db


@pytest.fixture
async def store(tmp_path: Path) -> SqliteStore:
    s = SqliteStore(f"sqlite:///{tmp_path}/batches.db")
    await s.open()
    s._db.require().execute("CREATE TABLE t (v TEXT NOT NULL)")
    return s


def insert(value: str) -> object:
    def op(c: sqlite3.Connection) -> str:
        c.execute("INSERT INTO t (v) VALUES (?)", (value,))
        return value

    return op


def fail_before_writing(c: sqlite3.Connection) -> None:
    c.execute("SELECT count(*) FROM t").fetchone()
    raise LookupError("refused before writing")


def fail_after_writing(c: sqlite3.Connection) -> None:
    c.execute("INSERT INTO t (v) VALUES ('partial')")
    raise LookupError("refused after writing")


def rows(store: SqliteStore) -> list[str]:
    return sorted(r[0] for r in store._db.require().execute("SELECT v FROM t"))


@pytest.mark.parametrize("failing", [fail_before_writing, fail_after_writing])
async def test_a_failing_write_in_a_batch_fails_alone(store: SqliteStore, failing: object) -> None:
    writes = store._db._writes
    commit = writes._run
    sizes: list[int] = []

    async def counted(batch: list[Any]) -> Any:
        sizes.append(len(batch))
        return await commit(batch)

    writes._run = counted
    try:
        # Four tasks write in one turn: the first commits at once, the others form a batch.
        futures = [
            asyncio.ensure_future(store._db.write(insert("first"))),  # type: ignore[arg-type]
            asyncio.ensure_future(store._db.write(insert("a"))),  # type: ignore[arg-type]
            asyncio.ensure_future(store._db.write(failing)),  # type: ignore[arg-type]
            asyncio.ensure_future(store._db.write(insert("b"))),  # type: ignore[arg-type]
        ]
        results = await asyncio.gather(*futures, return_exceptions=True)
        assert sizes == [1, 3]
        assert results[0] == "first" and results[1] == "a" and results[3] == "b"
        assert isinstance(results[2], StoreError) and "refused" in str(results[2])
        assert rows(store) == ["a", "b", "first"]  # nothing of the failing write is left
        # and the store goes on committing
        assert await store._db.write(insert("after")) == "after"  # type: ignore[arg-type]
        assert "after" in rows(store)
    finally:
        await store.close()


async def test_timer_reads_follow_the_ready_at_index_without_statistics(tmp_path: Path) -> None:
    """The idle poll, the claim and the next wake-up read ``ready_at`` in order (the claim's
    order, or each workflow's), not every
    instance of the workflow through ``instances_status`` (what SQLite's planner picks for
    ``workflow IN (...)`` on a database never analyzed): a fleet's size must not weigh on
    them."""
    from stepline.store.base import NewInstance

    store = SqliteStore(f"sqlite:///{tmp_path}/plans.db")
    await store.open()
    try:
        items = [NewInstance(f"i{n}", None) for n in range(3000)]
        await store.create_instances("w", items, trigger="api", skip_existing=False)
        conn = store._db.require()
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        try:
            await store.claim("me", ["w", "v"], 10, 30.0, store.now() - 3600)  # nothing due
            await store.claim("me", ["w", "v"], 10, 30.0, store.now() + 1)
            await store.next_wakeup(["w", "v"])
        finally:
            conn.set_trace_callback(None)
        timer_reads = [
            sql for sql in statements if sql.lstrip().startswith("SELECT") and "ready_at" in sql
        ]
        assert len(timer_reads) >= 3, statements
        for sql in timer_reads:
            plan = " ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql))
            ordered = "instances_ready" in plan or "instances_workflow_ready" in plan
            assert ordered and "instances_status" not in plan, (sql, plan)
    finally:
        await store.close()


async def test_while_another_connection_writes_a_lone_write_waits_to_share_a_commit(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone write commits at once in its caller's task; but once a write has found the lock
    held by another process, lone writes go to a flusher for a while, with whatever else comes
    in that turn: each commit is then a hand-over of the lock between the processes."""
    monkeypatch.setattr(sqlite_db, "SHARED_SECONDS", 0.2)
    db = store._db
    ran_in: list[asyncio.Task[Any] | None] = []

    def op(c: sqlite3.Connection) -> None:
        ran_in.append(asyncio.current_task())
        c.execute("INSERT INTO t (v) VALUES ('x')")

    other = sqlite3.connect(store.path, isolation_level=None, timeout=0)
    try:
        await db.write(op)
        assert ran_in[-1] is asyncio.current_task()

        other.execute("BEGIN IMMEDIATE")
        asyncio.get_running_loop().call_later(0.05, other.execute, "COMMIT")
        await db.write(op)  # waits for the other connection's commit
        await db.write(op)
        assert ran_in[-1] is not asyncio.current_task()

        await asyncio.sleep(0.25)  # nobody else has written since
        await db.write(op)
        assert ran_in[-1] is asyncio.current_task()
        assert rows(store) == ["x"] * 4
    finally:
        other.close()
        await store.close()
