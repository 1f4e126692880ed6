"""Definition mistakes surface early: a bad run() at registration, a step call never awaited
when run() returns; rollbacks may take the step context."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from stepline import (
    Dag,
    DefinitionError,
    Engine,
    StepContext,
    Workflow,
    WorkflowEvent,
    WorkflowStep,
    workflow,
)

from ..conftest import EngineFactory, TestEnvFactory, drain

CALLS: list[Any] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()


class SyncRun(Workflow):
    def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:  # type: ignore[override]
        return None


class NoRun(Workflow):
    pass


class TwoArgs(Workflow):
    async def run(self, event: WorkflowEvent) -> Any:  # type: ignore[override]
        return None


class ExtraRequired(Workflow):
    async def run(self, event: WorkflowEvent, step: WorkflowStep, more: int) -> Any:  # type: ignore[override]
        return None


@pytest.mark.parametrize(
    ("cls", "words"),
    [
        (SyncRun, "must be an async function"),
        (NoRun, "has no run()"),
        (TwoArgs, "must accept (self, event, step)"),
        (ExtraRequired, "must accept (self, event, step)"),
    ],
)
def test_a_bad_run_is_rejected_at_registration(
    cls: type[Workflow], words: str, tmp_path: Any
) -> None:
    url = f"sqlite:///{tmp_path}/never-created.db"
    with pytest.raises(DefinitionError) as caught:
        Engine(url, [cls], worker=False)
    assert cls.__qualname__ in str(caught.value) and words in str(caught.value)
    engine = Engine(url, worker=False)
    with pytest.raises(DefinitionError, match=cls.__qualname__):
        engine.register(cls)
    assert not (tmp_path / "never-created.db").exists()


def test_a_bad_decorated_function_is_rejected_at_decoration() -> None:
    def plain(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return None

    async def one_arg(event: WorkflowEvent) -> Any:
        return None

    with pytest.raises(DefinitionError, match=r"'.*plain'.*must be an async function"):
        workflow(name="plain")(plain)  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match=r"'.*one_arg'.*must accept \(event, step\)"):
        workflow(name="one-arg")(one_arg)  # type: ignore[arg-type]


def test_valid_definitions_still_register(tmp_path: Any) -> None:
    class Defaults(Workflow):
        async def run(self, event: WorkflowEvent, step: WorkflowStep, extra: int = 1) -> Any:
            return extra

    class Star(Workflow):
        async def run(self, *args: Any) -> Any:
            return None

    @workflow(name="deco-ok")
    async def deco_ok(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return None

    engine = Engine(f"sqlite:///{tmp_path}/x.db", [Defaults, Star, deco_ok], worker=False)
    assert set(engine.workflows) == {"defaults", "star", "deco-ok"}


async def test_a_step_call_never_awaited_ends_the_instance_errored(
    make_engine: EngineFactory,
) -> None:
    @workflow(name="forgetful")
    async def forgetful(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("awaited", lambda: CALLS.append("awaited"))
        step.do("charge", lambda: CALLS.append("charge"))  # no await: the step never runs
        return "done"

    async with make_engine([forgetful]) as engine:
        inst = await engine.workflow("forgetful").create()
        await drain(engine)
        gc.collect()  # a "coroutine was never awaited" warning would be raised here
        status = await inst.status()
        assert status.status == "errored", status
        assert status.error is not None and status.error["name"] == "DefinitionError"
        assert "step.do('charge')" in status.error["message"]
        assert "without awaiting" in status.error["message"]
        assert CALLS == ["awaited"]


async def test_an_unawaited_call_in_a_suspended_run_warns_nothing(
    make_test_env: TestEnvFactory,
) -> None:
    @workflow(name="sleepy")
    async def sleepy(event: WorkflowEvent, step: WorkflowStep) -> Any:
        step.sleep("forgotten", 5)
        await step.sleep("nap", 10)
        return "done"

    async with make_test_env([sleepy]) as env:
        inst = await env.create("sleepy")
        await env.run_until_idle()
        gc.collect()
        assert (await inst.status()).status == "waiting"
        await env.advance(11)
        gc.collect()
        status = await inst.status()
        assert status.status == "errored" and "step.sleep('forgotten')" in status.error["message"]


def undo_ctx(ctx: StepContext) -> None:
    CALLS.append(("ctx", ctx.step_name, ctx.count, ctx.attempt, ctx.instance_id))


def undo_pair(error: Any, output: Any) -> None:
    CALLS.append(("pair", type(error).__name__, output))


async def undo_triple(error: Any, output: Any, ctx: StepContext) -> None:
    CALLS.append(("triple", type(error).__name__, output, ctx.step_name, ctx.attempt))


def undo_default(error: Any, output: Any = None) -> None:
    CALLS.append(("default", output))


async def test_rollbacks_take_error_output_and_the_step_context(
    make_engine: EngineFactory,
) -> None:
    @workflow(name="saga")
    async def saga(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("a", lambda: "A", rollback=undo_ctx)
        await step.do("b", lambda: "B", rollback=undo_pair)
        await step.do("c", lambda: "C", rollback=undo_triple)
        await step.do("d", lambda: "D", rollback=undo_default)
        raise RuntimeError("boom")

    async with make_engine([saga]) as engine:
        inst = await engine.workflow("saga").create(id="s1")
        await drain(engine)
        status = await inst.status()
        assert status.status == "errored" and status.rollback == {
            "outcome": "complete",
            "error": None,
        }
        assert CALLS == [
            ("default", "D"),
            ("triple", "RuntimeError", "C", "c:rollback", 1),
            ("pair", "RuntimeError", "B"),
            ("ctx", "a:rollback", 1, 1, "s1"),
        ]


def undo_optional_ctx(ctx: StepContext | None = None) -> None:
    CALLS.append(("optional", ctx.step_name if ctx is not None else None))


async def test_a_rollback_with_one_optional_parameter_gets_the_step_context(
    make_engine: EngineFactory,
) -> None:
    """One parameter means ``rollback(ctx)``, with a default or not (as for a DAG rollback)."""

    @workflow(name="saga-optional")
    async def saga(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("a", lambda: "A", rollback=undo_optional_ctx)
        raise RuntimeError("boom")

    async with make_engine([saga]) as engine:
        inst = await engine.workflow("saga-optional").create()
        await drain(engine)
        assert (await inst.status()).status == "errored"
        assert CALLS == [("optional", "a:rollback")]


async def test_a_dag_rollback_may_take_the_step_context(make_engine: EngineFactory) -> None:
    dag = Dag("undo-dag")

    def unload(ctx: Any, error: Any, info: StepContext) -> None:
        CALLS.append((ctx["loaded"], type(error).__name__, info.step_name, info.attempt))

    @dag.step(rollback=unload)
    def load(ctx: Any) -> dict[str, Any]:
        return {"loaded": 3}

    @dag.step(depends_on=["load"], retries={"limit": 0})
    def fail(ctx: Any) -> None:
        raise RuntimeError("boom")

    async with make_engine([dag]) as engine:
        inst = await engine.workflow("undo-dag").create()
        await drain(engine)
        assert (await inst.status()).status == "errored"
        assert CALLS == [(3, "StepFailedError", "load:rollback", 1)]
