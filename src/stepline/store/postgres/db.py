"""The PostgreSQL store's database: its connections (``pools``) with retries on connection
faults and exactly-once transactions. A read or a write that is safe to repeat is retried; a
transaction that is not is run once, and after a lost reply its transaction id tells whether it
committed. How outages are retried and logged is ``outage``'s. No operation waits past
``retry_seconds`` for the database to come back, a wait for a pooled connection included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg.pq import TransactionStatus

from ...errors import StoreError, StoreUnavailableError
from .outage import Outages
from .pools import POOL_WAIT, Conn, Pools

log = logging.getLogger("stepline.store.postgres")

T = TypeVar("T")


Params = Sequence[Any] | Mapping[str, Any]
"""A statement's parameters: by position or by name."""

_OUTAGE_POOL_WAIT = 1.0
"""Longest wait for a pooled connection during an outage: each new request makes the pool try
to connect again if its attempts gave up."""


@dataclass
class _TxState:
    xid: str | None = None
    commit_sent: bool = False
    result: Any = None


async def _exactly_once(
    conn: Conn, body: Callable[[Conn], Awaitable[T]], state: _TxState, pipelined: bool
) -> T:
    """``body`` in a transaction on ``conn``; ``state`` tells, after a fault, whether COMMIT
    was sent and under which transaction id."""
    try:
        async with conn.pipeline() if pipelined else contextlib.nullcontext():
            await conn.execute("BEGIN")
            xid = await conn.execute("SELECT pg_current_xact_id()::text")
            result = await body(conn)
            # COMMIT goes out only once the transaction id is known (in pipeline mode it
            # arrived with the body's results): it is what tells, after a lost reply,
            # whether the COMMIT took effect.
            row = await xid.fetchone()
            state.xid = str(row[0]) if row else None
            state.result = result
            state.commit_sent = True
            await conn.execute("COMMIT")
    except BaseException:
        if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                await conn.execute("ROLLBACK")
        raise
    return result


