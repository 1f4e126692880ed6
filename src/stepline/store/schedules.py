"""The store contract's cron schedule operations: :class:`ScheduleStore`, ``Store.schedules`` of
:class:`~stepline.store.base.Store`."""

from __future__ import annotations

import abc
from collections.abc import Sequence

from ..records import ScheduleRecord
from .types import NewInstance, ScheduleDefinition


class ScheduleStore(abc.ABC):
    """The store contract's cron schedule operations (a base of :class:`Store`): the state of
    each schedule (paused, last tick, buffered tick), and the tick's instance created with the
    compare-and-set that claims the tick."""

    @abc.abstractmethod
    async def sync_schedules(
        self, workflows: Sequence[str], schedules: Sequence[ScheduleDefinition]
    ) -> list[ScheduleRecord]:
        """Make the code-declared stored schedules of ``workflows`` the given ones, durably, in
        one transaction; return them, sorted by name.

        A given schedule is inserted (not paused, no tick yet, ``created_at`` now) or, if its
        name is stored, its declaration (workflow, cron, timezone, params, catch_up,
        catch_up_limit, overlap) is replaced and its state (paused, last_tick, last_instance,
        buffered_tick, created_at) kept; ``updated_at`` becomes now when the declaration
        changed. A stored code-declared schedule of one of ``workflows`` that is not given is
        deleted; schedules created at run time (``source`` ``api``) are left alone, except one
        whose name a given schedule takes: the code's declaration replaces it (its state kept)
        and its source becomes ``code``. Stored schedules of other workflows are left alone. A
        given schedule whose workflow is not in ``workflows`` raises ``ValueError`` and nothing
        changes.
        """

    @abc.abstractmethod
    async def create_schedule(self, schedule: ScheduleDefinition) -> ScheduleRecord:
        """Store a schedule made at run time (``source`` ``api``: not paused, no tick yet,
        ``created_at`` and ``updated_at`` now), durably, and return it. A stored schedule of
        that name, of either source, raises ``ScheduleExistsError`` naming it and its source,
        and nothing changes."""

    @abc.abstractmethod
    async def update_schedule(self, schedule: ScheduleDefinition) -> ScheduleRecord:
        """Replace the declaration (workflow, cron, timezone, params, catch_up, catch_up_limit,
        overlap) of the run-time schedule named ``schedule.name``, durably, keeping its state
        (paused, last_tick, last_instance, buffered_tick, created_at); ``updated_at`` becomes
        now; return it. A code-declared one raises ``ScheduleReadOnlyError``, an unknown name
        ``ScheduleNotFoundError``; either way nothing changes."""

    @abc.abstractmethod
    async def delete_schedule(self, name: str) -> ScheduleRecord:
        """Delete the run-time schedule ``name`` durably and return it as it was (the instances
        it created stay). A code-declared one raises ``ScheduleReadOnlyError``, an unknown name
        ``ScheduleNotFoundError``; either way nothing changes."""

    @abc.abstractmethod
    async def list_schedules(self, workflow: str | None = None) -> list[ScheduleRecord]:
        """Every stored schedule (of ``workflow`` only, if given), sorted by name."""

    @abc.abstractmethod
    async def get_schedule(self, name: str) -> ScheduleRecord:
        """The stored schedule, or ``ScheduleNotFoundError`` naming it."""

    @abc.abstractmethod
    async def set_schedule_paused(self, name: str, paused: bool) -> ScheduleRecord:
        """Pause or resume a schedule durably and return it; ``updated_at`` becomes now if it
        changed. Nothing else changes (a resumed schedule's ``last_tick`` is where it was: the
        scheduler decides what to do with the ticks of the pause). An unknown name raises
        ``ScheduleNotFoundError`` naming it."""

    @abc.abstractmethod
    async def advance_schedule(
        self,
        name: str,
        *,
        expected_last_tick: float | None,
        expected_buffered_tick: float | None,
        last_tick: float | None,
        buffered_tick: float | None,
        create: NewInstance | None = None,
    ) -> bool:
        """Compare-and-set a schedule's tick state, creating the tick's instance with it.

        If the stored ``last_tick`` and ``buffered_tick`` equal the expected ones (None equals
        None), set them to ``last_tick`` and ``buffered_tick`` and ``updated_at`` to now, and,
        with ``create``, create that instance of the schedule's workflow (trigger ``cron``,
        queued, runnable at once; an id that exists is not created again) and set
        ``last_instance`` to its id; everything in one durable transaction; return True.
        Otherwise change and create nothing and return False: of several concurrent calls
        expecting the same state, exactly one returns True. An unknown name raises
        ``ScheduleNotFoundError``.
        """
