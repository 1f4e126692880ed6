"""Write the databases ``test_previous_release.py`` opens: run with the code of the previous
release (a checkout of it on ``PYTHONPATH``), from the repository's root:

    PYTHONPATH=/path/to/previous/src python tests/store/previous_release/make.py

It writes ``sqlite.db`` (a SQLite database) and ``postgres.sql`` (a ``pg_dump`` of the schema
``previous_release`` of the test server) beside this file. Each holds two instances of
``orders``: ``done`` (complete, after an event) and ``sleeping`` (asleep for an hour, its event
already sent).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

from stepline import Engine

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from workflows import Orders  # noqa: E402

PG = os.environ.get("STEPLINE_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
SCHEMA = "previous_release"


async def fill(url: str) -> None:
    async with Engine(url, [Orders], poll_interval=0.05) as engine:
        orders = engine.workflow("orders")
        done = await orders.create(id="done", params={"id": 7, "nap": False})
        sleeping = await orders.create(id="sleeping", params={"id": 8, "nap": True})
        await done.send_event("approve", {"by": "ada", "note": {"$t": "user data"}})
        await sleeping.send_event("approve", {"by": "grace"})
        finished: Any = await done.wait(timeout=20)
        assert finished.status == "complete", finished
        for _ in range(200):
            if (await sleeping.status()).status == "waiting":
                break
            await asyncio.sleep(0.05)
        assert (await sleeping.status()).status == "waiting"


def main() -> None:
    db = HERE / "sqlite.db"
    db.unlink(missing_ok=True)
    asyncio.run(fill(f"sqlite:///{db}"))
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    asyncio.run(fill(f"{PG}?schema={SCHEMA}"))
    dump = subprocess.run(
        ["pg_dump", "--schema", SCHEMA, "--no-owner", "--no-privileges", PG],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (HERE / "postgres.sql").write_text(dump)
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


if __name__ == "__main__":
    main()
