"""The worker's orchestrator: :meth:`Worker.run` and starting activations. The claim loop
(``_claim_loop``), running one activation (``_activate``), the side tasks (lease renewal,
heartbeat, the fleet's view, retention) and the graceful shutdown are its collaborators, each in
its own module."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from .._runtime import ActivationSettings, Observer, RunningMarks, RuntimeHooks
from ..errors import StoreError
from ..operations.runner import BulkRunner
from ..records import DEFAULT_VERSION
from ..store.base import Claim, Store
from ..workflow import WorkflowDefinition
from ._activate import activate
from ._blob_sweep import BlobSweep
from ._claim_loop import ClaimLoop
from ._heartbeat import Heartbeat
from ._log import log, outage_level
from ._planning import WorkflowCaps
from ._queries import QueryService
from ._renewal import LeaseRenewer
from ._retention import Retention
from ._settings import WorkerSettings, default_worker_id
from ._shares import FleetShares
from ._shutdown import drain
from ._slots import Reservation, Slot, Slots

RECANCEL_SECONDS = 1.0
"""How long a stopping worker waits for a cancelled side task before cancelling it again."""


class Worker:
    """Runs activations of the registered workflows found in ``store``."""

    def __init__(
        self,
        store: Store,
        registry: Mapping[str, WorkflowDefinition],
        settings: WorkerSettings | None = None,
        *,
        worker_id: str | None = None,
        listeners: tuple[Callable[[str, dict[str, Any]], None], ...] = (),
        hooks: RuntimeHooks | None = None,
        observer: Observer | None = None,
        versions: Mapping[str, Mapping[str, WorkflowDefinition]] | None = None,
    ) -> None:
        """``registry``: the newest version of each workflow, by name; ``versions``: every
        version it runs, by name then version (default: those of ``registry``)."""
        self.store = store
        self.registry = registry
        self.versions: Mapping[str, Mapping[str, WorkflowDefinition]] = (
            versions
            if versions is not None
            else {name: {d.version: d} for name, d in registry.items()}
        )
        self._served = {name: tuple(found) for name, found in self.versions.items()}
        """The versions of each workflow it claims (the claim filters on them)."""
        self._patches: dict[tuple[str, str], set[str]] = {
            (name, version): set(definition.patches)
            for name, found in self.versions.items()
            for version, definition in found.items()
        }
        """The patches its code has, by workflow and version: it claims only instances whose
        patches are among them (an id first met at run time joins them)."""
        self._settings = settings or WorkerSettings()
        self.id = worker_id or default_worker_id()
        marks = hooks.marks if hooks is not None and hooks.marks is not None else RunningMarks()
        self._activation_settings = ActivationSettings(
            self.settings.max_payload,
            listeners,
            marks=marks,
            hooks=hooks,
            observer=observer,
            child_versions={name: d.version for name, d in registry.items()},
            stream_keep=self.settings.stream_keep,
            stream_keep_for=self.settings.stream_keep_for,
            payloads=self.settings.payloads,
            timeout_of=lambda name: found.timeout if (found := registry.get(name)) else None,
            patch_taken=self._patch_taken,
        )
        self._observer = observer
        self._slots = Slots(self.settings.concurrency)
        self._active = self._slots.active  # the same dict: the hot path reads it directly
        self._caps = WorkflowCaps(registry)
        self._workflows = self._caps.workflows
        self._shares = FleetShares(store, self.id, registry, self._caps, self.settings.concurrency)
        self._renewer = LeaseRenewer(store, self._slots, self.settings.lease)
        self._heartbeat = Heartbeat(
            store, self.id, self.settings, self._workflows, self._slots, self._served, self._patches
        )
        self._retention = Retention(store, self.settings.retention, self.settings.payloads)
        self._bulk = BulkRunner(store, self.settings.payloads)
        self._sweep = BlobSweep(store, self.settings.payloads, self.settings.sweep_grace)
        self._queries = QueryService(store, self.id, registry, self.settings, self.versions)
        self._stopping = asyncio.Event()
        self._at_once = asyncio.Event()
        """Set by ``stop(at_once=True)``: cut the grace period short."""
        self._running = False
        self._loop = ClaimLoop(
            store,
            registry,
            self.settings,
            self.id,
            self._slots,
            self._caps,
            self._shares,
            self._served,
            self._patches,
            start=self._start,
            renew_now=self.renew_now,
            stopping=self._stopping,
            observer=observer,
        )

    def _patch_taken(self, workflow: str, version: str, patch_id: str) -> None:
        """An instance took ``patch_id``: this code has it, found at registration or not."""
        self._patches.setdefault((workflow, version), set()).add(patch_id)

    # -- public ----------------------------------------------------------------------------------

    @property
    def settings(self) -> WorkerSettings:
        return self._settings

    @settings.setter
    def settings(self, value: WorkerSettings) -> None:
        """New settings take effect where they are read at each turn: the claim loop's polls,
        claim sizes and grace period (a test makes a worker that never polls this way)."""
        self._settings = value
        self._loop.settings = value

    @property
    def active_count(self) -> int:
        return len(self._active)

    def stop(self, *, at_once: bool = False) -> None:
        """Ask :meth:`run` to stop claiming and shut down gracefully: running activations get
        the grace period to finish their steps. With ``at_once`` (a second signal), what still
        runs is cancelled now, without waiting for the rest of the grace period; either way
        their instances are released, for another worker to continue at once."""
        if at_once:
            self._at_once.set()
        self._stopping.set()
        self._loop.interrupt()
        # Told now, not when the drain begins: the worker first leaves the fleet (a database
        # write), and a step that ends meanwhile must not go on to the next.
        for slot in self._active.values():
            slot.request_stop("shutdown")

    def wake(self) -> None:
        """Something may be runnable: look at the database now instead of at the next poll."""
        self._loop.wake()

    def reserve(
        self, workflow: str, count: int, version: str = DEFAULT_VERSION
    ) -> Reservation | None:
        """Hold free slots for up to ``count`` instances of ``workflow`` about to be created in
        this process, or None.

        The create claims them as it creates them (:class:`Reservation`), and this worker
        starts them at once: no claim, no history read (a new instance has none), no wait for
        its next look at the database. Only while :meth:`run` runs, with free slots, and when
        the last claim found nothing else runnable, so that new instances do not overtake a
        backlog of queued ones. Never for a workflow with limits: its instances wait for a
        claim, which applies them; never for a ``version`` of it this worker does not run.
        """
        if not self._takes_at_once(workflow) or version not in self._served.get(workflow, ()):
            return None
        return self._reserved(count)

    def reserve_update(self, workflow: str) -> Reservation | None:
        """Hold a free slot for the instance of ``workflow`` that an update sent in this
        process is about to wake, or None, on the terms of :meth:`reserve`.

        The send claims the instance if it can run at once and this worker's code serves its
        version and patches (``MessageStore.send_update_and_claim``), and this worker runs the
        update's handler at once: no claim, no wait for its next look at the database.
        """
        return self._reserved(1) if self._takes_at_once(workflow) else None

    def _takes_at_once(self, workflow: str) -> bool:
        """Whether instances of ``workflow`` may skip the claim: see :meth:`reserve`."""
        if not self._running or self._stopping.is_set() or self._loop.backlog:
            return False
        definition = self.registry.get(workflow)
        return definition is not None and definition.limits.empty

    def _reserved(self, count: int) -> Reservation | None:
        take = self._slots.reserve(count)
        if take <= 0:
            return None
        routing = (self._served, self._patches)
        return Reservation(self._slots, self._start, self.id, self.settings.lease, take, routing)

    async def renew_now(self) -> None:
        """Extend every held lease; cancel activations whose lease is gone; see pause requests."""
        await self._renewer.renew_now()

    async def beat_now(self) -> None:
        """Write this worker's heartbeat: its row in the store's worker list, which the same
        write clears of workers that stopped beating long ago."""
        await self._heartbeat.beat_now()

    async def answer_queries_now(self) -> int:
        """Answer the routed queries of this worker's workflows waiting now; how many."""
        return await self._queries.answer_now()

    async def purge_now(self) -> int:
        """Delete the finished instances whose retention has run out; return how many."""
        return await self._retention.purge_now()

    async def sweep_blobs_now(self, now: float | None = None) -> int:
        """Delete blobs no row references, older than ``sweep_grace``; return how many."""
        return await self._sweep.sweep_now(now)

    async def next_wakeup(self) -> float | None:
        """When an instance this worker would claim next needs a worker, as its claim loop
        looks (``Store.next_wakeup`` of its workflows, versions and patches)."""
        return await self.store.next_wakeup(list(self._workflows), self._served, self._patches)

    async def run_bulk_now(self) -> bool:
        """Run one batch of each running bulk job now; whether there was any."""
        return await self._bulk.run_once()

    async def run_once(self) -> int:
        """Claim every instance runnable now and run each to its next suspension or end.

        Returns how many activations ran. Repeated until it returns 0, it drives every instance
        as far as the store's current time allows: the test harness for a manual clock.
        """
        total = 0
        while True:
            await self._loop.deadlines.expire(always=True)
            plan = self._caps.plan(self._slots, self.settings.concurrency)
            claims = (await self._loop.claim(plan)).claims
            if not claims:
                return total
            total += len(claims)
            tasks = [self._start(claim) for claim in claims]
            await asyncio.gather(*tasks)

    async def run(self) -> None:
        """Run until :meth:`stop` is called, then shut down gracefully."""
        self.store.signals.add_ready_listener(self.wake)
        self.store.signals.add_timer_listener(self._loop.timer)
        self._heartbeat.started_at = self.store.now()
        # The fleet's view of this worker (its heartbeat, its share) ends before the drain.
        fleet_tasks = [
            asyncio.create_task(self._heartbeat.loop(), name=f"stepline-heartbeat-{self.id}"),
        ]
        side_tasks = [
            asyncio.create_task(self._renewer.loop(), name=f"stepline-renew-{self.id}"),
            asyncio.create_task(self._queries.loop(), name=f"stepline-queries-{self.id}"),
            asyncio.create_task(self._bulk.loop(), name=f"stepline-bulk-{self.id}"),
        ]
        side_tasks.append(
            asyncio.create_task(self._retention.loop(), name=f"stepline-retention-{self.id}")
        )
        if self.settings.payloads.blobs is not None:
            side_tasks.append(
                asyncio.create_task(self._sweep.loop(), name=f"stepline-blob-sweep-{self.id}")
            )
        if self._shares.needed:
            await self._join_fleet()
            fleet_tasks.append(
                asyncio.create_task(self._shares.loop(), name=f"stepline-shares-{self.id}")
            )
        log.info("worker %s started for %s", self.id, ", ".join(self._workflows) or "nothing")
        self._running = True
        try:
            await self._loop.run()
        finally:
            self._running = False
            self.store.signals.remove_ready_listener(self.wake)
            self.store.signals.remove_timer_listener(self._loop.timer)
            # Leave the worker list first: a stopping worker takes no more work, so its peers
            # take its share of fleet-wide limits now, not once it has drained.
            await _cancel(fleet_tasks)
            await self._heartbeat.forget()
            await drain(self._slots, self.id, self.settings.grace_period, self._at_once)
            await _cancel(side_tasks)
            log.info("worker %s stopped", self.id)

    async def _join_fleet(self) -> None:
        # Before the first claim: the other workers see this one, and it sees them, so that
        # a fleet started at once splits its fleet-wide limits from the start.
        try:
            await self.beat_now()
            await self._shares.refresh()
        except StoreError as exc:
            log.log(outage_level(exc, logging.WARNING), "could not read workers: %s", exc)

    # -- activations -----------------------------------------------------------------------------

    def _start(self, claim: Claim) -> asyncio.Task[None]:
        # The slot is taken (counted against concurrency, its lease renewed) from the moment of
        # the claim, not only once the activation runs.
        slot = Slot(claim)
        superseded = self._active.get(claim.lease.pk)
        slot.task = asyncio.get_running_loop().create_task(self._activate(slot, superseded))
        self._active[claim.lease.pk] = slot
        return slot.task

    async def _activate(self, slot: Slot, superseded: Slot | None = None) -> None:
        workflow = slot.claim.instance.workflow
        # Under a fleet-wide limit the instance holds its slot in the store until its finish
        # lands: a claim made while the finish is in flight would find that slot taken, so the
        # worker looks again once the finish is written (below).
        holding = workflow in self._caps.holding
        try:
            if superseded is not None:
                await _stop_superseded(superseded)
            freed = _nothing if holding else self._loop.other_end
            await activate(self.store, slot, self.versions, self._activation_settings, freed)
        finally:
            if self._active.get(slot.claim.lease.pk) is slot:
                del self._active[slot.claim.lease.pk]
            self._loop.ended(workflow, holding=holding)


