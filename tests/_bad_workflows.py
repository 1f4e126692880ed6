"""Workflows whose definition or run is the bad input, and strings full of unicode and SQL
metacharacters (helpers of test_bad_input.py)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from stepline import Workflow, WorkflowEvent, WorkflowStep, workflow
from stepline import query as stepline_query
from stepline import update as stepline_update

MIB = 1024 * 1024
ODD = "'; DROP TABLE instances; -- \" \\ %_ ☃ 😀 \u202e ünï \u0000 \x7f"
"""Unicode, SQL metacharacters and control characters, for every free-text field."""
ODD_NAME = "'; DROP TABLE steps; -- \" \\ %_ ☃ 😀 ünï"
"""The same without control characters, which step names may not hold."""
ODD_VALUE = {ODD: [ODD, {"'": '"', "😀": "\u0000"}], "k": "x' OR '1'='1"}

# Workflows whose runs are the input.


@workflow(name="object-result")
async def object_result(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("x", lambda: {"of": object()})


@workflow(name="big-result")
async def big_result(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("x", lambda: "y" * MIB)


@workflow(name="nan-output")
async def nan_output(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.do("x", lambda: 1)
    return math.nan


@workflow(name="bad-wait")
async def bad_wait(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.wait_for_event("w", type="a b")


@workflow(name="bad-step-name")
async def bad_step_name(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("undo:rollback", lambda: 1)


@workflow(name="bad-sleep")
async def bad_sleep(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.sleep("nap", "5 fortnights")


@workflow(name="bad-config")
async def bad_config(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("x", {"retries": {"limit": -1}}, lambda: 1)


def _odd_failure() -> None:
    raise ValueError(ODD)


@workflow(name="odd-steps")
async def odd_steps(event: WorkflowEvent, step: WorkflowStep) -> Any:
    first = await step.do(ODD_NAME, lambda: ODD_VALUE)
    try:
        await step.do(ODD_NAME + " fails", {"retries": {"limit": 0}}, _odd_failure)
    except Exception as exc:
        return {"first": first, "error": str(exc)}
    return None


@workflow(name="nested")
async def nested(event: WorkflowEvent, step: WorkflowStep) -> Any:
    async def outer() -> Any:
        return await step.do("inner", lambda: 1)

    return await step.do("outer", outer)


LEAKED: dict[str, WorkflowStep] = {}
LATE: dict[str, tuple[asyncio.Event, asyncio.Future[Any]]] = {}


@workflow(name="leaky")
async def leaky(event: WorkflowEvent, step: WorkflowStep) -> Any:
    LEAKED[event.instance_id] = step
    return await step.do("a", lambda: 1)


@workflow(name="orphan")
async def orphan(event: WorkflowEvent, step: WorkflowStep) -> Any:
    go = asyncio.Event()

    async def later() -> Any:
        await go.wait()
        return await step.do("late", lambda: "ran")

    LATE[event.instance_id] = (go, asyncio.ensure_future(later()))
    return await step.do("a", lambda: 1)


class SyncRun(Workflow):
    def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:  # type: ignore[override]
        return None


class NoRun(Workflow):
    pass


class WrongSignature(Workflow):
    async def run(self) -> Any:  # type: ignore[override]
        return None


class BadName(Workflow):
    name = "bad name"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return None


class NegativeConcurrency(Workflow):
    concurrency = -1

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return None


class FortnightRate(Workflow):
    rate_limit = "5 per fortnight"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return None


class UnknownLimit(Workflow):
    limits = ("nowhere",)

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return None


def sync_decorated() -> None:
    workflow(name="sync")(lambda event, step: None)  # type: ignore[arg-type,return-value]


# Messages (docs/messaging.md): queries and updates whose input or handler is bad.


class Messenger(Workflow):
    """Waits for an approval matching a predicate that raises on payloads without 'n'."""

    name = "messenger"

    def __init__(self) -> None:
        self.total = 0

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("start", lambda: 1)
        return await step.wait_for_event("ok", type="ok", match=lambda payload: payload["n"] > 0)

    @stepline_query
    def sum(self) -> int:
        return self.total

    @stepline_query
    def broken(self) -> int:
        raise KeyError("no such total")

    @stepline_query
    def sneaky(self) -> int:
        self.total += 1
        return self.total

    @stepline_update
    async def add(self, step: WorkflowStep, amount: int) -> int:
        self.total += await step.do("add", lambda: amount)
        return self.total

    @add.validator
    def _positive(self, amount: int) -> None:
        if amount <= 0:
            raise ValueError(f"amount must be positive, got {amount}")
