"""The schedule client: create, update and delete schedules at run time; list, pause, resume,
trigger and backfill stored schedules (``engine.schedules()``; the CLI, HTTP API and dashboard
build on it)."""

from __future__ import annotations

import builtins
import math
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar, overload

from ...errors import DefinitionError, ScheduleExistsError, ScheduleNotFoundError
from ...records import InstanceRecord, ScheduleRecord
from ...schedule import MAX_TICKS, CatchUp, Overlap, Schedule
from ...store.base import ScheduleDefinition, Store
from ._ticks import Served
from ._ticks import from_record as _served

T = TypeVar("T")

Moment = float | datetime
"""A time: seconds since the epoch, or a timezone-aware datetime."""


@dataclass(frozen=True)
class ScheduleInfo:
    """A stored schedule with its run times (seconds since the epoch)."""

    record: ScheduleRecord
    next_run: float | None
    """When its next tick is due; None while paused."""
    last_run: float | None
    """Its latest tick handled (``record.last_tick``); None before the first."""

    @property
    def name(self) -> str:
        return self.record.name

    def to_json(self) -> dict[str, Any]:
        return {**self.record.to_json(), "next_run": self.next_run, "last_run": self.last_run}


@dataclass(frozen=True)
class Backfill(Sequence[InstanceRecord]):
    """What :meth:`ScheduleClient.backfill` did: the instance of every tick in the range, oldest
    first (this is a sequence of them), of which it ``created`` some; the others existed and
    were left as they were."""

    instances: tuple[InstanceRecord, ...]
    created: int

    @property
    def existing(self) -> int:
        """How many of the ticks' instances existed already."""
        return len(self.instances) - self.created

    def __len__(self) -> int:
        return len(self.instances)

    @overload
    def __getitem__(self, index: int) -> InstanceRecord: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[InstanceRecord, ...]: ...
    def __getitem__(self, index: int | slice) -> InstanceRecord | tuple[InstanceRecord, ...]:
        return self.instances[index]


def _seconds(value: Moment, what: str) -> float:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"{what} must be timezone-aware, got {value.isoformat()}")
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{what} must be a datetime or seconds since the epoch, got {value!r}")
    return float(value)


_CHANGEABLE = ("workflow", "cron", "timezone", "params", "catch_up", "catch_up_limit", "overlap")


def _definition(workflow: str, schedule: Schedule) -> ScheduleDefinition:
    return Served(workflow, schedule).definition()


