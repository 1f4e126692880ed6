"""When step records commit: before anything after them can be seen, in the order they were
written, and the activation's last records together with its finish (one commit instead of
two)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from stepline import LeaseLostError, ManualClock, WorkflowEvent, WorkflowStep, workflow
from stepline.store.base import Finish, StepWrite, Store

from ..conftest import EngineFactory, drain

pytestmark = pytest.mark.both_loops  # the engine on the CLI's loop too

SEEN: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _reset() -> None:
    SEEN.clear()


def count_writes(store: Store) -> list[str]:
    """Patch ``store.record_step`` to log the name of every record written on its own."""
    names: list[str] = []
    real = store.record_step

    async def counting(lease: Any, write: StepWrite, now: float) -> str:
        names.append(write.name)
        return await real(lease, write, now)

    store.record_step = counting  # type: ignore[method-assign]
    return names


def committed_before_each(store: Store, slow: str) -> dict[str, list[str]]:
    """Patch ``store.record_step`` to note, for each step, which records had committed when
    its first record was submitted; the records of step ``slow`` take a while to commit (still
    in flight when the next record goes)."""
    real = store.record_step
    committed: list[str] = []
    seen_at_write: dict[str, list[str]] = {}

    async def slowed(lease: Any, write: StepWrite, now: float) -> str:
        seen_at_write.setdefault(write.name, list(committed))
        if write.name == slow:
            await asyncio.sleep(0.05)
        status = await real(lease, write, now)
        committed.append(write.name)
        return status

    store.record_step = slowed  # type: ignore[method-assign]
    return seen_at_write


@workflow(name="chain")
async def chain(event: WorkflowEvent, step: WorkflowStep) -> Any:
    store: Store = SEEN["store"]
    first = await step.do("first", lambda: 1)

    async def second() -> int:
        # the first step's record has committed before this callback runs
        steps = await store.get_steps("chain", event.instance_id)
        SEEN["before second"] = [(s.name, s.status) for s in steps]
        return 2

    return first + await step.do("second", second)


async def test_a_record_commits_before_the_next_step_and_the_last_with_the_finish(
    make_engine: EngineFactory,
) -> None:
    async with make_engine([chain]) as engine:
        SEEN["store"] = engine.store
        written = count_writes(engine.store)
        inst = await engine.workflow("chain").create()
        await drain(engine)
        assert (await inst.status()).output == 3
        assert SEEN["before second"] == [("first", "complete")]
        # "first" was written before "second" ran; "second" went with the finish
        assert written == ["first"]
        steps = await inst.steps()
        assert [(s.name, s.status, s.output) for s in steps] == [
            ("first", "complete", 1),
            ("second", "complete", 2),
        ]


@workflow(name="nap-after-work")
async def nap_after_work(event: WorkflowEvent, step: WorkflowStep) -> Any:
    if event.payload == "together":
        done, _ = await asyncio.gather(step.do("work", lambda: "done"), step.sleep("nap", 60))
        return done
    done = await step.do("work", lambda: "done")
    await step.sleep("nap", 60)
    return done


@pytest.mark.parametrize("shape", ["in turn", "together"])
async def test_records_of_a_suspending_activation_go_with_its_finish(
    make_engine: EngineFactory, clock: ManualClock, shape: str
) -> None:
    async with make_engine([nap_after_work], clock=clock) as engine:
        written = count_writes(engine.store)
        inst = await engine.workflow("nap-after-work").create(params=shape)
        await drain(engine)
        record = await inst.record()
        assert record.status == "waiting" and record.ready_at == clock() + 60
        if shape == "in turn":
            # the step's result and the sleep's start: both with the finish
            assert written == []
        steps = {s.name: s for s in await inst.steps()}
        assert (steps["work"].status, steps["work"].output) == ("complete", "done")
        assert (steps["nap"].status, steps["nap"].wake_at) == ("waiting", clock() + 60)
        clock.advance(60)
        await drain(engine)
        assert (await inst.status()).output == "done"


async def test_a_fenced_out_finish_writes_none_of_its_records(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([chain], clock=clock, lease=30) as engine:
        store = engine.store
        inst = await engine.workflow("chain").create()
        (claim,) = (await store.claim("w1", ["chain"], 1, 30, store.now())).claims
        clock.advance(31)
        (taken,) = (await store.claim("w2", ["chain"], 1, 30, store.now())).claims
        assert taken.lease.token != claim.lease.token
        last = StepWrite("first", 1, 1, "do", "complete", "1", ended_at=store.now())
        with pytest.raises(LeaseLostError):
            await store.finish(
                claim.lease, Finish("complete", output="1", steps=(last,)), store.now()
            )
        assert await inst.steps() == []
        # the holder's finish writes them
        await store.finish(taken.lease, Finish("complete", output="1", steps=(last,)), store.now())
        assert [(s.name, s.status) for s in await inst.steps()] == [("first", "complete")]


@workflow(name="stoppable")
async def stoppable(event: WorkflowEvent, step: WorkflowStep) -> Any:
    async def slow() -> str:
        SEEN["running"].set()
        await SEEN["release"].wait()
        SEEN["runs"] = SEEN.get("runs", 0) + 1
        return "slow"

    first = await step.do("slow", slow)
    await step.sleep("nap", 1)
    return first


async def test_a_shutdown_writes_the_records_before_releasing_the_instance(
    make_engine: EngineFactory,
) -> None:
    """Stopped while a step runs: the step finishes (grace period), its record is written, the
    instance is released, and the next worker does not run the step again."""
    SEEN["running"], SEEN["release"] = asyncio.Event(), asyncio.Event()
    async with make_engine([stoppable]) as engine:
        inst = await engine.workflow("stoppable").create()
        running = asyncio.create_task(engine.worker.run())
        await asyncio.wait_for(SEEN["running"].wait(), 10)
        engine.worker.stop()
        await asyncio.sleep(0.05)
        SEEN["release"].set()
        await asyncio.wait_for(running, 10)
        record = await inst.record()
        assert record.status == "queued" and record.lease_owner is None
        assert [(s.name, s.status) for s in await inst.steps()] == [("slow", "complete")]
    async with make_engine([stoppable], worker=True) as engine:
        inst = await engine.workflow("stoppable").get(inst.id)
        assert (await inst.wait(timeout=10)).output == "slow"
    assert SEEN["runs"] == 1


async def test_a_shutdown_reaches_a_running_step_before_the_worker_leaves_the_fleet(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leaving the worker list is a database write, slow on a loaded server: a step that ends
    meanwhile must already know of the shutdown, and release the instance instead of going on
    to its sleep."""
    SEEN["running"], SEEN["release"] = asyncio.Event(), asyncio.Event()
    async with make_engine([stoppable]) as engine:
        heartbeat = engine.worker._heartbeat
        deregister = heartbeat.forget

        async def slow_deregister() -> None:
            await SEEN["left"].wait()
            await deregister()

        SEEN["left"] = asyncio.Event()
        monkeypatch.setattr(heartbeat, "forget", slow_deregister)
        inst = await engine.workflow("stoppable").create()
        running = asyncio.create_task(engine.worker.run())
        await asyncio.wait_for(SEEN["running"].wait(), 10)
        engine.worker.stop()
        await asyncio.sleep(0.05)
        SEEN["release"].set()  # the step ends while the worker is still leaving the fleet
        await asyncio.sleep(0.2)
        SEEN["left"].set()
        await asyncio.wait_for(running, 10)
        record = await inst.record()
        assert record.status == "queued" and record.lease_owner is None


