"""Pipelines and DAGs: context, parallelism, definition errors, rollback, crashes, lifecycle."""

from __future__ import annotations

import asyncio
import importlib
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest

from stepline import (
    Dag,
    DefinitionError,
    Engine,
    Instance,
    ManualClock,
    NonRetryableError,
    Pipeline,
    StepContext,
)
from stepline.dag import format_graph, node_states
from stepline.store.base import StepWrite
from stepline.testing import WorkflowTestEnv
from stepline.worker import Worker

from ..conftest import EngineFactory, TestEnvFactory, drain

RUNS: list[str] = []
SEEN: dict[str, dict[str, Any]] = {}


@pytest.fixture(autouse=True)
def _reset() -> None:
    RUNS.clear()
    SEEN.clear()


def diamond(name: str = "report", **options: Any) -> Dag:
    """a -> (b, c) -> d, each step noting its run and the context it saw."""
    dag = Dag(name, **options)

    @dag.step()
    def a(ctx: Mapping[str, Any]) -> dict[str, Any]:
        RUNS.append("a")
        SEEN["a"] = dict(ctx)
        return {"a": 1, "shared": "from a"}

    @dag.step(depends_on=["a"])
    async def b(ctx: Mapping[str, Any]) -> dict[str, Any]:
        RUNS.append("b")
        SEEN["b"] = dict(ctx)
        return {"b": ctx["a"] + 1, "shared": "from b"}

    @dag.step(depends_on=["a"])
    def c(ctx: Mapping[str, Any]) -> dict[str, Any]:
        RUNS.append("c")
        SEEN["c"] = dict(ctx)
        return {"c": ctx["a"] + 2}

    @dag.step(depends_on=["b", "c"])
    async def d(ctx: Mapping[str, Any]) -> None:
        RUNS.append("d")
        SEEN["d"] = dict(ctx)

    return dag


async def run_one(engine: Engine, workflow: Any, params: Any = None) -> Instance:
    inst = await engine.workflow(workflow).create(params=params)
    await drain(engine)
    return inst


# -- context ---------------------------------------------------------------------------------------


async def test_context_merges_params_and_transitive_outputs(make_engine: EngineFactory) -> None:
    dag = diamond()
    async with make_engine([dag]) as engine:
        inst = await run_one(engine, dag, {"file": "x.pdf", "shared": "param"})
        status = await inst.status()
        assert status.status == "complete", status
        assert SEEN["a"] == {"file": "x.pdf", "shared": "param"}
        # b sees a's output (a's key replaces the param); b does not see its sibling c
        assert SEEN["b"] == {"file": "x.pdf", "shared": "from a", "a": 1}
        assert SEEN["c"] == {"file": "x.pdf", "shared": "from a", "a": 1}
        # d sees everything upstream; b depends on a, so b's "shared" wins over a's
        assert SEEN["d"] == {"file": "x.pdf", "shared": "from b", "a": 1, "b": 2, "c": 3}
        # the output is the final context
        assert status.output == SEEN["d"]
        steps = await inst.steps()
        assert sorted((s.name, s.count, s.kind) for s in steps) == [
            ("a", 1, "do"),
            ("b", 1, "do"),
            ("c", 1, "do"),
            ("d", 1, "do"),
        ]


async def test_context_is_read_only_and_private(make_engine: EngineFactory) -> None:
    dag = Dag("ro")

    @dag.step()
    def make(ctx: Mapping[str, Any]) -> dict[str, Any]:
        return {"items": [1, 2]}

    @dag.step(depends_on=["make"])
    def mutate_nested(ctx: Mapping[str, Any]) -> None:
        ctx["items"].append(3)  # a private copy: nobody else sees this

    @dag.step(depends_on=["mutate_nested"])
    def check(ctx: Mapping[str, Any]) -> dict[str, Any]:
        return {"seen": list(ctx["items"])}

    @dag.step(depends_on=["check"], retries={"limit": 0})
    def write(ctx: Mapping[str, Any]) -> None:
        ctx["new"] = 1  # type: ignore[index]

    async with make_engine([dag]) as engine:
        inst = await run_one(engine, dag)
        status = await inst.status()
        assert status.status == "errored"
        assert status.error is not None and status.error["name"] == "TypeError"
        assert "does not support item assignment" in status.error["message"]
        by_name = {s.name: s for s in await inst.steps()}
        assert by_name["check"].output == {"seen": [1, 2]}


async def test_concurrent_steps_writing_the_same_key_fail(make_engine: EngineFactory) -> None:
    dag = Dag("conflict")
    dag.add_step(lambda: {"x": 0}, name="a")
    dag.add_step(lambda: {"x": 1, "y": 1}, name="b", depends_on=["a"])
    dag.add_step(lambda: {"x": 2, "y": 2}, name="c", depends_on=["a"])
    dag.add_step(lambda: RUNS.append("d"), name="d", depends_on=["b", "c"])

    async with make_engine([dag]) as engine:
        inst = await run_one(engine, dag)
        status = await inst.status()
        assert status.status == "errored"
        assert status.error == {
            "name": "DagContextError",
            "message": "steps 'b' and 'c' may run at the same time (neither depends on the "
            "other) and both return the key 'x'; rename one of the keys or make one step depend "
            "on the other",
        }
        assert RUNS == []  # the join never ran
        # a writing "x" and b overwriting it is fine: b depends on a


