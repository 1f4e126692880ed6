"""PostgreSQL for tests: the server to use, and schema clean-up."""

from __future__ import annotations

import os

DEFAULT_TEST_URL = "postgresql://postgres@127.0.0.1:5432/test"


def pg_admin_url() -> str:
    return os.environ.get("STEPLINE_TEST_DATABASE_URL", DEFAULT_TEST_URL)


def drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
