"""The decorator form of step.do (Cloudflare's Python form) on the real engine, on both stores:
dependencies by parameter name resolved once, replay, retries, timeouts, rollbacks, concurrency,
the definition's graph, and every bad input."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import httpx
import pytest

from stepline import StepContext, Workflow, WorkflowEvent, WorkflowStep
from stepline._graph import node_states
from stepline._stepdeps import StepDependencyError
from stepline.http import create_app
from stepline.workflow import definition_of

from ..conftest import EngineFactory, TestEnvFactory, drain

CALLS: dict[str, int] = {}
SPANS: dict[str, list[float]] = {}


def bump(key: str) -> int:
    CALLS[key] = CALLS.get(key, 0) + 1
    return CALLS[key]


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()
    SPANS.clear()


class Diamond(Workflow):
    name = "diamond"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        @step.do()
        async def root() -> int:
            bump("root")
            return int(event.payload["n"])

        @step.do("double it")
        def double(root: int) -> int:  # sync: runs in the thread pool
            bump("double")
            return root * 2

        @step.do()
        async def square(root: int, ctx: StepContext) -> dict[str, Any]:
            bump("square")
            return {"square": root * root, "step": ctx.step_name, "attempt": ctx.attempt}

        @step.do(concurrent=True)
        async def total(double: int, square: dict[str, Any], root: int) -> int:
            bump("total")
            return double + square["square"] + root

        return {"total": await total(), "again": await root()}


async def test_dependencies_are_resolved_by_name_and_recorded_once(
    make_engine: EngineFactory,
) -> None:
    async with make_engine([Diamond]) as engine:
        inst = await engine.workflow("diamond").create(params={"n": 3})
        await drain(engine)
        status = await inst.status()
        assert status.status == "complete", status.error
        assert status.output == {"total": 6 + 9 + 3, "again": 3}
        steps = [(s.name, s.count) for s in await inst.steps()]
    # root is a dependency of three steps and ran once for them; awaited directly afterwards it
    # runs again, as its second occurrence (as Cloudflare's SDK does).
    assert sorted(steps) == [
        ("double it", 1), ("root", 1), ("root", 2), ("square", 1), ("total", 1),
    ]  # fmt: skip
    assert CALLS == {"root": 2, "double": 1, "square": 1, "total": 1}


class Replayed(Workflow):
    name = "replayed"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        @step.do()
        async def first() -> str:
            bump("first")
            return "one"

        value = await first()
        await step.sleep("pause", "1 hour")

        @step.do()
        async def second(first: str) -> str:
            bump("second")
            return f"{first}+{value}"

        return await second()


async def test_replay_does_not_run_a_recorded_decorated_step_again(
    make_test_env: TestEnvFactory,
) -> None:
    async with make_test_env([Replayed]) as env:
        inst = await env.create(Replayed, id="r1")
        await inst.wait_for_status("waiting")
        assert CALLS == {"first": 1}
        assert await inst.output() == "one+one"
    assert CALLS == {"first": 1, "second": 1}


class Retried(Workflow):
    name = "retried"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        @step.do(config={"retries": {"limit": 2, "delay": "10 seconds", "backoff": "constant"}})
        async def flaky(ctx: StepContext) -> int:
            if bump("flaky") < 3:
                raise ConnectionError(f"attempt {ctx.attempt} failed")
            return ctx.attempt

        return await flaky()


async def test_a_decorated_step_is_retried_with_its_config(make_test_env: TestEnvFactory) -> None:
    async with make_test_env([Retried]) as env:
        inst = await env.create(Retried, id="r1")
        assert await inst.output() == 3
        (step,) = await inst.steps()
        starts = [a.started_at for a in step.attempts]
    assert [round(b - a) for a, b in itertools.pairwise(starts)] == [10, 10]


class TimedOut(Workflow):
    name = "timed-out"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        @step.do(config={"timeout": 0.05, "retries": {"limit": 1, "delay": 0}})
        async def slow() -> str:
            bump("slow")
            await asyncio.sleep(30)
            return "never"

        return await slow()


async def test_a_decorated_step_times_out_then_fails(make_engine: EngineFactory) -> None:
    async with make_engine([TimedOut]) as engine:
        inst = await engine.workflow("timed-out").create()
        await drain(engine)
        status = await inst.status()
        steps = await inst.steps()
    assert status.status == "errored"
    assert status.error is not None and status.error["name"] == "StepTimeoutError"
    assert CALLS == {"slow": 2}
    assert [a.error["name"] for a in steps[0].attempts if a.error] == ["StepTimeoutError"] * 2


UNDONE: list[Any] = []


class RolledBack(Workflow):
    name = "rolled-back"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        def refund(error: BaseException | None, output: Any) -> None:
            UNDONE.append(output)

        @step.do("charge", rollback=refund)
        async def charge() -> dict[str, int]:
            return {"charged": 10}

        @step.do(config={"retries": {"limit": 0}})
        async def ship(charge: dict[str, int]) -> None:
            raise RuntimeError(f"cannot ship after {charge}")

        await ship()


async def test_a_decorated_steps_rollback_runs_when_a_later_one_fails(
    make_engine: EngineFactory,
) -> None:
    UNDONE.clear()
    async with make_engine([RolledBack]) as engine:
        inst = await engine.workflow("rolled-back").create()
        await drain(engine)
        status = await inst.status()
    assert status.status == "errored"
    assert status.rollback == {"outcome": "complete", "error": None}
    assert UNDONE == [{"charged": 10}]


def _span(name: str, mark: str) -> None:
    SPANS.setdefault(name, []).append(time.monotonic())


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


class Spans(Workflow):
    name = "spans"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        both_started = asyncio.Event()

        async def noted(name: str) -> str:
            _span(name, "start")
            if len(SPANS) == 2:
                both_started.set()
            # Concurrent steps both start before either ends; sequential ones never would.
            with_other = event.payload["concurrent"]
            if with_other:
                await asyncio.wait_for(both_started.wait(), timeout=20)
            else:
                await asyncio.sleep(0.01)
            _span(name, "end")
            return name

        @step.do()
        async def left() -> str:
            return await noted("left")

        @step.do()
        async def right() -> str:
            return await noted("right")

        if event.payload["concurrent"]:

            @step.do(concurrent=True)
            async def both(left: str, right: str) -> list[str]:
                return [left, right]

            return await both()

        @step.do()
        async def one_by_one(left: str, right: str) -> list[str]:
            return [left, right]

        return await one_by_one()


@pytest.mark.parametrize("concurrent", [True, False])
async def test_concurrent_dependencies_overlap_and_others_do_not(
    make_engine: EngineFactory, concurrent: bool
) -> None:
    async with make_engine([Spans]) as engine:
        inst = await engine.workflow("spans").create(params={"concurrent": concurrent})
        await drain(engine)
        status = await inst.status()
    assert status.status == "complete", status.error
    assert status.output == ["left", "right"]
    assert _overlap(SPANS["left"], SPANS["right"]) is concurrent


async def test_the_definition_carries_the_graph_of_decorated_steps() -> None:
    described = definition_of(Diamond).describe()
    assert described["edges"] == [
        ["root", "double it"], ["root", "square"], ["double it", "total"], ["square", "total"],
        ["root", "total"],
    ]  # fmt: skip
    assert described["levels"] == [["root"], ["double it", "square"], ["total"]]
    # A workflow without dependencies between decorated steps has no graph.
    assert "edges" not in definition_of(Retried).describe()


async def test_the_graph_is_coloured_by_the_recorded_steps(make_engine: EngineFactory) -> None:
    async with make_engine([Diamond]) as engine:
        inst = await engine.workflow("diamond").create(params={"n": 2})
        await drain(engine)
        steps = await inst.steps()
    states = node_states(definition_of(Diamond).describe(), steps, inst.id)
    assert states == dict.fromkeys(["root", "double it", "square", "total"], "complete")


# -- bad input ------------------------------------------------------------------------------------


class Bad(Workflow):
    name = "bad"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        case = event.payload["case"]
        if case == "unknown":

            @step.do()
            async def lonely(nobody: int) -> int:
                return nobody

            return await lonely()
        if case == "cycle":

            @step.do()
            async def chicken(egg: int) -> int:
                return egg

            @step.do()
            async def egg(chicken: int) -> int:
                return chicken

            return await chicken()
        if case == "twice":

            @step.do("load")
            async def load_user() -> int:
                return 1

            @step.do("load")
            async def load_order() -> int:
                return 2

            return await load_order()
        if case == "config":

            @step.do("charge", config={"retries": {"limit": -1}})
            async def charge() -> int:
                return 1

            return await charge()
        if case == "unawaited":

            @step.do()
            async def forgotten() -> int:
                return 1

            forgotten()
            return "done"
        if case == "default":

            @step.do()
            async def defaulted(n: int = 1) -> int:
                return n

            return await defaulted()
        if case == "loop":
            total = 0
            for _ in range(3):

                @step.do()
                async def add() -> int:
                    return bump("add")

                total += await add()
            return total
        raise AssertionError(case)


@pytest.mark.parametrize(
    ("case", "name", "words"),
    [
        ("unknown", "StepDependencyError", ["'lonely'", "parameter 'nobody'", "names no step"]),
        ("cycle", "StepDependencyError", ["cycle: chicken -> egg -> chicken"]),
        ("twice", "StepDependencyError", ["two functions", "'load'", "load_user", "load_order"]),
        ("config", "DefinitionError", ["step 'charge'", "retries.limit", "-1"]),
        ("unawaited", "DefinitionError", ["step.do('forgotten')", "without awaiting"]),
    ],
)
async def test_bad_input_ends_the_instance_with_an_error_naming_it(
    make_engine: EngineFactory, case: str, name: str, words: list[str]
) -> None:
    async with make_engine([Bad]) as engine:
        inst = await engine.workflow("bad").create(params={"case": case})
        await drain(engine)
        status = await inst.status()
        steps = await inst.steps()
    assert status.status == "errored"
    assert status.error is not None and status.error["name"] == name, status.error
    for word in words:
        assert word in status.error["message"], status.error["message"]
    assert steps == []  # nothing ran


async def test_a_parameter_with_a_default_still_names_a_step(make_engine: EngineFactory) -> None:
    """As in Cloudflare's SDK, every parameter names a step or is ctx."""
    async with make_engine([Bad]) as engine:
        inst = await engine.workflow("bad").create(params={"case": "default"})
        await drain(engine)
        status = await inst.status()
    assert status.status == "errored"
    assert status.error is not None and "parameter 'n'" in status.error["message"]


