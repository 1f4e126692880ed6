"""The PostgreSQL store's claim under flow-control limits: the rules of ``stepline.flow``
executed over a few pipelined round trips, and the reads that share its view of the limits
(when a worker should look again, the limits' use now).

A claim under limits is one transaction:

1. the registered rules; under the advisory locks of the scopes the rules it knew give (one per
   limited workflow and per named limit, in one order), the keys set aside whose slots freed
   with no write bringing back their next (``parking``), then what runs and what started in
   those scopes. If the rules read differ from the ones it knew, it starts again with them.
2. The due instances that the use read does not hold back, locked ``FOR UPDATE SKIP LOCKED``,
   offered to the claim (``flow.claiming``) one at a time; with the first read, the timers.
   Another read follows a full one whose instances the claim held back by what it took, up to
   :data:`READS`.
3. Whether anything more is runnable (a look one row further, for a full claim), the leases,
   the pauses carried out, the busy keys' queues set aside, the leased rows with their
   histories, and the commit.

Under READ COMMITTED each statement takes a new snapshot: those after the advisory locks see
every claim and slot taken by a transaction that held one of them before. The statements run
with generic plans: planned anew at every call with the call's values, as PostgreSQL's default
would choose for them, they took most of a claim's time; the generic plans read no more of the
tables (``tests/store/test_postgres_reads.py`` bounds what they read).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ...flow.admission import Held
from ...flow.claiming import ClaimSession, Due, NextLook
from ...flow.parking import SetAside
from ...flow.rules import Rules, Usage, UsagePlan, rules_from_rows
from .._rows import N_INSTANCE_COLUMNS
from .claim_sql import ClaimStatements
from .parking import ParkingStatements
from .pools import Conn
from .sql import CLAIM_IN_ORDER, NO_JIT

GENERIC_PLANS = "SET LOCAL plan_cache_mode = force_generic_plan"
"""The claim's statements are prepared (psycopg prepares a statement run often): planned once
with generic plans, not anew at each call."""
ASYNC_COMMIT = "SET LOCAL synchronous_commit = off"
"""A claim lost with its commit is found again (its leases expire): it need not wait for the
commit to be durable."""
READ_ONLY = ("BEGIN", CLAIM_IN_ORDER, NO_JIT, GENERIC_PLANS)
"""What a read of the limits' use sends first: a transaction (its statements then see one
another's effects) whose estimates, inflated by the JSON functions, do not compile them, and
whose reads of timers take the first entry of an index range, as the claim's do."""
READS = 3
"""Reads of due instances a claim makes at most: each is a round trip under the locks."""
_EVENT_SEQ = N_INSTANCE_COLUMNS + 2
_HISTORY_AT = N_INSTANCE_COLUMNS + 3
"""In a ``claimed_rows`` row: the event count, and where the history's columns (steps, events)
follow the leased row's own."""
_READY = 2
"""The ``ready_at`` column of a read of due instances."""
_KEY_SEP = chr(31)
"""Between a workflow's name and a key in ``full_keys`` (as the SQL joins them)."""


@dataclass
class Leased:
    """A claim's outcome: the leased rows (``claim_sql``'s ``claimed_rows``), in claim order,
    with the ``ready_at`` each was picked at; their histories; the highest priority in use and
    the earliest timer at or above the floor (where the next floor goes); when the worker should
    look again (None: the claim cannot tell); whether a workflow claimed has fleet-wide limits;
    whether a read stepped over many instances behind full keys."""

    rows: list[tuple[Any, ...]]
    picked_at: list[float]
    histories: list[tuple[Any, ...]]
    top: int | None
    next_ready: float | None
    next_look: NextLook | None
    limited: bool
    stepped_far: bool = False


async def read_rules(conn: Conn, sql: ClaimStatements, *, first: Sequence[str] = ()) -> Rules:
    """The registered limits, in one round trip that sends the statements ``first`` first."""
    async with conn.pipeline():
        for statement in first:
            await conn.execute(statement)
        declared = await conn.execute(sql.workflow_limits)
        named = await conn.execute(sql.named_limits)
    return rules_from_rows(await declared.fetchall(), await named.fetchall())


