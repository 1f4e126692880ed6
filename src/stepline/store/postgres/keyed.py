"""The PostgreSQL store's keyed creates (``ClosingStore.create_keyed`` and
``create_keyed_batch``): debounce and replace_queued, in one exactly-once transaction under a
lock of the workflow's key, so that concurrent creates for a key see each other whole."""

from __future__ import annotations

from collections.abc import Sequence

from ...records import InstanceRecord
from .._rows import instance_from_row
from ..base import BatchItem, KeyedConflict, NewInstance
from .db import Database
from .instances import InstanceWrites
from .pools import Conn
from .sql import render

_UNSTARTED = (
    "workflow = %(workflow)s AND key = %(key)s AND key IS NOT NULL AND status = 'queued'"
    " AND started_at IS NULL"
)

_TEMPLATES = {
    "key_lock": "SELECT pg_advisory_xact_lock(hashtextextended(%s, 55))",
    "exists": "SELECT 1 FROM {s}.instances WHERE workflow = %(workflow)s AND id = %(id)s",
    # Locked in pk order first, as every statement that locks several instance rows does.
    "replace": f"""WITH locked AS (
            SELECT pk FROM {{s}}.instances WHERE {_UNSTARTED} ORDER BY pk FOR UPDATE
        )
        UPDATE {{s}}.instances i SET status = 'terminated', ready_at = NULL,
            held_ready_at = NULL, ended_at = %(now)s, updated_at = %(now)s
        FROM locked WHERE i.pk = locked.pk AND i.status = 'queued' AND i.started_at IS NULL""",
    "debounced": f"""SELECT pk FROM {{s}}.instances WHERE {_UNSTARTED}
        AND conflict = 'debounce' ORDER BY pk LIMIT 1 FOR UPDATE""",
    "join": """UPDATE {s}.instances SET params = %(params)s, ready_at = %(ready)s,
        updated_at = %(now)s WHERE pk = %(pk)s RETURNING {icols}""",
    "debouncing": """UPDATE {s}.instances SET conflict = 'debounce', ready_at = %(ready)s
        WHERE pk = %(pk)s RETURNING {icols}""",
}


class KeyedCreates:
    """One store's keyed creates."""

    def __init__(self, db: Database, schema: str, instances: InstanceWrites) -> None:
        self._db = db
        self._q = render(_TEMPLATES, schema)
        self._instances = instances

    async def create_keyed(
        self,
        workflow: str,
        item: NewInstance,
        trigger: str,
        on_conflict: KeyedConflict,
        ready_at: float | None,
        now: float,
    ) -> InstanceRecord:
        """``ClosingStore.create_keyed``, under a lock of the workflow's key for the
        transaction."""

        async def body(conn: Conn) -> InstanceRecord:
            await conn.execute(self._q["key_lock"], (f"{workflow}/{item.key}",))
            return await self._settle(conn, workflow, item, trigger, on_conflict, ready_at, now)

        return await self._db.transaction(f"creating an instance of {workflow!r}", body)

    async def create_keyed_batch(
        self, workflow: str, items: Sequence[BatchItem], trigger: str, now: float
    ) -> list[InstanceRecord | None]:
        """``ClosingStore.create_keyed_batch``, under a lock of each of its keys, taken up front
        in one order (so that two batches never wait on each other's)."""
        keys = sorted({f"{workflow}/{b.item.key}" for b in items if b.on_conflict is not None})

        async def body(conn: Conn) -> list[InstanceRecord | None]:
            for key in keys:
                await conn.execute(self._q["key_lock"], (key,))
            out: list[InstanceRecord | None] = []
            seen: set[str] = set()
            for batched in items:
                item = batched.item
                cur = await conn.execute(self._q["exists"], {"workflow": workflow, "id": item.id})
                if item.id in seen or await cur.fetchone() is not None:
                    out.append(None)  # skipped before its key is settled
                    continue
                seen.add(item.id)
                if batched.on_conflict is None:
                    out.append(await self._instances.create_one(conn, workflow, item, trigger, now))
                    continue
                out.append(
                    await self._settle(
                        conn, workflow, item, trigger, batched.on_conflict, batched.ready_at, now
                    )
                )
            return out

        return await self._db.transaction(f"creating instances of {workflow!r}", body)

    async def _settle(
        self,
        conn: Conn,
        workflow: str,
        item: NewInstance,
        trigger: str,
        on_conflict: KeyedConflict,
        ready_at: float | None,
        now: float,
    ) -> InstanceRecord:
        """One keyed create in the caller's transaction, which holds the key's lock."""
        q = self._q
        keyed = {"workflow": workflow, "key": item.key, "now": now}
        ready = now if ready_at is None else ready_at
        if on_conflict == "replace_queued":
            await conn.execute(q["replace"], keyed)
        else:
            cur = await conn.execute(q["debounced"], keyed)
            joined = await cur.fetchone()
            if joined is not None:
                at = {"pk": joined[0], "params": item.params, "ready": ready, "now": now}
                cur = await conn.execute(q["join"], at)
                return instance_from_row(await cur.fetchone() or ())
        created = await self._instances.create_one(conn, workflow, item, trigger, now)
        if on_conflict == "debounce":
            cur = await conn.execute(q["debouncing"], {"pk": created.pk, "ready": ready})
            return instance_from_row(await cur.fetchone() or ())
        return created
