"""Workflows of the flow-control fleet test, for ``python -m tests._procs --workflows``.

Each instance runs one step, ``work``, whose result is the ledger: the times its callback began
and ended (``time.time()``: the workers and the test share the machine's clock). A callback runs
while its instance holds a lease, so more than N spans overlapping at one moment would prove that
more than N instances ran at once.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from stepline import Limit, StepContext, Workflow, WorkflowEvent, WorkflowStep

CAPPED = "flow-capped"
KEYED = "flow-keyed"
RATED = "flow-rated"
SHARED_A = "flow-shared-a"
SHARED_B = "flow-shared-b"
SERIAL = "flow-serial"
HELD = "flow-held"

CAPPED_LIMIT = 4
SHARED_LIMIT = 3
RATE = (20, 1.0)
"""20 starts per second."""
HANG = 60.0
"""How long the first attempt of a ``hang`` instance's step takes: until its worker is killed."""


async def _work(ctx: StepContext, seconds: float, hang: bool) -> list[float]:
    began = time.time()
    await asyncio.sleep(HANG if hang and ctx.attempt == 1 else seconds)
    return [began, time.time()]


class _Ledgered(Workflow):
    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        params: dict[str, Any] = event.payload or {}
        seconds = float(params.get("work", 0.005))
        hang = bool(params.get("hang"))
        return await step.do("work", lambda ctx: _work(ctx, seconds, hang))


class Capped(_Ledgered):
    name = CAPPED
    concurrency = CAPPED_LIMIT


class Keyed(_Ledgered):
    name = KEYED
    key_concurrency = 1


class Rated(_Ledgered):
    name = RATED
    rate_limit = RATE


class SharedA(_Ledgered):
    name = SHARED_A
    limits = ("shared",)


class SharedB(_Ledgered):
    name = SHARED_B
    limits = ("shared",)


class Serial(_Ledgered):
    name = SERIAL
    concurrency = 1


class Held(_Ledgered):
    name = HELD
    concurrency = 2


WORKFLOWS = [Capped, Keyed, Rated, SharedA, SharedB, Serial, Held]
LIMITS = [Limit("shared", concurrency=SHARED_LIMIT)]
