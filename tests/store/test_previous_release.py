"""Databases written by the previous release open unchanged with this code: their instances list
and describe, their stored values (plain JSON, some with a ``"$t"`` key of the user's) read back
as they were written, and a worker runs a sleeping instance on to the end.

``previous_release/`` holds a SQLite file and a ``pg_dump`` of a PostgreSQL schema, both written
by ``previous_release/make.py`` with the previous release's code.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stepline import Engine, ManualClock
from stepline.http import create_app

from .._pg import drop_schema, pg_admin_url
from ..conftest import drain
from .previous_release.workflows import Orders

HERE = Path(__file__).resolve().parent / "previous_release"

ORDER_7 = {"id": 7, "items": [1, 2.5, "x", None, True], "é": "ü"}
ORDER_8 = {"id": 8, "items": [1, 2.5, "x", None, True], "é": "ü"}
REPLY_7 = {"by": "ada", "note": {"$t": "user data"}}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def previous_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A copy of the previous release's database."""
    if request.param == "sqlite":
        shutil.copy(HERE / "sqlite.db", tmp_path / "stepline.db")
        yield f"sqlite:///{tmp_path}/stepline.db"
        return
    base = pg_admin_url()
    schema = f"prev_{uuid.uuid4().hex[:12]}"
    dump = (HERE / "postgres.sql").read_text().replace("previous_release", schema)
    subprocess.run(
        ["psql", "--quiet", "--set", "ON_ERROR_STOP=1", base],
        input=dump, text=True, check=True, capture_output=True,
    )  # fmt: skip
    sep = "&" if "?" in base else "?"
    yield f"{base}{sep}schema={schema}"
    drop_schema(base, schema)


async def test_a_previous_release_database_reads_and_runs_on(previous_url: str) -> None:
    clock = ManualClock()
    async with Engine(previous_url, [Orders], worker=False, clock=clock) as engine:
        page = await engine.list_instances("orders")
        assert sorted((r.id, r.status) for r in page.instances) == [
            ("done", "complete"),
            ("sleeping", "waiting"),
        ]
        orders = engine.workflow("orders")
        done = await orders.get("done")
        status = await done.status()
        assert status.output == {"order": ORDER_7, "total": [7, 3.5, [1, 2]], "reply": REPLY_7}
        assert (await done.record()).params == {"id": 7, "nap": False}
        steps = {s.name: s.output for s in await done.steps()}
        assert steps["load"] == ORDER_7 and steps["tally"] == [7, 3.5, [1, 2]]
        assert steps["approve"]["payload"] == REPLY_7
        (event,) = await done.events()
        assert event.payload == REPLY_7 and event.consumed_by == "approve-1"

        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://s") as http:
            detail = (await http.get("/api/workflows/orders/instances/done")).json()
        assert detail["workflow"]["output"]["reply"] == REPLY_7
        assert {s["name"]: s["output"] for s in detail["steps"]}["load-1"] == ORDER_7

        sleeping = await orders.get("sleeping")
        (nap,) = [s for s in await sleeping.steps() if s.name == "nap"]
        assert nap.wake_at is not None
        clock.set(nap.wake_at + 1)
        await drain(engine)
        status = await sleeping.status()
        assert status.status == "complete", status
        assert status.output == {
            "order": ORDER_8,
            "total": [8, 3.5, [1, 2]],
            "reply": {"by": "grace"},
        }
