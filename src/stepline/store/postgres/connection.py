"""The PostgreSQL store's connection class: psycopg's asyncio connection with a cheaper wait.

psycopg drives every operation as a generator that says what it is waiting for (the socket
readable, or writable), and its asyncio connection waits for each of these with a fresh
``loop.add_reader`` and ``loop.remove_reader`` (two ``epoll_ctl`` system calls) and a timer
around every round trip. The store's connections instead keep their socket registered from one
round trip to the next, which saves the client CPU on every round trip, on uvloop and on
asyncio's loop alike (``python -m benchmarks loops``; figures in ``docs/performance.md``):

- A wait for the socket to be readable (the answer to a query) registers the socket once and
  then only parks on a future that the reader callback resolves. (uvloop stops watching a socket
  in error after one last callback, so before each wait a zero-timeout ``poll(2)`` of the socket
  checks that it shows no error or hang-up, or registers it afresh.)
- Data that arrives while nobody waits (a notice, or the server closing the connection) makes
  the callback unregister the socket, so an idle connection never keeps the loop busy; the next
  round trip registers it again.
- The socket is unregistered before the connection closes, and as soon as libpq finds the
  connection lost (it then closes the socket itself), so a later connection given the same file
  descriptor never meets a stale registration. While registered, the loop's reference to the
  callback keeps the connection (and so its socket) alive.
- Everything else is psycopg's own wait, unchanged: a wait to write (a query too large for the
  socket's buffer), a wait with a timeout, a connection over TLS or GSSAPI encryption (which can
  hold decrypted data that the socket does not signal; psycopg's wait polls again every 0.1 s),
  a connection used from another event loop than the one it registered with, and any connection
  where ``select.poll`` is missing (Windows).
- A task cancelled mid-query behaves as with psycopg's own wait: the query is cancelled in the
  server and the connection brought back to idle, or closed if that fails.

Only the generator protocol (``psycopg.waiting.Wait`` and ``Ready``) and public methods are
used; ``tests/test_pgconn.py`` holds the class to each of the points above.

The module also holds the log filter that demotes to DEBUG what psycopg logs about the store's
own connections as they fail in an outage, which the store reports once itself (``db``).
"""

from __future__ import annotations

import asyncio
import logging
import select
from typing import Any

import psycopg
from psycopg.abc import RV, PQGen
from psycopg.pq import ConnStatus, TransactionStatus
from psycopg.waiting import Ready, Wait

log = logging.getLogger("stepline.store.postgres")

_INTERRUPTED = (asyncio.CancelledError, KeyboardInterrupt, SystemExit)
_HAS_POLL = hasattr(select, "poll")
"""Whether ``poll(2)`` is there for the check before each wait (not on Windows, where the
connections use psycopg's own wait)."""
_POLL_INTERVAL = 0.1
"""psycopg's own interval for its wait (the same as its default)."""


