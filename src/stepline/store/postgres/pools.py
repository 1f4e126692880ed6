"""The PostgreSQL store's connections to one database: a pool of autocommit connections for the
work, a small second pool for lease renewals and claims (so they never queue behind bulk work),
one connection of the first pool held out of it for operations that come one at a time, and the
connection that checked the server when the store opened. What psycopg logs about these
connections failing (every reconnect attempt of each pool, every dead connection discarded) is
demoted to DEBUG: the store logs an outage itself (``outage``)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from ...errors import StoreError
from .outage import one_line

T = TypeVar("T")


class StoreConnection(psycopg.AsyncConnection[Any]):
    """psycopg's asyncio connection, unchanged, with a cursor kept for the statements of the hot
    path; the class also tells the store's own connections apart in psycopg's logs."""

    _kept: psycopg.AsyncCursor[Any] | None = None

    def kept_cursor(self) -> psycopg.AsyncCursor[Any]:
        """A cursor that stays with this connection, for the statements of the hot path (step
        writes, finishes): ``execute`` on the connection makes a new cursor, with its own
        adaptation context, for every statement, which costs CPU. A connection runs one
        operation at a time, so its cursor is never shared; it holds on to its last (small)
        result until its next statement."""
        cursor = self._kept
        if cursor is None or cursor.closed:
            cursor = self._kept = self.cursor()
        return cursor


Conn = StoreConnection

_SPARE_SECONDS = 60.0
"""How long the spare connection is kept before it goes back through the pool (which then
applies its checks and its connection lifetime)."""

_POOL_WAIT = 10.0
"""Longest wait for a connection from the pool, when the retry period leaves that much."""

_RECONNECT_SECONDS = 2.0
"""How long one of the pool's attempts to replace a lost connection keeps trying (with psycopg's
backoff: now, after 1 s, after 2 s) before it gives up; the next request for a connection starts
a fresh one. psycopg's default, 5 minutes, spaces the attempts of a long outage further and
further apart (1, 2, 4, ... 64 s), so that a pool could stay empty for a minute after the server
came back."""

POOL_WAIT = _POOL_WAIT
"""Longest wait for a connection from the pool, when the retry period leaves that much."""

POOL_NAMES = ("stepline", "stepline-leases")
"""The store's connection pools: the general one, and the small one for leases and claims."""


async def _closing_on_fault(use: Callable[[Conn], Awaitable[T]], conn: Conn) -> T:
    """``use(conn)``; after a connection fault, the connection is closed unless it is idle: the
    server may have ended it with its reply half read, and the pool, given it back in the middle
    of an operation, would log a warning for each one."""
    try:
        return await use(conn)
    except psycopg.OperationalError:
        if not conn.closed and conn.pgconn.transaction_status != TransactionStatus.IDLE:
            await conn.close()
        raise


def _cannot_connect(where: str, exc: psycopg.Error) -> StoreError:
    detail = one_line(exc)
    # Whether the server runs is no question when it answered (FATAL: ...), and libpq asks it
    # itself when nothing answered: asked here only when neither says.
    answered = any(said in detail.lower() for said in ("fatal:", "server running"))
    running = "" if answered else "that the server is running and "
    return StoreError(
        f"cannot connect to PostgreSQL at {where}: {detail}; check {running}that the URL's "
        "host, port, user, password and database are right"
    )