async def test_step_returning_a_non_dict_fails_without_retries(
    make_engine: EngineFactory,
) -> None:
    pipe = Pipeline("bad-output")
    pipe.add_step(lambda: 42, name="answer", retries={"limit": 5, "delay": 0})

    async with make_engine([pipe]) as engine:
        inst = await run_one(engine, pipe)
        status = await inst.status()
        assert status.status == "errored"
        assert status.error is not None
        assert status.error["name"] == "DagContextError"
        assert "step 'answer' returned int 42" in status.error["message"]
        (record,) = await inst.steps()
        assert len(record.attempts) == 1


async def test_params_must_be_an_object(make_engine: EngineFactory) -> None:
    dag = diamond()
    async with make_engine([dag]) as engine:
        inst = await run_one(engine, dag, [1, 2])
        status = await inst.status()
        assert status.status == "errored"
        assert status.error is not None and status.error["name"] == "DagContextError"
        assert "must be a JSON object" in status.error["message"]
        assert RUNS == []


async def test_step_function_may_take_the_step_context(make_engine: EngineFactory) -> None:
    dag = Dag("attempts")

    @dag.step(retries={"limit": 2, "delay": 0})
    def flaky(ctx: Mapping[str, Any], info: StepContext) -> dict[str, Any]:
        if info.attempt < 2:
            raise RuntimeError("first attempt fails")
        return {"attempt": info.attempt, "step": info.step_name}

    async with make_engine([dag]) as engine:
        inst = await run_one(engine, dag)
        status = await inst.status()
        assert status.output == {"attempt": 2, "step": "flaky"}


# -- parallelism -----------------------------------------------------------------------------------


async def test_ready_steps_run_concurrently(make_engine: EngineFactory) -> None:
    """b and c can only pass a two-party barrier if they run at the same time."""
    barrier = asyncio.Barrier(2)
    dag = Dag("barrier")
    dag.add_step(lambda: None, name="a")

    async def meet(ctx: Mapping[str, Any]) -> None:
        await asyncio.wait_for(barrier.wait(), 5)

    dag.add_step(meet, name="b", depends_on=["a"])
    dag.add_step(meet, name="c", depends_on=["a"])
    async with make_engine([dag]) as engine:
        inst = await run_one(engine, dag)
        assert (await inst.status()).status == "complete"


async def test_parallel_branches_run_at_once(make_engine: EngineFactory) -> None:
    """The diamond with b (async) and c (sync, thread pool) sleeping: their sleeps overlap in a
    DAG and follow one another in a pipeline. Judged by the spans the steps note, not by wall
    time, which a busy machine stretches."""
    nap = 0.2
    spans: dict[str, dict[str, tuple[float, float]]] = {}

    def build(shape: Dag | Pipeline) -> None:
        noted = spans.setdefault(shape.name, {})

        async def sleepy_async(ctx: Mapping[str, Any]) -> None:
            started = time.monotonic()
            await asyncio.sleep(nap)
            noted["b"] = (started, time.monotonic())

        def sleepy_sync(ctx: Mapping[str, Any]) -> None:
            started = time.monotonic()
            time.sleep(nap)
            noted["c"] = (started, time.monotonic())

        deps: dict[str, Any] = (
            {"b": ["a"], "c": ["a"], "d": ["b", "c"]} if isinstance(shape, Dag) else {}
        )
        for name, fn in (("a", None), ("b", sleepy_async), ("c", sleepy_sync), ("d", None)):
            func = fn or (lambda: None)
            if isinstance(shape, Dag):
                shape.add_step(func, name=name, depends_on=deps.get(name, []))
            else:
                shape.add_step(func, name=name)

    parallel, serial = Dag("parallel"), Pipeline("serial")
    build(parallel)
    build(serial)
    async with make_engine([parallel, serial]) as engine:
        for wf in (serial, parallel):
            inst = await run_one(engine, wf)
            assert (await inst.status()).status == "complete"

    def overlap(noted: dict[str, tuple[float, float]]) -> float:
        return min(noted["b"][1], noted["c"][1]) - max(noted["b"][0], noted["c"][0])

    assert overlap(spans["parallel"]) > 0, spans
    assert overlap(spans["serial"]) < 0, spans


async def test_max_parallel_bounds_concurrency(make_engine: EngineFactory) -> None:
    running = {"now": 0, "peak": 0}
    started: list[str] = []

    async def work(ctx: Mapping[str, Any], info: StepContext) -> None:
        started.append(info.step_name)
        running["now"] += 1
        running["peak"] = max(running["peak"], running["now"])
        await asyncio.sleep(0.02)
        running["now"] -= 1

    dag = Dag("bounded", max_parallel=2)
    for index in range(6):
        dag.add_step(work, name=f"n{index}")
    async with make_engine([dag]) as engine:
        inst = await run_one(engine, dag)
        assert (await inst.status()).status == "complete"
    assert running["peak"] == 2
    assert started == [f"n{i}" for i in range(6)]  # declaration order among ready steps


