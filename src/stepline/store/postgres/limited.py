"""The PostgreSQL store's claim under flow-control limits, and the reads that share its view of
the limits: when a worker should look again, and the limits' use now.

A claim is one round trip: a transaction whose one claiming statement calls the claim function
(``claim_fn``), which takes the advisory locks, reads what runs and what started under them,
reads the due instances in claim order, admits them by the rules of ``store/_admission`` and
leases them; the statement after it reads what it leased, with their histories. The reads here
(``next_wakeup``, ``Store.limit_states``) apply the rules in Python to what they read, as the
SQLite store does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from .._admission import Admission, Rules, Usage, UsagePlan, rules_from_rows
from .._rows import N_INSTANCE_COLUMNS
from .claim_fn import ClaimFunction
from .claim_sql import ClaimStatements
from .db import Conn
from .sql import CLAIM_IN_ORDER, NO_JIT

READ_ONLY = ("BEGIN", CLAIM_IN_ORDER, NO_JIT)
"""What a read of the limits' use sends first: a transaction (its statements then see one
another's effects) whose estimates, inflated by the JSON functions, do not compile them, and
whose reads of timers take the first entry of an index range, as the claim's do."""
ASYNC_COMMIT = "SET LOCAL synchronous_commit = off"
"""A claim lost with its commit is found again (its leases expire): it need not wait for the
commit to be durable."""
FAR_CLAIMS = 3
"""How many claims in a row of one set of workflows must step over more than
``claim_fn.PARK_AFTER`` due instances before the last sets aside the queues of the full keys."""
_READY = 2
"""The ``ready_at`` column of a ``probe`` row."""
_EVENT_SEQ = N_INSTANCE_COLUMNS + 2
_HISTORY_AT = N_INSTANCE_COLUMNS + 3
"""In a ``claimed_rows`` row: the event count, and where the history's columns (steps, events)
follow the leased row's own."""
_KEY_SEP = chr(31)
"""Between a workflow's name and a key in ``full_keys`` (as the SQL joins them)."""


@dataclass(frozen=True)
class Timers:
    """What a claim under limits reports besides its leases (``claim_sql``'s ``timers``)."""

    top: int | None
    """The highest priority in use."""
    next_ready: float | None
    """The earliest timer at or above the floor, held back or not."""
    hint: float | None
    """After a claim that left nothing runnable (it took fewer than it asked, or took all it
    asked and a look one row further found nothing the limits let run): the earliest time an
    instance may need a worker under the limits: a future timer or lease expiry, a due
    instance not held back, or when a rate that holds back a first start reopens; never an
    instance held back by a concurrency limit."""
    known: bool = True
    """Whether ``hint`` holds: not when more is runnable, the claim's reads stopped before the
    end of what is due, or its own starts used up a rate (whose reopening it read before)."""


@dataclass
class Leased:
    """A claim's outcome: the leased rows (``claim_sql``'s ``claimed_rows``), in claim order,
    with the ``ready_at`` each was picked at; their histories; the timers; whether a workflow
    claimed has fleet-wide limits."""

    rows: list[tuple[Any, ...]]
    picked_at: list[float]
    histories: list[tuple[Any, ...]]
    """The leased instances' histories, as ``claim_sql``'s ``claimed_histories`` reads them."""
    timers: Timers
    limited: bool


async def read_rules(conn: Conn, sql: ClaimStatements, *, first: Sequence[str] = ()) -> Rules:
    """The registered limits, in one round trip that sends the statements ``first`` first."""
    async with conn.pipeline():
        for statement in first:
            await conn.execute(statement)
        declared = await conn.execute(sql.workflow_limits)
        named = await conn.execute(sql.named_limits)
    return rules_from_rows(await declared.fetchall(), await named.fetchall())


async def read_usage(
    conn: Conn,
    sql: ClaimStatements,
    rules: Rules,
    workflows: Sequence[str],
    now: float,
    *,
    exact: bool,
) -> Usage:
    """What runs and what started in the scopes of ``workflows``' limits (one round trip). The
    starts stop counting at the rate's count unless ``exact``."""
    plan = UsagePlan.of(rules, workflows)
    params = {"now": now, "counted": list(plan.counted), "named": list(plan.users)}
    async with conn.pipeline():
        running = await conn.execute(sql.running, params)
        slots = await conn.execute(sql.live_slots, params)
        starts = []
        for scope in plan.rates:
            rate = scope.rate
            read = {
                "wfs": list(scope.workflows),
                "limit": scope.name if scope.scope == "limit" else None,
                "since": now - rate.period,
                "n": rate.count,
                "cap": None if exact else rate.count,
            }
            starts.append(await conn.execute(sql.starts, read))
    started: dict[tuple[str, str], tuple[int, float | None]] = {}
    for scope, cur in zip(plan.rates, starts, strict=True):
        found = await cur.fetchone()
        count, edge = found if found is not None else (0, None)
        started[(scope.scope, scope.name)] = (int(count), None if edge is None else float(edge))
    return plan.usage(rules, await running.fetchall(), await slots.fetchall(), started)


