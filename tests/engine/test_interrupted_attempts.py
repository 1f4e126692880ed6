"""A step re-run after its activation died keeps the interrupted attempt in its history."""

from __future__ import annotations

import asyncio
from typing import Any

from rich.console import Console

from stepline import ManualClock, StepContext, WorkflowEvent, WorkflowStep, workflow
from stepline.cli._render import attempts_table
from stepline.errors import StoreError

from ..conftest import EngineFactory, drain

RUNS: list[int] = []


@workflow(name="long-step")
async def long_step(event: WorkflowEvent, step: WorkflowStep) -> Any:
    async def charge(ctx: StepContext) -> str:
        RUNS.append(ctx.attempt)
        if ctx.attempt == 1:
            await asyncio.sleep(0.4)  # long enough to be recorded as running (after 0.2 s)
        elif ctx.attempt == 2:
            raise RuntimeError("flaky")
        return f"charged on attempt {ctx.attempt}"

    retries = {"limit": 1, "delay": 0}
    charged = await step.do("charge", {"retries": retries}, charge)
    # Its callback waits for the record of 'charge' first: where the dead worker stopped.
    await step.do("after", lambda: None)
    return charged


async def test_the_attempt_a_dead_activation_ran_is_shown_interrupted(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    RUNS.clear()
    async with make_engine([long_step], clock=clock, lease=30) as engine:
        store = engine.store
        real = store.record_step
        dead = {"yes": True}

        async def dies_before_the_result(lease: Any, write: Any, now: float) -> str:
            if dead["yes"] and write.status == "complete":
                raise StoreError("the worker died")  # the activation stops, holding its lease
            return await real(lease, write, now)

        store.record_step = dies_before_the_result  # type: ignore[method-assign]
        inst = await engine.workflow("long-step").create()
        started = clock()
        await drain(engine)
        assert (await inst.status()).status == "running"  # abandoned, lease still held
        [running] = await inst.steps()
        assert running.status == "running" and running.attempts == ()
        dead["yes"] = False
        clock.advance(31)  # the lease expires: another activation takes the instance over
        await drain(engine)
        status = await inst.status()
        assert (status.status, status.output) == ("complete", "charged on attempt 3"), status
        assert RUNS == [1, 2, 3]
        rec = (await inst.steps())[0]
        first = rec.attempts[0]
        # The interrupted attempt does not count toward the retry limit (1): the failure of
        # attempt 2 is the step's first, so attempt 3 still runs.
        assert [a.state for a in rec.attempts] == ["interrupted", "failed", "success"]
        assert (first.number, first.started_at, first.ended_at) == (1, started, started + 31)
        assert first.error is not None and first.error["name"] == "Interrupted"
        # What the HTTP API and the dashboard receive, and what the CLI's describe prints.
        states = [a["state"] for a in rec.to_json()["attempts"]]
        assert states == ["interrupted", "failed", "success"]
        console = Console(record=True, width=160)
        console.print(attempts_table(rec, clock()))
        text = console.export_text()
        assert "Interrupted" in text and "the worker running this attempt stopped" in text
