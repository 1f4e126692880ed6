"""The workflows the benchmarks run, shared by the benchmark process and its worker processes.

Everything a workflow needs comes in the instance params, so one definition serves every size.
Steps that report a time return ``time.time()`` taken inside the step callback: the benchmark
process and the workers run on the same machine, so their clocks agree.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import stepline
from stepline import Workflow, WorkflowEvent, WorkflowStep


async def _one() -> int:
    return 1


def _one_sync() -> int:
    return 1


async def _now() -> float:
    return time.time()


async def _cpu() -> float:
    return time.process_time()


def _burner(seconds: float) -> Any:
    """A step callback that keeps the CPU busy for ``seconds`` of process time: work the
    engine cannot overlap within one process."""

    async def burn() -> int:
        end = time.process_time() + seconds
        while time.process_time() < end:
            pass
        return 1

    return burn


class Trivial(Workflow):
    """``steps`` trivial steps (``s0``, ``s1``, ...); sync callbacks if ``sync`` (in a step
    thread, or on the loop if ``inline`` too: ``{"inline": True}``); each taking ``burn``
    seconds of CPU if given."""

    name = "bench-trivial"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        params: dict[str, Any] = event.payload
        callback = _one_sync if params.get("sync") else _one
        if params.get("burn"):
            callback = _burner(params["burn"])
        total = 0
        if params.get("inline"):
            for index in range(params["steps"]):
                total += await step.do(f"s{index}", {"inline": True}, callback)
            return total
        for index in range(params["steps"]):
            total += await step.do(f"s{index}", callback)
        return total


class TrivialLimited(Trivial):
    """:class:`Trivial` with a fleet-wide concurrency limit of 50."""

    name = "bench-trivial-c50"
    concurrency = 50


class TrivialKeyed(Trivial):
    """:class:`Trivial` that runs one instance per key at a time (``create(key=...)``)."""

    name = "bench-trivial-keyed"
    key_concurrency = 1


class Long(Workflow):
    """``steps`` steps (``s0``, ``s1``, ...) that each return ``time.process_time()``: the CPU
    time of the process running them, so a benchmark can tell the engine's CPU cost per step
    over any stretch of a long history. With ``nap_every``, a durable sleep of ``nap`` seconds
    follows every ``nap_every`` steps (the next activation replays the history)."""

    name = "bench-long"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        params: dict[str, Any] = event.payload
        nap_every: int = params.get("nap_every") or 0
        for index in range(params["steps"]):
            await step.do(f"s{index}", _cpu)
            if nap_every and (index + 1) % nap_every == 0 and index + 1 < params["steps"]:
                await step.sleep("nap", params.get("nap", 0.001))
        return params["steps"]


class Sleeper(Workflow):
    """A durable sleep of ``sleep`` seconds (step ``nap``), then one step (``after``) that returns
    the time it started."""

    name = "bench-sleeper"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.sleep("nap", event.payload["sleep"])
        return await step.do("after", _now)


class SleeperProbe(Sleeper):
    """:class:`Sleeper` under another name: a few timed sleepers among a fleet of others."""

    name = "bench-sleeper-probe"


class Waiter(Workflow):
    """Waits for a ``go`` event, then one step (``resumed``) returns the time it started."""

    name = "bench-waiter"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.wait_for_event("wait", type="go", timeout="1 hour")
        return await step.do("resumed", _now)


class FirstStep(Workflow):
    """One step (``first``) that returns the time it started."""

    name = "bench-first-step"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await step.do("first", _now)


class Updatable(Workflow):
    """``steps`` steps, then waits for a ``go`` event (then one step, ``resumed``); takes
    ``bump`` updates (one step each) and answers the ``total`` query (docs/messaging.md)."""

    name = "bench-updatable"

    def __init__(self) -> None:
        self.total_now = 0

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        for index in range(event.payload.get("steps", 0)):
            self.total_now += await step.do(f"s{index}", _one)
        await step.wait_for_event("wait", type="go", timeout="1 hour")
        return await step.do("resumed", _now)

    @stepline.query
    def total(self) -> int:
        return self.total_now

    @stepline.update
    async def bump(self, step: WorkflowStep) -> int:
        self.total_now += await step.do("bump", _one)
        return self.total_now


class Slow(Workflow):
    """``steps`` steps that each take ``work`` seconds (an ``asyncio.sleep``): a workflow that is
    reliably mid-way when its worker is killed. Each step returns ``{"pid", "start"}``: which
    process ran it and when it started."""

    name = "bench-slow"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        work: float = event.payload["work"]

        async def busy() -> dict[str, Any]:
            start = time.time()
            await asyncio.sleep(work)
            return {"pid": os.getpid(), "start": start}

        last: dict[str, Any] = {}
        for index in range(event.payload["steps"]):
            last = await step.do(f"s{index}", busy)
        return last


WORKFLOWS: tuple[type[Workflow], ...] = (
    Trivial,
    TrivialLimited,
    TrivialKeyed,
    Long,
    Sleeper,
    SleeperProbe,
    Waiter,
    FirstStep,
    Slow,
    Updatable,
)
"""Every benchmark workflow: what a benchmark worker process registers."""
