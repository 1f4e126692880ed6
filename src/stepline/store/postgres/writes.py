"""The PostgreSQL store's activation writes: step records and finishes, each a batch of rows run
as one statement (the store's group commit, :class:`~stepline.store._batcher.Batcher`, forms the
batches), lease renewals and releases. Every write is fenced on its lease: a row whose lease was
lost gets :class:`~stepline.errors.LeaseLostError` (or is left out), the others are written."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, TypedDict

import psycopg

from ..._json import dumps
from ...errors import LeaseLostError
from ..base import Finish, Lease, StepWrite
from ..types import patch_id
from .db import Database
from .notes import Notes
from .parking import ParkingStatements, freed_params
from .pools import Conn
from .sql import Statements, indexed_rows, json_rows


class StepRow(TypedDict):
    """One step write, as the parameters of ``record_step(s)`` (and a row of ``finish``)."""

    pk: int
    token: int
    owner: str
    name: str
    count: int
    seq: int
    kind: str
    status: str
    output: str | None
    error: str | None
    attempts: str | None
    wake_at: float | None
    started_at: float | None
    ended_at: float | None
    info: str | None
    event: int | None
    """The event the step consumes, if it is a wait for one."""
    upd: str | None
    """The update whose handler this record ends (a finish's step only; see ``finish``)."""
    new: bool
    """The writer's hint that the step has no record yet (a plain insert will do)."""


class FinishRow(TypedDict):
    """One finish, as a row of ``finish``."""

    pk: int
    token: int
    owner: str
    status: str
    output: str | None
    error: str | None
    rollback: str | None
    wake_at: float | None
    event_seq: int
    fnow: float
    parked_on: str | None
    patches: str | None
    """The patch ids its steps' markers record, a JSON array (None: no marker)."""
    steps: list[StepRow]


class Finished(NamedTuple):
    """A finished activation."""

    status: str
    """The instance's new status."""
    workflow: str
    instance_id: str
    woke: bool
    """Whether it made another instance runnable: a parent waiting for it, or one parked on a
    named limit whose slot it freed."""
    ready_at: float | None
    """When the instance becomes runnable again (None: not by time)."""


def step_row(lease: Lease, write: StepWrite) -> StepRow:
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
        "upd": write.update,
        "new": write.new,
    }


def finish_row(lease: Lease, finish: Finish, now: float) -> FinishRow:
    waiting = finish.status == "waiting"  # then what the instance will return is still unknown
    return {
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
        "parked_on": finish.parked_on if waiting else None,
        "patches": _marked(finish.steps),
        "steps": [step_row(lease, write) for write in finish.steps],
    }


def _marked(steps: Sequence[StepWrite]) -> str | None:
    """The patch ids of the markers among ``steps``, as JSON text; None if none."""
    ids = sorted({patch_id(write.name) for write in steps if write.kind == "patch"})
    return dumps(ids, what="patches") if ids else None


