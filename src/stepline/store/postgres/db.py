"""Connections to one PostgreSQL database for the PostgreSQL store.

A pool of autocommit connections (one of them held out of the pool for operations that come one
at a time) with retries on connection faults, exactly-once transactions, and a listening
connection that reconnects by itself. Why each kind of retry is safe is
explained in docs/architecture.md, "The PostgreSQL store".

An outage (the server unreachable: stopped, restarting, cut off) is logged once, when a retry
fails too, and once when the first operation succeeds again, not once per failed statement. A
connection that dies and is replaced at once (killed by an administrator, dropped by a proxy) is
no outage: logged at INFO. What psycopg logs about the store's own connections meanwhile (every
reconnect attempt of each pool, every dead connection discarded) is demoted to DEBUG. No
operation waits past ``retry_seconds`` for the database to come back, a wait for a pooled
connection included.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from ...errors import StoreError, StoreUnavailableError
from ..migrations import Migration
from .connection import POOL_NAMES, StoreConnection, quiet_psycopg

log = logging.getLogger("stepline.store.postgres")

T = TypeVar("T")

# Reconnect back-off jitter draws from its own generator: the store's retries leave the global
# `random` state, which an application may have seeded for its own use, where it was.
_jitter = random.Random()

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

_SETTLE = 2.0
"""Seconds after the end of an outage during which a new one is taken for the same one settling
(logged only if it lasts that long)."""

_OUTAGE_POOL_WAIT = 1.0
"""Longest wait for a pooled connection during an outage: each new request makes the pool try
to connect again if its attempts gave up."""

DEFAULT_SCHEMA = "stepline"
_SCHEMA_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def split_url(url: str) -> tuple[str, str]:
    """Split a stepline PostgreSQL URL into (libpq connection URL, schema name).

    The ``schema`` query parameter is removed; every other parameter is kept for libpq.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(f"not a PostgreSQL URL: {url!r} (expected postgresql://user@host/db)")
    schema = DEFAULT_SCHEMA
    kept: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "schema":
            schema = value
        else:
            kept.append((key, value))
    if not _SCHEMA_RE.fullmatch(schema):
        raise ValueError(
            f"invalid schema name {schema!r} in the database URL: use 1-63 letters, digits or "
            "underscores, not starting with a digit"
        )
    # quote, not quote_plus: libpq does not decode "+" as a space in URL parameters.
    conninfo = urlunsplit(
        (parts.scheme, parts.netloc, parts.path, urlencode(kept, quote_via=quote), "")
    )
    return conninfo, schema


def describe(conninfo: str, schema: str) -> str:
    """``host:port/dbname (schema x)``, without the password, for messages."""
    try:
        info = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return f"schema {schema}"
    host = info.get("host") or "localhost"
    port = info.get("port") or "5432"
    return f"{host}:{port}/{info.get('dbname') or ''} (schema {schema})"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


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


@dataclass
class _TxState:
    xid: str | None = None
    commit_sent: bool = False
    result: Any = None


