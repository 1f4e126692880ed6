"""The PostgreSQL store's claim: leasing runnable instances with their histories in one round
trip (under the workflows' limits, if any), where in the ``ready_at`` index the next claim reads
from (its floor), and the earliest timer an empty claim read on the way."""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import psycopg

from ..._json import loads
from ...records import LimitState, PendingEvent
from .._admission import RECHECK, limit_states
from .._hint import TimerHint
from .._rows import (
    INSTANCE_COLUMNS,
    STEP_COLUMNS,
    InstanceRow,
    histories_from_rows,
    instance_from_row,
    step_from_row,
)
from ..base import Claim, History, Lease
from ..types import new_lease_token
from .claim_fn import ClaimFunction
from .claim_sql import FLOOR_MARGIN, ClaimStatements
from .db import Conn, Database
from .limited import FAR_CLAIMS, READ_ONLY, Leased, LimitedClaim, read_rules, read_usage
from .limited import next_wakeup as limited_wakeup
from .sql import CLAIM_IN_ORDER, NO_JIT, Statements

# The columns of a ``claim`` (and ``claimed_by``) row after the instance's own.
_N_ICOLS = len(INSTANCE_COLUMNS.split(","))
_TOKEN, _CONTROL, _EVENT_SEQ, _PICKED_AT, _NEXT_READY, _TOP, _LIMITED, _HINT = range(
    _N_ICOLS, _N_ICOLS + 8
)
"""The new lease token, the pending control action, the event count the lease was taken at,
the ``ready_at`` the row was picked at; on every row, the earliest timer left, the highest
priority in use, whether limits apply and the earliest wake-up under them (``claim_sql``)."""
_PRIORITY = InstanceRow._fields.index("priority")
_STEP_TIMES = tuple(
    [name.strip() for name in STEP_COLUMNS.split(",")].index(time)
    for time in ("wake_at", "started_at", "ended_at")
)
"""The positions of a step's times in ``STEP_COLUMNS``."""

_FLOOR_RECHECK = 10.0
"""Seconds between claims that read the ready_at index from its low end, for any straggler below
the floor (a write that took longer than the margin to commit)."""

_Rows = tuple[list[Any], dict[int, Any], bool, bool]
"""A claim's rows, the claimed instances' history rows by pk, whether it was recovered, and
whether its timers hold for the worker's next look (``_HINT``, ``_NEXT_READY``)."""


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


