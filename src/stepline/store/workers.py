"""The store contract's record of live workers: :class:`WorkerStore`, ``Store.workers``."""

from __future__ import annotations

import abc

from ..records import WorkerInfo


class WorkerStore(abc.ABC):
    """Heartbeats, the worker list and a worker's removal."""

    @abc.abstractmethod
    async def heartbeat(self, info: WorkerInfo, now: float) -> None:
        """Record that worker ``info.id`` is alive: insert or replace its row with ``info``,
        its ``last_seen`` set to ``now`` (``info.last_seen`` is not used).

        In the same write, delete the rows of other workers whose last heartbeat is more than
        :data:`~stepline.records.WORKER_EXPIRE_BEATS` of their own heartbeat intervals older
        than ``now``. One small write, safe to repeat; not durable against a power loss (the
        next heartbeat writes it again).
        """

    @abc.abstractmethod
    async def list_workers(self) -> list[WorkerInfo]:
        """Every worker row, live or not (see :meth:`WorkerInfo.live`), oldest start first."""

    @abc.abstractmethod
    async def forget_worker(self, worker_id: str) -> None:
        """Delete the worker's row (its graceful shutdown); nothing happens if it has none."""