@workflow(name="cut")
async def cut(event: WorkflowEvent, step: WorkflowStep) -> Any:
    async def one() -> int:
        return 1

    async def branch() -> None:
        await step.do("first", one)
        await step.do("second", one)  # commits "first" first, from this task: cancelled then

    running = asyncio.ensure_future(branch())  # as a DAG runs a branch
    await SEEN["write started"].wait()
    running.cancel()  # as a DAG cancels the branches still running when one fails
    with contextlib.suppress(asyncio.CancelledError):
        await running
    return 1


async def test_records_whose_write_a_cancellation_cut_off_go_with_the_finish(
    make_engine: EngineFactory,
) -> None:
    """A step task cancelled while it commits the records before it (a DAG cancels the branches
    still running when one fails): the records are not lost, the finish carries them."""
    SEEN["write started"] = asyncio.Event()
    async with make_engine([cut]) as engine:
        store = engine.store
        real = store.record_step

        async def cut_off(lease: Any, write: StepWrite, now: float) -> str:
            if write.name == "first" and not SEEN["write started"].is_set():
                SEEN["write started"].set()
                await asyncio.Event().wait()  # never returns: the cancellation ends it
            return await real(lease, write, now)

        store.record_step = cut_off  # type: ignore[method-assign]
        inst = await engine.workflow("cut").create()
        await asyncio.wait_for(drain(engine), 10)
        assert (await inst.status()).output == 1
        assert [(s.name, s.status) for s in await inst.steps()] == [("first", "complete")]


