"""Deadlines: the claim loop carries out the deadlines that passed
(``ClosingStore.expire_deadlines``) before it claims, and wakes for the next one. The store
answers with the next deadline; one that a create in another process set earlier is found at
the next recheck."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Collection

from ..errors import StoreError
from ..store.base import Store
from ._log import log, outage_level

RECHECK_SECONDS = 1.0
"""How often the loop looks again without a known deadline due (a deadline set elsewhere is
carried out at most this late)."""


class Deadlines:
    """When the loop's workflows' next deadline is, and carrying out those due."""

    def __init__(self, store: Store, workflows: Collection[str]) -> None:
        """``workflows``: the worker's, read at each look (a registry may grow)."""
        self._store = store
        self._workflows = workflows
        self._next: float | None = -math.inf
        self._checked = -math.inf

    @property
    def next_at(self) -> float | None:
        """The next deadline known (None: none, or not looked yet)."""
        return None if self._next == -math.inf else self._next

    async def expire(self, *, always: bool = False) -> None:
        """Carry out the deadlines due, if one may be (one known is due, the recheck came, or
        ``always``: a test's drive of the worker, on a clock that jumps)."""
        if not self._workflows:
            return
        now = self._store.now()
        due = always or (self._next is not None and self._next <= now)
        if not due and time.monotonic() - self._checked < RECHECK_SECONDS:
            return
        try:
            self._next = await self._store.closing.expire_deadlines(list(self._workflows), now)
        except StoreError as exc:
            log.log(outage_level(exc, logging.WARNING), "deadlines: %s; will retry", exc)
            self._next = None  # not a timer to spin on: the recheck tries again
        self._checked = time.monotonic()
