"""Retention: the side task that deletes finished instances once they are old enough."""

from __future__ import annotations

import asyncio
import logging

from ..errors import StoreError
from ..store.base import Store
from ._log import log, outage_level


class Retention:
    """Deletes complete, errored and terminated instances ``retention`` seconds after they
    ended; nothing when ``retention`` is None."""

    def __init__(self, store: Store, retention: float | None) -> None:
        self.store = store
        self.retention = retention

    async def loop(self) -> None:
        retention = self.retention
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
                    outage_level(exc, logging.WARNING),
                    "retention clean-up failed, will retry: %s",
                    exc,
                )
            await asyncio.sleep(interval)

    async def purge_now(self) -> int:
        """Delete finished instances older than the retention setting; return how many."""
        if self.retention is None:
            return 0
        cutoff = self.store.now() - self.retention
        deleted = await self.store.purge_instances(
            None, ("complete", "errored", "terminated"), cutoff
        )
        if deleted:
            log.info("retention: deleted %d finished instances", deleted)
        return deleted
