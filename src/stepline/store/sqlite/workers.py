"""The SQLite store's record of live workers (``Store.workers``)."""

from __future__ import annotations

from ..._json import dumps
from ...records import WorkerInfo
from .._rows import worker_from_row
from ..workers import WorkerStore
from . import sql
from . import transactions as tx
from .db import Database


class SqliteWorkers(WorkerStore):
    """Heartbeats, the worker list and a worker's removal, on SQLite."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def heartbeat(self, info: WorkerInfo, now: float) -> None:
        workflows = dumps(list(info.workflows), what="worker workflows", limit=1 << 24)
        await self._db.write(lambda c: tx.heartbeat(c, info, workflows, now))

    async def list_workers(self) -> list[WorkerInfo]:
        return [worker_from_row(row) for row in await self._db.read(sql.LIST_WORKERS)]

    async def forget_worker(self, worker_id: str) -> None:
        await self._db.write(lambda c: tx.forget_worker(c, worker_id))
