"""The PostgreSQL store's schema: created if missing, and brought up to date by the numbered
migrations it has not had yet."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence

from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ..migrations import Migration
from .db import Database
from .pools import Conn

log = logging.getLogger("stepline.store.postgres")


async def migrate(
    db: Database,
    schema: str,
    migrations: Sequence[Migration],
) -> tuple[int, int]:
    """Create ``schema`` if missing and apply the ``migrations`` it has not had yet, in one
    transaction, serialised with other stores opening the same schema at once. Returns the
    schema versions before and after (0: none)."""
    key = int.from_bytes(
        hashlib.blake2b(f"stepline:{schema}".encode(), digest_size=8).digest(),
        "big",
        signed=True,
    )
    name = sql.Identifier(schema)

    async def body(conn: Conn) -> tuple[int, int]:
        # Serialises stores opening at once: CREATE SCHEMA IF NOT EXISTS alone can race.
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
        await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(name))
        await conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(name))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY,"
            " name text NOT NULL, applied_at double precision NOT NULL)"
        )
        cur = await conn.execute("SELECT version FROM schema_migrations")
        done = {row[0] for row in await cur.fetchall()}
        for migration in migrations:
            if migration.version in done:
                continue
            await conn.execute(migration.sql.encode())  # a script: not in pipeline mode
            await conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                (migration.version, migration.name, time.time()),
            )
            log.info("applied migration %04d_%s to %s", migration.version, migration.name, db.where)
        latest = max([*done, *(m.version for m in migrations)], default=0)
        return max(done, default=0), latest

    return await db.transaction("migrating the schema", body, pipelined=False)


async def applied_migrations(db: Database, schema: str) -> set[int]:
    """The migrations applied to ``schema`` (none when it has no schema yet), read only."""
    table = sql.Identifier(schema, "schema_migrations").as_string(None)
    [(exists,)] = await db.read("reading the schema version", "SELECT to_regclass(%s)", (table,))
    if exists is None:
        return set()
    rows = await db.read("reading the schema version", f"SELECT version FROM {table}")
    return {row[0] for row in rows}


def read_only_conninfo(conninfo: str) -> str:
    """``conninfo`` whose sessions are read-only: the server refuses every write."""
    options = conninfo_to_dict(conninfo).get("options") or ""
    return make_conninfo(conninfo, options=f"{options} -c default_transaction_read_only=on".strip())
