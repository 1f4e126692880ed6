"""Instances created in a process whose worker has room go straight to that worker.

The worker reserves slots for them (``Worker.reserve``) and the store creates them already claimed
(``Store.create_and_claim``), so the worker runs them without a claim or a history read;
everything else about leases (fencing, expiry, renewal) is unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from stepline import (
    Engine,
    InstanceAlreadyExistsError,
    InstanceNotFoundError,
    ManualClock,
    WorkflowEvent,
    WorkflowStep,
    workflow,
)
from stepline.store.base import History, NewInstance, StepWrite
from stepline.worker import Worker, WorkerSettings

from ..conftest import EngineFactory, drain

pytestmark = pytest.mark.both_loops  # the engine on the CLI's loop too

GATE: asyncio.Event | None = None


@asynccontextmanager
async def worker_running(engine: Engine) -> AsyncIterator[None]:
    """The engine's worker running in a task for the block, then stopped gracefully."""
    task = asyncio.create_task(engine.worker.run())
    try:
        yield
    finally:
        engine.worker.stop()
        await task


@workflow(name="quick")
async def quick(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("only", lambda: event.payload)


@workflow(name="timed-napper")
async def timed_napper(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.do("before", lambda: 1)
    await step.sleep("nap", "0.5 seconds")
    return "woke"


@workflow(name="gated")
async def gated(event: WorkflowEvent, step: WorkflowStep) -> Any:
    async def wait_for_gate() -> str:
        assert GATE is not None
        await GATE.wait()
        return "through"

    return await step.do("gate", wait_for_gate)


async def test_create_and_claim_stores_the_first_instances_claimed(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([quick], clock=clock) as engine:
        store = engine.store
        await engine.workflow("quick").create(id="old")
        items = [NewInstance(i, "1") for i in ("old", "a", "a", "b", "c")]
        created, claims = await store.create_and_claim(
            "quick",
            items,
            trigger="api",
            skip_existing=True,
            owner="me",
            lease_seconds=30.0,
            limit=3,
        )
        # positions among distinct ids: old (exists), a, b are the first three; c is beyond
        assert [(r.id, r.status, r.lease_owner) for r in created] == [
            ("a", "running", "me"),
            ("b", "running", "me"),
            ("c", "queued", None),
        ]
        assert created[0].started_at == clock()
        assert created[0].ready_at == clock() + 30.0  # a claimed instance's: its lease expiry
        assert [c.instance for c in claims] == created[:2]
        for claim in claims:
            assert (claim.lease.pk, claim.lease.token, claim.lease.owner) == (
                claim.instance.pk,
                1,
                "me",
            )
            assert (claim.control, claim.event_seq, claim.history) == (None, 0, History([], []))
        # durable and claimed as stored: a fresh read says the same
        for record in created:
            assert await store.get_instance("quick", record.id) == record
        # the leases are real: others cannot claim them, their owner can write under them
        others = (await store.claim("other", ["quick"], 10, 30, store.now())).claims
        assert sorted(c.instance.id for c in others) == ["c", "old"]
        write = StepWrite("only", 1, 1, "do", "complete", "1")
        assert await store.record_step(claims[0].lease, write, store.now()) == "running"
        assert [s.name for s in await store.get_steps("quick", "a")] == ["only"]
        # and they expire like any lease: a dead creator's instances move on
        clock.advance(31)
        await drain(engine)
        for instance_id in ("a", "b"):
            inst = await engine.workflow("quick").get(instance_id)
            assert (await inst.status()).status == "complete"


async def test_create_and_claim_refuses_an_existing_id_without_skip_existing(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([quick], clock=clock) as engine:
        await engine.workflow("quick").create(id="old")
        with pytest.raises(InstanceAlreadyExistsError):
            await engine.store.create_and_claim(
                "quick",
                [NewInstance("new", None), NewInstance("old", None)],
                trigger="api",
                skip_existing=False,
                owner="me",
                lease_seconds=30.0,
                limit=2,
            )
        with pytest.raises(InstanceNotFoundError):
            await engine.workflow("quick").get("new")  # nothing was created


async def test_create_instances_leaves_every_instance_queued(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([quick], clock=clock) as engine:
        created = await engine.store.create_instances(
            "quick", [NewInstance("x", None)], trigger="api", skip_existing=False
        )
        assert created[0].status == "queued" and created[0].lease_owner is None
        assert created[0].ready_at == clock()


async def test_the_engine_worker_runs_what_this_process_creates_at_once(store_url: str) -> None:
    async with Engine(store_url, [quick], poll_interval=30) as engine:
        await asyncio.sleep(0.1)  # the worker has looked once and found nothing
        # With a 30 s poll interval and no notification in this process, only the hand-over
        # can run the instance within the timeout.
        instance = await engine.workflow("quick").create(params=7)
        record = await instance.record()
        assert record.status in ("running", "complete")
        assert record.lease_owner in (engine.worker.id, None)
        assert (await instance.wait(timeout=5)).output == 7
        # a batch too
        batch = await engine.workflow("quick").create_batch([{"params": n} for n in range(5)])
        outputs = [(await i.wait(timeout=5)).output for i in batch]
        assert outputs == [0, 1, 2, 3, 4]


async def test_reservations_respect_concurrency_and_a_backlog(store_url: str) -> None:
    global GATE
    GATE = asyncio.Event()
    async with Engine(store_url, [gated, quick], concurrency=3, poll_interval=30) as engine:
        await asyncio.sleep(0.1)
        worker = engine.worker
        assert worker.reserve("unknown-workflow", 1) is None
        batch = await engine.workflow("gated").create_batch([{} for _ in range(5)])
        records = [await i.record() for i in batch]
        assert [r.status for r in records] == ["running"] * 3 + ["queued"] * 2
        assert worker.active_count == 3
        assert worker.reserve("quick", 1) is None  # no free slot
        GATE.set()
        for inst in batch:
            assert (await inst.wait(timeout=10)).output == "through"
    # A client-only engine has no worker; one that is not running (driven by run_once)
    # reserves nothing.
    async with Engine(store_url, [quick], worker=False) as client:
        inst = await client.workflow("quick").create()
        assert (await inst.status()).status == "queued"
        assert client._local._worker is None, "a client-only engine made a worker"
        assert client.worker.reserve("quick", 1) is None


async def test_a_cancelled_create_still_hands_its_instance_over(store_url: str) -> None:
    async with Engine(store_url, [quick], poll_interval=30) as engine:
        await asyncio.sleep(0.1)
        binding = engine.workflow("quick")
        task = asyncio.create_task(binding.create(id="c", params="done"))
        await asyncio.sleep(0)  # the create is under way
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        # Whether or not the create had committed when it was cancelled, nothing waits for a
        # lease to expire: the instance either does not exist or completes now.
        try:
            instance = await binding.get("c")
        except InstanceNotFoundError:
            return
        assert (await instance.wait(timeout=5)).output == "done"
        assert engine.worker._slots.reserved == 0


async def test_an_activation_whose_final_write_is_in_flight_frees_its_slot(
    make_engine: EngineFactory,
) -> None:
    """Concurrency counts activations that run code: one whose run is over holds its lease until
    its finish commits, but not its slot, so the worker takes the next instance meanwhile."""
    async with make_engine([quick], concurrency=1, grace_period=0.5) as engine:
        binding = engine.workflow("quick")
        first = await binding.create(id="first", params=1)
        second = await binding.create(id="second", params=2)
        first_pk = (await first.record()).pk
        store = engine.store
        real_finish = store.finish
        second_ran = asyncio.Event()

        async def slow_finish(lease: Any, finish: Any, now: float) -> str:
            if lease.pk == first_pk:
                await second_ran.wait()  # the first one's finish waits until the second has run
            else:
                second_ran.set()
            return await real_finish(lease, finish, now)

        store.finish = slow_finish  # type: ignore[method-assign]
        worker = asyncio.create_task(engine.worker.run())
        try:
            assert (await second.wait(timeout=5)).output == 2
            assert (await first.wait(timeout=5)).output == 1
        finally:
            engine.worker.stop()
            await worker


async def test_a_sequential_workload_in_one_process_makes_no_claims(store_url: str) -> None:
    """Instances created one after another in the worker's process are handed over, and a slot
    that frees does not send the worker to the database when its last look found nothing else:
    no claim per instance (each one would cost a query and, on PostgreSQL, server time)."""
    async with Engine(store_url, [quick], poll_interval=30) as engine:
        store = engine.store
        real_claim = store.claim
        claims = 0

        async def counting_claim(*args: Any, **kwargs: Any) -> Any:
            nonlocal claims
            claims += 1
            return await real_claim(*args, **kwargs)

        store.claim = counting_claim  # type: ignore[method-assign]
        # The worker's first look (found nothing) is not counted, however late a loaded machine
        # makes it: it has happened before the counting began, or it is seen here.
        for _ in range(40):
            if claims:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.05)
        claims = 0
        binding = engine.workflow("quick")
        for n in range(20):
            assert (await (await binding.create(params=n)).wait(timeout=5)).output == n
        assert claims <= 2, f"{claims} claims for 20 instances handed over one at a time"


async def test_a_slot_that_frees_after_a_wake_while_full_claims_at_once(
    make_engine: EngineFactory,
) -> None:
    """A wake that comes while every slot is taken is not forgotten: when a slot frees, the
    worker claims the instance another process created meanwhile (not at its next poll)."""
    global GATE
    GATE = asyncio.Event()
    engine_cm = make_engine([gated, quick], concurrency=1, poll_interval=30)
    async with engine_cm as engine, worker_running(engine):
        await asyncio.sleep(0.1)
        busy = await engine.workflow("gated").create()  # handed over: the only slot
        await asyncio.sleep(0.05)
        assert engine.worker.active_count == 1
        # "another process" creates an instance: the store's wake reaches a full worker
        async with make_engine([quick]) as other:
            later_id = (await other.workflow("quick").create(params="later")).id
        later = await engine.workflow("quick").get(later_id)
        engine.worker.wake()  # what the notification does (SQLite has none across engines)
        await asyncio.sleep(0.05)
        assert (await later.status()).status == "queued"  # no free slot yet
        GATE.set()
        assert (await busy.wait(timeout=5)).output == "through"
        # with a 30 s poll interval, only the remembered wake can run it this soon
        assert (await later.wait(timeout=5)).output == "later"


@workflow(name="napper")
async def napper(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.sleep("nap", 0.2)
    return await step.do("after", lambda: "awake")


async def test_a_timer_due_while_every_slot_was_taken_runs_when_one_frees(
    make_engine: EngineFactory,
) -> None:
    """A worker with no free slot does not look at the database, timers included; when a slot
    frees it looks at once (not at its next poll, 30 s away here)."""
    global GATE
    GATE = asyncio.Event()
    engine_cm = make_engine([gated, napper], concurrency=1, poll_interval=30)
    async with engine_cm as engine, worker_running(engine):
        await asyncio.sleep(0.1)
        sleeper = await engine.workflow("napper").create()  # runs, sleeps 0.2 s, frees
        await asyncio.sleep(0.1)
        busy = await engine.workflow("gated").create()  # handed over: the only slot
        await asyncio.sleep(0.3)  # the sleeper is due now, but no slot is free
        assert (await sleeper.status()).status == "waiting"
        GATE.set()
        assert (await busy.wait(timeout=5)).output == "through"
        assert (await sleeper.wait(timeout=5)).output == "awake"


async def test_a_suspension_on_a_timer_costs_no_claim_and_runs_at_its_timer(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An activation that suspends until a time tells its worker the timer instead of waking it
    to look at the database (that look would only find the timer): no claim until then, and the
    instance runs at its timer though the worker polls only every 30 s."""
    async with Engine(store_url, [timed_napper], worker=False) as engine:
        store = engine.store
        settings = WorkerSettings(poll_interval=30.0, min_poll_interval=30.0)
        worker = Worker(store, engine.workflows, settings)
        claims: list[float] = []
        suspended: list[tuple[float, float]] = []
        real_claim, real_finish = store.claim, store.finish

        async def claim(*args: Any, **kwargs: Any) -> Any:
            claims.append(store.now())
            return await real_claim(*args, **kwargs)

        async def finish(lease: Any, end: Any, now: float) -> str:
            status = await real_finish(lease, end, now)
            if status == "waiting":
                suspended.append((store.now(), end.wake_at))
            return status

        monkeypatch.setattr(store, "claim", claim)
        monkeypatch.setattr(store, "finish", finish)
        task = asyncio.create_task(worker.run())
        try:
            instance = await engine.workflow("timed-napper").create()
            assert (await instance.wait(timeout=10)).output == "woke"
        finally:
            worker.stop()
            await task
        ((at, wake_at),) = suspended
        after = [when for when in claims if when >= at]
        assert after, "the instance ran again without a claim"
        assert min(after) >= wake_at - 0.05, "a claim ran before the timer was due"
