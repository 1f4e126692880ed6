"""The PostgreSQL store's statements that set a busy key's queued instances aside and bring
them back, and the one statement every write that stops an instance running frees its slots
with (``flow.parking``; the SQLite store does the same in ``sqlite/flow``).

A claim under a key limit that reads queued instances whose key is full sets every due queued
instance of those keys aside (``park``): ``held_ready_at`` keeps its place in line and
``ready_at`` is cleared, so no later claim walks that backlog in the ready index.

Whatever stops an instance running frees its slots through ``freed_*`` (one statement, by what
identifies the instances that stopped: their fences after a finish or a release, their pks after
a control action or a pause carried out, their rows before a delete): it brings back the first in
line of each one's key, and wakes the instance parked longest on each named limit (with a
concurrency) that its workflow lists, but the one it parks on now.

Claims and finishes run concurrently here. ``park`` sets aside only behind keys still full when
it runs, with their running instances locked ``FOR SHARE``: a write that stops one of them (a
finish, release, control action or delete) either committed first, and ``park`` no longer
counts it, or waits for the claim to commit; its ``freed_*``, a statement after its update (in
the same transaction, or for a finish in the next one), then sees what was set aside. What no
write brings back (a lease that expired; a connection lost between a finish and its
bring-back) a claim does: at every claim, the keys whose running instances all lost their
lease; every ``RECHECK`` seconds, every key with instances set aside that runs nothing
(``bring_back_idle``). Unlike SQLite's, the rows set aside carry no recheck time: keeping one
on each key's first in line would cost a write of another row at every bring-back.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ...flow.floor import due_since
from .notes import Notes
from .sql import render

# Which keys to bring back the first in line of, and how many of each: ``{keys}`` is a query of
# rows (workflow, key, n). What comes back is due from its place in line or ``since``, whichever
# is later: a claim reads the ready index from a floor below which it saw nothing live, never
# above ``since`` (``flow.floor``), so a place in line far back would hide it there.
# ``first`` locks the rows it brings back with ``held_ready_at`` checked on their latest version,
# so the update finds them by pk alone: a condition on ``held_ready_at`` there would let the
# planner, whose statistics may date from before anything was set aside, read each through the
# index of what is set aside, scanned whole for its last column.
_BRING_BACK = """
    WITH k AS ({keys}), first AS (
        SELECT p.pk FROM k CROSS JOIN LATERAL (
            SELECT pk FROM {s}.instances
            WHERE workflow = k.workflow AND key = k.key AND held_ready_at IS NOT NULL
            ORDER BY priority, held_ready_at, pk LIMIT k.n
            FOR UPDATE SKIP LOCKED
        ) AS p
    ), back AS (
        UPDATE {s}.instances i SET ready_at = GREATEST(i.held_ready_at, %(since)s),
            held_ready_at = NULL
        FROM first WHERE i.pk = first.pk
        RETURNING i.pk
    )
    SELECT count(*) FROM back
"""

# What instances that stopped running free: ``{stopped}`` is a query of rows (pk, workflow, key,
# parks_on). Their keys' first in line come back (as ``_BRING_BACK``), and for each named limit
# with a concurrency their workflows list (but the one each parks on now), as many instances
# parked on it as stopped are made ready, the one parked longest first (never one of those that
# stopped), and other processes' workers told. Returns how many came back, how many woke.
_FREED = """
    WITH stopped AS ({stopped}), k AS (
        SELECT workflow, key, count(*)::int AS n FROM stopped WHERE key IS NOT NULL
        GROUP BY workflow, key
    ), first AS (
        SELECT p.pk FROM k CROSS JOIN LATERAL (
            SELECT pk FROM {s}.instances
            WHERE workflow = k.workflow AND key = k.key AND held_ready_at IS NOT NULL
            ORDER BY priority, held_ready_at, pk LIMIT k.n
            FOR UPDATE SKIP LOCKED
        ) AS p
    ), back AS (
        UPDATE {s}.instances i SET ready_at = GREATEST(i.held_ready_at, %(since)s),
            held_ready_at = NULL
        FROM first WHERE i.pk = first.pk
        RETURNING i.pk
    ), freed AS (
        SELECT l.name AS lim, count(*) AS n FROM stopped s
        JOIN {s}.workflows w ON w.name = s.workflow
        CROSS JOIN LATERAL json_array_elements_text(w.limits::json -> 'limits') AS l(name)
        WHERE w.limits IS NOT NULL AND l.name IS DISTINCT FROM s.parks_on
            AND EXISTS (SELECT 1 FROM {s}.limits WHERE concurrency IS NOT NULL)
        GROUP BY l.name
    ), parked AS (
        SELECT p.pk AS p_pk FROM freed fr
        JOIN {s}.limits n ON n.name = fr.lim AND n.concurrency IS NOT NULL
        CROSS JOIN LATERAL (
            SELECT pk FROM {s}.instances
            WHERE parked_on = fr.lim AND ready_at > %(now)s AND status = 'waiting'
                AND pk <> ALL(ARRAY(SELECT pk FROM stopped WHERE pk IS NOT NULL))
            ORDER BY ready_at LIMIT fr.n
            FOR UPDATE SKIP LOCKED
        ) AS p
    ), woke AS (
        UPDATE {s}.instances i SET ready_at = %(now)s FROM parked
        WHERE i.pk = p_pk AND i.status = 'waiting'
        RETURNING i.pk
    ), note AS (
        SELECT pg_notify(%(channel)s, %(note)s) WHERE EXISTS (SELECT 1 FROM woke)
    )
    SELECT (SELECT count(*) FROM back), (SELECT count(*) FROM woke), (SELECT count(*) FROM note)