class _UsageRead:
    """The statements that read a plan's use, sent in a pipeline; :meth:`usage` puts the
    replies together."""

    def __init__(self, plan: UsagePlan) -> None:
        self.plan = plan
        self._running: Any = None
        self._slots: Any = None
        self._starts: list[Any] = []

    async def send(self, conn: Conn, sql: ClaimStatements, now: float, *, exact: bool) -> None:
        """Send the reads (inside a pipeline); the starts stop counting at the rate's count
        unless ``exact``."""
        plan = self.plan
        if not plan.counted:
            return
        params = {"now": now, "counted": list(plan.counted), "named": list(plan.users)}
        self._running = await conn.execute(sql.running, params)
        self._slots = await conn.execute(sql.live_slots, params)
        for scope in plan.rates:
            rate = scope.rate
            read = {
                "wfs": list(scope.workflows),
                "limit": scope.name if scope.scope == "limit" else None,
                "since": now - rate.period,
                "n": rate.count,
                "cap": None if exact else rate.count,
            }
            self._starts.append(await conn.execute(sql.starts, read))

    async def usage(self, rules: Rules) -> Usage:
        if self._running is None:
            return Usage()
        started: dict[tuple[str, str], tuple[int, float | None]] = {}
        for scope, cur in zip(self.plan.rates, self._starts, strict=True):
            found = await cur.fetchone()
            count, edge = found if found is not None else (0, None)
            started[(scope.scope, scope.name)] = (int(count), None if edge is None else float(edge))
        running = await self._running.fetchall()
        slots = await self._slots.fetchall()
        return self.plan.usage(rules, running, slots, started)


async def read_usage(
    conn: Conn,
    sql: ClaimStatements,
    rules: Rules,
    workflows: Sequence[str],
    now: float,
    *,
    exact: bool,
) -> Usage:
    """What runs and what started in the scopes of ``workflows``' limits (one round trip)."""
    read = _UsageRead(UsagePlan.of(rules, workflows))
    async with conn.pipeline():
        await read.send(conn, sql, now, exact=exact)
    return await read.usage(rules)


def _held_params(held: Held, *, no_starts: bool = True) -> dict[str, Any]:
    """The parameters of a read of due instances that leave out what ``held`` holds back."""
    return {
        "active": held.active,
        "full_keys": [f"{workflow}{_KEY_SEP}{key}" for workflow, key in held.full_keys],
        "no_starts": held.no_starts if no_starts else [],
    }


def _candidates(
    sql: ClaimStatements, read: Mapping[str, Any], workflows: Sequence[str], *, lock: bool = True
) -> str:
    """The read of due instances for ``read``: a workflow at a time when the limits hold some
    of ``workflows`` back whole or their first starts by a used-up rate (their backlog would be
    walked past in claim order); ``lock``: as a claim's (else a look that takes nothing)."""
    each = len(read["active"]) < len(workflows) or bool(read["no_starts"])
    if lock:
        return sql.candidates_each if each else sql.candidates
    return sql.probe_each if each else sql.probe


def _due(row: Sequence[Any]) -> Due:
    pk, status, ready_at, _priority, workflow, key, starting = row
    return Due(
        pk,
        workflow,
        key,
        float(ready_at),
        starting=bool(starting),
        queued=status == "queued",
        pausing=status == "waitingForPause",
    )


