"""The SQLite store's database: one connection, its pragmas and migrations, lock retries, and the
group commit of its writes.

- One connection per process, used on the event loop's thread. SQLite calls on a local file in
  WAL mode take microseconds; a thread hop per call would cost more than the call.
- Writes go through the shared :class:`~stepline.store._batcher.Batcher`: every write submitted
  during one turn of the event loop goes into one ``BEGIN IMMEDIATE ... COMMIT`` (group
  commit), and an operation that fails fails alone.
- Step checkpoints commit with ``synchronous=NORMAL`` (durable across process crashes; a power
  loss may lose the last few, which then re-run). Writes acknowledged to callers (create,
  events, control actions) are submitted ``durable`` and commit with ``synchronous=FULL``.
- Lock contention with other processes never blocks the loop for long and never surfaces as
  "database is locked": a write transaction tries for the write lock every ``LOCK_POLL`` for up
  to ``LOCK_WAIT``, then its batch is deferred with backoff while the loop runs on; once the
  lock has been held for ``retry_seconds``, the calls waiting for it fail with
  StoreUnavailableError.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ...errors import ConfigError, SteplineError, StoreError, StoreUnavailableError
from .._batcher import Batcher, Busy
from ..migrations import Migration, check_current, load_migrations
from . import sql

# The store's logger keeps its name: the lines an operator filters on do not move.
log = logging.getLogger("stepline.store.sqlite")

T = TypeVar("T")
Op = Callable[[sqlite3.Connection], Any]
"""A write: runs inside the group commit's transaction; returns its result or raises."""

LOCK_WAIT = 0.02
"""How long a batch of writes waits for the write lock on the event loop's thread before it is
deferred (the loop runs meanwhile) and tried again."""
LOCK_POLL = 0.0001
"""The pause between two tries for the write lock: about as long as a commit holds it."""
LOCK_GIVE_UP_SECONDS = 120.0
WRITE_BACKOFF = (0.0005, 0.02)
"""The first and the longest wait before a locked-out batch of writes tries again."""
SHARED_SECONDS = 1.0
"""How long after a write last found the lock held by another connection a lone write still
waits a turn of the event loop, to share its commit with the writes of that turn."""


Write = tuple[Op, bool]
"""A write submitted to the group commit: ``(op, durable)``; a durable write is acknowledged to
a caller, and its transaction commits with ``synchronous=FULL``. (A plain tuple, not a named
one: one is made for every write.)"""


def _begin(conn: sqlite3.Connection) -> bool:
    """``BEGIN IMMEDIATE``, trying every ``LOCK_POLL`` while another connection holds the write
    lock, for up to ``LOCK_WAIT``; then raises SQLite's "database is locked". Returns whether
    another connection held the lock at the first try."""
    deadline = time.monotonic() + LOCK_WAIT
    waited = False
    while True:
        try:
            conn.execute(sql.BEGIN)
            return waited
        except sqlite3.OperationalError as exc:
            if not is_locked(exc) or time.monotonic() > deadline:
                raise
        waited = True
        time.sleep(LOCK_POLL)


class _PartialWrite(Exception):
    """An op of a batch failed after writing: the batch must run again with savepoints."""


