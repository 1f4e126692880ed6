"""The PostgreSQL store's slots of named limits that steps take and give back
(``Store.acquire_limit``, ``Store.release_limit``).

An acquisition takes the advisory lock that claims under the limit take (``claim_sql``'s
``lock_limits``: the same key), in a statement before the one that counts: under READ COMMITTED
the counting statement then sees every claim and acquisition of the limit that held the lock
before it, so none can together exceed the limit. Whether the step may take a slot is the rule
of ``flow.slots``, applied here to the use read; the slot is taken in the same transaction,
under the lock. A release takes no lock: it only frees room.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ...errors import LeaseLostError, UnknownLimitError
from ...flow.slots import SlotUse, slot_wait
from ...limits import Limit, Rate
from ..base import Lease
from .db import Database
from .notes import Notes
from .pools import Conn
from .sql import render

_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%(lock_prefix)s || 'l:' || %(limit)s, 0))"

# Dead slots (their instance no longer holds the lease they were taken under: it ended, was
# released or fenced out) and starts older than the rate's period go. A slot whose lease merely
# expired is not counted, but kept: its holder may still renew it.
_TIDY = """
    WITH dead AS (
        DELETE FROM {s}.limit_slots s WHERE s.limit_name = %(limit)s AND NOT EXISTS (
            SELECT 1 FROM {s}.instances i WHERE i.pk = s.instance_pk
                AND i.lease_token = s.lease_token AND i.lease_owner IS NOT NULL)
    )
    DELETE FROM {s}.limit_starts WHERE limit_name = %(limit)s AND at <= %(now)s
        - COALESCE((SELECT rate_period FROM {s}.limits WHERE name = %(limit)s), 0)
"""

# What a step asking for a slot faces: whether its lease still holds (``lost``), whether it
# holds the slot already (``held``, a retried call), whether the limit exists (``unknown``);
# else the limit, and its use (``flow.slots.SlotUse``): what runs against it (the running
# instances of the workflows listing it, plus the live slots, less one per listing instance
# holding some), whether the instance asking already counts (it runs as a listing instance and
# holds no slot), and the starts within the rate's period (at most its count) with the
# ``count``-th latest.
_USE = """
    WITH fence AS (
        SELECT workflow, lease_expires_at > %(now)s AS live FROM {s}.instances
        WHERE pk = %(pk)s AND lease_token = %(token)s AND lease_owner = %(owner)s
    ), lim AS (
        SELECT concurrency AS conc, rate_count AS rate_n, rate_period AS rate_s
        FROM {s}.limits WHERE name = %(limit)s
    ), held AS (
        SELECT 1 FROM {s}.limit_slots WHERE limit_name = %(limit)s AND instance_pk = %(pk)s
            AND step = %(step)s AND lease_token = %(token)s
    ), users AS (
        SELECT w.name AS wf FROM {s}.workflows w
        WHERE w.limits IS NOT NULL AND EXISTS (
            SELECT 1 FROM json_array_elements_text(w.limits::json -> 'limits') AS n(name)
            WHERE n.name = %(limit)s)
    ), live AS (
        SELECT s.instance_pk, i.workflow IN (SELECT wf FROM users) AS listed
        FROM {s}.limit_slots s JOIN {s}.instances i ON i.pk = s.instance_pk
            AND i.lease_token = s.lease_token AND i.status IN ('running', 'waitingForPause')
            AND i.lease_expires_at > %(now)s
        WHERE s.limit_name = %(limit)s
    ), use AS (
        SELECT (SELECT count(*) FROM {s}.instances WHERE workflow IN (SELECT wf FROM users)
                    AND status IN ('running', 'waitingForPause') AND lease_expires_at > %(now)s)
                + (SELECT count(*) FROM live)
                - (SELECT count(DISTINCT instance_pk) FROM live WHERE listed) AS running,
            COALESCE((SELECT live FROM fence) AND (SELECT workflow FROM fence) IN (
                    SELECT wf FROM users)
                AND NOT EXISTS (SELECT 1 FROM live WHERE instance_pk = %(pk)s), false) AS counted,
            COALESCE(st.n, 0) AS started, st.edge
        FROM lim LEFT JOIN LATERAL (
            SELECT count(*) AS n, (array_agg(t ORDER BY t DESC))[lim.rate_n] AS edge
            FROM ((SELECT started_at AS t FROM {s}.instances
                    WHERE workflow IN (SELECT wf FROM users)
                        AND started_at > %(now)s - lim.rate_s
                    ORDER BY started_at DESC LIMIT lim.rate_n)
                UNION ALL (SELECT at FROM {s}.limit_starts
                    WHERE limit_name = %(limit)s AND at > %(now)s - lim.rate_s
                    ORDER BY at DESC LIMIT lim.rate_n)) AS recent
        ) AS st ON lim.rate_n IS NOT NULL
    )
    SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM fence) THEN 'lost'
            WHEN EXISTS (SELECT 1 FROM held) THEN 'held'
            WHEN NOT EXISTS (SELECT 1 FROM lim) THEN 'unknown'
            ELSE 'use' END,
        lim.conc, lim.rate_n, lim.rate_s, u.running, u.counted, u.started, u.edge
    FROM (SELECT 1) AS one LEFT JOIN lim ON true LEFT JOIN use u ON true
