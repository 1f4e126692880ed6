"""The PostgreSQL store's record of live workers (``Store.workers``): heartbeats, the list,
and removal."""

from __future__ import annotations

from ..._json import dumps
from ...records import WORKER_EXPIRE_BEATS, WorkerInfo
from .._rows import worker_from_row, worker_patches_json, worker_versions_json
from ..workers import WorkerStore
from .db import Database
from .sql import Statements


class PostgresWorkers(WorkerStore):
    """One store's view of the workers table."""

    def __init__(self, db: Database, sql: Statements) -> None:
        self._db = db
        self._sql = sql

    async def heartbeat(self, info: WorkerInfo, now: float) -> None:
        params = {
            "id": info.id,
            "host": info.host,
            "pid": info.pid,
            "started_at": info.started_at,
            "now": now,
            "heartbeat": info.heartbeat,
            "workflows": dumps(list(info.workflows), what="worker workflows", limit=1 << 24),
            "concurrency": info.concurrency,
            "running": info.running,
            "versions": worker_versions_json(info),
            "patches": worker_patches_json(info),
            "expire_beats": WORKER_EXPIRE_BEATS,
        }
        # On the pool kept for leases and claims: a worker busy enough to exhaust the main pool
        # must not look dead for it.
        what = f"recording the heartbeat of worker {info.id!r}"
        await self._db.execute(what, self._sql.heartbeat, params, priority=True)

    async def list_workers(self) -> list[WorkerInfo]:
        rows = await self._db.read("listing workers", self._sql.list_workers)
        return [worker_from_row(row) for row in rows]

    async def forget_worker(self, worker_id: str) -> None:
        await self._db.execute(
            f"removing worker {worker_id!r}", self._sql.forget_worker, (worker_id,)
        )
