"""Rollback (saga): finished steps are undone in reverse order when an error ends the instance."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stepline import ManualClock, NonRetryableError, WorkflowEvent, WorkflowStep, workflow

from ..conftest import EngineFactory, TestEnvFactory, drain

pytestmark = pytest.mark.both_loops  # the engine on the CLI's loop too

LOG: list[Any] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    LOG.clear()


def undo(tag: str, fail: bool = False) -> Any:
    def rollback(error: BaseException | None, output: Any) -> None:
        LOG.append(("undo", tag, type(error).__name__ if error else None, output))
        if fail:
            raise RuntimeError(f"cannot undo {tag}")

    return rollback


def failing() -> None:
    raise NonRetryableError("payment failed")


@workflow(name="saga")
async def saga(event: WorkflowEvent, step: WorkflowStep) -> Any:
    fail_b = bool(event.payload and event.payload.get("fail_b"))
    no_retry = {"retries": {"limit": 0}}
    await step.do("reserve", lambda: "r1", rollback=undo("reserve"), rollback_config=no_retry)
    await step.do("plain", lambda: "no rollback")
    await step.do(
        "charge", lambda: "c1", rollback=undo("charge", fail=fail_b), rollback_config=no_retry
    )
    await step.do("ship", failing, rollback=undo("ship"))
    return "unreachable"


async def test_rollbacks_run_in_reverse_order(make_engine: EngineFactory) -> None:
    async with make_engine([saga]) as engine:
        inst = await engine.workflow("saga").create()
        await drain(engine)
        status = await inst.status()
        assert status.status == "errored"
        assert status.error == {"name": "NonRetryableError", "message": "payment failed"}
        assert status.rollback == {"outcome": "complete", "error": None}
        # the failed step's rollback does not run; the others run latest-started first
        assert LOG == [
            ("undo", "charge", "StepFailedError", "c1"),
            ("undo", "reserve", "StepFailedError", "r1"),
        ]
        names = [s.display_name for s in await inst.steps() if s.kind == "rollback"]
        assert names == ["charge:rollback-1", "reserve:rollback-1"]


async def test_failing_rollback_is_recorded_and_others_still_run(
    make_engine: EngineFactory,
) -> None:
    async with make_engine([saga]) as engine:
        inst = await engine.workflow("saga").create(params={"fail_b": True})
        await drain(engine)
        status = await inst.status()
        assert status.status == "errored"
        assert status.rollback is not None and status.rollback["outcome"] == "failed"
        assert status.rollback["error"] == {"name": "RuntimeError", "message": "cannot undo charge"}
        assert [entry[1] for entry in LOG] == ["charge", "reserve"]
        rb = {s.display_name: s.status for s in await inst.steps() if s.kind == "rollback"}
        assert rb == {"charge:rollback-1": "errored", "reserve:rollback-1": "complete"}


async def test_rollback_retries_durably(make_test_env: TestEnvFactory) -> None:
    attempts = {"n": 0}

    def shaky_undo(error: BaseException | None, output: Any) -> None:
        attempts["n"] += 1
        if attempts["n"] < 3:
            raise RuntimeError("undo hiccup")
        LOG.append(("undone", output))

    @workflow(name="saga2")
    async def saga2(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do(
            "book",
            lambda: "b",
            rollback=shaky_undo,
            rollback_config={"retries": {"limit": 5, "delay": 30, "backoff": "constant"}},
        )
        await step.do("boom", failing)

    async with make_test_env([saga2]) as env:
        inst = await env.create("saga2")
        assert (await inst.status()).status == "waiting"  # rollback waiting for its retry
        await env.advance(30)
        await env.advance(30)
        status = await inst.status()
        assert status.status == "errored" and status.rollback == {
            "outcome": "complete",
            "error": None,
        }
        assert LOG == [("undone", "b")]


async def test_no_rollbacks_means_no_rollback_outcome(make_engine: EngineFactory) -> None:
    @workflow(name="plain")
    async def plain(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("x", failing)

    async with make_engine([plain]) as engine:
        inst = await engine.workflow("plain").create()
        await drain(engine)
        assert (await inst.status()).rollback is None


async def test_terminate_with_rollback(make_test_env: TestEnvFactory) -> None:
    @workflow(name="long")
    async def long(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("a", lambda: "A", rollback=undo("a"))
        await step.do("b", lambda: "B", rollback=undo("b"))
        await step.sleep("wait", "1 day")
        await step.do("c", lambda: LOG.append("c ran"))

    async with make_test_env([long]) as env:
        inst = await env.create("long")
        await env.run_until_idle()
        await inst.client.terminate(rollback=True)
        status = await inst.status()
        assert status.status == "terminated"
        assert status.rollback == {"outcome": "complete", "error": None}
        assert LOG == [("undo", "b", None, "B"), ("undo", "a", None, "A")]
        assert await env.advance("1 day") == 0  # the sleep's wake-up went with the instance


async def test_rollback_phase_resumes_after_restart(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    """A crash between rollbacks: the next activation runs only the missing ones."""
    calls: list[str] = []

    def undo_x(error: BaseException | None, output: Any) -> None:
        calls.append("x")

    def undo_y(error: BaseException | None, output: Any) -> None:
        calls.append("y")
        if calls.count("y") == 1:
            raise RuntimeError("retry me")

    @workflow(name="resumable")
    async def resumable(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("x", lambda: 1, rollback=undo_x)
        await step.do(
            "y", lambda: 2, rollback=undo_y, rollback_config={"retries": {"limit": 1, "delay": 5}}
        )
        await step.do("z", failing)

    async with make_engine([resumable], clock=clock) as engine:
        inst = await engine.workflow("resumable").create()
        await drain(engine)
    clock.advance(5)
    async with make_engine([resumable], clock=clock) as engine2:
        await drain(engine2)
        status = await (await engine2.workflow("resumable").get(inst.id)).status()
        assert status.status == "errored" and status.rollback["outcome"] == "complete"  # type: ignore[index]
    assert calls == ["y", "y", "x"]


async def test_terminate_during_a_running_step(make_engine: EngineFactory) -> None:
    """The fenced-out step is closed as interrupted; with rollback the others are undone."""
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow() -> str:
        started.set()
        await release.wait()
        return "late"

    @workflow(name="cut")
    async def cut(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("first", lambda: "F", rollback=undo("first"))
        await step.do("slow", slow, rollback=undo("slow"))

    for rollback in (False, True):
        LOG.clear()
        started.clear()
        release.clear()
        async with make_engine([cut], worker=True) as engine:
            inst = await engine.workflow("cut").create()
            await asyncio.wait_for(started.wait(), 10)
            await asyncio.sleep(0.3)  # long enough to be recorded as running
            await inst.terminate(rollback=rollback)
            status = await inst.wait(timeout=10)
            release.set()
            assert status.status == "terminated"
            steps = {s.display_name: s for s in await inst.steps()}
            assert steps["slow-1"].status == "errored"
            assert steps["slow-1"].error is not None
            assert steps["slow-1"].error["name"] == "Interrupted"
            if rollback:
                assert status.rollback == {"outcome": "complete", "error": None}
                assert LOG == [("undo", "first", None, "F")]
            else:
                assert status.rollback is None and LOG == []