class LimitedClaim:
    """One claim under the limits, on a connection (see the module's docstring)."""

    def __init__(
        self,
        sql: ClaimStatements,
        parking: ParkingStatements,
        params: dict[str, Any],
        *,
        known: Rules | None,
        sweep: bool,
        set_aside: SetAside,
        freeing: Mapping[str, Any],
    ) -> None:
        self._sql = sql
        self._freeing = freeing
        """``parking.freed_params`` but ``now`` (a claim's pauses carried out free slots)."""
        self._parking = parking
        self._params = params
        """The claim's parameters (``Claimer.claim``): now, floor, workflows, limit, owner,
        nonce, token, expires, lock_prefix."""
        self.rules = known
        """The rules the locks are taken by: the store's last claim's, then those read."""
        self._sweep = sweep
        """Whether to bring back the first in line of every key set aside that runs nothing
        (``parking``'s ``bring_back_idle``)."""
        self._set_aside = set_aside
        self._may_park = set_aside.may(tuple(params["workflows"]))
        self._workflows = tuple(params["workflows"])
        self._seen: list[int] = []
        self._to_park: dict[tuple[str, str], None] = {}
        self._stepped_far = False

    async def run(self, conn: Conn, caps: Mapping[str, int]) -> Leased:
        """Claim (a failure leaves the transaction open or aborted: the pool rolls it back)."""
        session = await self._admit(conn, caps)
        if session is None:  # the rules changed: under the locks of the new ones, again
            await conn.execute("ROLLBACK")
            session = await self._admit(conn, caps)
            if session is None:
                raise RuntimeError("the registered limits changed twice during one claim")
        top, next_ready, future, rate_held = await self._read_due(conn, session)
        more: bool | None = None  # for a full claim: whether more is runnable
        look = False
        if session.full:
            if not session.leaves_out().active:
                more = False
            elif self._may_park:  # what the look steps over may be set aside in this claim
                more = await self._look(conn, session)
            else:
                look = True
        rows, histories, looked = await self._lease(conn, session, look=look)
        if look:
            more = looked
        self._set_aside.claimed(self._workflows, self._stepped_far)
        expires = self._params["expires"] if session.taken else None
        timer = min((at for at in (future, expires) if at is not None), default=None)
        order = {due.pk: index for index, due in enumerate(session.taken)}
        rows.sort(key=lambda row: order[row[0]])
        histories.sort(key=lambda row: order[row[0]])
        return Leased(
            rows,
            [session.taken[order[row[0]]].ready_at for row in rows],
            histories,
            top,
            next_ready,
            session.next_look(more=more, timer=timer, rate_held=rate_held),
            any(session.rules.limited(name) for name in self._workflows),
        )

    async def _admit(self, conn: Conn, caps: Mapping[str, int]) -> ClaimSession | None:
        """Round trip 1: the rules, the locks and the use; the claim's session, or None if the
        rules read are not those whose locks the transaction took."""
        known = self.rules
        plan = None if known is None else UsagePlan.of(known, self._workflows)
        read = None if plan is None else _UsageRead(plan)
        async with conn.pipeline():
            for statement in ("BEGIN", CLAIM_IN_ORDER, NO_JIT, GENERIC_PLANS, ASYNC_COMMIT):
                await conn.execute(statement)
            declared = await conn.execute(self._sql.workflow_limits)
            named = await conn.execute(self._sql.named_limits)
            if known is not None and read is not None:
                await self._locked_reads(conn, known, read)
        rules = rules_from_rows(await declared.fetchall(), await named.fetchall())
        if rules != known:
            self.rules = rules
            if plan is not None and plan.locks:
                return None
            read = _UsageRead(UsagePlan.of(rules, self._workflows))
            async with conn.pipeline():
                await self._locked_reads(conn, rules, read)
        assert read is not None
        usage = await read.usage(rules)
        params = self._params
        return ClaimSession(rules, usage, self._workflows, params["limit"], caps, reads=READS)

    async def _locked_reads(self, conn: Conn, rules: Rules, read: _UsageRead) -> None:
        """Send the locks of the plan, the bring-backs of keys freed unnoticed, and the use."""
        params = self._params
        if read.plan.locks:
            locks = {"lock_prefix": params["lock_prefix"], "locks": list(read.plan.locks)}
            await conn.execute(self._sql.lock_limits, locks)
        keyed = [name for name in self._workflows if rules.keyed(name)]
        if keyed:
            since = params["floor"] if params["floor"] is not None else float("-inf")
            back = {"keyed": keyed, "since": since, "now": params["now"]}
            await conn.execute(self._parking.bring_back_expired, back)
            if self._sweep:
                await conn.execute(self._parking.bring_back_idle, back)
        await read.send(conn, self._sql, params["now"], exact=False)

    async def _read_due(
        self, conn: Conn, session: ClaimSession
    ) -> tuple[int | None, float | None, float | None, list[str]]:
        """Round trip 2 (and more, up to :data:`READS`): the due instances offered to the
        claim; with the first, the timers: the highest priority in use, the earliest timer at
        or above the floor, the earliest after now, and the workflows whose first starts a
        used-up rate holds back."""
        timers: Any = None
        while True:
            want = session.remaining
            read = self._read(session, want)
            async with conn.pipeline():
                walk = await self._walking(conn, read)
                cur = await conn.execute(_candidates(self._sql, read, self._workflows), read)
                walked = await self._walking(conn, read)
                if timers is None:
                    timers = await conn.execute(self._sql.timers, read)
            rows = await cur.fetchall()
            due = 0
            for row in rows:
                self._seen.append(row[0])
                due += row[1] != "waitingForPause"
                session.offer(_due(row))
            await self._measure(walk, walked, len(rows), read)
            if not session.read_more(want, due):
                break
        found = await timers.fetchone()
        top, next_ready, future, rate_held = found if found is not None else (None, None, None, [])
        return top, next_ready, future, list(rate_held or [])

    def _read(self, session: ClaimSession, want: int) -> dict[str, Any]:
        """The parameters of a read of ``want`` due instances after those already read."""
        return {
            **self._params,
            "limit": want,
            "seen": self._seen,
            **_held_params(session.leaves_out()),
        }

    async def _walking(self, conn: Conn, read: Mapping[str, Any]) -> Any:
        """The rows fetched so far through the indexes of ``instances``, when the read leaves
        out full keys (what it stepped over behind them is measured)."""
        if not read["full_keys"]:
            return None
        return await conn.execute(self._sql.walked)

    async def _measure(self, before: Any, after: Any, rows: int, read: Mapping[str, Any]) -> None:
        """Note whether a read stepped over many instances behind the full keys it left out;
        if the claims before it did too, those keys' queues are to be set aside."""
        if before is None or after is None:
            return
        (start,) = await before.fetchone()
        (end,) = await after.fetchone()
        if not self._set_aside.stepped_over(int(end) - int(start) - rows):
            return
        self._stepped_far = True
        if self._may_park:
            for key in read["full_keys"]:
                workflow, _, name = key.partition(_KEY_SEP)
                self._to_park[(workflow, name)] = None

    async def _look(self, conn: Conn, session: ClaimSession) -> bool:
        """Whether a due instance the limits let run is left after a full claim, in a round
        trip of its own: a read of one row more (what it steps over may be set aside in the
        same claim)."""
        async with conn.pipeline():
            sent = await self._send_look(conn, session)
        return await self._looked(sent)

    async def _send_look(self, conn: Conn, session: ClaimSession) -> tuple[Any, ...]:
        """Send the read of one row more after a full claim (locked, as a claim's reads are,
        so that it never waits for another claim's rows)."""
        read = self._read(session, 1)
        walk = await self._walking(conn, read)
        cur = await conn.execute(_candidates(self._sql, read, self._workflows), read)
        walked = await self._walking(conn, read)
        return read, walk, cur, walked

    async def _looked(self, sent: tuple[Any, ...]) -> bool:
        read, walk, cur, walked = sent
        rows = await cur.fetchall()
        await self._measure(walk, walked, len(rows), read)
        return any(row[1] != "waitingForPause" for row in rows)

    async def _lease(
        self, conn: Conn, session: ClaimSession, *, look: bool
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], bool | None]:
        """The last round trip: the look after a full claim (``look``), the leases and the
        pauses carried out, the busy keys' queues set aside, the pauses' keys' next brought
        back, the leased rows with their histories, the commit. Returns the leased rows, their
        histories, and what the look found (None: none)."""
        params = self._params
        taken = [due.pk for due in session.taken]
        async with conn.pipeline():
            sent = await self._send_look(conn, session) if look else None
            if taken or session.pauses:
                leases = {**params, "pks": taken, "pauses": session.pauses}
                await conn.execute(self._sql.lease, leases)
            if self._to_park:
                keys = [
                    {"workflow": workflow, "key": key, "cap": session.rules.key_limit(workflow)}
                    for workflow, key in self._to_park
                ]
                park = {"now": params["now"], "keys": orjson.dumps(keys).decode()}
                await conn.execute(self._parking.park, park)
            if session.pauses:
                back = {"pks": session.pauses, **self._freeing}
                await conn.execute(self._parking.freed_of, back)
            leasing = await conn.execute(self._sql.claimed_rows, params)
            await conn.execute("COMMIT")
        more = None if sent is None else await self._looked(sent)
        found = await leasing.fetchall()
        rows = [tuple(row[:_HISTORY_AT]) for row in found]
        histories = [(row[0], row[_EVENT_SEQ], *row[_HISTORY_AT:]) for row in found]
        return rows, histories, more