"""

# The slot taken (and, under a rate, the start logged).
_TAKE = """
    WITH taken AS (
        INSERT INTO {s}.limit_slots (limit_name, instance_pk, step, lease_token, acquired_at)
        VALUES (%(limit)s, %(pk)s, %(step)s, %(token)s, %(now)s)
        ON CONFLICT (limit_name, instance_pk, step) DO UPDATE
            SET lease_token = excluded.lease_token, acquired_at = excluded.acquired_at
    )
    INSERT INTO {s}.limit_starts (limit_name, at)
    SELECT %(limit)s, %(now)s WHERE %(rated)s
"""

# The slot given back and, if there was one, the instance parked on the limit that would wake
# first made ready now (and other processes' workers told).
_RELEASE = """
    WITH freed AS (
        DELETE FROM {s}.limit_slots WHERE limit_name = %(limit)s AND instance_pk = %(pk)s
            AND step = %(step)s AND lease_token = %(token)s
        RETURNING 1
    ), parked AS (
        SELECT pk FROM {s}.instances
        WHERE parked_on = %(limit)s AND ready_at > %(now)s AND status = 'waiting'
            AND EXISTS (SELECT 1 FROM freed)
        ORDER BY ready_at LIMIT 1
        FOR UPDATE SKIP LOCKED
    ), woke AS (
        UPDATE {s}.instances i SET ready_at = %(now)s FROM parked
        WHERE i.pk = parked.pk AND i.status = 'waiting'
        RETURNING i.pk
    ), notes AS (
        SELECT pg_notify(%(channel)s, %(note)s) FROM woke
    )
    SELECT (SELECT count(*) FROM freed), (SELECT count(*) FROM notes)
"""


@dataclass(frozen=True)
class SlotStatements:
    """The statements of slots, rendered for one schema."""

    lock: str
    tidy: str
    use: str
    take: str
    release: str

    @classmethod
    def for_schema(cls, schema: str) -> SlotStatements:
        templates = {"lock": _LOCK, "tidy": _TIDY, "use": _USE, "take": _TAKE, "release": _RELEASE}
        if {f.name for f in fields(cls)} != set(templates):
            raise RuntimeError("slot statement templates out of sync")
        return cls(**render(templates, schema))


class Slots:
    """One store's acquisitions and releases of named limits' slots."""

    def __init__(self, db: Database, schema: str, notes: Notes) -> None:
        self._db = db
        self._sql = SlotStatements.for_schema(schema)
        self._lock_prefix = f"stepline:{schema}:"
        """As the claim's (``claim.Claimer``): one lock per named limit."""
        self._notes = notes

    async def acquire(self, lease: Lease, limit: str, step: str, now: float) -> float | None:
        """:meth:`~stepline.store.base.Store.acquire_limit`: under the limit's lock, its use
        (one round trip), the rule of ``flow.slots``, and the slot taken with the commit (a
        second). Safe to repeat after a fault: a slot the lost attempt took reads as held."""
        params = _params(lease, limit, step, now) | {"lock_prefix": self._lock_prefix}
        q = self._sql

        async def attempt(conn: Conn) -> float | None:
            async with conn.pipeline():
                await conn.execute("BEGIN")
                await conn.execute(q.lock, params)
                await conn.execute(q.tidy, params)
                cur = await conn.execute(q.use, params)
            found = await cur.fetchone()
            if found is None:
                raise RuntimeError("reading a limit's use returned no row")
            verdict, conc, rate_n, rate_s, running, counted, started, edge = found
            wait: float | None = None
            if verdict == "use":
                rate = None if rate_n is None else Rate(rate_n, float(rate_s))
                use = SlotUse(running, counted, started, None if edge is None else float(edge))
                wait = slot_wait(Limit(limit, concurrency=conc, rate=rate), use)
                if wait is None:
                    await conn.execute(q.take, params | {"rated": rate is not None})
            await conn.execute("COMMIT")
            if verdict == "lost":
                raise LeaseLostError(f"lease on instance {lease.pk} lost by worker {lease.owner}")
            if verdict == "unknown":
                raise UnknownLimitError(f"limit {limit!r} is not defined")
            return wait

        taken: float | None = await self._db.retrying(
            f"taking a slot of limit {limit!r}", attempt, priority=True
        )
        return taken

    async def release(self, lease: Lease, limit: str, step: str, now: float) -> bool:
        """:meth:`~stepline.store.base.Store.release_limit`: whether a slot was given back."""
        params = _params(lease, limit, step, now) | {
            "channel": self._notes.channel,
            "note": self._notes.note(),
        }
        release = self._sql.release

        async def attempt(conn: Conn) -> Any:
            cur = await conn.execute(release, params)
            return await cur.fetchone()

        freed, _woke = await self._db.retrying(f"giving back a slot of limit {limit!r}", attempt)
        return bool(freed)


def _params(lease: Lease, limit: str, step: str, now: float) -> dict[str, Any]:
    return {
        "pk": lease.pk,
        "token": lease.token,
        "owner": lease.owner,
        "limit": limit,
        "step": step,
        "now": now,
    }
