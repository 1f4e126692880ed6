"""Replays that leave the recorded history end the instance with NonDeterminismError, before the
new step runs; parallel replays (gather, DAG branches) whose start order varies never do. The
testing toolkit's replay check (``env.replay``) must give the engine's own verdict."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from stepline import Dag, ManualClock, WorkflowEvent, WorkflowStep, workflow
from stepline.errors import StoreError
from stepline.testing import ReplayError, TestInstance, WorkflowTestEnv

from ..conftest import EngineFactory, TestEnvFactory, drain

CALLS: dict[str, int] = {}
VERSION = {"v": 1}


def bump(key: str, value: Any = None) -> Any:
    CALLS[key] = CALLS.get(key, 0) + 1
    return value if value is not None else key


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()
    VERSION["v"] = 1


@workflow(name="versioned")
async def versioned(event: WorkflowEvent, step: WorkflowStep) -> Any:
    """One workflow whose code changes between activations, per ``event.payload["change"]``."""
    change = event.payload["change"] if VERSION["v"] == 2 else None
    first = "charge card" if change == "rename" else "charge"
    if change != "insert-before-sleep":
        await step.do(first, lambda: bump(first))
    else:
        await step.do("charge", lambda: bump("charge"))
        await step.do("inserted", lambda: bump("inserted"))
    if change == "reorder":  # the step after the sleep moved before it
        await step.do("ship", lambda: bump("ship"))
    if change != "remove-sleep":
        await step.sleep("wait", 10)
    await step.do("audit", lambda: bump("audit"))
    if change != "reorder":
        await step.do("ship", lambda: bump("ship"))
    if change == "append":
        await step.do("notify", lambda: bump("notify"))
    return "done"


async def replay_verdict(env: WorkflowTestEnv, inst: TestInstance) -> str | None:
    """What the toolkit's replay check says of ``inst`` under today's code (None: it follows)."""
    try:
        await env.replay(inst)
    except ReplayError as exc:
        return str(exc)
    return None


async def run_changed(make_test_env: TestEnvFactory, change: str) -> tuple[Any, list[str]]:
    """Start an instance under v1 (it sleeps at 'wait' after 'charge'), switch to v2, wake it;
    return its status and the names of its recorded steps. The replay check run before the
    wake must foresee what the engine then does: the same divergence, or none."""
    async with make_test_env([versioned]) as env:
        inst = await env.create("versioned", params={"change": change})
        assert (await inst.status()).status == "waiting"
        VERSION["v"] = 2
        foreseen = await replay_verdict(env, inst)
        await env.advance(11)
        status = await inst.status()
        assert_foreseen(foreseen, inst, status)
        if status.status == "complete":
            assert await replay_verdict(env, inst) is None
        return status, [s.display_name for s in await inst.steps()]


def assert_foreseen(foreseen: str | None, inst: TestInstance, status: Any) -> None:
    if status.status != "errored":
        assert foreseen is None, foreseen
        return
    label = f"{inst.workflow}/{inst.id}"
    assert foreseen == f"replay of {label} diverged: {status.error['message']}"


def assert_diverged(status: Any, *names: str) -> None:
    assert status.status == "errored", status
    assert status.error["name"] == "NonDeterminismError", status.error
    for name in names:
        assert repr(name) in status.error["message"], (name, status.error["message"])


async def test_a_step_renamed_while_sleeping_is_divergence_and_never_runs(
    make_test_env: TestEnvFactory,
) -> None:
    status, steps = await run_changed(make_test_env, "rename")
    assert_diverged(status, "charge-1", "wait-1", "charge card-1")
    assert "charge card" not in CALLS  # held, then failed: its callback never ran
    assert CALLS == {"charge": 1}
    assert steps == ["charge-1", "wait-1"]  # nothing recorded for the new name


async def test_a_step_moved_before_a_recorded_one_is_divergence(
    make_test_env: TestEnvFactory,
) -> None:
    status, steps = await run_changed(make_test_env, "reorder")
    assert_diverged(status, "ship-1", "wait-1")
    assert "ship" not in CALLS
    assert steps == ["charge-1", "wait-1"]


async def test_a_step_inserted_before_recorded_ones_is_divergence(
    make_test_env: TestEnvFactory,
) -> None:
    status, _ = await run_changed(make_test_env, "insert-before-sleep")
    assert_diverged(status, "inserted-1", "wait-1")
    assert "inserted" not in CALLS


async def test_a_removed_recorded_step_is_divergence(make_test_env: TestEnvFactory) -> None:
    # The sleep is gone: replay reaches 'audit' (new) while 'wait' was never called.
    status, _ = await run_changed(make_test_env, "remove-sleep")
    assert_diverged(status, "wait-1", "audit-1")
    assert "audit" not in CALLS


async def test_run_returning_without_its_recorded_steps_is_divergence(
    make_test_env: TestEnvFactory,
) -> None:
    @workflow(name="shrinks")
    async def shrinks(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("a", lambda: bump("a"))
        if VERSION["v"] == 1:
            await step.do("b", lambda: bump("b"))
            await step.sleep("wait", 10)
        return "done"

    async with make_test_env([shrinks]) as env:
        inst = await env.create("shrinks")
        await env.run_until_idle()
        VERSION["v"] = 2
        foreseen = await replay_verdict(env, inst)
        await env.advance(11)
        assert_diverged(await inst.status(), "b-1", "wait-1")
        assert "returned without calling" in (await inst.status()).error["message"]
        assert_foreseen(foreseen, inst, await inst.status())


async def test_steps_added_after_the_recorded_ones_are_allowed(
    make_test_env: TestEnvFactory,
) -> None:
    status, steps = await run_changed(make_test_env, "append")
    assert (status.status, status.output) == ("complete", "done"), status
    assert steps == ["charge-1", "wait-1", "audit-1", "ship-1", "notify-1"]
    assert CALLS == {"charge": 1, "audit": 1, "ship": 1, "notify": 1}


async def test_unchanged_code_replays_without_divergence(make_test_env: TestEnvFactory) -> None:
    status, steps = await run_changed(make_test_env, "none")
    assert (status.status, status.output) == ("complete", "done"), status
    assert steps == ["charge-1", "wait-1", "audit-1", "ship-1"]
    assert CALLS == {"charge": 1, "audit": 1, "ship": 1}


async def test_loops_replay_by_occurrence_and_a_longer_loop_before_a_sleep_diverges(
    make_test_env: TestEnvFactory,
) -> None:
    @workflow(name="looped")
    async def looped(event: WorkflowEvent, step: WorkflowStep) -> Any:
        for n in range(event.payload["n"] + (VERSION["v"] == 2 and event.payload["grow"])):
            await step.do("item", lambda n=n: bump(f"item{n}", n))
        await step.sleep("wait", 10)
        for _ in range(2):
            await step.do("after", lambda: bump("after"))
        return "done"

    async with make_test_env([looped]) as env:
        same = await env.create("looped", params={"n": 3, "grow": 0})
        grown = await env.create("looped", params={"n": 3, "grow": 1})
        await env.run_until_idle()
        VERSION["v"] = 2
        foreseen = [await replay_verdict(env, inst) for inst in (same, grown)]
        await env.advance(11)
        assert_foreseen(foreseen[0], same, await same.status())
        assert_foreseen(foreseen[1], grown, await grown.status())
        assert (await same.status()).status == "complete"
        names = [s.display_name for s in await same.steps()]
        assert names == ["item-1", "item-2", "item-3", "wait-1", "after-1", "after-2"]
        assert_diverged(await grown.status(), "item-4", "wait-1")
        assert "item3" not in CALLS  # the fourth occurrence never ran
        assert CALLS["after"] == 2  # only the unchanged instance's


@workflow(name="fanout")
async def fanout(event: WorkflowEvent, step: WorkflowStep) -> Any:
    """Branches in parallel, each with its own random callback delays and sleeps, so that the
    order in which branches reach their steps differs from one activation to the next."""
    rng = random.Random(f"{event.payload['seed']}-{CALLS.get('activation', 0)}")
    delays = {f"{b}-{k}": rng.random() * 0.01 for b in range(4) for k in range(3)}

    def work(name: str) -> Any:
        async def call() -> str:
            await asyncio.sleep(delays[name])
            return bump(name)

        return call

    async def branch(b: int) -> list[str]:
        first = await step.do(f"{b}-0", work(f"{b}-0"))
        await step.sleep(f"{b}-nap", 1 + (b + event.payload["seed"]) % 3)
        second = await step.do(f"{b}-1", work(f"{b}-1"))
        third = await step.do(f"{b}-2", work(f"{b}-2"))
        return [first, second, third]

    return await asyncio.gather(*(branch(b) for b in range(4)))


async def test_gather_replays_with_shuffled_timing_never_diverge(
    make_test_env: TestEnvFactory,
) -> None:
    async with make_test_env([fanout]) as env:
        insts = [await env.create("fanout", params={"seed": seed}) for seed in range(4)]
        for _ in range(5):  # a wake-up per second: each activation replays a different mix
            CALLS["activation"] = CALLS.get("activation", 0) + 1
            await env.run_until_idle()
            await env.advance(1)
        await env.run_until_idle()
        for inst in insts:
            status = await inst.status()
            assert status.status == "complete", status
            assert status.output == [[f"{b}-{k}" for k in range(3)] for b in range(4)]
            await env.replay(inst)  # nor does the replay check
        for b in range(4):
            for k in range(3):
                assert CALLS[f"{b}-{k}"] == len(insts)  # each step ran once per instance


def build_dag() -> Dag:
    dag = Dag("shuffled-dag")
    flaky: dict[str, int] = {}

    def node(name: str) -> Any:
        async def fn(ctx: Any, info: Any) -> dict[str, Any]:
            await asyncio.sleep(random.random() * 0.01)
            # Each node fails its first attempts a random number of times (retry delays park it
            # while its siblings go on), so activations replay different frontiers.
            fails = flaky.setdefault(f"{info.instance_id}-{name}", random.randrange(3))
            if info.attempt <= fails:
                raise RuntimeError(f"{name} flakes")
            bump(name)
            return {name: True}

        return fn

    retries = {"limit": 5, "delay": "1 second", "backoff": "constant"}
    dag.step(name="root", retries=retries)(node("root"))
    for branch in ("a", "b", "c"):
        dag.step(name=f"{branch}1", depends_on=["root"], retries=retries)(node(f"{branch}1"))
        dag.step(name=f"{branch}2", depends_on=[f"{branch}1"], retries=retries)(node(f"{branch}2"))
    dag.step(name="join", depends_on=["a2", "b2", "c2"], retries=retries)(node("join"))
    return dag


async def test_dag_replays_with_shuffled_timing_never_diverge(
    make_test_env: TestEnvFactory,
) -> None:
    random.seed(17)
    async with make_test_env([build_dag()]) as env:
        insts = [await env.create("shuffled-dag") for _ in range(4)]
        for _ in range(12):
            await env.run_until_idle()
            await env.advance(1)
        await env.run_until_idle()
        for inst in insts:
            status = await inst.status()
            assert status.status == "complete", status
            await env.replay(inst)  # nor does the replay check
        assert all(CALLS[n] == len(insts) for n in CALLS), CALLS


async def test_a_dag_node_reached_before_its_recorded_siblings_is_held_not_failed(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    """root -> (x, y), y -> z, (x, z) -> join. The first activation records root, y and z while
    x runs, then dies before x's record. The replay starts x (new) before y and z are called
    again (x comes first in the graph's order): x must wait for them, not be taken for a
    divergence, and then run again."""
    dag = Dag("held-dag")
    z_done = asyncio.Event()
    fail = {"x": False}

    @dag.step()
    def root(ctx: Any) -> dict[str, Any]:
        return {"root": bump("root")}

    @dag.step(depends_on=["root"])
    async def x(ctx: Any) -> dict[str, Any]:
        if CALLS.get("x", 0) == 0:
            await z_done.wait()
            fail["x"] = True  # this worker "dies": x's record is never written
        return {"x": bump("x")}

    @dag.step(depends_on=["root"])
    def y(ctx: Any) -> dict[str, Any]:
        return {"y": bump("y")}

    @dag.step(depends_on=["y"])
    def z(ctx: Any) -> dict[str, Any]:
        return {"z": bump("z")}

    @dag.step(depends_on=["x", "z"])
    def join(ctx: Any) -> dict[str, Any]:
        return {"join": bump("join")}

    async with make_engine([dag], clock=clock, lease=30) as engine:
        store = engine.store
        real = store.record_step

        async def dies_at_x(lease: Any, write: Any, now: float) -> str:
            if fail["x"] and write.name == "x":
                raise StoreError("the worker died")
            return await real(lease, write, now)

        store.record_step = dies_at_x  # type: ignore[method-assign]
        inst = await engine.workflow("held-dag").create()

        async def release_x() -> None:
            while True:  # z's record committed: the abandoned activation got that far
                steps = {s.name: s.status for s in await inst.steps()}
                if steps.get("z") == "complete":
                    z_done.set()
                    return
                await asyncio.sleep(0.005)

        watcher = asyncio.ensure_future(release_x())
        await drain(engine)
        await asyncio.wait_for(watcher, 10)
        await drain(engine)
        assert (await inst.status()).status == "running"  # abandoned, lease still held
        assert [s.name for s in await inst.steps()] == ["root", "y", "z"]
        fail["x"] = False
        clock.advance(31)
        await drain(engine)
        status = await inst.status()
        assert status.status == "complete", status
        assert CALLS == {"root": 1, "y": 1, "z": 1, "x": 2, "join": 1}