class Database:
    """One database's connections (:class:`Pools`), with retries on connection faults and
    exactly-once transactions."""

    def __init__(self, conninfo: str, where: str, *, pool_size: int = 8) -> None:
        self.conninfo = conninfo
        self.where = where
        self.outages = Outages(where)
        self._pools = Pools(conninfo, where, pool_size)

    @property
    def is_open(self) -> bool:
        return self._pools.is_open

    async def open(self) -> None:
        await self._pools.open()

    async def connect(self) -> Conn:
        """A connection of its own, outside the pools (the store's listener)."""
        return await self._pools.connect()

    async def close(self) -> None:
        await self._pools.close()

    # -- retries ---------------------------------------------------------------------------------

    def error(self, what: str, exc: BaseException) -> StoreError:
        return StoreError(f"PostgreSQL error while {what} on {self.where}: {exc}")

    async def _backoff(
        self,
        what: str,
        exc: psycopg.Error,
        started: float,
        attempt: int,
        applied: str | None,
        tried_at: float,
    ) -> None:
        """Sleep before retrying a connection fault, or raise StoreUnavailableError when the
        retry period is over (``applied`` says what became of the change, if any)."""
        pause = self.outages.pause(what, exc, started, attempt, applied)
        await self.fault(what, exc, outage=attempt >= 2, since=tried_at)
        await asyncio.sleep(pause)

    async def fault(
        self, what: str, exc: BaseException, *, outage: bool, since: float | None = None
    ) -> None:
        """A connection fault (``outage``: a retry failed too; ``since``: when the failed attempt
        began), logged by :class:`Outages`. On a first fault the connections that died with it
        are dropped at once (the spare too), so that they do not fail one by one later, after
        the retries of the first one succeeded."""
        self.outages.fault(what, exc, outage=outage, since=since)
        if not outage:
            await self._pools.check()

    def _wait_limit(self, started: float) -> float:
        """How long an attempt may wait for a pooled connection: not past the retry period."""
        longest = _OUTAGE_POOL_WAIT if self.outages.ongoing else POOL_WAIT
        return max(0.05, min(longest, started + self.outages.retry_seconds - time.monotonic()))

    async def retrying(
        self, what: str, attempt: Callable[[Conn], Awaitable[T]], *, priority: bool = False
    ) -> T:
        """Run ``attempt`` on a pooled connection, retrying connection faults.

        Only for operations that are safe to repeat. Other driver errors become StoreError.
        ``priority`` uses the small pool reserved for leases and claims.
        """
        return await self._retrying(what, attempt, priority, "it may have been applied")

    async def _retrying(
        self,
        what: str,
        attempt: Callable[[Conn], Awaitable[T]],
        priority: bool,
        applied: str | None,
    ) -> T:
        """:meth:`retrying`; ``applied`` is what the error says of the change (None: a read)."""
        started = time.monotonic()
        tries = 0
        while True:
            tries += 1
            tried_at = time.monotonic()
            try:
                result = await self._pools.use(attempt, priority, self._wait_limit(started))
            except psycopg.OperationalError as exc:
                await self._backoff(what, exc, started, tries, applied, tried_at)
            except psycopg.Error as exc:
                raise self.error(what, exc) from exc
            else:
                if self.outages.ongoing:
                    self.outages.answered()
                return result

    async def execute(
        self, what: str, query: str, params: Any = (), *, priority: bool = False
    ) -> None:
        """One statement whose rows nobody reads (retried on connection faults: it must be safe
        to repeat)."""

        async def attempt(conn: Conn) -> None:
            await conn.execute(query, params)

        await self.retrying(what, attempt, priority=priority)

    async def read(
        self,
        what: str,
        query: str,
        params: Params = (),
        *,
        priority: bool = False,
        prepare: bool | None = None,
    ) -> list[Any]:
        """All rows of one query (retried on connection faults). ``prepare``: psycopg's (None:
        prepared once run often; False: never, so each run is planned for its own values)."""

        async def attempt(conn: Conn) -> list[Any]:
            cur = await conn.execute(query, params, prepare=prepare)
            return await cur.fetchall()

        return await self._retrying(what, attempt, priority, None)

    async def read_many(self, what: str, queries: Sequence[tuple[str, Params]]) -> list[list[Any]]:
        """The rows of several queries, sent in one round trip (pipeline mode)."""

        async def attempt(conn: Conn) -> list[list[Any]]:
            cursors = []
            async with conn.pipeline():
                for query, params in queries:
                    cur = conn.cursor()
                    await cur.execute(query, params)
                    cursors.append(cur)
            return [await cur.fetchall() for cur in cursors]

        return await self._retrying(what, attempt, False, None)

    async def transaction(
        self, what: str, body: Callable[[Conn], Awaitable[T]], *, pipelined: bool = True
    ) -> T:
        """Run ``body`` in a transaction that takes effect exactly once despite connection faults.

        A fault before COMMIT was sent retries the whole transaction (nothing committed). A fault
        while committing is resolved by asking the server, by transaction id, whether it
        committed: if it did, the result ``body`` computed is returned; if not, it is retried.

        With ``pipelined`` (the default) the connection is in pipeline mode: BEGIN and the read
        of the transaction id travel with the body's first statements, and a statement whose
        rows the body does not read costs no round trip of its own, so a transaction of one
        statement takes two round trips (the statement, then COMMIT) instead of four. The body
        must then send one statement per ``execute`` (the migrations, which run scripts, pass
        ``pipelined=False``).
        """
        started = time.monotonic()
        tries = 0
        while True:
            tries += 1
            state = _TxState()
            tried_at = time.monotonic()
            try:
                result = await self._transaction_once(
                    body, state, pipelined, self._wait_limit(started)
                )
            except psycopg.OperationalError as exc:
                if state.commit_sent and state.xid is not None:
                    try:
                        committed = await self._committed(what, state.xid)
                    except StoreError as lost:
                        raise StoreUnavailableError(
                            f"the database is unreachable: lost the connection to PostgreSQL at "
                            f"{self.where} while committing ({what}) and could not reconnect to "
                            "learn whether the change was applied. Check that the server is "
                            "running and reachable, then check the change's effect before "
                            "repeating the call"
                        ) from lost
                    if committed:
                        done: T = state.result
                        return done
                await self._backoff(what, exc, started, tries, "nothing was changed", tried_at)
            except psycopg.Error as exc:
                raise self.error(what, exc) from exc
            else:
                if self.outages.ongoing:
                    self.outages.answered()
                return result

    async def _transaction_once(
        self, body: Callable[[Conn], Awaitable[T]], state: _TxState, pipelined: bool, wait: float
    ) -> T:
        async def run(conn: Conn) -> T:
            return await _exactly_once(conn, body, state, pipelined)

        return await self._pools.use(run, False, wait)

    async def _committed(self, what: str, xid: str) -> bool:
        """Whether transaction ``xid`` committed, asked on a fresh connection."""
        while True:
            rows = await self.read(what, "SELECT pg_xact_status(%s::xid8)", (xid,))
            status = rows[0][0] if rows else None
            if status != "in progress":
                return status == "committed"
            await asyncio.sleep(0.05)  # its backend is still finishing: ask again
