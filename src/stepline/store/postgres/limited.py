"""The PostgreSQL store's claim under flow-control limits, and the reads that share its view of
the limits: when a worker should look again, and the limits' use now.

The rules are the reference rules of ``store/_admission``, applied in Python as on SQLite. A
claim runs in one transaction, in three round trips however many instances it takes:

1. the rules (``workflows.limits``, ``limits``), read at every claim since another process
   may register new ones, and what runs and what started in the scopes of the rules the last
   claim read (when the rules have changed, that use is read again: a fourth round trip);
2. the advisory locks (``lock_limits``: one per limited workflow and per named limit its
   workflows use, in one order), then what runs and what started again, and the due
   instances that the use read in 1 does not hold back, in claim order, locked (``FOR UPDATE
   SKIP LOCKED``), with the timers the worker needs. Under READ COMMITTED each statement after
   the locks' sees every claim and slot taken by a transaction that held one of them before,
   so claims that share a limit never together exceed it: admission goes by the use read
   here, and the use read in 1 only chooses what the read of due instances leaves out, so
   that the locks are held for two round trips, not three;
3. the leases of those :class:`~stepline.store._admission.Admission` admits, the pauses
   pending, the busy keys' queues to set aside (``parking``), the histories, COMMIT.

A read of due instances is followed by another past it (at most ``_PASSES`` in all) when it
came back short having left out something the use under the locks lets run (a slot freed
between 1 and 2), or when admission turned some down: what the claim took may have filled a
key or a limit its SQL did not yet leave out.

Each read of due instances is bracketed by reads of this transaction's index statistics: what
it fetched less what it returned is what it stepped over. After ``FAR_CLAIMS`` claims in a row
that stepped over more than ``_PARK_AFTER``, the claim sets aside the due queued instances of
the full keys it left out, so that the next claims do not read them again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._admission import Admission, Rules, Usage, UsagePlan, rules_from_rows
from .claim_sql import ClaimStatements
from .db import Conn
from .parking import ParkingStatements, bring_back_times
from .sql import CLAIM_IN_ORDER, NO_JIT, json_rows

READ_ONLY = ("BEGIN", CLAIM_IN_ORDER, NO_JIT)
"""What a read of the limits' use sends first: a transaction (its statements then see one
another's effects) whose estimates, inflated by the JSON functions, do not compile them, and
whose reads of timers take the first entry of an index range, as the claim's do."""
_PASSES = 3
"""Reads of due instances a claim makes at most (see the module's docstring)."""
_PARK_AFTER = 1000
"""How many due instances a read may step over before the claim sets aside the queues of the
full keys it left out (``parking``), if the claims before it did too (``FAR_CLAIMS``)."""
FAR_CLAIMS = 3
"""How many claims in a row of one set of workflows must step over more than ``_PARK_AFTER``
due instances before the last sets aside the queues of the full keys."""
_PK, _STATUS, _READY, _PRIORITY, _WORKFLOW, _KEY, _STARTING = range(7)
"""The columns of a ``candidates`` row."""
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
    """After a claim that took fewer than it asked: the earliest time an instance may need a
    worker under the limits: a future timer or lease expiry, a due instance not held back, or
    when a rate that holds back a first start reopens; never an instance held back by a
    concurrency limit."""
    known: bool = True
    """Whether ``hint`` holds: not when the claim's reads stopped before the end of what is
    due, or its own starts used up a rate (whose reopening it read before)."""


@dataclass
class Leased:
    """A claim's outcome: the leased rows (``claim_sql``'s ``lease`` columns), in claim order,
    with the ``ready_at`` each was picked at; their histories; the timers; whether a workflow
    claimed has fleet-wide limits."""

    rows: list[tuple[Any, ...]]
    picked_at: list[float]
    histories: list[tuple[Any, ...]]
    """The leased instances' histories (``claim_sql``'s ``claimed_histories``)."""
    timers: Timers
    limited: bool
    rules: Rules
    """The rules it claimed under."""


async def read_rules(conn: Conn, sql: ClaimStatements, *, first: Sequence[str] = ()) -> Rules:
    """The registered limits, in one round trip that sends the statements ``first`` first."""
    async with conn.pipeline():
        sent = await send_rules(conn, sql, first)
    return await rules_of(sent)


async def send_rules(conn: Conn, sql: ClaimStatements, first: Sequence[str]) -> tuple[Any, Any]:
    """Send the statements ``first``, then the reads of the rules, inside the caller's
    pipeline; :func:`rules_of` once it is synced."""
    for statement in first:
        await conn.execute(statement)
    return await conn.execute(sql.workflow_limits), await conn.execute(sql.named_limits)


