"""The PostgreSQL store's flow control operations beyond the claim (which applies the limits
itself: ``claim``): step slots (``slots``) and the limits' use now."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...records import LimitState
from ..base import Lease
from ..flow import FlowStore
from .claim import Claimer
from .db import Database
from .slots import Slots
from .sql import Statements


class PostgresFlow(FlowStore):
    """The flow control operations beyond the claim on PostgreSQL (``Store.flow``)."""

    def __init__(
        self,
        db: Database,
        sql: Statements,
        slots: Slots,
        claims: Claimer,
        now: Callable[[], float],
        notify_ready: Callable[[], None],
    ) -> None:
        self._db = db
        self._sql = sql
        self._slots = slots
        self._claims = claims
        self._now = now
        self._notify_ready = notify_ready

    async def acquire_limit(self, lease: Lease, limit: str, step: str, now: float) -> float | None:
        return await self._slots.acquire(lease, limit, step, now)

    async def release_limit(self, lease: Lease, limit: str, step: str, now: float) -> None:
        if await self._slots.release(lease, limit, step, now):
            self._notify_ready()

    async def limit_states(self, workflow: str, key: str | None) -> list[LimitState]:
        return await self._claims.limit_states(workflow, key, self._now())

    async def running_by_worker(
        self, workflows: Sequence[str], now: float
    ) -> dict[tuple[str, str], int]:
        if not workflows:
            return {}
        rows = await self._db.read(
            "counting running instances by worker",
            self._sql.running_by_worker,
            {"workflows": list(workflows), "now": now},
            priority=True,
        )
        return {(owner, workflow): count for owner, workflow, count in rows}