class LimitedClaim:
    """One claim under the limits, on a connection: one round trip that sends BEGIN, the planner
    settings, the call of the claim function (``claim_fn``), the read of what it leased with
    their histories, and COMMIT."""

    def __init__(
        self,
        sql: ClaimStatements,
        function: ClaimFunction,
        params: dict[str, Any],
        *,
        sweep: bool = False,
        may_park: bool = False,
    ) -> None:
        self._sql = sql
        self._function = function
        self._params = params
        """The claim's parameters (``Claimer.claim``): now, floor, workflows, limit, owner,
        nonce, token, expires, lock_prefix."""
        self._sweep = sweep
        """Whether to bring back the first in line of every key set aside that runs nothing
        (``parking``'s ``bring_back_idle``)."""
        self._may_park = may_park
        """Whether the claims before it stepped over many due instances too: a claim then sets
        aside what it steps over behind full keys. (One long read alone may have stepped over
        rows that other claims held locked a moment.)"""
        self.walked_far = False
        """Whether a read of due instances stepped over more than ``PARK_AFTER`` of them."""

    async def run(self, conn: Conn, caps: Mapping[str, int]) -> Leased:
        """Claim (a failure leaves the transaction open or aborted: the pool rolls it back)."""
        params = self._params
        call = {
            **params,
            "caps": orjson.dumps(dict(caps)).decode(),
            "sweep": self._sweep,
            "may_park": self._may_park,
        }
        async with conn.pipeline():
            for statement in ("BEGIN", CLAIM_IN_ORDER, NO_JIT, ASYNC_COMMIT):
                await conn.execute(statement)
            outcome = await conn.execute(self._function.call, call)
            leasing = await conn.execute(self._sql.claimed_rows, params)
            await conn.execute("COMMIT")
        found = await outcome.fetchone()
        if found is None:
            raise RuntimeError("the claim function returned no row")
        pks, picked_at, top, next_ready, hint, known, limited, walked_far = found
        self.walked_far = bool(walked_far)
        order = {pk: index for index, pk in enumerate(pks)}
        found_rows = sorted(await leasing.fetchall(), key=lambda row: order[row[0]])
        leased = [tuple(row[:_HISTORY_AT]) for row in found_rows]
        histories = [(row[0], row[_EVENT_SEQ], *row[_HISTORY_AT:]) for row in found_rows]
        picked = [float(picked_at[order[row[0]]]) for row in leased]
        return Leased(leased, picked, histories, Timers(top, next_ready, hint, known), limited)


def _probe(sql: ClaimStatements, read: Mapping[str, Any]) -> str:
    """The look at due instances for ``read``: a workflow at a time when the limits hold some
    of its workflows back whole or their first starts by a used-up rate (their backlog would
    be walked past in claim order)."""
    each = len(read["active"]) < len(read["workflows"]) or bool(read["no_starts"])
    return sql.probe_each if each else sql.probe


def _held(admission: Admission, workflows: Sequence[str]) -> dict[str, list[str]]:
    """The parameters of ``probe`` that leave out what the limits hold back now."""
    held = admission.held(workflows)
    return {
        "active": held.active,
        "full_keys": [f"{workflow}{_KEY_SEP}{key}" for workflow, key in held.full_keys],
        "no_starts": held.no_starts,
    }


async def next_wakeup(
    conn: Conn, sql: ClaimStatements, workflows: Sequence[str], now: float
) -> float | None:
    """``Store.next_wakeup`` for workflows of which some have fleet-wide limits: their timers
    and leases after ``now``, what a claim would take now, and the reopening of a rate that
    holds a first start back."""
    rules = await read_rules(conn, sql, first=READ_ONLY)
    usage = await read_usage(conn, sql, rules, workflows, now, exact=False)
    admission = Admission(rules, usage, None)
    read = {
        "now": now,
        "floor": None,
        "workflows": list(workflows),
        "seen": [],
        "limit": 1,
        **_held(admission, workflows),
    }
    async with conn.pipeline():
        probe = await conn.execute(_probe(sql, read), read)
        timed = await conn.execute(sql.timers, read)
        await conn.execute("COMMIT")
    found = await timed.fetchone()
    _top, _next_ready, future, rate_held = found if found is not None else (None, None, None, [])
    times = [future, *(row[_READY] for row in await probe.fetchall())]
    times += [admission.reopen_at(name) for name in rate_held]
    known = [float(at) for at in times if at is not None]
    return min(known) if known else None
