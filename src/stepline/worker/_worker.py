"""The worker's orchestrator: :meth:`Worker.run`, the claim loop, and starting activations.
Running one activation, the per-workflow room of ``worker_concurrency``, the side tasks (lease
renewal, heartbeat, retention) and the graceful shutdown are its collaborators, each in its own
module."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from .._runtime import ActivationSettings, Observer, RunningMarks, RuntimeHooks
from ..errors import StoreError
from ..store.base import Claim, Store
from ..workflow import WorkflowDefinition
from ._activate import activate
from ._caps import ClaimPlan, WorkflowCaps
from ._clockstep import ClockStepWatch
from ._heartbeat import Heartbeat
from ._log import log, outage_level
from ._pacing import Pacing
from ._queries import QueryService
from ._renewal import LeaseRenewer
from ._retention import Retention
from ._settings import WorkerSettings, default_worker_id
from ._shares import FleetShares
from ._shutdown import drain
from ._slots import Reservation, Slot, Slots


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
    ) -> None:
        self.store = store
        self.registry = registry
        self.settings = settings or WorkerSettings()
        self.id = worker_id or default_worker_id()
        marks = hooks.marks if hooks is not None and hooks.marks is not None else RunningMarks()
        self._activation_settings = ActivationSettings(
            self.settings.max_payload,
            listeners,
            marks=marks,
            hooks=hooks,
            observer=observer,
            stream_keep=self.settings.stream_keep,
            stream_keep_for=self.settings.stream_keep_for,
        )
        self._observer = observer
        self._slots = Slots(self.settings.concurrency)
        self._active = self._slots.active  # the same dict: the hot path reads it directly
        self._caps = WorkflowCaps(registry)
        self._workflows = self._caps.workflows
        self._shares = FleetShares(store, self.id, registry, self._caps, self.settings.concurrency)
        self._renewer = LeaseRenewer(store, self._slots, self.settings.lease)
        self._heartbeat = Heartbeat(store, self.id, self.settings, self._workflows, self._slots)
        self._retention = Retention(store, self.settings.retention)
        self._queries = QueryService(store, self.id, registry, self.settings)
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._at_once = asyncio.Event()
        """Set by ``stop(at_once=True)``: cut the grace period short."""
        self._running = False
        self._limited = frozenset(
            name for name, definition in registry.items() if definition.limits.fleet_wide
        )
        """Workflows with fleet-wide limits: one that ends frees a slot that others may wait for."""
        self._backlog = True
        """Whether the last claim may have left runnable instances behind (a full batch)."""
        self._wanted = False
        """Whether the worker should look at the database when a slot frees: :meth:`wake` was
        called since the last claim, or the loop skipped looking (timers included) because every
        slot was taken."""
        self._pacing = Pacing()
        self._clock = ClockStepWatch(store.now)
        self._claim_after = 0.0
        """Monotonic time before which the loop claims nothing (after a clock step)."""

    # -- public ----------------------------------------------------------------------------------

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
        self._wake.set()
        # Told now, not when the drain begins: the worker first leaves the fleet (a database
        # write), and a step that ends meanwhile must not go on to the next.
        for slot in self._active.values():
            slot.request_stop("shutdown")

    def wake(self) -> None:
        """Something may be runnable: look at the database now instead of at the next poll."""
        self._wanted = True
        self._pacing.told()
        self._wake.set()

    def reserve(self, workflow: str, count: int) -> Reservation | None:
        """Hold free slots for up to ``count`` instances of ``workflow`` about to be created in
        this process, or None.

        The create claims them as it creates them (:class:`Reservation`), and this worker
        starts them at once: no claim, no history read (a new instance has none), no wait for
        its next look at the database. Only while :meth:`run` runs, with free slots, and when
        the last claim found nothing else runnable, so that new instances do not overtake a
        backlog of queued ones. Never for a workflow with limits: its instances wait for a
        claim, which applies them.
        """
        if not self._running or self._stopping.is_set() or self._backlog:
            return None
        definition = self.registry.get(workflow)
        if definition is None or not definition.limits.empty:
            return None
        take = self._slots.reserve(count)
        if take <= 0:
            return None
        return Reservation(self._slots, self._start, self.id, self.settings.lease, take)

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
        """Delete finished instances older than the retention setting; return how many."""
        return await self._retention.purge_now()

    async def run_once(self) -> int:
        """Claim every instance runnable now and run each to its next suspension or end.

        Returns how many activations ran. Repeated until it returns 0, it drives every instance
        as far as the store's current time allows: the test harness for a manual clock.
        """
        total = 0
        while True:
            claims = await self._claim(self._caps.plan(self._slots, self.settings.concurrency))
            if not claims:
                return total
            total += len(claims)
            tasks = [self._start(claim) for claim in claims]
            await asyncio.gather(*tasks)

    async def run(self) -> None:
        """Run until :meth:`stop` is called, then shut down gracefully."""
        self.store.add_ready_listener(self.wake)
        self._heartbeat.started_at = self.store.now()
        # The fleet's view of this worker (its heartbeat, its share) ends before the drain.
        fleet_tasks = [
            asyncio.create_task(self._heartbeat.loop(), name=f"stepline-heartbeat-{self.id}"),
        ]
        side_tasks = [
            asyncio.create_task(self._renewer.loop(), name=f"stepline-renew-{self.id}"),
            asyncio.create_task(self._queries.loop(), name=f"stepline-queries-{self.id}"),
        ]
        if self.settings.retention is not None:
            side_tasks.append(
                asyncio.create_task(self._retention.loop(), name=f"stepline-retention-{self.id}")
            )
        if self._shares.needed:
            await self._join_fleet()
            fleet_tasks.append(
                asyncio.create_task(self._shares.loop(), name=f"stepline-shares-{self.id}")
            )
        log.info("worker %s started for %s", self.id, ", ".join(self._workflows) or "nothing")
        self._running = True
        try:
            await self._claim_loop()
        finally:
            self._running = False
            self.store.remove_ready_listener(self.wake)
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

    # -- the claim loop --------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        pacing = self._pacing
        # Without notifications from other processes (SQLite), poll quickly after activity and
        # back off while idle; with them (PostgreSQL), the timer and notifications suffice.
        fastest = (
            self.settings.poll_interval
            if self.store.pushes_notifications
            else self.settings.min_poll_interval
        )
        pacing.start(fastest, self.settings.poll_interval)
        while not self._stopping.is_set():
            self._wake.clear()
            free = self._slots.free()
            step = self._clock.step()
            if step > 0:
                # Leases written by the clock before the step look expired by the one after
                # it, to this worker's claims and to other workers' on this machine: renew
                # ours now, and give the others a renewal interval to renew theirs.
                log.warning(
                    "worker %s: the clock jumped %.1f s forward; renewing leases first",
                    self.id,
                    step,
                )
                await self.renew_now()
                self._claim_after = time.monotonic() + self.settings.lease / 2
            hold = self._claim_after - time.monotonic()
            if hold > 0 and free > 0:
                await self._idle(min(hold, self.settings.poll_interval))
            elif free > 0 and pacing.answering() and self._caps.ending(self._slots):
                # It would answer its own ends, and more of them are being written: one claim
                # for them all once they land. Claims that each answer a finish batch split
                # instances that started together into ever smaller groups, each paying for its
                # own claim and step writes. A wait that times out makes the next claim a poll.
                pacing.waited(await self._idle(self.settings.poll_interval), back_off=False)
            elif free > 0:
                batch = min(free, self.settings.claim_batch)
                limit, answer = pacing.ask(batch)
                if answer:  # and the keys its peers leave it, if it runs fewer than its split
                    limit = min(batch, limit + self._caps.behind(self._slots))
                plan = self._caps.plan(self._slots, limit)
                self._wanted = False
                try:
                    claims = await self._claim(plan)
                except StoreError as exc:
                    if self._observer is not None:
                        self._observer.store_error("claim", exc)
                    log.log(outage_level(exc, logging.WARNING), "claim failed, retrying: %s", exc)
                    claims = []
                    await self._idle(1.0)
                self._backlog = bool(claims) and len(claims) == plan.limit and not answer
                for claim in claims:
                    self._start(claim)
                pacing.claimed(plan.limit, len(claims), contested=self._shares.contested)
                if claims:
                    if not answer:
                        self._shares.took(claim.instance.workflow for claim in claims)
                    if self._backlog:
                        continue  # there may be more: claim again at once
                    # Fewer than asked: nothing else was runnable. New work arrives by
                    # notification (or the next poll); timers by the wait below.
                if self._wake.is_set():
                    # Woken while it claimed: it claims again at once, whatever the timers.
                    pacing.waited(True)
                    continue
                timeout = await self._until_next_timer(pacing.wait)
                if timeout <= 0:
                    continue
                pacing.waited(await self._idle(timeout))
            else:
                self._wanted = True  # not looked at, timers included: look when a slot frees
                pacing.waited(await self._idle(self.settings.poll_interval), back_off=False)

    async def _claim(self, plan: ClaimPlan) -> list[Claim]:
        if not plan.workflows or plan.limit <= 0:
            return []
        return await self.store.claim(
            self.id,
            plan.workflows,
            plan.limit,
            self.settings.lease,
            self.store.now(),
            caps=plan.caps,
        )

    async def _until_next_timer(self, idle_wait: float) -> float:
        # Only the workflows with room: one at its worker_concurrency would look runnable now
        # (a busy loop); a slot that frees wakes the loop for it instead.
        plan = self._caps.plan(self._slots, 1)
        self._wanted = self._wanted or plan.held_back
        if not plan.workflows:
            return self.settings.poll_interval
        try:
            nxt = await self.store.next_wakeup(plan.workflows)
        except StoreError:
            return idle_wait
        if nxt is None:
            return idle_wait
        return min(idle_wait, max(nxt - self.store.now(), 0.0))

    async def _idle(self, timeout: float) -> bool:
        """Wait for a wake or ``timeout``; whether a wake ended it."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)
        return self._wake.is_set()

    # -- activations -----------------------------------------------------------------------------

    def _slot_freed(self) -> None:
        # A free slot is worth a claim only if runnable instances may be waiting for one: the
        # last claim was cut short by the free slots, a wake came since, or the loop has not
        # looked since every slot was taken. Otherwise new work comes by wake, and timers by
        # the loop's own wait.
        if self._backlog or self._wanted:
            self._wake.set()

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
            freed = _nothing if holding else self._other_end
            await activate(self.store, slot, self.registry, self._activation_settings, freed)
        finally:
            if self._active.get(slot.claim.lease.pk) is slot:
                del self._active[slot.claim.lease.pk]
            if workflow in self._limited:
                # Its end freed a slot of a fleet-wide limit, now that it is written: an
                # instance the last claim held back may take it.
                self._wanted = True
            if holding:
                self._pacing.held_end()
                self._slot_freed()
            else:
                self._other_end()

    def _other_end(self) -> None:
        # An end that is not of an instance under a limit: the next claim asks in full.
        self._pacing.told()
        self._slot_freed()


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
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
