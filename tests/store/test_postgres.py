"""What is specific to the PostgreSQL store: schemas, migrations, LISTEN/NOTIFY wake-ups, the
server clock, and surviving killed connections. (The contract suite runs against it too.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from psycopg import sql

from stepline import Engine, InstanceNotFoundError, ManualClock, Workflow
from stepline.errors import StoreError
from stepline.flow.claiming import NextLook
from stepline.limits import WorkflowLimits
from stepline.store.base import (
    Claim,
    DeletedInstance,
    Finish,
    History,
    NewInstance,
    StepWrite,
    WorkflowMeta,
)
from stepline.store.migrations import Migration, load_migrations
from stepline.store.postgres import PostgresStore, parse_url, split_url
from stepline.store.postgres.pools import StoreConnection
from stepline.store.postgres.sql import CLAIM_IN_ORDER
from stepline.store.types import UpdateAnswer
from stepline.worker import Worker, WorkerSettings

from .._pg import ThrowawayServer, connect, drop_schema, pg_admin_url
from ..conftest import STORES

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.both_loops,  # the store's connection handling on the CLI's loop too
    pytest.mark.skipif("postgres" not in STORES, reason="STEPLINE_TEST_STORES leaves out postgres"),
]


def url_for(schema: str, **extra: str) -> str:
    base = pg_admin_url()
    query = "&".join(f"{k}={v}" for k, v in {"schema": schema, **extra}.items())
    return f"{base}{'&' if '?' in base else '?'}{query}"


@pytest.fixture
def schemas() -> Iterator[list[str]]:
    """Fresh schema names; every schema named here is dropped afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        drop_schema(pg_admin_url(), name)


def fresh(schemas: list[str]) -> str:
    name = f"t_{uuid.uuid4().hex[:12]}"
    schemas.append(name)
    return name


def query(sql_text: str | sql.Composed, params: Any = ()) -> list[Any]:
    with connect(pg_admin_url()) as conn:
        return conn.execute(sql_text, params).fetchall()


