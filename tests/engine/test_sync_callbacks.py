"""Sync step callbacks: in a step thread, they leave the event loop free (other instances run,
leases are renewed) and see the caller's context variables; with ``{"inline": True}`` they run
on the loop itself. A timed-out one's late result is discarded: tests/store/test_fencing.py."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from typing import Any

import pytest

from stepline import StepConfig, WorkflowEvent, WorkflowStep, workflow

from ..conftest import EngineFactory, drain

pytestmark = pytest.mark.both_loops  # the engine on the CLI's loop too

REQUEST = contextvars.ContextVar("request", default="unset")


class Blocking:
    """A sync step callback that blocks its thread until released, then returns "done"."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> str:
        self.started.set()
        self.release.wait(10)
        return "done"


async def test_a_sync_callback_sees_the_callers_context_variables(
    make_engine: EngineFactory,
) -> None:
    threads: list[int] = []

    def read() -> str:
        threads.append(threading.get_ident())
        return REQUEST.get()

    @workflow(name="ctxvars")
    async def ctxvars(event: WorkflowEvent, step: WorkflowStep) -> Any:
        REQUEST.set(event.payload)
        return await step.do("read", read)

    async with make_engine([ctxvars]) as engine:
        inst = await engine.workflow("ctxvars").create(params="req-7")
        await drain(engine)
        assert (await inst.status()).output == "req-7"
    assert threads and threads[0] != threading.get_ident()  # it ran in a thread


async def test_the_loop_runs_on_while_a_sync_callback_blocks(make_engine: EngineFactory) -> None:
    """A sync callback that blocks holds a thread, not the loop: the worker renews the lease of
    its instance and runs another instance to completion meanwhile."""
    blocking = Blocking()

    @workflow(name="slow")
    async def slow(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await step.do("block", blocking)

    async def one() -> int:
        return 1

    @workflow(name="quick")
    async def quick(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return [await step.do(f"s{i}", one) for i in range(3)]

    async with make_engine([slow, quick], worker=True, lease=1.5) as engine:
        try:
            held = await engine.workflow("slow").create()
            assert await asyncio.to_thread(blocking.started.wait, 10), "never started"
            claimed = (await held.record()).ready_at  # a running instance's: its lease expiry
            assert claimed is not None
            renewed = claimed
            deadline = time.monotonic() + 10
            while renewed <= claimed and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                renewed = (await held.record()).ready_at or claimed
            assert renewed > claimed, "the lease was not renewed while the callback blocked"
            other = await engine.workflow("quick").create()
            assert (await other.wait(timeout=10)).output == [1, 1, 1]
            assert not blocking.release.is_set()  # all of it while the callback still blocked
        finally:
            blocking.release.set()
        assert (await held.wait(timeout=10)).output == "done"


async def test_an_inline_sync_callback_runs_on_the_loop(make_engine: EngineFactory) -> None:
    threads: list[int] = []

    def read(ctx: Any) -> str:
        threads.append(threading.get_ident())
        return f"{REQUEST.get()} {ctx.step_name}"

    @workflow(name="inline")
    async def inline(event: WorkflowEvent, step: WorkflowStep) -> Any:
        REQUEST.set("req-8")
        first = await step.do("read", {"inline": True}, read)
        return [first, await step.do("again", StepConfig(inline=True), read)]

    async with make_engine([inline]) as engine:
        inst = await engine.workflow("inline").create()
        await drain(engine)
        assert (await inst.status()).output == ["req-8 read", "req-8 again"]
    assert threads == [threading.get_ident()] * 2


async def test_an_inline_sync_callback_past_its_timeout_still_completes_its_step(
    make_engine: EngineFactory,
) -> None:
    """Nothing can interrupt a callback that holds the loop: its timeout cannot fire meanwhile,
    and the step completes with what it returned (the docs say so)."""

    def slow() -> str:
        time.sleep(0.3)
        return "late but done"

    @workflow(name="overrun")
    async def overrun(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await step.do("slow", {"inline": True, "timeout": 0.05}, slow)

    async with make_engine([overrun]) as engine:
        inst = await engine.workflow("overrun").create()
        await drain(engine)
        assert (await inst.status()).output == "late but done"


async def test_an_inline_sync_callbacks_error_is_retried_like_any_other(
    make_engine: EngineFactory, clock: Any
) -> None:
    attempts: list[int] = []

    def flaky(ctx: Any) -> int:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("first attempt fails")
        return ctx.attempt

    @workflow(name="flaky")
    async def flaky_wf(event: WorkflowEvent, step: WorkflowStep) -> Any:
        config = {"inline": True, "retries": {"delay": 0}}
        return await step.do("flaky", config, flaky)

    async with make_engine([flaky_wf], clock=clock) as engine:
        inst = await engine.workflow("flaky").create()
        await drain(engine)
        assert (await inst.status()).output == 2
    assert attempts == [1, 2]