async def test_a_shutdown_lets_a_finish_in_flight_land(make_engine: EngineFactory) -> None:
    """Past the grace period, a shutdown cancels activations still running code, not one whose
    finish (carrying its last step records) is being written."""
    async with make_engine([chain], grace_period=0.05) as engine:
        SEEN["store"] = engine.store
        store = engine.store
        real = store.finish
        finishing = asyncio.Event()

        async def slow_finish(lease: Any, finish: Finish, now: float) -> str:
            finishing.set()
            await asyncio.sleep(0.3)  # longer than the grace period
            return await real(lease, finish, now)

        store.finish = slow_finish  # type: ignore[method-assign]
        inst = await engine.workflow("chain").create()
        running = asyncio.create_task(engine.worker.run())
        await asyncio.wait_for(finishing.wait(), 10)
        engine.worker.stop()
        await asyncio.wait_for(running, 10)
        assert (await inst.status()).status == "complete"
        assert [(s.name, s.status) for s in await inst.steps()] == [
            ("first", "complete"),
            ("second", "complete"),
        ]


@workflow(name="first-records")
async def first_records(event: WorkflowEvent, step: WorkflowStep) -> Any:
    def flaky() -> str:
        SEEN["flaky"] = SEEN.get("flaky", 0) + 1
        if SEEN["flaky"] == 1:
            raise RuntimeError("once")
        return "ok"

    await step.do("plain", lambda: 1)
    await step.do("flaky", {"retries": {"limit": 1, "delay": 0}}, flaky)
    got = await step.wait_for_event("approval", type="approval", timeout=60)
    await step.do("after", lambda: 2)
    return got.payload


