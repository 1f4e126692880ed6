"""Flow control on PostgreSQL beyond the shared contract: several store objects (other
processes' views) claiming at once never exceed a limit, concurrent creates with one dedup key
create one instance, and a claim under limits stays one round trip."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from psycopg import sql

from stepline import ManualClock
from stepline.errors import DuplicateInstanceError
from stepline.flow.parking import POSTGRES_SET_ASIDE_CLAIMS as FAR_CLAIMS
from stepline.flow.parking import POSTGRES_SET_ASIDE_OVER as PARK_AFTER
from stepline.flow.parking import RECHECK
from stepline.limits import Limit, WorkflowLimits
from stepline.store.base import Claim, Finish, NewInstance, WorkflowMeta
from stepline.store.postgres import PostgresStore, split_url
from stepline.store.postgres.notes import Notes
from stepline.store.postgres.parking import ParkingStatements, freed_params
from stepline.store.postgres.pools import StoreConnection

from .._pg import connect, pg_admin_url
from ..conftest import STORES
from .test_postgres import fresh, query, schemas, url_for

__all__ = ["schemas"]  # the fixture, used by name

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif("postgres" not in STORES, reason="STEPLINE_TEST_STORES leaves out postgres"),
]

LEASE = 30.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1000.0)


@pytest.fixture
async def stores(schemas: list[str], clock: ManualClock) -> AsyncIterator[list[PostgresStore]]:
    """Four opened stores on one fresh schema, sharing one manual clock."""
    url = url_for(fresh(schemas))
    opened = [PostgresStore(url, clock, pool_size=4) for _ in range(4)]
    for store in opened:
        await store.open()
    yield opened
    for store in opened:
        await store.close()


async def test_concurrent_claimers_never_exceed_a_limit(stores: list[PostgresStore]) -> None:
    """Rounds of four stores claiming at once, then finishing some of what runs: at no point do
    more instances run than the workflow's concurrency, its key concurrency or the named limit
    it shares with another workflow allow; and every instance runs in the end."""
    first = stores[0]
    await first.register_workflows(
        [
            WorkflowMeta("w", "W", None, WorkflowLimits(concurrency=3, key_concurrency=1)),
            WorkflowMeta("v", "V", None, WorkflowLimits(limits=("shared",))),
            WorkflowMeta("u", "U", None, WorkflowLimits(limits=("shared",))),
        ],
        [Limit("shared", concurrency=2)],
    )
    for workflow, n in (("w", 12), ("v", 6), ("u", 6)):
        items = [NewInstance(f"{workflow}{i}", None, key=f"k{i % 4}") for i in range(n)]
        await first.create_instances(workflow, items, trigger="api", skip_existing=False)
    rng = random.Random(7)
    running: list[Claim] = []
    done = 0
    for _ in range(60):
        now = first.now()
        batches = await asyncio.gather(
            *(
                store.claim(f"s{n}", ["w", "v", "u"], 3, LEASE, now)
                for n, store in enumerate(stores)
            )
        )
        running += [c for batch in batches for c in batch.claims]
        by_workflow = Counter(c.instance.workflow for c in running)
        assert by_workflow["w"] <= 3
        assert by_workflow["v"] + by_workflow["u"] <= 2
        keys = Counter(c.instance.key for c in running if c.instance.workflow == "w")
        assert max(keys.values(), default=0) <= 1
        for ended in [c for c in running if rng.random() < 0.5]:
            await first.finish(ended.lease, Finish("complete"), now)
            running.remove(ended)
            done += 1
        if done == 24:
            break
    assert done == 24


async def test_twenty_concurrent_creates_with_one_dedup_key_create_one_instance(
    stores: list[PostgresStore],
) -> None:
    async def create(store: PostgresStore, n: int) -> str:
        item = NewInstance(f"i{n}", None, dedup_key="once")
        try:
            (record,) = await store.create_instances(
                "w", [item], trigger="api", skip_existing=False
            )
        except DuplicateInstanceError as exc:
            return f"duplicate of {exc.instance_id}"
        return f"created {record.id}"

    outcomes = await asyncio.gather(*(create(stores[n % 4], n) for n in range(20)))
    created = [o.removeprefix("created ") for o in outcomes if o.startswith("created ")]
    assert len(created) == 1
    assert sorted(outcomes) == sorted(
        [f"created {created[0]}"] + [f"duplicate of {created[0]}"] * 19
    )
    skipped = await asyncio.gather(
        *(
            stores[n % 4].create_instances(
                "w",
                [NewInstance(f"j{n}", None, dedup_key="once")],
                trigger="api",
                skip_existing=True,
            )
            for n in range(8)
        )
    )
    assert skipped == [[]] * 8
    page = await stores[0].list_instances("w", None, 50, None)
    assert [r.id for r in page.instances] == created


@contextlib.contextmanager
def round_trips() -> Iterator[Counter[str]]:
    """Counts, on every store connection, the pipelines entered and the statements sent outside
    one (each of which is a round trip of its own)."""
    counts: Counter[str] = Counter()
    pipeline, execute = StoreConnection.pipeline, StoreConnection.execute
    depth = Counter[int]()

    @contextlib.asynccontextmanager
    async def counted_pipeline(self: StoreConnection) -> AsyncIterator[Any]:
        counts["pipelines"] += 1
        depth[id(self)] += 1
        try:
            async with pipeline(self) as p:
                yield p
        finally:
            depth[id(self)] -= 1

    async def counted_execute(self: StoreConnection, *args: Any, **kwargs: Any) -> Any:
        if not depth[id(self)]:
            counts["alone"] += 1
        return await execute(self, *args, **kwargs)

    StoreConnection.pipeline = counted_pipeline  # type: ignore[assignment,method-assign]
    StoreConnection.execute = counted_execute  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        StoreConnection.pipeline = pipeline  # type: ignore[method-assign]
        StoreConnection.execute = execute  # type: ignore[method-assign]


async def test_a_claim_under_limits_takes_three_round_trips_whatever_it_takes(
    stores: list[PostgresStore],
) -> None:
    store = stores[0]
    await store.register_workflows(
        [WorkflowMeta("w", "W", None, WorkflowLimits(concurrency=30, rate=None))],
    )
    await store.create_instances(
        "w", [NewInstance(f"i{n}", None) for n in range(40)], trigger="api", skip_existing=False
    )
    await store.create_instances("x", [NewInstance("x", None)], trigger="api", skip_existing=False)
    assert (
        len((await store.claim("me", ["w", "x"], 1, LEASE, store.now())).claims) == 1
    )  # learns limits
    with round_trips() as one:
        assert len((await store.claim("me", ["w", "x"], 1, LEASE, store.now())).claims) == 1
    with round_trips() as many:
        taken = (await store.claim("me", ["w", "x"], 40, LEASE, store.now(), caps={"x": 1})).claims
    # 28 more of w fill its 30, and x: the read that brought them also brought 10 it refused.
    assert len(taken) == 29 and "x" in {c.instance.id for c in taken}
    # The rules, the locks and the use; the due instances with the timers; the look one row
    # further, the leases, the leased rows and histories, and the commit (``limited``).
    assert one == many == {"pipelines": 3}


def claim_functions(schema: str) -> list[str]:
    rows = query(
        "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = %s AND p.proname LIKE 'claim_under_limits_%%' ORDER BY 1",
        (schema,),
    )
    return [name for (name,) in rows]


async def test_a_store_leaves_an_older_versions_claim_function_alone(
    schemas: list[str], clock: ManualClock
) -> None:
    """Stepline once claimed under limits through a server-side function, which a store
    created when it opened. Workers of that version may still run beside this one and call
    it: a store opening the schema leaves it as it is, and creates none."""
    schema = fresh(schemas)
    opened = [PostgresStore(url_for(schema), clock, pool_size=2) for _ in range(2)]
    await opened[0].open()
    try:
        older = (
            f"CREATE FUNCTION {schema}.claim_under_limits_000000000000() RETURNS int"
            " LANGUAGE sql AS 'SELECT 1'"
        )
        with connect(pg_admin_url()) as conn:
            conn.execute(older.encode())
        await opened[1].open()
        assert claim_functions(schema) == ["claim_under_limits_000000000000"]
        await opened[0].register_workflows(
            [WorkflowMeta("w", "W", None, WorkflowLimits(concurrency=1))]
        )
        await opened[0].create_instances(
            "w", [NewInstance("a", None)], trigger="api", skip_existing=False
        )
        assert len((await opened[1].claim("me", ["w"], 5, LEASE, clock())).claims) == 1
    finally:
        for store in opened:
            await store.close()


# -- a busy key's backlog set aside --------------------------------------------------------

BEHIND = PARK_AFTER + 200
"""Instances of a busy key: more than a claim steps over before it sets them aside."""


async def keyed_backlog(store: PostgresStore, clock: ManualClock, size: int) -> dict[str, Claim]:
    """Workflow ``k`` (one instance per key at a time), ``size`` instances of key ``hot`` and
    one of key ``cold``: claimed so that ``hot0`` runs and the rest of ``hot`` waits, set
    aside if there are more than ``PARK_AFTER`` of them."""
    await store.register_workflows(
        [WorkflowMeta("k", "K", None, WorkflowLimits(key_concurrency=1))]
    )
    await add_hot(store, 0, size)
    clock.advance(1)
    await store.create_instances(
        "k", [NewInstance("cold", None, key="cold")], trigger="api", skip_existing=False
    )
    taken = {
        c.instance.id: c for c in (await store.claim("me", ["k"], 5, LEASE, store.now())).claims
    }
    assert sorted(taken) == ["cold", "hot0"]
    await claims_that_step_over(store, FAR_CLAIMS - 1)
    return taken


async def claims_that_step_over(store: PostgresStore, n: int) -> None:
    """``n`` claims that take nothing: the last of ``FAR_CLAIMS`` claims in a row that step
    over a long backlog sets it aside."""
    for _ in range(n):
        assert (await store.claim("me", ["k"], 5, LEASE, store.now())).claims == []


async def add_hot(store: PostgresStore, first: int, count: int) -> None:
    """Create ``hot{first}`` and the ``count - 1`` after it, of key ``hot``."""
    items = [NewInstance(f"hot{n}", None, key="hot") for n in range(first, first + count)]
    for start in range(0, count, 500):
        await store.create_instances(
            "k", items[start : start + 500], trigger="api", skip_existing=False
        )


def set_aside(schema: str) -> dict[str, tuple[bool, bool]]:
    """Each queued instance of ``k``: whether it is in the ready index (has a ``ready_at``) and
    whether it is set aside (has a ``held_ready_at``)."""
    rows = query(
        sql.SQL(
            "SELECT id, ready_at IS NOT NULL, held_ready_at IS NOT NULL FROM {}.instances"
            " WHERE workflow = 'k' AND status = 'queued'"
        ).format(sql.Identifier(schema))
    )
    return {instance_id: (ready, held) for instance_id, ready, held in rows}


async def test_a_claim_sets_a_busy_keys_queued_instances_aside_and_an_end_brings_the_next_back(
    stores: list[PostgresStore], clock: ManualClock
) -> None:
    """Out of the ready index, so that no later claim walks them; the key's end brings back its
    next, in order."""
    store = stores[0]
    hot0 = (await keyed_backlog(store, clock, BEHIND))["hot0"]
    schema = split_url(store.url)[1]
    found = set_aside(schema)
    assert {found[f"hot{n}"] for n in range(1, BEHIND)} == {(False, True)}
    assert (await store.claim("me", ["k"], 5, LEASE, store.now())).claims == []
    await store.finish(hot0.lease, Finish("complete", output="1"), store.now())
    (hot1,) = (await stores[1].claim("other", ["k"], 5, LEASE, store.now())).claims
    assert hot1.instance.id == "hot1"
    found = set_aside(schema)
    assert {found[f"hot{n}"] for n in range(2, BEHIND)} == {(False, True)}


async def test_a_busy_keys_line_set_aside_comes_back_by_priority_then_place_in_line(
    stores: list[PostgresStore], clock: ManualClock
) -> None:
    """The line set aside is created over distinct times, so its order by place in line
    (``held_ready_at``) differs from the order it was stored in: the bring-backs give the
    lowest priority first, then the earliest place in line (a restarted instance, stored
    first, goes to the back), then creation order within one batch."""
    store = stores[0]
    await store.register_workflows(
        [WorkflowMeta("k", "K", None, WorkflowLimits(key_concurrency=1))]
    )

    async def create(*items: NewInstance) -> None:
        for start in range(0, len(items), 500):
            await store.create_instances(
                "k", items[start : start + 500], trigger="api", skip_existing=False
            )
        clock.advance(1)

    def hot(instance_id: str, priority: int = 0) -> NewInstance:
        return NewInstance(instance_id, None, key="hot", priority=priority)

    await create(hot("again"))
    (again,) = (await store.claim("me", ["k"], 5, LEASE, store.now())).claims
    await store.finish(again.lease, Finish("complete", output="1"), store.now())
    await create(hot("first"))
    (running,) = (await store.claim("me", ["k"], 5, LEASE, store.now())).claims
    await create(hot("a"))
    await create(hot("b1"), hot("b2"))
    await create(hot("urgent", -1))
    await store.control("k", "again", "restart")
    clock.advance(1)
    await create(*(hot(f"hot{n}", 1) for n in range(BEHIND)))
    await create(hot("c"))
    await claims_that_step_over(store, FAR_CLAIMS)
    schema = split_url(store.url)[1]
    assert set(set_aside(schema).values()) == {(False, True)}
    started = []
    for _ in range(8):
        await store.finish(running.lease, Finish("complete", output="1"), store.now())
        clock.advance(1)
        (running,) = (await stores[1].claim("other", ["k"], 5, LEASE, store.now())).claims
        started.append(running.instance.id)
    assert started == ["urgent", "a", "b1", "b2", "again", "c", "hot0", "hot1"]


async def test_a_claim_does_not_set_aside_behind_a_key_whose_last_instance_is_ending(
    stores: list[PostgresStore], clock: ManualClock
) -> None:
    """A finish (its update and its bring-back) that commits while a claim sets a key's queue
    aside: the claim holds the key's running instances locked while it checks the key is still
    full, so either the finish waits and its bring-back sees what was set aside, or, as here,
    the claim sees the key free and sets nothing aside. Without the lock the claim would set
    the queue aside behind a key nothing runs any more, after the finish's bring-back: it would
    wait for a recheck."""
    store = stores[0]
    hot0 = (await keyed_backlog(store, clock, 1))["hot0"]
    await add_hot(store, 1, BEHIND)
    await claims_that_step_over(stores[1], FAR_CLAIMS - 1)
    schema = split_url(store.url)[1]
    assert set(set_aside(schema).values()) == {(True, False)}
    with connect(pg_admin_url()) as ending:  # a finish of hot0, not yet committed
        ending.execute("BEGIN")
        ending.execute(
            sql.SQL(
                "UPDATE {}.instances SET status = 'complete', lease_owner = NULL,"
                " lease_expires_at = NULL, ready_at = NULL WHERE pk = %s"
            ).format(sql.Identifier(schema)),
            (hot0.lease.pk,),
        )
        fence = json.dumps([{"pk": hot0.lease.pk, "token": hot0.lease.token}])
        back = {"fences": fence, **freed_params(store.now(), Notes(schema))}
        ending.execute(ParkingStatements.for_schema(schema).freed_released, back)
        # It sees hot0 running: it takes nothing of hot, and steps over its whole queue, as the
        # claims before it did.
        claiming = asyncio.create_task(stores[1].claim("other", ["k"], 5, LEASE, store.now()))
        await until_waiting_for_a_lock(ending)
        ending.execute("COMMIT")
        assert (await claiming).claims == []
    assert set(set_aside(schema).values()) == {(True, False)}
    taken = (await store.claim("me", ["k"], 5, LEASE, store.now())).claims
    assert [c.instance.id for c in taken] == ["hot1"]


async def until_waiting_for_a_lock(holder: Any) -> None:
    """Until another backend waits for a lock held by ``holder``'s transaction (for at most
    two seconds: a claim that takes no lock goes on, and what it wrote tells)."""
    pid = holder.info.backend_pid
    for _ in range(200):
        waiting = query(
            "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (pid,)
        )
        if waiting[0][0]:
            return
        await asyncio.sleep(0.01)


async def test_an_instance_brought_back_is_due_above_every_claims_floor(
    stores: list[PostgresStore], clock: ManualClock
) -> None:
    """A claim reads from a floor below which it saw nothing live: an instance brought back
    from far back in its key's line is due from no earlier than just before the bring-back, so
    another process's claim, reading from its floor, takes it at once."""
    store, other = stores[0], stores[1]
    running = await keyed_backlog(store, clock, BEHIND)
    hot0 = running["hot0"]
    clock.advance(20)
    for _ in range(3):  # the other store's claims, a few seconds apart, move its floor up
        clock.advance(3)
        assert len(await store.renew([c.lease for c in running.values()], LEASE, store.now())) == 2
        await other.create_instances(
            "k",
            [NewInstance(f"c{store.now()}", None, key=f"c{store.now()}")],
            trigger="api",
            skip_existing=False,
        )
        (passing,) = (await other.claim("other", ["k"], 5, LEASE, store.now())).claims
        await other.finish(passing.lease, Finish("complete", output="1"), store.now())
    await store.finish(hot0.lease, Finish("complete", output="1"), store.now())
    (hot1,) = (await other.claim("other", ["k"], 5, LEASE, store.now())).claims
    assert hot1.instance.id == "hot1"