class _Watch:
    """A connection's socket, registered for reading with one event loop."""

    __slots__ = ("conn", "fd", "loop", "probe", "registered", "waiter")

    def __init__(self, conn: StoreConnection, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self.conn = conn  # kept alive, with its socket, while the loop holds `readable`
        self.loop = loop
        self.fd = fd
        self.probe = select.poll()  # reports errors and hang-ups whatever it is asked for
        self.probe.register(fd, select.POLLIN)
        self.registered = False
        self.waiter: asyncio.Future[None] | None = None

    def register(self) -> None:
        self.loop.add_reader(self.fd, self.readable)
        self.registered = True

    def unregister(self) -> None:
        if self.registered:
            self.registered = False
            if not self.loop.is_closed():
                self.loop.remove_reader(self.fd)

    async def readable_soon(self) -> None:
        """Return when the socket is readable (or in error)."""
        if self.registered:
            # uvloop stops watching a socket in error after one last callback, which looks like
            # any other, so the registration is trusted only while the socket shows no error or
            # hang-up (one poll(2) call, no wait); data already there needs no wait at all.
            ready = self.probe.poll(0)
            if ready and ready[0][1] == select.POLLIN:
                return
            if ready:
                self.unregister()  # and afresh below: it reports the error at once
        if not self.registered:
            self.register()
        waiter = self.waiter = self.loop.create_future()
        try:
            await waiter
        finally:
            self.waiter = None

    def readable(self) -> None:
        waiter = self.waiter
        if waiter is None:  # nobody waits: stop watching until the next round trip
            self.unregister()
        elif not waiter.done():
            waiter.set_result(None)


def _resumed(gen: PQGen[RV], state: Wait) -> PQGen[RV]:
    """``gen``, already advanced to ``state``, as a generator that yields ``state`` first."""
    ready = yield state
    while True:
        try:
            state = gen.send(ready)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        ready = yield state


class StoreConnection(psycopg.AsyncConnection[Any]):
    """psycopg's asyncio connection, keeping its socket registered between round trips (see the
    module docstring), and with a cursor kept for the statements of the hot path."""

    _watch: _Watch | None = None
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

    async def wait(
        self, gen: PQGen[RV], interval: float = _POLL_INTERVAL, timeout: float | None = None
    ) -> RV:
        pgconn = self.pgconn
        watch = None
        if timeout is None and pgconn.status == ConnStatus.OK:
            watch = self._watched()
        if watch is None:
            # (On a lost connection psycopg's wait raises before it starts the generator.)
            self._unwatch()
            return await super().wait(gen, interval, timeout)
        try:
            state = next(gen)
            while state == Wait.R and pgconn.status == ConnStatus.OK:
                try:
                    await watch.readable_soon()
                except _INTERRUPTED:
                    await self._interrupted(gen)
                    raise
                state = gen.send(Ready.R)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            # libpq closes the socket itself when it finds the connection lost: unregister it
            # before anything else can get its descriptor.
            if pgconn.status != ConnStatus.OK:
                watch.unregister()
        # A wait to write (or a lost connection): psycopg's own wait for the rest.
        self._unwatch()
        return await super().wait(_resumed(gen, state), interval)

    async def close(self) -> None:
        self._unwatch()
        await super().close()

    def _watched(self) -> _Watch | None:
        """This connection's watch on the running loop, or None where psycopg's own wait is
        the one to use."""
        loop = asyncio.get_running_loop()
        watch = self._watch
        if watch is not None and watch.loop is loop:
            return watch
        if watch is not None and watch.registered and not watch.loop.is_closed():
            return None  # registered with a loop still open (in another thread, maybe)
        pgconn = self.pgconn
        if pgconn.ssl_in_use or pgconn.used_gssapi or not _HAS_POLL:
            return None
        watch = self._watch = _Watch(self, loop, pgconn.socket)
        return watch

    def _unwatch(self) -> None:
        if self._watch is not None:
            self._watch.unregister()

    async def _interrupted(self, gen: PQGen[Any]) -> None:
        """The task was cancelled (or interrupted) while a query ran: cancel it in the server
        and wait for the connection to come back to idle, as psycopg's own wait does; close
        the connection if that fails, since its state is then unknown."""
        self._unwatch()
        if self.pgconn.transaction_status != TransactionStatus.ACTIVE:
            return
        try:
            await self.cancel_safe(timeout=5.0)
            await super().wait(_resumed(gen, Wait.R), _POLL_INTERVAL, timeout=5.0)
        except psycopg.errors.QueryCanceled:
            pass  # as expected
        except BaseException as exc:
            log.warning(
                "query not brought back to idle after its task was cancelled (%s): "
                "closing the connection",
                type(exc).__name__,
            )
            self.pgconn.finish()
            if not isinstance(exc, Exception):
                raise  # a new interruption goes on; an error does not replace the first one


# -- logs ------------------------------------------------------------------------------------

POOL_NAMES = ("stepline", "stepline-leases")
"""The store's connection pools: the general one, and the small one for leases and claims."""


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
