"""Fencing and other guarantees that a one-line bug could quietly break.

A worker keeps one id for its life, so when it claims its own expired instance again only the
lease token tells the old activation from the new one: every fenced statement is tried with the
old lease after such a re-claim, one write at a time and in batches (both stores group writes
that come from several tasks at once), through the store contract with a manual clock. Then the
worker-level guarantees: renewal keeps a long step from being taken over, a worker given again
an instance it still runs (its claim lost in a database crash) stops the old activation before
the new one runs a step, acknowledged SQLite
writes commit with ``synchronous=FULL``, timeouts fire on time, a sync callback's late result is
never recorded, and step results are limited to 1 MiB by default.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from stepline import (
    Engine,
    LeaseLostError,
    ManualClock,
    StepFailedError,
    WorkflowEvent,
    WorkflowStep,
    workflow,
)
from stepline._runtime import RunningMarks
from stepline.store.base import Finish, Lease, NewInstance, StepWrite, Store
from stepline.store.sqlite import SqliteStore

from ..conftest import EngineFactory, drain
from ..contract._support import raw

OWNER = "worker-1"
LEASE = 30.0


@workflow(name="fenced")
async def fenced(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.do("a", lambda: 1)
    return "ok"


# -- helpers ---------------------------------------------------------------------------------------


def batch_sizes(store: Store, batcher: str = "_step_writes") -> list[int]:
    """From now on, the size of every group of writes the store commits together.

    SQLite: every group commit (all kinds of writes). PostgreSQL: the batches of ``batcher``
    (``_step_writes`` or ``_finishes``), each one statement.
    """
    sizes: list[int] = []
    queue = store._db._writes if isinstance(store, SqliteStore) else getattr(store, batcher)
    run = queue._run

    async def counted_run(rows: list[Any]) -> Any:
        sizes.append(len(rows))
        return await run(rows)

    queue._run = counted_run
    return sizes


async def reclaimed(
    engine: Engine, clock: ManualClock, n: int, *, events: bool = False
) -> tuple[list[Lease], list[Lease], list[int]]:
    """``n`` instances claimed by OWNER, left to expire, and claimed again by OWNER: the old
    leases and the new ones, in the same order (by instance). With ``events``, each instance is
    sent an event "go" before the second claim: the pks of those events (else empty)."""
    store = engine.store
    await store.create_instances(
        "fenced", [NewInstance(f"i{k}", None) for k in range(n)], trigger="api", skip_existing=False
    )
    first = (await store.claim(OWNER, ["fenced"], n, LEASE, store.now())).claims
    clock.advance(LEASE + 1)
    if events:
        for k in range(n):
            await store.send_event("fenced", f"i{k}", "go", '"payload"')
    second = sorted(
        (await store.claim(OWNER, ["fenced"], n, LEASE, store.now())).claims,
        key=lambda c: c.lease.pk,
    )
    old = sorted((c.lease for c in first), key=lambda lease: lease.pk)
    new = [c.lease for c in second]
    assert [lease.pk for lease in old] == [lease.pk for lease in new] and len(old) == n
    pairs = zip(old, new, strict=True)
    assert all(o.owner == m.owner == OWNER and o.token != m.token for o, m in pairs)
    pending = [event.pk for c in second for event in c.history.events]
    assert len(pending) == (n if events else 0)
    return old, new, pending


async def pending_events(engine: Engine, k: int) -> list[str | None]:
    """Who consumed each event of instance ``k`` (None: pending)."""
    return [e.consumed_by for e in await engine.store.get_events("fenced", f"i{k}")]


def step(name: str, output: str = '"x"', **fields: Any) -> StepWrite:
    return StepWrite(name, 1, 1, "do", "complete", output, **fields)


async def steps_of(engine: Engine, k: int) -> dict[str, Any]:
    return {s.name: s.output for s in await engine.store.get_steps("fenced", f"i{k}")}


async def refused(call: Awaitable[Any]) -> bool:
    try:
        await call
    except LeaseLostError:
        return True
    return False


# -- 1. every fenced statement, after a same-owner re-claim ---------------------------------------


@pytest.mark.parametrize("flavour", ["upsert", "new", "consuming"])
async def test_a_single_step_write_of_the_old_activation_is_refused(
    make_engine: EngineFactory, clock: ManualClock, flavour: str
) -> None:
    """One write alone (PostgreSQL: ``record_step``, ``record_step_new`` or
    ``record_step_consuming``; SQLite: a commit of its own)."""
    async with make_engine([fenced], clock=clock, lease=LEASE) as engine:
        store = engine.store
        (old,), (new,), (event_pk,) = await reclaimed(engine, clock, 1, events=True)
        extra: dict[str, Any] = {
            "upsert": {},
            "new": {"new": True},
            "consuming": {"consume_event": event_pk},
        }[flavour]
        sizes = batch_sizes(store)
        assert await refused(store.record_step(old, step("a", '"stale"', **extra), store.now()))
        assert sizes == [1], "the write did not go out alone"
        assert await steps_of(engine, 0) == {}
        assert await pending_events(engine, 0) == [None]
        # the new activation's write of the same step lands
        assert await store.record_step(new, step("a", '"fresh"', **extra), store.now())
        assert await steps_of(engine, 0) == {"a": "fresh"}


@pytest.mark.parametrize("consuming", [False, True], ids=["plain", "consuming"])
async def test_batched_step_writes_of_the_old_activation_are_refused(
    make_engine: EngineFactory, clock: ManualClock, consuming: bool
) -> None:
    """Writes from several tasks at once share one commit (SQLite's group commit, PostgreSQL's
    ``record_steps`` / ``record_steps_consuming``): the stale ones among them fail alone."""
    n = 4
    async with make_engine([fenced], clock=clock, lease=LEASE) as engine:
        store = engine.store
        old, new, events = await reclaimed(engine, clock, n, events=consuming)
        writes: list[Awaitable[Any]] = []
        for k in range(n):  # interleaved, so that stale writes sit inside the batch
            event = {"consume_event": events[k]} if consuming else {}
            writes.append(store.record_step(new[k], step("fresh", '"new"'), store.now()))
            writes.append(store.record_step(old[k], step("stale", '"old"', **event), store.now()))
        sizes = batch_sizes(store)
        results = await asyncio.gather(*writes, return_exceptions=True)
        assert max(sizes) >= 2 * n - 1, f"the writes were not batched: {sizes}"
        assert [isinstance(r, LeaseLostError) for r in results] == [False, True] * n
        for k in range(n):
            assert await steps_of(engine, k) == {"fresh": "new"}
            if consuming:
                assert await pending_events(engine, k) == [None], "a stale write consumed an event"


async def test_finish_of_the_old_activation_is_refused_alone_and_in_a_batch(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    n = 4
    async with make_engine([fenced], clock=clock, lease=LEASE) as engine:
        store = engine.store
        old, new, _ = await reclaimed(engine, clock, n)

        def done(output: str) -> Finish:
            return Finish("complete", output=output, steps=(step("last", output),))

        sizes = batch_sizes(store, "_finishes")
        assert await refused(store.finish(old[0], done('"stale"'), store.now()))
        assert await refused(
            store.finish(old[0], Finish("waiting", wake_at=store.now() + 60), store.now())
        )
        assert sizes == [1, 1]
        # a batch: new leases of instances 2 and 3 first and in between, old ones of 0 and 1
        results = await asyncio.gather(
            store.finish(new[2], done('"fresh"'), store.now()),
            store.finish(old[0], done('"stale"'), store.now()),
            store.finish(new[3], done('"fresh"'), store.now()),
            store.finish(old[1], done('"stale"'), store.now()),
            return_exceptions=True,
        )
        assert max(sizes[2:]) >= 3, f"the finishes were not batched: {sizes}"
        assert [isinstance(r, LeaseLostError) for r in results] == [False, True, False, True]
        for k in (0, 1):
            record = await store.get_instance("fenced", f"i{k}")
            assert (record.status, record.output, record.lease_owner) == ("running", None, OWNER)
            assert await steps_of(engine, k) == {}
        for k in (2, 3):
            assert (await store.get_instance("fenced", f"i{k}")).output == "fresh"
            assert await steps_of(engine, k) == {"last": "fresh"}
        # the new activation of instance 0 still holds it
        assert await store.finish(new[0], done('"fresh"'), store.now()) == "complete"


async def test_renew_and_release_of_the_old_activation_change_nothing(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([fenced], clock=clock, lease=LEASE) as engine:
        store = engine.store
        old, new, _ = await reclaimed(engine, clock, 2)
        before = await store.get_instance("fenced", "i0")
        clock.advance(5)
        assert await store.renew([old[0]], LEASE, store.now()) == {}
        assert await store.renew([old[0], new[1], old[1]], LEASE, store.now()) == {
            new[1].pk: "running"
        }
        assert (await store.get_instance("fenced", "i0")).ready_at == before.ready_at
        await store.release(old[0], store.now())
        after = await store.get_instance("fenced", "i0")
        assert (after.status, after.lease_owner, after.ready_at) == (
            "running",
            OWNER,
            before.ready_at,
        )
        assert (await store.claim("worker-2", ["fenced"], 10, LEASE, store.now())).claims == []
        # the new lease is intact: renewal and writes still succeed
        assert await store.renew([new[0]], LEASE, store.now()) == {new[0].pk: "running"}
        await store.record_step(new[0], step("a"), store.now())


@pytest.mark.parametrize("action", ["terminate", "terminate_rollback", "restart"])
async def test_a_control_action_fences_out_the_running_activation(
    make_engine: EngineFactory, clock: ManualClock, action: str
) -> None:
    """Terminate and restart take the lease away: the running activation's writes fail, even
    once the same worker has claimed the instance again."""
    async with make_engine([fenced], clock=clock, lease=LEASE) as engine:
        store = engine.store
        inst = await engine.workflow("fenced").create(id="i0")
        (claim,) = (await store.claim(OWNER, ["fenced"], 1, LEASE, store.now())).claims
        lease = claim.lease
        if action == "restart":
            await inst.restart()
        else:
            await inst.terminate(rollback=action == "terminate_rollback")
        # a terminated instance stays put; the others are runnable and OWNER takes them again
        again = (await store.claim(OWNER, ["fenced"], 1, LEASE, store.now())).claims
        assert len(again) == (0 if action == "terminate" else 1)
        assert await refused(store.record_step(lease, step("a", '"stale"'), store.now()))
        assert await refused(store.finish(lease, Finish("complete", output='"stale"'), store.now()))
        assert await store.renew([lease], LEASE, store.now()) == {}
        record = await store.get_instance("fenced", "i0")
        assert record.output is None and await steps_of(engine, 0) == {}
        if action == "terminate":
            assert record.status == "terminated"


# -- 2. renewal keeps a long step on its worker ---------------------------------------------------

LONG_RUNS: list[str] = []
LONG_STARTED: list[asyncio.Event] = []  # one per test: an event belongs to its loop
SHORT_LEASE = 1.0
STEP_SECONDS = 3.2  # more than three leases


@workflow(name="long")
async def long_step(event: WorkflowEvent, step: WorkflowStep) -> Any:
    async def work() -> str:
        LONG_RUNS.append("run")
        LONG_STARTED[0].set()
        await asyncio.sleep(STEP_SECONDS)
        return "done"

    return await step.do("work", {"timeout": 60}, work)


async def test_a_step_that_outlives_its_lease_is_not_taken_over(store_url: str) -> None:
    """Two live workers on one store with a short lease: the one running a step renews its
    lease often enough that the other never takes the instance over."""
    LONG_RUNS.clear()
    LONG_STARTED[:] = [asyncio.Event()]
    first = Engine(store_url, [long_step], lease=SHORT_LEASE, worker=True, worker_id="first")
    second = Engine(store_url, [long_step], lease=SHORT_LEASE, worker=True, worker_id="second")
    async with first:
        inst = await first.workflow("long").create(id="l")
        await asyncio.wait_for(LONG_STARTED[0].wait(), 10)
        async with second:
            status = await inst.wait(timeout=STEP_SECONDS + 20)
        (work,) = await inst.steps()
    assert status.status == "complete" and status.output == "done"
    # the run began before the second worker existed: one run in all is the first worker's
    assert LONG_RUNS == ["run"], "another worker took the instance over and ran the step again"
    assert len(work.attempts) == 1


# -- 2b. a claim the database lost, made again by the same worker -------------------------------

UNDONE: list[tuple[str, int]] = []
"""("start" | "end", activation number) of each run of the ``undone`` workflow's step."""
UNDONE_GATE: list[asyncio.Event] = []


