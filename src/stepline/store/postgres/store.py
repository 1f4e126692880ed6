"""The PostgreSQL store's operations (the package docstring says what the store is)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from ..._json import dumps, loads
from ...errors import (
    IllegalStateError,
    InstanceAlreadyExistsError,
    InstanceNotFoundError,
    LeaseLostError,
    StoreError,
)
from ...records import (
    FINISHED_STATUSES,
    WORKER_EXPIRE_BEATS,
    InstanceEvent,
    InstancePage,
    InstanceRecord,
    StepRecord,
    WorkerInfo,
    WorkflowInfo,
)
from .._batcher import Batcher
from .._rows import (
    INSTANCE_COLUMNS,
    INTERRUPTED,
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
from ..base import (
    Claim,
    ControlAction,
    Finish,
    History,
    Lease,
    NewInstance,
    StepWrite,
    Store,
    WorkflowMeta,
)
from ..migrations import load_migrations
from .db import Conn, Database, describe, split_url
from .sql import Statements, history_from_json, indexed_rows, json_rows

__all__ = ["PostgresStore"]

log = logging.getLogger("stepline.store.postgres")

_CLOCK_REFRESH_SECONDS = 30.0
_CLOCK_QUERY = "SELECT extract(epoch FROM clock_timestamp())::float8"
_FINISHED = ("complete", "errored", "terminated")
_N_ICOLS = len(INSTANCE_COLUMNS.split(","))
_INTERRUPTED = dumps(INTERRUPTED, what="error")

_Finished = tuple[str, str, str, bool]
"""A finished activation: new status, workflow, instance id, whether a parent was woken."""


def _step_row(lease: Lease, write: StepWrite) -> dict[str, Any]:
    """One step write as the parameters of ``record_step(s)``."""
    return {
        "pk": lease.pk,
        "token": lease.token,
        "owner": lease.owner,
        "name": write.name,
        "count": write.count,
        "seq": write.seq,
        "kind": write.kind,
        "status": write.status,
        "output": write.output,
        "error": _json_or_none(write.error, "step error"),
        "attempts": dumps([a.to_json() for a in write.attempts], what="attempts")
        if write.attempts
        else None,
        "wake_at": write.wake_at,
        "started_at": write.started_at,
        "ended_at": write.ended_at,
        "info": _json_or_none(write.info, "step info"),
        "event": write.consume_event,
        "new": write.new,
    }


def _json_or_none(value: Any, what: str) -> str | None:
    return None if value is None else dumps(value, what=what)


class PostgresStore(Store):
    """The shared store. ``url`` is ``postgresql://user:password@host:port/db[?schema=name]``.

    ``clock``: the time to follow as it is (a test's manual clock); by default (None) the
    server's clock, so that every machine means the same instant (see :meth:`now`).
    """

    pushes_notifications = True

    def __init__(
        self,
        url: str,
        clock: Callable[[], float] | None = None,
        *,
        max_connections: int = 8,
    ) -> None:
        super().__init__(clock)
        self.url = url
        conninfo, self.schema = split_url(url)
        self._db = Database(
            conninfo, describe(conninfo, self.schema), max_connections=max_connections
        )
        self._sql = Statements.for_schema(self.schema)
        self.channel = f"stepline_{self.schema}"[:63]
        """The LISTEN/NOTIFY channel of this schema."""
        self._source = secrets.token_hex(6)
        """Tags this store's notifications, so that it can skip its own."""
        self._generation = 0
        self._timer_hint: tuple[tuple[str, ...], int, float | None] | None = None
        self._claim_floors: dict[tuple[str, ...], _ClaimFloor] = {}
        self._server_clock = clock is None
        # With the server's clock, time is the server's time at the last measurement moved on by
        # the monotonic clock, so a jump of the local wall clock never moves timers or leases.
        self._ticks: Callable[[], float] = time.monotonic if self._server_clock else self._clock
        self._offset = time.time() - time.monotonic() if self._server_clock else 0.0
        self._clock_task: asyncio.Task[None] | None = None
        self._step_writes: Batcher[dict[str, Any], str] = Batcher(
            self._record_steps,
            key=lambda row: (row["pk"], row["name"], row["count"]),
            split=_not_a_connection_fault,
        )
        self._finishes: Batcher[dict[str, Any], _Finished] = Batcher(
            self._finish, key=lambda row: row["pk"], split=_not_a_connection_fault
        )

    @property
    def retry_seconds(self) -> float:
        """How long an operation retries connection faults before raising StoreError."""
        return self._db.retry_seconds

    @retry_seconds.setter
    def retry_seconds(self, value: float) -> None:
        self._db.retry_seconds = value

    # -- clock -----------------------------------------------------------------------------------

    def now(self) -> float:
        """The database server's clock unless the store was given a clock (measured at open and
        every ``_CLOCK_REFRESH_SECONDS``, carried on between measurements by the monotonic
        clock, so a step of this machine's wall clock moves no timer or lease); else the given
        clock."""
        return self._ticks() + self._offset

    @property
    def clock_offset(self) -> float:
        """Seconds from this machine's wall clock (or the given clock) to :meth:`now`."""
        return self.now() - self._clock()

    async def _measure_offset(self) -> None:
        """Set the offset to the server's clock from the fastest of three round trips."""

        async def sample(conn: Conn) -> tuple[float, float]:
            before = self._ticks()  # timed on the connection, not while waiting for one
            cur = await conn.execute(_CLOCK_QUERY)
            row = await cur.fetchone()
            after = self._ticks()
            server = float(row[0]) if row else (before + after) / 2
            return after - before, server - (before + after) / 2

        samples = [
            await self._db.retrying("measuring the server clock", sample, priority=True)
            for _ in range(3)
        ]
        self._offset = min(samples)[1]

    async def _clock_loop(self) -> None:
        while True:
            await asyncio.sleep(_CLOCK_REFRESH_SECONDS)
            try:
                await self._measure_offset()
            except StoreError as exc:
                log.warning("could not refresh the server clock offset: %s", exc)

    # -- lifecycle -------------------------------------------------------------------------------

    async def open(self) -> None:
        if self._db.is_open:
            return
        await self._db.open()
        try:
            await self._migrate()
            if self._server_clock:
                await self._measure_offset()
            await self._db.listen(self.channel, self._dispatch, self._wake_everything)
        except BaseException:
            await self._db.close()
            raise
        if self._server_clock:
            self._clock_task = asyncio.create_task(self._clock_loop(), name="stepline-clock")

    async def close(self) -> None:
        if not self._db.is_open:
            return
        for batcher in (self._step_writes, self._finishes):
            await batcher.drain()
        if self._clock_task is not None:
            self._clock_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._clock_task
            self._clock_task = None
        await self._db.close()

    async def _migrate(self) -> None:
        await self._db.migrate(self.schema, load_migrations("postgres"))

    # -- wake-ups --------------------------------------------------------------------------------

    def _note(self, workflow: str | None = None, instance_id: str | None = None) -> str:
        """A notification payload: this store's id, and the instance that changed, if one."""
        note = {"s": self._source}
        if workflow is not None and instance_id is not None:
            note |= {"w": workflow, "i": instance_id}
        return dumps(note, what="notification")

    def _dispatch(self, payload: str) -> None:
        """A notification arrived: wake the worker, and waiters on the instance it names.

        This store's own notifications are skipped: it signalled itself when it committed.
        """
        try:
            data = loads(payload) if payload else {}
        except ValueError:
            data = {}
        if not isinstance(data, dict):
            data = {}
        if data.get("s") == self._source:
            return
        if data.get("e") is not True:  # "e": instances ended and nothing became runnable
            self._notify_ready()
        workflow, instance_id = data.get("w"), data.get("i")
        if workflow is not None and instance_id is not None:
            self._notify_changed(str(workflow), str(instance_id))
        ended = data.get("ended")  # [[workflow, id], ...]: the instances a finish batch ended
        if isinstance(ended, list):
            for item in ended:
                if isinstance(item, list) and len(item) == 2:
                    self._notify_changed(str(item[0]), str(item[1]))

    def _notify_ready(self) -> None:
        self._generation += 1  # invalidates the timer hint of the last claim
        super()._notify_ready()

    def _wake_everything(self) -> None:
        """After the listener reconnects: anything may have changed meanwhile."""
        self._notify_ready()
        for workflow, instance_id in list(self._change_watches):
            self._notify_changed(workflow, instance_id)

    # -- workflows -------------------------------------------------------------------------------

    async def register_workflows(self, metas: Sequence[WorkflowMeta]) -> None:
        latest = {meta.name: meta for meta in metas}  # the last definition of a name wins
        if not latest:
            return
        params = {
            "now": self.now(),
            "names": list(latest),
            "classes": [m.class_name for m in latest.values()],
            "definitions": [
                dumps(m.definition, what="workflow definition", limit=1 << 24)
                for m in latest.values()
            ],
        }
        query = self._sql.register_workflows

        async def attempt(conn: Conn) -> None:
            await conn.execute(query, params)

        await self._db.retrying("registering workflows", attempt)

    async def list_workflows(self) -> list[WorkflowInfo]:
        rows, count_rows = await self._db.read_many(
            "listing workflows", [(self._sql.list_workflows, ()), (self._sql.count_instances, ())]
        )
        counts: dict[str, dict[str, int]] = {}
        for workflow, status, n in count_rows:
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
        unique: dict[str, NewInstance] = {}
        for item in items:
            unique.setdefault(item.id, item)
        if not unique:
            return []
        params_now = self.now()
        params = {
            "workflow": workflow,
            "trigger": trigger,
            "now": params_now,
            "items": json_rows(
                {"ord": n, "id": i.id, "params": i.params, "parent": i.parent}
                for n, i in enumerate(unique.values())
            ),
            "channel": self.channel,
            "note": self._note(),
            "leased": limit,
            "owner": owner,
            "expires": params_now + lease if owner is not None else None,
        }

        async def body(conn: Conn) -> list[InstanceRecord]:
            # One statement inserts and (if it inserted anything) notifies; nothing commits
            # unless every id was new or ``skip_existing`` allows some to be skipped.
            cur = await conn.execute(self._sql.create_instances, params)
            created = [instance_from_row(row) for row in await cur.fetchall()]
            if not skip_existing and len(created) < len(unique):
                existing = set(unique) - {r.id for r in created}
                raise InstanceAlreadyExistsError(workflow, sorted(existing)[0])
            order = {instance_id: n for n, instance_id in enumerate(unique)}
            created.sort(key=lambda r: order[r.id])
            return created

        created = await self._db.transaction(f"creating instances of {workflow!r}", body)
        if any(record.status == "queued" for record in created):
            self._notify_ready()
        return created

    async def get_instance(self, workflow: str, instance_id: str) -> InstanceRecord:
        rows = await self._db.read(
            f"reading instance {instance_id!r}", self._sql.get_instance, (workflow, instance_id)
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
        clauses: list[sql.Composable] = []
        params: list[Any] = []
        if workflow is not None:
            clauses.append(sql.SQL("workflow = %s"))
            params.append(workflow)
        if status is not None:
            clauses.append(sql.SQL("status = %s"))
            params.append(status)
        if after is not None:
            clauses.append(sql.SQL("pk > %s" if oldest_first else "pk < %s"))
            params.append(after)
        where = sql.SQL("WHERE ") + sql.SQL(" AND ").join(clauses) if clauses else sql.SQL("")
        query = sql.SQL("SELECT {cols} FROM {s}.instances {where} ORDER BY pk {order} LIMIT %s")
        text = query.format(
            cols=sql.SQL(INSTANCE_COLUMNS),
            s=sql.Identifier(self.schema),
            where=where,
            order=sql.SQL("ASC" if oldest_first else "DESC"),
        ).as_string()
        rows = await self._db.read("listing instances", text, (*params, limit + 1))
        records = [instance_from_row(r) for r in rows[:limit]]
        next_cursor = encode_cursor(records[-1].pk) if len(rows) > limit else None
        return InstancePage(records, next_cursor)

    async def get_steps(self, workflow: str, instance_id: str) -> list[StepRecord]:
        found, steps = await self._db.read_many(
            f"reading the steps of instance {instance_id!r}",
            [
                (self._sql.get_instance, (workflow, instance_id)),
                (self._sql.steps_of_instance, (workflow, instance_id)),
            ],
        )
        if not found:
            raise InstanceNotFoundError(workflow, instance_id)
        return settle_sleeps(
            [step_from_row(r) for r in steps], instance_from_row(found[0]), self.now()
        )

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
        q = self._sql
        woke_parent = False

        async def body(conn: Conn) -> InstanceRecord:
            nonlocal woke_parent
            cur = await conn.execute(q.lock_instance, (workflow, instance_id))
            found = await cur.fetchone()
            if found is None:
                raise InstanceNotFoundError(workflow, instance_id)
            pk, status, owner = found
            if action == "restart":
                await self._restart(conn, pk, from_step, now)
            else:
                change = control_transition(
                    workflow, instance_id, status, owner is not None, action, rollback
                )
                sets, params = control_assignments(change, now, "%s")
                update = sql.SQL("UPDATE {}.instances SET {} WHERE pk = %s").format(
                    sql.Identifier(self.schema), sql.SQL(sets)
                )
                await conn.execute(update, (*params, pk))
                if change.get("fence"):  # the fenced-out activation never records its steps
                    await conn.execute(
                        q.interrupt_running_steps, {"pk": pk, "now": now, "error": _INTERRUPTED}
                    )
                if change.get("end"):  # a child ended: wake a parent waiting for it
                    cur = await conn.execute(q.wake_parent_of, {"pk": pk, "now": now})
                    woke_parent = woke_parent or bool(await cur.fetchall())
            await conn.execute(q.notify, (self.channel, self._note(workflow, instance_id)))
            cur = await conn.execute(q.get_instance_by_pk, (pk,))
            row = await cur.fetchone()
            if row is None:  # pragma: no cover - the row is locked by this transaction
                raise InstanceNotFoundError(workflow, instance_id)
            return instance_from_row(row)

        record = await self._db.transaction(f"{action} of instance {instance_id!r}", body)
        self._notify_changed(workflow, instance_id)
        if record.ready_at is not None or woke_parent:
            self._notify_ready()
        return record

    async def _restart(
        self, conn: Conn, pk: int, from_step: tuple[str, int] | None, now: float
    ) -> None:
        q = self._sql
        if from_step is None:
            await conn.execute(q.delete_steps, (pk,))
            await conn.execute(q.unconsume_all, (pk,))
        else:
            cur = await conn.execute(q.step_seq, (pk, from_step[0], from_step[1]))
            row = await cur.fetchone()
            if row is None:
                raise ValueError(
                    f"instance has no recorded step {from_step[0]!r} (count {from_step[1]}) "
                    "to restart from"
                )
            cur = await conn.execute(q.delete_steps_from, (pk, row[0]))
            labels = [f"{name}-{count}" for name, count in await cur.fetchall()]
            await conn.execute(q.unconsume, (pk, labels))
        await conn.execute(q.restart, {"pk": pk, "now": now})

    async def send_event(
        self, workflow: str, instance_id: str, event_type: str, payload: str | None
    ) -> None:
        now = self.now()
        q = self._sql

        async def body(conn: Conn) -> None:
            cur = await conn.execute(q.lock_instance, (workflow, instance_id))
            found = await cur.fetchone()
            if found is None:
                raise InstanceNotFoundError(workflow, instance_id)
            pk, status, _owner = found
            if status in _FINISHED:
                raise IllegalStateError(workflow, instance_id, status, "send an event to")
            await conn.execute(
                q.send_event,
                {
                    "pk": pk,
                    "type": event_type,
                    "payload": payload,
                    "now": now,
                    "channel": self.channel,
                    "note": self._note(workflow, instance_id),
                },
            )

        await self._db.transaction(f"sending an event to instance {instance_id!r}", body)
        self._notify_ready()

    async def get_events(self, workflow: str, instance_id: str) -> list[InstanceEvent]:
        found, events = await self._db.read_many(
            f"reading the events of instance {instance_id!r}",
            [
                (self._sql.get_instance, (workflow, instance_id)),
                (self._sql.events_of_instance, (workflow, instance_id)),
            ],
        )
        if not found:
            raise InstanceNotFoundError(workflow, instance_id)
        return [InstanceEvent(r[0], loads(r[1]), r[2], r[3]) for r in events]

    async def delete_instances(
        self, workflow: str, instance_ids: Sequence[str], *, finished_only: bool = False
    ) -> int:
        q = self._sql
        ids = list(instance_ids)

        async def body(conn: Conn) -> int:
            cur = await conn.execute(q.lock_instances_by_id, (workflow, ids))
            # The rows stay locked until the delete commits: no status changes meanwhile.
            statuses = {row[0]: row[1] for row in await cur.fetchall()}
            if finished_only:
                for instance_id in ids:
                    status = statuses.get(instance_id)
                    if status is not None and status not in FINISHED_STATUSES:
                        raise IllegalStateError(workflow, instance_id, status, "delete")
            cur = await conn.execute(q.delete_instances, (workflow, ids))
            row = await cur.fetchone()
            return int(row[0]) if row else 0

        return await self._db.transaction(f"deleting instances of {workflow!r}", body)

    async def purge_instances(
        self, workflow: str | None, statuses: Sequence[str], older_than: float
    ) -> int:
        params = {"statuses": list(statuses), "older_than": older_than, "workflow": workflow}
        q = self._sql

        async def body(conn: Conn) -> int:
            await conn.execute(q.lock_finished, params)
            cur = await conn.execute(q.purge_instances, params)
            row = await cur.fetchone()
            return int(row[0]) if row else 0

        return await self._db.transaction("purging finished instances", body)

    # -- activations -----------------------------------------------------------------------------

    async def claim(
        self, owner: str, workflows: Sequence[str], limit: int, lease_seconds: float, now: float
    ) -> list[Claim]:
        if not workflows or limit <= 0:
            return []
        nonce = secrets.randbits(62)
        key = tuple(workflows)
        floor = self._claim_floors.get(key)
        if floor is not None and not floor.holds(now):
            floor = None
        params = {
            "now": now,
            "floor": None if floor is None else floor.at,
            "workflows": list(workflows),
            "limit": limit,
            "owner": owner,
            "nonce": nonce,
            "expires": now + lease_seconds,
        }
        faulted = recovered = False

        async def attempt(conn: Conn) -> tuple[list[Any], dict[int, Any]]:
            nonlocal faulted, recovered
            try:
                if faulted:  # the reply of a claim may have been lost: recover its leases
                    cur = await conn.execute(self._sql.claimed_by, (owner, nonce))
                    rows = await cur.fetchall()
                    if rows:
                        recovered = True
                        return rows, {}
                # One round trip: BEGIN, the planner setting (local to the transaction, so a
                # pooler in transaction mode never hands it to another client), the claim, the
                # claimed instances' histories, COMMIT. (A failed claim leaves the transaction
                # aborted; the pool rolls it back.)
                async with conn.pipeline():
                    await conn.execute("BEGIN")
                    await conn.execute(_CLAIM_IN_ORDER)
                    cur = conn.cursor()
                    await cur.execute(self._sql.claim, params)
                    histories = conn.cursor()
                    await histories.execute(self._sql.claimed_histories, params)
                    await conn.execute("COMMIT")
                rows = await cur.fetchall()
                return rows, {row[0]: row for row in await histories.fetchall()}
            except psycopg.OperationalError:
                faulted = True
                raise

        generation = self._generation
        rows, histories = await self._db.retrying("claiming instances", attempt, priority=True)
        claimed = [row for row in rows if row[0] is not None]
        # A recovered claim's histories went with the lost reply: read them now, under the
        # leases and after the ``event_seq`` recovered with them, so they hold every event it
        # counts.
        missing = [row[0] for row in claimed if row[0] not in histories]
        loaded = (
            dict(zip(missing, await self._load_histories(missing), strict=True)) if missing else {}
        )
        claims: list[Claim] = []
        for row in claimed:
            lease = Lease(row[0], row[_N_ICOLS], owner)
            read = histories.get(lease.pk)
            if read is None:
                event_seq, history = row[_N_ICOLS + 2], loaded[lease.pk]
            else:
                event_seq, history = read[1], history_from_json(read[2], read[3])
            claims.append(
                Claim(instance_from_row(row), lease, row[_N_ICOLS + 1], event_seq, history)
            )
        # An empty claim also read the earliest timer: next_wakeup() can use it once, if nothing
        # became runnable meanwhile (which would have gone through _notify_ready).
        self._timer_hint = None
        if not claims and rows:
            self._timer_hint = (key, generation, rows[0][_N_ICOLS + 4])
        if rows and not recovered:
            rechecked = now if floor is None else floor.rechecked
            if len(claims) < limit:  # it read the earliest timer left
                next_ready: float | None = rows[0][_N_ICOLS + 4]
                earliest = now if next_ready is None else min(next_ready, now)
            else:
                # A full claim (a backlog, or a busy worker filling its free slots): no live row
                # it could lock lies below its first pick, so the next claims read from a margin
                # below that, not from wherever the floor was when the backlog began (each would
                # walk the dead entries of every instance claimed since). A row another
                # transaction held locked below it is found by the next read from the low end,
                # as a straggler is. (The floor may move down a little: that only reads more.)
                earliest = rows[0][_N_ICOLS + 3]
            self._claim_floors[key] = _ClaimFloor(earliest - _FLOOR_MARGIN, now, rechecked)
        return claims

    async def _load_histories(self, pks: list[int]) -> list[History]:
        """The histories of leased instances, in the order of ``pks``."""
        steps, events = await self._db.read_many(
            "loading instance histories",
            [(self._sql.history_steps, (pks,)), (self._sql.history_events, (pks,))],
        )
        found = histories_from_rows(pks, steps, events)
        return [found[pk] for pk in pks]

    async def record_step(self, lease: Lease, write: StepWrite, now: float) -> str:
        return await self._step_writes.submit(_step_row(lease, write))

    async def _record_steps(self, rows: list[dict[str, Any]]) -> list[str | BaseException]:
        q = self._sql
        consuming = any(row["event"] is not None for row in rows)
        query: str
        params: dict[str, Any] | tuple[str]
        plain_insert = False  # a step's first record, without the upsert (`record_step_new`)
        if len(rows) == 1:  # the common case: plain parameters are cheaper for the server
            params = rows[0]
            plain_insert = bool(params["new"]) and not consuming
            if consuming:
                query = q.record_step_consuming
            else:
                query = q.record_step_new if plain_insert else q.record_step
        else:
            query = q.record_steps_consuming if consuming else q.record_steps
            params = (indexed_rows(rows),)

        async def attempt(conn: Conn) -> list[Any]:
            cur = conn.kept_cursor()
            try:
                await cur.execute(query, params)
            except psycopg.errors.UniqueViolation:
                if not plain_insert:
                    raise
                # The step has a record after all: this write's own, committed on an attempt
                # whose reply was lost (then retried here), or the writer's hint was wrong.
                await cur.execute(q.record_step, params)
            return await cur.fetchall()

        held = dict(await self._db.retrying("recording steps", attempt))
        return [held.get(n) or _lease_lost(row["pk"], row["owner"]) for n, row in enumerate(rows)]

    async def renew(
        self, leases: Sequence[Lease], lease_seconds: float, now: float
    ) -> dict[int, str]:
        if not leases:
            return {}
        params = {
            "leases": json_rows(
                {"pk": lease.pk, "token": lease.token, "owner": lease.owner} for lease in leases
            ),
            "expires": now + lease_seconds,
        }

        async def attempt(conn: Conn) -> list[Any]:
            cur = await conn.execute(self._sql.renew, params)
            return await cur.fetchall()

        rows = await self._db.retrying("renewing leases", attempt, priority=True)
        return {pk: status for pk, status in rows}

    async def finish(self, lease: Lease, finish: Finish, now: float) -> str:
        waiting = finish.status == "waiting"
        row = {
            "pk": lease.pk,
            "token": lease.token,
            "owner": lease.owner,
            "status": finish.status,
            "output": None if waiting else finish.output,
            "error": None if waiting else _json_or_none(finish.error, "error"),
            "rollback": None if waiting else _json_or_none(finish.rollback, "rollback"),
            "wake_at": finish.wake_at,
            "event_seq": finish.event_seq,
            "fnow": now,
            "steps": [_step_row(lease, write) for write in finish.steps],
        }
        new_status, workflow, instance_id, woke_parent = await self._finishes.submit(row)
        self._notify_changed(workflow, instance_id)
        if new_status == "waiting" or woke_parent:
            self._notify_ready()
        return new_status

    async def _finish(self, rows: list[dict[str, Any]]) -> list[_Finished | BaseException]:
        """Finish a batch of activations in one statement; a child that ends wakes its parent."""
        params = {
            "rows": json_rows(
                {key: value for key, value in row.items() if key != "steps"} | {"idx": n}
                for n, row in enumerate(rows)
            ),
            "steps": json_rows(
                step | {"idx": n} for n, row in enumerate(rows) for step in row["steps"]
            ),
            "channel": self.channel,
            "source": self._source,
        }
        fences = (
            json_rows({"idx": n, "pk": r["pk"], "token": r["token"]} for n, r in enumerate(rows)),
        )
        faulted = False

        async def attempt(conn: Conn) -> dict[int, _Finished]:
            nonlocal faulted
            try:
                cur = conn.kept_cursor()
                await cur.execute(self._sql.finish, params)
                done = {r[0]: (r[1], r[2], r[3], bool(r[4])) for r in await cur.fetchall()}
                if faulted and len(done) < len(rows):
                    # An attempt whose reply was lost may have committed: its instances are
                    # released under the same token.
                    cur = await conn.execute(self._sql.finished_by, fences)
                    for r in await cur.fetchall():
                        done.setdefault(r[0], (r[1], r[2], r[3], bool(r[4])))
                return done
            except psycopg.OperationalError:
                faulted = True
                raise

        done = await self._db.retrying("finishing activations", attempt)
        return [done.get(n) or _lease_lost(row["pk"], row["owner"]) for n, row in enumerate(rows)]

    async def release(self, lease: Lease, now: float) -> None:
        params = {
            "pk": lease.pk,
            "token": lease.token,
            "owner": lease.owner,
            "now": now,
            "channel": self.channel,
            "note": self._note(),
        }

        async def attempt(conn: Conn) -> None:
            await conn.execute(self._sql.release, params)

        await self._db.retrying(f"releasing instance {lease.pk}", attempt)
        self._notify_ready()

    async def next_wakeup(self, workflows: Sequence[str]) -> float | None:
        if not workflows:
            return None
        hint, self._timer_hint = self._timer_hint, None
        if hint is not None and hint[0] == tuple(workflows) and hint[1] == self._generation:
            return hint[2]
        rows = await self._db.read(
            "looking for the next timer", self._sql.next_wakeup, (list(workflows),), priority=True
        )
        value = rows[0][0] if rows else None
        return float(value) if value is not None else None

    # -- worker liveness -------------------------------------------------------------------------

    async def heartbeat(self, info: WorkerInfo, now: float) -> None:
        params = {
            "id": info.id,
            "host": info.host,
            "pid": info.pid,
            "started_at": info.started_at,
            "now": now,
            "heartbeat": info.heartbeat,
            "workflows": dumps(list(info.workflows), what="worker workflows", limit=1 << 24),
            "concurrency": info.concurrency,
            "running": info.running,
            "expire_beats": WORKER_EXPIRE_BEATS,
        }
        query = self._sql.heartbeat

        async def attempt(conn: Conn) -> None:
            await conn.execute(query, params)

        # On the pool kept for leases and claims: a worker busy enough to exhaust the main pool
        # must not look dead for it.
        await self._db.retrying(
            f"recording the heartbeat of worker {info.id!r}", attempt, priority=True
        )

    async def list_workers(self) -> list[WorkerInfo]:
        rows = await self._db.read("listing workers", self._sql.list_workers)
        return [
            WorkerInfo(r[0], r[1], r[2], r[3], r[4], r[5], tuple(loads(r[6])), r[7], r[8])
            for r in rows
        ]

    async def forget_worker(self, worker_id: str) -> None:
        query = self._sql.forget_worker

        async def attempt(conn: Conn) -> None:
            await conn.execute(query, (worker_id,))

        await self._db.retrying(f"removing worker {worker_id!r}", attempt)


_CLAIM_IN_ORDER = "SET LOCAL enable_bitmapscan = off"
"""Keeps the claim reading the ``ready_at`` index in order and stopping at its limit.

With statistics that lag behind the instances table (never analyzed, or a fleet that grew faster
than autovacuum's next ANALYZE), the planner expects a handful of runnable rows and plans the
claim as a bitmap scan of every due row, sorted: harmless while few rows are due, but while a
worker works off a backlog each claim then reads and sorts the whole backlog, much slower than
reading the index in order, and the backlog grows."""

_FLOOR_MARGIN = 2.0
"""Seconds below the earliest timer (or the claim's time) that the next claim reads from: room for
a write whose time was taken a little before it committed, and for other processes' clocks."""
_FLOOR_RECHECK = 10.0
"""Seconds between claims that read the ready_at index from its low end, for any straggler below
the floor (a write that took longer than the margin to commit)."""


@dataclass(frozen=True)
class _ClaimFloor:
    """Where a worker's claims read the ``ready_at`` index from.

    Every change of an instance's state rewrites its row and changes ``ready_at``, so each leaves
    a dead entry in that index, at or below the live ones, until a VACUUM removes it. A claim
    reading the index from its low end walks all of them, which dominates its cost once many
    instances have changed since the last VACUUM. A claim that came back short read the earliest
    live timer; every later write sets ``ready_at`` to a time no earlier than its own clock (now, a
    wake-up time, a lease expiry), so the claims after it can start a margin below that. A full
    claim (a backlog, or a busy worker filling its free slots) picked every live row below its
    first pick that it could lock, so the floor moves to a margin below that pick: without that,
    the claims of a backlog kept the floor of its start and each walked the dead entries of every
    instance claimed since, each claim slower than the one before, and from the low end for good
    once the floor expired mid-backlog. A runnable row that another transaction
    held locked during such a claim without changing its ``ready_at`` (an event sent to a queued
    instance, a child waking a parent that is not waiting, a claim that rolled back) can be left
    below the floor until the next read from the low end. Every ``_FLOOR_RECHECK`` seconds, or if
    the clock went back, a claim reads from the low end again.
    """

    at: float
    measured: float
    """The store-clock time of the claim that set it."""
    rechecked: float
    """When a claim last read the index from its low end."""

    def holds(self, now: float) -> bool:
        return self.measured <= now < self.rechecked + _FLOOR_RECHECK


def _not_a_connection_fault(exc: Exception) -> bool:
    """Whether a failed batch may have failed because of one of its items (then each is retried
    alone); connection faults were already retried for the whole batch."""
    return not isinstance(exc.__cause__, psycopg.OperationalError)


def _lease_lost(pk: int, owner: str) -> LeaseLostError:
    return LeaseLostError(f"lease on instance {pk} lost by worker {owner}")
