"""The PostgreSQL store's flow control operations beyond the claim (which applies the limits
itself: ``claim``): step slots (``slots``) and the limits' use now."""

from __future__ import annotations

from ...records import LimitState
from ..base import Lease, Store
from .claim import Claimer
from .slots import Slots


class FlowOperations(Store):
    """The store contract's flow control operations (:class:`~stepline.store.flow.FlowStore`)
    on PostgreSQL: a base of :class:`~stepline.store.postgres.PostgresStore`, which sets
    ``_slots`` and ``_claims``."""

    _slots: Slots
    _claims: Claimer

    async def acquire_limit(self, lease: Lease, limit: str, step: str, now: float) -> float | None:
        return await self._slots.acquire(lease, limit, step, now)

    async def release_limit(self, lease: Lease, limit: str, step: str, now: float) -> None:
        if await self._slots.release(lease, limit, step, now):
            self._notify_ready()

    async def limit_states(self, workflow: str, key: str | None) -> list[LimitState]:
        return await self._claims.limit_states(workflow, key, self.now())
