"""The PostgreSQL store's listening connection: LISTEN on the schema's channel, re-established
with backoff when it drops."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import psycopg
from psycopg import sql

from .db import Database
from .outage import jittered
from .pools import Conn

log = logging.getLogger("stepline.store.postgres")


class Listener:
    """One connection that LISTENs for one store, outside its pools."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._task: asyncio.Task[None] | None = None

    async def start(
        self, channel: str, on_note: Callable[[str], None], on_reconnect: Callable[[], None]
    ) -> None:
        """LISTEN on ``channel`` from now on, calling ``on_note(payload)`` for each notification.

        Returns once the first LISTEN is in place. If the connection drops it is re-established
        with backoff, and ``on_reconnect()`` is called (notifications may have been missed).
        """
        conn = await self._connect(channel)
        self._task = asyncio.create_task(
            self._loop(conn, channel, on_note, on_reconnect), name="stepline-listen"
        )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _connect(self, channel: str) -> Conn:
        conn = await self._db.connect()
        try:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _loop(
        self,
        conn: Conn | None,
        channel: str,
        on_note: Callable[[str], None],
        on_reconnect: Callable[[], None],
    ) -> None:
        delay = 0.05
        while True:
            lost = False
            try:
                if conn is None:
                    conn = await self._connect(channel)
                    self._db.outages.answered()
                    log.info("listening for wake-ups on %s again", self._db.where)
                    on_reconnect()
                lost = True  # connected: a fault from now on is a new one, not a failed reconnect
                delay = 0.05
                async for note in conn.notifies():
                    on_note(note.payload)
            except psycopg.Error as exc:
                # A reconnect that fails (the listener's retry) means an outage.
                await self._db.fault("listening for wake-ups", exc, outage=not lost)
            finally:
                if conn is not None:
                    with contextlib.suppress(psycopg.Error):
                        await conn.close()
                    conn = None
            await asyncio.sleep(jittered(delay))
            delay = min(delay * 2, 5.0)