async def test_the_same_function_declared_in_a_loop_runs_each_time(
    make_engine: EngineFactory,
) -> None:
    async with make_engine([Bad]) as engine:
        inst = await engine.workflow("bad").create(params={"case": "loop"})
        await drain(engine)
        status = await inst.status()
        steps = [(s.name, s.count) for s in await inst.steps()]
    assert status.status == "complete" and status.output == 1 + 2 + 3
    assert steps == [("add", 1), ("add", 2), ("add", 3)]


def test_the_dependency_error_is_also_a_type_error() -> None:
    """Cloudflare's SDK raises TypeError for an unexpected parameter: code catching it works."""
    assert issubclass(StepDependencyError, TypeError)


async def test_the_api_serves_the_graph_the_dashboard_draws(make_engine: EngineFactory) -> None:
    """The instance detail of a workflow whose decorated steps depend on others carries the
    graph (as a DAG's does), its nodes coloured by the recorded steps: no schema change, the
    graph is in the workflow's stored definition."""
    async with make_engine([Diamond]) as engine:
        inst = await engine.workflow("diamond").create("g1", params={"n": 2})
        await drain(engine)
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://stepline") as client:
            detail = (await client.get("/api/workflows/diamond/instances/g1")).json()
            listed = (await client.get("/api/workflows/diamond")).json()
    graph = detail["graph"]
    assert graph["kind"] == "workflow" and inst.id == "g1"
    assert ["root", "total"] in graph["edges"]
    assert graph["states"] == dict.fromkeys(["root", "double it", "square", "total"], "complete")
    assert listed["graph"]["levels"] == [["root"], ["double it", "square"], ["total"]]