"""

# The keys of the workflows ``keyed`` with instances set aside (a descent of the index per key)
# of which no other instance is runnable, running or in line to run (whose end brings back the
# next): a slot freed without bringing back the next in line.
_IDLE_KEYS = """
    WITH RECURSIVE parked(workflow, key) AS (
        (SELECT workflow, key FROM {s}.instances
            WHERE workflow = ANY(%(keyed)s::text[]) AND held_ready_at IS NOT NULL
            ORDER BY workflow, key LIMIT 1)
        UNION ALL
        SELECT n.workflow, n.key FROM parked CROSS JOIN LATERAL (
            SELECT workflow, key FROM {s}.instances
            WHERE (workflow, key) > (parked.workflow, parked.key)
                AND workflow = ANY(%(keyed)s::text[]) AND held_ready_at IS NOT NULL
            ORDER BY workflow, key LIMIT 1
        ) AS n
    )
    SELECT p.workflow, p.key, 1 AS n FROM parked p
    WHERE NOT EXISTS (SELECT 1 FROM {s}.instances r WHERE r.workflow = p.workflow
        AND r.key = p.key AND r.ready_at IS NOT NULL
        AND r.status IN ('queued', 'running', 'waitingForPause'))
"""

_TEMPLATES = {
    # Set aside the due queued instances of the keys ``keys`` (workflow, key, cap: its
    # key_concurrency) that still run ``cap`` instances with a live lease.
    "park": """
        WITH k AS (
            SELECT * FROM json_to_recordset(%(keys)s::json) AS k(workflow text, key text, cap int)
        ), busy AS (
            SELECT i.workflow, i.key FROM {s}.instances i
            JOIN k ON i.workflow = k.workflow AND i.key = k.key
            WHERE i.status IN ('running', 'waitingForPause') AND i.lease_expires_at > %(now)s
            FOR SHARE OF i
        ), full_keys AS (
            SELECT k.workflow, k.key FROM k JOIN busy USING (workflow, key)
            GROUP BY k.workflow, k.key, k.cap HAVING count(*) >= k.cap
        )
        UPDATE {s}.instances i
        SET held_ready_at = COALESCE(i.held_ready_at, i.ready_at), ready_at = NULL
        FROM full_keys f
        WHERE i.workflow = f.workflow AND i.key = f.key AND i.status = 'queued'
            AND i.ready_at <= %(now)s
    """,
    # The instances ``pks`` stopped running (a control action fenced them out, or a claim
    # carried out their pause).
    "freed_of": _FREED.replace(
        "{stopped}",
        """
        SELECT pk, workflow, key, NULL::text AS parks_on FROM {s}.instances
        WHERE pk = ANY(%(pks)s::bigint[])
        """,
    ),
    # The activations ``fences`` (pk, token) whose lease a finish or a release let go (not one
    # a control action fenced out: it freed its slots itself).
    "freed_released": _FREED.replace(
        "{stopped}",
        """
        SELECT i.pk, i.workflow, i.key, i.parked_on AS parks_on FROM {s}.instances i
        JOIN json_to_recordset(%(fences)s::json) AS f(pk bigint, token bigint)
            ON i.pk = f.pk AND i.lease_token = f.token AND i.lease_owner IS NULL
        WHERE i.pk = ANY(ARRAY(SELECT pk FROM json_to_recordset(%(fences)s::json)
                AS g(pk bigint)))
        """,
    ),
    # The instances ``stopped`` (pk, workflow, key), as they were before a delete.
    "freed_stopped": _FREED.replace(
        "{stopped}",
        """
        SELECT pk, workflow, key, NULL::text AS parks_on
        FROM json_to_recordset(%(stopped)s::json) AS s(pk bigint, workflow text, key text)
        """,
    ),
    # Every key of ``keyed`` whose slots all freed without bringing back its first in line.
    "bring_back_idle": _BRING_BACK.replace("{keys}", _IDLE_KEYS),
    # The keys of ``workflows`` with instances set aside that run nothing but instances whose
    # lease expired: their first in line comes back, to run in ready order with those, as
    # without setting aside.
    "bring_back_expired": _BRING_BACK.replace(
        "{keys}",
        """
        SELECT DISTINCT i.workflow, i.key, 1 AS n FROM {s}.instances i
        WHERE i.workflow = ANY(%(keyed)s::text[]) AND i.status IN ('running', 'waitingForPause')
            AND i.lease_expires_at <= %(now)s AND i.key IS NOT NULL
            AND EXISTS (SELECT 1 FROM {s}.instances p WHERE p.workflow = i.workflow
                AND p.key = i.key AND p.held_ready_at IS NOT NULL)
            AND NOT EXISTS (SELECT 1 FROM {s}.instances r WHERE r.workflow = i.workflow
                AND r.key = i.key AND r.status IN ('running', 'waitingForPause')
                AND r.lease_expires_at > %(now)s)
        """,
    ),
}


@dataclass(frozen=True)
class ParkingStatements:
    """The statements of setting aside and bringing back, rendered for one schema."""

    park: str
    freed_of: str
    freed_released: str
    freed_stopped: str
    bring_back_idle: str
    bring_back_expired: str

    @classmethod
    def for_schema(cls, schema: str) -> ParkingStatements:
        if {f.name for f in fields(cls)} != set(_TEMPLATES):
            raise RuntimeError("parking statement templates out of sync")
        return cls(**render(_TEMPLATES, schema))


def freed_params(now: float, notes: Notes) -> dict[str, Any]:
    """The parameters of a ``freed_*`` at ``now`` but for what stopped: what comes back is due
    from ``flow.floor.due_since(now)`` at the earliest; a woken instance is announced."""
    return {"now": now, "since": due_since(now), "channel": notes.channel, "note": notes.note()}