@workflow(name="undone")
async def undone(event: WorkflowEvent, step: WorkflowStep) -> Any:
    async def first() -> int:
        number = sum(1 for kind, _ in UNDONE if kind == "start") + 1
        UNDONE.append(("start", number))
        try:
            await UNDONE_GATE[0].wait()
        finally:
            UNDONE.append(("end", number))
        return number

    return await step.do("first", first)


async def test_a_worker_given_again_an_instance_it_runs_stops_the_old_activation_first(
    store_url: str,
) -> None:
    """A server crash undoes the claim of an instance whose activation runs (PostgreSQL commits
    claims without waiting for the WAL flush), and the same worker claims it again: the old
    activation, fenced out, is stopped before the new one runs a step, the worker counts and
    renews the new one, and the instance completes once, from the new activation."""
    UNDONE.clear()
    UNDONE_GATE[:] = [asyncio.Event()]
    async with Engine(store_url, [undone], worker=True, lease=30.0) as engine:
        inst = await engine.workflow("undone").create(id="u")
        await wait_until(lambda: ("start", 1) in UNDONE)
        # The row as it was before the claim: what the crash leaves.
        raw(
            store_url,
            "UPDATE instances SET status = 'queued', lease_owner = NULL, lease_token = 0,"
            " lease_expires_at = NULL, ready_at = created_at, started_at = NULL"
            " WHERE id = 'u'",
        )
        engine.worker.wake()
        await wait_until(lambda: ("start", 2) in UNDONE)
        assert UNDONE == [("start", 1), ("end", 1), ("start", 2)], "the two ran at once"
        assert engine.worker.active_count == 1
        await engine.worker.renew_now()
        assert engine.worker.active_count == 1, "the new activation's lease was not renewed"
        UNDONE_GATE[0].set()
        status = await inst.wait(timeout=10)
        (first,) = await inst.steps()
        await wait_until(lambda: engine.worker.active_count == 0)
    assert status.status == "complete" and status.output == 2
    assert len(first.attempts) == 1