async def next_wakeup(
    conn: Conn,
    sql: ClaimStatements,
    workflows: Sequence[str],
    now: float,
    routed: Mapping[str, Any],
) -> float | None:
    """``Store.next_wakeup`` for workflows of which some have fleet-wide limits: their timers
    and leases after ``now``, what a claim would take now, and the reopening of a rate that
    holds a first start back. ``routed``: the parameters of the versions it looks at."""
    rules = await read_rules(conn, sql, first=READ_ONLY)
    usage = await read_usage(conn, sql, rules, workflows, now, exact=False)
    session = ClaimSession(rules, usage, workflows, 1)
    read = {
        "now": now,
        "floor": None,
        "workflows": list(workflows),
        "seen": [],
        "limit": 1,
        **routed,
        **_held_params(session.leaves_out()),
    }
    async with conn.pipeline():
        probe = await conn.execute(_candidates(sql, read, workflows, lock=False), read)
        timed = await conn.execute(sql.timers, read)
        await conn.execute("COMMIT")
    found = await timed.fetchone()
    _top, _next_ready, future, rate_held = found if found is not None else (None, None, None, [])
    times = [future, *(row[_READY] for row in await probe.fetchall())]
    times += session.reopenings(list(rate_held or []))
    known = [float(at) for at in times if at is not None]
    return min(known) if known else None
