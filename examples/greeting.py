"""The README's tour workflow: a step, a durable sleep, and a wait for an outside event.

cd examples
stepline worker &
stepline workflows trigger greeting '{"name": "Ada"}' --id ada
stepline workflows instances describe greeting ada        # Waiting For: 👀 a 'reply' event
stepline workflows instances send-event greeting ada --type reply --payload '{"text": "hello!"}'
stepline workflows instances describe greeting ada        # ✅ Completed
"""

from __future__ import annotations

from typing import Any

from stepline import Workflow, WorkflowEvent, WorkflowStep


class Greeting(Workflow):
    """Load a user, pause, then wait (up to an hour) for their reply."""

    name = "greeting"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> dict[str, Any]:
        user = await step.do("load user", lambda: {"name": event.payload["name"]})
        await step.sleep("pause", "2 seconds")
        reply = await step.wait_for_event("wait reply", type="reply", timeout="1 hour")
        return {"greeting": f"hi {user['name']}", "reply": reply.payload}