async def test_max_parallel_must_be_positive() -> None:
    with pytest.raises(DefinitionError, match="max_parallel must be a whole number >= 1"):
        Dag("x", max_parallel=0)


# -- definition errors -----------------------------------------------------------------------------


def test_unknown_dependency_is_reported_at_registration() -> None:
    dag = Dag("unknown")
    dag.add_step(lambda: None, name="a")
    dag.add_step(lambda: None, name="b", depends_on=["a", "nope"])
    message = "dag 'unknown': step 'b' depends on unknown step 'nope'; known steps: a, b"
    with pytest.raises(DefinitionError) as info:
        Engine("sqlite://:memory:", [dag])
    assert str(info.value) == message


def test_duplicate_step_name_is_reported_at_once() -> None:
    dag = Dag("dup")
    dag.add_step(lambda: None, name="a")
    with pytest.raises(DefinitionError, match="duplicate step name 'a'"):
        dag.add_step(lambda: None, name="a")
    pipe = Pipeline("dup")

    @pipe.step
    def parse(ctx: Mapping[str, Any]) -> None: ...

    with pytest.raises(DefinitionError, match="duplicate step name 'parse'"):
        pipe.step(parse)


def test_cycle_is_reported_with_its_path() -> None:
    dag = Dag("cyclic")
    dag.add_step(lambda: None, name="a")
    dag.add_step(lambda: None, name="b", depends_on=["a", "c"])
    dag.add_step(lambda: None, name="c", depends_on=["b"])
    dag.add_step(lambda: None, name="e", depends_on=["c"])
    with pytest.raises(DefinitionError) as info:
        dag.validate()
    assert str(info.value) == (
        "dag 'cyclic' has a cycle: b -> c -> b. Steps with no path from the start (the steps "
        "without dependencies: a): b, c, e. Remove one dependency of the cycle."
    )
    with pytest.raises(DefinitionError, match="b -> c -> b"):
        Engine("sqlite://:memory:", [dag])


def test_self_dependency_is_a_cycle() -> None:
    dag = Dag("self")
    with pytest.raises(DefinitionError, match=r"has a cycle: a -> a"):
        dag.add_step(lambda: None, name="a", depends_on=["a"])


def test_dag_with_no_root_has_no_path_from_the_start() -> None:
    dag = Dag("rootless")
    dag.add_step(lambda: None, name="x", depends_on=["y"])
    dag.add_step(lambda: None, name="y", depends_on=["x"])
    with pytest.raises(DefinitionError) as info:
        dag.validate()
    assert "has a cycle: x -> y -> x" in str(info.value)
    assert "no path from the start (none): x, y" in str(info.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"name": "bad name"}, "invalid step name 'bad name'"),
        ({"name": "a:rollback"}, "invalid step name 'a:rollback'"),
        ({"depends_on": "a"}, "depends_on must be a list of step names"),
        ({"depends_on": ["a", "a"]}, "lists a dependency twice"),
        ({"retries": {"limit": -1}}, "retries.limit"),
        ({"retries": {"tries": 3}}, "unknown step config key 'retries.tries'"),
        ({"timeout": "soon"}, "invalid step config key 'timeout'"),
        ({"rollback": "undo"}, "rollback must be a function"),
        ({"rollback_config": {"timeout": 5}}, "rollback_config is set but there is no rollback"),
    ],
)
def test_invalid_step_options(options: dict[str, Any], message: str) -> None:
    dag = Dag("opts")
    dag.add_step(lambda: None, name="a")

    def fn(ctx: Mapping[str, Any]) -> None: ...

    options.setdefault("name", "b")
    with pytest.raises(DefinitionError, match=message):
        dag.add_step(fn, **options)


def test_invalid_functions() -> None:
    dag = Dag("fns")
    with pytest.raises(DefinitionError, match="give the step a name"):
        dag.add_step(lambda ctx: None)

    def three(a: Any, b: Any, c: Any) -> None: ...

    with pytest.raises(DefinitionError, match="takes 3 required positional arguments"):
        dag.add_step(three)

    def no_args() -> None: ...

    with pytest.raises(DefinitionError, match="the rollback takes 0 required positional"):
        dag.add_step(lambda: None, name="x", rollback=no_args)
    with pytest.raises(DefinitionError, match="has no steps"):
        Dag("empty").validate()
    with pytest.raises(DefinitionError, match="invalid dag name"):
        Dag("no spaces allowed")


def test_no_step_may_be_added_after_registration() -> None:
    dag = diamond()
    Engine("sqlite://:memory:", [dag])
    with pytest.raises(DefinitionError, match="already registered"):
        dag.add_step(lambda: None, name="late")


def test_two_dags_with_one_name_cannot_be_registered_together() -> None:
    with pytest.raises(DefinitionError, match="two workflows are named 'report'"):
        Engine("sqlite://:memory:", [diamond(), diamond()])
    same = diamond()
    engine = Engine("sqlite://:memory:", [same, same])  # the same object twice is fine
    assert list(engine.workflows) == ["report"]


# -- shape -----------------------------------------------------------------------------------------


