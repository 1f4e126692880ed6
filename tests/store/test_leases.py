"""Leases and fencing: a dead worker's instances move on; a stale worker cannot write."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stepline import LeaseLostError, ManualClock, WorkflowEvent, WorkflowStep, workflow
from stepline.errors import StoreError
from stepline.store.base import Finish, History, NewInstance, StepWrite

from ..conftest import EngineFactory, drain

pytestmark = pytest.mark.both_loops  # the engine on the CLI's loop too

RUNS: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    RUNS.clear()


@workflow(name="two")
async def two(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.do("first", lambda: RUNS.append("first") or 1)
    await step.do("second", lambda: RUNS.append("second") or 2)
    return "ok"


async def test_claim_is_exclusive_until_the_lease_expires(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([two], clock=clock, lease=30) as engine:
        store = engine.store
        await engine.workflow("two").create(id="i")
        (claim,) = (await store.claim("dead-worker", ["two"], 10, 30, store.now())).claims
        assert claim.instance.status == "running"
        assert (await store.claim("other", ["two"], 10, 30, store.now())).claims == []
        clock.advance(29)
        assert await engine.worker.run_once() == 0
        clock.advance(2)
        await drain(engine)
        assert RUNS == ["first", "second"]
        # the dead worker comes back: every write it attempts is refused
        write = StepWrite("first", 1, 1, "do", "complete", "1")
        with pytest.raises(LeaseLostError):
            await store.record_step(claim.lease, write, store.now())
        with pytest.raises(LeaseLostError):
            await store.finish(
                claim.lease, Finish("errored", error={"name": "X", "message": ""}), store.now()
            )
        inst = await engine.workflow("two").get("i")
        assert (await inst.status()).output == "ok"


async def test_create_and_claim_return_the_records_they_stored(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    """The records handed back by create and claim are the stored rows, not a guess of them."""
    async with make_engine([two], clock=clock, lease=30, worker=False) as engine:
        store = engine.store
        binding = engine.workflow("two")
        parent = '{"workflow": "p", "id": "p1", "step": "start"}'
        created = await store.create_instances(
            "two",
            [NewInstance("a", '{"n": 1}'), NewInstance("b", None, parent)],
            trigger="api",
            skip_existing=False,
        )
        assert created == [await store.get_instance("two", r.id) for r in created]
        clock.advance(1)
        # a is claimed, goes to sleep, and is claimed again once it wakes: the second claim
        # keeps started_at from the first and moves status, ready_at and the lease
        claims = (await store.claim("w1", ["two"], 10, 30, store.now())).claims
        assert [c.instance for c in claims] == [
            await store.get_instance("two", r.id) for r in created
        ]
        first = claims[0]
        assert first.instance.status == "running" and first.instance.started_at == store.now()
        assert first.instance.ready_at == store.now() + 30
        assert first.instance.lease_owner == "w1"
        await store.finish(first.lease, Finish("waiting", wake_at=store.now() + 5), store.now())
        clock.advance(6)
        (again,) = (await store.claim("w2", ["two"], 10, 30, store.now())).claims
        assert again.instance == await store.get_instance("two", "a")
        assert again.lease.token != first.lease.token
        assert again.instance.started_at == first.instance.started_at
        assert again.instance.updated_at == store.now()
        await store.finish(again.lease, Finish("complete", output='"done"'), store.now())
        assert (await (await binding.get("a")).status()).output == "done"


async def test_a_claim_carries_the_history_the_store_holds(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    """``Claim.history``: the steps ``get_steps`` shows (start order) and the events still
    pending (send order), read with the claim; consumed events are not in it."""
    async with make_engine([two], clock=clock, lease=30) as engine:
        store = engine.store
        await engine.workflow("two").create(id="i")
        (first,) = (await store.claim("w1", ["two"], 1, 30, store.now())).claims
        assert first.history == History([], [])
        await store.send_event("two", "i", "taken", '"a"')
        now = store.now()
        writes = [
            StepWrite("first", 1, 1, "do", "complete", '{"x": [1, 2]}', started_at=now),
            StepWrite("nap", 1, 2, "sleep", "waiting", wake_at=now + 600, started_at=now),
        ]
        for write in writes:
            await store.record_step(first.lease, write, now)
        await store.finish(first.lease, Finish("waiting", wake_at=now + 600), now)
        # the pending event makes it runnable at once; two more arrive while it waits
        clock.advance(1)
        await store.send_event("two", "i", "go", '{"n": 1}')
        await store.send_event("two", "i", "more", None)
        (again,) = (await store.claim("w2", ["two"], 1, 30, store.now())).claims
        assert again.event_seq == 3
        assert again.history.steps == await store.get_steps("two", "i")
        assert [s.name for s in again.history.steps] == ["first", "nap"]
        pending = [
            (e.type, e.payload, e.sent_at)
            for e in await store.get_events("two", "i")
            if e.consumed_by is None
        ]
        assert [(e.type, e.payload, e.timestamp) for e in again.history.events] == pending
        assert [e.type for e in again.history.events] == ["taken", "go", "more"]
        # a consumed event leaves the next claim's history
        consume = StepWrite(
            "wait", 1, 3, "wait_for_event", "complete", '"a"',
            consume_event=again.history.events[0].pk,
        )  # fmt: skip
        await store.record_step(again.lease, consume, store.now())
        await store.release(again.lease, store.now())
        (third,) = (await store.claim("w3", ["two"], 1, 30, store.now())).claims
        assert [e.type for e in third.history.events] == ["go", "more"]
        assert [s.name for s in third.history.steps] == ["first", "nap", "wait"]
        assert third.history.steps == await store.get_steps("two", "i")


async def test_recorded_steps_do_not_rerun_after_a_crash(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([two], clock=clock, lease=30) as engine:
        store = engine.store
        inst = await engine.workflow("two").create(id="i")
        (claim,) = (await store.claim("crashy", ["two"], 1, 30, store.now())).claims
        # the crashed worker had recorded 'first' before it died
        await store.record_step(
            claim.lease, StepWrite("first", 1, 1, "do", "complete", "1"), store.now()
        )
        clock.advance(31)
        await drain(engine)
        assert RUNS == ["second"]
        assert (await inst.status()).status == "complete"


async def test_a_write_marked_new_replaces_a_record_it_finds_and_is_still_fenced(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    """``StepWrite.new`` is a hint that lets a store skip looking for a record to replace; one
    that is there after all (a write whose reply was lost) is replaced, and the lease still
    fences the write."""
    async with make_engine([two], clock=clock, lease=30) as engine:
        store = engine.store
        inst = await engine.workflow("two").create(id="i")
        (claim,) = (await store.claim("w1", ["two"], 1, 30, store.now())).claims
        now = store.now()
        running = StepWrite("first", 1, 1, "do", "running", started_at=now, new=True)
        assert await store.record_step(claim.lease, running, now) == "running"
        done = StepWrite(
            "first", 1, 1, "do", "complete", "1", started_at=now, ended_at=now + 1, new=True
        )
        assert await store.record_step(claim.lease, done, now + 1) == "running"
        (record,) = await inst.steps()
        assert (record.name, record.status, record.output, record.ended_at) == (
            "first",
            "complete",
            1,
            now + 1,
        )
        clock.advance(31)
        (taken,) = (await store.claim("w2", ["two"], 1, 30, store.now())).claims
        stale = StepWrite("second", 1, 2, "do", "complete", "2", new=True)
        with pytest.raises(LeaseLostError):
            await store.record_step(claim.lease, stale, store.now())
        assert [r.name for r in await inst.steps()] == ["first"]
        await store.release(taken.lease, store.now())
        await drain(engine)
        assert RUNS == ["second"]  # the replaced record counts: 'first' does not run again
        assert (await inst.status()).output == "ok"


async def test_renewal_keeps_the_lease(make_engine: EngineFactory, clock: ManualClock) -> None:
    async with make_engine([two], clock=clock, lease=30) as engine:
        store = engine.store
        await engine.workflow("two").create(id="i")
        (claim,) = (await store.claim("w1", ["two"], 1, 30, store.now())).claims
        clock.advance(20)
        held = await store.renew([claim.lease], 30, store.now())
        assert held == {claim.lease.pk: "running"}
        clock.advance(20)  # 40 s after the claim, 20 s after the renewal
        assert (await store.claim("w2", ["two"], 10, 30, store.now())).claims == []
        clock.advance(11)
        (taken,) = (await store.claim("w2", ["two"], 10, 30, store.now())).claims
        assert taken.lease.token != claim.lease.token
        assert await store.renew([claim.lease], 30, store.now()) == {}


async def test_terminate_fences_out_the_running_worker(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([two], clock=clock) as engine:
        store = engine.store
        inst = await engine.workflow("two").create(id="i")
        (claim,) = (await store.claim("w1", ["two"], 1, 30, store.now())).claims
        await inst.terminate()
        with pytest.raises(LeaseLostError):
            await store.record_step(
                claim.lease, StepWrite("first", 1, 1, "do", "complete", "1"), store.now()
            )
        assert (await inst.status()).status == "terminated"


async def test_worker_died_while_pause_pending(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([two], clock=clock) as engine:
        store = engine.store
        inst = await engine.workflow("two").create(id="i")
        await store.claim("w1", ["two"], 1, 30, store.now())
        await inst.pause()
        assert (await inst.status()).status == "waitingForPause"
        clock.advance(31)
        await drain(engine)
        assert (await inst.status()).status == "paused"
        await inst.resume()
        await drain(engine)
        assert (await inst.status()).status == "complete"


async def test_graceful_shutdown_releases_leases(make_engine: EngineFactory) -> None:
    started = asyncio.Event()

    async def slow() -> str:
        started.set()
        await asyncio.sleep(0.2)
        return "finished"

    @workflow(name="slowwf")
    async def slowwf(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("slow", slow)
        await step.do("never", lambda: RUNS.append("never"))

    async with make_engine([slowwf], worker=True, grace_period=5) as engine:
        inst = await engine.workflow("slowwf").create()
        await asyncio.wait_for(started.wait(), 10)
    # the block exited while 'slow' ran: it finished, nothing new started, lease released
    async with make_engine([slowwf]) as engine2:
        rec = await (await engine2.workflow("slowwf").get(inst.id)).record()
        assert rec.lease_owner is None and rec.status == "queued"
        assert [
            s.display_name for s in await (await engine2.workflow("slowwf").get(inst.id)).steps()
        ] == ["slow-1"]
        await drain(engine2)
        assert RUNS == ["never"]


async def test_a_database_failure_while_recording_a_step_does_not_error_the_instance(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    """A store failure is the infrastructure's, not the workflow's: the activation stops (even
    if run() catches exceptions around the step) and the instance runs again later."""

    @workflow(name="careful")
    async def careful(event: WorkflowEvent, step: WorkflowStep) -> Any:
        try:
            await step.do("first", lambda: RUNS.append("first") or 1)
            # the first record is written before the second step runs (the last would go with
            # the finish instead)
            await step.do("second", lambda: RUNS.append("second") or 2)
        except Exception as exc:
            return f"swallowed {type(exc).__name__}"
        return "ok"

    async with make_engine([careful], clock=clock, lease=30) as engine:
        store = engine.store
        real = store.record_step
        failures = [StoreError("the database went away")]

        async def flaky(*args: Any, **kwargs: Any) -> str:
            if failures:
                raise failures.pop()
            return await real(*args, **kwargs)

        store.record_step = flaky  # type: ignore[method-assign]
        inst = await engine.workflow("careful").create()
        await drain(engine)
        assert (await inst.status()).status == "running"  # abandoned, lease still held
        clock.advance(31)
        await drain(engine)
        status = await inst.status()
        assert (status.status, status.output) == ("complete", "ok")
        assert RUNS == ["first", "first", "second"]  # the unrecorded step ran again
