"""The PostgreSQL store's time: the database server's clock, so that every machine means the same
instant, or a clock the store was given (a test's manual clock)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from ...errors import StoreError
from .db import Database
from .pools import Conn
from .sql import SERVER_CLOCK

log = logging.getLogger("stepline.store.postgres")

_REFRESH_SECONDS = 30.0


class ServerClock:
    """The server's time at the last measurement moved on by the monotonic clock, so a jump of
    this machine's wall clock never moves timers or leases; with ``clock``, that clock as it is.

    Measured at open and every ``_REFRESH_SECONDS`` while open.
    """

    def __init__(self, db: Database, clock: Callable[[], float] | None) -> None:
        self._db = db
        self.follows_server = clock is None
        self._ticks: Callable[[], float] = time.monotonic if clock is None else clock
        self._offset = time.time() - time.monotonic() if clock is None else 0.0
        self._task: asyncio.Task[None] | None = None

    def now(self) -> float:
        return self._ticks() + self._offset

    async def measure(self) -> None:
        """Set the offset to the server's clock from the fastest of three round trips."""
        if not self.follows_server:
            return

        async def sample(conn: Conn) -> tuple[float, float]:
            before = self._ticks()  # timed on the connection, not while waiting for one
            cur = await conn.execute(SERVER_CLOCK)
            row = await cur.fetchone()
            after = self._ticks()
            server = float(row[0]) if row else (before + after) / 2
            return after - before, server - (before + after) / 2

        samples = [
            await self._db.retrying("measuring the server clock", sample, priority=True)
            for _ in range(3)
        ]
        self._offset = min(samples)[1]

    def start(self) -> None:
        """Measure again every ``_REFRESH_SECONDS`` from now on (the server's clock only)."""
        if self.follows_server and self._task is None:
            self._task = asyncio.create_task(self._refresh(), name="stepline-clock")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _refresh(self) -> None:
        while True:
            await asyncio.sleep(_REFRESH_SECONDS)
            try:
                await self.measure()
            except StoreError as exc:
                log.warning("could not refresh the server clock offset: %s", exc)
