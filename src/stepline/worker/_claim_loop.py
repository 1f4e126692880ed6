"""The worker's claim loop: when it looks at the database, how many instances it asks for, and
how long it waits between looks (the rules are ``_planning``'s; this is the loop that follows
them). It starts what it claims through the worker, and the worker tells it of every end."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence

from .._runtime import Observer
from ..errors import StoreError
from ..store.base import Claim, Claimed, Store
from ..workflow import WorkflowDefinition
from ._clockstep import ClockStepWatch
from ._deadlines import Deadlines
from ._log import log, outage_level
from ._planning import ClaimPlan, Pacing, WorkflowCaps
from ._settings import WorkerSettings
from ._shares import FleetShares
from ._slots import Slots


class ClaimLoop:
    """One worker's claim loop and what it knows between claims."""

    def __init__(
        self,
        store: Store,
        registry: Mapping[str, WorkflowDefinition],
        settings: WorkerSettings,
        worker_id: str,
        slots: Slots,
        caps: WorkflowCaps,
        shares: FleetShares,
        versions: Mapping[str, Sequence[str]],
        patches: Mapping[tuple[str, str], Collection[str]],
        *,
        start: Callable[[Claim], object],
        renew_now: Callable[[], Awaitable[None]],
        stopping: asyncio.Event,
        observer: Observer | None,
    ) -> None:
        self.store = store
        self.settings = settings
        self._worker_id = worker_id
        self._slots = slots
        self._caps = caps
        self._shares = shares
        self._versions = versions
        """The versions of each workflow it claims (``Store.claim``'s ``versions``)."""
        self._patches = patches
        """The patches its code has (``Store.claim``'s ``patches``), kept up to date by the
        worker."""
        self._start = start
        self._renew_now = renew_now
        self._stopping = stopping
        self._observer = observer
        self._wake = asyncio.Event()
        self._limited = frozenset(
            name for name, definition in registry.items() if definition.limits.fleet_wide
        )
        """Workflows with fleet-wide limits: one that ends frees a slot that others may wait for."""
        self.backlog = True
        """Whether the last claim may have left runnable instances behind (a full batch)."""
        self._wanted = False
        """Whether the worker should look at the database when a slot frees: :meth:`wake` was
        called since the last claim, or the loop skipped looking (timers included) because every
        slot was taken."""
        self._pacing = Pacing()
        self._clock = ClockStepWatch(store.now)
        self.deadlines = Deadlines(store, registry.keys())
        self._claim_after = 0.0
        """Monotonic time before which the loop claims nothing (after a clock step)."""
        self._woken = False
        """Whether ``_wake`` was set to look at the database now (not only for a timer)."""
        self._timer_at: float | None = None
        """The earliest timer :meth:`timer` told of since the loop last looked (store time)."""

    def wake(self) -> None:
        """Something may be runnable: look at the database now instead of at the next poll."""
        self._wanted = True
        self._pacing.told()
        self._woken = True
        self._wake.set()

    def timer(self, at: float) -> None:
        """An instance this process suspended becomes runnable at ``at`` (store time): the
        loop's wait ends by then. (A look at the database now would only learn that timer.)"""
        if self._timer_at is None or at < self._timer_at:
            self._timer_at = at
            self._wake.set()  # the wait recomputes its end (see _idle)

    def interrupt(self) -> None:
        """End the loop's wait (the worker is stopping)."""
        self._woken = True
        self._wake.set()

    def ended(self, workflow: str, *, holding: bool) -> None:
        """An activation of ``workflow`` ended; ``holding``: it kept its slot of a fleet-wide
        limit in the store until its finish landed, which it now has."""
        if workflow in self._limited:
            # Its end freed a slot of a fleet-wide limit, now that it is written: an instance
            # the last claim held back may take it.
            self._wanted = True
        if holding:
            self._pacing.held_end()
            self._slot_freed()
        else:
            self.other_end()

    def other_end(self) -> None:
        """An end that is not of an instance under a limit: the next claim asks in full."""
        self._pacing.told()
        self._slot_freed()

    def _slot_freed(self) -> None:
        # A free slot is worth a claim only if runnable instances may be waiting for one: the
        # last claim was cut short by the free slots, a wake came since, or the loop has not
        # looked since every slot was taken. Otherwise new work comes by wake, and timers by
        # the loop's own wait.
        if self.backlog or self._wanted:
            self._woken = True
            self._wake.set()

    async def run(self) -> None:
        """Claim and start activations until the worker stops."""
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
            self._woken = False
            self._timer_at = None  # this look (or its next_look) covers the timers told so far
            await self.deadlines.expire()
            free = self._slots.free()
            step = self._clock.step()
            if step > 0:
                # Leases written by the clock before the step look expired by the one after
                # it, to this worker's claims and to other workers' on this machine: renew
                # ours now, and give the others a renewal interval to renew theirs.
                log.warning(
                    "worker %s: the clock jumped %.1f s forward; renewing leases first",
                    self._worker_id,
                    step,
                )
                await self._renew_now()
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
                    claimed = await self.claim(plan)
                except StoreError as exc:
                    if self._observer is not None:
                        self._observer.store_error("claim", exc)
                    log.log(outage_level(exc, logging.WARNING), "claim failed, retrying: %s", exc)
                    claimed = Claimed([])
                    await self._idle(1.0)
                claims = claimed.claims
                self.backlog = bool(claims) and len(claims) == plan.limit and not answer
                for claim in claims:
                    self._start(claim)
                pacing.claimed(plan.limit, len(claims), contested=self._shares.contested)
                if claims:
                    if not answer:
                        self._shares.took(claim.instance.workflow for claim in claims)
                    if self.backlog:
                        continue  # there may be more: claim again at once
                    # Fewer than asked: nothing else was runnable. New work arrives by
                    # notification (or the next poll); timers by the wait below.
                if self._woken:
                    # Woken while it claimed: it claims again at once, whatever the timers.
                    pacing.waited(True)
                    continue
                timeout = await self._until_next_timer(pacing.wait, plan.workflows, claimed)
                if timeout <= 0:
                    continue
                pacing.waited(await self._idle(timeout))
            else:
                self._wanted = True  # not looked at, timers included: look when a slot frees
                pacing.waited(await self._idle(self.settings.poll_interval), back_off=False)

    async def claim(self, plan: ClaimPlan) -> Claimed:
        """One claim as ``plan`` says (nothing without workflows or room)."""
        if not plan.workflows or plan.limit <= 0:
            return Claimed([])
        return await self.store.claim(
            self._worker_id,
            plan.workflows,
            plan.limit,
            self.settings.lease,
            self.store.now(),
            caps=plan.caps,
            versions=self._versions,
            patches=self._patches,
        )

    async def _until_next_timer(
        self, idle_wait: float, claimed_workflows: tuple[str, ...], claimed: Claimed
    ) -> float:
        # Only the workflows with room: one at its worker_concurrency would look runnable now
        # (a busy loop); a slot that frees wakes the loop for it instead.
        plan = self._caps.plan(self._slots, 1)
        self._wanted = self._wanted or plan.held_back
        if not plan.workflows:
            return self.settings.poll_interval
        try:
            # The claim's answer holds for the workflows claimed or some of them (the timer of
            # more is at worst earlier: one wake-up for nothing); nothing became runnable in
            # this process since, or the loop, woken, would not have asked.
            look = claimed.next_look if set(plan.workflows) <= set(claimed_workflows) else None
            nxt = (
                look.at
                if look is not None
                else await self.store.next_wakeup(plan.workflows, self._versions, self._patches)
            )
        except StoreError:
            return idle_wait
        deadline = self.deadlines.next_at
        if deadline is not None and (nxt is None or deadline < nxt):
            nxt = deadline
        if nxt is None:
            return idle_wait
        return min(idle_wait, max(nxt - self.store.now(), 0.0))

    async def _idle(self, timeout: float) -> bool:
        """Wait for a wake or ``timeout`` (brought forward to a timer told meanwhile); whether a
        wake ended it."""
        end = time.monotonic() + timeout
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(end - time.monotonic(), 0.0))
            at = self._timer_at
            if self._woken or not self._wake.is_set() or at is None:
                return self._wake.is_set()
            self._timer_at = None
            self._wake.clear()
            end = min(end, time.monotonic() + max(at - self.store.now(), 0.0))