class Pools:
    """The connections of one store."""

    def __init__(self, conninfo: str, where: str, pool_size: int) -> None:
        self.conninfo = conninfo
        self.where = where
        try:
            params = conninfo_to_dict(conninfo)
        except psycopg.Error as exc:
            raise ValueError(f"invalid PostgreSQL URL ({where}): {exc}") from None
        self._kwargs: dict[str, Any] = {"autocommit": True}
        if "application_name" not in params:
            self._kwargs["application_name"] = "stepline"
        self._pool_size = max(2, pool_size)
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._priority_pool: AsyncConnectionPool[Conn] | None = None
        self._spare: Conn | None = None
        """One of the pool's connections, kept out of it for operations that come one at a time
        (a sequential workflow's step writes): taking it is an attribute swap, where a checkout
        from the pool costs CPU (its locks, logging and checks). An operation that
        comes while the spare is in use takes a connection from the pool as before."""
        self._spare_taken = False
        self._spare_until = 0.0
        self._first: Conn | None = None
        """The connection :meth:`open` made to check the server, kept for the first
        :meth:`connect` (the store's listener) rather than closed and made again."""

    @property
    def is_open(self) -> bool:
        return self._pool is not None

    async def open(self) -> None:
        quiet_psycopg()
        # One connection first, made directly: a wrong host, port, password or database fails
        # at once with the server's own reason, where the pool would retry in the background
        # and report only, 15 s later, that it timed out.
        try:
            self._first = await StoreConnection.connect(self.conninfo, **self._kwargs)
        except psycopg.Error as exc:
            raise _cannot_connect(self.where, exc) from exc
        # The small pool keeps lease renewals and claims from queueing behind bulk work: a
        # renewal that waits too long for a connection would let its leases expire.
        try:
            self._pool = await self._open_pool(POOL_NAMES[0], self._pool_size)
            self._priority_pool = await self._open_pool(POOL_NAMES[1], 2)
        except BaseException:
            await self.close()
            raise

    async def connect(self) -> Conn:
        """A connection of its own, outside the pools: the first after :meth:`open` is the one
        that checked the server."""
        first, self._first = self._first, None
        if first is not None and not first.closed:
            return first
        return await StoreConnection.connect(self.conninfo, **self._kwargs)

    async def _open_pool(self, name: str, size: int) -> AsyncConnectionPool[Conn]:
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            self.conninfo,
            min_size=1,
            max_size=size,
            kwargs=self._kwargs,
            connection_class=StoreConnection,
            open=False,
            timeout=_POOL_WAIT,
            reconnect_timeout=_RECONNECT_SECONDS,
            name=name,
        )
        try:
            await pool.open(wait=True, timeout=15.0)
        except psycopg.Error as exc:
            await pool.close()
            raise _cannot_connect(self.where, exc) from exc
        return pool

    async def close(self) -> None:
        first, self._first = self._first, None
        if first is not None:
            await first.close()
        spare, self._spare = self._spare, None
        if spare is not None and self._pool is not None:
            await self._pool.putconn(spare)  # (one in use goes back when its operation ends)
        pools = [self._pool, self._priority_pool]
        self._pool = self._priority_pool = None
        for pool in pools:
            if pool is not None:
                await pool.close()

    async def check(self) -> None:
        """After a first connection fault: drop the connections that died with it at once (the
        spare too), so that they do not fail one by one later, after the retries of the first
        one succeeded."""
        pool = self._pool
        spare = None if self._spare_taken else self._spare
        if spare is not None and pool is not None:
            self._spare = None
            await pool.putconn(spare)  # checked below with the pool's idle connections
        for each in (pool, self._priority_pool):
            if each is not None:
                with contextlib.suppress(psycopg.Error):
                    await each.check()

    def require(self, priority: bool = False) -> AsyncConnectionPool[Conn]:
        pool = self._priority_pool if priority else self._pool
        if pool is None:
            raise StoreError("the PostgreSQL store is not open; use 'async with Engine(...)'")
        return pool

    async def use(
        self, use: Callable[[Conn], Awaitable[T]], priority: bool, wait: float = POOL_WAIT
    ) -> T:
        """``use(conn)`` on the spare connection if it is free, else on one from the pool
        (waiting for one at most ``wait`` seconds)."""
        if priority or self._spare_taken:
            async with self.require(priority).connection(timeout=wait) as conn:
                return await _closing_on_fault(use, conn)
        pool = self.require()
        self._spare_taken = True
        spare, self._spare = self._spare, None
        try:
            if spare is not None and time.monotonic() > self._spare_until:
                await pool.putconn(spare)
                spare = None
            if spare is None:
                spare = await pool.getconn(timeout=wait)
                self._spare_until = time.monotonic() + _SPARE_SECONDS
            result = await _closing_on_fault(use, spare)
            # Kept for the next operation unless it is mid-transaction or broken (psycopg itself
            # brings a query cancelled mid-flight back to idle) or the store closed meanwhile.
            # (libpq's own status: `spare.info` builds a wrapper object per call.)
            if self._pool is pool and spare.pgconn.transaction_status == TransactionStatus.IDLE:
                self._spare, spare = spare, None
            return result
        finally:
            self._spare_taken = False
            if spare is not None:  # failed or interrupted: the pool checks it, or replaces it
                await pool.putconn(spare)


# -- logs ------------------------------------------------------------------------------------


class _OwnConnectionNoise(logging.Filter):
    """Demotes to DEBUG the records psycopg logs about the store's own pools and connections
    failing, which come by the dozen per outage (the store logs the outage itself)."""

    MESSAGES = frozenset(
        {
            "error connecting in %r: %s",
            "discarding broken connection: %s",
            "discarding closed connection: %s",
            "error ignored terminating %r: %s",
            "reconnection attempt in pool %r failed after %s sec",
        }
    )

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg not in self.MESSAGES or record.levelno <= logging.DEBUG:
            return True
        first = record.args[0] if isinstance(record.args, tuple) and record.args else None
        ours = (
            first in POOL_NAMES
            or isinstance(first, StoreConnection)
            or isinstance(getattr(first, "_conn", None), StoreConnection)  # a pipeline's
        )
        if not ours:
            return True
        # The logger's level let a warning through; as DEBUG the record goes on only where
        # DEBUG is wanted (a handler's level alone would not stop it).
        if not logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            return False
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


_noise_filter = _OwnConnectionNoise()


def quiet_psycopg() -> None:
    """Installs the filter (once) on psycopg's loggers."""
    for name in ("psycopg", "psycopg.pool"):
        logger = logging.getLogger(name)
        if _noise_filter not in logger.filters:
            logger.addFilter(_noise_filter)
