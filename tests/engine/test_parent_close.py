"""A parent's end applied to its children (``on_parent_close``) and a child's deadline; on both
stores, on a manual clock."""

from __future__ import annotations

from typing import Any

import pytest

from stepline import ManualClock, NonRetryableError, WorkflowEvent, WorkflowStep, workflow

from ..conftest import EngineFactory, drain

LOG: list[Any] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    LOG.clear()


def undo(error: BaseException | None, output: Any) -> None:
    LOG.append(("undo", type(error).__name__ if error else None, output))


@workflow(name="kid")
async def kid(event: WorkflowEvent, step: WorkflowStep) -> str:
    await step.do("hold", lambda: "h", rollback=undo)
    await step.sleep("nap", "1 day")
    return "kid done"


@workflow(name="grandkid-parent")
async def grandkid_parent(event: WorkflowEvent, step: WorkflowStep) -> str:
    await step.start_workflow("kid", id=f"{event.instance_id}-gk")
    await step.sleep("nap", "1 day")
    return "done"


def fail() -> None:
    raise NonRetryableError("parent failed")


@workflow(name="boss", timeout="1 hour")
async def boss(event: WorkflowEvent, step: WorkflowStep) -> str:
    params = event.payload or {}
    policy = params.get("policy", "terminate")
    child = params.get("child", "kid")
    await step.start_workflow(
        child, id=f"{event.instance_id}-kid", on_parent_close=policy, timeout=params.get("t")
    )
    await step.sleep("wait", params.get("sleep", "10 minutes"))
    if params.get("fail"):
        await step.do("fail", fail)
    return "boss done"


async def _kid(engine: Any, name: str = "kid", parent_id: str = "b") -> Any:
    return await engine.workflow(name).get(f"{parent_id}-kid")


@pytest.mark.parametrize("ending", ["fail", "terminate", "terminate_rollback", "timeout"])
async def test_terminate_policy_ends_the_children(
    make_engine: EngineFactory, clock: ManualClock, ending: str
) -> None:
    async with make_engine([boss, kid], clock=clock) as engine:
        parent = await engine.workflow("boss").create("b", {"fail": ending == "fail"})
        await drain(engine)
        child = await _kid(engine)
        assert (await child.status()).status == "waiting"
        if ending in ("terminate", "terminate_rollback"):
            await parent.terminate(rollback=ending == "terminate_rollback")
        else:
            clock.advance(3600 if ending == "timeout" else 600)
        await drain(engine)
        assert (await parent.status()).status == (
            "terminated" if ending.startswith("terminate") else "errored"
        )
        assert (await child.status()).status == "terminated"
        assert ("undo", "WorkflowCancelledError", "h") not in LOG


async def test_request_cancel_runs_the_childs_rollbacks(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([boss, kid], clock=clock) as engine:
        parent = await engine.workflow("boss").create("b", {"policy": "request_cancel"})
        await drain(engine)
        await parent.terminate()
        await drain(engine)
        status = await (await _kid(engine)).status()
        assert status.status == "errored"
        assert status.error is not None and status.error["name"] == "WorkflowCancelledError"
        assert LOG == [("undo", "WorkflowCancelledError", "h")]


async def test_abandon_leaves_the_child_running(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([boss, kid], clock=clock) as engine:
        parent = await engine.workflow("boss").create("b", {"policy": "abandon", "t": "2 days"})
        await drain(engine)
        await parent.terminate()
        clock.advance(86400)
        await drain(engine)
        assert (await (await _kid(engine)).status()).output == "kid done"


async def test_terminate_goes_down_to_grandchildren(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([boss, kid, grandkid_parent], clock=clock) as engine:
        parent = await engine.workflow("boss").create("b", {"child": "grandkid-parent"})
        await drain(engine)
        grandchild = await engine.workflow("kid").get("b-kid-gk")
        assert (await grandchild.status()).status == "waiting"
        await parent.terminate()
        assert (await grandchild.status()).status == "terminated"


async def test_a_child_inherits_its_parents_deadline_unless_given_its_own(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([boss, kid], clock=clock) as engine:
        start = clock()
        await engine.workflow("boss").create("b", {"policy": "abandon"})
        await engine.workflow("boss").create("c", {"policy": "abandon", "t": "3 hours"})
        await drain(engine)
        inherited = await (await _kid(engine)).record()
        own = await (await _kid(engine, parent_id="c")).record()
        assert inherited.deadline_at == start + 3600
        assert own.deadline_at == start + 3 * 3600
        clock.advance(3600)
        await drain(engine)
        assert (await (await _kid(engine)).status()).status == "errored"
        assert (await (await _kid(engine, parent_id="c")).status()).status == "waiting"


@pytest.mark.parametrize("bad", ["kill", None, 3])
async def test_an_unknown_policy_fails_the_step_naming_it(
    make_engine: EngineFactory, clock: ManualClock, bad: Any
) -> None:
    async with make_engine([boss, kid], clock=clock) as engine:
        parent = await engine.workflow("boss").create("b", {"policy": bad})
        await drain(engine)
        status = await parent.status()
        assert status.status == "errored"
        assert status.error is not None and repr(bad) in status.error["message"]
        assert (await engine.workflow("kid").list()).instances == []


async def test_a_parent_whose_worker_died_after_closing_its_children_ends_on_the_next(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    """Closing the children and ending the parent are two writes: a worker dying between them
    leaves the parent to the next, which closes (nothing more) and ends it."""
    async with make_engine([boss, kid], clock=clock) as engine:
        parent = await engine.workflow("boss").create("b", {"fail": True})
        await drain(engine)
        clock.advance(600)
        (dead,) = (await engine.store.claim("dead", ["boss"], 1, 30, clock())).claims
        await engine.store.closing.close_children(dead.lease, clock())  # then the worker died
        assert (await (await _kid(engine)).status()).status == "terminated"
        assert (await parent.status()).status == "running"
        clock.advance(31)
        await drain(engine)
        status = await parent.status()
        assert status.status == "errored" and status.error is not None
        assert status.error["message"] == "parent failed"
