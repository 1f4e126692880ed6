"""The SQLite claim under limits: what it leaves out of its reads, so that a backlog held back
by a limit is not read again by every claim, and the reads of the unlimited path."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from stepline import ManualClock
from stepline.flow.claiming import NextLook
from stepline.limits import Rate, WorkflowLimits
from stepline.store.base import Finish, NewInstance, WorkflowMeta
from stepline.store.sqlite import SqliteStore, sql


async def traced_claim(store: SqliteStore, workflows: list[str]) -> tuple[int, list[str]]:
    """How many instances a claim took, and the statements it ran."""
    conn = store._db.require()
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        claims = (await store.claim("me", workflows, 10, 30.0, store.now())).claims
    finally:
        conn.set_trace_callback(None)
    return len(claims), statements


@contextlib.contextmanager
def vm_steps(store: SqliteStore) -> Iterator[list[int]]:
    """The SQLite virtual machine steps (in hundreds) of the store's connection meanwhile, in
    the one-item list it yields."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    conn = store._db.require()
    conn.set_progress_handler(count, 100)
    try:
        yield steps
    finally:
        conn.set_progress_handler(None, 0)


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


HELD = WorkflowLimits(concurrency=2)


async def _limited_backlog(tmp_path: Path, size: int, limits: WorkflowLimits = HELD) -> SqliteStore:
    """A store whose workflow ``busy`` has ``limits`` and ``size`` instances ``i0``... due."""
    store = SqliteStore(f"sqlite:///{tmp_path}/flow.db")
    await store.open()
    meta = WorkflowMeta("busy", "tests:Busy", None, limits)
    await store.register_workflows([meta])
    items = [NewInstance(f"i{n}", None) for n in range(size)]
    await store.create_instances("busy", items, trigger="api", skip_existing=False)
    return store


async def test_the_pauses_a_limited_claim_looks_for_are_found_without_walking_the_backlog(
    tmp_path: Path,
) -> None:
    """A claim under limits looks for pauses pending whose worker died; on a database whose
    statistics ``PRAGMA optimize`` (run as a store closes) gathered, SQLite's planner would find
    them through the ready index, every due instance of the backlog one by one, at every
    claim."""
    store = await _limited_backlog(tmp_path, 3000)
    await store.close()
    store = SqliteStore(f"sqlite:///{tmp_path}/flow.db")
    await store.open()
    try:
        taken, statements = await traced_claim(store, ["busy"])
        assert taken == 2
        assert [s for s in statements if "'waitingForPause' AND ready_at" in s]
        conn = store._db.require()
        # Planned as the claim runs it: with its parameters bound, not written in.
        query = "EXPLAIN QUERY PLAN " + sql.pauses_due(1)
        plan = " ".join(row[3] for row in conn.execute(query, ("busy", store.now())))
        assert "instances_status" in plan and "instances_ready" not in plan, plan
    finally:
        await store.close()


async def test_a_short_claim_tells_the_next_look_as_next_wakeup_would(
    tmp_path: Path,
) -> None:
    """A claim that took fewer than it asked read everything the worker's next look needs: it
    tells when to look again, as ``next_wakeup`` would read it right after (the earliest lease
    expiry, its own included)."""
    store = await _limited_backlog(tmp_path, 50)
    try:
        claimed = await store.claim("me", ["busy", "other"], 10, 30.0, store.now())
        assert len(claimed.claims) == 2  # fewer than asked: the limit holds the rest back
        expiry = min(c.instance.ready_at or 0.0 for c in claimed.claims)
        assert claimed.next_look == NextLook(expiry)
        assert await store.next_wakeup(["busy", "other"]) == expiry
        # The finish freed a slot: the backlog is runnable now, which only a read can tell.
        await store.finish(claimed.claims[0].lease, Finish("complete", output="null"), store.now())
        wakeup = await store.next_wakeup(["busy"])
        assert wakeup is not None and wakeup <= store.now()
    finally:
        await store.close()


async def test_a_full_claim_tells_the_next_look_only_when_it_left_its_workflows_held_whole(
    tmp_path: Path,
) -> None:
    """A claim that took all it asked for and left its workflow held back whole knows that
    nothing else can start: it tells the next look. One that took all it asked for with room
    left under the limit does not know what else is due: it cannot tell."""
    store = await _limited_backlog(tmp_path, 50)  # concurrency 2
    try:
        first = await store.claim("me", ["busy"], 1, 30.0, store.now())
        assert len(first.claims) == 1 and first.next_look is None
        second = await store.claim("me", ["busy"], 1, 30.0, store.now())
        assert len(second.claims) == 1  # full now
        expiry = first.claims[0].instance.ready_at
        assert second.next_look == NextLook(expiry)
        assert await store.next_wakeup(["busy"]) == expiry
    finally:
        await store.close()