async def rules_of(sent: tuple[Any, Any]) -> Rules:
    """The rules the reads :func:`send_rules` sent found."""
    declared, named = sent
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
    async with conn.pipeline():
        sent = await send_usage(conn, sql, plan, now, exact=exact)
    return await sent.usage(rules)


@dataclass
class _SentUsage:
    """The reads of :func:`send_usage`, sent in a pipeline: :meth:`usage` once it is synced."""

    plan: UsagePlan
    running: Any
    slots: Any
    starts: list[Any]

    async def usage(self, rules: Rules) -> Usage:
        started: dict[tuple[str, str], tuple[int, float | None]] = {}
        for scope, cur in zip(self.plan.rates, self.starts, strict=True):
            found = await cur.fetchone()
            count, edge = found if found is not None else (0, None)
            started[(scope.scope, scope.name)] = (int(count), None if edge is None else float(edge))
        running, slots = await self.running.fetchall(), await self.slots.fetchall()
        return self.plan.usage(rules, running, slots, started)


async def send_usage(
    conn: Conn, sql: ClaimStatements, plan: UsagePlan, now: float, *, exact: bool
) -> _SentUsage:
    """Send the reads of what ``plan`` counts, inside the caller's pipeline."""
    params = {"now": now, "counted": list(plan.counted), "named": list(plan.users)}
    running = await conn.execute(sql.running, params)
    slots = await conn.execute(sql.live_slots, params)
    starts = []
    for scope in plan.rates:
        rate = scope.rate
        starts.append(
            await conn.execute(
                sql.starts,
                {
                    "wfs": list(scope.workflows),
                    "limit": scope.name if scope.scope == "limit" else None,
                    "since": now - rate.period,
                    "n": rate.count,
                    "cap": None if exact else rate.count,
                },
            )
        )
    return _SentUsage(plan, running, slots, starts)


def lock_keys(rules: Rules, workflows: Sequence[str]) -> list[str]:
    """The advisory locks of a claim of ``workflows`` (``claim_sql``'s ``lock_limits``)."""
    limited = [name for name in workflows if rules.limited(name)]
    named = {n for name in limited for n in rules.workflows[name].limits if n in rules.limits}
    return [*(f"w:{name}" for name in limited), *(f"l:{name}" for name in sorted(named))]


@dataclass
class _SentRead:
    """A read of due instances sent in a pipeline (:meth:`LimitedClaim._read`): its parameters,
    its cursor, and those of the index statistics read before and after it, if measured."""

    read: dict[str, Any]
    rows: Any
    before: Any = None
    after: Any = None