async def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


# -- 3. acknowledged SQLite writes commit with synchronous=FULL -----------------------------------


async def test_acknowledged_sqlite_writes_commit_with_synchronous_full(
    tmp_path: Any, clock: ManualClock
) -> None:
    """Every write acknowledged to a caller runs in a transaction under ``synchronous=FULL``
    (2); the level is read inside each write's own transaction."""
    async with Engine(f"sqlite:///{tmp_path}/sync.db", [fenced], clock=clock) as engine:
        store = engine.store
        assert isinstance(store, SqliteStore)
        levels: list[int] = []
        write = store._db.write

        def observed(op: Callable[[Any], Any], *, durable: bool = False) -> Any:
            def level_then_op(c: Any) -> Any:
                levels.append(c.execute("PRAGMA synchronous").fetchone()[0])
                return op(c)

            return write(level_then_op, durable=durable)

        store._db.write = observed  # type: ignore[method-assign]
        binding = engine.workflow("fenced")

        async def level_of(call: Awaitable[Any]) -> list[int]:
            levels.clear()
            await call
            return list(levels)

        inst = await binding.create(id="a")
        levels.clear()
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "create": lambda: binding.create(id="b"),
            "create_batch": lambda: binding.create_batch([{"id": "c"}, {"id": "d"}]),
            "send_event": lambda: inst.send_event("go", 1),
            "pause": inst.pause,
            "resume": inst.resume,
            "terminate": inst.terminate,
            "restart": inst.restart,
            "delete": lambda: store.retention.delete_instances("fenced", ["d"]),
        }
        for name, call in calls.items():
            assert await level_of(call()) == [2], f"{name} did not commit with synchronous=FULL"
        # a step checkpoint afterwards is back to NORMAL (1), as documented
        (claim,) = (await store.claim(OWNER, ["fenced"], 1, LEASE, store.now())).claims
        assert await level_of(store.record_step(claim.lease, step("a"), store.now())) == [1]


