"""Child workflows: ``step.start_workflow`` / ``step.wait_for_workflow``, in code-first workflows
and as DAG nodes. Durable and idempotent starts, wake-ups, failures, timeouts, replays."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from stepline import (
    Dag,
    Engine,
    ManualClock,
    NonRetryableError,
    StepTimeoutError,
    WorkflowEvent,
    WorkflowFailedError,
    WorkflowStep,
    workflow,
)
from stepline.dag import node_states
from stepline.store.base import Finish, NewInstance

from ..conftest import EngineFactory, TestEnvFactory, drain

pytestmark = pytest.mark.both_loops  # the engine on the CLI's loop too

RUNS: list[Any] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    RUNS.clear()


def explode() -> None:
    raise NonRetryableError("child exploded")


@workflow(name="child")
async def child(event: WorkflowEvent, step: WorkflowStep) -> Any:
    params = event.payload or {}
    if params.get("nap"):
        await step.sleep("nap", params["nap"])
    if params.get("fail"):
        await step.do("explode", explode)

    def double() -> int:
        RUNS.append(("child", event.instance_id))
        return int(params.get("n", 0)) * 2

    return await step.do("double", double)


@workflow(name="parent")
async def parent(event: WorkflowEvent, step: WorkflowStep) -> Any:
    """Starts a child, waits for it, then optionally sleeps (to replay afterwards)."""
    params = event.payload
    child_id = await step.start_workflow("child", params["child"], id=params.get("child_id"))
    try:
        output = await step.wait_for_workflow(
            "child", child_id, timeout=params.get("timeout", 3600)
        )
    except WorkflowFailedError as exc:
        if not params.get("catch"):
            raise
        return {"failed": exc.status, "error": exc.error, "id": exc.instance_id}
    except StepTimeoutError as exc:
        return {"timed_out": str(exc)}
    if params.get("then_sleep"):
        await step.sleep("after", params["then_sleep"])
    return {"id": child_id, "output": output}


async def child_instances(engine: Engine) -> list[str]:
    page = await engine.list_instances("child", limit=100)
    return sorted(rec.id for rec in page.instances)


async def test_parent_gets_the_child_output_and_is_woken_when_it_ends(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    """The parent waits with a one-hour timeout; the child's end wakes it without any clock
    movement (otherwise it would only notice at the timeout)."""
    async with make_engine([parent, child], clock=clock) as engine:
        inst = await engine.workflow("parent").create(id="p1", params={"child": {"n": 21}})
        await drain(engine)
        status = await inst.status()
        assert status.status == "complete", status
        assert status.output == {"id": "p1-child-1", "output": 42}
        child_rec = await (await engine.workflow("child").get("p1-child-1")).record()
        assert child_rec.trigger == "workflow"
        assert child_rec.parent == {"workflow": "parent", "id": "p1", "step": "start child-1"}
        steps = {s.display_name: s for s in await inst.steps()}
        assert steps["start child-1"].kind == "start_workflow"
        assert steps["wait child p1-child-1-1"].info == {"workflow": "child", "id": "p1-child-1"}


async def test_explicit_child_id_names_the_start_step(make_engine: EngineFactory) -> None:
    async with make_engine([parent, child]) as engine:
        inst = await engine.workflow("parent").create(
            id="p1", params={"child": {"n": 1}, "child_id": "kid"}
        )
        await drain(engine)
        assert (await inst.status()).output == {"id": "kid", "output": 2}
        names = [s.display_name for s in await inst.steps()]
        assert names == ["start child kid-1", "wait child kid-1"]


async def test_replay_does_not_start_a_second_child(make_test_env: TestEnvFactory) -> None:
    """After the child ended the parent sleeps; its replay passes start_workflow again."""
    async with make_test_env([parent, child]) as env:
        inst = await env.create("parent", id="p1", params={"child": {"n": 2}, "then_sleep": 60})
        assert (await inst.status()).status == "waiting"
        await env.advance(60)
        assert (await inst.status()).output == {"id": "p1-child-1", "output": 4}
        assert await child_instances(env.engine) == ["p1-child-1"]
        assert RUNS == [("child", "p1-child-1")]


@pytest.mark.parametrize("child_id", [None, "given-id"])
async def test_crash_between_create_and_record_does_not_duplicate_the_child(
    make_engine: EngineFactory, clock: ManualClock, child_id: str | None
) -> None:
    """A worker created the child, then died before recording the start step: the next
    activation starts the same id again, which is skipped, so there is still one child."""
    expected_id = child_id or "p1-child-1"
    async with make_engine([parent, child], clock=clock, lease=30) as engine:
        store = engine.store
        inst = await engine.workflow("parent").create(
            id="p1", params={"child": {"n": 5}, "child_id": child_id}
        )
        (claim,) = (await store.claim("crashed", ["parent"], 1, 30, store.now())).claims
        step = "start child-1" if child_id is None else f"start child {child_id}-1"
        parent_json = f'{{"workflow":"parent","id":"p1","step":"{step}"}}'
        await store.create_instances(
            "child",
            [NewInstance(expected_id, '{"n": 5}', parent_json)],
            trigger="workflow",
            skip_existing=True,
        )
        assert claim.lease.owner == "crashed"
        clock.advance(31)
        await drain(engine)
        assert (await inst.status()).output == {"id": expected_id, "output": 10}
        assert await child_instances(engine) == [expected_id]
        assert [("child", expected_id)] == RUNS


@pytest.mark.parametrize("catch", [True, False])
async def test_a_failed_child_raises_in_the_parent(make_engine: EngineFactory, catch: bool) -> None:
    async with make_engine([parent, child]) as engine:
        inst = await engine.workflow("parent").create(
            id="p1", params={"child": {"fail": True}, "catch": catch}
        )
        await drain(engine)
        status = await inst.status()
        child_error = {"name": "NonRetryableError", "message": "child exploded"}
        if catch:
            assert status.output == {"failed": "errored", "error": child_error, "id": "p1-child-1"}
        else:
            assert status.status == "errored"
            assert status.error == {
                "name": "WorkflowFailedError",
                "message": "workflow 'child' instance 'p1-child-1' ended errored: "
                "NonRetryableError: child exploded",
            }
        (wait,) = [s for s in await inst.steps() if s.kind == "wait_for_workflow"]
        assert wait.status == "errored"
        assert wait.info == {
            "workflow": "child",
            "id": "p1-child-1",
            "status": "errored",
            "child_error": child_error,
        }


async def test_a_terminated_child_wakes_the_parent(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([parent, child], clock=clock) as engine:
        inst = await engine.workflow("parent").create(
            id="p1", params={"child": {"nap": 86400}, "catch": True}
        )
        await drain(engine)
        assert (await inst.status()).status == "waiting"
        await (await engine.workflow("child").get("p1-child-1")).terminate()
        await drain(engine)  # no clock movement: the termination woke the parent
        assert (await inst.status()).output == {
            "failed": "terminated",
            "error": None,
            "id": "p1-child-1",
        }


async def test_parent_replaying_after_the_child_finished_uses_the_recorded_output(
    make_test_env: TestEnvFactory,
) -> None:
    async with make_test_env([parent, child]) as env:
        inst = await env.create("parent", id="p1", params={"child": {"n": 4}, "then_sleep": 30})
        assert (await inst.status()).status == "waiting"
        # the child is gone: a replay that asked the database again would fail
        assert await env.engine.store.retention.delete_instances("child", ["p1-child-1"]) == 1
        await env.advance(30)
        assert (await inst.status()).output == {"id": "p1-child-1", "output": 8}


async def test_waiting_for_a_child_times_out(make_test_env: TestEnvFactory) -> None:
    async with make_test_env([parent, child]) as env:
        inst = await env.create(
            "parent", id="p1", params={"child": {"nap": 86400}, "timeout": "10 seconds"}
        )
        assert (await inst.status()).status == "waiting"
        rec = await inst.client.record()
        assert rec.ready_at == pytest.approx(env.now() + 10)
        await env.advance(10)
        assert (await inst.status()).output == {
            "timed_out": "child p1-child-1 did not end within 10 seconds"
        }
        (wait,) = [s for s in await inst.steps() if s.kind == "wait_for_workflow"]
        assert wait.status == "errored" and wait.error is not None
        assert wait.error["name"] == "StepTimeoutError"
        # the child keeps running on its own
        assert (await (await env.get("child", "p1-child-1")).status()).status == "waiting"


async def test_child_ending_while_the_parent_runs_is_not_missed(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    """The parent saw the child unfinished and is about to suspend when the child ends: the
    parent's suspension must make it runnable at once, not at its timeout."""
    async with make_engine([parent, child], clock=clock) as engine:
        store = engine.store
        await engine.workflow("parent").create(id="p1", params={"child": {}})
        await store.create_instances(
            "child",
            [NewInstance("c1", None, '{"workflow":"parent","id":"p1","step":"start child-1"}')],
            trigger="workflow",
            skip_existing=False,
        )
        claims = (await store.claim("w", ["parent", "child"], 10, 30, store.now())).claims
        by_id = {c.instance.id: c for c in claims}
        await store.finish(by_id["c1"].lease, Finish("complete", output="1"), store.now())
        status = await store.finish(
            by_id["p1"].lease,
            Finish("waiting", wake_at=store.now() + 3600, event_seq=by_id["p1"].event_seq),
            store.now(),
        )
        assert status == "waiting"
        rec = await (await engine.workflow("parent").get("p1")).record()
        assert rec.ready_at == pytest.approx(store.now())


