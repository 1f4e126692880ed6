"""Schema migrations: numbered files; an upgraded database equals a fresh one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from stepline import Engine
from stepline.store.migrations import load_migrations
from stepline.store.sqlite.db import split_statements


def schema_of(path: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
            " ORDER BY type, name"
        ).fetchall()
    return [(t, n, " ".join((s or "").split())) for t, n, s in rows]


def test_migrations_are_numbered_from_one() -> None:
    for dialect in ("sqlite", "postgres"):
        versions = [m.version for m in load_migrations(dialect)]
        assert versions == list(range(1, len(versions) + 1)), dialect


async def test_upgraded_sqlite_schema_equals_fresh(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.db"
    async with Engine(f"sqlite:///{fresh}", worker=False):
        pass
    migrations = load_migrations("sqlite")
    for applied in range(len(migrations)):
        old = tmp_path / f"old{applied}.db"
        with sqlite3.connect(old) as conn:
            conn.execute(
                "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,"
                " name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
            for m in migrations[:applied]:
                for statement in split_statements(m.sql):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_migrations VALUES (?, ?, 0)", (m.version, m.name))
        async with Engine(f"sqlite:///{old}", worker=False):
            pass
        assert schema_of(old) == schema_of(fresh)


async def test_reopening_is_idempotent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/x.db"
    for _ in range(3):
        async with Engine(url, worker=False):
            pass
    with sqlite3.connect(tmp_path / "x.db") as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations")]
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert versions == [m.version for m in load_migrations("sqlite")]
    assert mode == "wal"
