"""The worker: claims runnable instances under a lease and runs their activations.

One :meth:`Worker.run` with named side tasks (lease renewal, heartbeat, retention) under a stop
event and a graceful shutdown timeout. :meth:`Worker.run_once` is one iteration of the claim
loop at the store's current time, so tests drive time with a manual clock instead of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._runtime import Activation, ActivationAborted, ActivationSettings
from .errors import LeaseLostError, StoreError, StoreUnavailableError
from .records import WorkerInfo
from .store.base import Claim, Store
from .workflow import WorkflowDefinition

log = logging.getLogger("stepline.worker")


def _level(exc: BaseException, level: int) -> int:
    """``level``, or INFO for a failure caused by the database being unreachable: the store
    logs each outage once, when it begins and when it ends, so the claims, renewals and
    activations that fail meanwhile do not repeat it (once per instance, say)."""
    cause = exc if isinstance(exc, StoreUnavailableError) else exc.__cause__
    return logging.INFO if isinstance(cause, StoreUnavailableError) else level


CLOCK_STEP = 0.5
"""Seconds the store's clock may run ahead of the monotonic clock between two looks before the
worker takes it for a clock stepped forward (an NTP step, an operator)."""


@dataclass(frozen=True)
class WorkerSettings:
    """Tuning of a worker. Defaults suit most deployments."""

    concurrency: int = 100
    """Activations run at once. One whose run is over no longer counts while its final write
    (finish) is in flight: it holds its lease until that commits, but runs no more code."""
    lease: float = 30.0
    """Seconds a claim is valid without renewal; a dead worker's instances move after this."""
    poll_interval: float = 0.5
    """Longest idle wait between looks at the database (other processes' work, timers)."""
    min_poll_interval: float = 0.002
    """First idle wait after activity; doubles up to ``poll_interval``."""
    grace_period: float = 10.0
    """On shutdown, how long running steps may take to finish before they are cancelled."""
    claim_batch: int = 50
    max_payload: int = 1024 * 1024
    retention: float | None = None
    """Delete complete, errored and terminated instances this long after they ended."""
    heartbeat: float = 5.0
    """Seconds between the worker's heartbeats: its row in the store's worker list (what
    ``stepline workers list`` shows). It counts as live while its last heartbeat is at most
    :data:`~stepline.records.WORKER_LIVE_BEATS` intervals old."""


class _Slot:
    """One claimed instance: counted against concurrency and renewed from claim to end."""

    __slots__ = ("activation", "claim", "ending", "stop_reason", "task")

    def __init__(self, claim: Claim) -> None:
        self.claim = claim
        self.task: asyncio.Task[None] | None = None
        self.activation: Activation | None = None
        self.stop_reason: str | None = None
        self.ending = False
        """Set while the activation's final write (finish or release) is in flight."""

    def request_stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        if self.activation is not None:
            self.activation.request_stop(reason)


