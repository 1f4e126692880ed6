"""The worker's view of the fleet, kept up to date by a side task: the live workers and what each
runs, read from the store, from which ``_planning`` derives this worker's shares of fleet-wide
limits and its balance caps.

The peers are read every :data:`REFRESH` seconds, so a worker that joins or leaves changes the
others' shares within about that long. A worker that has just joined reads sooner
(:data:`FIRST_REFRESH`, doubling): of workers started together, the first to join finds the list
without the others, and would run every slot and key it has room for until its next read."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Iterable, Mapping

from ..errors import StoreError
from ..store.base import Store
from ..workflow import WorkflowDefinition
from ._log import log, outage_level
from ._planning import Balance, WorkflowCaps, balanced_workflows, shares

REFRESH = 1.0
"""Seconds between reads of the worker list."""
FIRST_REFRESH = 0.05
"""Seconds from joining to the second read of the worker list; the wait doubles after each
read until it reaches :data:`REFRESH`."""
CONFIRM = 0.05
"""Seconds to the read that confirms a peer's lag (``Balance.confirming``)."""


class FleetShares:
    """Keeps ``caps``' shares up to date for the workflows of ``registry`` with a fleet-wide
    limit that holds slots (nothing to do when none has one, :attr:`needed`)."""

    def __init__(
        self,
        store: Store,
        worker_id: str,
        registry: Mapping[str, WorkflowDefinition],
        caps: WorkflowCaps,
        slots: int,
    ) -> None:
        self._store = store
        self._worker_id = worker_id
        self._caps = caps
        self.limits = {
            name: concurrency
            for name, definition in registry.items()
            if (concurrency := definition.limits.concurrency) is not None
        }
        self._balance = Balance(balanced_workflows(registry), worker_id, slots)
        self._peers = False
        """Whether the last read found a live peer."""
        self._soon = asyncio.Event()
        """Set when the worker took instances that may belong to a peer's split: read now."""
        self._read_at = -math.inf
        """When the last read of the fleet ended (``time.monotonic``)."""

    @property
    def needed(self) -> bool:
        """Whether a registered workflow has a fleet-wide limit to spread."""
        return bool(self.limits or self._balance.workflows)

    async def refresh(self) -> None:
        """Read the worker list (and, with peers, what each runs) and set the shares it gives."""
        workers = await self._store.workers.list_workers()
        now = self._store.now()
        found = shares(self.limits, workers, self._worker_id, now)
        balanced = tuple(self._balance.workflows)
        behind: dict[str, int] = {}
        self._peers = any(w.id != self._worker_id and w.live(now) for w in workers)
        if balanced:
            # Alone, there is nothing to even out (and no read to make).
            running = await self._store.flow.running_by_worker(balanced, now) if self._peers else {}
            found.update(self._balance.caps(running, workers, now))
            if self._store.pushes_notifications:
                # A worker that polls quickly (SQLite) finds the keys a capped peer leaves at
                # its next poll; asking for them as well only takes keys its peers are about to
                # claim, when its count looks low for a moment.
                behind = self._balance.catch_up(running, workers, now)
        self._caps.set_shares(found)
        self._caps.set_catch_up(behind)
        self._read_at = time.monotonic()

    @property
    def contested(self) -> bool:
        """Whether live peers may run the same balanced workflows (at the last read)."""
        return self._peers and bool(self._balance.workflows)

    def took(self, workflows: Iterable[str]) -> None:
        """A claim that asked for more than the worker's own ends freed took instances of
        ``workflows``. Of a balanced one, with peers, it may have taken the keys a peer's
        instances have just freed, before the peer's own claim, and the peer then runs none
        until a read caps this worker: make that read now, not at the next refresh."""
        if self._peers and any(name in self._balance.workflows for name in workflows):
            self._soon.set()

    async def _pause(self, seconds: float) -> None:
        """Wait ``seconds``, or until :meth:`took` asks for a read, but never less than
        :data:`CONFIRM` from the last read: polls that keep finding new work would otherwise
        read the fleet at every one of them."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._soon.wait(), seconds)
        self._soon.clear()
        early = self._read_at + CONFIRM - time.monotonic()
        if early > 0:
            await asyncio.sleep(early)

    async def loop(self) -> None:
        wait = min(FIRST_REFRESH, REFRESH)
        confirm = self._balance.confirming
        while True:
            if confirm:
                await self._pause(CONFIRM)
            else:
                await self._pause(wait)
                wait = min(wait * 2, REFRESH)
            try:
                await self.refresh()
            except StoreError as exc:
                # Not again at once: an outage would be read, and logged, every CONFIRM.
                confirm = False
                log.log(outage_level(exc, logging.WARNING), "could not read workers: %s", exc)
            else:
                confirm = self._balance.confirming
