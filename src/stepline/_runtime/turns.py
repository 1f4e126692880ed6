"""Turns: where a step call of a replay waits before it returns or runs anything.

Two things order a replay beyond the recorded results (every step kind asks here, right after
finding its record, when the activation has turns at all):

- *Update handlers replay in their place.* An update's handler ran while ``run()`` was parked
  on its *frontier* (the steps its branches waited in, recorded with the handler's record); a
  replay must not let ``run()`` past those steps before the handler has replayed (it may change
  what ``run()`` reads on ``self``). So a frontier step waits here until every handler whose
  frontier holds it has ended (:mod:`.updates` resolves the futures).
- *A query's replay stops at the frontier.* Replaying to answer a query, a step with no final
  record (none, or one still running or waiting) parks here: nothing runs, nothing is written,
  and ``run()`` has done all it did when the instance last stopped (:mod:`.query`).
"""

from __future__ import annotations

import asyncio

from ..records import StepRecord
from .quiesce import Quiescence
from .replay import StepKey

FINAL = ("complete", "errored")
"""The statuses of a step record a replay returns (or raises) without running anything."""


class Turns:
    """The frontier holds of one activation, and whether it stops at the frontier (a query)."""

    __slots__ = ("_holds", "_quiet", "stops_at_frontier")

    def __init__(self, quiet: Quiescence, *, stops_at_frontier: bool) -> None:
        self._quiet = quiet
        self._holds: dict[StepKey, list[asyncio.Future[None]]] = {}
        self.stops_at_frontier = stops_at_frontier

    def hold(self, key: StepKey, until: asyncio.Future[None]) -> None:
        """Step ``key`` waits for ``until`` (resolved once an update's handler has replayed)."""
        self._holds.setdefault(key, []).append(until)

    async def reach(self, key: StepKey, record: StepRecord | None) -> None:
        """Called by step ``key`` with its record, before anything else: returns once it may go
        on; raises :class:`~stepline.errors.SuspendInstance` if the activation suspends first."""
        holds = self._holds.get(key)
        if holds and not self._quiet.terminating:  # a termination rolls back, not replays
            for until in holds:
                if not until.done():
                    await self._quiet.wait_for(until, key)
                elif until.exception() is not None:
                    raise until.exception()  # type: ignore[misc]
        if self.stops_at_frontier and (record is None or record.status not in FINAL):
            await self._quiet.park(None, key)