async def test_open_listens_on_the_connection_that_checked_the_server(
    schemas: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening a store makes three connections, not four: the one that checks the server goes
    on to LISTEN, beside one per pool; closing it closes them all."""
    made: list[StoreConnection] = []
    connect_one = StoreConnection.connect

    async def counted(*args: Any, **kwargs: Any) -> StoreConnection:
        conn = await connect_one(*args, **kwargs)
        made.append(conn)
        return conn

    monkeypatch.setattr(StoreConnection, "connect", counted)
    store = PostgresStore(url_for(fresh(schemas)))
    await store.open()
    try:
        assert len(made) == 3
        last = query(
            "SELECT query FROM pg_stat_activity WHERE pid = %s", (made[0].info.backend_pid,)
        )
        assert last and last[0][0].startswith("LISTEN"), last
    finally:
        await store.close()
    assert all(conn.closed for conn in made)


class Quick(Workflow):
    name = "quick"

    async def run(self, event: Any, step: Any) -> Any:
        first = await step.do("one", lambda: 1)
        second = await step.do("two", lambda: first + 1)
        return second


class Napper(Workflow):
    name = "napper"

    async def run(self, event: Any, step: Any) -> Any:
        await step.sleep("nap", 1)
        return await step.do("after", lambda: "awake")


class Chain(Workflow):
    """Several steps that each take a moment, so connections can be killed mid-run."""

    name = "chain"

    async def run(self, event: Any, step: Any) -> Any:
        total = 0
        for n in range(5):

            async def part(n: int = n) -> int:
                await asyncio.sleep(0.01)
                return n

            total += await step.do(f"part{n}", part)
        return total


async def claim_new(store: PostgresStore, instance_id: str = "a") -> Claim:
    """Create one instance of workflow ``w`` and claim it as worker ``me`` (at 1000.0)."""
    await store.create_instances(
        "w", [NewInstance(instance_id, None)], trigger="api", skip_existing=False
    )
    (claim,) = (await store.claim("me", ["w"], 5, 30.0, 1000.0)).claims
    return claim


def idle_worker(engine: Engine) -> Worker:
    """A worker that, unless woken, looks at the database only every 30 s."""
    settings = WorkerSettings(poll_interval=30.0, min_poll_interval=30.0)
    return Worker(engine.store, engine.workflows, settings)


# -- URL and schema ------------------------------------------------------------------------------


def test_url_schema_parameter_is_removed_and_the_rest_kept() -> None:
    conninfo, schema = split_url("postgresql://u:p@db:5433/app?sslmode=disable&schema=jobs")
    assert schema == "jobs"
    assert conninfo == "postgresql://u:p@db:5433/app?sslmode=disable"
    assert split_url("postgres://db/app") == ("postgres://db/app", "stepline")
    with pytest.raises(ValueError, match="invalid schema name"):
        split_url('postgresql://db/app?schema=x";drop')
    with pytest.raises(ValueError, match="not a PostgreSQL URL"):
        split_url("mysql://db/app")


def test_url_max_connections_is_stepline_s_own_and_checked() -> None:
    parsed = parse_url("postgresql://db/app?max_connections=6&sslmode=disable&schema=jobs")
    assert (parsed.conninfo, parsed.schema) == ("postgresql://db/app?sslmode=disable", "jobs")
    assert (parsed.max_connections, parsed.pool_size) == (6, 3)
    assert parse_url("postgresql://db/app").max_connections == 11  # a pool of 8, 2 reserved, 1
    for bad in ("4", "0", "-6", "six", "", "6.5"):
        with pytest.raises(ValueError, match=f"invalid max_connections {bad!r}.*at least 5"):
            parse_url(f"postgresql://db/app?max_connections={bad}")


async def test_a_store_opens_no_more_connections_than_its_url_allows(
    schemas: list[str],
) -> None:
    """``max_connections=5``: a pool of 2, 2 reserved, 1 listening, however much work comes
    at once; the work still gets done."""
    tag = f"maxconn_{uuid.uuid4().hex[:8]}"
    url = url_for(fresh(schemas), max_connections="5", application_name=tag)
    counts: list[int] = []

    async def sample() -> None:
        while True:
            sql_text = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            counts.append(query(sql_text, (tag,))[0][0])
            await asyncio.sleep(0.005)

    async with Engine(url, [Quick]) as engine:
        sampler = asyncio.create_task(sample())
        binding = engine.workflow(Quick.name)
        instances = await asyncio.gather(*(binding.create(params={}) for _ in range(200)))
        ends = await asyncio.gather(*(instance.wait(timeout=30) for instance in instances))
        sampler.cancel()
    assert {end.status for end in ends} == {"complete"}
    assert 3 <= max(counts) <= 5, max(counts)


async def test_two_schemas_in_one_database_do_not_see_each_other(schemas: list[str]) -> None:
    a, b = fresh(schemas), fresh(schemas)
    async with (
        Engine(url_for(a), [Quick], worker=False) as one,
        Engine(url_for(b), [Quick], worker=False) as two,
    ):
        await one.workflow("quick").create(id="only-in-a")
        with pytest.raises(InstanceNotFoundError):
            await two.workflow("quick").get("only-in-a")
        assert (await two.list_instances()).instances == []
        assert [i.id for i in (await one.list_instances()).instances] == ["only-in-a"]
    tables = query(
        "SELECT table_schema, count(*) FROM information_schema.tables"
        " WHERE table_schema = ANY(%s) GROUP BY table_schema",
        ([a, b],),
    )
    # workflows, instances, steps, events, workers, schedules, limits, limit_slots,
    # limit_starts, schema_migrations, updates, streams, stream_items, query_requests,
    # instance_tags, instance_tag_numbers, bulk_jobs
    assert dict(tables) == {a: 17, b: 17}


# -- migrations ----------------------------------------------------------------------------------


def catalog(schema: str) -> dict[str, list[Any]]:
    """Tables, columns, indexes and constraints of ``schema``, with the schema name removed."""
    columns = query(
        "SELECT table_name, column_name, data_type, is_nullable, column_default, is_identity"
        " FROM information_schema.columns WHERE table_schema = %s ORDER BY 1, 2",
        (schema,),
    )
    indexes = query(
        "SELECT tablename, indexname, replace(indexdef, %s, 'S') FROM pg_indexes"
        " WHERE schemaname = %s ORDER BY 1, 2",
        (schema, schema),
    )
    constraints = query(
        "SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid)"
        " FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace"
        " WHERE n.nspname = %s ORDER BY 2",
        (schema,),
    )
    return {
        "columns": columns,
        "indexes": indexes,
        "constraints": [(t.replace(schema, "S"), n, d) for t, n, d in constraints],
    }


def migrate_by_hand(
    conn: psycopg.Connection[Any], schema: str, migrations: list[Migration]
) -> None:
    """A new ``schema`` at ``migrations``, as an older release left it; ``conn``'s search path
    is left on it."""
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    conn.execute(
        "CREATE TABLE schema_migrations (version integer PRIMARY KEY,"
        " name text NOT NULL, applied_at double precision NOT NULL)"
    )
    for m in migrations:
        conn.execute(m.sql.encode())
        conn.execute("INSERT INTO schema_migrations VALUES (%s, %s, 0)", (m.version, m.name))


async def test_upgraded_schema_equals_a_fresh_one(schemas: list[str]) -> None:
    new = fresh(schemas)
    async with Engine(url_for(new), worker=False):
        pass
    migrations = load_migrations("postgres")
    assert migrations, "no PostgreSQL migrations found"
    for applied in range(len(migrations)):
        old = fresh(schemas)
        with connect(pg_admin_url()) as conn:
            migrate_by_hand(conn, old, migrations[:applied])
        async with Engine(url_for(old), worker=False):
            pass
        assert catalog(old) == catalog(new)
    assert catalog(new)["columns"], "the fresh schema has no tables"


async def test_concurrent_opens_migrate_once_and_reopening_changes_nothing(
    schemas: list[str],
) -> None:
    url = url_for(fresh(schemas))
    stores = [PostgresStore(url, ManualClock(1000.0)) for _ in range(3)]
    await asyncio.gather(*(store.open() for store in stores))
    await asyncio.gather(*(store.close() for store in stores))
    for _ in range(2):
        async with Engine(url, worker=False):
            pass
    schema = split_url(url)[1]
    rows = query(
        sql.SQL("SELECT version FROM {}.schema_migrations ORDER BY version").format(
            sql.Identifier(schema)
        )
    )
    assert [r[0] for r in rows] == [m.version for m in load_migrations("postgres")]


# -- wake-ups ------------------------------------------------------------------------------------


async def test_a_create_in_another_engine_wakes_an_idle_worker(schemas: list[str]) -> None:
    """Only the notification can explain a fast wake-up: the worker polls every 30 s."""
    url = url_for(fresh(schemas))
    async with Engine(url, [Quick], worker=False) as runner:
        worker = idle_worker(runner)
        task = asyncio.create_task(worker.run())
        try:
            async with Engine(url, [Quick], worker=False) as client:
                await asyncio.sleep(0.2)  # the worker has looked once and now waits 30 s
                instance = await client.workflow("quick").create()
                status = await instance.wait(timeout=5)
                assert status.status == "complete"
                assert status.output == 2
        finally:
            worker.stop()
            await task


async def test_an_event_in_another_engine_wakes_an_idle_worker(schemas: list[str]) -> None:
    url = url_for(fresh(schemas))

    class Waiter(Workflow):
        name = "waiter"

        async def run(self, event: Any, step: Any) -> Any:
            got = await step.wait_for_event("go", type="approval", timeout="1 hour")
            return got.payload

    async with Engine(url, [Waiter], worker=False) as runner:
        worker = idle_worker(runner)
        task = asyncio.create_task(worker.run())
        try:
            async with Engine(url, [Waiter], worker=False) as client:
                instance = await client.workflow("waiter").create()
                deadline = time.monotonic() + 5
                while (await instance.status()).status != "waiting":
                    assert time.monotonic() < deadline, "the create did not reach the worker"
                    await asyncio.sleep(0.02)
                await instance.send_event("approval", {"ok": True})
                status = await instance.wait(timeout=5)
                assert status.status == "complete"
                assert status.output == {"ok": True}
        finally:
            worker.stop()
            await task


async def test_an_expired_sleep_reaches_an_idle_worker(schemas: list[str]) -> None:
    url = url_for(fresh(schemas))
    async with Engine(url, [Napper], worker=False) as engine:
        worker = idle_worker(engine)
        task = asyncio.create_task(worker.run())
        try:
            started = time.monotonic()
            instance = await engine.workflow("napper").create()
            status = await instance.wait(timeout=6)
            assert status.status == "complete"
            assert status.output == "awake"
            assert time.monotonic() - started >= 1.0
        finally:
            worker.stop()
            await task


async def test_a_finish_in_another_process_ends_a_wait_at_once(schemas: list[str]) -> None:
    """An instance that ends is announced to every store, so a waiter in another process learns it
    without polling; an ended top-level instance makes nothing runnable, so workers stay asleep."""
    url = url_for(fresh(schemas))
    worker_store = PostgresStore(url, ManualClock(1000.0))
    client_store = PostgresStore(url, ManualClock(1000.0))
    await worker_store.open()
    await client_store.open()
    woken: list[bool] = []
    client_store.signals.add_ready_listener(lambda: woken.append(True))
    try:
        await worker_store.create_instances(
            "w", [NewInstance("a", None)], trigger="api", skip_existing=False
        )
        (claim,) = (await worker_store.claim("me", ["w"], 1, 30.0, 1000.0)).claims
        await asyncio.sleep(0.2)  # the create's notification has reached the client's store
        woken.clear()
        with client_store.signals.watch_changes("w", "a") as changes:
            waiting = asyncio.create_task(changes.wait(30.0))
            await asyncio.sleep(0.05)
            started = time.monotonic()
            await worker_store.finish(claim.lease, Finish("complete", output="1"), 1000.0)
            await waiting
        assert time.monotonic() - started < 10.0, "only the timeout ended the wait"
        assert woken == [], "an ended instance woke the workers of other processes"
    finally:
        await worker_store.close()
        await client_store.close()


def record_notifications(store: PostgresStore) -> list[str]:
    """The payloads of the notifications ``store`` receives (call before ``open``: it listens
    from then on), each still dispatched."""
    payloads: list[str] = []
    dispatch = store._wakeups.dispatch

    def recording(payload: str) -> None:
        payloads.append(payload)
        dispatch(payload)

    store._wakeups.dispatch = recording  # type: ignore[method-assign]
    return payloads


async def test_instances_ended_together_are_announced_a_few_dozen_per_notification(
    schemas: list[str],
) -> None:
    """Ends committed by one finish statement travel as lists in a handful of notifications (each
    listener parses every notification), and each still resolves its own waiters elsewhere."""
    url = url_for(fresh(schemas))
    worker_store = PostgresStore(url, ManualClock(1000.0))
    client_store = PostgresStore(url, ManualClock(1000.0))
    payloads = record_notifications(client_store)
    await worker_store.open()
    await client_store.open()
    try:
        ids = [f"instance-{n:04d}-{'x' * 80}" for n in range(300)]  # long ids: several chunks
        await worker_store.create_instances(
            "w", [NewInstance(i, None) for i in ids], trigger="api", skip_existing=False
        )
        claims = (await worker_store.claim("me", ["w"], 300, 30.0, 1000.0)).claims
        await asyncio.sleep(0.2)  # the create's notification has come and gone
        payloads.clear()
        watched = [ids[0], ids[150], ids[-1]]
        with contextlib.ExitStack() as stack:
            watches = [
                stack.enter_context(client_store.signals.watch_changes("w", i)) for i in watched
            ]
            waits = [asyncio.create_task(w.wait(30.0)) for w in watches]
            started = time.monotonic()
            await asyncio.gather(
                *(
                    worker_store.finish(c.lease, Finish("complete", output="1"), 1000.0)
                    for c in claims
                )
            )
            await asyncio.gather(*waits)
            assert time.monotonic() - started < 10.0, "only the timeout ended a wait"
        await asyncio.sleep(0.2)
        ended = [item[1] for p in payloads for item in json.loads(p)["ended"]]
        assert sorted(ended) == ids  # every end announced once
        assert all(len(p.encode()) < 8000 for p in payloads)
        assert 3 <= len(payloads) <= 12, len(payloads)
        assert all(json.loads(p)["e"] is True for p in payloads)  # top-level: nothing runnable
    finally:
        await worker_store.close()
        await client_store.close()


async def test_a_full_batch_of_short_ids_ends_within_the_payload_limit(schemas: list[str]) -> None:
    """499 ends in one statement with the shortest names: the most entries per byte, where the
    JSON around each entry weighs most against the 8,000-byte limit of a notification."""
    url = url_for(fresh(schemas))
    store = PostgresStore(url, ManualClock(1000.0))
    payloads = record_notifications(store)
    await store.open()
    try:
        ids = [f"{n:03d}" for n in range(500)]
        await store.create_instances(
            "job", [NewInstance(i, None) for i in ids], trigger="api", skip_existing=False
        )
        claims = (await store.claim("me", ["job"], 500, 30.0, 1000.0)).claims
        statuses = await asyncio.gather(
            *(store.finish(c.lease, Finish("complete", output="1"), 1000.0) for c in claims)
        )
        assert statuses == ["complete"] * 500  # the first alone, then 499 in one statement
        await asyncio.sleep(0.3)
        ended = sorted(item[1] for p in payloads for item in json.loads(p).get("ended", []))
        assert ended == ids
        assert max(len(p.encode()) for p in payloads) < 8000
        # the create's, the first end's, and two for the other 499 (had a notification been too
        # long, the statement would have failed and its 499 finishes run one by one)
        assert len(payloads) <= 5, len(payloads)
    finally:
        await store.close()


# -- claims --------------------------------------------------------------------------------------


async def test_a_claim_reads_the_history_its_activation_replays(schemas: list[str]) -> None:
    """The claim reads steps and pending events with the leases; the history equals a fresh read,
    times included (whole-number times come back as floats)."""
    store = PostgresStore(url_for(fresh(schemas)), ManualClock(1000.0))
    await store.open()
    try:
        await store.create_instances(
            "w",
            [NewInstance("a", None), NewInstance("b", None)],
            trigger="api",
            skip_existing=False,
        )
        claims = (await store.claim("me", ["w"], 5, 30.0, 1000.0)).claims
        assert len(claims) == 2
        lease = claims[0].lease
        assert claims[0].history == History([], [])  # nothing recorded yet
        writes = [
            StepWrite(
                "s", 1, 0, "do", "complete", '{"x":[1,2]}', started_at=1000.0, ended_at=1000.0
            ),
            StepWrite("nap", 1, 1, "sleep", "waiting", wake_at=1060.0, started_at=1000.5),
        ]
        for write in writes:
            await store.record_step(lease, write, 1000.0)
        await store.finish(lease, Finish("waiting", wake_at=1060.0), 1000.0)
        await store.send_event("w", claims[0].instance.id, "go", '{"ok":true}')
        await store.send_event("w", claims[0].instance.id, "other", None)
        (again,) = (await store.claim("me", ["w"], 5, 30.0, 1000.0)).claims
        assert again.instance.id == claims[0].instance.id
        read = again.history
        assert [read] == await store._claims.load_histories([again.lease.pk])
        assert [s.name for s in read.steps] == ["s", "nap"]
        assert read.steps[0].output == {"x": [1, 2]}
        assert [e.type for e in read.events] == ["go", "other"]
        times = [s.started_at for s in read.steps] + [read.steps[1].wake_at]
        times += [e.timestamp for e in read.events]
        assert all(type(t) is float for t in times), times
    finally:
        await store.close()


class _Claims:
    """A store on a manual clock, with instances of workflow ``w`` to create and claim."""

    def __init__(self, schema: str, limit: int) -> None:
        self.clock = ManualClock(1000.0)
        self.store = PostgresStore(url_for(schema), self.clock)
        self.limit = limit

    async def create(self, *ids: str) -> None:
        items = [NewInstance(i, None) for i in ids]
        await self.store.create_instances("w", items, trigger="api", skip_existing=False)

    async def claim(self) -> list[str]:
        claims = (await self.store.claim("me", ["w"], self.limit, 30.0, self.clock())).claims
        return sorted(c.instance.id for c in claims)

    def set_ready_at(self, instance_id: str, ready_at: float) -> None:
        query(
            sql.SQL("UPDATE {}.instances SET ready_at = %s WHERE id = %s RETURNING id").format(
                sql.Identifier(self.store.schema)
            ),
            (ready_at, instance_id),
        )


async def test_claims_read_timers_from_a_floor_and_still_find_stragglers(
    schemas: list[str],
) -> None:
    """After a short claim, claims read the ready_at index from a little below the earliest
    timer (not from its low end, where dead entries collect): new work is found at once; a row
    whose ready_at is below that floor (a write that took longer to commit than the margin) is
    found by the next claim that reads from the low end, at most 10 s later, or at once if the
    clock went back."""
    w = _Claims(fresh(schemas), limit=5)
    await w.store.open()
    try:
        await w.create("a")
        assert await w.claim() == ["a"]  # short: sets the floor 2 s below now
        await w.create("straggler")
        w.set_ready_at("straggler", 900.0)  # as if its write took 100 s to commit
        w.clock.advance(1.0)
        await w.create("new")
        assert await w.claim() == ["new"]  # from the floor: new work at once, not the straggler
        w.clock.advance(8.5)
        assert await w.claim() == []
        w.clock.advance(1.0)  # 10 s after the claim that read from the low end
        assert await w.claim() == ["straggler"]

        await w.create("late")
        w.set_ready_at("late", 950.0)
        w.clock.set(1005.0)  # the clock went back: the floor no longer holds
        assert await w.claim() == ["late"]
    finally:
        await w.store.close()


async def test_a_full_claim_moves_the_floor_up_to_its_first_pick(schemas: list[str]) -> None:
    """While a worker works off a backlog (every claim full), each claim reads the ready_at index
    from a margin below its predecessor's first pick, not from where the floor was when the
    backlog began; a row left below that (held locked by another transaction during the claim,
    or a slow write) is found by the next read from the low end, 10 s after the last one."""
    w = _Claims(fresh(schemas), limit=3)
    await w.store.open()
    try:
        for n in range(1, 5):  # ready at 1000.1, 1000.2, ...: claimed in that order
            w.clock.set(1000.0 + n / 10)
            await w.create(f"a{n}")
        assert await w.claim() == ["a1", "a2", "a3"]  # full, from the low end: floor 998.1
        w.clock.set(1004.0)
        await w.create("b1", "b2")
        assert await w.claim() == ["a4", "b1", "b2"]  # full, first pick at 1000.4: floor 998.4
        w.clock.set(1006.0)
        await w.create("c1", "c2", "c3")
        assert await w.claim() == ["c1", "c2", "c3"]  # full, first pick at 1006: floor 1004
        await w.create("behind")
        w.set_ready_at("behind", 1003.0)
        w.clock.set(1009.0)
        assert await w.claim() == []  # below the floor
        w.clock.set(1010.4)  # 10 s after the read from the low end (at 1000.4)
        assert await w.claim() == ["behind"]
    finally:
        await w.store.close()


def _count_trips(store: PostgresStore) -> list[str]:
    """The store's database operations from now on, by what each was for."""
    db = store._db
    trips: list[str] = []
    retrying, read = db.retrying, db.read

    async def counted_retrying(what: str, *args: Any, **kwargs: Any) -> Any:
        trips.append(what)
        return await retrying(what, *args, **kwargs)

    async def counted_read(what: str, *args: Any, **kwargs: Any) -> Any:
        trips.append(what)
        return await read(what, *args, **kwargs)

    db.retrying, db.read = counted_retrying, counted_read  # type: ignore[method-assign]
    return trips


async def test_a_claim_that_fills_the_limit_tells_the_next_look(
    schemas: list[str],
) -> None:
    """Under a limit, a claim that took all it asked for and left the workflow held back whole
    knows the next wake-up and tells it (``Claimed.next_look``). One that took all it asked for
    with room left cannot know what else is due: it tells nothing, and ``next_wakeup`` reads."""
    w = _Claims(fresh(schemas), limit=1)
    await w.store.open()
    meta = WorkflowMeta("w", "tests:W", None, WorkflowLimits(concurrency=2))
    await w.store.register_workflows([meta])
    try:
        await w.create("a", "b", "c")
        first = await w.store.claim("me", ["w"], 1, 30.0, w.clock())
        assert [c.instance.id for c in first.claims] == ["a"]  # a slot left
        assert first.next_look is None
        assert await w.store.next_wakeup(["w"]) == 1000.0  # b is due and may run
        second = await w.store.claim("me", ["w"], 1, 30.0, w.clock())
        assert [c.instance.id for c in second.claims] == ["b"]  # the limit is full now
        assert second.next_look == NextLook(1030.0)  # the leases' expiry
        assert await w.store.next_wakeup(["w"]) == 1030.0
    finally:
        await w.store.close()


async def test_a_full_claim_looks_one_row_further_for_anything_else_runnable(
    schemas: list[str],
) -> None:
    """A claim under limits that took all it asked for, of workflows some of which have room
    left, looks one row further: if the limits let nothing more run (here the rest of the
    backlog waits behind a busy key, and the other workflow has nothing due), it tells the
    next look; if they do, it tells nothing, and ``next_wakeup`` says now."""
    w = _Claims(fresh(schemas), limit=1)
    await w.store.open()
    keyed = WorkflowMeta("w", "tests:W", None, WorkflowLimits(key_concurrency=1))
    free = WorkflowMeta("u", "tests:U", None, WorkflowLimits())
    await w.store.register_workflows([keyed, free])
    items = [NewInstance("a", None, key="k"), NewInstance("b", None, key="k")]
    items.append(NewInstance("c", None, key="j"))
    await w.store.create_instances("w", items, trigger="api", skip_existing=False)
    try:
        both = ["w", "u"]
        first = await w.store.claim("me", both, 1, 30.0, w.clock())
        assert [c.instance.id for c in first.claims] == ["a"]
        assert first.next_look is None
        assert await w.store.next_wakeup(both) == 1000.0  # c, of the other key, may run
        second = await w.store.claim("me", both, 1, 30.0, w.clock())
        assert [c.instance.id for c in second.claims] == ["c"]
        assert second.next_look == NextLook(1030.0)  # b waits for key k: the expiry
        assert await w.store.next_wakeup(both) == 1030.0
        assert (await w.store.claim("me", both, 1, 30.0, w.clock())).claims == []
    finally:
        await w.store.close()


async def test_claims_read_the_ready_at_index_in_order_whatever_the_statistics(
    schemas: list[str],
) -> None:
    """A table that grew faster than its statistics (never analyzed here) makes the planner
    expect a few runnable rows and prefer a bitmap scan of every due row, sorted, which costs a
    claim the whole backlog. The claim's transaction plans it in ready_at order, stopping at its
    limit, and leaves no setting behind on its connection (a pooler in transaction mode would
    hand it to other clients)."""
    store = PostgresStore(url_for(fresh(schemas)), ManualClock(1000.0))
    await store.open()
    try:
        items = [NewInstance(f"i{n}", None) for n in range(5000)]
        await store.create_instances("w", items, trigger="api", skip_existing=False)
        params = {
            "now": 2000.0,
            "floor": None,
            "workflows": ["w"],
            "limit": 100,
            "owner": "me",
            "nonce": 1,
            "token": 1,
            "expires": 2030.0,
            "routed": True,  # as a worker claims: only the versions it serves
            "routes": ["w\x1f1", "w\x1f2"],
            "patching": True,  # and only the instances whose patches its code has
            "patches": ["w\x1f1\x1fsome-patch"],
        }  # one priority in use: the claim reads its range of the index in order
        pool = store._db._pools._priority_pool
        assert pool is not None
        async with pool.connection() as conn, conn.transaction():
            await conn.execute(CLAIM_IN_ORDER)
            cur = await conn.execute("EXPLAIN " + store._claims._sql.claim, params)
            plan = "\n".join(row[0] for row in await cur.fetchall())
        picked = plan[plan.index("CTE picked") : plan.index("CTE paused")]
        assert "Index Scan using instances_ready" in picked, plan
        sorts = [line.strip() for line in picked.splitlines() if "Sort Key" in line]
        assert "Bitmap" not in picked and sorts == ["Sort Key: levels.p"], plan

        claimed = await store.claim(
            "me", ["w"], 10, 30.0, 2000.0, versions={"w": ["1", "2"]}, patches={}
        )
        assert len(claimed.claims) == 10
        async with pool.connection() as first, pool.connection() as second:
            for conn in (first, second):
                cur = await conn.execute("SHOW enable_bitmapscan")
                assert await cur.fetchone() == ("on",)
    finally:
        await store.close()


async def test_histories_load_through_the_primary_key_whatever_the_statistics(
    schemas: list[str],
) -> None:
    """Loading histories looks each instance's steps up by key: with ``instance_pk = ANY(...)`` a
    planner without statistics scanned the whole steps table."""
    store = PostgresStore(url_for(fresh(schemas)), ManualClock(1000.0))
    await store.open()
    try:
        query(
            sql.SQL(
                "INSERT INTO {}.steps (instance_pk, name, count, seq, kind, status)"
                " SELECT i / 5, 's' || i, 1, mod(i, 5), 'do', 'complete'"
                " FROM generate_series(0, 99999) AS i RETURNING 1"
            ).format(sql.Identifier(store.schema))
        )
        async with store._db._pools.require().connection() as conn:
            cur = await conn.execute("EXPLAIN " + store._sql.history_steps, (list(range(50)),))
            plan = "\n".join(row[0] for row in await cur.fetchall())
        assert "Seq Scan on steps" not in plan, plan
        history = await store._claims.load_histories([3, 7])
        assert [[s.name for s in h.steps] for h in history] == [
            ["s15", "s16", "s17", "s18", "s19"],
            ["s35", "s36", "s37", "s38", "s39"],
        ]
    finally:
        await store.close()


async def test_a_claim_commits_asynchronously_and_only_itself(schemas: list[str]) -> None:
    """The claim's ``synchronous_commit = off`` is local to its own transaction: the connection
    goes back to the pool with the server's setting."""
    store = PostgresStore(url_for(fresh(schemas)), ManualClock(1000.0))
    await store.open()
    try:
        await store.create_instances(
            "w", [NewInstance("a", None)], trigger="api", skip_existing=False
        )
        assert len((await store.claim("me", ["w"], 5, 30.0, 1000.0)).claims) == 1
        for _ in range(3):  # the small pool has two connections: look at every one
            rows = await store._db.read("test", "SHOW synchronous_commit", priority=True)
            assert rows == [("on",)]
    finally:
        await store.close()


# -- connection faults ---------------------------------------------------------------------------


def terminate(application_name: str) -> int:
    rows = query(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE application_name = %s AND pid <> pg_backend_pid()",
        (application_name,),
    )
    return int(rows[0][0])


async def test_killing_every_connection_mid_run_loses_nothing(schemas: list[str]) -> None:
    app = f"stepline-test-{uuid.uuid4().hex[:8]}"
    url = url_for(fresh(schemas), application_name=app)
    created: list[Any] = []
    killed: list[int] = []
    async with Engine(url, [Chain], worker=True, poll_interval=0.1) as engine:
        binding = engine.workflow("chain")

        async def create_some() -> None:
            for n in range(30):
                created.append(await binding.create(id=f"c{n}"))
                await asyncio.sleep(0.01)

        async def killer() -> None:
            for _ in range(4):
                await asyncio.sleep(0.15)
                killed.append(await asyncio.to_thread(terminate, app))

        await asyncio.gather(create_some(), killer())
        assert sum(killed) >= 4, f"hardly any connection was killed: {killed}"
        for instance in created:
            status = await instance.wait(timeout=60)
            assert status.status == "complete", (instance.id, status)
            assert status.output == 0 + 1 + 2 + 3 + 4
            steps = await instance.steps()
            assert [s.name for s in steps] == [f"part{n}" for n in range(5)]
    assert len(created) == 30


async def test_a_server_restart_mid_run_loses_nothing() -> None:
    """A private server is restarted while instances run and others are being created: every
    create that returned is kept and every instance completes."""
    server = await asyncio.to_thread(ThrowawayServer)
    created: list[Any] = []

    def started_at() -> Any:
        with connect(server.url) as conn:
            return conn.execute("SELECT pg_postmaster_start_time()").fetchone()

    try:
        first_start = await asyncio.to_thread(started_at)
        async with Engine(f"{server.url}&schema=s", [Chain], poll_interval=0.1) as engine:
            binding = engine.workflow("chain")
            created.extend([await binding.create(id=f"before{n}") for n in range(10)])
            restart = asyncio.create_task(asyncio.to_thread(server.restart))
            while not restart.done():
                created.append(await binding.create(id=f"during{len(created)}"))
                await asyncio.sleep(0.02)
            await restart
            assert await asyncio.to_thread(started_at) != first_start, "no restart happened"
            created.append(await binding.create(id="after"))
            for instance in created:
                status = await instance.wait(timeout=60)
                assert status.status == "complete", (instance.id, status)
            page = await engine.list_instances(limit=100)
            assert {i.id for i in page.instances} == {i.id for i in created}
    finally:
        await asyncio.to_thread(server.close)


async def test_a_server_that_cannot_be_reached_is_reported_with_its_reason() -> None:
    """Opening the store makes its first connection directly: a closed port fails at once with
    the driver's reason, not after the pool's 15 s of background retries with a bare timeout."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = PostgresStore(f"postgresql://postgres@127.0.0.1:{port}/test?schema=x")
    with pytest.raises(StoreError, match=rf"127\.0\.0\.1:{port}/test .*[Cc]onnection refused"):
        await store.open()


async def test_operations_one_at_a_time_share_the_spare_connection(schemas: list[str]) -> None:
    """One operation at a time runs on the spare connection, not a pool checkout each; one that
    comes while the spare is busy takes a pool connection."""
    store = PostgresStore(url_for(fresh(schemas)), ManualClock(1000.0))
    await store.open()
    db = store._db
    pool = db._pools._pool
    assert pool is not None
    try:
        checkouts = pool.get_stats()["requests_num"]
        pids = [(await db.read("test", "SELECT pg_backend_pid()"))[0][0] for _ in range(5)]
        assert len(set(pids)) == 1, pids
        assert pool.get_stats()["requests_num"] - checkouts <= 1
        both = await asyncio.gather(
            db.read("test", "SELECT pg_backend_pid(), pg_sleep(0.05)"),
            db.read("test", "SELECT pg_backend_pid(), pg_sleep(0.05)"),
        )
        assert both[0][0][0] != both[1][0][0], both
        assert pids[0] in {both[0][0][0], both[1][0][0]}
    finally:
        await store.close()


async def test_an_interrupted_operation_does_not_leave_the_spare_busy(schemas: list[str]) -> None:
    """An operation cancelled mid-query, or one whose transaction failed, leaves no connection
    stuck mid-query or mid-transaction for the next operation; a spare whose server process was
    killed is replaced."""
    store = PostgresStore(url_for(fresh(schemas)), ManualClock(1000.0))
    await store.open()
    db = store._db
    try:
        slow = asyncio.create_task(db.read("test", "SELECT pg_sleep(30)"))
        await asyncio.sleep(0.2)
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        started = time.monotonic()
        assert await db.read("test", "SELECT 1") == [(1,)]
        assert time.monotonic() - started < 5

        async def failing(conn: psycopg.AsyncConnection[Any]) -> None:
            await conn.execute("SELECT 1/0")

        with pytest.raises(StoreError, match="division by zero"):
            await db.transaction("testing", failing)
        assert await db.read("test", "SHOW transaction_isolation") == [("read committed",)]
        pid = (await db.read("test", "SELECT pg_backend_pid()"))[0][0]
        await asyncio.to_thread(query, "SELECT pg_terminate_backend(%s)", (pid,))
        assert (await db.read("test", "SELECT pg_backend_pid()"))[0][0] != pid
    finally:
        await store.close()


async def test_step_writes_one_at_a_time_reuse_one_cursor_even_after_a_failed_one(
    schemas: list[str],
) -> None:
    """Sequential step writes run on the spare connection's kept cursor; a write that fails
    (a NUL character PostgreSQL text cannot hold) leaves it usable for the next."""
    store = PostgresStore(url_for(fresh(schemas)), ManualClock(1000.0))
    await store.open()
    try:
        claim = await claim_new(store)

        def write(name: str, count: int) -> StepWrite:
            return StepWrite(name, count, count, "do", "complete", "1", ended_at=1000.0)

        assert await store.record_step(claim.lease, write("one", 1), 1000.0) == "running"
        spare = store._db._pools._spare
        assert spare is not None
        cursor = spare.kept_cursor()
        with pytest.raises(StoreError):
            await store.record_step(claim.lease, write("nul\x00", 2), 1000.0)
        assert await store.record_step(claim.lease, write("two", 3), 1000.0) == "running"
        assert store._db._pools._spare is spare and spare.kept_cursor() is cursor
        names = [s.name for s in await store.get_steps("w", "a")]
        assert names == ["one", "two"]
    finally:
        await store.close()


async def test_a_spare_in_use_when_the_store_closes_is_closed_when_it_is_done(
    schemas: list[str],
) -> None:
    store = PostgresStore(url_for(fresh(schemas)), ManualClock(1000.0))
    await store.open()
    db = store._db
    used: list[psycopg.AsyncConnection[Any]] = []

    async def slow(conn: psycopg.AsyncConnection[Any]) -> None:
        used.append(conn)
        await conn.execute("SELECT pg_sleep(0.3)")

    running = asyncio.create_task(db.retrying("testing", slow))
    await asyncio.sleep(0.1)
    await store.close()
    await running
    assert len(used) == 1 and used[0].closed
    assert db._pools._spare is None


async def test_a_transaction_whose_connection_dies_before_commit_runs_once(
    schemas: list[str],
) -> None:
    store = PostgresStore(url_for(fresh(schemas)), ManualClock(1000.0))
    await store.open()
    attempts = 0
    try:

        async def body(conn: psycopg.AsyncConnection[Any]) -> int:
            nonlocal attempts
            attempts += 1
            await conn.execute(
                sql.SQL(
                    "INSERT INTO {}.workflows (name, class_name, created_at, updated_at)"
                    " VALUES ('w', 'W', 0, 0)"
                ).format(sql.Identifier(store.schema))
            )
            if attempts == 1:
                pid = conn.info.backend_pid
                await asyncio.to_thread(query, "SELECT pg_terminate_backend(%s)", (pid,))
            return attempts

        assert await store._db.transaction("testing", body) == 2
        assert [w.name for w in await store.list_workflows()] == ["w"]
    finally:
        await store.close()


async def test_a_commit_whose_reply_is_lost_is_not_repeated(
    schemas: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection dies after COMMIT reached the server: the store asks whether it committed
    (it did) and returns the result instead of running the transaction again."""
    store = PostgresStore(url_for(fresh(schemas)), ManualClock(1000.0))
    await store.open()
    real = type(store._db)._transaction_once
    lost = [True]

    async def once(self: Any, body: Any, state: Any, *args: Any) -> Any:
        result = await real(self, body, state, *args)
        if lost.pop() if lost else False:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return result

    monkeypatch.setattr(type(store._db), "_transaction_once", once)
    try:
        created = await store.create_instances(
            "w", [NewInstance("a", None)], trigger="api", skip_existing=False
        )
        assert [r.id for r in created] == ["a"]
        assert not lost, "the fault was not injected"
        page = await store.list_instances(None, None, 10, None)
        assert [r.id for r in page.instances] == ["a"]
    finally:
        await store.close()


async def test_one_bad_write_in_a_group_fails_alone(schemas: list[str]) -> None:
    """Writes made while another is in flight share one statement; if it fails because of one
    of them, the others are written on their own and only the bad one fails. (The first write
    goes out alone, at once: nothing was in flight.)"""
    store = PostgresStore(url_for(fresh(schemas)), ManualClock(1000.0))
    await store.open()
    try:
        items = [NewInstance(name, None) for name in ("first", "good", "bad")]
        await store.create_instances("w", items, trigger="api", skip_existing=False)
        claims = {
            c.instance.id: c for c in (await store.claim("me", ["w"], 3, 30.0, 1000.0)).claims
        }

        def write(name: str) -> StepWrite:
            return StepWrite(name, 1, 0, "do", "complete", "1", started_at=1000.0, ended_at=1000.0)

        first, good, bad = await asyncio.gather(
            store.record_step(claims["first"].lease, write("alone"), 1000.0),
            store.record_step(claims["good"].lease, write("fine"), 1000.0),
            store.record_step(claims["bad"].lease, write("nul\x00char"), 1000.0),
            return_exceptions=True,
        )
        assert (first, good) == ("running", "running")
        assert isinstance(bad, StoreError), bad
        assert [s.name for s in await store.get_steps("w", "first")] == ["alone"]
        assert [s.name for s in await store.get_steps("w", "good")] == ["fine"]
        assert await store.get_steps("w", "bad") == []
    finally:
        await store.close()


async def test_a_child_ending_alongside_its_parent_suspending_still_wakes_it(
    schemas: list[str],
) -> None:
    """The parent suspends (to wait for the child) in the same group commit as the child ends:
    the parent must still be made runnable at once."""
    store = PostgresStore(url_for(fresh(schemas)), ManualClock(1000.0))
    await store.open()
    try:
        await store.create_instances(
            "p", [NewInstance("P", None)], trigger="api", skip_existing=False
        )
        parent = '{"workflow":"p","id":"P","step":"start c-1"}'
        await store.create_instances(
            "c", [NewInstance("C", None, parent)], trigger="workflow", skip_existing=False
        )
        (claim_p,) = (await store.claim("me", ["p"], 1, 30.0, 1000.0)).claims
        (claim_c,) = (await store.claim("me", ["c"], 1, 30.0, 1000.0)).claims
        waiting = Finish("waiting", wake_at=5000.0, event_seq=claim_p.event_seq)
        statuses = await asyncio.gather(
            store.finish(claim_p.lease, waiting, 1000.0),
            store.finish(claim_c.lease, Finish("complete", output="1"), 1000.0),
        )
        assert list(statuses) == ["waiting", "complete"]
        record = await store.get_instance("p", "P")
        assert record.ready_at == 1000.0, "the parent sleeps until its timeout"
    finally:
        await store.close()


class LosesOneReply:
    """Wraps a connection: the first statement containing ``marker`` runs (and commits), then its
    reply is "lost" as if the connection had died: at once for ``execute`` on the connection,
    and when its rows are fetched for a cursor (after the pipeline, and the transaction it
    commits, if the statement went in one)."""

    def __init__(self, conn: Any, marker: str, lost: list[bool]) -> None:
        self._conn, self._marker, self._lost = conn, marker, lost

    async def execute(self, query: Any, params: Any = None) -> Any:
        cur = await self._conn.execute(query, params)
        await self._maybe_lose(query, cur)
        return cur

    def cursor(self) -> Any:
        return _LosingCursor(self, self._conn.cursor())

    def kept_cursor(self) -> Any:
        return _LosingCursor(self, self._conn.kept_cursor())

    def pipeline(self) -> Any:
        return self._conn.pipeline()

    def transaction(self) -> Any:
        return self._conn.transaction()

    async def _maybe_lose(self, query: Any, cur: Any) -> None:
        if self._marker in str(query) and not self._lost:
            self._lost.append(True)
            await cur.fetchall()
            raise psycopg.OperationalError("server closed the connection unexpectedly")


class _LosingCursor:
    """A cursor of a :class:`LosesOneReply` connection, losing the reply when it is fetched."""

    def __init__(self, conn: LosesOneReply, cur: Any) -> None:
        self._conn, self._cur = conn, cur
        self._query: Any = None
        self.closed = False

    async def execute(self, query: Any, params: Any = None) -> Any:
        await self._cur.execute(query, params)
        self._query = query
        return self

    async def fetchall(self) -> Any:
        await self._conn._maybe_lose(self._query, self._cur)
        return await self._cur.fetchall()


def lose_one_reply(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch, marker: str
) -> list[bool]:
    lost: list[bool] = []
    real = store._db.retrying

    async def retrying(what: str, attempt: Any, *, priority: bool = False) -> Any:
        async def wrapped(conn: Any) -> Any:
            return await attempt(LosesOneReply(conn, marker, lost))

        return await real(what, wrapped, priority=priority)

    monkeypatch.setattr(store._db, "retrying", retrying)
    return lost


async def test_a_claim_whose_reply_is_lost_is_recovered(
    schemas: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore(url_for(fresh(schemas)), ManualClock(1000.0))
    await store.open()
    try:
        await store.create_instances(
            "w", [NewInstance("a", None)], trigger="api", skip_existing=False
        )
        # A history to recover with the claim: a step, and an event that wakes the instance.
        (first,) = (await store.claim("me", ["w"], 5, 30.0, 1000.0)).claims
        write = StepWrite("s", 1, 0, "do", "complete", "1", started_at=1000.0, ended_at=1000.0)
        await store.record_step(first.lease, write, 1000.0)
        await store.finish(first.lease, Finish("waiting"), 1000.0)
        await store.send_event("w", "a", "go", None)
        lost = lose_one_reply(store, monkeypatch, "FOR UPDATE SKIP LOCKED")
        (claim,) = (await store.claim("me", ["w"], 5, 30.0, 1000.0)).claims
        assert lost == [True], "the fault was not injected"
        assert claim.instance.id == "a" and claim.lease.owner == "me"
        assert claim.lease.token != first.lease.token and claim.event_seq == 1
        assert [s.name for s in claim.history.steps] == ["s"]
        assert [e.type for e in claim.history.events] == ["go"]
        assert (await store.claim("other", ["w"], 5, 30.0, 1000.0)).claims == []
        write = StepWrite("t", 1, 1, "do", "complete", "2", started_at=1000.0, ended_at=1000.0)
        assert await store.record_step(claim.lease, write, 1000.0) == "running"
    finally:
        await store.close()


async def test_a_first_step_write_whose_reply_is_lost_is_written_again_as_a_replacement(
    schemas: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step's first record goes as a plain INSERT; retried after its reply was lost, it finds
    its own committed row (a duplicate key) and replaces it instead of failing."""
    store = PostgresStore(url_for(fresh(schemas)), ManualClock(1000.0))
    await store.open()
    try:
        claim = await claim_new(store)
        assert "ON CONFLICT" not in store._sql.record_step_new
        lost = lose_one_reply(store, monkeypatch, store._sql.record_step_new)
        write = StepWrite(
            "s", 1, 0, "do", "complete", "7", started_at=1000.0, ended_at=1000.0, new=True
        )
        assert await store.record_step(claim.lease, write, 1000.0) == "running"
        assert lost == [True], "the fault was not injected"
        monkeypatch.undo()
        (record,) = await store.get_steps("w", "a")
        assert (record.status, record.output) == ("complete", 7)
    finally:
        await store.close()


async def test_a_finish_whose_reply_is_lost_still_reports_its_status(
    schemas: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore(url_for(fresh(schemas)), ManualClock(1000.0))
    await store.open()
    try:
        claim = await claim_new(store)
        lost = lose_one_reply(store, monkeypatch, "json_build_object")
        status = await store.finish(claim.lease, Finish("complete", output="7"), 1000.0)
        assert lost == [True], "the fault was not injected"
        assert status == "complete"
        record = await store.get_instance("w", "a")
        assert (record.status, record.output, record.lease_owner) == ("complete", 7, None)
    finally:
        await store.close()


# -- clock ---------------------------------------------------------------------------------------


def skew_wall_clock(monkeypatch: pytest.MonkeyPatch, seconds: float) -> list[float]:
    """This machine's wall clock (``time.time``), ``seconds`` off from now on: a list holding
    the skew, which the test may change (an NTP step, an operator)."""
    real = time.time
    skew = [seconds]
    monkeypatch.setattr(time, "time", lambda: real() + skew[0])
    return skew


def server_time() -> float:
    return float(query("SELECT extract(epoch FROM clock_timestamp())::float8")[0][0])


async def test_the_store_clock_follows_the_server_not_a_skewed_local_clock(
    schemas: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = url_for(fresh(schemas))
    skew_wall_clock(monkeypatch, 3600)  # this machine's clock, one hour fast
    real_time = PostgresStore(url)
    manual = PostgresStore(url, ManualClock(1000.0))
    await real_time.open()
    await manual.open()
    try:
        assert abs(real_time.now() - server_time()) < 1.0
        assert abs(real_time.clock_offset + 3600) < 1.0
        assert manual.now() == 1000.0  # a given clock is used as it is
        assert manual.clock_offset == 0.0
    finally:
        await real_time.close()
        await manual.close()


async def test_a_jump_of_the_local_clock_moves_neither_timers_nor_leases(
    schemas: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    skew = skew_wall_clock(monkeypatch, 0.0)
    store = PostgresStore(url_for(fresh(schemas)))
    await store.open()
    try:
        for jump in (3600.0, -3660.0):
            skew[0] += jump
            assert abs(store.now() - server_time()) < 1.0, f"the store followed a {jump} s jump"
    finally:
        await store.close()


async def test_workers_with_skewed_clocks_agree_on_leases(
    schemas: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = url_for(fresh(schemas))
    with monkeypatch.context() as patch:
        skew_wall_clock(patch, 3600)  # a machine one hour fast
        fast = PostgresStore(url)
        await fast.open()
    normal = PostgresStore(url)
    await normal.open()
    try:
        await normal.create_instances(
            "w", [NewInstance("a", None)], trigger="api", skip_existing=False
        )
        (claim,) = (await normal.claim("normal", ["w"], 1, 30.0, normal.now())).claims
        # Set up on a clock one hour fast, the other worker still sees a live lease.
        assert (await fast.claim("fast", ["w"], 1, 30.0, fast.now())).claims == []
        assert (await fast.next_wakeup(["w"]) or 0) - fast.now() > 25
        await normal.release(claim.lease, normal.now())
    finally:
        await fast.close()
        await normal.close()


def test_url_parameters_with_spaces_survive() -> None:
    conninfo, schema = split_url(
        "postgresql://postgres@127.0.0.1:5432/test?options=-c%20synchronous_commit%3Doff&schema=s1"
    )
    assert schema == "s1"
    assert "options=-c%20synchronous_commit%3Doff" in conninfo


@pytest.mark.parametrize("doomed", ["delete", "purge"])
async def test_rows_added_while_an_instance_is_deleted_go_with_it(
    schemas: list[str], doomed: str
) -> None:
    """A delete that waits for a writer's lock on the instance deletes what that writer added:
    the instance's steps and events are read after the lock, not in the delete's older snapshot
    (which would leave them behind, orphaned)."""
    clock = ManualClock(1000.0)
    store = PostgresStore(url_for(fresh(schemas)), clock)
    await store.open()
    table = sql.SQL("{}.{}").format
    schema = sql.Identifier(store.schema)
    try:
        claim = await claim_new(store)
        if doomed == "purge":
            await store.finish(claim.lease, Finish("complete", output="1"), 1000.0)
        with connect(pg_admin_url()) as writer, writer.transaction():
            writer.execute(
                sql.SQL("SELECT 1 FROM {} WHERE pk = %s FOR UPDATE").format(
                    table(schema, sql.Identifier("instances"))
                ),
                (claim.lease.pk,),
            )
            writer.execute(
                sql.SQL(
                    "INSERT INTO {} (instance_pk, type, payload, created_at) VALUES (%s, 't', "
                    "NULL, 1000)"
                ).format(table(schema, sql.Identifier("events"))),
                (claim.lease.pk,),
            )
            if doomed == "delete":
                deleting = asyncio.ensure_future(store.retention.delete_instances("w", ["a"]))
            else:
                deleting = asyncio.ensure_future(
                    store.retention.purge_instances("w", ["complete"], 2000.0)
                )
            await asyncio.sleep(0.5)
            assert not deleting.done(), "the delete should wait for the writer's lock"
        assert await deleting in (1, [DeletedInstance("w", "a", "complete")])
        left = query(
            sql.SQL("SELECT count(*) FROM {}").format(table(schema, sql.Identifier("events")))
        )
        assert left == [(0,)], "the event committed while the delete waited was left behind"
    finally:
        await store.close()


# -- updates -------------------------------------------------------------------------------------


def update_events(schema: str) -> int:
    """How many update events the schema holds (``get_events`` leaves them out)."""
    found = query(
        sql.SQL("SELECT count(*) FROM {}.events WHERE type = '@update'").format(
            sql.Identifier(schema)
        )
    )
    return int(found[0][0])


async def test_an_update_whose_send_reply_is_lost_is_recorded_once(
    schemas: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An update is recorded by one autocommitted statement; retried after its reply was lost,
    it finds the update it recorded and returns it, pending, with one event."""
    schema = fresh(schemas)
    store = PostgresStore(url_for(schema), ManualClock(1000.0))
    await store.open()
    try:
        await store.create_instances(
            "w", [NewInstance("a", None)], trigger="api", skip_existing=False
        )
        lost = lose_one_reply(store, monkeypatch, "INSERT INTO {}.updates".format(f'"{schema}"'))
        record = await store.messages.send_update("w", "a", "u1", "decide", "[1]")
        assert lost == [True], "the fault was not injected"
        monkeypatch.undo()
        assert (record.update_id, record.status, record.created_at) == ("u1", "pending", 1000.0)
        assert await store.messages.get_update("w", "a", "u1") == record
        assert update_events(schema) == 1
    finally:
        await store.close()


async def test_sends_of_one_update_id_queued_on_the_instance_lock_record_it_once(
    schemas: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sends of one update id wait for the instance's row lock: the second to run does not
    see the first's update in its snapshot, inserts nothing, and runs again to read it. Both
    return the same update, recorded once."""
    schema = fresh(schemas)
    store = PostgresStore(url_for(schema), ManualClock(1000.0))
    await store.open()
    runs: list[str] = []
    real = store._db.retrying

    async def counted(what: str, attempt: Any, *, priority: bool = False) -> Any:
        runs.append(what)
        return await real(what, attempt, priority=priority)

    monkeypatch.setattr(store._db, "retrying", counted)
    try:
        await store.create_instances(
            "w", [NewInstance("a", None)], trigger="api", skip_existing=False
        )
        locker = await psycopg.AsyncConnection.connect(pg_admin_url())
        async with locker, locker.transaction():
            await locker.execute(
                sql.SQL("SELECT pk FROM {}.instances WHERE id = 'a' FOR UPDATE").format(
                    sql.Identifier(schema)
                )
            )
            sends = [
                asyncio.create_task(
                    store.messages.send_update("w", "a", "same", "decide", f"[{n}]")
                )
                for n in range(2)
            ]
            for _ in range(1000):  # until both wait for the lock
                blocked = query(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE %s",
                    (f'%INSERT INTO "{schema}".updates%',),
                )
                if blocked[0][0] >= 2:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the sends did not wait for the lock")
        first, second = await asyncio.gather(*sends)
        assert first == second
        assert update_events(schema) == 1
        assert len([what for what in runs if what.startswith("sending an update")]) == 3
    finally:
        await store.close()


async def test_an_answer_reaches_another_store_s_watch_with_its_notification(
    schemas: list[str],
) -> None:
    """A handler's end that another store (another process) commits notifies its answer with
    the instance's change, and this store's watch of that update is told it (no read); an
    answer too long for a notification is left out of it (the change is still told)."""
    url = url_for(fresh(schemas))
    here, there = PostgresStore(url), PostgresStore(url)
    await here.open()
    await there.open()
    try:
        await here.create_instances(
            "w", [NewInstance("a", None)], trigger="api", skip_existing=False
        )
        (claim,) = (await there.claim("me", ["w"], 5, 30.0, there.now())).claims
        await there.finish(claim.lease, Finish("waiting", event_seq=0), there.now())
        for update_id in ("u1", "u2"):
            await here.messages.send_update("w", "a", update_id, "decide", "[]")
        (claim,) = (await there.claim("me", ["w"], 5, 30.0, there.now())).claims
        first, second = claim.history.events
        signals = here.signals
        with (
            signals.watch_changes("w", "a") as watch,
            signals.watch_answer("w", "a", "u1") as one,
            signals.watch_answer("w", "a", "u2") as two,
        ):
            accept = StepWrite(
                "@update:decide", 1, 0, "update", "running", started_at=there.now(),
                consume_event=first.pk, update="u1",
            )  # fmt: skip
            await there.record_step(claim.lease, accept, there.now())
            # u2 first, its end a step record too long to notify with its answer
            other = replace(accept, count=2, seq=1, consume_event=second.pk, update="u2")
            await there.record_step(claim.lease, other, there.now())
            long = '"' + "x" * 9000 + '"'
            ended = replace(other, status="complete", output=long, consume_event=None)
            await there.record_step(claim.lease, ended, there.now())
            await asyncio.wait_for(watch.wait(10), 20)  # its change is told
            assert not two.done()
            # u1's end, carried by the finish, with its answer
            ended = replace(accept, status="complete", output='{"ok": 1}', consume_event=None)
            end = Finish("waiting", event_seq=claim.event_seq, steps=(ended,))
            await there.finish(claim.lease, end, there.now())
            assert await asyncio.wait_for(one, 10) == UpdateAnswer(
                "u1", "complete", '{"ok": 1}', None
            )
            record = await here.messages.get_update("w", "a", "u2")
            assert record is not None and record.reply == "x" * 9000
    finally:
        await there.close()
        await here.close()
