"""Instances: create, ids, batches, lookups, listing, pause/resume/terminate/restart, wait."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from stepline import (
    IllegalStateError,
    InstanceAlreadyExistsError,
    InstanceNotFoundError,
    ManualClock,
    SyncEngine,
    WorkflowEvent,
    WorkflowNotFoundError,
    WorkflowStep,
    workflow,
)
from stepline.store.base import ChangeWatch
from stepline.store.sqlite import SqliteStore

from ..conftest import EngineFactory, drain

pytestmark = pytest.mark.both_loops  # the engine on the CLI's loop too

RUNS: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    RUNS.clear()


@workflow(name="three")
async def three(event: WorkflowEvent, step: WorkflowStep) -> Any:
    for name in ("one", "two", "three"):
        await step.do(name, lambda name=name: RUNS.append(name) or name)
        await step.sleep(f"after {name}", 10)
    return "done"


@workflow(name="noop")
async def noop(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return event.payload


async def test_create_defaults_and_status(make_engine: EngineFactory) -> None:
    async with make_engine([noop]) as engine:
        inst = await engine.workflow("noop").create()
        assert len(inst.id) == 36  # a UUID
        rec = await inst.record()
        assert rec.status == "queued" and rec.params is None and rec.trigger == "api"
        await drain(engine)
        assert (await inst.status()).status == "complete"


@pytest.mark.parametrize("bad", ["", "-x", "has space", "x" * 101, "a/b", "ü"])
async def test_invalid_ids_are_rejected(make_engine: EngineFactory, bad: str) -> None:
    async with make_engine([noop]) as engine:
        with pytest.raises(ValueError, match="instance id"):
            await engine.workflow("noop").create(id=bad)


async def test_valid_id_edges(make_engine: EngineFactory) -> None:
    """Ids at the edges of the pattern are accepted and kept exactly as given."""
    good = ("a", "_x", "9-a_b", "Mixed-Case_1", "x" * 100)
    async with make_engine([noop]) as engine:
        binding = engine.workflow("noop")
        for instance_id in good:
            assert (await binding.create(id=instance_id, params=instance_id)).id == instance_id
        await drain(engine)
        for instance_id in good:
            record = await (await binding.get(instance_id)).record()
            assert record.id == record.output == instance_id and record.status == "complete"
        page = await engine.list_instances("noop", limit=10)
        assert sorted(r.id for r in page.instances) == sorted(good)


async def test_duplicate_id(make_engine: EngineFactory) -> None:
    async with make_engine([noop]) as engine:
        await engine.workflow("noop").create(id="dup", params=1)
        with pytest.raises(InstanceAlreadyExistsError, match="dup"):
            await engine.workflow("noop").create(id="dup", params=2)
        assert (await (await engine.workflow("noop").get("dup")).record()).params == 1


async def test_params_limits(make_engine: EngineFactory) -> None:
    async with make_engine([noop], max_payload=100) as engine:
        with pytest.raises(ValueError, match="not JSON"):
            await engine.workflow("noop").create(params={"x": {1, object()}})
        with pytest.raises(ValueError, match="over the limit"):
            await engine.workflow("noop").create(params="x" * 200)


async def test_default_params_limit_is_one_mebibyte(make_engine: EngineFactory) -> None:
    async with make_engine([noop]) as engine:
        await engine.workflow("noop").create(params="x" * (1024 * 1024 - 10))
        with pytest.raises(ValueError, match="over the limit"):
            await engine.workflow("noop").create(params="x" * (1024 * 1024))


async def test_unknown_workflow_lists_known(make_engine: EngineFactory) -> None:
    async with make_engine([noop, three]) as engine:
        with pytest.raises(WorkflowNotFoundError, match="noop, three"):
            await engine.workflow("nope").create()


async def test_workflow_known_from_database_only(make_engine: EngineFactory) -> None:
    async with make_engine([noop]):
        pass
    async with make_engine([]) as client:  # a client that does not import the code
        inst = await client.workflow("noop").create(params=5)
        assert (await inst.status()).status == "queued"


async def test_create_batch_is_idempotent(make_engine: EngineFactory) -> None:
    async with make_engine([noop]) as engine:
        wf = engine.workflow("noop")
        await wf.create(id="b2", params="old")
        made = await wf.create_batch([{"id": "b1", "params": 1}, {"id": "b2", "params": 2}, {}])
        assert [m.id for m in made][:2] == ["b1", "b2"]
        assert (await (await wf.get("b2")).record()).params == "old"
        again = await wf.create_batch([{"id": "b1"}, {"id": "b3"}])
        assert [m.id for m in again] == ["b1", "b3"]
        page = await engine.list_instances("noop", limit=10)
        assert len(page.instances) == 4
        with pytest.raises(ValueError, match="unknown key"):
            await wf.create_batch([{"id": "x", "param": 1}])


async def test_get_unknown_instance(make_engine: EngineFactory) -> None:
    async with make_engine([noop]) as engine:
        with pytest.raises(InstanceNotFoundError, match="missing"):
            await engine.workflow("noop").get("missing")


async def test_list_instances_pages_newest_first(make_engine: EngineFactory) -> None:
    async with make_engine([noop, three]) as engine:
        for i in range(7):
            await engine.workflow("noop").create(id=f"n{i}")
        await engine.workflow("three").create(id="t0")
        page = await engine.list_instances("noop", limit=3)
        ids = [i.id for i in page.instances]
        assert ids == ["n6", "n5", "n4"]
        while page.cursor:
            page = await engine.list_instances("noop", limit=3, cursor=page.cursor)
            ids += [i.id for i in page.instances]
        assert ids == [f"n{i}" for i in range(6, -1, -1)]
        every = await engine.list_instances(limit=100)
        assert next(i.id for i in every.instances) == "t0"
        await drain(engine)
        done = await engine.list_instances(status="complete", limit=100)
        assert {i.id for i in done.instances} == {f"n{i}" for i in range(7)}
        with pytest.raises(ValueError, match="cursor"):
            await engine.list_instances(cursor="!!garbage!!")


async def test_pause_and_resume_waiting_instance(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([three], clock=clock) as engine:
        inst = await engine.workflow("three").create()
        await drain(engine)
        await inst.pause()
        assert (await inst.status()).status == "paused"
        clock.advance(100)
        assert await engine.worker.run_once() == 0  # paused: not run even when due
        await inst.resume()
        await drain(engine)
        assert RUNS == ["one", "two"]
        with pytest.raises(IllegalStateError, match="resume"):
            await inst.resume()


async def test_pause_running_instance_takes_effect_after_the_step(
    make_engine: EngineFactory,
) -> None:
    gate = asyncio.Event()
    holder: dict[str, Any] = {}

    async def long_step() -> str:
        await holder["inst"].pause()
        assert (await holder["inst"].status()).status == "waitingForPause"
        gate.set()
        return "finished anyway"

    @workflow(name="pausable")
    async def pausable(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("long", long_step)
        await step.do("next", lambda: RUNS.append("next"))
        return "end"

    async with make_engine([pausable]) as engine:
        holder["inst"] = inst = await engine.workflow("pausable").create()
        await drain(engine)
        assert gate.is_set()
        assert (await inst.status()).status == "paused"
        steps = await inst.steps()
        assert [s.display_name for s in steps] == ["long-1"]  # 'next' did not start
        await inst.resume()
        await drain(engine)
        assert (await inst.status()).output == "end"
        assert RUNS == ["next"]


async def test_terminate(make_engine: EngineFactory) -> None:
    async with make_engine([three]) as engine:
        inst = await engine.workflow("three").create()
        await drain(engine)
        await inst.terminate()
        assert (await inst.status()).status == "terminated"
        assert await engine.worker.run_once() == 0
        with pytest.raises(IllegalStateError, match="terminate"):
            await inst.terminate()
        done = await engine.workflow("noop" if False else "three").create()
        await done.terminate()


async def test_terminate_completed_instance_is_illegal(make_engine: EngineFactory) -> None:
    async with make_engine([noop]) as engine:
        inst = await engine.workflow("noop").create()
        await drain(engine)
        with pytest.raises(IllegalStateError, match="complete"):
            await inst.terminate()
        with pytest.raises(IllegalStateError):
            await inst.pause()
        assert (await inst.status()).status == "complete"


async def test_restart_from_start_and_from_step(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([three], clock=clock) as engine:
        inst = await engine.workflow("three").create()
        for _ in range(4):
            await drain(engine)
            clock.advance(10)
        assert (await inst.status()).status == "complete"
        assert RUNS == ["one", "two", "three"]
        RUNS.clear()
        await inst.restart(from_step="two")
        assert (await inst.status()).status == "queued"
        names = [s.display_name for s in await inst.steps()]
        assert names == ["one-1", "after one-1"]
        for _ in range(4):
            await drain(engine)
            clock.advance(10)
        assert RUNS == ["two", "three"]
        RUNS.clear()
        await inst.restart()
        assert await inst.steps() == []
        for _ in range(4):
            await drain(engine)
            clock.advance(10)
        assert RUNS == ["one", "two", "three"]
        assert (await inst.status()).output == "done"
        with pytest.raises(ValueError, match="no recorded step"):
            await inst.restart(from_step="nope")


async def test_restart_terminated_and_errored_instances(make_engine: EngineFactory) -> None:
    async with make_engine([three]) as engine:
        inst = await engine.workflow("three").create()
        await inst.terminate()
        await inst.restart()
        await drain(engine)
        assert (await inst.status()).status == "waiting"


async def test_wait_returns_final_status(make_engine: EngineFactory) -> None:
    async with make_engine([noop], worker=True) as engine:
        inst = await engine.workflow("noop").create(params={"x": 1})
        status = await inst.wait(timeout=10)
        assert status.status == "complete" and status.output == {"x": 1}


async def test_an_end_that_lands_while_wait_reads_wakes_it_at_once(
    make_engine: EngineFactory,
) -> None:
    """wait() reads the status, then waits for a change: the instance ending while that read is
    in flight must not be missed. The wait's fallback poll (1 s on PostgreSQL, 5 ms at first on
    SQLite) is made 60 s here, so that only the change signal can wake it in time."""
    async with make_engine([noop]) as engine:
        inst = await engine.workflow("noop").create()
        store = engine.store
        read = store.get_instance
        reads = 0
        watch_changes = store.signals.watch_changes

        @contextlib.contextmanager
        def slow_polling(workflow: str, instance_id: str) -> Iterator[ChangeWatch]:
            with watch_changes(workflow, instance_id) as changes:
                wait = changes.wait
                changes.wait = lambda timeout: wait(60.0)  # type: ignore[method-assign]
                yield changes

        store.signals.watch_changes = slow_polling  # type: ignore[method-assign]

        async def read_then_end(workflow: str, instance_id: str) -> Any:
            nonlocal reads
            reads += 1
            record = await read(workflow, instance_id)
            if reads == 1:
                await drain(engine)  # the instance ends after the read saw it queued
            return record

        store.get_instance = read_then_end  # type: ignore[method-assign]
        started = time.monotonic()
        status = await inst.wait(timeout=120)
        assert status.status == "complete" and reads == 2
        # Far below the 60 s a missed end would sleep, with room for a busy machine.
        assert time.monotonic() - started < 20, "the wait missed the end and slept"


async def test_a_change_before_the_wait_is_kept_by_the_watch(make_engine: EngineFactory) -> None:
    """A watch sees changes from the moment it starts, not from the moment one waits on it."""
    async with make_engine([noop]) as engine:
        inst = await engine.workflow("noop").create()
        with engine.store.signals.watch_changes("noop", inst.id) as changes:
            await drain(engine)  # the instance changes before anyone waits
            started = time.monotonic()
            await changes.wait(30.0)
            assert time.monotonic() - started < 10  # not the 30 s of a change missed
            with pytest.raises(TimeoutError):  # once seen, a change is not reported twice
                await asyncio.wait_for(changes.wait(30.0), 0.05)


async def test_wait_times_out(make_engine: EngineFactory) -> None:
    async with make_engine([noop]) as engine:
        inst = await engine.workflow("noop").create()
        with pytest.raises(TimeoutError, match="queued"):
            await inst.wait(timeout=0.05)


async def test_list_workflows_counts(make_engine: EngineFactory) -> None:
    async with make_engine([noop, three]) as engine:
        await engine.workflow("noop").create()
        await engine.workflow("noop").create()
        await engine.workflow("three").create()
        await drain(engine)
        infos = {w.name: w for w in await engine.list_workflows()}
        assert infos["noop"].counts == {"complete": 2}
        assert infos["three"].counts == {"waiting": 1}
        assert infos["noop"].class_name.endswith(":noop")


def test_sync_facade(store_url: str) -> None:
    with SyncEngine(store_url, [noop], worker=True) as engine:
        inst = engine.workflow("noop").create(id="s", params=[1])
        assert inst.wait(timeout=10).output == [1]
        assert engine.workflow("noop").get("s").status().status == "complete"
        assert [i.id for i in engine.list_instances().instances] == ["s"]
        with pytest.raises(InstanceNotFoundError):
            engine.workflow("noop").get("zzz")


async def test_retention_deletes_old_finished_instances(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([noop, three], clock=clock, retention="7 days") as engine:
        old = await engine.workflow("noop").create(id="old")
        await drain(engine)
        clock.advance(6 * 86400)
        recent = await engine.workflow("noop").create(id="recent")
        sleeping = await engine.workflow("three").create(id="sleeping")
        await drain(engine)
        clock.advance(86400 + 1)
        assert await engine.worker.purge_now() == 1
        with pytest.raises(InstanceNotFoundError):
            await old.status()
        assert (await recent.status()).status == "complete"
        assert (await sleeping.status()).status == "waiting"  # unfinished: never deleted
        assert await engine.worker.purge_now() == 0


async def test_resume_while_waiting_for_pause_lets_it_continue(make_engine: EngineFactory) -> None:
    """The activation has seen the pause request; a resume lands before it ends."""
    holder: dict[str, Any] = {}
    paused = asyncio.Event()
    resumer_running = asyncio.Event()

    async def pauser() -> str:
        # Only once the resumer's step runs: a pause seen before it started would (rightly) keep
        # it from starting at all.
        await resumer_running.wait()
        await holder["inst"].pause()
        paused.set()
        return "paused"

    async def resumer() -> str:
        resumer_running.set()
        await paused.wait()
        await asyncio.sleep(0.05)  # after the pauser's write told the activation to stop
        await holder["inst"].resume()
        return "resumed"

    @workflow(name="flipflop")
    async def flipflop(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await asyncio.gather(step.do("pauser", pauser), step.do("resumer", resumer))
        await step.do("next", lambda: RUNS.append("next"))
        return "end"

    async with make_engine([flipflop]) as engine:
        holder["inst"] = inst = await engine.workflow("flipflop").create()
        await drain(engine)
        assert (await inst.status()).output == "end"
        assert RUNS == ["next"]


async def test_unexpected_error_in_a_write_fails_alone(make_engine: EngineFactory) -> None:
    async with make_engine([three]) as engine:
        inst = await engine.workflow("three").create()
        with pytest.raises(ValueError, match="step count"):
            await inst.restart(from_step="one", count=10**30)
        store = engine.store
        if isinstance(store, SqliteStore):  # its group commit: a broken op must not wedge it

            def broken(conn: Any) -> None:
                raise OverflowError("boom")

            with pytest.raises(Exception, match="boom"):
                await asyncio.wait_for(store._db.write(broken), 5)
        await engine.workflow("three").create(id="after")  # the store still works
