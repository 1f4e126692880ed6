"""Workflows of the database-fault scenarios, for ``python -m tests._procs --workflows``.

The ledger workflow (steps recording all the time) and a waiter that needs one event sent by
the client during the run: it ends with that event's payload, so an event acknowledged to the
client and lost afterwards shows as an instance that never ends (or ends with another payload).
"""

from __future__ import annotations

from typing import Any

from stepline import Workflow, WorkflowEvent, WorkflowStep

from .._procs import LedgerWorkflow

WAITER = "chaos-waiter"


class Waiter(Workflow):
    """Records a step, waits for an event of type ``go``, returns its payload."""

    name = WAITER

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("before", lambda: event.payload)
        got = await step.wait_for_event("go", type="go", timeout="1 hour")
        return got.payload


WORKFLOWS = [LedgerWorkflow, Waiter]
