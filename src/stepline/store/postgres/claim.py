"""The PostgreSQL store's claim: leasing runnable instances with their histories (in one round
trip without limits, under them in a few: ``limited``), where in the ``ready_at`` index the
next claim reads from (``flow.floor``), and when the worker should look again."""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import psycopg

from ..._json import loads
from ...flow.admission import limit_states
from ...flow.claiming import NextLook
from ...flow.floor import ClaimFloor
from ...flow.parking import POSTGRES_SET_ASIDE_CLAIMS, POSTGRES_SET_ASIDE_OVER, RECHECK, SetAside
from ...flow.rules import Rules
from ...records import LimitState, PendingEvent
from .._rows import (
    INSTANCE_COLUMNS,
    STEP_COLUMNS,
    InstanceRow,
    histories_from_rows,
    instance_from_row,
    step_from_row,
)
from ..base import Claim, Claimed, History, Lease
from ..types import PatchesKnown, Routing, new_lease_token, routing
from .claim_sql import ClaimStatements
from .db import Database
from .limited import READ_ONLY, Leased, LimitedClaim, read_rules, read_usage
from .limited import next_wakeup as limited_wakeup
from .notes import Notes
from .parking import ParkingStatements, freed_params
from .pools import Conn
from .sql import CLAIM_IN_ORDER, NO_JIT, Statements

# The columns of a ``claim`` (and ``claimed_by``) row after the instance's own.
_N_ICOLS = len(INSTANCE_COLUMNS.split(","))
_TOKEN, _CONTROL, _EVENT_SEQ, _PICKED_AT, _NEXT_READY, _TOP, _LIMITED = range(
    _N_ICOLS, _N_ICOLS + 7
)
"""The new lease token, the pending control action, the event count the lease was taken at,
the ``ready_at`` the row was picked at; on every row, the earliest timer left, the highest
priority in use, whether limits apply (``claim_sql``'s ``claim``)."""
_PRIORITY = InstanceRow._fields.index("priority")
_STEP_TIMES = tuple(
    [name.strip() for name in STEP_COLUMNS.split(",")].index(time)
    for time in ("wake_at", "started_at", "ended_at")
)
"""The positions of a step's times in ``STEP_COLUMNS``."""


