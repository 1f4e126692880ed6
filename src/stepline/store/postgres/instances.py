"""The PostgreSQL store's client writes to instances: creates, control actions (pause, resume,
terminate, restart) and events (deletes are ``retention``'s). Each is one exactly-once
transaction; those on existing instances lock the rows they change ``FOR UPDATE`` (see the lock
protocol in ``sql``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from ..._json import dumps
from ...errors import (
    DuplicateInstanceError,
    IllegalStateError,
    InstanceAlreadyExistsError,
    InstanceNotFoundError,
)
from ...records import FINISHED_STATUSES, InstanceRecord
from .._rows import INTERRUPTED, control_assignments, control_transition, instance_from_row
from ..base import ControlAction, NewInstance
from .db import Database
from .notes import Notes
from .parking import ParkingStatements, freed_params
from .pools import Conn
from .sql import Statements, control_update, json_rows

_INTERRUPTED = dumps(INTERRUPTED, what="error")

Leased = tuple[str, float, int] | None
"""For a create that claims: the owner, the lease in seconds, and how many to lease."""


def _items_json(items: Iterable[tuple[int, NewInstance]]) -> str:
    """The rows ``create_instances`` inserts, each with its place (``ord``)."""
    return json_rows(
        {
            "ord": n,
            "id": i.id,
            "params": i.params,
            "parent": i.parent,
            "schedule": i.schedule,
            "key": i.key,
            "priority": i.priority,
            "dedup_key": i.dedup_key,
            "traceparent": i.traceparent,
            "version": i.version,
            "retention": i.retention,
            "deadline_at": i.deadline_at,
            "parent_pk": i.parent_pk,
            "on_parent_close": i.on_parent_close,
            "tags": i.tags,
        }
        for n, i in items
    )


RUNNING = ("running", "waitingForPause")
"""The statuses of an instance that holds a slot of its key while its lease lives."""


class InstanceWrites:
    """One store's creates, control actions and events."""

    def __init__(self, db: Database, sql: Statements, schema: str, notes: Notes) -> None:
        self._db = db
        self._sql = sql
        self._schema = schema
        self._notes = notes
        self._parking = ParkingStatements.for_schema(schema)
        self.closing: Callable[[Conn, int, float], Awaitable[bool]] | None = None
        """Applies a terminated instance's children's ``on_parent_close`` (``closing``)."""

    async def create(
        self,
        workflow: str,
        items: Sequence[NewInstance],
        trigger: str,
        skip_existing: bool,
        lease: Leased,
        now: float,
    ) -> list[InstanceRecord]:
        """Create the instances, in the order of ``items`` (the first item of an id wins);
        ``lease``: (owner, seconds, limit), the first ``limit`` leased to ``owner`` (see
        :meth:`~stepline.store.base.Store.create_and_claim`)."""
        unique: dict[str, NewInstance] = {}
        for item in items:
            unique.setdefault(item.id, item)
        if not unique:
            return []
        params = self._create_params(workflow, enumerate(unique.values()), trigger, lease, now)

        async def body(conn: Conn) -> list[InstanceRecord]:
            # One statement inserts and (if it inserted anything) notifies; nothing commits
            # unless every item was new or ``skip_existing`` allows some to be skipped.
            cur = await conn.execute(self._sql.create_instances, params)
            created = [instance_from_row(row) for row in await cur.fetchall()]
            if not skip_existing and len(created) < len(unique):
                created += await self._refuse_or_retry(conn, params, unique, created)
            order = {instance_id: n for n, instance_id in enumerate(unique)}
            created.sort(key=lambda r: order[r.id])
            return created

        return await self._db.transaction(f"creating instances of {workflow!r}", body)

    async def _refuse_or_retry(
        self,
        conn: Conn,
        params: dict[str, Any],
        unique: dict[str, NewInstance],
        created: list[InstanceRecord],
    ) -> list[InstanceRecord]:
        """Why items of a create were skipped: an existing id (``InstanceAlreadyExistsError``)
        or a dedup key an unfinished instance holds (``DuplicateInstanceError``); or, if that
        instance finished meanwhile, those items inserted again (what this returns).

        The insert waited for the holder's transaction and skipped the item once it committed,
        so a statement after it (a newer snapshot, under READ COMMITTED) sees the holder.
        """
        workflow = params["workflow"]
        done = {record.id for record in created}
        added: list[InstanceRecord] = []
        while True:
            places = [(n, item) for n, item in enumerate(unique.values()) if item.id not in done]
            skipped = [item for _n, item in places]
            if not skipped:
                return added
            cur = await conn.execute(
                self._sql.existing_ids, (workflow, [item.id for item in skipped])
            )
            taken_ids = {row[0] for row in await cur.fetchall()}
            keys = [item.dedup_key for item in skipped if item.dedup_key is not None]
            cur = await conn.execute(self._sql.dedup_holders, (workflow, keys))
            holders = {key: holder for key, holder in await cur.fetchall()}
            for item in skipped:
                if item.id in taken_ids:
                    raise InstanceAlreadyExistsError(workflow, item.id)
                if item.dedup_key is not None and item.dedup_key in holders:
                    raise DuplicateInstanceError(workflow, item.dedup_key, holders[item.dedup_key])
            # Each holder finished (or was deleted) since the insert skipped the items: again.
            again = {**params, "items": _items_json(places)}
            cur = await conn.execute(self._sql.create_instances, again)
            rows = [instance_from_row(row) for row in await cur.fetchall()]
            added += rows
            done |= {record.id for record in rows}

    async def create_one(
        self, conn: Conn, workflow: str, item: NewInstance, trigger: str, now: float
    ) -> InstanceRecord:
        """Create one instance in the caller's transaction, refusing an existing id or a held
        dedup key as :meth:`create` does."""
        params = self._create_params(workflow, [(0, item)], trigger, None, now)
        cur = await conn.execute(self._sql.create_instances, params)
        created = [instance_from_row(row) for row in await cur.fetchall()]
        if not created:
            created = await self._refuse_or_retry(conn, params, {item.id: item}, [])
        return created[0]

    async def insert(
        self, conn: Conn, workflow: str, item: NewInstance, trigger: str, now: float
    ) -> None:
        """Create one instance (an existing id is skipped) in the caller's transaction."""
        params = self._create_params(workflow, [(0, item)], trigger, None, now)
        await conn.execute(self._sql.create_instances, params)

    def _create_params(
        self,
        workflow: str,
        items: Iterable[tuple[int, NewInstance]],
        trigger: str,
        lease: Leased,
        now: float,
    ) -> dict[str, Any]:
        """``items``: each with its place among the distinct ids (the first ``limit`` places
        are leased)."""
        owner, seconds, limit = lease or (None, 0.0, 0)
        return {
            "workflow": workflow,
            "trigger": trigger,
            "now": now,
            "items": _items_json(items),
            "channel": self._notes.channel,
            "note": self._notes.note(),
            "leased": limit,
            "owner": owner,
            "expires": now + seconds if owner is not None else None,
        }

    async def control(
        self,
        workflow: str,
        instance_id: str,
        action: ControlAction,
        rollback: bool,
        from_step: tuple[str, int] | None,
        now: float,
        version: str | None = None,
    ) -> tuple[InstanceRecord, bool]:
        """:meth:`~stepline.store.base.Store.control`: the instance afterwards, and whether it
        made another runnable: its parent (it ended a child), or the next in line of its key."""
        woke = False

        async def body(conn: Conn) -> InstanceRecord:
            nonlocal woke
            pk, woke = await self.control_in(
                conn, workflow, instance_id, action, rollback, from_step, now, version
            )
            note = self._notes.note(workflow, instance_id)
            await conn.execute(self._sql.notify, (self._notes.channel, note))
            cur = await conn.execute(self._sql.get_instance_by_pk, (pk,))
            row = await cur.fetchone()
            if row is None:  # pragma: no cover - the row is locked by this transaction
                raise InstanceNotFoundError(workflow, instance_id)
            return instance_from_row(row)

        record = await self._db.transaction(f"{action} of instance {instance_id!r}", body)
        return record, woke

    async def control_in(
        self,
        conn: Conn,
        workflow: str,
        instance_id: str,
        action: ControlAction,
        rollback: bool,
        from_step: tuple[str, int] | None,
        now: float,
        version: str | None = None,
    ) -> tuple[int, bool]:
        """:meth:`control` in the caller's transaction, without its notification: the
        instance's pk, and whether it made another runnable. Every refusal
        (``IllegalStateError``, ``DuplicateInstanceError``, ``ValueError``) comes before it
        writes anything."""
        q = self._sql
        woke_parent = freed = False
        pk, status, owner = await self._lock(conn, workflow, instance_id)
        if action == "restart":
            cur = await conn.execute(q.dedup_holder_of, (pk,))
            for dedup_key, holder in await cur.fetchall():
                raise DuplicateInstanceError(workflow, dedup_key, holder)
            await self._restart(conn, pk, from_step, now, version)
        else:
            change = control_transition(
                workflow, instance_id, status, owner is not None, action, rollback
            )
            sets, params = control_assignments(change, now, "%s")
            await conn.execute(control_update(self._schema, sets), (*params, pk))
            if change.get("fence"):  # the fenced-out activation never records its steps
                await conn.execute(
                    q.interrupt_running_steps, {"pk": pk, "now": now, "error": _INTERRUPTED}
                )
                if status in RUNNING:  # it ran: its slots are free
                    back = {"pks": [pk], **freed_params(now, self._notes)}
                    cur = await conn.execute(self._parking.freed_of, back)
                    freed = any((await cur.fetchone() or (0, 0, 0))[:2])
            if change.get("end"):  # a child ended: wake a parent waiting for it
                cur = await conn.execute(q.wake_parent_of, {"pk": pk, "now": now})
                woke_parent = bool(await cur.fetchall())
                if self.closing is not None:  # and its own children's policy applies
                    freed = await self.closing(conn, pk, now) or freed
        return pk, woke_parent or freed

    async def _lock(
        self, conn: Conn, workflow: str, instance_id: str
    ) -> tuple[int, str, str | None]:
        """Lock the instance's row: its pk, status and lease owner."""
        cur = await conn.execute(self._sql.lock_instance, (workflow, instance_id))
        found = await cur.fetchone()
        if found is None:
            raise InstanceNotFoundError(workflow, instance_id)
        pk, status, owner = found
        return pk, status, owner

    async def _restart(
        self,
        conn: Conn,
        pk: int,
        from_step: tuple[str, int] | None,
        now: float,
        version: str | None,
    ) -> None:
        q = self._sql
        if from_step is None:
            await conn.execute(q.delete_steps, (pk,))
            await conn.execute(q.unconsume_all, (pk,))
        else:
            name, count = from_step
            cur = await conn.execute(q.step_seq, (pk, name, count))
            row = await cur.fetchone()
            if row is None:
                raise ValueError(
                    f"instance has no recorded step {name!r} (count {count}) to restart from"
                )
            cur = await conn.execute(q.delete_steps_from, (pk, row[0]))
            labels = [f"{step}-{n}" for step, n in await cur.fetchall()]
            await conn.execute(q.unconsume, (pk, labels))
        await conn.execute(q.restart, {"pk": pk, "now": now, "version": version})

    async def send_event(
        self, workflow: str, instance_id: str, event_type: str, payload: str | None, now: float
    ) -> None:
        """:meth:`~stepline.store.base.Store.send_event`."""

        async def body(conn: Conn) -> None:
            pk, status, _owner = await self._lock(conn, workflow, instance_id)
            if status in FINISHED_STATUSES:
                raise IllegalStateError(workflow, instance_id, status, "send an event to")
            params = {
                "pk": pk,
                "type": event_type,
                "payload": payload,
                "now": now,
                "channel": self._notes.channel,
                "note": self._notes.note(workflow, instance_id),
            }
            await conn.execute(self._sql.send_event, params)

        await self._db.transaction(f"sending an event to instance {instance_id!r}", body)