async def test_concurrent_starts_of_one_workflow(make_engine: EngineFactory) -> None:
    @workflow(name="fan-out")
    async def fan_out(event: WorkflowEvent, step: WorkflowStep) -> Any:
        ids = await asyncio.gather(
            *(step.start_workflow("child", {"n": n}, id=f"kid-{n}") for n in (1, 2, 3))
        )
        return await asyncio.gather(*(step.wait_for_workflow("child", i) for i in ids))

    async with make_engine([fan_out, child]) as engine:
        inst = await engine.workflow("fan-out").create(id="f")
        await drain(engine)
        assert (await inst.status()).output == [2, 4, 6]
        assert await child_instances(engine) == ["kid-1", "kid-2", "kid-3"]


# -- child workflows as DAG nodes ------------------------------------------------------------------


def doubling_dag() -> Dag:
    dag = Dag("children")

    @dag.step()
    def prepare(ctx: Mapping[str, Any]) -> dict[str, Any]:
        return {"n": ctx["base"] + 1}

    dag.child("left", workflow="child", depends_on=["prepare"], params=lambda ctx: {"n": ctx["n"]})
    dag.child("right", workflow="child", depends_on=["prepare"], params={"n": 100})
    dag.child("fire", workflow="child", depends_on=["prepare"], wait=False)

    @dag.step(depends_on=["left", "right", "fire"])
    def total(ctx: Mapping[str, Any]) -> dict[str, Any]:
        return {"total": ctx["left"] + ctx["right"], "fired": ctx["fire"]}

    return dag