class Reservation:
    """Slots of a worker held for instances about to be created in its process
    (:meth:`Worker.reserve`).

    The create claims up to ``slots`` of the new instances for ``owner`` with a lease of
    ``lease_seconds`` (:meth:`~stepline.store.base.Store.create_and_claim`), then calls
    :meth:`take_created` with the claims it made, or :meth:`release` if it failed. The slots
    count against the worker's concurrency until then.
    """

    __slots__ = ("_worker", "lease_seconds", "owner", "slots")

    def __init__(self, worker: Worker, slots: int) -> None:
        self._worker: Worker | None = worker
        self.owner = worker.id
        self.lease_seconds = worker.settings.lease
        self.slots = slots

    def take_created(self, claims: Sequence[Claim]) -> None:
        """Start the instances the create claimed, at once, and give back the other slots."""
        worker = self._end()
        for claim in claims:
            worker._start(claim)

    def release(self) -> None:
        """The create failed: give the slots back."""
        self._end()

    def _end(self) -> Worker:
        worker, self._worker = self._worker, None
        if worker is None:
            raise RuntimeError("a reservation is taken or released once")
        worker._reserved -= self.slots
        return worker


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


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
    ) -> None:
        self.store = store
        self.registry = registry
        self.settings = settings or WorkerSettings()
        self.id = worker_id or default_worker_id()
        self._activation_settings = ActivationSettings(self.settings.max_payload, listeners)
        self._active: dict[int, _Slot] = {}
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._at_once = asyncio.Event()
        """Set by ``stop(at_once=True)``: cut the grace period short."""
        self._workflows = sorted(registry)
        self._running = False
        self._backlog = True
        """Whether the last claim may have left runnable instances behind (a full batch)."""
        self._wanted = False
        """Whether the worker should look at the database when a slot frees: :meth:`wake` was
        called since the last claim, or the loop skipped looking (timers included) because every
        slot was taken."""
        self._reserved = 0
        """Slots held for creates in flight (:meth:`reserve`)."""
        self._clock_mark: tuple[float, float] | None = None
        """(store time, monotonic time) at the last look at the clock (:meth:`_clock_step`)."""
        self._claim_after = 0.0
        """Monotonic time before which the loop claims nothing (after a clock step)."""
        self._started_at: float | None = None
        """When :meth:`run` began (store time), for the heartbeat."""

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

    def wake(self) -> None:
        """Something may be runnable: look at the database now instead of at the next poll."""
        self._wanted = True
        self._wake.set()

    def _slot_freed(self) -> None:
        # A free slot is worth a claim only if runnable instances may be waiting for one: the
        # last claim was cut short by the free slots, a wake came since, or the loop has not
        # looked since every slot was taken. Otherwise new work comes by wake, and timers by
        # the loop's own wait.
        if self._backlog or self._wanted:
            self._wake.set()

    def reserve(self, workflow: str, count: int) -> Reservation | None:
        """Hold free slots for up to ``count`` instances of ``workflow`` about to be created in
        this process, or None.

        The create claims them as it creates them (:class:`Reservation`), and this worker
        starts them at once: no claim, no history read (a new instance has none), no wait for
        its next look at the database. Only while :meth:`run` runs, with free slots, and when
        the last claim found nothing else runnable, so that new instances do not overtake a
        backlog of queued ones.
        """
        if not self._running or self._stopping.is_set() or self._backlog:
            return None
        if workflow not in self.registry:
            return None
        take = min(count, self._free_slots())
        if take <= 0:
            return None
        self._reserved += take
        return Reservation(self, take)

    async def run_once(self) -> int:
        """Claim every instance runnable now and run each to its next suspension or end.

        Returns how many activations ran. Repeated until it returns 0, it drives every instance
        as far as the store's current time allows: the test harness for a manual clock.
        """
        total = 0
        while True:
            claims = await self._claim(self.settings.concurrency)
            if not claims:
                return total
            total += len(claims)
            tasks = [self._start(claim) for claim in claims]
            await asyncio.gather(*tasks)

    async def run(self) -> None:
        """Run until :meth:`stop` is called, then shut down gracefully."""
        self.store.add_ready_listener(self.wake)
        self._started_at = self.store.now()
        side_tasks = [
            asyncio.create_task(self._renew_loop(), name=f"stepline-renew-{self.id}"),
            asyncio.create_task(self._heartbeat_loop(), name=f"stepline-heartbeat-{self.id}"),
        ]
        if self.settings.retention is not None:
            side_tasks.append(
                asyncio.create_task(self._retention_loop(), name=f"stepline-retention-{self.id}")
            )
        # Without notifications from other processes (SQLite), poll quickly after activity and
        # back off while idle; with them (PostgreSQL), the timer and notifications suffice.
        fastest = (
            self.settings.poll_interval
            if self.store.pushes_notifications
            else self.settings.min_poll_interval
        )
        idle_wait = fastest
        log.info("worker %s started for %s", self.id, ", ".join(self._workflows) or "nothing")
        self._running = True
        try:
            while not self._stopping.is_set():
                self._wake.clear()
                free = self._free_slots()
                step = self._clock_step()
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
                elif free > 0:
                    limit = min(free, self.settings.claim_batch)
                    self._wanted = False
                    try:
                        claims = await self._claim(limit)
                    except StoreError as exc:
                        log.log(_level(exc, logging.WARNING), "claim failed, retrying: %s", exc)
                        claims = []
                        await self._idle(1.0)
                    self._backlog = len(claims) == limit
                    for claim in claims:
                        self._start(claim)
                    if claims:
                        idle_wait = fastest
                        if len(claims) == limit:
                            continue  # there may be more: claim again at once
                        # Fewer than asked: nothing else was runnable. New work arrives by
                        # notification (or the next poll); timers by the wait below.
                    timeout = await self._until_next_timer(idle_wait)
                    if timeout <= 0:
                        continue
                    await self._idle(timeout)
                    idle_wait = min(idle_wait * 2, self.settings.poll_interval)
                else:
                    self._wanted = True  # not looked at, timers included: look when a slot frees
                    await self._idle(self.settings.poll_interval)
        finally:
            self._running = False
            self.store.remove_ready_listener(self.wake)
            await self._shutdown()
            for task in side_tasks:
                task.cancel()
            await asyncio.gather(*side_tasks, return_exceptions=True)
            await self._forget()
            log.info("worker %s stopped", self.id)

    # -- internals -------------------------------------------------------------------------------

    def _clock_step(self) -> float:
        """How far the store's clock moved ahead of the monotonic clock since the last call, if
        more than :data:`CLOCK_STEP` (else 0). A clock stepped back needs nothing: leases then
        look longer, and timers wait at most the step longer (the loop re-reads them)."""
        now, mono = self.store.now(), time.monotonic()
        last, self._clock_mark = self._clock_mark, (now, mono)
        if last is None:
            return 0.0
        ahead = (now - last[0]) - (mono - last[1])
        return ahead if ahead > CLOCK_STEP else 0.0

    def _free_slots(self) -> int:
        # An activation whose final write is in flight (``ending``) holds its lease until that
        # commits, but no slot: it runs no more code.
        running = sum(1 for slot in self._active.values() if not slot.ending)
        return self.settings.concurrency - running - self._reserved

    async def _claim(self, limit: int) -> list[Claim]:
        if not self._workflows:
            return []
        return await self.store.claim(
            self.id, self._workflows, limit, self.settings.lease, self.store.now()
        )

    async def _until_next_timer(self, idle_wait: float) -> float:
        try:
            nxt = await self.store.next_wakeup(self._workflows)
        except StoreError:
            return idle_wait
        if nxt is None:
            return idle_wait
        return min(idle_wait, max(nxt - self.store.now(), 0.0))

    async def _idle(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    def _start(self, claim: Claim) -> asyncio.Task[None]:
        # The slot is taken (counted against concurrency, its lease renewed) from the moment of
        # the claim, not only once the activation runs.
        slot = _Slot(claim)
        slot.task = asyncio.get_running_loop().create_task(self._activate(slot))
        self._active[claim.lease.pk] = slot
        return slot.task

    async def _activate(self, slot: _Slot) -> None:
        claim = slot.claim
        record = claim.instance
        lease = claim.lease
        try:
            definition = self.registry[record.workflow]
            activation = Activation(
                self.store, claim, claim.history, definition.make(), self._activation_settings
            )
            slot.activation = activation
            if slot.stop_reason is not None:
                activation.request_stop(slot.stop_reason)
            finish = await activation.execute()
            slot.ending = True  # its lease is about to be released: not "lost"
            self._slot_freed()  # claim more while its final write is in flight
            if finish.status == "waiting" and activation.stop_reason == "shutdown":
                await self.store.release(lease, self.store.now())
                return
            status = await self.store.finish(lease, finish, self.store.now())
            log.log(
                logging.INFO if status in ("complete", "errored", "terminated") else logging.DEBUG,
                "instance %s/%s -> %s",
                record.workflow,
                record.id,
                status,
            )
        except (ActivationAborted, LeaseLostError) as exc:
            log.log(
                _level(exc, logging.WARNING),
                "instance %s/%s abandoned: %s",
                record.workflow,
                record.id,
                exc,
            )
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.store.release(lease, self.store.now()))
            raise
        except Exception as exc:
            # A store failure (or a bug) must not leave the instance stuck until its lease
            # expires: give it back so that this or another worker retries it.
            log.log(
                _level(exc, logging.ERROR),
                "instance %s/%s: activation failed, releasing it: %s",
                record.workflow,
                record.id,
                exc,
                exc_info=not isinstance(exc, StoreError),
            )
            with contextlib.suppress(Exception):
                await self.store.release(lease, self.store.now())
        finally:
            self._active.pop(lease.pk, None)
            self._slot_freed()

    async def _renew_loop(self) -> None:
        interval = max(self.settings.lease / 3, 0.05)
        while True:
            await asyncio.sleep(interval)
            await self.renew_now()

    async def _heartbeat_loop(self) -> None:
        while True:
            try:
                await self.beat_now()
            except StoreError as exc:
                log.log(_level(exc, logging.WARNING), "heartbeat failed, will retry: %s", exc)
            await asyncio.sleep(self.settings.heartbeat)

    async def beat_now(self) -> None:
        """Write this worker's heartbeat: its row in the store's worker list, which the same
        write clears of workers that stopped beating long ago."""
        now = self.store.now()
        started = self._started_at if self._started_at is not None else now
        info = WorkerInfo(
            self.id,
            socket.gethostname(),
            os.getpid(),
            started,
            now,
            self.settings.heartbeat,
            tuple(self._workflows),
            self.settings.concurrency,
            len(self._active),
        )
        await self.store.heartbeat(info, now)

    async def _forget(self) -> None:
        """Remove this worker's row on a graceful stop. Bounded: with the database gone the
        stop does not wait for it; the row then shows the worker dead, and expires."""
        try:
            await asyncio.wait_for(
                self.store.forget_worker(self.id), max(self.settings.heartbeat, 1.0)
            )
        except (StoreError, TimeoutError) as exc:
            log.log(
                _level(exc, logging.WARNING), "worker %s: could not deregister: %s", self.id, exc
            )

    async def _retention_loop(self) -> None:
        retention = self.settings.retention
        if retention is None:
            return
        # Often enough that nothing outlives its retention by more than a tenth of it (at most an
        # hour late), rarely enough to cost nothing.
        interval = min(max(retention / 10, 1.0), 3600.0)
        while True:
            try:
                await self.purge_now()
            except StoreError as exc:
                log.log(
                    _level(exc, logging.WARNING), "retention clean-up failed, will retry: %s", exc
                )
            await asyncio.sleep(interval)

    async def purge_now(self) -> int:
        """Delete finished instances older than the retention setting; return how many."""
        if self.settings.retention is None:
            return 0
        cutoff = self.store.now() - self.settings.retention
        deleted = await self.store.purge_instances(
            None, ("complete", "errored", "terminated"), cutoff
        )
        if deleted:
            log.info("retention: deleted %d finished instances", deleted)
        return deleted

    async def renew_now(self) -> None:
        """Extend every held lease; cancel activations whose lease is gone; see pause requests."""
        if not self._active:
            return
        slots = list(self._active.values())
        leases = [slot.claim.lease for slot in slots]
        try:
            held = await self.store.renew(leases, self.settings.lease, self.store.now())
        except StoreError as exc:
            log.log(_level(exc, logging.WARNING), "lease renewal failed: %s", exc)
            return
        for slot in slots:
            lease = slot.claim.lease
            if self._active.get(lease.pk) is not slot or slot.ending:
                continue  # finished, or finishing, while the renewal was in flight
            status = held.get(lease.pk)
            if status is None:
                log.warning(
                    "lease lost on %s/%s", slot.claim.instance.workflow, slot.claim.instance.id
                )
                if slot.task is not None:
                    slot.task.cancel()
            elif status == "waitingForPause":
                slot.request_stop("pause")

    async def _shutdown(self) -> None:
        if not self._active:
            return
        log.info("worker %s: waiting for %d running activations", self.id, len(self._active))
        for slot in self._active.values():
            slot.request_stop("shutdown")
        slots = {slot.task: slot for slot in self._active.values() if slot.task is not None}
        pending = await self._grace(set(slots))
        if pending and self._at_once.is_set():
            log.warning("worker %s: stopping at once, cancelling %d", self.id, len(pending))
        for task in pending:
            # One whose run is over only waits for its finish, a database write that carries its
            # last step records: let it land (the store gives up on its own if the database is
            # gone) rather than lose them and run those steps again.
            if not slots[task].ending:
                task.cancel()
        if pending:
            await asyncio.wait(pending)

    async def _grace(self, tasks: set[asyncio.Task[None]]) -> set[asyncio.Task[None]]:
        """Wait for ``tasks`` until the grace period is over or ``stop(at_once=True)``; return
        those still running."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.grace_period
        cut = asyncio.ensure_future(self._at_once.wait())
        try:
            while tasks and not cut.done():
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                await asyncio.wait(
                    {*tasks, cut}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
                )
                tasks = {task for task in tasks if not task.done()}
        finally:
            cut.cancel()
        return tasks
