"""The PostgreSQL store's keyed creates (``ClosingStore.create_keyed``): debounce and
replace_queued, in one exactly-once transaction under a lock of the workflow's key, so that
concurrent creates for a key see each other whole."""

from __future__ import annotations

from ...records import InstanceRecord
from .._rows import instance_from_row
from ..base import KeyedConflict, NewInstance
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
        q = self._q
        keyed = {"workflow": workflow, "key": item.key, "now": now}
        ready = now if ready_at is None else ready_at

        async def body(conn: Conn) -> InstanceRecord:
            await conn.execute(q["key_lock"], (f"{workflow}/{item.key}",))
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

        return await self._db.transaction(f"creating an instance of {workflow!r}", body)
