"""Retention: the side task that deletes finished instances once their time has come."""

from __future__ import annotations

import asyncio
import logging

from ..errors import StoreError
from ..payloads import PayloadCodec
from ..store.base import Store
from ._log import log, outage_level

BATCH = 500
"""Instances deleted per transaction: small, so a clean-up never holds locks for long."""

CHECK_EVERY = 60.0
"""Seconds between looks for expired instances when nothing else says (at most a minute late)."""


class Retention:
    """Deletes finished instances whose ``delete_at`` has come (set as each ended, from its
    own or its workflow's retention by outcome), and with ``retention`` (the workers' one
    setting, the default) those without one ``retention`` seconds after they ended; their
    blobs right after their rows (``codec``)."""

    def __init__(
        self, store: Store, retention: float | None, codec: PayloadCodec | None = None
    ) -> None:
        self.store = store
        self.retention = retention
        self.codec = codec

    async def loop(self) -> None:
        # Often enough that nothing outlives its retention by more than a tenth of the global
        # one, or a minute; rarely enough to cost one indexed read.
        retention = self.retention
        interval = CHECK_EVERY if retention is None else min(max(retention / 10, 1.0), CHECK_EVERY)
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
        """Delete what has expired, a batch at a time, logging each batch; return how many."""
        total = 0
        while True:
            now = self.store.now()
            cutoff = None if self.retention is None else now - self.retention
            gone = await self.store.retention.purge_expired(now, BATCH, cutoff)
            if gone and self.codec is not None:
                await self.codec.forget((d.workflow, d.id) for d in gone)
            deleted = len(gone)
            if deleted:
                counts: dict[tuple[str, str], int] = {}
                for d in gone:
                    counts[d.workflow, d.status] = counts.get((d.workflow, d.status), 0) + 1
                total += deleted
                by = " ".join(f"{wf}/{status}={n}" for (wf, status), n in sorted(counts.items()))
                log.info(
                    "retention: deleted=%d %s",
                    deleted,
                    by,
                    extra={
                        "deleted": deleted,
                        "by": {f"{w}/{s}": n for (w, s), n in counts.items()},
                    },
                )
            if deleted < BATCH:
                return total