async def test_graph_describe_and_text(make_engine: EngineFactory) -> None:
    dag = diamond(max_parallel=3)
    graph = dag.graph()
    assert graph.nodes == ("a", "b", "c", "d")
    assert graph.edges == (("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"))
    assert graph.levels == (("a",), ("b", "c"), ("d",))
    async with make_engine([dag]) as engine:
        (info,) = await engine.list_workflows()
        definition = info.definition
        assert definition is not None
        assert definition["kind"] == "dag" and definition["max_parallel"] == 3
        assert definition["levels"] == [["a"], ["b", "c"], ["d"]]
        assert definition["edges"] == [["a", "b"], ["a", "c"], ["b", "d"], ["c", "d"]]
        assert [n["name"] for n in definition["nodes"]] == ["a", "b", "c", "d"]
        assert definition["nodes"][3]["depends_on"] == ["b", "c"]
        assert definition["nodes"][1]["retries"] == {
            "limit": 5,
            "delay": 10.0,
            "backoff": "exponential",
            "non_retryable": ["TypeError", "NameError", "AttributeError", "SyntaxError"],
        }
        text = format_graph(definition)
        assert text.splitlines() == [
            "dag: 4 steps in 3 levels, max_parallel 3",
            "level  step  after  notes",
            "1      a     -      retries 5, timeout 600s",
            "2      b     a      retries 5, timeout 600s",
            "       c     a      retries 5, timeout 600s",
            "3      d     b, c   retries 5, timeout 600s",
        ]
        inst = await engine.workflow(dag).create(params={})
        states = node_states(definition, await inst.steps(), inst.id)
        assert states == dict.fromkeys("abcd", "pending")
        await drain(engine)
        states = node_states(definition, await inst.steps(), inst.id)
        assert states == dict.fromkeys("abcd", "complete")
        assert "b     complete" in format_graph(definition, states)
    assert format_graph({"kind": "workflow"}).startswith("code-first workflow")


def test_pipeline_graph_is_a_chain() -> None:
    pipe = Pipeline("docs")
    for name in ("parse", "chunk", "embed"):
        pipe.add_step(lambda ctx: None, name=name)
    assert pipe.graph().edges == (("parse", "chunk"), ("chunk", "embed"))
    assert pipe.describe()["kind"] == "pipeline"
    assert pipe.format().splitlines()[0] == "pipeline: 3 steps in 3 levels"


# -- pipelines -------------------------------------------------------------------------------------


async def test_pipeline_flows_the_context_like_the_seed(make_engine: EngineFactory) -> None:
    docs = Pipeline("documents")

    @docs.step(retries={"limit": 3, "delay": "1 second", "backoff": "exponential"}, timeout=60)
    def parse(ctx: Mapping[str, Any]) -> dict[str, Any]:
        return {"text": f"text of {ctx['file']}"}

    @docs.step()
    async def chunk(ctx: Mapping[str, Any]) -> dict[str, Any]:
        return {"chunks": ctx["text"].split()}

    @docs.step
    def count(ctx: Mapping[str, Any]) -> dict[str, Any]:
        return {"n": len(ctx["chunks"]), "file": ctx["file"].upper()}

    async with make_engine([docs]) as engine:
        inst = await run_one(engine, docs, {"file": "a.pdf"})
        status = await inst.status()
        assert status.output == {
            "file": "A.PDF",
            "text": "text of a.pdf",
            "chunks": ["text", "of", "a.pdf"],
            "n": 3,
        }