class ActivationWrites:
    """The statements of step records and finishes (each run for a batch of rows), renewals and
    releases."""

    def __init__(
        self, db: Database, sql: Statements, parking: ParkingStatements, notes: Notes
    ) -> None:
        self._db = db
        self._sql = sql
        self._parking = parking
        self._notes = notes
        self._freeing_finishes = False
        """Whether the last batch of finishes had instances with a key or of a workflow that
        lists named limits: the next sends its ``freed_released`` with it, not after its reply
        (another round trip)."""

    async def record_steps(self, rows: list[StepRow]) -> list[str | BaseException]:
        """Record each step; the result is its instance's status, or LeaseLostError."""
        q = self._sql
        consuming = any(row["event"] is not None for row in rows)
        patching = any(row["kind"] == "patch" for row in rows)  # rare: its own statements
        query: str
        params: StepRow | tuple[str]
        plain_insert = False  # a step's first record, without the upsert (`record_step_new`)
        if len(rows) == 1:  # the common case: plain parameters are cheaper for the server
            params = rows[0]
            plain_insert = params["new"] and not consuming and not patching
            if patching:
                query = q.record_step_patch
            elif consuming:
                query = q.record_step_consuming
            else:
                query = q.record_step_new if plain_insert else q.record_step
        elif patching:
            query = q.record_steps_patching
            params = (indexed_rows(rows),)
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

        held = dict(await self._db.retrying("recording steps", attempt))  # idx -> status
        return [held.get(n) or _lease_lost(row["pk"], row["owner"]) for n, row in enumerate(rows)]

    async def renew(self, leases: Sequence[Lease], expires: float) -> dict[int, str]:
        """Move the leases still held to expire at ``expires``: their instances' statuses."""
        if not leases:
            return {}
        params = {
            "leases": json_rows(
                {"pk": lease.pk, "token": lease.token, "owner": lease.owner} for lease in leases
            ),
            "expires": expires,
        }

        async def attempt(conn: Conn) -> list[Any]:
            cur = await conn.execute(self._sql.renew, params)
            return await cur.fetchall()

        rows = await self._db.retrying("renewing leases", attempt, priority=True)
        return {pk: status for pk, status in rows}

    async def release(self, lease: Lease, now: float) -> None:
        """Give the instance back unfinished, runnable now (if still leased)."""
        params = {
            "pk": lease.pk,
            "token": lease.token,
            "owner": lease.owner,
            "now": now,
            "channel": self._notes.channel,
            "note": self._notes.note(),
        }
        # Runnable again from now, behind the next in line of its key, who came earlier; its
        # slots are free (a statement after the release: see ``parking``).
        fence = json_rows([{"pk": lease.pk, "token": lease.token}])
        back = {"fences": fence, **freed_params(now, self._notes)}

        async def attempt(conn: Conn) -> None:
            async with conn.pipeline():
                await conn.execute("BEGIN")
                released = conn.cursor()
                await released.execute(self._sql.release, params)
                await conn.execute(self._parking.freed_released, back)
                await conn.execute("COMMIT")

        await self._db.retrying(f"releasing instance {lease.pk}", attempt)

    async def finish(self, rows: list[FinishRow]) -> list[Finished | BaseException]:
        """Finish each activation (its last step records first); a child that ends wakes its
        parent, and what stops running wakes instances parked on the named limits it frees."""
        params = {
            "rows": json_rows(
                {key: value for key, value in row.items() if key != "steps"} | {"idx": n}
                for n, row in enumerate(rows)
            ),
            "steps": json_rows(
                {**step, "idx": n} for n, row in enumerate(rows) for step in row["steps"]
            ),
            "channel": self._notes.channel,
            "source": self._notes.source,
        }
        fences = (
            json_rows({"idx": n, "pk": r["pk"], "token": r["token"]} for n, r in enumerate(rows)),
        )
        # What stopped running frees its slots: after the finish has committed (see
        # ``parking``), for a batch with instances that have a key or whose workflows list
        # named limits.
        now = max(row["fnow"] for row in rows)
        back = {"fences": fences[0], **freed_params(now, self._notes)}
        faulted = False

        async def attempt(conn: Conn) -> dict[int, Finished]:
            nonlocal faulted
            try:
                cur = conn.kept_cursor()
                freeing: Any = None
                sent_back = self._freeing_finishes and not faulted
                if sent_back:  # two transactions, one round trip
                    async with conn.pipeline():
                        await cur.execute(self._sql.finish, params)
                        freeing = await conn.execute(self._parking.freed_released, back)
                else:
                    await cur.execute(self._sql.finish, params)
                found = await cur.fetchall()
                self._freeing_finishes = any(row[5] for row in found)
                if not sent_back and (faulted or self._freeing_finishes):
                    freeing = await conn.execute(self._parking.freed_released, back)
                woke = False
                if freeing is not None:
                    _back, woken, _noted = await freeing.fetchone() or (0, 0, 0)
                    woke = bool(woken)
                done = _finished_by_idx(found, woke)
                if faulted and len(done) < len(rows):
                    # An attempt whose reply was lost may have committed: its instances are
                    # released under the same token.
                    cur = await conn.execute(self._sql.finished_by, fences)
                    for idx, finished in _finished_by_idx(await cur.fetchall()).items():
                        done.setdefault(idx, finished)
                return done
            except psycopg.OperationalError:
                faulted = True
                raise

        done = await self._db.retrying("finishing activations", attempt)
        return [done.get(n) or _lease_lost(row["pk"], row["owner"]) for n, row in enumerate(rows)]


def _finished_by_idx(rows: Sequence[Sequence[Any]], woke: bool = False) -> dict[int, Finished]:
    """Rows of ``finish`` or ``finished_by`` (idx, status, workflow, id, woke a parent, ...,
    ready_at ninth); ``woke``: the batch's ``freed_released`` made a step parked on a limit
    runnable."""
    return {row[0]: Finished(row[1], row[2], row[3], bool(row[4]) or woke, row[8]) for row in rows}


def not_a_connection_fault(exc: Exception) -> bool:
    """Whether a failed batch may have failed because of one of its items (then each is retried
    alone); connection faults were already retried for the whole batch."""
    return not isinstance(exc.__cause__, psycopg.OperationalError)


def _lease_lost(pk: int, owner: str) -> LeaseLostError:
    return LeaseLostError(f"lease on instance {pk} lost by worker {owner}")


def _json_or_none(value: Any, what: str) -> str | None:
    return None if value is None else dumps(value, what=what)