async def test_writes_say_whether_the_step_has_a_record_yet(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    """``StepWrite.new`` (which lets PostgreSQL insert without looking for a record to replace)
    is set on a step's first record only: not on a retry's, nor on one after a suspension."""
    async with make_engine([first_records], clock=clock) as engine:
        writes: list[tuple[str, str, bool]] = []
        real = engine.store.record_step

        async def logging(lease: Any, write: StepWrite, now: float) -> str:
            writes.append((write.name, write.status, write.new))
            return await real(lease, write, now)

        engine.store.record_step = logging  # type: ignore[method-assign]
        inst = await engine.workflow("first-records").create()
        await drain(engine)
        await inst.send_event("approval", {"ok": True})
        await drain(engine)
        assert (await inst.status()).output == {"ok": True}
        # (Whether "flaky"'s result is written alone or goes with the suspension depends on
        # the store's timing; when alone, it is not new.)
        flags = {(name, status): new for name, status, new in writes}
        assert len(flags) == len(writes), writes
        assert flags.pop(("flaky", "complete"), False) is False
        assert flags == {
            ("plain", "complete"): True,
            ("flaky", "waiting"): True,  # the failed attempt, retried at once
            ("approval", "waiting"): True,  # then the activation suspends
            ("approval", "complete"): False,
        }


@workflow(name="work-then-wait")
async def work_then_wait(event: WorkflowEvent, step: WorkflowStep) -> Any:
    done = await step.do("work", lambda: "done")
    if event.payload == "nap":
        await step.sleep("nap", 0)  # over at once: recorded complete on its first call
        return done
    got = await step.wait_for_event("confirm", type="confirm", timeout="1 hour")
    return [done, got.payload]


@pytest.mark.parametrize("shape", ["event there", "no event yet", "nap"])
async def test_a_record_written_at_once_commits_after_the_records_sent_before_it(
    make_engine: EngineFactory, clock: ManualClock, shape: str
) -> None:
    # A wait that consumes an event, starts waiting or ends a sleep writes its record at once;
    # the step before it was sent write-behind. Were the wait's record to commit first, a crash
    # between the two commits would leave a history with the wait and not the step before it:
    # the replay would call a step with no record while a recorded one is not called yet, and
    # end the instance with a NonDeterminismError.
    async with make_engine([work_then_wait], clock=clock) as engine:
        seen_at_write = committed_before_each(engine.store, slow="work")
        inst = await engine.workflow("work-then-wait").create(
            params="nap" if shape == "nap" else None
        )
        if shape == "event there":
            await inst.send_event("confirm", "yes")
        await drain(engine)
        wait = "nap" if shape == "nap" else "confirm"
        assert "work" in seen_at_write[wait], seen_at_write
        if shape == "no event yet":
            await inst.send_event("confirm", "late")
            await drain(engine)
        steps = [(s.name, s.status) for s in await inst.steps()]
        assert steps == [("work", "complete"), (wait, "complete")]


@workflow(name="work-then-nap-beside")
async def work_then_nap_beside(event: WorkflowEvent, step: WorkflowStep) -> Any:
    async def slow() -> str:
        await asyncio.sleep(0.2)
        return "slow"

    async def worker() -> str:
        done: str = await step.do("work", lambda: "done")
        if event.payload == "await between":
            await asyncio.sleep(0.01)  # the workflow's own await: a later turn
        await step.sleep("nap", 60)
        return done

    if event.payload == "in a child task":
        done = await step.do("work", lambda: "done")
        await asyncio.gather(step.sleep("nap", 60), step.do("slow", slow))
        return done
    # A branch beside keeps the activation from suspending, so the records go out at once.
    done, _ = await asyncio.gather(worker(), step.do("slow", slow))
    return done


@pytest.mark.parametrize("shape", ["same turn", "await between", "in a child task"])
async def test_records_sent_one_after_the_other_commit_in_that_order(
    make_engine: EngineFactory, clock: ManualClock, shape: str
) -> None:
    # "work" then the start of "nap", both write-behind: were "nap" to commit first, a crash
    # between the two commits would leave a history whose replay diverges (as above).
    async with make_engine([work_then_nap_beside], clock=clock) as engine:
        seen_at_write = committed_before_each(engine.store, slow="work")
        inst = await engine.workflow("work-then-nap-beside").create(params=shape)
        await drain(engine)
        if "nap" in seen_at_write:  # else it went with the finish, after "work" committed
            assert "work" in seen_at_write["nap"], seen_at_write
        steps = {s.name: s.status for s in await inst.steps()}
        assert steps == {"work": "complete", "nap": "waiting", "slow": "complete"}
        clock.advance(60)
        await drain(engine)
        assert (await inst.status()).output == "done"
