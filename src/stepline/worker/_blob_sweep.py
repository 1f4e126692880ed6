"""The orphan sweep's side task: deletes blobs that no row references (:mod:`stepline.payloads`
``sweep``), those of instances that retention, purge or delete removed included."""

from __future__ import annotations

import asyncio
import logging

from ..errors import BlobStoreError, StoreError
from ..payloads import PayloadCodec, sweep_orphans
from ..store.base import Store
from ._log import log, outage_level


class BlobSweep:
    """Runs the sweep every tenth of the grace period (between a minute and an hour)."""

    def __init__(self, store: Store, codec: PayloadCodec, grace: float) -> None:
        self.store = store
        self.codec = codec
        self.grace = grace

    async def loop(self) -> None:
        interval = min(max(self.grace / 10, 60.0), 3600.0)
        while True:
            try:
                await self.sweep_now()
            except (StoreError, BlobStoreError) as exc:
                log.log(
                    outage_level(exc, logging.WARNING), "blob sweep failed, will retry: %s", exc
                )
            await asyncio.sleep(interval)

    async def sweep_now(self, now: float | None = None) -> int:
        deleted = await sweep_orphans(self.codec, self.store, grace=self.grace, now=now)
        if deleted:
            log.info("blob sweep: deleted %d orphaned blobs", deleted)
        return deleted
