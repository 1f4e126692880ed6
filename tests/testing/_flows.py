"""Workflows the toolkit's tests run."""

from __future__ import annotations

import asyncio
from typing import Any

from stepline import WorkflowEvent, WorkflowStep, workflow

HANG = asyncio.Event  # a callback waiting on a fresh one never returns


@workflow(name="naps")
async def naps(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.do("start", lambda: "started")
    await step.sleep("first", "1 day")
    await step.sleep("second", "1 day")
    return await step.do("end", lambda: "rested")


@workflow(name="approve")
async def approve(event: WorkflowEvent, step: WorkflowStep) -> Any:
    got = await step.wait_for_event("answer", type="answer", timeout=event.payload or "1 hour")
    return got.payload


@workflow(name="flaky")
async def flaky(event: WorkflowEvent, step: WorkflowStep) -> Any:
    config = {"retries": {"limit": 3, "delay": "1 hour", "backoff": "exponential"}}
    return await step.do("call", config, lambda: "called")


@workflow(name="timed")
async def timed(event: WorkflowEvent, step: WorkflowStep) -> Any:
    config = {"timeout": "1 minute", "retries": {"limit": 0}}
    return await step.do("slow", config, lambda: "quick")


@workflow(name="parent")
async def parent(event: WorkflowEvent, step: WorkflowStep) -> Any:
    child = await step.start_workflow("helper", {"n": 1})
    return await step.wait_for_workflow("helper", child, timeout="1 hour")


@workflow(name="hangs")
async def hangs(event: WorkflowEvent, step: WorkflowStep) -> Any:
    async def forever() -> None:
        await HANG().wait()

    return await step.do("forever", forever)
