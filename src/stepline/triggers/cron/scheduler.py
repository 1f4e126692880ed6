"""The scheduler: fires the ticks of the served workflows' schedules, exactly once per tick.

Every engine that runs a worker runs one. Each iteration (:meth:`Scheduler.run_once`) reads the
stored schedules and, for each one declared here, or made at run time for a workflow served
here, and not paused, works out which due ticks fire under its catch-up and overlap policies,
then claims them with :meth:`~stepline.store.base.Store.advance_schedule`: a compare-and-set on
the schedule's ``last_tick``, in one transaction with the tick's instance. Of several schedulers
that see the same tick, one claims it; the instance id derives from the schedule and the tick,
so a tick never makes two instances (docs/triggers.md, "Cron schedules").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable

from ..._runtime.observer import Observer
from ...errors import InstanceNotFoundError, SteplineError
from ...records import FINISHED_STATUSES, ScheduleRecord
from ...store.base import NewInstance, Store
from ...workflow import WorkflowDefinition
from ._ticks import Served, from_record, served

log = logging.getLogger("stepline.triggers")

GRACE = 60.0
"""With ``catch_up = "skip"`` a tick still fires this many seconds late (a slow iteration, a
scheduler that just started); older missed ticks are skipped."""
MAX_WAIT = 30.0
"""The longest the loop sleeps between iterations (it notices pauses, resumes, finished
instances holding a buffered tick, schedules synced by other engines and schedules made at run
time in other processes: well within ``GRACE``, so their first tick still fires)."""


class Scheduler:
    """Fire the schedules that ``definitions`` declare, and those made at run time for their
    workflows, through ``store``.

    :meth:`sync` writes the declared schedules to the store (those of the served workflows that
    are no longer declared are deleted), :meth:`run_once` fires what is due at ``now``,
    :meth:`run` does both until :meth:`stop`, sleeping until the next tick (at most
    ``max_wait`` seconds).
    """

    def __init__(
        self,
        store: Store,
        definitions: Iterable[WorkflowDefinition],
        *,
        grace: float = GRACE,
        max_wait: float = MAX_WAIT,
        observer: Observer | None = None,
    ) -> None:
        self.store = store
        self._observer = observer
        given = list(definitions)
        self._workflows = [d.name for d in given]
        self._served = served(given)
        # Run-time schedules as of the last iteration, rebuilt when their declaration changes.
        self._runtime: dict[str, tuple[tuple[object, ...], Served]] = {}
        self._wake = asyncio.Event()
        self.grace = grace
        self.max_wait = max_wait
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def schedules(self) -> list[str]:
        """The names of the schedules served, sorted."""
        return sorted(self._served)

    async def sync(self) -> list[ScheduleRecord]:
        """Store the declared schedules of the served workflows (see
        :meth:`~stepline.store.base.Store.sync_schedules`)."""
        return await self.store.schedules.sync_schedules(
            self._workflows, [s.definition() for s in self._served.values()]
        )

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    def wake(self) -> None:
        """Run an iteration now (a schedule was made, changed or deleted in this process)."""
        self._wake.set()

    async def start(self) -> None:
        """Sync the served workflows' schedules (a schedule removed from code is deleted), then
        :meth:`run` in a task of its own if any workflow is served (a schedule can be made for
        it at run time)."""
        await self.sync()
        if self._workflows and self._task is None:
            self._task = asyncio.create_task(self.run(synced=True), name="stepline-scheduler")

    async def close(self) -> None:
        """Stop the task :meth:`start` began and wait for it (nothing if none runs)."""
        if self._task is not None:
            self.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def run(self, *, synced: bool = False) -> None:
        """Sync (unless ``synced``), then fire due ticks until :meth:`stop`. A store error is
        logged and retried at the next iteration."""
        if not synced:
            await self.sync()
        while not self._stopping.is_set():
            now = self.store.now()
            try:
                await self.run_once(now)
            except SteplineError as exc:
                log.warning("scheduler iteration failed: %s", exc)
            # From the iteration's own time: a tick that came during it is due at once.
            wait = min(self.next_tick(now) - self.store.now(), self.max_wait)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(wait, 0.01))
            self._wake.clear()

    def next_tick(self, now: float) -> float:
        """The earliest tick after ``now`` of any served schedule (``now + max_wait`` if none)."""
        entries = [*self._served.values(), *(entry for _, entry in self._runtime.values())]
        ticks = [s.schedule.next_tick(now) for s in entries]
        return min((t for t in ticks if t is not None), default=now + self.max_wait)

    async def run_once(self, now: float) -> list[str]:
        """Fire what is due at ``now``; return the ids of the instances created here."""
        created: list[str] = []
        records = await self.store.schedules.list_schedules()
        self._track_runtime(records)
        for record in records:
            entry = self._entry(record)
            if entry is None or record.paused or record.workflow != entry.workflow:
                continue
            created.extend(await self._fire(entry, record, now))
        return created

    def _entry(self, record: ScheduleRecord) -> Served | None:
        if record.source == "code":
            return self._served.get(record.name)
        found = self._runtime.get(record.name)
        return None if found is None else found[1]

    def _track_runtime(self, records: Iterable[ScheduleRecord]) -> None:
        """Keep the run-time schedules of the served workflows: new ones are added, changed
        ones rebuilt, deleted ones dropped."""
        kept: dict[str, tuple[tuple[object, ...], Served]] = {}
        for record in records:
            if record.source != "api" or record.workflow not in self._workflows:
                continue
            declared = (
                record.workflow, record.cron, record.timezone, record.params, record.catch_up,
                record.catch_up_limit, record.overlap,
            )  # fmt: skip
            known = self._runtime.get(record.name)
            if known is not None and known[0] == declared:
                kept[record.name] = known
            else:
                kept[record.name] = (declared, from_record(record))
        self._runtime = kept

    async def _fire(self, entry: Served, record: ScheduleRecord, now: float) -> list[str]:
        created: list[str] = []
        last, buffered = record.last_tick, record.buffered_tick
        last_instance = record.last_instance
        if buffered is not None and not await self._unfinished(entry.workflow, last_instance):
            buffered_new = entry.instance(buffered)
            if not await self._advance(
                entry, last, buffered, last_tick=last, buffered_tick=None, create=buffered_new
            ):
                return created  # another scheduler moved it on: it decides
            created.append(buffered_new.id)
            buffered, last_instance = None, buffered_new.id
        for tick, fire in self._due(entry, record, now):
            new: NewInstance | None = entry.instance(tick) if fire else None
            next_buffered = buffered
            overlap = entry.schedule.overlap
            if (
                new is not None
                and overlap != "allow"
                and await self._unfinished(entry.workflow, last_instance)
            ):
                if overlap == "skip":
                    new = None
                elif overlap == "buffer_one":
                    new, next_buffered = None, tick
            if not await self._advance(
                entry, last, buffered, last_tick=tick, buffered_tick=next_buffered, create=new
            ):
                break
            last, buffered = tick, next_buffered
            if new is not None:
                created.append(new.id)
                last_instance = new.id
        return created

    async def _advance(
        self,
        entry: Served,
        last: float | None,
        buffered: float | None,
        *,
        last_tick: float | None,
        buffered_tick: float | None,
        create: NewInstance | None,
    ) -> bool:
        """Claim a tick (:meth:`~stepline.store.base.Store.advance_schedule`), creating its
        instance if it fires; whether this scheduler claimed it. Observers see the create and
        the tick."""
        observer = self._observer
        ended = None
        if observer is not None and create is not None:
            (create,), ended = observer.creating(entry.workflow, "cron", [create])
        try:
            claimed = await self.store.schedules.advance_schedule(
                entry.name, expected_last_tick=last, expected_buffered_tick=buffered,
                last_tick=last_tick, buffered_tick=buffered_tick, create=create,
            )  # fmt: skip
        except BaseException as exc:
            if ended is not None:
                ended(0, exc)
            raise
        if ended is not None:
            ended(1 if claimed else 0, None)
        if observer is not None and claimed:
            if create is not None:
                observer.tick(entry.name, "fired")
            elif buffered_tick is None or buffered_tick != last_tick:  # not held for later
                observer.tick(entry.name, "missed")
        return claimed

    def _due(self, entry: Served, record: ScheduleRecord, now: float) -> list[tuple[float, bool]]:
        """The ticks to claim, oldest first, each with whether it fires: the latest due ticks
        the catch-up policy fires. Older due ticks are skipped: ``last_tick`` moves past them."""
        schedule = entry.schedule
        after = record.last_tick if record.last_tick is not None else record.created_at
        limit = schedule.catch_up_limit if schedule.catch_up == "all" else 1
        latest = schedule.latest_ticks(after, now, limit=limit)
        if schedule.catch_up == "skip" and latest and now - latest[-1] > self.grace:
            return [(latest[-1], False)]
        return [(tick, True) for tick in latest]

    async def _unfinished(self, workflow: str, instance_id: str | None) -> bool:
        if instance_id is None:
            return False
        try:
            instance = await self.store.get_instance(workflow, instance_id)
        except InstanceNotFoundError:
            return False
        return instance.status not in FINISHED_STATUSES