# -- 4. timeouts fire on time ---------------------------------------------------------------------

TIMEOUT = 0.3


@pytest.mark.parametrize("path", ["own timer", "sweep"])
async def test_a_step_timeout_fires_close_to_its_configured_value(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """Short timeouts get a timer of their own, long ones are fired by the worker's sweep (made
    to apply to this one here): either way within a fraction of a second, and never early."""
    if path == "sweep":
        monkeypatch.setattr(RunningMarks, "PRECISE_BELOW", 0.01)
    elapsed: list[float] = []

    async def slow() -> None:
        started = time.monotonic()
        try:
            await asyncio.sleep(30)
        finally:
            elapsed.append(time.monotonic() - started)

    @workflow(name="timed")
    async def timed(event: WorkflowEvent, step: WorkflowStep) -> Any:
        try:
            await step.do("slow", {"timeout": TIMEOUT, "retries": {"limit": 0}}, slow)
        except StepFailedError as exc:
            return exc.error_name
        return "no timeout"

    async with make_engine([timed]) as engine:
        inst = await engine.workflow("timed").create()
        await asyncio.wait_for(drain(engine), 10)
        assert (await inst.status()).output == "StepTimeoutError"
    (took,) = elapsed
    # the loop's clock may round a timer to the millisecond: 10 ms of slack below
    assert TIMEOUT - 0.01 <= took < TIMEOUT + 0.5, f"a {TIMEOUT} s timeout fired after {took:.3f} s"


# -- 5. a sync callback's late result is never recorded -------------------------------------------


class Blocking:
    """A sync step callback that blocks its thread until released, then returns "late"."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.returned = threading.Event()

    def __call__(self) -> str:
        self.started.set()
        self.release.wait(10)
        self.returned.set()
        return "late"

    async def wait_started(self) -> None:
        assert await asyncio.to_thread(self.started.wait, 10), "the callback never started"

    async def finish_thread(self) -> None:
        self.release.set()
        assert await asyncio.to_thread(self.returned.wait, 10), "the thread did not return"
        await asyncio.sleep(0.05)  # the thread's result reaches the loop (and must be dropped)


async def test_a_timed_out_sync_callback_runs_on_but_its_result_is_discarded(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    blocking = Blocking()

    @workflow(name="sync_timeout")
    async def sync_timeout(event: WorkflowEvent, step: WorkflowStep) -> Any:
        try:
            return await step.do("block", {"timeout": 0.2, "retries": {"limit": 0}}, blocking)
        except StepFailedError as exc:
            return exc.error_name

    async with make_engine([sync_timeout], clock=clock) as engine:
        inst = await engine.workflow("sync_timeout").create()
        run = asyncio.create_task(drain(engine))
        await blocking.wait_started()
        # The activation ends at the timeout, without waiting for the thread, still blocked.
        await asyncio.wait({run}, timeout=5)
        await blocking.finish_thread()
        await asyncio.wait_for(run, 10)
        assert await drain(engine) == 0
        status = await inst.status()
        assert (status.status, status.output) == ("complete", "StepTimeoutError")
        (record,) = await inst.steps()
        assert (record.status, record.output) == ("errored", None)
        assert [a.error["name"] for a in record.attempts if a.error] == ["StepTimeoutError"]


async def test_a_sync_callback_of_a_terminated_instance_is_never_recorded(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    blocking = Blocking()

    @workflow(name="sync_terminated")
    async def sync_terminated(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("block", blocking)
        return await step.do("after", lambda: "after")

    async with make_engine([sync_terminated], clock=clock) as engine:
        inst = await engine.workflow("sync_terminated").create()
        run = asyncio.create_task(drain(engine))
        await blocking.wait_started()
        await inst.terminate()
        await blocking.finish_thread()  # its result's write is refused: the lease is gone
        await asyncio.wait_for(run, 10)
        status = await inst.status()
        assert (status.status, status.output) == ("terminated", None)
        records = await inst.steps()
        assert all(r.output is None and r.status != "complete" for r in records), records
        assert [r.name for r in records] in ([], ["block"])


# -- 6. the default limit on step results ---------------------------------------------------------

MIB = 1024 * 1024


@workflow(name="big")
async def big(event: WorkflowEvent, step: WorkflowStep) -> Any:
    size = event.payload
    await step.do("big", lambda: "x" * size)  # encoded: size + 2 quotes
    return "stored"


async def test_step_results_are_limited_to_one_mebibyte_by_default(
    make_engine: EngineFactory,
) -> None:
    async with make_engine([big]) as engine:
        binding = engine.workflow("big")
        fits = await binding.create(id="fits", params=MIB - 2)
        over = await binding.create(id="over", params=MIB - 1)
        await drain(engine)
        assert (await fits.status()).output == "stored"
        (record,) = await fits.steps()
        assert record.output == "x" * (MIB - 2)
        status = await over.status()
        assert status.status == "errored" and status.error is not None
        assert status.error["name"] == "InvalidPayloadError"
        message = status.error["message"]
        assert "'big-1'" in message and "1,048,577 bytes" in message, message
        assert "over the limit of 1,048,576 bytes" in message, message
