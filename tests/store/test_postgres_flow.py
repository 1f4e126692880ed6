"""Flow control on PostgreSQL beyond the shared contract: several store objects (other
processes' views) claiming at once never exceed a limit, concurrent creates with one dedup key
create one instance, and a claim under limits stays one round trip."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from stepline import ManualClock
from stepline.errors import DuplicateInstanceError
from stepline.limits import Limit, WorkflowLimits
from stepline.store.base import Claim, Finish, NewInstance, WorkflowMeta
from stepline.store.postgres import PostgresStore
from stepline.store.postgres.db import StoreConnection
from stepline.store.postgres.limited import LimitedClaim

from ..conftest import STORES
from .test_postgres import fresh, schemas, url_for

__all__ = ["schemas"]  # the fixture, used by name

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif("postgres" not in STORES, reason="STEPLINE_TEST_STORES leaves out postgres"),
]

LEASE = 30.0


@pytest.fixture
async def stores(schemas: list[str]) -> AsyncIterator[list[PostgresStore]]:
    """Four opened stores on one fresh schema, sharing one manual clock."""
    url = url_for(fresh(schemas))
    clock = ManualClock(1000.0)
    opened = [PostgresStore(url, clock, max_connections=4) for _ in range(4)]
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
        running += [c for batch in batches for c in batch]
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


async def test_a_claim_under_limits_takes_the_same_few_round_trips_whatever_it_takes(
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
    assert len(await store.claim("me", ["w", "x"], 1, LEASE, store.now())) == 1  # learns limits
    with round_trips() as one:
        assert len(await store.claim("me", ["w", "x"], 1, LEASE, store.now())) == 1
    with round_trips() as many:
        taken = await store.claim("me", ["w", "x"], 40, LEASE, store.now(), caps={"x": 1})
    # 28 more of w fill its 30, and x: the read that brought them also brought 10 it refused.
    assert len(taken) == 29 and "x" in {c.instance.id for c in taken}
    # The rules and what runs; the locks, what runs and the due instances; the leases and
    # histories.
    assert one == many == {"pipelines": 3}


@pytest.mark.parametrize("before", ["full", "free"])
async def test_a_claim_goes_by_the_use_it_reads_under_the_locks_not_the_use_before(
    stores: list[PostgresStore], monkeypatch: pytest.MonkeyPatch, before: str
) -> None:
    """The first read of due instances leaves out what the use read before the locks holds
    back; when the use under the locks differs, it decides: a workflow seen full before but
    with room now is read again and claimed, one seen with room but full now is not."""
    store = stores[0]
    await store.register_workflows(
        [WorkflowMeta("w", "W", None, WorkflowLimits(concurrency=3, rate=None))]
    )
    await store.create_instances(
        "w", [NewInstance(f"i{n}", None) for n in range(6)], trigger="api", skip_existing=False
    )
    assert len(await store.claim("me", ["w"], 1, LEASE, store.now())) == 1  # learns the rules
    expect = LimitedClaim._expect

    async def stale(self: LimitedClaim, conn: Any, caps: Any) -> Any:
        rules, held = await expect(self, conn, caps)
        return rules, {**held, "active": [] if before == "full" else ["w"]}

    monkeypatch.setattr(LimitedClaim, "_expect", stale)
    if before == "free":  # the other 2 slots are taken between the two reads of the use
        assert len(await stores[1].claim("other", ["w"], 2, LEASE, store.now())) == 2
    taken = await store.claim("me", ["w"], 10, LEASE, store.now())
    assert len(taken) == (2 if before == "full" else 0)
    states = await store.limit_states("w", None)
    assert [(state.scope, state.running, state.concurrency) for state in states] == [
        ("workflow", 3, 3)
    ]
