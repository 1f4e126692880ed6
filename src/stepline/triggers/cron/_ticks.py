"""What the scheduler and the schedule client share: a schedule as the store takes it, one made
from a stored record, and the instance of one tick."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..._json import dumps
from ...records import ScheduleRecord
from ...schedule import Schedule
from ...store.base import NewInstance, ScheduleDefinition
from ...workflow import WorkflowDefinition


@dataclass(frozen=True)
class Served:
    """A declared schedule and the workflow that declares it."""

    workflow: str
    schedule: Schedule

    @property
    def name(self) -> str:
        return self.schedule.key

    def definition(self) -> ScheduleDefinition:
        s = self.schedule
        params = None if s.params is None else dumps(s.params, what=f"schedule {s.key!r} params")
        return ScheduleDefinition(
            s.key, self.workflow, s.cron, s.timezone, params, s.catch_up, s.catch_up_limit,
            s.overlap,
        )  # fmt: skip

    def instance(self, tick: float) -> NewInstance:
        """The instance of ``tick``: its id derives from the schedule's name and the tick."""
        s = self.schedule
        params = None if s.params is None else dumps(s.params, what=f"schedule {s.key!r} params")
        data = dumps({"name": s.key, "cron": s.cron, "tick": tick}, what="schedule data")
        tags = None if not s.tags else dumps(dict(s.tags), what=f"schedule {s.key!r} tags")
        return NewInstance(s.instance_id(tick), params, schedule=data, tags=tags)


def from_record(record: ScheduleRecord) -> Served:
    """The schedule a stored record declares (stored from a valid :class:`Schedule`)."""
    schedule = Schedule(
        record.cron,
        timezone=record.timezone,
        params=record.params,
        name=record.name,
        catch_up=record.catch_up,  # type: ignore[arg-type]
        catch_up_limit=record.catch_up_limit,
        overlap=record.overlap,  # type: ignore[arg-type]
    )
    return Served(record.workflow, schedule)


def served(definitions: Iterable[WorkflowDefinition]) -> dict[str, Served]:
    """Every schedule the definitions declare, by name."""
    return {s.key: Served(d.name, s) for d in definitions for s in d.schedules}
