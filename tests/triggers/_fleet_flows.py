"""The workflow the schedule fleet test's worker processes serve (``--workflows`` of
tests._procs): a schedule firing every minute, whose instances record their tick."""

from __future__ import annotations

from typing import Any

from stepline import Schedule, Workflow, WorkflowEvent, WorkflowStep

SCHEDULE = "fleet-minute"


class FleetTick(Workflow):
    name = "fleet"
    schedules = (Schedule("* * * * *", name=SCHEDULE),)

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        tick = event.schedule["scheduled_time"].isoformat() if event.schedule else None
        return await step.do("tick", lambda: tick)


WORKFLOWS = [FleetTick]
