"""What the PostgreSQL store's hot statements read of the instances table does not grow with
it: each statement a claim, a batch of step writes, a renewal or a finish runs is first run
under ``EXPLAIN ANALYZE`` with the same parameters (on another connection, in a transaction
rolled back), while the state it acts on is live; every plan node on ``instances`` must read
few rows out of 20,000. The table is fresh and never analysed, as in a deployment whose
autovacuum has not yet come by."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from psycopg import sql

from stepline.flow.parking import POSTGRES_SET_ASIDE_CLAIMS as FAR_CLAIMS
from stepline.limits import Rate, WorkflowLimits
from stepline.store.base import Claim, Finish, NewInstance, StepWrite, WorkflowMeta
from stepline.store.postgres import PostgresStore, split_url
from stepline.store.postgres.notes import Notes
from stepline.store.postgres.parking import ParkingStatements, freed_params
from stepline.store.postgres.sql import json_rows

from .._pg import connect
from ..conftest import STORES
from .test_postgres import fresh, schemas, url_for

__all__ = ["schemas"]  # the fixture, used by name

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif("postgres" not in STORES, reason="STEPLINE_TEST_STORES leaves out postgres"),
]

SIZE = 20_000
MOST = 50
"""Rows of ``instances`` one plan node may read (returned or filtered out) for a claim or a
batch of five: a few index lookups, never a walk of the table or of a backlog."""


@dataclass
class Explained:
    """The statements run while :attr:`url` is set, each with its ``EXPLAIN ANALYZE`` plan."""

    url: str | None = None
    plans: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    settings: dict[str, None] = field(default_factory=dict)
    """The ``SET LOCAL`` planner settings the store's transactions chose, replayed first."""
    blocked: list[str] = field(default_factory=list)
    """The statements that could not be explained: they write rows the store's transaction
    holds locked (a claim's leases of the rows it locked)."""

    def explain(self, query: str, params: Any) -> None:
        if query.startswith("SET LOCAL"):
            self.settings[query] = None
        if self.url is None or not query.lstrip().startswith(("WITH", "SELECT", "UPDATE")):
            return
        with connect(self.url) as conn, conn.transaction(force_rollback=True):
            for setting in self.settings:
                conn.execute(setting)
            conn.execute("SET LOCAL lock_timeout = '500ms'")
            try:
                row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query, params).fetchone()
            except psycopg.errors.LockNotAvailable:
                self.blocked.append(" ".join(query.split()))
                return
        assert row is not None
        document: Any = row[0]  # psycopg parses the json column
        self.plans.append((" ".join(query.split()), document[0]["Plan"]))

    def reads(self, marker: str) -> list[tuple[str, float]]:
        """(node type, rows read) of each plan node on ``instances`` of the statements that
        contain ``marker``; fails if none ran."""
        chosen = [plan for query, plan in self.plans if marker in query]
        assert chosen, f"no statement with {marker!r} ran"
        return [read for plan in chosen for read in _rows_read(plan)]


LEASE_BY_PK = "WHERE pk = ANY(%(pks)s::bigint[])"
"""The end of the statement that leases what a claim under limits took, by primary key: it
writes rows the claim's transaction holds locked, so it cannot be explained beside it."""


def only_leases_blocked(explained: Explained) -> bool:
    return all(query.endswith(LEASE_BY_PK) for query in explained.blocked)


def _rows_read(plan: dict[str, Any]) -> Iterator[tuple[str, float]]:
    if plan.get("Relation Name") == "instances":
        loops = plan.get("Actual Loops", 1)
        per_loop = sum(
            plan.get(name, 0)
            for name in ("Actual Rows", "Rows Removed by Filter", "Rows Removed by Index Recheck")
        )
        yield plan["Node Type"], per_loop * loops
    for child in plan.get("Plans", []):
        yield from _rows_read(child)


@pytest.fixture
def explained(monkeypatch: pytest.MonkeyPatch) -> Explained:
    """Every statement run through psycopg's asyncio cursors is explained before it runs, while
    ``explained.url`` is set."""
    found = Explained()
    execute = psycopg.AsyncCursor.execute

    async def explaining(
        self: psycopg.AsyncCursor[Any], query: Any, params: Any = None, **kw: Any
    ) -> Any:
        found.explain(str(query), params)
        return await execute(self, query, params, **kw)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", explaining)
    return found


async def _store_with(
    schemas: list[str], limits: WorkflowLimits, *, keys: int = 0
) -> PostgresStore:
    """A store with ``SIZE`` due instances of ``w``; with ``keys``, instance n has key
    ``k{n % keys}``."""
    store = PostgresStore(url_for(fresh(schemas)), pool_size=2)
    await store.open()
    await store.register_workflows([WorkflowMeta("w", "tests:W", None, limits)])
    items = [NewInstance(f"i{n}", None, key=f"k{n % keys}" if keys else None) for n in range(SIZE)]
    await store.create_instances("w", items, trigger="api", skip_existing=False)
    return store