class Claimer:
    """One store's claims, and the floor each set of workflows claims from."""

    def __init__(self, db: Database, sql: Statements, schema: str, notes: Notes) -> None:
        self._db = db
        self._notes = notes
        self._statements = sql
        self._sql = ClaimStatements.for_schema(schema)
        self._parking = ParkingStatements.for_schema(schema)
        self._swept_at = -math.inf
        """When a claim of this store last brought back every idle key's first in line."""
        self._set_aside = SetAside(POSTGRES_SET_ASIDE_OVER, POSTGRES_SET_ASIDE_CLAIMS)
        self._rules: Rules | None = None
        """The rules the last claim under limits read: the next takes their locks first."""
        self._lock_prefix = f"stepline:{schema}:"
        self._floors: dict[tuple[str | None, ...], ClaimFloor] = {}
        self._limited: dict[tuple[str | None, ...], bool] = {}
        """Whether the last claim of these workflows found fleet-wide limits registered: the
        next claims them under the limits (a claim without finds out, and claims again)."""

    async def claim(
        self,
        owner: str,
        workflows: Sequence[str],
        limit: int,
        lease_seconds: float,
        now: float,
        caps: Mapping[str, int] | None = None,
        versions: Mapping[str, Sequence[str]] | None = None,
        patches: PatchesKnown | None = None,
    ) -> Claimed:
        """:meth:`~stepline.store.base.Store.claim`."""
        if not workflows or limit <= 0:
            return Claimed([])
        served = routing(workflows, versions, patches)
        key = _key(workflows, served)
        floor = self._floors.get(key)
        if floor is not None and not floor.holds(now):
            floor = None
        capped = {w: cap for w, cap in (caps or {}).items() if w in key}
        nonce = secrets.randbits(62)
        params: dict[str, Any] = {
            "now": now,
            "floor": None if floor is None else floor.at,
            "workflows": list(workflows),
            "limit": limit,
            "owner": owner,
            "nonce": nonce,
            "token": new_lease_token(),
            "expires": now + lease_seconds,
            "lock_prefix": self._lock_prefix,
            **routes_params(served),
        }
        limited = bool(capped) or self._limited.get(key, False)
        leased = await self._lease(params, limited, capped)
        if leased is not None and leased.limited and not limited:
            limited = True  # limits were registered: claim under them
            leased = await self._lease(params, limited, capped)
        if leased is None:  # recovered after a lost reply: its claims were read again
            return Claimed(await self._recovered(owner, nonce))
        self._limited[key] = leased.limited
        claims = self._to_claims(leased, owner)
        self._move_floor(key, leased, limited or len(claims) < limit, now, floor)
        return Claimed(claims, leased.next_look)

    async def _lease(
        self, params: dict[str, Any], limited: bool, caps: Mapping[str, int]
    ) -> Leased | None:
        """Run the claim (``limited``: under the limits, and the worker's ``caps``), retrying
        connection faults; a retry first looks for the leases an attempt whose reply was lost
        may have taken (tagged with the claim's nonce): None if it took some."""
        sql = self._sql
        faulted = False

        async def attempt(conn: Conn) -> Leased | None:
            nonlocal faulted
            try:
                if faulted:
                    cur = await conn.execute(sql.claimed_by, (params["owner"], params["nonce"]))
                    if await cur.fetchall():
                        return None
                if limited:
                    return await self._lease_limited(conn, params, caps)
                return await self._lease_plain(conn, params)
            except psycopg.OperationalError:
                faulted = True
                raise

        return await self._db.retrying("claiming instances", attempt, priority=True)

    async def _lease_plain(self, conn: Conn, params: dict[str, Any]) -> Leased:
        """The claim without limits. One round trip: BEGIN, the planner settings (local to the
        transaction, so a pooler in transaction mode never hands them to another client), the
        claim, the claimed instances' histories, COMMIT. (A failed claim leaves the transaction
        aborted; the pool rolls it back.)"""
        sql = self._sql
        async with conn.pipeline():
            await conn.execute("BEGIN")
            await conn.execute(CLAIM_IN_ORDER)
            await conn.execute(NO_JIT)
            cur = conn.cursor()
            await cur.execute(sql.claim, params)
            histories = conn.cursor()
            await histories.execute(sql.claimed_histories, params)
            await conn.execute("COMMIT")
        found = await cur.fetchall()
        by_pk = {row[0]: row for row in await histories.fetchall()}
        rows = [row for row in found if row[0] is not None]  # none: one row of NULLs
        first = found[0]
        # Short and empty, it read the earliest timer (a short claim with leases read it
        # before them: their rows' own, now gone, would count).
        look = NextLook(first[_NEXT_READY]) if not rows else None
        return Leased(
            [row[:_PICKED_AT] for row in rows],
            [row[_PICKED_AT] for row in rows],
            [by_pk[row[0]] for row in rows],
            first[_TOP],
            first[_NEXT_READY],
            look,
            bool(first[_LIMITED]),
        )

    async def _lease_limited(
        self, conn: Conn, params: dict[str, Any], caps: Mapping[str, int]
    ) -> Leased:
        sweep = params["now"] >= self._swept_at + RECHECK
        claim = LimitedClaim(
            self._sql,
            self._parking,
            params,
            known=self._rules,
            sweep=sweep,
            set_aside=self._set_aside,
            freeing=freed_params(params["now"], self._notes),
        )
        leased = await claim.run(conn, caps)
        self._rules = claim.rules
        if sweep:
            self._swept_at = params["now"]
        return leased

    async def _recovered(self, owner: str, nonce: int) -> list[Claim]:
        """The claims of an attempt whose reply was lost, and their histories, read now under
        their leases (after the ``event_seq`` recovered with them, so they hold every event
        it counts)."""

        async def read(conn: Conn) -> list[Any]:
            cur = await conn.execute(self._sql.claimed_by, (owner, nonce))
            return await cur.fetchall()

        rows = await self._db.retrying("reading recovered claims", read, priority=True)
        histories = await self.load_histories([row[0] for row in rows])
        return [
            Claim(
                instance_from_row(row),
                Lease(row[0], row[_TOKEN], owner),
                row[_CONTROL],
                row[_EVENT_SEQ],
                history,
            )
            for row, history in zip(rows, histories, strict=True)
        ]

    def _to_claims(self, leased: Leased, owner: str) -> list[Claim]:
        claims: list[Claim] = []
        for row, read in zip(leased.rows, leased.histories, strict=True):
            _pk, event_seq, steps, events = read
            lease = Lease(row[0], row[_TOKEN], owner)
            history = _history_from_json(steps, events)
            claims.append(Claim(instance_from_row(row), lease, row[_CONTROL], event_seq, history))
        return claims

    def _move_floor(
        self,
        key: tuple[str | None, ...],
        leased: Leased,
        short: bool,
        now: float,
        floor: ClaimFloor | None,
    ) -> None:
        if short:  # it read the earliest timer left (under limits it always does)
            next_ready = leased.next_ready
            earliest = now if next_ready is None else min(next_ready, now)
        else:
            # A full claim (a backlog, or a busy worker filling its free slots): no live row it
            # could lock lies below its first pick, so the next claims read from a margin below
            # that (``flow.floor``). A row another transaction held locked below it is found by
            # the next read from the low end, as a straggler is. (The floor may move down a
            # little: that only reads more.) Only if it reached the highest priority in use: it
            # did not read the priorities after its last.
            firsts = [
                at
                for row, at in zip(leased.rows, leased.picked_at, strict=True)
                if row[_PRIORITY] == leased.top
            ]
            if not firsts:
                return
            earliest = firsts[0]
        self._floors[key] = ClaimFloor.after(floor, earliest, now)

    async def next_wakeup(
        self,
        workflows: Sequence[str],
        now: float,
        versions: Mapping[str, Sequence[str]] | None = None,
        patches: PatchesKnown | None = None,
    ) -> float | None:
        """:meth:`~stepline.store.base.Store.next_wakeup`."""
        if not workflows:
            return None
        routed = routing(workflows, versions, patches)
        key = _key(workflows, routed)
        served = routes_params(routed)
        if self._limited.get(key, False):

            async def read(conn: Conn) -> float | None:
                found: float | None = await limited_wakeup(conn, self._sql, workflows, now, served)
                return found

            return await self._db.retrying("looking for the next timer", read, priority=True)
        params = {"workflows": list(workflows), "now": now, **served}
        rows = await self._db.read(
            "looking for the next timer", self._sql.next_wakeup, params, priority=True
        )
        value = rows[0][0] if rows else None
        return float(value) if value is not None else None

    async def limit_states(self, workflow: str, key: str | None, now: float) -> list[LimitState]:
        """:meth:`~stepline.store.base.Store.limit_states`."""

        async def read(conn: Conn) -> list[LimitState]:
            rules = await read_rules(conn, self._sql, first=READ_ONLY)
            usage = await read_usage(conn, self._sql, rules, [workflow], now, exact=True)
            await conn.execute("COMMIT")
            return limit_states(workflow, key, rules, usage)

        return await self._db.retrying(
            f"reading the limits of workflow {workflow!r}", read, priority=True
        )

    async def load_histories(self, pks: list[int]) -> list[History]:
        """The histories of leased instances, in the order of ``pks``."""
        if not pks:
            return []
        steps, events = await self._db.read_many(
            "loading instance histories",
            [
                (self._statements.history_steps, (pks,)),
                (self._statements.history_events, (pks,)),
            ],
        )
        found = histories_from_rows(pks, steps, events)
        return [found[pk] for pk in pks]


