"""A database per store with an instance in every status, and a dump of every stored row
(helpers of test_bad_input.py).

The database is seeded once per store and module; rows that must leave it unchanged compare
:func:`dump` before and after. No worker runs on it afterwards, so nothing changes it by itself.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from stepline import Engine, WorkflowEvent, WorkflowStep, workflow
from stepline.store.postgres import split_url
from stepline.store.sqlite import path_from_url

from ._pg import drop_schema, pg_admin_url
from .conftest import drain


@workflow(name="greet")
async def greet(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("who", lambda: event.payload.get("name", "world"))


@workflow(name="gate")
async def gate(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.do("prepare", lambda: "ready")
    approval = await step.wait_for_event("approval", type="go", timeout="1 hour")
    return approval.payload


def _broken() -> None:
    raise RuntimeError("always broken")


@workflow(name="failing")
async def failing(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("broken", {"retries": {"limit": 0}}, _broken)


@workflow(name="blocker")
async def blocker(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("block", lambda: "claimed by the seed, never run")


SEEDED = [greet, gate, failing, blocker]

STATES: dict[str, tuple[str, str]] = {
    "queued": ("greet", "q1"),
    "running": ("blocker", "r1"),
    "waitingForPause": ("blocker", "r2"),
    "waiting": ("gate", "w1"),
    "paused": ("gate", "p1"),
    "complete": ("greet", "done"),
    "errored": ("failing", "err"),
    "terminated": ("gate", "t1"),
}
"""The seeded instance in each status: (workflow, id)."""


async def seed(url: str) -> None:
    """Create one instance in each status of :data:`STATES`."""
    async with Engine(url, SEEDED, worker=False) as engine:
        await engine.workflow("greet").create("done", {"name": "Ada"})
        await engine.workflow("failing").create("err")
        for instance_id in ("w1", "p1", "t1"):
            await engine.workflow("gate").create(instance_id)
        await drain(engine)
        await (await engine.get_instance("gate", "p1")).pause()
        await (await engine.get_instance("gate", "t1")).terminate()
        await (await engine.get_instance("gate", "w1")).send_event("note", {"kept": True})
        await engine.workflow("greet").create("q1")
        await engine.workflow("blocker").create_batch([{"id": "r1"}, {"id": "r2"}])
        # Held by a worker that never runs them: running, with a lease that outlasts the tests.
        claims = (await engine.store.claim("seed", ["blocker"], 2, 86400.0, engine.now())).claims
        assert len(claims) == 2
        await (await engine.get_instance("blocker", "r2")).pause()
        for status, (name, instance_id) in STATES.items():
            record = await (await engine.get_instance(name, instance_id)).record()
            assert record.status == status, (name, instance_id, record.status)


@dataclass
class Worlds:
    """One seeded database per store, made on first use."""

    root: Path
    urls: dict[str, str] = field(default_factory=dict)
    schemas: list[str] = field(default_factory=list)

    async def url(self, store: str) -> str:
        if store not in self.urls:
            if store == "sqlite":
                url = f"sqlite:///{self.root / 'seeded.db'}"
            else:
                schema = f"t_{uuid.uuid4().hex[:12]}"
                self.schemas.append(schema)
                base = pg_admin_url()
                url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
            await seed(url)
            self.urls[store] = url
        return self.urls[store]

    def close(self) -> None:
        for schema in self.schemas:
            drop_schema(pg_admin_url(), schema)


TABLES = {
    "workflows": "name",
    "instances": "pk",
    "steps": "instance_pk, name, count",
    "events": "pk",
}
"""Every table a user's input may change, with the order its rows are dumped in (the workers
table is left out: heartbeats rewrite it)."""

Dump = dict[str, list[dict[str, Any]]]


def dump(url: str) -> Dump:
    """Every row of :data:`TABLES`, whole, in a fixed order."""
    if url.startswith("sqlite:"):
        with contextlib.closing(sqlite3.connect(path_from_url(url))) as conn:
            conn.row_factory = sqlite3.Row
            return {
                table: [dict(row) for row in conn.execute(f"SELECT * FROM {table} ORDER BY {by}")]
                for table, by in TABLES.items()
            }
    conninfo, schema = split_url(url)
    with psycopg.connect(conninfo, row_factory=dict_row) as conn:
        return {
            table: conn.execute(
                sql.SQL("SELECT * FROM {}.{} ORDER BY " + by).format(
                    sql.Identifier(schema), sql.Identifier(table)
                )
            ).fetchall()
            for table, by in TABLES.items()
        }


def others(rows: Dump, instances: Iterable[tuple[str, str]]) -> Dump:
    """``rows`` without those of ``instances`` ((workflow, id) pairs) and their steps and
    events: what a change to those instances must leave as it was."""
    wanted = set(instances)
    pks = {r["pk"] for r in rows["instances"] if (r["workflow"], r["id"]) in wanted}
    return {
        "workflows": rows["workflows"],
        "instances": [r for r in rows["instances"] if r["pk"] not in pks],
        "steps": [r for r in rows["steps"] if r["instance_pk"] not in pks],
        "events": [r for r in rows["events"] if r["instance_pk"] not in pks],
    }
