"""The SQLite claim under limits: what it leaves out of its reads, so that a backlog held back
by a limit is not read again by every claim, and the reads of the unlimited path."""

from __future__ import annotations

from pathlib import Path

from stepline.limits import WorkflowLimits
from stepline.store.base import NewInstance, WorkflowMeta
from stepline.store.sqlite import SqliteStore


async def traced_claim(store: SqliteStore, workflows: list[str]) -> tuple[int, list[str]]:
    """How many instances a claim took, and the statements it ran."""
    conn = store._db.require()
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        claims = await store.claim("me", workflows, 10, 30.0, store.now())
    finally:
        conn.set_trace_callback(None)
    return len(claims), statements


def due_reads(statements: list[str]) -> list[str]:
    return [s for s in statements if "ORDER BY ready_at, pk" in s]


async def test_a_workflow_with_no_room_left_is_not_read(tmp_path: Path) -> None:
    store = SqliteStore(f"sqlite:///{tmp_path}/flow.db")
    await store.open()
    try:
        meta = WorkflowMeta("busy", "tests:Busy", None, WorkflowLimits(concurrency=1))
        await store.register_workflows([meta])
        items = [NewInstance(f"i{n}", None) for n in range(50)]
        await store.create_instances("busy", items, trigger="api", skip_existing=False)
        taken, statements = await traced_claim(store, ["busy"])
        assert taken == 1 and len(due_reads(statements)) == 1
        taken, statements = await traced_claim(store, ["busy"])
        assert taken == 0 and due_reads(statements) == []
    finally:
        await store.close()


async def test_an_unlimited_claim_reads_no_usage(tmp_path: Path) -> None:
    store = SqliteStore(f"sqlite:///{tmp_path}/flow.db")
    await store.open()
    try:
        items = [NewInstance(f"i{n}", None) for n in range(20)]
        await store.create_instances("free", items, trigger="api", skip_existing=False)
        taken, statements = await traced_claim(store, ["free"])
        assert taken == 10 and len(due_reads(statements)) == 1
        assert not [s for s in statements if "lease_expires_at >" in s or "started_at >" in s]
    finally:
        await store.close()
