"""The workflow of the previous release's databases (``make.py`` writes them with it, and
``test_previous_release.py`` runs their instances on with it)."""

from __future__ import annotations

from typing import Any

from stepline import Workflow, WorkflowEvent, WorkflowStep


class Orders(Workflow):
    name = "orders"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        order = await step.do(
            "load",
            lambda: {"id": event.payload["id"], "items": [1, 2.5, "x", None, True], "é": "ü"},
        )
        total = await step.do("tally", lambda: [order["id"], 3.5, (1, 2)])
        if event.payload.get("nap"):
            await step.sleep("nap", "1 hour")
        reply = await step.wait_for_event("approve", type="approve", timeout="1 day")
        return {"order": order, "total": total, "reply": reply.payload}