class LimitedClaim:
    """One claim under the limits, on a connection (see the module's docstring)."""

    def __init__(
        self,
        sql: ClaimStatements,
        parking: ParkingStatements,
        params: dict[str, Any],
        known: Rules | None,
        *,
        sweep: bool = False,
        may_park: bool = False,
    ) -> None:
        self._sql = sql
        self._parking = parking
        self._params = params
        """The claim's parameters (``Claimer.claim``): now, floor, workflows, limit, owner,
        nonce, token, expires, caps (JSON), lock_prefix."""
        self._known = known
        """The rules the last claim read, if any: the use of their scopes is read with the
        rules, to choose what the read under the locks leaves out."""
        self._sweep = sweep
        """Whether to bring back the first in line of every key set aside that runs nothing
        (``parking``'s ``bring_back_idle``)."""
        self._may_park = may_park
        """Whether the claims before it stepped over many due instances too: a claim then sets
        aside what it steps over behind full keys. (One long read alone may have stepped over
        rows that other claims held locked a moment.)"""
        self.walked_far = False
        """Whether a read of due instances stepped over more than ``_PARK_AFTER`` of them."""
        self._to_park: set[str] = set()
        """The full keys (``full_keys`` entries) a read stepped over many due instances of."""

    async def _read(self, conn: Conn, read: dict[str, Any]) -> _SentRead:
        """Send a read of due instances inside the caller's pipeline, if it leaves out full
        keys between two reads of the index entries walked so far; :meth:`_rows` once it is
        synced."""
        if not read["full_keys"]:
            return _SentRead(read, await conn.execute(_due(self._sql, read), read))
        before = await conn.execute(self._sql.walked)
        rows = await conn.execute(_due(self._sql, read), read)
        return _SentRead(read, rows, before, await conn.execute(self._sql.walked))

    async def _rows(self, sent: _SentRead) -> list[Any]:
        """The rows of a read :meth:`_read` sent. When it stepped over more than
        ``_PARK_AFTER`` due instances that it left out, as the claims before did, the full keys
        it left out are to be set aside (what it stepped over may be held back otherwise too:
        setting aside whatever part is behind busy keys costs little, and once)."""
        rows: list[Any] = await sent.rows.fetchall()
        if sent.before is None or sent.after is None:
            return rows
        (start,), (end,) = await sent.before.fetchone(), await sent.after.fetchone()
        if (end or 0) - (start or 0) - len(rows) > _PARK_AFTER:
            self.walked_far = True
            if self._may_park:
                self._to_park.update(sent.read["full_keys"])
        return rows

    async def _send_parking(self, conn: Conn, rules: Rules) -> None:
        """Set aside, inside the caller's pipeline, the due queued instances of the keys
        :meth:`_rows` chose."""
        if not self._to_park:
            return
        keys = []
        for entry in sorted(self._to_park):
            workflow, key = entry.split(_KEY_SEP, 1)
            keys.append({"workflow": workflow, "key": key, "cap": rules.key_limit(workflow)})
        self._to_park = set()
        now: float = self._params["now"]
        await conn.execute(self._parking.park, {"keys": json_rows(keys), "now": now})

    async def run(self, conn: Conn, caps: Mapping[str, int]) -> Leased:
        """Claim (a failure leaves the transaction open or aborted: the pool rolls it back)."""
        sql, params = self._sql, self._params
        workflows: list[str] = params["workflows"]
        now: float = params["now"]
        rules, expected = await self._expect(conn, caps)
        read = {**params, **expected, "seen": []}
        plan = UsagePlan.of(rules, workflows)
        locks = {"lock_prefix": params["lock_prefix"], "locks": lock_keys(rules, workflows)}
        keyed = [name for name in workflows if rules.keyed(name)]
        async with conn.pipeline():
            await conn.execute(sql.lock_limits, locks)
            if keyed:
                # Before this claim reads them, from its floor: in ready order with the
                # instances whose lease expired, as though never set aside.
                floor = params["floor"]
                back = {"keyed": keyed, "now": now, "since": -math.inf if floor is None else floor}
                await conn.execute(self._parking.bring_back_expired, back)
                if self._sweep:
                    await conn.execute(self._parking.bring_back_idle, back)
            sent = await send_usage(conn, sql, plan, now, exact=False)
            candidates = await self._read(conn, read)
            timed = await conn.execute(sql.timers, read)
        admission = Admission(rules, await sent.usage(rules), caps)
        first = (await self._rows(candidates), await timed.fetchone())
        picked, pauses, timers = await self._pick(conn, admission, read, first)
        lease = {**params, "pks": [row[_PK] for row in picked], "pauses": pauses}
        async with conn.pipeline():
            leasing = await conn.execute(sql.lease, lease) if picked or pauses else None
            await self._send_parking(conn, rules)  # after the leases: they may fill a key
            if pauses:  # they ran: their keys' next in line may now
                back = {"pks": pauses, **bring_back_times(now)}
                await conn.execute(self._parking.bring_back_of, back)
            reading = await conn.execute(sql.claimed_histories, params) if picked else None
            await conn.execute("COMMIT")
        leased = [tuple(row) for row in await leasing.fetchall()] if leasing else []
        histories = [tuple(row) for row in await reading.fetchall()] if reading else []
        order = {row[_PK]: index for index, row in enumerate(picked)}
        leased.sort(key=lambda row: order[row[0]])
        picked_at = [picked[order[row[0]]][_READY] for row in leased]
        limited = any(rules.limited(name) for name in workflows)
        return Leased(leased, picked_at, histories, timers, limited, rules)

    async def _expect(
        self, conn: Conn, caps: Mapping[str, int]
    ) -> tuple[Rules, dict[str, list[str]]]:
        """The rules, and what the limits hold back by the use read before the locks: what the
        first read of due instances, under the locks, leaves out (one round trip when the rules
        are those of the last claim, two when not)."""
        sql, params = self._sql, self._params
        workflows: list[str] = params["workflows"]
        # A claim that is lost with its commit is found again (its leases expire): it need not
        # wait for the commit to be durable.
        begin = ("BEGIN", CLAIM_IN_ORDER, NO_JIT, "SET LOCAL synchronous_commit = off")
        known = self._known
        async with conn.pipeline():
            declared = await send_rules(conn, sql, begin)
            sent = None
            if known is not None:
                plan = UsagePlan.of(known, workflows)
                sent = await send_usage(conn, sql, plan, params["now"], exact=False)
        rules = await rules_of(declared)
        if sent is not None and rules == known:
            usage = await sent.usage(rules)
        else:
            usage = await read_usage(conn, sql, rules, workflows, params["now"], exact=False)
        return rules, _held(Admission(rules, usage, caps), workflows)

    async def _pick(
        self,
        conn: Conn,
        admission: Admission,
        read: dict[str, Any],
        first: tuple[list[Any], Any],
    ) -> tuple[list[tuple[Any, ...]], list[int], Timers]:
        """The due instances admitted, in claim order, the pauses pending read, and the timers,
        from the ``first`` read (its rows and timers, made with ``read``) and any more reads
        that the use under the locks calls for."""
        params = self._params
        limit: int = params["limit"]
        workflows: list[str] = params["workflows"]
        picked: list[tuple[Any, ...]] = []
        pauses: list[int] = []
        turned_down: list[float] = []
        seen: list[int] = []
        rows, timed = first
        timers: tuple[Any, ...] = tuple(timed) if timed is not None else (None, None, None, [])
        locked = _held(admission, workflows)  # what the use under the locks holds back
        held = {name: read[name] for name in locked}
        expected = held == locked  # the use read before the locks was the use under them
        read_all = True  # whether the reads saw every due instance the limits do not hold
        for attempt in range(_PASSES):
            if attempt:
                read = {**params, **held, "seen": seen, "limit": limit - len(picked)}
                async with conn.pipeline():
                    sent = await self._read(conn, read)
                rows = await self._rows(sent)
            refused = 0
            due = 0  # the rows read within the limit: all but the pauses pending
            for row in rows:
                seen.append(row[_PK])
                if row[_STATUS] == "waitingForPause":
                    pauses.append(row[_PK])
                    continue
                due += 1
                if admission.admit(row[_WORKFLOW], row[_KEY], bool(row[_STARTING])):
                    picked.append(tuple(row))
                else:
                    refused += 1
                    turned_down.append(row[_READY])
            if len(picked) >= limit or (due < read["limit"] and _wider(held, locked)):
                break
            # What it refused, it refused because what it took filled a limit, or because the
            # use under the locks holds back what the use before did not; a short read left out
            # what the use under the locks lets run: read again, leaving out what holds now.
            held = locked = _held(admission, workflows)
            if not held["active"]:
                break
        else:
            read_all = False
        top, next_ready, future, rate_held = timers
        hint: float | None = None
        if len(picked) < limit:
            # Nothing else is runnable now: the worker's next look is due at the earliest
            # timer, the expiry of the leases taken now among them. (What a claim that took
            # some turned down, it turned down because what it took filled a limit.)
            found = [future, params["expires"]] if picked else [future, *turned_down]
            found += [admission.reopen_at(name) for name in rate_held]
            times = [at for at in found if at is not None]
            hint = min(times) if times else None
        # The timers were read with the first read: their first starts held by rates are those
        # of the use before the locks, right only if it was the use under them.
        known = expected and (not picked or (read_all and not admission.filled_rate))
        return picked, pauses, Timers(top, next_ready, hint, known)


