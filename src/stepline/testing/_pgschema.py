"""Dropping a PostgreSQL environment's schema (imported only by such an environment)."""

from __future__ import annotations

import psycopg
from psycopg import sql

from ..store.postgres import split_url


async def drop_schema(server: str, schema: str) -> None:
    """Drop ``schema`` with everything in it, if it exists."""
    conninfo, _ = split_url(server)
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )
