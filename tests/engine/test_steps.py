"""step.do: results, retries and backoff, timeouts, errors, replay, parallel steps."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from stepline import (
    ManualClock,
    NonRetryableError,
    StepContext,
    StepFailedError,
    Workflow,
    WorkflowEvent,
    WorkflowStep,
    workflow,
)
from stepline._runtime import RunningMarks
from stepline.workflow import definition_of

from ..conftest import EngineFactory, TestEnvFactory, drain

pytestmark = pytest.mark.both_loops  # the engine on the CLI's loop too

CALLS: dict[str, int] = {}


def bump(key: str) -> int:
    CALLS[key] = CALLS.get(key, 0) + 1
    return CALLS[key]


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    CALLS.clear()


class Chain(Workflow):
    name = "chain"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        a = await step.do("a", lambda: bump("a") and {"n": event.payload["n"]})
        b = await step.do("b", lambda: a["n"] + 1)
        return {"a": a, "b": b}


async def test_results_are_recorded_and_returned(make_engine: EngineFactory) -> None:
    async with make_engine([Chain]) as engine:
        inst = await engine.workflow("chain").create(params={"n": 41})
        await drain(engine)
        status = await inst.status()
        assert status.status == "complete"
        assert status.output == {"a": {"n": 41}, "b": 42}
        steps = await inst.steps()
        assert [(s.display_name, s.kind, s.status, s.output) for s in steps] == [
            ("a-1", "do", "complete", {"n": 41}),
            ("b-1", "do", "complete", 42),
        ]
        assert [a.state for a in steps[0].attempts] == ["success"]


async def test_decorator_form_and_default_names(make_engine: EngineFactory) -> None:
    @workflow(name="deco")
    async def deco(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await step.do("x", lambda: event.payload)

    class SendWelcomeEmail(Workflow):
        async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
            return event.instance_id

    async with make_engine([deco, SendWelcomeEmail]) as engine:
        assert set(engine.workflows) == {"deco", "send-welcome-email"}
        a = await engine.workflow("deco").create(params=[1, 2])
        b = await engine.workflow(SendWelcomeEmail).create(id="w1")
        await drain(engine)
        assert (await a.status()).output == [1, 2]
        assert (await b.status()).output == "w1"


async def test_event_fields(make_engine: EngineFactory, clock: ManualClock) -> None:
    seen: list[WorkflowEvent] = []

    @workflow(name="ev")
    async def ev(event: WorkflowEvent, step: WorkflowStep) -> None:
        seen.append(event)

    async with make_engine([ev], clock=clock) as engine:
        await engine.workflow("ev").create(id="i1", params={"k": "v"})
        await drain(engine)
    assert seen[0].payload == {"k": "v"}
    assert seen[0].instance_id == "i1"
    assert seen[0].workflow_name == "ev"
    assert seen[0].timestamp.timestamp() == pytest.approx(clock())


async def test_sync_and_async_callbacks_with_and_without_ctx(make_engine: EngineFactory) -> None:
    loop_thread: list[int] = []

    def sync_no_ctx() -> int:
        loop_thread.append(threading.get_ident())
        return 1

    def sync_ctx(ctx: StepContext) -> list[Any]:
        return [ctx.step_name, ctx.count, ctx.attempt, ctx.instance_id]

    async def async_no_ctx() -> int:
        return 3

    async def async_ctx(ctx: StepContext) -> int:
        return ctx.attempt

    @workflow(name="shapes")
    async def shapes(event: WorkflowEvent, step: WorkflowStep) -> Any:
        loop_thread.append(threading.get_ident())
        return [
            await step.do("s0", sync_no_ctx),
            await step.do("s1", sync_ctx),
            await step.do("a0", async_no_ctx),
            await step.do("a1", async_ctx),
        ]

    async with make_engine([shapes]) as engine:
        inst = await engine.workflow("shapes").create(id="x")
        await drain(engine)
        assert (await inst.status()).output == [1, ["s1", 1, 1, "x"], 3, 1]
    # the sync callback ran in a thread pool, not on the event loop's thread
    assert loop_thread[0] != loop_thread[1]


async def test_same_name_twice_is_two_steps(make_engine: EngineFactory) -> None:
    @workflow(name="loop")
    async def loop(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return [await step.do("item", lambda i=i: i * 10) for i in range(3)]

    async with make_engine([loop]) as engine:
        inst = await engine.workflow("loop").create()
        await drain(engine)
        assert (await inst.status()).output == [0, 10, 20]
        assert [s.display_name for s in await inst.steps()] == ["item-1", "item-2", "item-3"]


@pytest.mark.parametrize(
    ("backoff", "expected"),
    [("constant", [10, 10, 10]), ("linear", [10, 20, 30]), ("exponential", [10, 20, 40])],
)
async def test_retry_counts_and_delays(
    make_test_env: TestEnvFactory, backoff: str, expected: list[float]
) -> None:
    def flaky() -> str:
        if bump("flaky") <= 3:
            raise RuntimeError(f"boom {CALLS['flaky']}")
        return "ok"

    @workflow(name="retry")
    async def retry(event: WorkflowEvent, step: WorkflowStep) -> Any:
        cfg = {"retries": {"limit": 5, "delay": "10 seconds", "backoff": backoff}}
        return await step.do("flaky", cfg, flaky)

    async with make_test_env([retry]) as env:
        inst = await env.create("retry")
        waits = []
        for _ in range(3):
            await env.run_until_idle()
            rec = await inst.client.record()
            assert rec.status == "waiting"
            assert rec.ready_at is not None
            waits.append(round(rec.ready_at - env.now()))
            # not a moment early
            assert await env.advance(rec.ready_at - env.now() - 0.5) == 0
            assert await env.advance(0.5) == 1
        await env.run_until_idle()
        assert waits == expected
        status = await inst.status()
        assert status.status == "complete" and status.output == "ok"
        (step,) = await inst.steps()
        assert [a.state for a in step.attempts] == ["failed", "failed", "failed", "success"]
        assert step.attempts[0].error == {"name": "RuntimeError", "message": "boom 1"}
        assert CALLS["flaky"] == 4


async def test_retries_exhausted_raise_inside_run(make_test_env: TestEnvFactory) -> None:
    def always() -> None:
        bump("always")
        raise ValueError("nope")

    @workflow(name="exhaust")
    async def exhaust(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do(
            "always", {"retries": {"limit": 2, "delay": 1, "backoff": "constant"}}, always
        )

    async with make_test_env([exhaust]) as env:
        inst = await env.create("exhaust")
        for _ in range(5):
            await env.run_until_idle()
            await env.advance(1)
        status = await inst.status()
        assert status.status == "errored"
        assert status.error == {"name": "ValueError", "message": "nope"}
        assert CALLS["always"] == 3  # limit counts retries after the first attempt
        (step,) = await inst.steps()
        assert step.status == "errored" and len(step.attempts) == 3


async def test_callable_delay_receives_attempt_and_error(make_test_env: TestEnvFactory) -> None:
    seen: list[tuple[int, str]] = []

    def delay(attempt: int, error: BaseException) -> str:
        seen.append((attempt, str(error)))
        return f"{attempt * 7} seconds"

    def fails_twice() -> int:
        if bump("f") <= 2:
            raise RuntimeError(f"e{CALLS['f']}")
        return 1

    @workflow(name="cd")
    async def cd(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await step.do("f", {"retries": {"delay": delay}}, fails_twice)

    async with make_test_env([cd]) as env:
        inst = await env.create("cd")
        await env.run_until_idle()
        assert round((await inst.client.record()).ready_at - env.now()) == 7  # type: ignore[operator]
        await env.advance(7)
        await env.run_until_idle()
        assert round((await inst.client.record()).ready_at - env.now()) == 14  # type: ignore[operator]
        await env.advance(14)
        await env.run_until_idle()
        assert (await inst.status()).status == "complete"
        assert seen == [(1, "e1"), (2, "e2")]


async def test_non_retryable_error_stops_at_once(make_engine: EngineFactory) -> None:
    def fatal() -> None:
        bump("fatal")
        raise NonRetryableError("card declined")

    @workflow(name="nr")
    async def nr(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("charge", fatal)

    async with make_engine([nr]) as engine:
        inst = await engine.workflow("nr").create()
        await drain(engine)
        status = await inst.status()
        assert status.status == "errored"
        assert status.error == {"name": "NonRetryableError", "message": "card declined"}
        assert CALLS["fatal"] == 1


async def test_timeout_is_retried_then_fails(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async def slow() -> None:
        bump("slow")
        await asyncio.sleep(5)

    @workflow(name="to")
    async def to(event: WorkflowEvent, step: WorkflowStep) -> Any:
        cfg = {"timeout": 0.05, "retries": {"limit": 1, "delay": 1}}
        await step.do("slow", cfg, slow)

    async with make_engine([to], clock=clock) as engine:
        inst = await engine.workflow("to").create()
        await drain(engine)
        clock.advance(1)
        await drain(engine)
        status = await inst.status()
        assert status.status == "errored"
        assert status.error is not None and status.error["name"] == "StepTimeoutError"
        (step,) = await inst.steps()
        assert [a.error["name"] for a in step.attempts if a.error] == [
            "StepTimeoutError",
            "StepTimeoutError",
        ]
        assert CALLS["slow"] == 2


async def test_caught_failure_replays_without_rerunning(make_test_env: TestEnvFactory) -> None:
    def broken() -> None:
        bump("broken")
        raise NonRetryableError("bad input")

    caught: list[str] = []

    @workflow(name="catch")
    async def catch(event: WorkflowEvent, step: WorkflowStep) -> Any:
        try:
            await step.do("broken", broken)
        except StepFailedError as exc:
            caught.append(f"{exc.error_name}:{exc.message}")
            fallback = "fallback"
        await step.sleep("nap", "1 minute")  # forces a second activation (a replay)
        return fallback

    async with make_test_env([catch]) as env:
        inst = await env.create("catch")
        await env.run_until_idle()
        await env.advance(60)
        await env.run_until_idle()
        status = await inst.status()
        assert status.status == "complete" and status.output == "fallback"
        assert CALLS["broken"] == 1
        assert caught == ["NonRetryableError:bad input"] * 2


@pytest.mark.parametrize(
    ("result", "needle"),
    [({"x": object()}, "not JSON-serialisable"), ("x" * 2000, "over the limit")],
)
async def test_unstorable_result_ends_instance(
    make_engine: EngineFactory, result: Any, needle: str
) -> None:
    @workflow(name="bad")
    async def bad(event: WorkflowEvent, step: WorkflowStep) -> Any:
        try:
            await step.do("bad result", lambda: bump("bad") and result)
        except Exception:
            return "swallowed"

    async with make_engine([bad], max_payload=1000) as engine:
        inst = await engine.workflow("bad").create()
        await drain(engine)
        status = await inst.status()
        assert status.status == "errored"
        assert status.error is not None
        assert "bad result" in status.error["message"] and needle in status.error["message"]
        assert CALLS["bad"] == 1  # not retried


async def test_parallel_steps_run_at_once_and_replay(make_test_env: TestEnvFactory) -> None:
    running = 0
    peak = 0

    async def work(tag: str) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        running -= 1
        bump(tag)
        return tag

    @workflow(name="par")
    async def par(event: WorkflowEvent, step: WorkflowStep) -> Any:
        results = await asyncio.gather(
            step.do("b", lambda: work("b")), step.do("c", lambda: work("c"))
        )
        await step.sleep("after", 10)
        return results

    async with make_test_env([par]) as env:
        inst = await env.create("par")
        await env.run_until_idle()
        assert peak == 2
        await env.advance(10)
        await env.run_until_idle()
        assert (await inst.status()).output == ["b", "c"]
        assert CALLS == {"b": 1, "c": 1}


async def test_parallel_branch_suspends_while_other_finishes(make_test_env: TestEnvFactory) -> None:
    async def branch_a(step: WorkflowStep) -> str:
        await step.sleep("a sleeps", 30)
        return await step.do("a work", lambda: "a")

    async def branch_b(step: WorkflowStep) -> str:
        first = await step.do("b1", lambda: bump("b1") and "b")
        return await step.do("b2", lambda: bump("b2") and first + "!")

    @workflow(name="mixed")
    async def mixed(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await asyncio.gather(branch_a(step), branch_b(step))

    async with make_test_env([mixed]) as env:
        inst = await env.create("mixed")
        await env.run_until_idle()
        rec = await inst.client.record()
        assert rec.status == "waiting"
        done = {s.display_name: s.status for s in await inst.steps()}
        assert done == {"a sleeps-1": "waiting", "b1-1": "complete", "b2-1": "complete"}
        await env.advance(30)
        await env.run_until_idle()
        assert (await inst.status()).output == ["a", "b!"]
        assert CALLS == {"b1": 1, "b2": 1}


@pytest.mark.parametrize("name", ["", "x" * 257, "bad\nname", "tab\there", "x:rollback"])
async def test_invalid_step_names_fail_the_instance(make_engine: EngineFactory, name: str) -> None:
    @workflow(name="names")
    async def names(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do(name, lambda: 1)

    async with make_engine([names]) as engine:
        inst = await engine.workflow("names").create()
        await drain(engine)
        status = await inst.status()
        assert status.status == "errored"
        assert status.error is not None and status.error["name"] == "ValueError"


async def test_invalid_step_config_fails_with_key(make_engine: EngineFactory) -> None:
    @workflow(name="cfg")
    async def cfg(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("x", {"retries": {"limit": 3, "dealy": 1}}, lambda: 1)

    async with make_engine([cfg]) as engine:
        inst = await engine.workflow("cfg").create()
        await drain(engine)
        status = await inst.status()
        assert status.error is not None and "retries.dealy" in status.error["message"]


async def test_changed_code_is_reported_as_non_determinism(make_test_env: TestEnvFactory) -> None:
    version = {"v": 1}

    @workflow(name="nd")
    async def nd(event: WorkflowEvent, step: WorkflowStep) -> Any:
        if version["v"] == 1:
            await step.do("x", lambda: 1)
        else:
            await step.sleep("x", 5)
        await step.sleep("later", 10)

    async with make_test_env([nd]) as env:
        inst = await env.create("nd")
        await env.run_until_idle()
        version["v"] = 2
        await env.advance(10)
        status = await inst.status()
        assert status.status == "errored"
        assert status.error is not None and status.error["name"] == "NonDeterminismError"


def test_describe_lists_steps_named_in_the_source() -> None:
    @workflow(name="described")
    async def described(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("load", lambda: 1)
        await step.sleep("pause", "1 minute")
        for name in ("a", "b"):
            await step.do(name, lambda: 2)  # named at run time: not listed
        await step.wait_for_event("reply", type="reply")

    steps = definition_of(described).describe()["steps"]
    assert steps == [
        {"name": "load", "type": "do"},
        {"name": "pause", "type": "sleep"},
        {"name": "reply", "type": "wait_for_event"},
    ]
    assert definition_of(Chain).describe()["steps"] == [
        {"name": "a", "type": "do"},
        {"name": "b", "type": "do"},
    ]


async def test_a_long_timeout_fires_from_the_workers_sweep(
    make_engine: EngineFactory, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Timeouts of PRECISE_BELOW seconds or more have no timer of their own: the sweep that
    also writes `running` records fires them (here made to apply to a 0.1 s timeout)."""
    monkeypatch.setattr(RunningMarks, "PRECISE_BELOW", 0.01)

    async def slow() -> None:
        await asyncio.sleep(30)

    @workflow(name="swept")
    async def swept(event: WorkflowEvent, step: WorkflowStep) -> Any:
        try:
            await step.do("slow", {"timeout": 0.1, "retries": {"limit": 0}}, slow)
        except StepFailedError as exc:
            return exc.error_name
        return "no timeout"

    async with make_engine([swept], clock=clock) as engine:
        inst = await engine.workflow("swept").create()
        await asyncio.wait_for(drain(engine), 10)
        assert (await inst.status()).output == "StepTimeoutError"