async def test_a_key_left_idle_without_a_bring_back_gets_its_next_back_within_a_recheck(
    stores: list[PostgresStore], clock: ManualClock
) -> None:
    """What no write brought back (here: a finish whose bring-back was lost with its
    connection) a claim brings back once ``RECHECK`` seconds have passed since its last look."""
    store = stores[0]
    running = await keyed_backlog(store, clock, BEHIND)
    await store.finish(running["cold"].lease, Finish("complete", output="1"), store.now())
    schema = split_url(store.url)[1]
    with connect(pg_admin_url()) as conn:
        conn.execute(
            sql.SQL(
                "UPDATE {}.instances SET status = 'complete', lease_owner = NULL,"
                " lease_expires_at = NULL, ready_at = NULL WHERE pk = %s"
            ).format(sql.Identifier(schema)),
            (running["hot0"].lease.pk,),
        )
    assert (await store.claim("me", ["k"], 5, LEASE, store.now())).claims == []
    clock.advance(RECHECK - 1)
    assert (await store.claim("me", ["k"], 5, LEASE, store.now())).claims == []
    clock.advance(1)
    assert [
        c.instance.id for c in (await store.claim("me", ["k"], 5, LEASE, store.now())).claims
    ] == ["hot1"]


def rows_read_to_park(schema: str, keys: list[str], now: float) -> int:
    """The instance rows that setting aside the queues of ``keys`` of ``k`` (each with one
    instance running) reads, from its plan's scans (rows returned and rows filtered out, times
    loops): the statement run, then rolled back."""
    park = ParkingStatements.for_schema(schema).park
    params = {"keys": json.dumps([{"workflow": "k", "key": key, "cap": 1} for key in keys])}
    with connect(pg_admin_url()) as conn:
        conn.execute("BEGIN")
        (plan,) = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + park, {**params, "now": now}
        ).fetchone()
        conn.execute("ROLLBACK")

    def read(node: dict[str, Any]) -> float:
        below = sum(read(child) for child in node.get("Plans", []))
        if node.get("Relation Name") != "instances" or node["Node Type"] == "ModifyTable":
            return below
        per_loop = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
        return below + per_loop * node["Actual Loops"]

    return round(read(plan[0]["Plan"]))


