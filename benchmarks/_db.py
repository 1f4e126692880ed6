"""Read-only SQL against a benchmark database, for figures the client API has no bulk read for
(and one maintenance command, :func:`vacuum`).

A benchmark that needs a timestamp of 100,000 step records reads them with one query instead
of 100,000 ``get_steps`` calls. Queries name tables as ``{t}steps``, ``{t}instances``: the
schema prefix for PostgreSQL (``"bench_x".``), nothing for SQLite. This reads stepline's tables
directly, so it follows the schema of ``src/stepline/store/migrations``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql


def split_pg_url(url: str) -> tuple[str, str]:
    """``(connection URL without ?schema=, schema name)``."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query)
    schema = next((v for k, v in query if k == "schema"), "stepline")
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema


def _fetch(url: str, query: str) -> list[tuple[Any, ...]]:
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(f"file:{url.removeprefix('sqlite:///')}?mode=ro", uri=True)
        try:
            return conn.execute(query.format(t="")).fetchall()
        finally:
            conn.close()
    conninfo, schema = split_pg_url(url)
    prefix = sql.Identifier(schema).as_string() + "."
    with psycopg.connect(conninfo, autocommit=True) as pg:
        return pg.execute(query.format(t=prefix)).fetchall()


async def fetch(url: str, query: str) -> list[tuple[Any, ...]]:
    """Rows of ``query`` (``{t}`` = table prefix), read in a thread off the event loop."""
    return await asyncio.to_thread(_fetch, url, query)


def _vacuum(url: str, table: str) -> None:
    conninfo, schema = split_pg_url(url)
    with psycopg.connect(conninfo, autocommit=True) as pg:
        pg.execute(sql.SQL("VACUUM {}.{}").format(sql.Identifier(schema), sql.Identifier(table)))


async def vacuum(url: str, table: str) -> None:
    """``VACUUM`` one stepline table (PostgreSQL), in a thread off the event loop."""
    await asyncio.to_thread(_vacuum, url, table)


async def status_counts(url: str, workflow: str) -> dict[str, int]:
    """Instances of ``workflow`` by status."""
    rows = await fetch(
        url,
        "SELECT status, count(*) FROM {t}instances WHERE workflow = '"
        + workflow.replace("'", "''")
        + "' GROUP BY status",
    )
    return {str(status): int(n) for status, n in rows}


async def table_sizes(url: str) -> dict[str, int]:
    """Bytes on disk of each stepline table with its indexes (PostgreSQL: with TOAST)."""
    if url.startswith("sqlite:///"):
        rows = await fetch(
            url,
            "SELECT s.tbl_name, sum(d.pgsize) FROM dbstat d JOIN sqlite_schema s "
            "ON s.name = d.name GROUP BY s.tbl_name",
        )
    else:
        schema = split_pg_url(url)[1].replace("'", "''")
        rows = await fetch(
            url,
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            f"WHERE n.nspname = '{schema}' AND c.relkind = 'r'",
        )
    return {str(name): int(size) for name, size in rows}


def with_application_name(url: str, name: str) -> str:
    """``url`` with ``application_name=name``, which names the server's backends for it."""
    return f"{url}{'&' if '?' in url else '?'}application_name={name}"


async def backend_pids(url: str, application_name: str) -> list[int]:
    """Server process ids of the connections named ``application_name`` (PostgreSQL)."""
    rows = await fetch(
        url,
        "SELECT pid FROM pg_stat_activity WHERE application_name = '"
        + application_name.replace("'", "''")
        + "'",
    )
    return [int(pid) for (pid,) in rows]