def is_locked(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite telling that another connection holds the lock."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    text = str(exc)
    return "locked" in text or "busy" in text


def store_error(exc: BaseException, path: str) -> BaseException:
    """Domain errors pass through; anything else becomes a StoreError naming the database."""
    if isinstance(exc, SteplineError | ValueError):
        return exc
    error = StoreError(f"SQLite error on {path!r}: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def split_statements(script: str) -> list[str]:
    """Split a migration script into statements (comments may contain ';')."""
    statements: list[str] = []
    current = ""
    for line in script.splitlines():
        if line.strip().startswith("--") and not current:
            continue
        current += line + "\n"
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    if current.strip():
        statements.append(current.strip())
    return statements


def _applied(c: sqlite3.Connection) -> set[int]:
    """The migrations applied to the database (none when it has no schema yet)."""
    try:
        return {version for (version,) in c.execute(sql.APPLIED_MIGRATIONS)}
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return set()
        raise


def migrate(c: sqlite3.Connection, migrations: Sequence[Migration]) -> tuple[int, int]:
    """Apply the ``migrations`` not applied yet; the schema versions before and after (0:
    none)."""
    c.execute(sql.CREATE_MIGRATIONS_TABLE)
    done = {version for (version,) in c.execute(sql.APPLIED_MIGRATIONS)}
    for migration in migrations:
        if migration.version in done:
            continue
        for statement in split_statements(migration.sql):
            c.execute(statement)
        c.execute(sql.RECORD_MIGRATION, (migration.version, migration.name, time.time()))
    return max(done, default=0), max([*done, *(m.version for m in migrations)], default=0)


def missing_message(path: str) -> str:
    """The error for a database file that ``create=False`` requires and that does not exist."""
    return (
        f"no stepline database at {Path(path).absolute()}: check the path, or create "
        "the database first (a worker creates it, or an engine opened with create=True)"
    )


def directory_message(path: str, source: str = "") -> str | None:
    """The error for a database path that names a directory (``source``: where the URL came
    from, for the command line); None for any other path. SQLite itself says only "unable to
    open database file"."""
    if path == ":memory:" or not Path(path).is_dir():
        return None
    where = Path(path).absolute()
    source = f" ({source})" if source else ""
    return (
        f"{where} is a directory, not a SQLite database file{source}: name a file in it, "
        f"e.g. sqlite:///{where / 'stepline.db'}"
    )


class Database:
    """One SQLite file: its connection, migrations, reads and group-committed writes.

    ``create``: make a missing file (and its directories) when opened; else a missing file
    raises :class:`~stepline.ConfigError` naming it, and nothing is created. ``read_only``:
    open the file read-only (SQLite refuses every write), migrating nothing (a schema behind
    this code's is a ``StoreError``); a missing file is an error then too.
    """

    def __init__(self, path: str, *, create: bool, read_only: bool = False) -> None:
        self.path = path
        self.create = create and not read_only
        self.read_only = read_only
        self.schema_versions: tuple[int, int] | None = None
        """What :meth:`open` did: the schema versions before and after (0: none)."""
        self.retry_seconds = LOCK_GIVE_UP_SECONDS
        """How long a call waits for another connection's lock before it fails with
        StoreUnavailableError."""
        self._conn: sqlite3.Connection | None = None
        # One batch at a time: there is one connection, and commits keep their order.
        # While other connections write too, each commit is one more hand-over of the lock:
        # a lone write then waits a turn to share its commit (see ``_unshared``).
        self._writes: Batcher[Write, Any] = Batcher(
            self._commit,
            flushers=1,
            max_batch=None,
            by_turn=True,
            backoff=WRITE_BACKOFF,
            inline=self._unshared,
        )
        self._shared_until = 0.0
        """Until when (monotonic) lone writes wait to share a commit: ``SHARED_SECONDS`` after a
        write last found the lock held by another connection."""
        self._busy_since: float | None = None
        """When the writes first found the lock held by another connection (monotonic), until a
        commit gets it or they give up: the writes waiting then fail ``retry_seconds`` later."""
        self._locked_since: float | None = None
        """When a call first gave up waiting for the lock (monotonic), until one gets it:
        logged once then, and once when the database is writable again."""

    # -- lifecycle -------------------------------------------------------------------------------

    async def open(self) -> None:
        if self._conn is not None:
            return
        conn = self._conn = self._connect()
        migrations = load_migrations("sqlite")
        if self.read_only:
            applied = await self._retry_locked(lambda: _applied(conn))
            self.schema_versions = check_current(repr(self.path), applied, migrations)
            return
        (mode,) = await self._retry_locked(lambda: conn.execute(sql.JOURNAL_MODE_WAL).fetchone())
        if self.path != ":memory:" and str(mode).lower() != "wal":
            raise StoreError(f"cannot switch {self.path!r} to WAL mode (got {mode!r})")
        conn.execute(sql.SYNCHRONOUS_NORMAL)
        self.schema_versions = await self.write(lambda c: migrate(c, migrations), durable=True)

    def _connect(self) -> sqlite3.Connection:
        target = self.path
        directory = directory_message(self.path)
        if directory is not None:
            raise ConfigError(directory)
        if self.path != ":memory:" and self.create:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        elif self.path != ":memory:":
            if not Path(self.path).is_file():
                raise ConfigError(missing_message(self.path))
            # Read-write, never create: a file removed since the check is not made anew.
            mode = "ro" if self.read_only else "rw"
            target = Path(self.path).resolve().as_uri() + f"?mode={mode}"
        try:
            return sqlite3.connect(
                target,
                isolation_level=None,
                check_same_thread=False,
                # No busy timeout: SQLite's handler sleeps milliseconds between tries, far longer
                # than another process's commit holds the write lock, so processes taking
                # turns at it would sleep with it free. ``_begin`` waits for it instead;
                # a locked read is retried by ``_retry_locked``.
                timeout=0,
                uri=target != self.path,
            )
        except sqlite3.Error as exc:
            if not self.create and not Path(self.path).exists():
                raise ConfigError(missing_message(self.path)) from None
            raise StoreError(f"cannot open SQLite database {self.path!r}: {exc}") from exc

    async def close(self) -> None:
        """Commit every write submitted so far, then close the connection. Idempotent."""
        if self._conn is None:
            return
        await self._writes.drain()
        conn, self._conn = self._conn, None
        with contextlib.suppress(sqlite3.Error):
            if not self.read_only:
                conn.execute(sql.OPTIMIZE)
        conn.close()

    def require(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError("the SQLite store is not open; use 'async with Engine(...)'")
        return self._conn

    # -- reads -----------------------------------------------------------------------------------

    async def read(self, statement: str, params: Sequence[Any] = ()) -> list[Any]:
        conn = self.require()
        return await self._retry_locked(lambda: conn.execute(statement, params).fetchall())

    async def read_with(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn``'s reads on the connection (several statements, outside any transaction)."""
        conn = self.require()
        return await self._retry_locked(lambda: fn(conn))

    async def _retry_locked(self, fn: Callable[[], T]) -> T:
        delay = 0.001
        deadline = time.monotonic() + self.retry_seconds
        while True:
            try:
                result = fn()
            except sqlite3.OperationalError as exc:
                if not is_locked(exc):
                    raise StoreError(f"SQLite error on {self.path!r}: {exc}") from exc
                if time.monotonic() > deadline:
                    raise self._locked_out(exc) from exc
            except sqlite3.Error as exc:  # e.g. a file that is not a database
                raise StoreError(
                    f"SQLite error on {self.path!r}: {type(exc).__name__}: {exc}"
                ) from exc
            else:
                if self._locked_since is not None:
                    self._unlocked()
                return result
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    # -- writes: group commit --------------------------------------------------------------------

    def _unshared(self) -> bool:
        """Whether no other connection took the write lock lately (a lone write may then
        commit at once, in its caller's task)."""
        return time.monotonic() >= self._shared_until

    def _share_commits(self) -> None:
        """A write found the lock held by another connection: lone writes share commits for
        ``SHARED_SECONDS``."""
        self._shared_until = time.monotonic() + SHARED_SECONDS

    def write(self, op: Op, *, durable: bool = False) -> Awaitable[Any]:
        """Run ``op`` in the next group commit; the result is ``op``'s once it has committed
        (or its error: a failing op fails alone, the others of its batch commit)."""
        self.require()
        return self._writes.submit((op, durable))

    async def _commit(self, batch: list[Write]) -> list[Any]:
        """The batcher's ``run``: ``batch`` committed; or, while another connection holds the
        lock, :class:`Busy` for each write (the batcher runs them again after a backoff, with
        the writes queued meanwhile), until the lock has been held ``retry_seconds``."""
        try:
            outcomes = self._commit_batch(batch)
        except sqlite3.OperationalError as exc:  # locked: nothing was written
            self._share_commits()
            now = time.monotonic()
            if self._busy_since is None:
                self._busy_since = now
            elif now - self._busy_since > self.retry_seconds:
                self._busy_since = None  # the writes that come next wait afresh
                error = self._locked_out(exc)
                error.__cause__ = exc
                return [error] * len(batch)
            return [Busy()] * len(batch)
        self._busy_since = None
        return outcomes

    def _commit_batch(self, batch: list[Write]) -> list[Any]:
        """Run a batch's ops in one transaction: one result or exception per op. Raises
        ``sqlite3.OperationalError``, with nothing written, while another connection holds the
        lock.

        An op that fails fails alone: the others of the batch commit. Ops run without
        savepoints, since almost every failure (a lost lease, say) comes before the op has
        written anything; if a failing op did write, the transaction is rolled back and the batch
        runs again with a savepoint around each op.
        """
        conn = self.require()
        durable = any(durable for _, durable in batch)
        try:
            if durable:
                conn.execute(sql.SYNCHRONOUS_FULL)
            if _begin(conn):
                self._share_commits()
        except sqlite3.Error as exc:
            if durable:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute(sql.SYNCHRONOUS_NORMAL)
            if is_locked(exc):
                raise
            error = StoreError(f"SQLite error on {self.path!r}: {exc}")
            error.__cause__ = exc
            return [error] * len(batch)
        try:
            try:
                outcomes = self._run_ops(conn, batch, savepoints=False)
            except _PartialWrite:
                conn.execute(sql.ROLLBACK)
                _begin(conn)
                outcomes = self._run_ops(conn, batch, savepoints=True)
            if conn.in_transaction:
                conn.execute(sql.COMMIT)
        except BaseException as exc:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute(sql.ROLLBACK)
            if is_locked(exc) or not isinstance(exc, Exception):
                raise
            return [store_error(exc, self.path)] * len(batch)
        finally:
            if durable:
                conn.execute(sql.SYNCHRONOUS_NORMAL)
        if self._locked_since is not None:
            self._unlocked()
        return outcomes

    def _run_ops(
        self, conn: sqlite3.Connection, batch: list[Write], *, savepoints: bool
    ) -> list[Any]:
        """Run the ops of a batch inside its transaction; one result or exception per op.

        Without ``savepoints``, raises :class:`_PartialWrite` when an op fails after writing
        (only a batch of one can then undo it, by rolling back the whole transaction).
        """
        single = len(batch) == 1
        outcomes: list[Any] = []
        for op, _durable in batch:
            if savepoints:
                conn.execute(sql.SAVEPOINT)
            before = conn.total_changes
            try:
                result = op(conn)
            except Exception as exc:
                if is_locked(exc):
                    raise
                if savepoints:
                    conn.execute(sql.ROLLBACK_TO_SAVEPOINT)
                    conn.execute(sql.RELEASE_SAVEPOINT)
                elif single:
                    conn.execute(sql.ROLLBACK)
                elif conn.total_changes != before:
                    raise _PartialWrite() from exc
                outcomes.append(store_error(exc, self.path))
            else:
                if savepoints:
                    conn.execute(sql.RELEASE_SAVEPOINT)
                outcomes.append(result)
        return outcomes

    # -- lock-outs -------------------------------------------------------------------------------

    def _locked_out(self, exc: Exception) -> StoreUnavailableError:
        if self._locked_since is None:
            self._locked_since = time.monotonic()
            log.warning(
                "the SQLite database %r stayed locked by another connection for %g s; calls fail "
                "until it is released (find what keeps a write transaction open on it)",
                self.path,
                self.retry_seconds,
            )
        return StoreUnavailableError(
            f"the database is unavailable: {self.path!r} stayed locked by another connection "
            f"for {self.retry_seconds:g} s ({exc}); nothing was changed. Find what keeps a write "
            "transaction open on it (another program, an open sqlite3 shell), then repeat the call"
        )

    def _unlocked(self) -> None:
        began, self._locked_since = self._locked_since, None
        if began is not None:
            log.warning(
                "the SQLite database %r is writable again after %.1f s",
                self.path,
                time.monotonic() - began + self.retry_seconds,
            )
