"""Helpers of the contract suite: instances in a given state, step writes, raw SQL reads."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable
from contextlib import closing
from typing import Any

import psycopg
from psycopg import sql

from stepline import LeaseLostError
from stepline.records import InstanceRecord
from stepline.store.base import Claim, Finish, NewInstance, StepWrite, Store
from stepline.store.postgres import split_url
from stepline.store.sqlite import path_from_url

WF = "wf"
OWNER = "worker-1"
LEASE = 30.0
HOUR = 3600.0

STATES = (
    "queued",
    "running",
    "paused",
    "waiting",
    "waitingForPause",
    "complete",
    "errored",
    "terminated",
)
UNFINISHED = ("queued", "running", "paused", "waiting", "waitingForPause")
FINISHED = ("complete", "errored", "terminated")


async def create(store: Store, *ids: str, workflow: str = WF) -> list[InstanceRecord]:
    """Queued instances without params."""
    items = [NewInstance(i, None) for i in ids]
    return await store.create_instances(workflow, items, trigger="api", skip_existing=False)


async def claim_one(
    store: Store, instance_id: str, *, owner: str = OWNER, workflow: str = WF
) -> Claim:
    """Claim the one runnable instance of ``workflow``, which must be ``instance_id``."""
    claims = (await store.claim(owner, [workflow], 10, LEASE, store.now())).claims
    assert [c.instance.id for c in claims] == [instance_id]
    return claims[0]


def write(
    name: str,
    seq: int,
    *,
    count: int = 1,
    status: str = "complete",
    output: str | None = '"x"',
    **fields: Any,
) -> StepWrite:
    """A ``do`` step's record (``output`` is encoded JSON text)."""
    return StepWrite(name, count, seq, "do", status, output, **fields)  # type: ignore[arg-type]


async def in_state(store: Store, status: str, instance_id: str, workflow: str = WF) -> Claim | None:
    """Create ``instance_id`` and bring it to ``status``; the claim holding it, if any.

    An instance brought there through a claim has one recorded step, ``s``; the new instance
    must then be the only runnable one of ``workflow``.
    """
    await create(store, instance_id, workflow=workflow)
    if status == "queued":
        return None
    if status in ("paused", "terminated"):
        action = "pause" if status == "paused" else "terminate"
        await store.control(workflow, instance_id, action)  # type: ignore[arg-type]
        return None
    claim = await claim_one(store, instance_id, workflow=workflow)
    now = store.now()
    await store.record_step(claim.lease, write("s", 1), now)
    if status == "running":
        return claim
    if status == "waitingForPause":
        await store.control(workflow, instance_id, "pause")
        return claim
    finish = {
        "waiting": Finish("waiting", wake_at=now + HOUR, event_seq=claim.event_seq),
        "complete": Finish("complete", output='"done"'),
        "errored": Finish("errored", error={"name": "Boom", "message": "it failed"}),
    }[status]
    assert await store.finish(claim.lease, finish, now) == status
    return None


async def all_states(store: Store, workflow: str = WF) -> dict[str, Claim | None]:
    """One instance in each of :data:`STATES`, its id the status; the claims of those leased.

    The states reached through a claim are built first, while nothing else is runnable.
    """
    order = sorted(STATES, key=lambda s: s in ("queued", "paused", "terminated"))
    claims = {status: await in_state(store, status, status, workflow) for status in order}
    for status in STATES:
        assert (await store.get_instance(workflow, status)).status == status
    return claims


async def lease_lost(call: Awaitable[Any]) -> bool:
    """Whether ``call`` raised :class:`LeaseLostError`."""
    try:
        await call
    except LeaseLostError:
        return True
    return False


async def claimed_ids(store: Store, workflow: str = WF, *, at: float | None = None) -> list[str]:
    """The ids a claim by another worker takes now (or at ``at``), sorted. They stay claimed."""
    now = store.now() if at is None else at
    claims = (await store.claim("probe", [workflow], 100, LEASE, now)).claims
    return sorted(c.instance.id for c in claims)


def raw(store_url: str, statement: str) -> list[tuple[Any, ...]]:
    """Run one statement straight on the database (unqualified table names), committed; its
    rows if it returns any."""
    if store_url.startswith("sqlite:"):
        with closing(sqlite3.connect(path_from_url(store_url))) as conn:
            cur = conn.execute(statement)
            rows = [tuple(r) for r in cur.fetchall()] if cur.description else []
            conn.commit()
            return rows
    conninfo, schema = split_url(store_url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        cur = conn.execute(statement.encode())
        return [tuple(r) for r in cur.fetchall()] if cur.description else []


def rows_of(store_url: str, table: str) -> int:
    """How many rows ``table`` holds, whatever instance they belong to."""
    ((count,),) = raw(store_url, f"SELECT count(*) FROM {table}")
    return int(count)
