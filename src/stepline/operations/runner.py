"""Bulk jobs, the workers' side: a side job of every worker that runs the running jobs'
batches. Workers share the jobs: the store makes concurrent batches of one job take turns, and
each batch commits its actions with the job's cursor, so a worker killed mid-batch leaves
nothing done twice; the next batch, on any worker, picks up at the cursor."""

from __future__ import annotations

import asyncio
import logging

from ..errors import SteplineError, StoreError, outage_level
from ..payloads import PayloadCodec
from ..store.base import Store

log = logging.getLogger("stepline.worker")

BATCH = 200
"""Instances acted on per transaction."""
IDLE_POLL = 1.0
"""Seconds between looks for running jobs while there are none."""


class BulkRunner:
    """Runs the store's running bulk jobs to their end, batch after batch."""

    def __init__(
        self,
        store: Store,
        codec: PayloadCodec | None = None,
        *,
        batch: int = BATCH,
        idle_poll: float = IDLE_POLL,
    ) -> None:
        """``codec``: the worker's, to delete what a ``delete`` batch's instances offloaded."""
        self.store = store
        self.codec = codec
        self.batch = batch
        self.idle_poll = idle_poll

    async def loop(self) -> None:
        while True:
            try:
                worked = await self.run_once()
            except StoreError as exc:
                level = outage_level(exc, logging.WARNING)
                log.log(level, "bulk jobs: a batch failed, will retry: %s", exc)
                worked = False
            if not worked:
                await asyncio.sleep(self.idle_poll)

    async def run_once(self) -> bool:
        """One batch of each running job; whether there was any."""
        jobs = await self.store.operations.bulk_jobs("running", 20)
        for job in jobs:
            try:
                ran = await self.store.operations.run_bulk_batch(job.id, self.batch)
            except StoreError:
                raise
            except SteplineError as exc:  # its filter no longer parses, say: try the others
                log.error("bulk job %s: %s", job.id, exc)
                continue
            if ran.deleted and self.codec is not None:
                await self.codec.forget(ran.deleted)  # logs a failure: the sweep has them then
            done = ran.job
            if done.status != "running":
                log.info(
                    "bulk job %s %s: %d done, %d skipped of %d",
                    job.id, done.status, done.done, done.skipped, done.total,
                )  # fmt: skip
        return bool(jobs)
