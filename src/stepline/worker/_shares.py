"""A worker's share of each fleet-wide ``concurrency``: the limit split among the live workers
that run the workflow and have room, so that one process does not take every slot.

Without it, the worker whose instance ends is the first to see the freed slot (its own claim
follows its own finish) while the others learn of it only at their next poll: one process ends
up running all of the limit's instances and the rest of the fleet idles. With it, a worker
claims instances of such a workflow only while it runs fewer than ``ceil(concurrency / n)`` of
them, ``n`` being itself and the other live workers (by heartbeat) that run the workflow and
had a free slot at their last heartbeat. A worker alone, or whose peers are full, takes the
whole limit. The store still enforces the limit itself; the share only spreads it.

The peers are read from the store's worker list every :data:`REFRESH` seconds, so a worker
that joins or leaves changes the others' shares within about that long."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping, Sequence

from ..errors import StoreError
from ..records import WorkerInfo
from ..store.base import Store
from ..workflow import WorkflowDefinition
from ._caps import WorkflowCaps
from ._log import log, outage_level

REFRESH = 1.0
"""Seconds between reads of the worker list."""


def shares(
    limits: Mapping[str, int], workers: Sequence[WorkerInfo], worker_id: str, now: float
) -> dict[str, int]:
    """The share of worker ``worker_id`` of each workflow's fleet-wide concurrency in
    ``limits``, given the worker list: only for those with live peers that have room."""
    found: dict[str, int] = {}
    for name, concurrency in limits.items():
        peers = 1 + sum(
            1
            for worker in workers
            if worker.id != worker_id
            and worker.live(now)
            and name in worker.workflows
            and worker.running < worker.concurrency
        )
        if peers > 1:
            found[name] = math.ceil(concurrency / peers)
    return found


class FleetShares:
    """Keeps ``caps``' shares up to date for the workflows of ``registry`` with a fleet-wide
    concurrency (nothing to do when none has one)."""

    def __init__(
        self,
        store: Store,
        worker_id: str,
        registry: Mapping[str, WorkflowDefinition],
        caps: WorkflowCaps,
    ) -> None:
        self._store = store
        self._worker_id = worker_id
        self._caps = caps
        self.limits = {
            name: concurrency
            for name, definition in registry.items()
            if (concurrency := definition.limits.concurrency) is not None
        }

    async def refresh(self) -> None:
        """Read the worker list and set the shares it gives."""
        workers = await self._store.list_workers()
        self._caps.set_shares(shares(self.limits, workers, self._worker_id, self._store.now()))

    async def loop(self) -> None:
        while True:
            await asyncio.sleep(REFRESH)
            try:
                await self.refresh()
            except StoreError as exc:
                log.log(outage_level(exc, logging.WARNING), "could not read workers: %s", exc)