class Claimer:
    """One store's claims, the floor each set of workflows claims from, and the timer hint."""

    def __init__(self, db: Database, sql: Statements, schema: str) -> None:
        self._db = db
        self._statements = sql
        self._sql = ClaimStatements.for_schema(schema)
        self.function = ClaimFunction.for_schema(schema)
        """The claim function under limits, which the store creates when it opens."""
        self._swept_at = -math.inf
        """When a claim of this store last brought back every idle key's first in line."""
        self._walked_far: dict[tuple[str, ...], int] = {}
        """How many of the last claims of these workflows in a row stepped over many due
        instances (``limited.FAR_CLAIMS``)."""
        self._lock_prefix = f"stepline:{schema}:"
        self._floors: dict[tuple[str, ...], _ClaimFloor] = {}
        self._limited: dict[tuple[str, ...], bool] = {}
        """Whether the last claim of these workflows found fleet-wide limits registered: the
        next claims them under the limits (a claim without finds out, and claims again)."""
        self._hint = TimerHint()

    def became_ready(self) -> None:
        """Something may have become runnable: the last claim's timer hint no longer holds."""
        self._hint.changed()

    async def claim(
        self,
        owner: str,
        workflows: Sequence[str],
        limit: int,
        lease_seconds: float,
        now: float,
        caps: Mapping[str, int] | None = None,
    ) -> list[Claim]:
        """:meth:`~stepline.store.base.Store.claim`."""
        if not workflows or limit <= 0:
            return []
        key = tuple(workflows)
        floor = self._floors.get(key)
        if floor is not None and not floor.holds(now):
            floor = None
        capped = {w: cap for w, cap in (caps or {}).items() if w in key}
        params = {
            "now": now,
            "floor": None if floor is None else floor.at,
            "workflows": list(workflows),
            "limit": limit,
            "owner": owner,
            "nonce": secrets.randbits(62),
            "token": new_lease_token(),
            "expires": now + lease_seconds,
            "lock_prefix": self._lock_prefix,
        }
        begun = self._hint.begin()
        limited = bool(capped) or self._limited.get(key, False)
        rows, histories, recovered, timed = await self._lease(params, limited, capped)
        if rows and not recovered:
            if rows[0][_LIMITED] and not limited:  # limits were registered: claim under them
                limited = True
                rows, histories, recovered, timed = await self._lease(params, limited, capped)
            if rows and not recovered:
                self._limited[key] = bool(rows[0][_LIMITED])
        claims = await self._to_claims(rows, histories, owner)
        # An empty claim also read the earliest timer, and under limits so did a short one, or
        # a full one that found nothing more runnable (the function says which, as `timed`):
        # next_wakeup() can use it once, if nothing became runnable meanwhile (which would
        # have gone through became_ready).
        if rows and timed and (not claims or limited):
            self._hint.keep(key, begun, rows[0][_HINT if limited else _NEXT_READY])
        else:
            self._hint.clear()
        if rows and not recovered:
            self._move_floor(key, rows, limited or len(claims) < limit, now, floor)
        return claims

    async def _lease(self, params: dict[str, Any], limited: bool, caps: Mapping[str, int]) -> _Rows:
        """Run the claim (``limited``: under the limits, and the worker's ``caps``), retrying
        connection faults; a retry first recovers the leases an attempt whose reply was lost
        may have taken (tagged with the claim's nonce)."""
        sql = self._sql
        faulted = False

        async def attempt(conn: Conn) -> _Rows:
            nonlocal faulted
            try:
                if faulted:
                    cur = await conn.execute(sql.claimed_by, (params["owner"], params["nonce"]))
                    rows = await cur.fetchall()
                    if rows:
                        return rows, {}, True, False
                if limited:
                    sweep = params["now"] >= self._swept_at + RECHECK
                    walked = tuple(params["workflows"])
                    far = self._walked_far.get(walked, 0)
                    claim = LimitedClaim(
                        sql, self.function, params, sweep=sweep, may_park=far >= FAR_CLAIMS - 1
                    )
                    leased = await claim.run(conn, caps)
                    if sweep:
                        self._swept_at = params["now"]
                    self._walked_far[walked] = far + 1 if claim.walked_far else 0
                    return _limited_rows(leased)
                # One round trip: BEGIN, the planner settings (local to the transaction, so a
                # pooler in transaction mode never hands them to another client), the claim,
                # the claimed instances' histories, COMMIT. (A failed claim leaves the
                # transaction aborted; the pool rolls it back.)
                async with conn.pipeline():
                    await conn.execute("BEGIN")
                    await conn.execute(CLAIM_IN_ORDER)
                    await conn.execute(NO_JIT)
                    cur = conn.cursor()
                    await cur.execute(sql.claim, params)
                    histories = conn.cursor()
                    await histories.execute(sql.claimed_histories, params)
                    await conn.execute("COMMIT")
                rows = await cur.fetchall()
                return rows, {row[0]: row for row in await histories.fetchall()}, False, True
            except psycopg.OperationalError:
                faulted = True
                raise

        return await self._db.retrying("claiming instances", attempt, priority=True)

    async def _to_claims(
        self, rows: list[Any], histories: dict[int, Any], owner: str
    ) -> list[Claim]:
        claimed = [row for row in rows if row[0] is not None]  # none: one row of NULLs
        # A recovered claim's histories went with the lost reply: read them now, under the
        # leases and after the ``event_seq`` recovered with them, so they hold every event it
        # counts.
        missing = [row[0] for row in claimed if row[0] not in histories]
        loaded = (
            dict(zip(missing, await self.load_histories(missing), strict=True)) if missing else {}
        )
        claims: list[Claim] = []
        for row in claimed:
            lease = Lease(row[0], row[_TOKEN], owner)
            read = histories.get(lease.pk)
            if read is None:
                event_seq, history = row[_EVENT_SEQ], loaded[lease.pk]
            else:
                _pk, event_seq, steps, events = read
                history = _history_from_json(steps, events)
            claims.append(Claim(instance_from_row(row), lease, row[_CONTROL], event_seq, history))
        return claims

    def _move_floor(
        self,
        key: tuple[str, ...],
        rows: list[Any],
        short: bool,
        now: float,
        floor: _ClaimFloor | None,
    ) -> None:
        rechecked = now if floor is None else floor.rechecked
        if short:  # it read the earliest timer left (under limits it always does)
            next_ready: float | None = rows[0][_NEXT_READY]
            earliest = now if next_ready is None else min(next_ready, now)
        else:
            # A full claim (a backlog, or a busy worker filling its free slots): no live row it
            # could lock lies below its first pick, so the next claims read from a margin below
            # that, not from wherever the floor was when the backlog began (each would walk the
            # dead entries of every instance claimed since). A row another transaction held
            # locked below it is found by the next read from the low end, as a straggler is.
            # (The floor may move down a little: that only reads more.) Only if it reached the
            # highest priority in use: it did not read the priorities after its last.
            top = rows[0][_TOP]
            firsts = [row[_PICKED_AT] for row in rows if row[_PRIORITY] == top]
            if not firsts:
                return
            earliest = firsts[0]
        self._floors[key] = _ClaimFloor(earliest - FLOOR_MARGIN, now, rechecked)

    async def next_wakeup(self, workflows: Sequence[str], now: float) -> float | None:
        """:meth:`~stepline.store.base.Store.next_wakeup`."""
        if not workflows:
            return None
        key = tuple(workflows)
        known, at = self._hint.take(key)
        if known:
            return at
        if self._limited.get(key, False):

            async def read(conn: Conn) -> float | None:
                found: float | None = await limited_wakeup(conn, self._sql, workflows, now)
                return found

            return await self._db.retrying("looking for the next timer", read, priority=True)
        params = {"workflows": list(workflows), "now": now}
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


def _limited_rows(leased: Leased) -> _Rows:
    """A claim under limits in the shape of the plain claim's rows (``_TOKEN`` ...)."""
    timers = leased.timers
    meta = (timers.next_ready, timers.top, leased.limited, timers.hint)
    rows: list[Any] = [
        (*row, picked_at, *meta)
        for row, picked_at in zip(leased.rows, leased.picked_at, strict=True)
    ]
    if not rows:  # the plain claim's row of NULLs, which carries the timers
        rows = [(*([None] * _PICKED_AT), None, *meta)]
    return rows, {row[0]: row for row in leased.histories}, False, timers.known


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