def _too_many(reads: list[tuple[str, float]], most: int = MOST) -> list[tuple[str, float]]:
    return [(node, rows) for node, rows in reads if rows > most]


async def test_a_claim_under_a_full_limit_does_not_read_the_backlog_it_holds_back(
    schemas: list[str], explained: Explained
) -> None:
    """With the workflow's concurrency taken, a claim finds nothing to start: it learns that
    without reading the 20,000 instances the limit holds back."""
    store = await _store_with(schemas, WorkflowLimits(concurrency=2))
    try:
        assert len((await store.claim("me", ["w"], 10, 30.0, store.now())).claims) == 2
        explained.url = store.url
        assert (await store.claim("me", ["w"], 10, 30.0, store.now())).claims == []
        explained.url = None
        reads = explained.reads("instances")
        assert reads and not _too_many(reads), _too_many(reads)
    finally:
        await store.close()


async def test_a_claim_reads_past_a_workflow_held_back_whole_without_walking_its_backlog(
    schemas: list[str], explained: Explained
) -> None:
    """A worker claims for several workflows; one has its concurrency taken and 20,000 due
    instances, which come first in claim order: the claim takes the other's few, and neither
    it nor the worker's next look for a timer reads that backlog."""
    store = await _store_with(schemas, WorkflowLimits(concurrency=2))
    try:
        await store.register_workflows([WorkflowMeta("v", "tests:V", None, WorkflowLimits())])
        await store.create_instances(
            "v", [NewInstance(f"v{n}", None) for n in range(3)], trigger="api", skip_existing=False
        )
        assert len((await store.claim("me", ["w"], 10, 30.0, store.now())).claims) == 2
        explained.url = store.url
        claimed = (await store.claim("me", ["w", "v"], 10, 30.0, store.now())).claims
        assert sorted(claim.instance.id for claim in claimed) == ["v0", "v1", "v2"]
        await store.next_wakeup(["w", "v"])
        explained.url = None
        reads = explained.reads("instances")
        assert reads and not _too_many(reads), _too_many(reads)
        assert only_leases_blocked(explained), explained.blocked
    finally:
        await store.close()


KEYS = 5
ENDING = 3
"""Behind busy keys: how many keys run one instance each, and how many of those end at once."""
MOST_BEHIND_KEYS = 2 * MOST
"""Rows of ``instances`` a claim behind busy keys may read: it looks up each key a few times
(which are full, their next in line, whether more is runnable), and while another session's
snapshot is open the versions the rounds before left are still returned by those lookups."""


async def _busy_keys(schemas: list[str]) -> PostgresStore:
    """Each of ``KEYS`` keys of ``w`` runs one instance, with the ``SIZE`` others queued behind
    them. Statistics are taken first, as autovacuum leaves them while a backlog is queued."""
    store = await _store_with(schemas, WorkflowLimits(key_concurrency=1), keys=KEYS)
    with connect(store.url) as conn:
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema_of(store), "instances")))
    return store


async def _end_and_claim(
    store: PostgresStore, running: list[Claim], explained: Explained
) -> tuple[list[Claim], list[Claim]]:
    """``ENDING`` of ``running`` end, and a claim takes as many: the keys that ended run their
    next in line. The claim alone is explained. Returns (what ended, what runs now)."""
    ended, running = running[:ENDING], running[ENDING:]
    for claim in ended:
        await store.finish(claim.lease, Finish("complete"), store.now())
    explained.plans.clear()
    explained.url = store.url
    claimed = (await store.claim("me", ["w"], ENDING, 30.0, store.now())).claims
    explained.url = None
    assert sorted(c.instance.key or "" for c in claimed) == sorted(
        c.instance.key or "" for c in ended
    )
    return ended, running + claimed


def schema_of(store: PostgresStore) -> str:
    return split_url(store.url)[1]


async def test_full_claims_behind_busy_keys_stop_walking_their_backlog(
    schemas: list[str], explained: Explained
) -> None:
    """Each end frees a key, and a claim takes as many as ended: its read finds the keys' next
    in line first, and the claim is full. Whether anything more is runnable then reads past the
    whole backlog of the busy keys, so claims in a row that walk it set it aside, as reads that
    come back short do: after a few, a claim reads only the keys' next in line."""
    store = await _busy_keys(schemas)
    try:
        running = (await store.claim("me", ["w"], KEYS, 30.0, store.now())).claims
        for _ in range(FAR_CLAIMS + 1):
            _ended, running = await _end_and_claim(store, running, explained)
        reads = explained.reads("instances")
        assert reads and not _too_many(reads, MOST_BEHIND_KEYS), reads
    finally:
        await store.close()