async def test_setting_busy_keys_queues_aside_reads_each_keys_queue_not_the_workflows(
    stores: list[PostgresStore],
) -> None:
    """A claim sets aside the queues of up to hundreds of full keys in one statement: it must
    read each key's own queue, not every queued instance of the workflow once per key. The
    same 1,500 queued instances behind 5 busy keys and behind 50 are read as many times."""
    store = stores[0]
    await store.register_workflows(
        [WorkflowMeta("k", "K", None, WorkflowLimits(key_concurrency=1))]
    )
    schema = split_url(store.url)[1]
    cost: dict[int, int] = {}
    for n_keys in (5, 50):
        keys = [f"{n_keys}-{n}" for n in range(n_keys)]
        items = [NewInstance(f"{key}-{i}", None, key=key) for key in keys for i in range(2)]
        await store.create_instances("k", items, trigger="api", skip_existing=False)
        taken = (await store.claim("me", ["k"], 100, LEASE, store.now())).claims
        assert len(taken) == n_keys  # the first of each key runs
        queue = [NewInstance(f"q{n_keys}-{n}", None, key=keys[n % n_keys]) for n in range(1500)]
        for start in range(0, len(queue), 500):
            await store.create_instances(
                "k", queue[start : start + 500], trigger="api", skip_existing=False
            )
        cost[n_keys] = rows_read_to_park(schema, keys, store.now())
        for claim in taken:  # the keys of the next round run nothing any more
            await store.finish(claim.lease, Finish("complete", output="1"), store.now())
        await store.retention.delete_instances(
            "k", [i.id for i in queue + items], finished_only=False
        )
    assert cost[50] < cost[5] * 3, cost