def _due(sql: ClaimStatements, read: Mapping[str, Any], *, lock: bool = True) -> str:
    """The read of due instances for ``read`` (``lock``: as a claim, else as a probe): a
    workflow at a time when the limits hold some of its workflows back whole (their backlog
    would be walked past in claim order)."""
    each = len(read["active"]) < len(read["workflows"])
    if lock:
        return sql.candidates_each if each else sql.candidates
    return sql.probe_each if each else sql.probe


def _wider(held: Mapping[str, list[str]], locked: Mapping[str, list[str]]) -> bool:
    """Whether a read that left out ``held`` left out nothing that ``locked`` lets run."""
    return (
        set(held["active"]) >= set(locked["active"])
        and set(held["full_keys"]) <= set(locked["full_keys"])
        and set(held["no_starts"]) <= set(locked["no_starts"])
    )


def _held(admission: Admission, workflows: Sequence[str]) -> dict[str, list[str]]:
    """The parameters of ``candidates`` that leave out what the limits hold back now."""
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
        probe = await conn.execute(_due(sql, read, lock=False), read)
        timed = await conn.execute(sql.timers, read)
        await conn.execute("COMMIT")
    found = await timed.fetchone()
    _top, _next_ready, future, rate_held = found if found is not None else (None, None, None, [])
    times = [future, *(row[_READY] for row in await probe.fetchall())]
    times += [admission.reopen_at(name) for name in rate_held]
    known = [float(at) for at in times if at is not None]
    return min(known) if known else None