async def test_dag_child_nodes(make_engine: EngineFactory) -> None:
    dag = doubling_dag()
    async with make_engine([dag, child]) as engine:
        inst = await engine.workflow(dag).create(id="d1", params={"base": 1})
        await drain(engine)
        status = await inst.status()
        assert status.status == "complete", status
        assert status.output is not None
        assert status.output["total"] == 2 * 2 + 200
        assert status.output["fired"] == "d1-fire"
        assert await child_instances(engine) == ["d1-fire", "d1-left", "d1-right"]
        fired = await (await engine.workflow("child").get("d1-fire")).record()
        assert fired.params == {"base": 1, "n": 2}  # default params: the node's context
        states = node_states(dag.describe(), await inst.steps(), inst.id)
        assert states == dict.fromkeys(["prepare", "left", "right", "fire", "total"], "complete")
        nodes = {n["name"]: n for n in dag.describe()["nodes"]}
        assert nodes["left"]["type"] == "child" and nodes["left"]["workflow"] == "child"


async def test_dag_child_node_failure_fails_the_dag(make_engine: EngineFactory) -> None:
    undone: list[str] = []
    dag = Dag("failing-children")
    dag.add_step(lambda: {"ok": 1}, name="first", rollback=lambda ctx: undone.append("first"))
    dag.child("kid", workflow="child", depends_on=["first"], params={"fail": True})
    async with make_engine([dag, child]) as engine:
        inst = await engine.workflow(dag).create(id="d1", params={})
        await drain(engine)
        status = await inst.status()
        assert status.status == "errored"
        assert status.error is not None and status.error["name"] == "WorkflowFailedError"
        assert undone == ["first"]
        states = node_states(dag.describe(), await inst.steps(), inst.id)
        assert states == {"first": "rolled back", "kid": "errored"}