async def test_a_backlog_a_limit_holds_back_is_not_walked_by_claims_and_looks(
    tmp_path: Path,
) -> None:
    """With the limit full, a claim and a look for the limited workflow and another one cost
    the same whatever the size of the held backlog (counted in SQLite VM steps)."""
    cost: dict[int, int] = {}
    for size in (300, 3000):
        store = await _limited_backlog(tmp_path / str(size), size)
        try:
            assert len((await store.claim("me", ["busy"], 10, 30.0, store.now())).claims) == 2
            with vm_steps(store) as steps:
                assert (
                    await store.claim("me", ["busy", "other"], 10, 30.0, store.now())
                ).claims == []
                await store.next_wakeup(["busy", "other"])  # a read
            cost[size] = steps[0]
        finally:
            await store.close()
    assert cost[3000] < cost[300] * 2, cost


async def test_a_claim_reads_past_a_workflow_held_back_whole_without_walking_its_backlog(
    tmp_path: Path,
) -> None:
    """A claim for a workflow whose limit is full and two others whose instances were created
    after its backlog: it takes the others' in creation order (claim order across workflows),
    at the same cost whatever the size of the held backlog (counted in SQLite VM steps)."""
    cost: dict[int, int] = {}
    for size in (300, 3000):
        store = await _limited_backlog(tmp_path / str(size), size)
        try:
            assert len((await store.claim("me", ["busy"], 10, 30.0, store.now())).claims) == 2
            for n in range(3):
                for workflow in ("x", "y"):
                    item = NewInstance(f"{workflow}{n}", None)
                    await store.create_instances(
                        workflow, [item], trigger="api", skip_existing=False
                    )
            with vm_steps(store) as steps:
                claims = (await store.claim("me", ["busy", "x", "y"], 4, 30.0, store.now())).claims
            cost[size] = steps[0]
            assert [c.instance.id for c in claims] == ["x0", "y0", "x1", "y1"]
        finally:
            await store.close()
    assert cost[3000] < cost[300] * 2, cost


async def test_a_look_for_a_limited_workflow_does_not_walk_another_workflows_backlog(
    tmp_path: Path,
) -> None:
    """``next_wakeup`` for a limited workflow asks a claim's read whether one of its instances
    may run now; that read takes the workflow's own index, not the claim order of every
    workflow's due instances (counted in SQLite VM steps)."""
    cost: dict[int, int] = {}
    for size in (300, 3000):
        store = await _limited_backlog(tmp_path / str(size), size)
        try:
            meta = WorkflowMeta("keyed", "tests:Keyed", None, WorkflowLimits(key_concurrency=1))
            await store.register_workflows([meta])
            with vm_steps(store) as steps:
                assert await store.next_wakeup(["keyed"]) is None
            cost[size] = steps[0]
        finally:
            await store.close()
    assert cost[3000] <= max(cost[300] * 2, 5), cost  # a few hundred steps: seeks


HOT_LEASE = 300.0


@contextlib.asynccontextmanager
async def hot_key(directory: Path, size: int, clock: ManualClock) -> AsyncIterator[SqliteStore]:
    """A store whose workflow ``keyed`` has ``size`` instances of the key ``hot``: the first
    running (leased for :data:`HOT_LEASE`), the others behind it, read once by a claim. On
    leaving, the first completes and the next claim must take the second."""
    store = SqliteStore(f"sqlite:///{directory}/flow.db", clock)
    await store.open()
    try:
        meta = WorkflowMeta("keyed", "tests:Keyed", None, WorkflowLimits(key_concurrency=1))
        await store.register_workflows([meta])
        items = [NewInstance(f"hot{n}", None, key="hot") for n in range(size)]
        await store.create_instances("keyed", items, trigger="api", skip_existing=False)
        (hot,) = (await store.claim("me", ["keyed"], 10, HOT_LEASE, store.now())).claims
        assert (await store.claim("me", ["keyed"], 10, HOT_LEASE, store.now())).claims == []
        yield store
        await store.finish(hot.lease, Finish("complete", output="1"), store.now())
        (nxt,) = (await store.claim("me", ["keyed"], 10, HOT_LEASE, store.now())).claims
        assert nxt.instance.id == "hot1"
    finally:
        await store.close()