async def test_pipeline_resumes_from_the_last_completed_step(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    pipe = Pipeline("resume")
    for name in ("one", "two", "three"):
        pipe.add_step(lambda ctx, n=name: RUNS.append(n) or {n: True}, name=name)
    async with make_engine([pipe], clock=clock, lease=30) as engine:
        store = engine.store
        inst = await engine.workflow(pipe).create(params={})
        (claim,) = (await store.claim("crashed", ["resume"], 1, 30, store.now())).claims
        await store.record_step(claim.lease, _complete("one", 1, {"one": "recorded"}), store.now())
        clock.advance(31)
        await drain(engine)
        assert RUNS == ["two", "three"]
        assert (await inst.status()).output == {"one": "recorded", "two": True, "three": True}


def _complete(name: str, seq: int, output: Any) -> StepWrite:
    """A completed step as a crashed worker would have recorded it."""
    encoded = orjson.dumps(output).decode()
    return StepWrite(name, 1, seq, "do", "complete", encoded, started_at=1.0, ended_at=1.0)


# -- rollback --------------------------------------------------------------------------------------

UNDONE: list[Any] = []


def compensating_dag(env: WorkflowTestEnv, *, fail_undo: str | None = None) -> Dag:
    """a -> (b, c) -> d; d fails. c completes before b (b is slower, and takes 2 s of the
    env's virtual time to c's 1), so start order (b, c) and completion order (c, b) differ."""
    dag = Dag("saga")
    no_retry = {"retries": {"limit": 0}}

    def undo(tag: str) -> Any:
        def rollback(ctx: Mapping[str, Any], error: BaseException | None) -> None:
            UNDONE.append((tag, dict(ctx), type(error).__name__))
            if tag == fail_undo:
                raise RuntimeError(f"cannot undo {tag}")

        return rollback

    @dag.step(rollback=undo("a"), rollback_config=no_retry)
    def a(ctx: Mapping[str, Any]) -> dict[str, Any]:
        return {"order": ctx["order"], "reserved": True}

    @dag.step(depends_on=["a"], rollback=undo("b"), rollback_config=no_retry)
    async def b(ctx: Mapping[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0.05)
        await env.advance(2)
        return {"charged": 10}

    @dag.step(depends_on=["a"], rollback=undo("c"), rollback_config=no_retry)
    async def c(ctx: Mapping[str, Any]) -> dict[str, Any]:
        await env.advance(1)
        return {"label": "L1"}

    @dag.step(depends_on=["b", "c"], rollback=undo("d"))
    def d(ctx: Mapping[str, Any]) -> None:
        raise NonRetryableError("shipping refused")

    return dag


@pytest.fixture
def _undone() -> None:
    UNDONE.clear()


@pytest.mark.usefixtures("_undone")
async def test_rollbacks_run_in_reverse_order_of_completion(
    make_test_env: TestEnvFactory,
) -> None:
    async with make_test_env() as env:
        dag = compensating_dag(env)
        inst = await env.create(dag, params={"order": 7})
        status = await inst.status()
        assert status.status == "errored"
        assert status.error == {"name": "NonRetryableError", "message": "shipping refused"}
        assert status.rollback == {"outcome": "complete", "error": None}
        # latest-completed first: b (completed after c), c, a; the failed d is not undone
        assert [entry[0] for entry in UNDONE] == ["b", "c", "a"]
        steps = {s.display_name: s for s in await inst.steps()}
        started = sorted(["b-1", "c-1"], key=lambda n: steps[n].seq)
        assert started == ["b-1", "c-1"]  # b started first, so start order would undo c first
        rollbacks = sorted((s for s in steps.values() if s.kind == "rollback"), key=lambda s: s.seq)
        assert [s.display_name for s in rollbacks] == [
            "b:rollback-1",
            "c:rollback-1",
            "a:rollback-1",
        ]
        # a rollback sees the step's context plus the step's own output, and the error
        assert UNDONE[0] == ("b", {"order": 7, "reserved": True, "charged": 10}, "StepFailedError")
        assert UNDONE[2] == ("a", {"order": 7, "reserved": True}, "StepFailedError")
        assert node_states(dag.describe(), steps.values(), inst.id) == {
            "a": "rolled back",
            "b": "rolled back",
            "c": "rolled back",
            "d": "errored",
        }


@pytest.mark.usefixtures("_undone")
async def test_a_failing_rollback_is_recorded_and_the_others_still_run(
    make_test_env: TestEnvFactory,
) -> None:
    async with make_test_env() as env:
        dag = compensating_dag(env, fail_undo="c")
        inst = await env.create(dag, params={"order": 1})
        status = await inst.status()
        assert status.status == "errored"
        assert status.error == {"name": "NonRetryableError", "message": "shipping refused"}
        assert status.rollback == {
            "outcome": "failed",
            "error": {"name": "RuntimeError", "message": "cannot undo c"},
            "failed": [{"step": "c-1", "name": "RuntimeError", "message": "cannot undo c"}],
        }
        assert [entry[0] for entry in UNDONE] == ["b", "c", "a"]
        rb = {s.name: s.status for s in await inst.steps() if s.kind == "rollback"}
        assert rb == {"b:rollback": "complete", "c:rollback": "errored", "a:rollback": "complete"}


async def test_rollback_retries_with_its_own_config(make_test_env: TestEnvFactory) -> None:
    calls: list[int] = []

    def shaky_undo(ctx: Mapping[str, Any]) -> None:
        calls.append(len(calls) + 1)
        if len(calls) < 3:
            raise RuntimeError("undo hiccup")

    pipe = Pipeline("retrying-undo")
    pipe.add_step(
        lambda: {"booked": 1},
        name="book",
        rollback=shaky_undo,
        rollback_config={"retries": {"limit": 3, "delay": 30, "backoff": "constant"}},
    )
    pipe.add_step(lambda: (_ for _ in ()).throw(NonRetryableError("no")), name="pay")
    async with make_test_env([pipe]) as env:
        inst = await env.create(pipe)
        assert (await inst.status()).status == "waiting"  # the rollback waits for its retry
        for _ in range(2):
            await env.advance(30)
        status = await inst.status()
        assert status.status == "errored" and status.rollback == {
            "outcome": "complete",
            "error": None,
        }
        (undo,) = [s for s in await inst.steps() if s.kind == "rollback"]
        assert undo.name == "book:rollback" and len(undo.attempts) == 3


async def test_running_branches_finish_after_a_failure_and_are_undone(
    make_engine: EngineFactory,
) -> None:
    """b fails at once while c is still running: c finishes and is recorded (then undone); no new
    step starts."""
    undone: list[str] = []
    dag = Dag("drain")
    dag.add_step(lambda: None, name="a")

    async def fail_fast() -> None:
        raise NonRetryableError("b broke")

    async def slow() -> dict[str, Any]:
        await asyncio.sleep(0.3)
        RUNS.append("c finished")
        return {"c": 1}

    dag.add_step(fail_fast, name="b", depends_on=["a"])
    dag.add_step(slow, name="c", depends_on=["a"], rollback=lambda ctx: undone.append("c"))
    dag.add_step(lambda: RUNS.append("e"), name="e", depends_on=["c"])
    dag.add_step(lambda: RUNS.append("d"), name="d", depends_on=["b", "c"])
    async with make_engine([dag]) as engine:
        inst = await run_one(engine, dag)
        status = await inst.status()
        assert status.status == "errored"
        assert status.error == {"name": "NonRetryableError", "message": "b broke"}
        assert RUNS == ["c finished"]
        assert undone == ["c"]
        states = node_states(dag.describe(), await inst.steps(), inst.id)
        assert states == {
            "a": "complete",
            "b": "errored",
            "c": "rolled back",
            "e": "pending",
            "d": "pending",
        }


async def test_node_timeout_and_retries(make_test_env: TestEnvFactory) -> None:
    async with make_test_env() as env:
        dag = Dag("timeouts")

        async def too_slow() -> None:
            await env.advance(5)  # the attempt takes 5 s of virtual time

        dag.add_step(
            too_slow, name="slow", timeout="100 milliseconds", retries={"limit": 1, "delay": 0}
        )
        inst = await env.create(dag)
        status = await inst.status()
        assert status.status == "errored"
        assert status.error is not None and status.error["name"] == "StepTimeoutError"
        (record,) = await inst.steps()
        assert [a.error["name"] for a in record.attempts if a.error] == ["StepTimeoutError"] * 2


# -- crashes ---------------------------------------------------------------------------------------


async def test_crash_in_the_middle_of_a_parallel_wave(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    """A worker runs a and b, then hangs in c and is presumed dead when its lease expires.

    Another worker takes over: a and b are not run again, c runs again, d runs. When the stale
    worker finally finishes c, its writes are refused.
    """
    executions: list[str] = []
    c_started = asyncio.Event()
    unblock = asyncio.Event()
    dag = Dag("wave")

    @dag.step()
    def a(ctx: Mapping[str, Any]) -> dict[str, Any]:
        executions.append("a")
        return {"a": 1}

    @dag.step(depends_on=["a"])
    async def b(ctx: Mapping[str, Any]) -> dict[str, Any]:
        executions.append("b")
        return {"b": 2}

    @dag.step(depends_on=["a"])
    async def c(ctx: Mapping[str, Any]) -> dict[str, Any]:
        executions.append("c")
        if executions.count("c") == 1:  # the first execution hangs on the doomed worker
            c_started.set()
            await unblock.wait()
        return {"c": 3}

    @dag.step(depends_on=["b", "c"])
    def d(ctx: Mapping[str, Any]) -> dict[str, Any]:
        executions.append("d")
        return {"sum": ctx["a"] + ctx["b"] + ctx["c"]}

    async with make_engine([dag], clock=clock, lease=30) as engine:
        inst = await engine.workflow(dag).create(params={})
        doomed = Worker(engine.store, engine.workflows, engine.settings, worker_id="doomed")
        stale = asyncio.create_task(doomed.run_once())
        await asyncio.wait_for(c_started.wait(), 5)
        for _ in range(100):  # b's record reaches the database
            if any(s.name == "b" for s in await inst.steps()):
                break
            await asyncio.sleep(0.01)
        assert {s.name for s in await inst.steps()} == {"a", "b"}
        clock.advance(31)  # the doomed worker's lease expires
        await drain(engine)
        status = await inst.status()
        assert status.status == "complete"
        assert status.output == {"a": 1, "b": 2, "c": 3, "sum": 6}
        assert sorted(executions) == ["a", "b", "c", "c", "d"]
        unblock.set()  # the stale worker wakes up: its write of c is fenced out
        await asyncio.wait_for(stale, 5)
        assert sorted(executions) == ["a", "b", "c", "c", "d"]
        assert (await inst.status()).output == status.output


async def test_replay_after_crash_uses_recorded_outputs(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    """Recorded nodes feed the context of the others exactly as if they had just run."""
    dag = diamond("replayed")
    async with make_engine([dag], clock=clock, lease=30) as engine:
        store = engine.store
        inst = await engine.workflow(dag).create(params={"p": 0})
        (claim,) = (await store.claim("crashed", ["replayed"], 1, 30, store.now())).claims
        await store.record_step(claim.lease, _complete("a", 1, {"a": 10}), store.now())
        await store.record_step(claim.lease, _complete("c", 2, {"c": "recorded"}), store.now())
        clock.advance(31)
        await drain(engine)
        assert RUNS == ["b", "d"]
        assert SEEN["d"] == {"p": 0, "a": 10, "b": 11, "shared": "from b", "c": "recorded"}
        assert (await inst.status()).status == "complete"


# -- lifecycle -------------------------------------------------------------------------------------


async def test_pause_and_resume_a_dag(make_engine: EngineFactory) -> None:
    """Pausing while b and c run: both finish, d does not start until resumed."""
    handle: dict[str, Instance] = {}
    dag = Dag("pausable")
    dag.add_step(lambda: RUNS.append("a"), name="a")

    async def b() -> None:
        RUNS.append("b")
        await handle["inst"].pause()
        await asyncio.sleep(0.02)

    dag.add_step(b, name="b", depends_on=["a"])
    dag.add_step(lambda: RUNS.append("c"), name="c", depends_on=["a"])
    dag.add_step(lambda: RUNS.append("d"), name="d", depends_on=["b", "c"])
    async with make_engine([dag]) as engine:
        handle["inst"] = inst = await engine.workflow(dag).create(params={})
        await drain(engine)
        assert (await inst.status()).status == "paused"
        assert sorted(RUNS) == ["a", "b", "c"]
        await inst.resume()
        await drain(engine)
        assert (await inst.status()).status == "complete"
        assert sorted(RUNS) == ["a", "b", "c", "d"]


async def test_restart_a_dag_and_restart_from_a_named_step(make_engine: EngineFactory) -> None:
    flaky = {"fail": True}
    dag = Dag("restartable")
    dag.add_step(lambda: RUNS.append("a") or {"a": 1}, name="a")
    dag.add_step(lambda: RUNS.append("b") or {"b": 1}, name="b", depends_on=["a"])

    def d(ctx: Mapping[str, Any]) -> dict[str, Any]:
        RUNS.append("d")
        if flaky["fail"]:
            raise NonRetryableError("d is not ready")
        return {"total": ctx["a"] + ctx["b"]}

    dag.add_step(d, name="d", depends_on=["b"])
    async with make_engine([dag]) as engine:
        inst = await run_one(engine, dag, {})
        assert (await inst.status()).status == "errored"
        assert RUNS == ["a", "b", "d"]
        flaky["fail"] = False
        await inst.restart(from_step="d")
        await drain(engine)
        status = await inst.status()
        assert status.status == "complete" and status.output == {"a": 1, "b": 1, "total": 2}
        assert RUNS == ["a", "b", "d", "d"]  # a and b kept their recorded results
        await inst.restart()
        await drain(engine)
        assert (await inst.status()).status == "complete"
        assert RUNS == ["a", "b", "d", "d", "a", "b", "d"]


async def test_terminate_with_rollback_undoes_completed_nodes(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    undone: list[str] = []
    dag = Dag("terminable")
    dag.add_step(lambda: {"a": 1}, name="a", rollback=lambda ctx: undone.append("a"))

    def waits() -> None:
        raise RuntimeError("not yet")

    dag.add_step(waits, name="b", depends_on=["a"], retries={"limit": 3, "delay": 3600})
    async with make_engine([dag], clock=clock) as engine:
        inst = await run_one(engine, dag, {})
        assert (await inst.status()).status == "waiting"  # b waits an hour for its retry
        assert node_states(dag.describe(), await inst.steps(), inst.id)["b"] == "retrying"
        await inst.terminate(rollback=True)
        await drain(engine)
        status = await inst.status()
        assert status.status == "terminated"
        assert status.rollback == {"outcome": "complete", "error": None}
        assert undone == ["a"]


# -- the documents example -------------------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def documents_dag(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    return importlib.import_module("documents_dag")


async def test_documents_dag_example(
    make_engine: EngineFactory, documents_dag: Any, tmp_path: Path
) -> None:
    doclib = importlib.import_module("doclib")
    dag = documents_dag.documents_dag
    assert dag.graph().levels == (
        ("parse",),
        ("chunk",),
        ("embed", "summarise"),
        ("index",),
        ("notify",),
    )
    async with make_engine([dag]) as engine:
        ok = await run_one(engine, dag, {"out": str(tmp_path / "ok")})
        status = await ok.status()
        assert status.status == "complete", status
        assert status.output is not None and status.output["documents"] == 4
        assert await asyncio.to_thread(os.path.exists, status.output["notification"])
        assert doclib.search(tmp_path / "ok" / "index.db", "write-ahead log")

        failed = await run_one(engine, dag, {"out": str(tmp_path / "bad"), "fail_notify": True})
        status = await failed.status()
        assert status.status == "errored"
        assert status.error == {
            "name": "NonRetryableError",
            "message": "the mail server refused the notification (fail_notify)",
        }
        assert status.rollback == {"outcome": "complete", "error": None}
        steps = {s.name: s for s in await failed.steps()}
        indexed = steps["index"].output["indexed"]["chunks"]
        assert indexed > 0
        assert steps["index:rollback"].output == {"removed_chunks": indexed}
        assert doclib.search(tmp_path / "bad" / "index.db", "write-ahead log") == []


# -- a real crash: SIGKILL of a worker process in the middle of a parallel wave -----------------


def _note(ctx: Mapping[str, Any], mark: str, node: str) -> None:
    """Append ``mark,node,pid`` to this process's ledger file (one unbuffered write per line)."""
    path = os.path.join(ctx["ledger"], f"{os.getpid()}.log")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{mark},{node},{os.getpid()}\n".encode())
    finally:
        os.close(fd)


def _ledger(directory: Path) -> list[tuple[str, str, int]]:
    lines: list[tuple[str, str, int]] = []
    for path in sorted(directory.glob("*.log")):
        for line in path.read_text().splitlines():
            mark, node, pid = line.split(",")
            lines.append((mark, node, int(pid)))
    return lines


crash_dag = Dag("crash-dag")


@crash_dag.step()
def root(ctx: Mapping[str, Any]) -> dict[str, Any]:
    _note(ctx, "S", "root")
    _note(ctx, "E", "root")
    return {"root": 1}


@crash_dag.step(depends_on=["root"])
def slow(ctx: Mapping[str, Any]) -> dict[str, Any]:
    _note(ctx, "S", "slow")
    if sum(1 for m, n, _ in _ledger(Path(ctx["ledger"])) if (m, n) == ("S", "slow")) == 1:
        time.sleep(60)  # the first execution is killed here
    _note(ctx, "E", "slow")
    return {"slow": 2}


@crash_dag.step(depends_on=["root"])
def fast(ctx: Mapping[str, Any]) -> dict[str, Any]:
    _note(ctx, "S", "fast")
    _note(ctx, "E", "fast")
    return {"fast": 3}


@crash_dag.step(depends_on=["slow", "fast"])
def join(ctx: Mapping[str, Any]) -> dict[str, Any]:
    _note(ctx, "S", "join")
    _note(ctx, "E", "join")
    return {"sum": ctx["root"] + ctx["slow"] + ctx["fast"]}


_WORKER = """
import asyncio, sys
from stepline import Engine
from tests.engine.test_dag import crash_dag

async def main() -> None:
    engine = Engine(sys.argv[1], [crash_dag], lease=1, poll_interval=0.05)
    await engine.run_worker()

asyncio.run(main())
"""


def _start_worker(url: str, logs: Path, n: int) -> subprocess.Popen[bytes]:
    with (logs / f"worker-{n}.err").open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-c", _WORKER, url],
            cwd=Path(__file__).resolve().parents[2],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


async def _until(what: str, check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_sigkill_in_a_parallel_wave(
    make_engine: EngineFactory, store_url: str, tmp_path: Path
) -> None:
    """Worker A finishes root and fast and is SIGKILLed inside slow; worker B takes over after
    the lease: root and fast are not run again, slow runs again, join runs once."""
    ledger, logs = tmp_path / "ledger", tmp_path / "logs"
    ledger.mkdir()
    logs.mkdir()
    workers: list[subprocess.Popen[bytes]] = []
    try:
        async with make_engine([crash_dag]) as engine:
            inst = await engine.workflow(crash_dag).create(params={"ledger": str(ledger)})
            workers.append(_start_worker(store_url, logs, 0))

            async def wave_half_done() -> bool:
                done = {s.name for s in await inst.steps() if s.status == "complete"}
                started = await asyncio.to_thread(_ledger, ledger)
                return done == {"root", "fast"} and ("S", "slow", workers[0].pid) in started

            await _until("root and fast to be recorded while slow runs", wave_half_done)
            workers[0].kill()
            workers[0].wait()
            workers.append(_start_worker(store_url, logs, 1))

            async def finished() -> bool:
                return (await inst.status()).status == "complete"

            await _until("worker B to finish the instance", finished)
            assert (await inst.status()).output == {
                "ledger": str(ledger),
                "root": 1,
                "slow": 2,
                "fast": 3,
                "sum": 6,
            }
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    a, b = workers[0].pid, workers[1].pid
    runs = Counter((mark, node, pid) for mark, node, pid in _ledger(ledger))
    assert runs == {
        ("S", "root", a): 1,
        ("E", "root", a): 1,
        ("S", "fast", a): 1,
        ("E", "fast", a): 1,
        ("S", "slow", a): 1,  # killed before it ended
        ("S", "slow", b): 1,
        ("E", "slow", b): 1,
        ("S", "join", b): 1,
        ("E", "join", b): 1,
    }
    assert "Traceback" not in (logs / "worker-1.err").read_text()


async def test_a_branch_waiting_for_its_retry_does_not_block_the_others(
    make_test_env: TestEnvFactory,
) -> None:
    """b fails once and waits 10 s for its retry; c and e (after c) run meanwhile; the instance
    suspends, and after the delay only b and then the join run."""
    dag = Dag("retrying-branch")
    dag.add_step(lambda: RUNS.append("a"), name="a")

    def b(ctx: Mapping[str, Any], info: StepContext) -> dict[str, Any]:
        RUNS.append(f"b{info.attempt}")
        if info.attempt == 1:
            raise RuntimeError("flaky")
        return {"b": True}

    dag.add_step(b, name="b", depends_on=["a"], retries={"limit": 1, "delay": 10})
    dag.add_step(lambda: RUNS.append("c") or {"c": True}, name="c", depends_on=["a"])
    dag.add_step(lambda: RUNS.append("e") or {"e": True}, name="e", depends_on=["c"])
    dag.add_step(lambda: RUNS.append("d"), name="d", depends_on=["b", "e"])
    async with make_test_env([dag]) as env:
        inst = await env.create(dag, params={})
        assert (await inst.status()).status == "waiting"
        assert sorted(RUNS) == ["a", "b1", "c", "e"]
        assert (await inst.client.record()).ready_at == pytest.approx(env.now() + 10)
        await env.advance(10)
        status = await inst.status()
        assert status.status == "complete"
        assert status.output == {"b": True, "c": True, "e": True}
        assert sorted(RUNS) == ["a", "b1", "b2", "c", "d", "e"]
