"""SQLite store: one file, WAL mode, shared safely by several worker processes.

Design:

- One connection per process, used on the event loop's thread. SQLite calls on a local file in
  WAL mode take microseconds; a thread hop per call would cost more than the call.
- Writes are queued and committed together: every write enqueued during one turn of the event
  loop goes into one ``BEGIN IMMEDIATE ... COMMIT`` (group commit), each inside a savepoint so one
  failing operation does not undo the others.
- Step checkpoints commit with ``synchronous=NORMAL`` (durable across process crashes; a power
  loss may lose the last few, which then re-run). Writes acknowledged to callers (create, events,
  control actions) commit with ``synchronous=FULL``.
- Lock contention with other processes never blocks the loop for long and never surfaces as
  "database is locked": the busy timeout is short and the store retries with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .._json import dumps, loads
from ..errors import (
    ConfigError,
    IllegalStateError,
    InstanceAlreadyExistsError,
    InstanceNotFoundError,
    LeaseLostError,
    SteplineError,
    StoreError,
    StoreUnavailableError,
)
from ..records import (
    FINISHED_STATUSES,
    WORKER_EXPIRE_BEATS,
    InstanceEvent,
    InstancePage,
    InstanceRecord,
    StepRecord,
    WorkerInfo,
    WorkflowInfo,
)
from ._rows import (
    INSTANCE_COLUMNS,
    INTERRUPTED,
    STEP_COLUMNS,
    claims_on_creation,
    control_assignments,
    control_transition,
    decode_cursor,
    encode_cursor,
    histories_from_rows,
    instance_from_row,
    settle_sleeps,
    step_from_row,
)
from .base import (
    Claim,
    ControlAction,
    Finish,
    Lease,
    NewInstance,
    StepWrite,
    Store,
    WorkflowMeta,
)
from .migrations import load_migrations

log = logging.getLogger("stepline.store.sqlite")

T = TypeVar("T")
Op = Callable[[sqlite3.Connection], Any]

_BUSY_TIMEOUT_MS = 20
_LOCK_GIVE_UP_SECONDS = 120.0


class _PartialWrite(Exception):
    """An op of a batch failed after writing: the batch must run again with savepoints."""


def _in_workflows(workflows: Sequence[str]) -> str:
    """The timer reads' filter on workflows (idle poll, claim, next wake-up): ``+workflow IN
    (?, ...)``.

    The unary plus (SQLite's documented way to keep a term from choosing an index) leaves these
    reads to the ``ready_at`` index, in order. Without statistics (a database never analyzed, or
    one that grew since) the planner otherwise reads every instance the workflows ever ran
    through ``instances_status`` (workflow, status) and sorts the due ones, for each idle poll,
    claim and timer read: far slower than reading in ``ready_at`` order once it holds many.
    """
    return "+workflow IN (" + ",".join("?" * len(workflows)) + ")"


def _is_locked(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def _as_store_error(exc: BaseException, path: str) -> BaseException:
    """Domain errors pass through; anything else becomes a StoreError naming the database."""
    if isinstance(exc, SteplineError | ValueError):
        return exc
    error = StoreError(f"SQLite error on {path!r}: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def _interrupt_running_steps(c: sqlite3.Connection, pk: int, now: float) -> None:
    """A fenced-out activation never records its running steps: close them as interrupted."""
    c.execute(
        "UPDATE steps SET status = 'errored', error = ?, ended_at = ?"
        " WHERE instance_pk = ? AND status = 'running'",
        (dumps(INTERRUPTED, what="error"), now, pk),
    )


def _statements(script: str) -> list[str]:
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


def path_from_url(url: str) -> str:
    """``sqlite:///relative.db``, ``sqlite:////abs/path.db`` or ``sqlite://:memory:``."""
    if not url.startswith("sqlite://"):
        raise ValueError(f"not a SQLite URL: {url!r} (expected sqlite:///path/to/file.db)")
    rest = url[len("sqlite://") :]
    if rest in (":memory:", "/:memory:"):
        return ":memory:"
    if not rest.startswith("/"):
        raise ValueError(
            f"invalid SQLite URL {url!r}: use sqlite:///relative.db or sqlite:////abs.db"
        )
    return rest[1:]


class SqliteStore(Store):
    """The embedded store. ``url`` is ``sqlite:///path/to/file.db``; ``clock`` is the time to
    follow, by default (None) this machine's clock.

    :meth:`open` creates a missing file (and its directories) unless ``create`` is False; then
    a missing file raises :class:`~stepline.ConfigError` naming it, and nothing is created.
    """

    def __init__(
        self, url: str, clock: Callable[[], float] | None = None, *, create: bool = True
    ) -> None:
        super().__init__(clock)
        self.url = url
        self.path = path_from_url(url)
        self.create = create
        self._conn: sqlite3.Connection | None = None
        self._pending: list[tuple[Op, asyncio.Future[Any], bool]] = []
        self._flush_scheduled = False
        self._eager = True
        self._turn_writer: asyncio.Task[Any] | None = None
        """The task whose write committed eagerly in this turn of the loop, if any."""
        self._retry_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.retry_seconds = _LOCK_GIVE_UP_SECONDS
        """How long an operation waits for another connection's lock before it fails with
        StoreUnavailableError."""
        self._locked_since: float | None = None
        """When an operation first gave up waiting for the lock (monotonic), until one gets it:
        logged once then, and once when the database is writable again."""

    # -- lifecycle -------------------------------------------------------------------------------

    async def open(self) -> None:
        if self._conn is not None:
            return
        self._loop = asyncio.get_running_loop()
        conn = self._connect()
        self._conn = conn
        await self._retry_locked(lambda: conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}"))
        mode = await self._retry_locked(lambda: conn.execute("PRAGMA journal_mode=WAL").fetchone())
        if self.path != ":memory:" and mode and str(mode[0]).lower() != "wal":
            raise StoreError(f"cannot switch {self.path!r} to WAL mode (got {mode[0]!r})")
        conn.execute("PRAGMA synchronous=NORMAL")
        await self._migrate()

    def _connect(self) -> sqlite3.Connection:
        target = self.path
        if self.path != ":memory:" and self.create:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        elif self.path != ":memory:":
            if not Path(self.path).is_file():
                raise ConfigError(self.missing_message())
            # Read-write, never create: a file removed since the check is not made anew.
            target = Path(self.path).resolve().as_uri() + "?mode=rw"
        try:
            return sqlite3.connect(
                target,
                isolation_level=None,
                check_same_thread=False,
                timeout=0,
                uri=target != self.path,
            )
        except sqlite3.Error as exc:
            if not self.create and not Path(self.path).exists():
                raise ConfigError(self.missing_message()) from None
            raise StoreError(f"cannot open SQLite database {self.path!r}: {exc}") from exc

    def missing_message(self) -> str:
        return (
            f"no stepline database at {Path(self.path).absolute()}: check the path, or create "
            "the database first (a worker creates it, or an engine opened with create=True)"
        )

    async def close(self) -> None:
        if self._conn is None:
            return
        while self._pending or self._retry_task is not None:
            if self._retry_task is not None:
                await asyncio.shield(self._retry_task)
            else:
                self._flush()
        conn, self._conn = self._conn, None
        with contextlib.suppress(sqlite3.Error):
            conn.execute("PRAGMA optimize")
        conn.close()

    async def _migrate(self) -> None:
        migrations = load_migrations("sqlite")

        def apply(c: sqlite3.Connection) -> None:
            c.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
            done = {row[0] for row in c.execute("SELECT version FROM schema_migrations")}
            for migration in migrations:
                if migration.version in done:
                    continue
                for statement in _statements(migration.sql):
                    c.execute(statement)
                c.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (migration.version, migration.name, time.time()),
                )

        await self._write(apply, durable=True)

    def _require(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError("the SQLite store is not open; use 'async with Engine(...)'")
        return self._conn

    # -- plumbing: group commit and lock retries -------------------------------------------------

    async def _retry_locked(self, fn: Callable[[], T]) -> T:
        delay = 0.001
        deadline = time.monotonic() + self.retry_seconds
        while True:
            try:
                result = fn()
            except sqlite3.OperationalError as exc:
                if not _is_locked(exc):
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

    async def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        conn = self._require()
        return await self._retry_locked(lambda: conn.execute(sql, params).fetchall())

    def _write(self, op: Op, *, durable: bool = False) -> asyncio.Future[Any]:
        """Queue ``op`` for the next group commit; the future resolves after COMMIT.

        Adaptive: while writes come one at a time (a sequential workload), each commits at once,
        with no detour through the event loop. As soon as a second task writes in the same turn
        of the loop, writes are queued and committed together at the end of the turn, until a
        turn brings writes from one task only again. (One task's writes are sequential: each
        waits for the one before, so they have nothing to share a commit with.)
        """
        self._require()
        loop = self._loop or asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._pending.append((op, fut, durable))
        if self._retry_task is not None or self._flush_scheduled:
            return fut
        writer = self._turn_writer
        if self._eager and (writer is None or writer is asyncio.current_task(loop)):
            if writer is None:
                self._turn_writer = asyncio.current_task(loop)
                loop.call_soon(self._end_turn)
            self._flush()
            return fut
        self._eager = False
        self._flush_scheduled = True
        loop.call_soon(self._flush)
        return fut

    def _end_turn(self) -> None:
        self._turn_writer = None

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._pending or self._retry_task is not None:
            return
        try:
            self._commit_batch()
        except sqlite3.OperationalError as exc:
            if not _is_locked(exc):
                self._fail_pending(exc)
                return
            loop = self._loop or asyncio.get_running_loop()
            self._retry_task = loop.create_task(self._flush_when_unlocked())

    async def _flush_when_unlocked(self) -> None:
        delay = 0.0005
        deadline = time.monotonic() + self.retry_seconds
        try:
            while self._pending:
                await asyncio.sleep(delay)
                try:
                    self._commit_batch()
                    delay = 0.0005
                    # The writes queued since get their own retry period.
                    deadline = time.monotonic() + self.retry_seconds
                except sqlite3.OperationalError as exc:
                    if not _is_locked(exc):
                        self._fail_pending(exc)
                        return
                    if time.monotonic() > deadline:
                        self._fail_pending(exc, self._locked_out(exc))
                        return
                    delay = min(delay * 2, 0.02)
        finally:
            self._retry_task = None

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

    def _fail_pending(self, exc: Exception, error: StoreError | None = None) -> None:
        batch, self._pending = self._pending, []
        if error is None:
            error = StoreError(f"SQLite error on {self.path!r}: {exc}")
        error.__cause__ = exc
        for _, fut, _ in batch:
            if not fut.done():
                fut.set_exception(error)

    def _commit_batch(self) -> None:
        """Run every pending op in one transaction. Raises OperationalError if locked.

        An op that fails fails alone: the others of the batch commit. Ops run without
        savepoints, since almost every failure (a lost lease, say) comes before the op has
        written anything; if a failing op did write, the transaction is rolled back and the batch
        runs again with a savepoint around each op.
        """
        conn = self._require()
        batch = self._pending
        durable = any(d for _, _, d in batch)
        if durable:
            conn.execute("PRAGMA synchronous=FULL")
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            if durable:
                conn.execute("PRAGMA synchronous=NORMAL")
            raise
        self._pending = []
        self._eager = len(batch) == 1
        try:
            try:
                outcomes = self._run_ops(conn, batch, savepoints=False)
            except _PartialWrite:
                conn.execute("ROLLBACK")
                conn.execute("BEGIN IMMEDIATE")
                outcomes = self._run_ops(conn, batch, savepoints=True)
            if conn.in_transaction:
                conn.execute("COMMIT")
            if self._locked_since is not None:
                self._unlocked()
        except BaseException as exc:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError) and _is_locked(exc):
                self._pending = batch + self._pending
                raise
            error = _as_store_error(exc, self.path)
            outcomes = [(fut, error, None) for _, fut, _ in batch]
            if not isinstance(exc, Exception):
                self._resolve(outcomes)
                raise
        finally:
            if durable:
                conn.execute("PRAGMA synchronous=NORMAL")
        self._resolve(outcomes)

    def _run_ops(
        self,
        conn: sqlite3.Connection,
        batch: list[tuple[Op, asyncio.Future[Any], bool]],
        *,
        savepoints: bool,
    ) -> list[tuple[asyncio.Future[Any], BaseException | None, Any]]:
        """Run the ops of a batch inside its transaction; one outcome per op.

        Without ``savepoints``, raises :class:`_PartialWrite` when an op fails after writing
        (only a batch of one can then undo it, by rolling back the whole transaction).
        """
        single = len(batch) == 1
        outcomes: list[tuple[asyncio.Future[Any], BaseException | None, Any]] = []
        for op, fut, _ in batch:
            if savepoints:
                conn.execute("SAVEPOINT op")
            before = conn.total_changes
            try:
                result = op(conn)
            except Exception as exc:
                if isinstance(exc, sqlite3.OperationalError) and _is_locked(exc):
                    raise
                if savepoints:
                    conn.execute("ROLLBACK TO op")
                    conn.execute("RELEASE op")
                elif single:
                    conn.execute("ROLLBACK")
                elif conn.total_changes != before:
                    raise _PartialWrite() from exc
                outcomes.append((fut, _as_store_error(exc, self.path), None))
            else:
                if savepoints:
                    conn.execute("RELEASE op")
                outcomes.append((fut, None, result))
        return outcomes

    @staticmethod
    def _resolve(outcomes: list[tuple[asyncio.Future[Any], BaseException | None, Any]]) -> None:
        for fut, exc, result in outcomes:
            if fut.done():
                continue
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result)

    # -- workflows -------------------------------------------------------------------------------

    async def register_workflows(self, metas: Sequence[WorkflowMeta]) -> None:
        now = self.now()

        def op(c: sqlite3.Connection) -> None:
            for meta in metas:
                definition = dumps(meta.definition, what="workflow definition", limit=1 << 24)
                c.execute(
                    "INSERT INTO workflows (name, class_name, definition, created_at, updated_at)"
                    " VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET"
                    " class_name = excluded.class_name, definition = excluded.definition,"
                    " updated_at = CASE WHEN workflows.class_name IS excluded.class_name AND"
                    " workflows.definition IS excluded.definition THEN workflows.updated_at"
                    " ELSE excluded.updated_at END",
                    (meta.name, meta.class_name, definition, now, now),
                )

        await self._write(op, durable=True)

    async def list_workflows(self) -> list[WorkflowInfo]:
        rows = await self._read(
            "SELECT name, class_name, created_at, updated_at, definition FROM workflows"
            " ORDER BY name"
        )
        counts: dict[str, dict[str, int]] = {}
        for workflow, status, n in await self._read(
            "SELECT workflow, status, count(*) FROM instances GROUP BY workflow, status"
        ):
            counts.setdefault(workflow, {})[status] = n
        return [
            WorkflowInfo(r[0], r[1], r[2], r[3], loads(r[4]), counts.get(r[0], {})) for r in rows
        ]

    # -- instances -------------------------------------------------------------------------------

    async def create_instances(
        self, workflow: str, items: Sequence[NewInstance], *, trigger: str, skip_existing: bool
    ) -> list[InstanceRecord]:
        return await self._create(workflow, items, trigger, skip_existing)

    async def create_and_claim(
        self,
        workflow: str,
        items: Sequence[NewInstance],
        *,
        trigger: str,
        skip_existing: bool,
        owner: str,
        lease_seconds: float,
        limit: int,
    ) -> tuple[list[InstanceRecord], list[Claim]]:
        created = await self._create(
            workflow, items, trigger, skip_existing, owner=owner, lease=lease_seconds, limit=limit
        )
        return created, claims_on_creation(created, owner)

    async def _create(
        self,
        workflow: str,
        items: Sequence[NewInstance],
        trigger: str,
        skip_existing: bool,
        *,
        owner: str | None = None,
        lease: float = 0.0,
        limit: int = 0,
    ) -> list[InstanceRecord]:
        """Both creates: the first ``limit`` distinct ids leased to ``owner`` for ``lease``
        seconds (see :meth:`create_and_claim`)."""
        now = self.now()
        lease_expires = now + lease

        def op(c: sqlite3.Connection) -> list[InstanceRecord]:
            ids = [item.id for item in items]
            existing: set[str] = set()
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                existing.update(
                    row[0]
                    for row in c.execute(
                        f"SELECT id FROM instances WHERE workflow = ? AND id IN ({marks})",
                        (workflow, *chunk),
                    )
                )
            if existing and not skip_existing:
                raise InstanceAlreadyExistsError(workflow, sorted(existing)[0])
            created: list[InstanceRecord] = []
            seen: set[str] = set()
            for item in items:
                if item.id in seen:
                    continue
                seen.add(item.id)  # its position among distinct ids: len(seen) - 1
                if item.id in existing:
                    continue
                leased_to: str | None = None
                expires: float | None = None
                status, ready, token, started = "queued", now, 0, None
                if len(seen) <= limit:
                    leased_to, expires = owner, lease_expires
                    status, ready, token, started = "running", expires, 1, now
                pk = c.execute(
                    "INSERT INTO instances (workflow, id, status, params, trigger, parent,"
                    " ready_at, created_at, updated_at, lease_owner, lease_token,"
                    " lease_expires_at, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        workflow, item.id, status, item.params, trigger, item.parent, ready, now,
                        now, leased_to, token, expires, started,
                    ),
                ).lastrowid  # fmt: skip
                # The record from what was written: SQLite's RETURNING is slow per row.
                row = (
                    pk, workflow, item.id, status, item.params, None, None, None,
                    trigger, now, now, started, None, ready, leased_to, item.parent,
                )  # fmt: skip
                created.append(instance_from_row(row))
            return created

        created: list[InstanceRecord] = await self._write(op, durable=True)
        if any(record.status == "queued" for record in created):
            self._notify_ready()
        return created

    async def get_instance(self, workflow: str, instance_id: str) -> InstanceRecord:
        rows = await self._read(
            f"SELECT {INSTANCE_COLUMNS} FROM instances WHERE workflow = ? AND id = ?",
            (workflow, instance_id),
        )
        if not rows:
            raise InstanceNotFoundError(workflow, instance_id)
        return instance_from_row(rows[0])

    async def list_instances(
        self,
        workflow: str | None,
        status: str | None,
        limit: int,
        cursor: str | None,
        *,
        oldest_first: bool = False,
    ) -> InstancePage:
        after = decode_cursor(cursor)
        clauses: list[str] = []
        params: list[Any] = []
        if workflow is not None:
            clauses.append("workflow = ?")
            params.append(workflow)
        if status is not None:
            clauses.append("status = ?")
            params.append(status)
        if after is not None:
            clauses.append("pk > ?" if oldest_first else "pk < ?")
            params.append(after)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        order = "ASC" if oldest_first else "DESC"
        rows = await self._read(
            f"SELECT {INSTANCE_COLUMNS} FROM instances {where} ORDER BY pk {order} LIMIT ?",
            (*params, limit + 1),
        )
        records = [instance_from_row(r) for r in rows[:limit]]
        next_cursor = encode_cursor(records[-1].pk) if len(rows) > limit else None
        return InstancePage(records, next_cursor)

    async def get_steps(self, workflow: str, instance_id: str) -> list[StepRecord]:
        instance = await self.get_instance(workflow, instance_id)
        rows = await self._read(
            f"SELECT {STEP_COLUMNS} FROM steps WHERE instance_pk = ? ORDER BY seq",
            (instance.pk,),
        )
        return settle_sleeps([step_from_row(r) for r in rows], instance, self.now())

    def _lookup(self, c: sqlite3.Connection, workflow: str, instance_id: str) -> tuple[Any, ...]:
        row = c.execute(
            "SELECT pk, status, lease_owner FROM instances WHERE workflow = ? AND id = ?",
            (workflow, instance_id),
        ).fetchone()
        if row is None:
            raise InstanceNotFoundError(workflow, instance_id)
        return tuple(row)

    async def control(
        self,
        workflow: str,
        instance_id: str,
        action: ControlAction,
        *,
        rollback: bool = False,
        from_step: tuple[str, int] | None = None,
    ) -> InstanceRecord:
        now = self.now()
        woke_parent: list[bool] = []

        def op(c: sqlite3.Connection) -> InstanceRecord:
            pk, status, owner = self._lookup(c, workflow, instance_id)
            if action == "restart":
                self._restart(c, pk, from_step, now)
            else:
                change = control_transition(
                    workflow, instance_id, status, owner is not None, action, rollback
                )
                sets, params = control_assignments(change, now, "?")
                c.execute(f"UPDATE instances SET {sets} WHERE pk = ?", (*params, pk))
                if change.get("fence"):
                    _interrupt_running_steps(c, pk, now)
            row = c.execute(
                f"SELECT {INSTANCE_COLUMNS} FROM instances WHERE pk = ?", (pk,)
            ).fetchone()
            record = instance_from_row(row)
            ended = action != "restart" and change.get("end")
            if ended and self._wake_parent(c, record.parent, now):
                woke_parent.append(True)
            return record

        record: InstanceRecord = await self._write(op, durable=True)
        self._notify_changed(workflow, instance_id)
        if record.ready_at is not None or woke_parent:
            self._notify_ready()
        return record

    def _restart(
        self, c: sqlite3.Connection, pk: int, from_step: tuple[str, int] | None, now: float
    ) -> None:
        if from_step is None:
            c.execute("DELETE FROM steps WHERE instance_pk = ?", (pk,))
            c.execute("UPDATE events SET consumed_by = NULL WHERE instance_pk = ?", (pk,))
        else:
            row = c.execute(
                "SELECT seq FROM steps WHERE instance_pk = ? AND name = ? AND count = ?",
                (pk, from_step[0], from_step[1]),
            ).fetchone()
            if row is None:
                raise ValueError(
                    f"instance has no recorded step {from_step[0]!r} (count {from_step[1]}) "
                    "to restart from"
                )
            removed = c.execute(
                "DELETE FROM steps WHERE instance_pk = ? AND seq >= ? RETURNING name, count",
                (pk, row[0]),
            ).fetchall()
            for name, count in removed:
                c.execute(
                    "UPDATE events SET consumed_by = NULL"
                    " WHERE instance_pk = ? AND consumed_by = ?",
                    (pk, f"{name}-{count}"),
                )
        c.execute(
            "UPDATE instances SET status = 'queued', output = NULL, error = NULL, rollback = NULL,"
            " control = NULL, ready_at = ?, lease_token = lease_token + 1, lease_owner = NULL,"
            " lease_expires_at = NULL, started_at = NULL, ended_at = NULL, updated_at = ?"
            " WHERE pk = ?",
            (now, now, pk),
        )

    async def send_event(
        self, workflow: str, instance_id: str, event_type: str, payload: str | None
    ) -> None:
        now = self.now()

        def op(c: sqlite3.Connection) -> None:
            pk, status, _owner = self._lookup(c, workflow, instance_id)
            if status in ("complete", "errored", "terminated"):
                raise IllegalStateError(workflow, instance_id, status, "send an event to")
            c.execute(
                "INSERT INTO events (instance_pk, type, payload, created_at) VALUES (?, ?, ?, ?)",
                (pk, event_type, payload, now),
            )
            c.execute(
                "UPDATE instances SET event_seq = event_seq + 1, ready_at = CASE"
                " WHEN status = 'waiting' THEN ? ELSE ready_at END WHERE pk = ?",
                (now, pk),
            )

        await self._write(op, durable=True)
        self._notify_ready()

    async def get_events(self, workflow: str, instance_id: str) -> list[InstanceEvent]:
        instance = await self.get_instance(workflow, instance_id)
        rows = await self._read(
            "SELECT type, payload, created_at, consumed_by FROM events"
            " WHERE instance_pk = ? ORDER BY pk",
            (instance.pk,),
        )
        return [InstanceEvent(r[0], loads(r[1]), r[2], r[3]) for r in rows]

    async def delete_instances(
        self, workflow: str, instance_ids: Sequence[str], *, finished_only: bool = False
    ) -> int:
        def op(c: sqlite3.Connection) -> int:
            if finished_only:
                # Under the write lock (BEGIN IMMEDIATE): no status can change before the
                # deletes below, and nothing is written if one is unfinished.
                for instance_id in instance_ids:
                    row = c.execute(
                        "SELECT status FROM instances WHERE workflow = ? AND id = ?",
                        (workflow, instance_id),
                    ).fetchone()
                    if row is not None and row[0] not in FINISHED_STATUSES:
                        raise IllegalStateError(workflow, instance_id, row[0], "delete")
            deleted = 0
            for instance_id in instance_ids:
                row = c.execute(
                    "DELETE FROM instances WHERE workflow = ? AND id = ? RETURNING pk",
                    (workflow, instance_id),
                ).fetchone()
                if row is not None:
                    deleted += 1
                    c.execute("DELETE FROM steps WHERE instance_pk = ?", (row[0],))
                    c.execute("DELETE FROM events WHERE instance_pk = ?", (row[0],))
            return deleted

        count: int = await self._write(op, durable=True)
        return count

    async def purge_instances(
        self, workflow: str | None, statuses: Sequence[str], older_than: float
    ) -> int:
        def op(c: sqlite3.Connection) -> int:
            marks = ",".join("?" * len(statuses))
            clause = "AND workflow = ?" if workflow is not None else ""
            params: list[Any] = [*statuses, older_than]
            if workflow is not None:
                params.append(workflow)
            pks = [
                r[0]
                for r in c.execute(
                    f"DELETE FROM instances WHERE status IN ({marks}) AND ended_at < ? {clause}"
                    " RETURNING pk",
                    params,
                )
            ]
            for pk in pks:
                c.execute("DELETE FROM steps WHERE instance_pk = ?", (pk,))
                c.execute("DELETE FROM events WHERE instance_pk = ?", (pk,))
            return len(pks)

        count: int = await self._write(op, durable=True)
        return count

    # -- activations -----------------------------------------------------------------------------

    async def claim(
        self, owner: str, workflows: Sequence[str], limit: int, lease_seconds: float, now: float
    ) -> list[Claim]:
        if not workflows or limit <= 0:
            return []
        in_workflows = _in_workflows(workflows)
        # A read first: an idle poll must not take the database's write lock.
        if not await self._read(
            f"SELECT 1 FROM instances WHERE ready_at <= ? AND {in_workflows} LIMIT 1",
            (now, *workflows),
        ):
            return []

        def op(c: sqlite3.Connection) -> list[Claim]:
            # One SELECT and one UPDATE for the whole batch: the new lease is computed here
            # from the rows read under the write lock (SQLite's RETURNING is slow per row).
            rows = c.execute(
                f"SELECT {INSTANCE_COLUMNS}, lease_token, control, event_seq FROM instances"
                f" WHERE ready_at <= ? AND {in_workflows} ORDER BY ready_at LIMIT ?",
                (now, *workflows, limit),
            ).fetchall()
            claimed_rows: list[tuple[list[Any], Lease, Any, int]] = []
            expires = now + lease_seconds
            for row in rows:
                pk, status = row[0], row[3]
                if status == "waitingForPause":
                    # Its worker died while a pause was pending: the pause takes effect now.
                    c.execute(
                        "UPDATE instances SET status = 'paused', ready_at = NULL,"
                        " lease_owner = NULL, lease_expires_at = NULL, updated_at = ? WHERE pk = ?",
                        (now, pk),
                    )
                    continue
                claimed = list(row[:16])
                if status in ("queued", "waiting"):
                    claimed[3] = "running"
                claimed[10] = now  # updated_at
                if claimed[11] is None:
                    claimed[11] = now  # started_at
                claimed[13] = expires  # ready_at
                claimed[14] = owner  # lease_owner
                claimed_rows.append((claimed, Lease(pk, row[16] + 1, owner), row[17], row[18]))
            if not claimed_rows:
                return []
            pks = [lease.pk for _, lease, _, _ in claimed_rows]
            pk_marks = ",".join("?" * len(pks))
            c.execute(
                "UPDATE instances SET lease_owner = ?, lease_token = lease_token + 1,"
                " lease_expires_at = ?, ready_at = ?, updated_at = ?,"
                " status = CASE WHEN status IN ('queued', 'waiting') THEN 'running'"
                " ELSE status END, started_at = COALESCE(started_at, ?)"
                f" WHERE pk IN ({pk_marks})",
                (owner, expires, expires, now, now, *pks),
            )
            # Their histories, read under the same write lock: two queries per batch
            # instead of two per instance.
            steps = c.execute(
                f"SELECT instance_pk, {STEP_COLUMNS} FROM steps"
                f" WHERE instance_pk IN ({pk_marks}) ORDER BY instance_pk, seq",
                pks,
            ).fetchall()
            events = c.execute(
                "SELECT instance_pk, pk, type, payload, created_at FROM events"
                f" WHERE instance_pk IN ({pk_marks}) AND consumed_by IS NULL"
                " ORDER BY instance_pk, pk",
                pks,
            ).fetchall()
            found = histories_from_rows(pks, steps, events)
            return [
                Claim(instance_from_row(row), lease, control, event_seq, found[lease.pk])
                for row, lease, control, event_seq in claimed_rows
            ]

        claims: list[Claim] = await self._write(op)
        return claims

    @staticmethod
    def _fence(c: sqlite3.Connection, lease: Lease) -> tuple[Any, ...]:
        row = c.execute(
            "SELECT status, event_seq, workflow, id, parent FROM instances"
            " WHERE pk = ? AND lease_token = ? AND lease_owner = ?",
            (lease.pk, lease.token, lease.owner),
        ).fetchone()
        if row is None:
            raise LeaseLostError(f"lease on instance {lease.pk} lost by worker {lease.owner}")
        return tuple(row)

    async def record_step(self, lease: Lease, write: StepWrite, now: float) -> str:
        def op(c: sqlite3.Connection) -> str:
            status: str = self._fence(c, lease)[0]
            self._insert_step(c, lease, write)
            return status

        status: str = await self._write(op)
        return status

    @staticmethod
    def _insert_step(c: sqlite3.Connection, lease: Lease, write: StepWrite) -> None:
        c.execute(
            f"INSERT OR REPLACE INTO steps ({STEP_COLUMNS}, instance_pk)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                write.name,
                write.count,
                write.seq,
                write.kind,
                write.status,
                write.output,
                dumps(write.error, what="step error") if write.error is not None else None,
                dumps([a.to_json() for a in write.attempts], what="attempts")
                if write.attempts
                else None,
                write.wake_at,
                write.started_at,
                write.ended_at,
                dumps(write.info, what="step info") if write.info is not None else None,
                lease.pk,
            ),
        )
        if write.consume_event is not None:
            c.execute(
                "UPDATE events SET consumed_by = ? WHERE pk = ?",
                (f"{write.name}-{write.count}", write.consume_event),
            )

    async def renew(
        self, leases: Sequence[Lease], lease_seconds: float, now: float
    ) -> dict[int, str]:
        expires = now + lease_seconds

        def op(c: sqlite3.Connection) -> dict[int, str]:
            held: dict[int, str] = {}
            for lease in leases:
                row = c.execute(
                    "UPDATE instances SET lease_expires_at = ?, ready_at = ?"
                    " WHERE pk = ? AND lease_token = ? AND lease_owner = ? RETURNING status",
                    (expires, expires, lease.pk, lease.token, lease.owner),
                ).fetchone()
                if row is not None:
                    held[lease.pk] = row[0]
            return held

        held: dict[int, str] = await self._write(op)
        return held

    async def finish(self, lease: Lease, finish: Finish, now: float) -> str:
        def op(c: sqlite3.Connection) -> tuple[str, str, str, bool]:
            status, event_seq, workflow, instance_id, parent = self._fence(c, lease)
            for write in finish.steps:
                self._insert_step(c, lease, write)
            woke = False
            output = finish.output
            error = dumps(finish.error, what="error") if finish.error is not None else None
            rollback = (
                dumps(finish.rollback, what="rollback") if finish.rollback is not None else None
            )
            if finish.status == "waiting":
                if status == "waitingForPause":
                    new_status, ready = "paused", None
                elif event_seq != finish.event_seq:
                    new_status, ready = "waiting", now
                else:
                    new_status, ready = "waiting", finish.wake_at
                c.execute(
                    "UPDATE instances SET status = ?, ready_at = ?, lease_owner = NULL,"
                    " lease_expires_at = NULL, updated_at = ? WHERE pk = ?",
                    (new_status, ready, now, lease.pk),
                )
            else:
                new_status = finish.status
                c.execute(
                    "UPDATE instances SET status = ?, output = ?, error = ?, rollback = ?,"
                    " ready_at = NULL, lease_owner = NULL, lease_expires_at = NULL, control = NULL,"
                    " ended_at = ?, updated_at = ? WHERE pk = ?",
                    (new_status, output, error, rollback, now, now, lease.pk),
                )
                woke = self._wake_parent(c, loads(parent), now) if parent is not None else False
            return new_status, workflow, instance_id, woke

        result: tuple[str, str, str, bool] = await self._write(op)
        new_status, workflow, instance_id, woke = result
        self._notify_changed(workflow, instance_id)
        if new_status == "waiting" or woke:
            self._notify_ready()
        return new_status

    @staticmethod
    def _wake_parent(c: sqlite3.Connection, parent: dict[str, Any] | None, now: float) -> bool:
        """A child instance ended: make its parent runnable now if it waits (for the child), and
        bump its ``event_seq`` so a parent activation running meanwhile does not go to sleep."""
        if not parent:
            return False
        c.execute(
            "UPDATE instances SET event_seq = event_seq + 1, ready_at = CASE"
            " WHEN status = 'waiting' THEN ? ELSE ready_at END WHERE workflow = ? AND id = ?",
            (now, parent["workflow"], parent["id"]),
        )
        return True

    async def release(self, lease: Lease, now: float) -> None:
        def op(c: sqlite3.Connection) -> None:
            c.execute(
                "UPDATE instances SET lease_owner = NULL, lease_expires_at = NULL, ready_at = ?,"
                " status = CASE WHEN status = 'waitingForPause' THEN 'paused'"
                " WHEN status = 'running' THEN 'queued' ELSE status END"
                " WHERE pk = ? AND lease_token = ? AND lease_owner = ?",
                (now, lease.pk, lease.token, lease.owner),
            )
            c.execute(
                "UPDATE instances SET ready_at = NULL WHERE pk = ? AND status = 'paused'",
                (lease.pk,),
            )

        await self._write(op)
        self._notify_ready()

    async def next_wakeup(self, workflows: Sequence[str]) -> float | None:
        if not workflows:
            return None
        rows = await self._read(
            f"SELECT min(ready_at) FROM instances WHERE ready_at IS NOT NULL"
            f" AND {_in_workflows(workflows)}",
            tuple(workflows),
        )
        value = rows[0][0] if rows else None
        return float(value) if value is not None else None

    # -- worker liveness -------------------------------------------------------------------------

    async def heartbeat(self, info: WorkerInfo, now: float) -> None:
        workflows = dumps(list(info.workflows), what="worker workflows", limit=1 << 24)

        def op(c: sqlite3.Connection) -> None:
            c.execute(
                "DELETE FROM workers WHERE id <> ? AND last_seen + heartbeat * ? < ?",
                (info.id, WORKER_EXPIRE_BEATS, now),
            )
            c.execute(
                "INSERT OR REPLACE INTO workers (id, host, pid, started_at, last_seen, heartbeat,"
                " workflows, concurrency, running) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    info.id,
                    info.host,
                    info.pid,
                    info.started_at,
                    now,
                    info.heartbeat,
                    workflows,
                    info.concurrency,
                    info.running,
                ),
            )

        await self._write(op)

    async def list_workers(self) -> list[WorkerInfo]:
        rows = await self._read(
            "SELECT id, host, pid, started_at, last_seen, heartbeat, workflows, concurrency,"
            " running FROM workers ORDER BY started_at, id"
        )
        return [
            WorkerInfo(r[0], r[1], r[2], r[3], r[4], r[5], tuple(loads(r[6])), r[7], r[8])
            for r in rows
        ]

    async def forget_worker(self, worker_id: str) -> None:
        def op(c: sqlite3.Connection) -> None:
            c.execute("DELETE FROM workers WHERE id = ?", (worker_id,))

        await self._write(op)