def _nothing() -> None:
    pass


async def _stop_superseded(old: Slot) -> None:
    """Stop the activation of an instance that this worker has just claimed again, before the
    new one starts: its lease is gone (a database crash undid its claim, or it expired), so it
    is fenced out, and the worker must never run one instance twice at once.

    An activation whose final write was in flight (``ending``) lost nothing: that write landed,
    or the instance could not have been claimed again under its lease, and only its reply was
    lost (a dropped connection) while the call retried."""
    record = old.claim.instance
    if old.ending:
        log.info(
            "instance %s/%s claimed again: its last write landed though its reply was lost",
            record.workflow,
            record.id,
        )
    else:
        log.warning(
            "instance %s/%s abandoned: lease on instance %s taken by a new claim of this worker",
            record.workflow,
            record.id,
            record.pk,
        )
    if old.task is not None:
        old.task.cancel()
        await asyncio.wait([old.task])


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel ``tasks`` and wait for their end, cancelling again any that goes on: a side job's
    loop can lose a cancellation inside a library's own wait (``asyncio.wait_for`` returning a
    result that lands with it, on Python 3.11) and would otherwise run for ever."""
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        _done, pending = await asyncio.wait(pending, timeout=RECANCEL_SECONDS)
    await asyncio.gather(*tasks, return_exceptions=True)  # retrieves their exceptions