async def test_a_busy_keys_backlog_is_set_aside_once_not_walked_by_every_claim(
    tmp_path: Path,
) -> None:
    """Under ``key_concurrency`` the first claim that finds a key busy sets its queued
    instances aside; the claims and looks that follow cost the same whatever the size of that
    backlog (counted in SQLite VM steps), and the key's end brings back its next instance."""
    cost: dict[int, int] = {}
    for size in (300, 3000):
        async with hot_key(tmp_path / str(size), size, ManualClock()) as store:
            with vm_steps(store) as steps:
                for n in range(3):
                    item = NewInstance(f"cold{n}", None, key=f"cold{n}")
                    await store.create_instances(
                        "keyed", [item], trigger="api", skip_existing=False
                    )
                    taken = (await store.claim("me", ["keyed"], 10, HOT_LEASE, store.now())).claims
                    assert [c.instance.id for c in taken] == [f"cold{n}"]
                    await store.next_wakeup(["keyed"])
            cost[size] = steps[0]
    assert cost[3000] < cost[300] * 2, cost


async def test_a_recheck_reads_the_first_in_line_of_a_busy_key_not_its_whole_backlog(
    tmp_path: Path,
) -> None:
    """Only the first in line behind a busy key has a recheck time: when it comes, a claim reads
    that one instance, not the key's whole backlog (counted in SQLite VM steps), and the line
    keeps its order."""
    cost: dict[int, int] = {}
    for size in (300, 3000):
        clock = ManualClock()
        async with hot_key(tmp_path / str(size), size, clock) as store:
            clock.advance(150)  # past the recheck
            with vm_steps(store) as steps:
                assert (await store.claim("me", ["keyed"], 10, HOT_LEASE, store.now())).claims == []
            cost[size] = steps[0]
    assert cost[3000] < cost[300] * 2, cost


@pytest.mark.parametrize("beside_a_full_workflow", [False, True])
async def test_a_claim_sets_a_backlog_created_together_aside_reading_each_instance_once(
    tmp_path: Path, beside_a_full_workflow: bool
) -> None:
    """Instances created in one batch share their ``ready_at``. A claim reads its due
    instances a page at a time after the last one read, (``ready_at``, pk): the next page
    must seek to it, not walk again every instance of that ``ready_at`` read before (SQLite
    seeks an index on ``ready_at`` alone there). So the claim that sets busy keys' backlog
    aside costs in proportion to the backlog (counted in SQLite VM steps), also when a
    workflow held back whole makes it read each workflow apart."""
    cost: dict[int, int] = {}
    for size in (500, 2000):
        store = SqliteStore(f"sqlite:///{tmp_path}/{size}.db")
        await store.open()
        try:
            keyed = WorkflowMeta("keyed", "tests:Keyed", None, WorkflowLimits(key_concurrency=1))
            full = WorkflowMeta("full", "tests:Full", None, WorkflowLimits(concurrency=1))
            await store.register_workflows([keyed, full])
            workflows = ["keyed"]
            if beside_a_full_workflow:
                items = [NewInstance(f"f{n}", None) for n in range(2)]
                await store.create_instances("full", items, trigger="api", skip_existing=False)
                assert len((await store.claim("me", ["full"], 10, 30.0, store.now())).claims) == 1
                workflows.append("full")
            items = [NewInstance(f"i{n}", None, key=f"k{n % 5}") for n in range(size)]
            await store.create_instances("keyed", items, trigger="api", skip_existing=False)
            with vm_steps(store) as steps:
                claims = (await store.claim("me", workflows, 10, 30.0, store.now())).claims
            cost[size] = steps[0]
            assert [c.instance.id for c in claims] == [f"i{n}" for n in range(5)]
            assert (await store.claim("me", workflows, 10, 30.0, store.now())).claims == []
        finally:
            await store.close()
    assert cost[2000] < cost[500] * 6, cost


async def test_a_backlog_waiting_for_a_rate_is_not_walked_by_claims_and_looks(
    tmp_path: Path,
) -> None:
    """A rate holds back first starts only, so a workflow whose rate is used up is still read,
    for its instances that started before: those alone, through their own index. A claim for
    it and another workflow, and a look, cost the same whatever the size of the first starts
    waiting for the rate (counted in SQLite VM steps), and an instance resuming from a sleep
    runs meanwhile."""
    cost: dict[int, int] = {}
    for size in (300, 3000):
        rated = WorkflowLimits(rate=Rate(1, 3600.0))
        store = await _limited_backlog(tmp_path / str(size), size + 1, rated)
        try:
            (first,) = (await store.claim("me", ["busy"], 10, 30.0, store.now())).claims
            await store.finish(first.lease, Finish("waiting", wake_at=store.now()), store.now())
            item = NewInstance("o0", None)
            await store.create_instances("other", [item], trigger="api", skip_existing=False)
            with vm_steps(store) as steps:
                claims = (await store.claim("me", ["busy", "other"], 10, 30.0, store.now())).claims
                await store.next_wakeup(["busy", "other"])  # a read
            cost[size] = steps[0]
            assert sorted(c.instance.id for c in claims) == ["i0", "o0"]
        finally:
            await store.close()
    assert cost[3000] < cost[300] * 2, cost