async def test_an_end_brings_back_its_keys_next_in_line_reading_only_that_key(
    schemas: list[str], explained: Explained
) -> None:
    """Once busy keys' backlogs are set aside, an end brings back its key's next in line. The
    statistics date from before anything was set aside, so the index of what is set aside looks
    small to the planner: the bring-back still finds its row by key, then by pk."""
    store = await _busy_keys(schemas)
    try:
        running = (await store.claim("me", ["w"], KEYS, 30.0, store.now())).claims
        for _ in range(FAR_CLAIMS + 1):
            ended, running = await _end_and_claim(store, running, explained)
        # A finish sends its bring-back behind it, in a pipeline: explained before the finish
        # commits, it would find nothing. Explained now, it brings back the one after.
        fence = json_rows([{"pk": ended[0].lease.pk, "token": ended[0].lease.token}])
        parking = ParkingStatements.for_schema(schema_of(store))
        explained.plans.clear()
        explained.url = store.url
        notes = Notes(schema_of(store))
        explained.explain(
            parking.freed_released, {"fences": fence, **freed_params(store.now(), notes)}
        )
        explained.url = None
        reads = explained.reads("instances")
        assert reads and not _too_many(reads), _too_many(reads)
        assert explained.plans[0][1]["Plans"][-1]["Actual Rows"] == 1, "nothing came back"
    finally:
        await store.close()


async def test_a_claim_reads_past_a_backlog_waiting_for_a_rate_without_walking_it(
    schemas: list[str], explained: Explained
) -> None:
    """A workflow's rate is used up and 20,000 first starts wait for it; one instance that
    started before is due again (its sleep ended), and another workflow has three due. A claim
    takes those four, a rate counting first starts only, and neither it nor the worker's next
    look for a timer walks the first starts."""
    store = await _store_with(schemas, WorkflowLimits(rate=Rate(1, 3600.0)))
    try:
        await store.register_workflows([WorkflowMeta("v", "tests:V", None, WorkflowLimits())])
        (first,) = (await store.claim("me", ["w"], 10, 30.0, store.now())).claims
        await store.finish(first.lease, Finish("waiting", wake_at=store.now()), store.now())
        await store.create_instances(
            "v", [NewInstance(f"v{n}", None) for n in range(3)], trigger="api", skip_existing=False
        )
        explained.url = store.url
        claimed = (await store.claim("me", ["w", "v"], 10, 30.0, store.now())).claims
        assert sorted(claim.instance.id for claim in claimed) == ["i0", "v0", "v1", "v2"]
        await store.next_wakeup(["w", "v"])
        explained.url = None
        reads = explained.reads("instances")
        assert reads and not _too_many(reads), _too_many(reads)
        assert only_leases_blocked(explained), explained.blocked
    finally:
        await store.close()


async def test_batch_writes_read_only_the_instances_they_write(
    schemas: list[str], explained: Explained
) -> None:
    """Five activations record a step each at once (a batch), renew their leases together and
    finish at once (a batch): each statement, and the finish's recovery read, finds its five
    instances by key."""
    store = await _store_with(schemas, WorkflowLimits())
    try:
        claims = (await store.claim("me", ["w"], 5, 30.0, store.now())).claims
        assert len(claims) == 5
        explained.url = store.url
        now = store.now()
        write = StepWrite("s", 1, 1, "do", "complete", output="1", ended_at=now, new=True)
        await asyncio.gather(*(store.record_step(c.lease, write, now) for c in claims))
        await store.renew([c.lease for c in claims], 30.0, now)
        done = Finish("complete", output="null")
        await asyncio.gather(*(store.finish(c.lease, done, now) for c in claims))
        # A finish whose reply was lost looks for what it released (its fault path).
        fences = [
            {"idx": n, "pk": c.lease.pk, "token": c.lease.token} for n, c in enumerate(claims)
        ]
        explained.explain(store._sql.finished_by, (json_rows(fences),))
        explained.url = None
        markers = {
            "step writes": "AS w(idx int, pk bigint, token bigint,",
            "renewal": "held AS ( SELECT i.pk AS h_pk",
            "finish": "kids AS",
            "finish's recovery": "lease_owner IS NULL WHERE",
        }
        for what, marker in markers.items():
            reads = explained.reads(marker)
            assert reads and not _too_many(reads), (what, _too_many(reads))
    finally:
        await store.close()
