"""The PostgreSQL store's executions of ``store.closing``: deadlines carried out, a parent's
end applied to its children. Each runs in an exactly-once transaction; rows are locked ``FOR
UPDATE`` as control actions lock them. :class:`PostgresClosing` is ``Store.closing``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..._json import dumps
from ...errors import LeaseLostError
from ...records import InstanceRecord
from .._rows import INTERRUPTED
from ..closing import DEADLINE_BATCH, ERRORS, ClosingStore, Interruption, interruption
from ..types import BatchItem, KeyedConflict, Lease, NewInstance
from .db import Database
from .keyed import KeyedCreates
from .notes import Notes
from .parking import ParkingStatements, freed_params
from .pools import Conn
from .sql import render

_UNFINISHED = "status NOT IN ('complete', 'errored', 'terminated')"
_ERRORS = {kind: dumps(error, what="error") for kind, error in ERRORS.items()}
_INTERRUPTED = dumps(INTERRUPTED, what="error")

_TEMPLATES = {
    "state": """SELECT status, started_at, lease_owner, control FROM {s}.instances
        WHERE pk = %s FOR UPDATE""",
    "end_errored": """UPDATE {s}.instances SET status = 'errored', error = %(error)s,
        ready_at = NULL, held_ready_at = NULL, control = NULL, ended_at = %(now)s,
        updated_at = %(now)s WHERE pk = %(pk)s""",
    "mark": """UPDATE {s}.instances SET status = %(status)s, control = %(control)s,
        ready_at = %(now)s, held_ready_at = NULL, parked_on = NULL, updated_at = %(now)s
        WHERE pk = %(pk)s""",
    "fence": """UPDATE {s}.instances SET lease_token = lease_token + 1, lease_owner = NULL,
        lease_expires_at = NULL WHERE pk = %s""",
    "interrupt_running_steps": """UPDATE {s}.steps SET status = 'errored', error = %(error)s,
        ended_at = %(now)s WHERE instance_pk = %(pk)s AND status = 'running'""",
    "wake_parent_of": """UPDATE {s}.instances p SET event_seq = p.event_seq + 1,
        ready_at = CASE WHEN p.status = 'waiting' THEN %(now)s ELSE p.ready_at END
        FROM {s}.instances c WHERE c.pk = %(pk)s AND c.parent IS NOT NULL
        AND p.workflow = c.parent::json ->> 'workflow' AND p.id = c.parent::json ->> 'id'""",
    "terminate": """UPDATE {s}.instances SET status = 'terminated', ready_at = NULL,
        held_ready_at = NULL, control = NULL, ended_at = %(now)s, updated_at = %(now)s,
        lease_token = lease_token + 1, lease_owner = NULL, lease_expires_at = NULL
        WHERE pk = %(pk)s""",
    "children": f"""SELECT pk, status, on_parent_close FROM {{s}}.instances
        WHERE parent_pk = %s AND parent_pk IS NOT NULL AND {_UNFINISHED} ORDER BY pk
        FOR UPDATE""",
    "due": f"""SELECT pk FROM {{s}}.instances WHERE deadline_at IS NOT NULL AND {_UNFINISHED}
        AND workflow = ANY(%(workflows)s::text[]) AND deadline_at <= %(now)s
        ORDER BY deadline_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED""",
    "ahead": f"""SELECT deadline_at FROM {{s}}.instances WHERE deadline_at IS NOT NULL
        AND {_UNFINISHED} AND workflow = ANY(%(workflows)s::text[])
        ORDER BY deadline_at LIMIT 1""",
    "clear_deadline": "UPDATE {s}.instances SET deadline_at = NULL WHERE pk = %s",
    # As activation writes lock their row: a child ending meanwhile may still wake it.
    "fenced": """SELECT 1 FROM {s}.instances WHERE pk = %s AND lease_token = %s
        AND lease_owner = %s FOR KEY SHARE""",
    "notify": "SELECT pg_notify(%s, %s)",
}


class Closing:
    """Deadlines and parents' ends of one store."""

    def __init__(self, db: Database, schema: str, notes: Notes) -> None:
        self._db = db
        self._q = render(_TEMPLATES, schema)
        self._notes = notes
        self._parking = ParkingStatements.for_schema(schema)

    async def interrupt(self, conn: Conn, pk: int, kind: Interruption, now: float) -> bool:
        """Stop unfinished instance ``pk`` as ``store.closing`` says; whether it changed."""
        q = self._q
        cur = await conn.execute(q["state"], (pk,))
        row = await cur.fetchone()
        if row is None:
            return False
        status, started_at, owner, control = row
        if status in ("complete", "errored", "terminated"):
            return False
        change = interruption(status, started_at is not None, owner is not None, control)
        if change is None:
            return False
        at = {"pk": pk, "now": now}
        if change.get("end"):
            await conn.execute(q["end_errored"], {**at, "error": _ERRORS[kind]})
            await conn.execute(q["wake_parent_of"], at)
            return True
        await conn.execute(q["mark"], {**at, "status": change["status"], "control": kind})
        if change["fence"]:
            await conn.execute(q["fence"], (pk,))
            await conn.execute(q["interrupt_running_steps"], {**at, "error": _INTERRUPTED})
            if status in ("running", "waitingForPause"):
                back = {"pks": [pk], **freed_params(now, self._notes)}
                await conn.execute(self._parking.freed_of, back)
        return True

    async def close_children(self, conn: Conn, parent_pk: int, now: float) -> bool:
        """Apply each unfinished child's ``on_parent_close`` (``ClosingStore.close_children``),
        down the children of those it terminates; whether an instance became runnable."""
        q = self._q
        woke = False
        pending = [parent_pk]
        while pending:
            cur = await conn.execute(q["children"], (pending.pop(),))
            for pk, status, policy in await cur.fetchall():
                at = {"pk": pk, "now": now}
                if policy == "request_cancel":
                    woke = await self.interrupt(conn, pk, "cancel", now) or woke
                elif policy == "terminate":
                    await conn.execute(q["terminate"], at)
                    await conn.execute(q["interrupt_running_steps"], {**at, "error": _INTERRUPTED})
                    if status in ("running", "waitingForPause"):
                        back = {"pks": [pk], **freed_params(now, self._notes)}
                        await conn.execute(self._parking.freed_of, back)
                        woke = True
                    pending.append(pk)
        if woke:
            await conn.execute(q["notify"], (self._notes.channel, self._notes.note()))
        return woke

    async def close_children_fenced(self, lease: Lease, now: float) -> bool:
        async def body(conn: Conn) -> bool:
            cur = await conn.execute(self._q["fenced"], (lease.pk, lease.token, lease.owner))
            if await cur.fetchone() is None:
                raise LeaseLostError(f"lease on instance {lease.pk} lost by worker {lease.owner}")
            return await self.close_children(conn, lease.pk, now)

        return await self._db.transaction(f"closing the children of {lease.pk}", body)

    async def expire_deadlines(
        self, workflows: Sequence[str], now: float, limit: int
    ) -> tuple[float | None, bool]:
        """``ClosingStore.expire_deadlines``: the next deadline, and whether an instance changed."""
        q = self._q
        params: dict[str, Any] = {"workflows": list(workflows), "now": now, "limit": limit}
        # A read first: a worker asks every second or so, and most find nothing due.
        first = await self._db.read("reading the next deadline", q["ahead"], params)
        if not first or float(first[0][0]) > now:
            return (float(first[0][0]) if first else None), False

        async def body(conn: Conn) -> tuple[float | None, bool]:
            cur = await conn.execute(q["due"], params)
            due = [pk for (pk,) in await cur.fetchall()]
            woke = False
            for pk in due:
                await conn.execute(q["clear_deadline"], (pk,))
                woke = await self.interrupt(conn, pk, "timeout", now) or woke
            if woke:
                await conn.execute(q["notify"], (self._notes.channel, self._notes.note()))
            if len(due) >= limit:
                return now, woke
            cur = await conn.execute(q["ahead"], params)
            ahead = await cur.fetchone()
            return (None if ahead is None else float(ahead[0])), woke

        return await self._db.transaction("carrying out deadlines", body)