class ScheduleClient:
    """Operations on the schedules stored in ``store`` (those a running scheduler synced).

    Unknown names raise :class:`~stepline.errors.ScheduleNotFoundError`, naming the stored
    schedules (or saying there are none yet: a worker stores them as it starts). Instances made by
    :meth:`trigger` and :meth:`backfill` are the ticks' own (same ids, trigger ``cron``,
    ``event.schedule`` set), so a tick never runs twice whichever way it was made.
    """

    def __init__(
        self,
        store: Store,
        *,
        max_ticks: int = MAX_TICKS,
        check_workflow: Callable[[str], Awaitable[None]] | None = None,
        declared: Callable[[], Collection[str]] = frozenset,
        changed: Callable[[], None] = lambda: None,
    ) -> None:
        self.store = store
        self.max_ticks = max_ticks
        self._check_workflow = check_workflow
        self._declared = declared
        self._changed = changed

    async def create(
        self,
        name: str,
        workflow: str,
        cron: str,
        *,
        timezone: str = "UTC",
        params: Any = None,
        catch_up: CatchUp = "skip",
        catch_up_limit: int = 100,
        overlap: Overlap = "allow",
    ) -> ScheduleInfo:
        """Store a schedule of ``workflow`` made at run time (``source == "api"``): the running
        schedulers serving ``workflow`` fire its ticks from now on, exactly once each, as they
        fire the schedules declared in code. Bad values raise
        :class:`~stepline.DefinitionError` naming them; an unknown workflow
        :class:`~stepline.WorkflowNotFoundError`; a name taken (a schedule declared in code
        included) :class:`~stepline.ScheduleExistsError`."""
        if not isinstance(name, str):
            raise DefinitionError(f"a schedule needs a name (a string), not {name!r}")
        schedule = Schedule(
            cron, timezone=timezone, params=params, name=name, catch_up=catch_up,
            catch_up_limit=catch_up_limit, overlap=overlap,
        )  # fmt: skip
        await self._known(workflow)
        if name in self._declared():
            raise ScheduleExistsError(name, "code")
        record = await self.store.schedules.create_schedule(_definition(workflow, schedule))
        self._changed()
        return self._info(record, self.store.now())

    async def update(self, name: str, /, **changes: Any) -> ScheduleInfo:
        """Change a run-time schedule: any of ``workflow``, ``cron``, ``timezone``, ``params``,
        ``catch_up``, ``catch_up_limit``, ``overlap``; the rest stays, and so does its state
        (paused, last tick). A schedule declared in code raises
        :class:`~stepline.ScheduleReadOnlyError`; bad values as :meth:`create`."""
        unknown = sorted(set(changes) - set(_CHANGEABLE))
        if unknown:
            raise DefinitionError(
                f"cannot change {unknown[0]!r} of schedule {name!r}; "
                f"the changeable fields are {', '.join(_CHANGEABLE)}"
            )
        record = await self._record(name)
        current = {key: getattr(record, key) for key in _CHANGEABLE}
        merged = {**current, **changes}
        workflow = merged.pop("workflow")
        schedule = Schedule(merged.pop("cron"), name=name, **merged)
        if workflow != record.workflow:
            await self._known(workflow)
        updated = await self._found(
            name, lambda: self.store.schedules.update_schedule(_definition(workflow, schedule))
        )
        self._changed()
        return self._info(updated, self.store.now())

    async def delete(self, name: str) -> ScheduleInfo:
        """Delete a run-time schedule and return it as it was; the instances it created stay.
        A schedule declared in code raises :class:`~stepline.ScheduleReadOnlyError`."""
        record = await self._found(name, lambda: self.store.schedules.delete_schedule(name))
        self._changed()
        return ScheduleInfo(record, None, record.last_tick)

    async def _known(self, workflow: str) -> None:
        if not isinstance(workflow, str) or not workflow:
            raise DefinitionError(f"a schedule needs a workflow name, not {workflow!r}")
        if self._check_workflow is not None:
            await self._check_workflow(workflow)

    def _info(self, record: ScheduleRecord, now: float) -> ScheduleInfo:
        next_run = None if record.paused else _served(record).schedule.next_tick(now)
        return ScheduleInfo(record, next_run, record.last_tick)

    async def _found(self, name: str, operation: Callable[[], Awaitable[T]]) -> T:
        """``operation()``, an unknown ``name`` named with the schedules that are stored."""
        try:
            return await operation()
        except ScheduleNotFoundError:
            stored = [record.name for record in await self.store.schedules.list_schedules(None)]
            raise ScheduleNotFoundError(name, stored) from None

    async def _record(self, name: str) -> ScheduleRecord:
        return await self._found(name, lambda: self.store.schedules.get_schedule(name))

    async def get(self, name: str) -> ScheduleInfo:
        return self._info(await self._record(name), self.store.now())

    async def pause(self, name: str) -> ScheduleInfo:
        """Stop firing its ticks until :meth:`resume`."""
        record = await self._found(
            name, lambda: self.store.schedules.set_schedule_paused(name, True)
        )
        return self._info(record, self.store.now())

    async def resume(self, name: str) -> ScheduleInfo:
        """Fire its ticks again from now on: the ticks due while it was paused are skipped
        (whatever its catch-up policy), so resuming never fires a burst of old ticks."""
        record = await self._record(name)
        if record.paused:
            now = self.store.now()
            after = record.last_tick if record.last_tick is not None else record.created_at
            skipped = _served(record).schedule.latest_ticks(after, now, limit=1)
            if skipped:
                # Moved past while still paused, so no scheduler fires them in between.
                await self.store.schedules.advance_schedule(
                    name, expected_last_tick=record.last_tick,
                    expected_buffered_tick=record.buffered_tick, last_tick=skipped[-1],
                    buffered_tick=None,
                )  # fmt: skip
            record = await self.store.schedules.set_schedule_paused(name, False)
        return self._info(record, self.store.now())

    async def trigger(self, name: str, at: Moment | None = None) -> InstanceRecord:
        """Create the instance of the tick at ``at`` (default now), truncated to its minute, as
        the scheduler would; if it exists already, return it unchanged. Paused schedules can be
        triggered; the schedule's state is not changed."""
        record = await self._record(name)
        moment = self.store.now() if at is None else _seconds(at, "at")
        return (await self._create(record, [math.floor(moment / 60) * 60]))[0]

    async def backfill(self, name: str, start: Moment, end: Moment) -> Backfill:
        """Create the instances of every tick in ``[start, end]``, oldest first, and return
        them all (those that existed unchanged) with how many were created. More than
        ``max_ticks`` ticks in the range raise ``ValueError`` and create nothing. The
        schedule's state is not changed."""
        record = await self._record(name)
        first, last = _seconds(start, "start"), _seconds(end, "end")
        if last < first:
            raise ValueError("backfill: end is before start")
        ticks = _served(record).schedule.ticks_between(first - 1, last, limit=self.max_ticks + 1)
        ticks = [t for t in ticks if t >= first]
        if len(ticks) > self.max_ticks:
            raise ValueError(
                f"backfill of {name!r}: the range holds more than {self.max_ticks} ticks; "
                "backfill a shorter range"
            )
        return await self._create(record, ticks)

    async def _create(self, record: ScheduleRecord, ticks: list[float]) -> Backfill:
        served = _served(record)
        items = [served.instance(tick) for tick in ticks]
        if not items:
            return Backfill((), 0)
        created = await self.store.create_instances(
            record.workflow, items, trigger="cron", skip_existing=True
        )
        by_id = {instance.id: instance for instance in created}
        for item in items:
            if item.id not in by_id:
                by_id[item.id] = await self.store.get_instance(record.workflow, item.id)
        return Backfill(tuple(by_id[item.id] for item in items), len(created))

    # Last: within the class body below this, ``list`` would mean this method.
    async def list(self, workflow: str | None = None) -> builtins.list[ScheduleInfo]:
        """Every stored schedule (of ``workflow``, if given), sorted by name."""
        now = self.store.now()
        return [self._info(r, now) for r in await self.store.schedules.list_schedules(workflow)]
