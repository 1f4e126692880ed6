"""Lease renewal: the side task that keeps the worker's claims valid, cancels activations
whose lease was lost, and passes pause requests on to the activations they concern."""

from __future__ import annotations

import asyncio
import logging

from ..errors import StoreError
from ..store.base import Store
from ._log import log, outage_level
from ._slots import Slots


class LeaseRenewer:
    """Renews the leases of ``slots`` every third of ``lease`` seconds."""

    def __init__(self, store: Store, slots: Slots, lease: float) -> None:
        self.store = store
        self.slots = slots
        self.lease = lease

    async def loop(self) -> None:
        interval = max(self.lease / 3, 0.05)
        while True:
            await asyncio.sleep(interval)
            await self.renew_now()

    async def renew_now(self) -> None:
        """Extend every held lease; cancel activations whose lease is gone; see pause requests."""
        active = self.slots.active
        if not active:
            return
        slots = list(active.values())
        leases = [slot.claim.lease for slot in slots]
        try:
            held = await self.store.renew(leases, self.lease, self.store.now())
        except StoreError as exc:
            log.log(outage_level(exc, logging.WARNING), "lease renewal failed: %s", exc)
            return
        for slot in slots:
            lease = slot.claim.lease
            if active.get(lease.pk) is not slot or slot.ending:
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