async def test_a_step_that_beat_its_timeout_is_not_cancelled_later(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async def quick() -> str:
        return "quick"

    async def later() -> str:
        await asyncio.sleep(0.3)  # well past the first step's timeout
        return "later"

    @workflow(name="beat")
    async def beat(event: WorkflowEvent, step: WorkflowStep) -> Any:
        first = await step.do("quick", {"timeout": 0.05}, quick)
        second = await step.do("later", later)
        return [first, second]

    async with make_engine([beat], clock=clock) as engine:
        inst = await engine.workflow("beat").create()
        await drain(engine)
        assert (await inst.status()).output == ["quick", "later"]


async def test_a_cancellation_from_outside_is_not_a_timeout() -> None:
    """The attempt's clock tells its own timeout from any other cancellation of the task."""
    marks = RunningMarks()
    seen: list[str] = []

    async def record_running() -> None:  # never due: the attempts end before RECORD_RUNNING_AFTER
        raise AssertionError("no running record expected")

    async def attempt() -> None:
        mark = marks.add(record_running, 5.0, asyncio.get_running_loop())
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("timeout" if mark.timed_out() else "cancelled")
            raise
        finally:
            mark.disarm()
            marks.discard(mark)

    task = asyncio.create_task(attempt())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]

    async def short() -> None:
        mark = marks.add(record_running, 0.02, asyncio.get_running_loop())
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("timeout" if mark.timed_out() else "cancelled")
        finally:
            mark.disarm()
            marks.discard(mark)

    await asyncio.wait_for(short(), 5)
    assert seen == ["cancelled", "timeout"]