class PostgresClosing(ClosingStore):
    """``Store.closing`` on PostgreSQL: :class:`Closing` and the keyed creates, then a wake-up
    of this process's worker when an instance became runnable."""

    def __init__(
        self,
        closing: Closing,
        keyed: KeyedCreates,
        now: Callable[[], float],
        ready: Callable[[], None],
    ) -> None:
        self._closing = closing
        self._keyed = keyed
        self._now = now
        self._ready = ready

    async def create_keyed(
        self,
        workflow: str,
        item: NewInstance,
        *,
        trigger: str,
        on_conflict: KeyedConflict,
        ready_at: float | None = None,
    ) -> InstanceRecord:
        record = await self._keyed.create_keyed(
            workflow, item, trigger, on_conflict, ready_at, self._now()
        )
        self._ready()
        return record

    async def create_keyed_batch(
        self, workflow: str, items: Sequence[BatchItem], *, trigger: str
    ) -> list[InstanceRecord | None]:
        records = await self._keyed.create_keyed_batch(workflow, items, trigger, self._now())
        if any(record is not None for record in records):
            self._ready()
        return records

    async def expire_deadlines(self, workflows: Sequence[str], now: float) -> float | None:
        if not workflows:
            return None
        ahead, woke = await self._closing.expire_deadlines(workflows, now, DEADLINE_BATCH)
        if woke:
            self._ready()
        return ahead

    async def close_children(self, lease: Lease, now: float) -> None:
        if await self._closing.close_children_fenced(lease, now):
            self._ready()