def routes_params(served: Routing | None) -> dict[str, Any]:
    """The claim statements' parameters of ``{routed}`` for the routing ``served`` (None: every
    version and patch)."""
    found = served or Routing(None, None)
    return {
        "routed": found.routes is not None,
        "routes": list(found.routes or ()),
        "patching": found.patches is not None,
        "patches": list(found.patches or ()),
    }


def claim_with_history(row: Sequence[Any], owner: str) -> Claim:
    """The claim of a row shaped as ``claim_sql``'s ``claimed_rows``: the leased instance's
    columns, its lease token, control action and event count, its steps and events as JSON."""
    steps, events = row[_EVENT_SEQ + 1 : _EVENT_SEQ + 3]
    lease = Lease(row[0], row[_TOKEN], owner)
    history = _history_from_json(steps, events)
    return Claim(instance_from_row(row), lease, row[_CONTROL], row[_EVENT_SEQ], history)


def _key(workflows: Sequence[str], served: Routing | None) -> tuple[str | None, ...]:
    """What the claim floors and the limits found are kept by: the workflows and routing."""
    if served is None:
        return tuple(workflows)
    return (*workflows, *(served.routes or ()), None, *(served.patches or ()))


def _history_from_json(steps: str, events: str) -> History:
    """The history ``claimed_histories`` read: JSON arrays of step columns and of event columns.

    JSON has no float type, so times that are whole numbers come back as ints: made floats again.
    """
    records = []
    for row in orjson.loads(steps):
        for n in _STEP_TIMES:
            if row[n] is not None:
                row[n] = float(row[n])
        records.append(step_from_row(row))
    pending = [
        PendingEvent(pk, kind, loads(payload), float(at))
        for pk, kind, payload, at in orjson.loads(events)
    ]
    return History(records, pending)