class Database:
    """A connection pool to one database, with retries on connection faults."""

    def __init__(self, conninfo: str, where: str, *, max_connections: int = 10) -> None:
        self.conninfo = conninfo
        self.where = where
        try:
            params = conninfo_to_dict(conninfo)
        except psycopg.Error as exc:
            raise ValueError(f"invalid PostgreSQL URL ({where}): {exc}") from None
        self._kwargs: dict[str, Any] = {"autocommit": True}
        if "application_name" not in params:
            self._kwargs["application_name"] = "stepline"
        self.retry_seconds = 60.0
        """How long an operation keeps retrying connection faults before raising StoreError."""
        self._max_connections = max(2, max_connections)
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._priority_pool: AsyncConnectionPool[Conn] | None = None
        self._listener: asyncio.Task[None] | None = None
        self._spare: Conn | None = None
        """One of the pool's connections, kept out of it for operations that come one at a time
        (a sequential workflow's step writes): taking it is an attribute swap, where a checkout
        from the pool costs CPU (its locks, logging and checks). An operation that
        comes while the spare is in use takes a connection from the pool as before."""
        self._spare_taken = False
        self._spare_until = 0.0
        self._outage: float | None = None
        """When the current outage began (monotonic), or None while the database answers."""
        self._last_fault = -1e9
        self._outage_logged = False
        """Whether the current outage's start was logged (not if it began just after one ended)."""
        self._recovered_at = -1e9

    @property
    def is_open(self) -> bool:
        return self._pool is not None

    async def open(self) -> None:
        quiet_psycopg()
        # One connection first, made directly: a wrong host, port, password or database fails
        # at once with the server's own reason, where the pool would retry in the background
        # and report only, 15 s later, that it timed out.
        try:
            probe = await StoreConnection.connect(self.conninfo, **self._kwargs)
        except psycopg.Error as exc:
            raise self._cannot_connect(exc) from exc
        await probe.close()
        # The small pool keeps lease renewals and claims from queueing behind bulk work: a
        # renewal that waits too long for a connection would let its leases expire.
        self._pool = await self._open_pool(POOL_NAMES[0], self._max_connections)
        try:
            self._priority_pool = await self._open_pool(POOL_NAMES[1], 2)
        except BaseException:
            await self.close()
            raise

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
            raise self._cannot_connect(exc) from exc
        return pool

    def _cannot_connect(self, exc: psycopg.Error) -> StoreError:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        return StoreError(
            f"cannot connect to PostgreSQL at {self.where}: {reason}; check that the server is "
            "running and that the URL's host, port, user, password and database are right"
        )

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
            self._listener = None
        spare, self._spare = self._spare, None
        if spare is not None and self._pool is not None:
            await self._pool.putconn(spare)  # (one in use goes back when its operation ends)
        pools = [self._pool, self._priority_pool]
        self._pool = self._priority_pool = None
        for pool in pools:
            if pool is not None:
                await pool.close()

    def _require(self, priority: bool = False) -> AsyncConnectionPool[Conn]:
        pool = self._priority_pool if priority else self._pool
        if pool is None:
            raise StoreError("the PostgreSQL store is not open; use 'async with Engine(...)'")
        return pool

    # -- retries ---------------------------------------------------------------------------------

    def error(self, what: str, exc: BaseException) -> StoreError:
        return StoreError(f"PostgreSQL error while {what} on {self.where}: {exc}")

    async def _backoff(
        self,
        what: str,
        exc: psycopg.Error,
        started: float,
        attempt: int,
        *,
        applied: str | None,
    ) -> None:
        """Sleep before retrying a connection fault, or raise StoreUnavailableError when the
        retry period is over (``applied`` says what became of the change, if any)."""
        left = started + self.retry_seconds - time.monotonic()
        if left <= 0:
            outcome = f"; {applied}" if applied else ""
            raise StoreUnavailableError(
                f"the database is unreachable: PostgreSQL at {self.where} did not answer for "
                f"{self.retry_seconds:g} s while {what} ({_one_line(exc)}){outcome}. Check "
                "that the server is running and reachable, then repeat the call"
            ) from exc
        await self._fault(what, exc, outage=attempt >= 2)
        delay = min(0.02 * 2 ** (attempt - 1), 1.0)
        await asyncio.sleep(min(delay * _jitter.uniform(0.5, 1.0), left))

    async def _fault(self, what: str, exc: BaseException, *, outage: bool) -> None:
        """A connection fault; ``outage``: a retry failed too. The first fault of an outage is
        logged as such, unless it comes within ``_SETTLE`` seconds of the end of the last one:
        then it is the same one still settling (operations that were waiting for the pool when
        another one got through), and it is logged only if it lasts. On a first fault the
        connections that died with it are dropped at once (the spare too), so that they do not
        fail one by one later, after the retries of the first one succeeded."""
        now = time.monotonic()
        quiet, self._last_fault = now - self._last_fault < 1.0, now
        if outage and self._outage is None:
            self._outage = now
            self._outage_logged = False
        if (
            outage
            and not self._outage_logged
            and (now - self._recovered_at >= _SETTLE or now - (self._outage or now) >= _SETTLE)
        ):
            self._outage_logged = True
            log.warning(
                "lost the connection to PostgreSQL at %s while %s (%s); reconnecting, each "
                "operation for up to %g s",
                self.where,
                what,
                _one_line(exc),
                self.retry_seconds,
            )
        elif not outage and self._outage is None and not quiet:
            log.info(
                "connection to PostgreSQL at %s lost while %s (%s); retrying",
                self.where,
                what,
                _one_line(exc),
            )
        else:
            log.debug("connection fault while %s: %s", what, _one_line(exc))
        if outage:
            return
        pool = self._pool
        spare = None if self._spare_taken else self._spare
        if spare is not None and pool is not None:
            self._spare = None
            await pool.putconn(spare)  # checked below with the pool's idle connections
        for each in (pool, self._priority_pool):
            if each is not None:
                with contextlib.suppress(psycopg.Error):
                    await each.check()

    def _answered(self) -> None:
        """The database answered: the end of an outage, if one was going on, is logged."""
        began, self._outage = self._outage, None
        if began is not None and self._outage_logged:
            self._outage_logged = False
            self._recovered_at = time.monotonic()
            log.warning(
                "reconnected to PostgreSQL at %s after %.1f s",
                self.where,
                time.monotonic() - began,
            )

    def _wait_limit(self, started: float) -> float:
        """How long an attempt may wait for a pooled connection: not past the retry period."""
        longest = _POOL_WAIT if self._outage is None else _OUTAGE_POOL_WAIT
        return max(0.05, min(longest, started + self.retry_seconds - time.monotonic()))

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
            try:
                result = await self._on_connection(attempt, priority, self._wait_limit(started))
            except psycopg.OperationalError as exc:
                await self._backoff(what, exc, started, tries, applied=applied)
            except psycopg.Error as exc:
                raise self.error(what, exc) from exc
            else:
                if self._outage is not None:
                    self._answered()
                return result

    async def _on_connection(
        self, use: Callable[[Conn], Awaitable[T]], priority: bool, wait: float = _POOL_WAIT
    ) -> T:
        """``use(conn)`` on the spare connection if it is free, else on one from the pool
        (waiting for one at most ``wait`` seconds)."""
        if priority or self._spare_taken:
            async with self._require(priority).connection(timeout=wait) as conn:
                return await _closing_on_fault(use, conn)
        pool = self._require()
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

    async def read(
        self, what: str, query: str, params: Sequence[Any] = (), *, priority: bool = False
    ) -> list[Any]:
        """All rows of one query (retried on connection faults)."""

        async def attempt(conn: Conn) -> list[Any]:
            cur = await conn.execute(query, params)
            return await cur.fetchall()

        return await self._retrying(what, attempt, priority, None)

    async def read_many(
        self, what: str, queries: Sequence[tuple[str, Sequence[Any]]]
    ) -> list[list[Any]]:
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
                await self._backoff(what, exc, started, tries, applied="nothing was changed")
            except psycopg.Error as exc:
                raise self.error(what, exc) from exc
            else:
                if self._outage is not None:
                    self._answered()
                return result

    async def _transaction_once(
        self,
        body: Callable[[Conn], Awaitable[T]],
        state: _TxState,
        pipelined: bool = True,
        wait: float = _POOL_WAIT,
    ) -> T:
        async def run(conn: Conn) -> T:
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

        return await self._on_connection(run, False, wait)

    async def _committed(self, what: str, xid: str) -> bool:
        """Whether transaction ``xid`` committed, asked on a fresh connection."""
        while True:
            rows = await self.read(what, "SELECT pg_xact_status(%s::xid8)", (xid,))
            status = rows[0][0] if rows else None
            if status != "in progress":
                return status == "committed"
            await asyncio.sleep(0.05)  # its backend is still finishing: ask again

    # -- schema ----------------------------------------------------------------------------------

    async def migrate(self, schema: str, migrations: Sequence[Migration]) -> None:
        """Create ``schema`` if missing and apply the ``migrations`` it has not had yet, in one
        transaction, serialised with other stores opening the same schema at once."""
        key = int.from_bytes(
            hashlib.blake2b(f"stepline:{schema}".encode(), digest_size=8).digest(),
            "big",
            signed=True,
        )
        name = sql.Identifier(schema)

        async def body(conn: Conn) -> None:
            # Serialises stores opening at once: CREATE SCHEMA IF NOT EXISTS alone can race.
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
            await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(name))
            await conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(name))
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY,"
                " name text NOT NULL, applied_at double precision NOT NULL)"
            )
            cur = await conn.execute("SELECT version FROM schema_migrations")
            done = {row[0] for row in await cur.fetchall()}
            for migration in migrations:
                if migration.version in done:
                    continue
                await conn.execute(migration.sql.encode())  # a script: not in pipeline mode
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, time.time()),
                )
                log.info(
                    "applied migration %04d_%s to %s", migration.version, migration.name, self.where
                )

        await self.transaction("migrating the schema", body, pipelined=False)

    # -- LISTEN ----------------------------------------------------------------------------------

    async def listen(
        self, channel: str, on_note: Callable[[str], None], on_reconnect: Callable[[], None]
    ) -> None:
        """LISTEN on ``channel`` from now on, calling ``on_note(payload)`` for each notification.

        Returns once the first LISTEN is in place. If the connection drops it is re-established
        with backoff, and ``on_reconnect()`` is called (notifications may have been missed).
        """
        conn = await self._listen_connection(channel)
        self._listener = asyncio.create_task(
            self._listen_loop(conn, channel, on_note, on_reconnect), name="stepline-listen"
        )

    async def _listen_connection(self, channel: str) -> Conn:
        conn = await StoreConnection.connect(self.conninfo, **self._kwargs)
        try:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _listen_loop(
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
                    conn = await self._listen_connection(channel)
                    self._answered()
                    log.info("listening for wake-ups on %s again", self.where)
                    on_reconnect()
                lost = True  # connected: a fault from now on is a new one, not a failed reconnect
                delay = 0.05
                async for note in conn.notifies():
                    on_note(note.payload)
            except psycopg.Error as exc:
                # A reconnect that fails (the listener's retry) means an outage.
                await self._fault("listening for wake-ups", exc, outage=not lost)
            finally:
                if conn is not None:
                    with contextlib.suppress(psycopg.Error):
                        await conn.close()
                    conn = None
            await asyncio.sleep(delay * _jitter.uniform(0.5, 1.0))
            delay = min(delay * 2, 5.0)
