"""SQLite group commit: writes queued in one loop turn commit together, and a write that fails
fails alone, whether it failed before writing anything or after."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from stepline.errors import StoreError
from stepline.store.sqlite import SqliteStore


@pytest.fixture
async def store(tmp_path: Path) -> SqliteStore:
    s = SqliteStore(f"sqlite:///{tmp_path}/batches.db")
    await s.open()
    s._require().execute("CREATE TABLE t (v TEXT NOT NULL)")
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
    return sorted(r[0] for r in store._require().execute("SELECT v FROM t"))


@pytest.mark.parametrize("failing", [fail_before_writing, fail_after_writing])
async def test_a_failing_write_in_a_batch_fails_alone(store: SqliteStore, failing: object) -> None:
    try:
        # The first write of a turn commits at once; the rest of the turn's writes form a batch.
        futures = [
            store._write(insert("first")),  # type: ignore[arg-type]
            store._write(insert("a")),  # type: ignore[arg-type]
            store._write(failing),  # type: ignore[arg-type]
            store._write(insert("b")),  # type: ignore[arg-type]
        ]
        results = await asyncio.gather(*futures, return_exceptions=True)
        assert results[0] == "first" and results[1] == "a" and results[3] == "b"
        assert isinstance(results[2], StoreError) and "refused" in str(results[2])
        assert rows(store) == ["a", "b", "first"]  # nothing of the failing write is left
        # and the store goes on committing
        assert await store._write(insert("after")) == "after"  # type: ignore[arg-type]
        assert "after" in rows(store)
    finally:
        await store.close()
