"""Floors: the cost of the smallest durable write each database can do, measured in the run.

A step checkpoint has to reach the database, so the fastest conceivable step costs one committed
single-row insert. Benchmarks report their figures against these floors, measured in the same run
on the same disk (SQLite) or over the same connection path (PostgreSQL over loopback), so the
ratio does not depend on the machine.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import psycopg

from ._report import Floor

Synchronous = Literal["OFF", "NORMAL", "FULL"]


def sqlite_commit(directory: Path, *, synchronous: Synchronous = "NORMAL", n: int = 2000) -> Floor:
    """Microseconds for one single-row ``INSERT`` + ``COMMIT`` on a SQLite file in WAL mode.

    ``synchronous=NORMAL`` is what the engine uses for step checkpoints (a WAL commit without an
    fsync; the WAL is synced at checkpoints); ``FULL`` is what it uses for acknowledged writes
    (create, events, control actions). The file lives in ``directory``, next to the engine's
    database, so both are measured on the same disk.
    """
    path = directory / f"floor-{uuid.uuid4().hex[:8]}.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        for _ in range(50):  # warm up: page cache, WAL file allocation
            conn.execute("INSERT INTO t (v) VALUES ('warm-up')")
        start = time.perf_counter()
        for i in range(n):
            conn.execute("BEGIN")
            conn.execute("INSERT INTO t (v) VALUES (?)", (f"row {i}",))
            conn.execute("COMMIT")
        elapsed = time.perf_counter() - start
    finally:
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    return Floor(
        f"one single-row INSERT + COMMIT, SQLite WAL, synchronous={synchronous}, same disk",
        elapsed / n * 1e6,
        "µs",
    )


@contextmanager
def floor_table(url: str) -> Iterator[str]:
    """A throwaway schema with an ordinary (WAL-logged) table, dropped afterwards; yields the
    single-row ``INSERT`` into it. ``url`` may carry stepline's ``?schema=`` parameter; it is
    ignored. (A temporary table would skip the WAL flush at commit and understate the floor.)"""
    schema = f"stepline_floor_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        try:
            conn.execute(f'CREATE TABLE "{schema}".t (id bigserial PRIMARY KEY, v text NOT NULL)')
            yield f'INSERT INTO "{schema}".t (v) VALUES (%s)'
        finally:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def postgres_commit(url: str, *, n: int = 500) -> Floor:
    """Microseconds for one single-row committed ``INSERT`` (autocommit) over ``url``: with the
    server on 127.0.0.1, one loopback round trip plus the server's WAL flush."""
    with floor_table(url) as insert, psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        for _ in range(50):
            conn.execute(insert, ("warm-up",))
        start = time.perf_counter()
        for i in range(n):
            conn.execute(insert, (f"row {i}",))
        elapsed = time.perf_counter() - start
    return Floor(
        "one single-row committed INSERT, PostgreSQL over loopback", elapsed / n * 1e6, "µs"
    )


async def postgres_commit_async(url: str, *, n: int = 500) -> Floor:
    """:func:`postgres_commit` through psycopg's asyncio connection, the driver mode the engine
    uses: not a floor of the database, but of what any asyncio client of it pays per statement.
    """
    with floor_table(url) as insert:
        async with await psycopg.AsyncConnection.connect(
            url.split("?")[0], autocommit=True
        ) as conn:
            for _ in range(50):
                await conn.execute(insert, ("warm-up",))
            start = time.perf_counter()
            for i in range(n):
                await conn.execute(insert, (f"row {i}",))
            elapsed = time.perf_counter() - start
    return Floor(
        "the same INSERT through psycopg's asyncio connection (what any asyncio client pays)",
        elapsed / n * 1e6,
        "µs",
    )


def step_floor(store: str, directory: Path, pg_url: str) -> Floor:
    """Floor S (SQLite, ``synchronous=NORMAL``: a step checkpoint) or floor P (PostgreSQL)."""
    if store == "sqlite":
        return sqlite_commit(directory, synchronous="NORMAL")
    return postgres_commit(pg_url)


def ack_floor(store: str, directory: Path, pg_url: str) -> Floor:
    """The floor of an acknowledged write (create, send_event): SQLite ``synchronous=FULL``, or
    floor P (PostgreSQL commits every write the same way)."""
    if store == "sqlite":
        return sqlite_commit(directory, synchronous="FULL", n=300)
    return postgres_commit(pg_url)


def per_second(floor: Floor) -> Floor:
    """A floor in µs per commit as a rate: single-row commits per second, one after another."""
    if floor.unit != "µs":
        raise ValueError(f"per_second needs a floor in µs, got {floor.unit!r}")
    return Floor(f"{floor.name}, one after another, per second", 1e6 / floor.value, "/s")
