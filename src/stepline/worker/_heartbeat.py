"""The worker's liveness: its heartbeat row in the store's worker list, written on an
interval while it runs and removed when it stops gracefully."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Collection, Mapping, Sequence

from ..errors import StoreError
from ..records import WorkerInfo
from ..store.base import Store
from ._log import log, outage_level
from ._settings import WorkerSettings
from ._slots import Slots


class Heartbeat:
    """Writes the heartbeat of worker ``worker_id``, which runs ``workflows`` in ``slots``."""

    def __init__(
        self,
        store: Store,
        worker_id: str,
        settings: WorkerSettings,
        workflows: Sequence[str],
        slots: Slots,
        versions: Mapping[str, tuple[str, ...]],
        patches: Mapping[tuple[str, str], Collection[str]] | None = None,
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.settings = settings
        self.workflows = tuple(workflows)
        self.slots = slots
        self.versions = dict(versions)
        self.patches = patches
        """The patches its code has, by workflow and version (the worker's, kept up to date)."""
        self.started_at: float | None = None
        """When the worker's run began (store time)."""

    async def loop(self) -> None:
        while True:
            try:
                await self.beat_now()
            except StoreError as exc:
                log.log(outage_level(exc, logging.WARNING), "heartbeat failed, will retry: %s", exc)
            await asyncio.sleep(self.settings.heartbeat)

    async def beat_now(self) -> None:
        """Write this worker's heartbeat: its row in the store's worker list, which the same
        write clears of workers that stopped beating long ago."""
        now = self.store.now()
        started = self.started_at if self.started_at is not None else now
        info = WorkerInfo(
            self.worker_id,
            socket.gethostname(),
            os.getpid(),
            started,
            now,
            self.settings.heartbeat,
            self.workflows,
            self.settings.concurrency,
            len(self.slots.active),
            self.versions,
            self._patches_by_workflow(),
        )
        await self.store.workers.heartbeat(info, now)

    def _patches_by_workflow(self) -> dict[str, dict[str, tuple[str, ...]]] | None:
        if self.patches is None:
            return None
        found: dict[str, dict[str, tuple[str, ...]]] = {}
        for (name, version), ids in self.patches.items():
            found.setdefault(name, {})[version] = tuple(sorted(ids))
        return found

    async def forget(self) -> None:
        """Remove this worker's row as a graceful stop begins. Bounded: with the database gone
        the stop does not wait for it; the row then shows the worker dead, and expires."""
        try:
            await asyncio.wait_for(
                self.store.workers.forget_worker(self.worker_id), max(self.settings.heartbeat, 1.0)
            )
        except (StoreError, TimeoutError) as exc:
            log.log(
                outage_level(exc, logging.WARNING),
                "worker %s: could not deregister: %s",
                self.worker_id,
                exc,
            )
