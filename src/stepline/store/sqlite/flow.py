"""The SQLite store's flow control: it executes the rules of ``stepline.flow`` under its write
lock. Which due instances a claim takes (``flow.claiming``), the busy keys' queues set aside and
brought back (``flow.parking``), when a worker should look again, the limits' use now, and the
slots of named limits that steps take and give back (``flow.slots``).

Claims run inside ``BEGIN IMMEDIATE`` (the group commit of ``db``): what a claim reads of what
runs and what started cannot change before its leases are written, so the rules apply as they
are, one instance at a time in claim order, and concurrent claims of several processes never
together exceed a limit.

- The rules (``workflows.limits`` and ``limits``) are read at every claim, since another
  process may register new ones; a database without limits returns no row.
- What runs and what started (``Usage``) is read only when a workflow of the claim has
  fleet-wide limits, and only for the scopes it uses.
- Due instances are read one priority at a time, in ``ready_at`` order, a page at a time, and
  offered to the claim one row at a time. What the limits hold back is left out of the SQL: a
  workflow with no room left is dropped from the read (the others are then read a workflow at
  a time, past its backlog), and a workflow whose rate is used up is read only for its
  instances that started before (a rate counts first starts), through their own index: the
  first starts waiting for the rate are not walked.
- A queued instance whose key is full is set aside by the claim that reads it
  (``park_behind_keys``); the first in line of each key alone has a recheck time. Instances of
  a full key that are not queued (woken from a sleep, say) are filtered out of the SQL instead.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from ...errors import LeaseLostError, UnknownLimitError
from ...flow.admission import limit_states as states_of
from ...flow.claiming import ClaimSession, Due, NextLook, Offer
from ...flow.parking import SQLITE_SET_ASIDE_OVER, recheck_time
from ...flow.rules import RateScope, Rules, Usage, UsagePlan, rules_from_rows
from ...flow.slots import SlotUse, slot_wait
from ...limits import Limit, Rate
from ...records import LimitState
from .._rows import N_INSTANCE_COLUMNS, InstanceRow
from ..base import Lease
from ..flow import FlowStore
from ..types import Routing
from . import flow_sql, sql
from .db import Database

_STATUS = InstanceRow._fields.index("status")
_WORKFLOW = InstanceRow._fields.index("workflow")
_KEY = InstanceRow._fields.index("key")
_READY = N_INSTANCE_COLUMNS + 3
"""The due row's own ``ready_at`` (:func:`sql.claim_due`), then whether it would start."""
_STARTING = N_INSTANCE_COLUMNS + 4
_QUEUED = N_INSTANCE_COLUMNS + 5
_MAX_KEYS = 400
"""Full keys a read leaves out in its SQL at most; the claim skips any others itself."""


def read_rules(c: sqlite3.Connection) -> Rules:
    """The registered limits: every workflow's that has some, and the named limits."""
    return rules_from_rows(c.execute(flow_sql.WORKFLOW_LIMITS), c.execute(flow_sql.NAMED_LIMITS))


def read_usage(
    c: sqlite3.Connection,
    rules: Rules,
    workflows: Sequence[str],
    now: float,
    *,
    exact: bool = False,
) -> Usage:
    """What runs and what started in the scopes of ``workflows``' fleet-wide limits (their own,
    their keys', their named limits', counting every workflow that uses one). ``started``
    stops counting at the rate's count unless ``exact``: all a claim needs to know."""
    plan = UsagePlan.of(rules, workflows)
    if not plan.counted:
        return Usage()
    running = c.execute(flow_sql.running(len(plan.counted)), (*plan.counted, now)).fetchall()
    slots = [
        (limit, workflow, held, holders)
        for limit in plan.users
        for workflow, held, holders in c.execute(flow_sql.LIVE_SLOTS, (now, limit))
    ]
    starts: dict[tuple[str, str], tuple[int, float | None]] = {
        (scope.scope, scope.name): _starts(c, scope, now, exact) for scope in plan.rates
    }
    return plan.usage(rules, running, slots, starts)


def _starts(
    c: sqlite3.Connection, scope: RateScope, now: float, exact: bool
) -> tuple[int, float | None]:
    """The first starts of the scope's workflows (and the slots taken of its named limit)
    within the rate's period before ``now`` (a start at ``now - period`` no longer counts), and
    the ``count``-th latest if there are that many."""
    rate, workflows = scope.rate, scope.workflows
    limit = scope.name if scope.scope == "limit" else None
    since = now - rate.period
    latest: list[float] = []
    if workflows:
        params = (*workflows, since, rate.count)
        latest = [at for (at,) in c.execute(flow_sql.recent_starts(len(workflows)), params)]
    if limit is not None:
        taken = c.execute(flow_sql.RECENT_LIMIT_STARTS, (limit, since, rate.count))
        latest = sorted([*latest, *(at for (at,) in taken)], reverse=True)[: rate.count]
    if len(latest) < rate.count:
        return len(latest), None
    started = rate.count
    if exact:
        started = 0
        if workflows:
            (started,) = c.execute(
                flow_sql.count_starts(len(workflows)), (*workflows, since)
            ).fetchone()
        if limit is not None:
            (taken_n,) = c.execute(flow_sql.COUNT_LIMIT_STARTS, (limit, since)).fetchone()
            started += taken_n
    return started, latest[-1]


def claim_session(
    c: sqlite3.Connection,
    rules: Rules,
    workflows: Sequence[str],
    limit: int,
    now: float,
    caps: Mapping[str, int] | None,
) -> ClaimSession:
    """A claim's session: the rules, and the use of the scopes of ``workflows``' limits."""
    limited = [name for name in workflows if rules.limited(name)]
    usage = read_usage(c, rules, limited, now) if limited or caps else Usage()
    return ClaimSession(rules, usage, workflows, limit, caps)


def pick(
    c: sqlite3.Connection,
    session: ClaimSession,
    now: float,
    head: tuple[float, float, float, str, int],
    routes: Routing | None = None,
    *,
    probe: bool = False,
) -> list[Sequence[Any]]:
    """Offer the due instances of the session's workflows to it in claim order; return the
    rows of :func:`sql.claim_due` it took, in claim order (nothing is written). ``head``: the
    claim's parameters of :func:`sql.claim_due` (now, now, lease expiry, owner, lease token).
    A ``probe`` (:func:`next_wakeup`) reads the instances a rate holds back too, so as to learn
    that one is, and leaves full keys' queues alone. ``routes``: the (workflow, version) pairs
    and patches it may take (``store.types.Routing``; None: every version and patch)."""
    workflows = session.workflows
    if session.limited:
        for (pk,) in c.execute(sql.pauses_due(len(workflows)), (*workflows, now)):
            session.offer(Due(pk, "", None, now, starting=False, queued=False, pausing=True))
    rows: dict[int, Sequence[Any]] = {}
    rates = probe  # read the first starts a used-up rate holds back (until one is refused)
    held = _leaves_out(session, rates)
    (priority,) = c.execute(sql.FIRST_PRIORITY).fetchone()
    while priority is not None and not session.full and held[0]:
        after: tuple[float, int] | None = None
        while not session.full and held[0]:
            page = session.remaining
            active, keys, no_starts = held
            # With some workflows held back whole, their due instances are in the ready index's
            # order too: the others' are read a workflow at a time instead of walked past them.
            # So are those of workflows whose rate is used up, but for their first starts, and
            # a probe's read, which needs any one instance, not the claim order: the ready
            # index would walk the backlog of every workflow the probe does not look at.
            resuming = [name for name in active if name in no_starts]
            read_whole = [name for name in active if name not in no_starts]
            each = probe or len(active) < len(workflows) or bool(resuming)
            statement = sql.claim_due(
                len(active),
                excluding=len(keys),
                after=after is not None,
                each=each,
                parking=not probe,
                resuming=len(resuming),
                routing=None if routes is None else routes.shape,
            )
            flat_keys = [part for pair in keys for part in pair]
            params = (
                *head,
                priority,
                now,
                *read_whole,
                *resuming,
                *(routes.params if routes else ()),
                *flat_keys,
                *(after or ()),
                page,
            )
            read, changed = 0, False
            # Rows are stepped one at a time: once the claim holds one back because what it
            # took filled a key or a limit, the next read leaves that out in its SQL; stepping
            # on through this read would fetch every due row of that key only to refuse it.
            for row in c.execute(statement, params):
                read += 1
                offer = session.offer(_due(row))
                if offer is Offer.TAKEN:
                    rows[row[0]] = row
                elif offer is not Offer.PAUSED:
                    rates = False  # a probe has learnt what it read held back first starts for
                    now_held = _leaves_out(session, rates)
                    if now_held != held:
                        held, after, changed = now_held, (row[_READY], row[0]), True
                        break
            if changed:
                continue
            if read < page or session.full:
                break  # nothing more is due, or the claim is full: what follows would go unused
            after = (row[_READY], row[0])
            held = _leaves_out(session, rates)
        if session.full:
            break
        (priority,) = c.execute(sql.NEXT_PRIORITY, (priority,)).fetchone()
    return [rows[due.pk] for due in session.taken]


def _due(row: Sequence[Any]) -> Due:
    return Due(
        row[0],
        row[_WORKFLOW],
        row[_KEY],
        row[_READY],
        starting=bool(row[_STARTING]),
        queued=bool(row[_QUEUED]),
        pausing=row[_STATUS] == "waitingForPause",
    )


def _leaves_out(
    session: ClaimSession, rates: bool
) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """What a read leaves out: the session's, but for ``rates`` the first starts that a used-up
    rate holds back (a probe reads one, to learn that one waits for the rate)."""
    held = session.leaves_out()
    return held.active, held.full_keys[:_MAX_KEYS], [] if rates else held.no_starts


def park(c: sqlite3.Connection, session: ClaimSession, now: float) -> None:
    """Set aside the queued instances the claim held back behind full keys (every one it
    read: ``flow.parking``); the first in line of each of those keys gets a recheck time."""
    parked = session.behind_full_keys
    if len(parked) <= SQLITE_SET_ASIDE_OVER:
        return
    c.execute(flow_sql.park_behind_keys(len(parked)), tuple(parked))
    recheck = recheck_time(now)
    for workflow, key in dict.fromkeys(parked.values()):
        c.execute(flow_sql.RECHECK_FIRST, (recheck, workflow, key))


class Freed(NamedTuple):
    """What a write that stopped an instance running made ready again."""

    key_next: bool
    """Its key's first in line, set aside, came back."""
    limit_waiters: bool
    """An instance parked on a named limit its workflow lists was woken."""


def freed(
    c: sqlite3.Connection,
    pk: int,
    workflow: str,
    key: str | None,
    now: float,
    *,
    parks_on: str | None = None,
) -> Freed:
    """Instance ``pk`` of ``workflow`` (with ``key``) stopped running, which frees its slots:
    bring back its key's first in line, if one is set aside, and wake the first instance parked
    on each named limit with a concurrency that its workflow lists, but ``parks_on`` (the limit
    it parks on now: it was refused a slot there). Every write that stops an instance running
    calls this (``flow.parking``'s rule)."""
    back = bring_back(c, workflow, key, now)
    woken = c.execute(flow_sql.WAKE_PARKED_ON_LISTED, (now, now, pk, workflow, parks_on))
    return Freed(back, bool(woken.rowcount))


def freed_pk(c: sqlite3.Connection, pk: int, now: float) -> Freed:
    """:func:`freed` for instance ``pk``, read by its primary key."""
    found = c.execute(flow_sql.KEY_OF, (pk,)).fetchone()
    return Freed(False, False) if found is None else freed(c, pk, found[0], found[1], now)


def bring_back(c: sqlite3.Connection, workflow: str, key: str | None, now: float) -> bool:
    """A slot of ``key`` freed: bring back its first in line, if one is set aside, and give
    the next in line a recheck time; whether one came back."""
    if key is None or not c.execute(flow_sql.UNPARK_NEXT, (workflow, key)).rowcount:
        return False
    c.execute(flow_sql.RECHECK_FIRST, (recheck_time(now), workflow, key))
    return True


def bring_back_expired(
    c: sqlite3.Connection, rules: Rules, workflows: Sequence[str], now: float
) -> None:
    """Before a claim reads them: bring back the first in line of each key of ``workflows``
    whose instances all lost their leases (``flow_sql.expired_keys``)."""
    keyed = [name for name in workflows if rules.keyed(name)]
    if keyed:
        for workflow, key in c.execute(flow_sql.expired_keys(len(keyed)), (*keyed, now, now)):
            bring_back(c, workflow, key, now)


def next_wakeup(
    c: sqlite3.Connection,
    workflows: Sequence[str],
    now: float,
    routes: Routing | None = None,
) -> float | None:
    """``Store.next_wakeup``: the earliest ``ready_at`` of the workflows without fleet-wide
    limits (one read when none has any); for the others, their timers and leases after ``now``,
    what a claim would take now, and the reopening of a rate that holds an instance back."""
    rules = read_rules(c)
    limited = [name for name in workflows if rules.limited(name)]
    if not limited:
        return earliest(c, workflows, routes)
    free = [name for name in workflows if not rules.limited(name)]
    found = [earliest(c, free, routes) if free else None, earliest(c, limited, routes, after=now)]
    probe = claim_session(c, rules, limited, 1, now, None)
    taken = pick(c, probe, now, (now, now, now, "", 0), routes, probe=True)
    if probe.pauses:
        found.append(now)
    if taken:
        found.append(taken[0][_READY])
    elif probe.admission is not None and probe.admission.held_by_rate:
        found += probe.reopenings(None)
    times = [at for at in found if at is not None]
    return min(times) if times else None


def next_look(
    c: sqlite3.Connection,
    session: ClaimSession,
    now: float,
    routes: Routing | None = None,
) -> NextLook | None:
    """When the worker should look again after a claim at ``now`` (its leases written: their
    expiry is a timer), if the claim can tell; a full claim only if it left every workflow
    held back whole (a look further, under the write lock, would cost more than it saves)."""
    if session.full and not session.held_all():
        return None
    return session.next_look(
        more=None, timer=earliest(c, session.workflows, routes, after=now), rate_held=None
    )


def earliest(
    c: sqlite3.Connection,
    workflows: Sequence[str],
    routes: Routing | None = None,
    *,
    after: float | None = None,
) -> float | None:
    """The earliest ``ready_at`` of ``workflows`` (of what ``routes`` takes only, if given; after
    ``after``, if given)."""
    routed = routes.params if routes else ()
    params = (*workflows, *routed) if after is None else (after, *workflows, *routed)
    shape = None if routes is None else routes.shape
    (found,) = c.execute(
        sql.next_wakeup(len(workflows), after=after is not None, routing=shape), params
    ).fetchone()
    return None if found is None else float(found)


def limit_states(
    c: sqlite3.Connection, workflow: str, key: str | None, now: float
) -> list[LimitState]:
    """``Store.limit_states``, from the rules and the exact use of ``workflow``'s scopes."""
    rules = read_rules(c)
    return states_of(workflow, key, rules, read_usage(c, rules, [workflow], now, exact=True))


# -- named limits on steps -------------------------------------------------------------------


def acquire_limit(
    c: sqlite3.Connection, lease: Lease, limit: str, step: str, now: float
) -> float | None:
    """``Store.acquire_limit``, under the write lock (so acquisitions and claims of one limit
    never together exceed it)."""
    fence = c.execute(flow_sql.FENCE_LIMIT, (lease.pk, lease.token, lease.owner)).fetchone()
    if fence is None:
        raise LeaseLostError(f"lease on instance {lease.pk} lost by worker {lease.owner}")
    if c.execute(flow_sql.SLOT_HELD, (limit, lease.pk, step, lease.token)).fetchone() is not None:
        return None  # a retried call whose reply was lost
    found = c.execute(flow_sql.LIMIT_BY_NAME, (limit,)).fetchone()
    if found is None:
        raise UnknownLimitError(f"limit {limit!r} is not defined")
    concurrency, count, period = found
    declared = Limit(
        limit, concurrency=concurrency, rate=None if count is None else Rate(count, period)
    )
    c.execute(flow_sql.DELETE_DEAD_SLOTS, (limit,))
    c.execute(flow_sql.PRUNE_LIMIT_STARTS, (limit, now - (period if count is not None else 0.0)))
    wait = slot_wait(declared, _slot_use(c, declared, lease, fence, now))
    if wait is not None:
        return wait
    if declared.rate is not None:
        c.execute(flow_sql.LOG_LIMIT_START, (limit, now))
    c.execute(flow_sql.TAKE_SLOT, (limit, lease.pk, step, lease.token, now))
    return None


def _slot_use(
    c: sqlite3.Connection, limit: Limit, lease: Lease, fence: Sequence[Any], now: float
) -> SlotUse:
    """The use of ``limit`` for a step of the leased instance (``fence``: its workflow and
    lease expiry) asking for a slot."""
    rules = read_rules(c)
    users = [name for name, declared in rules.workflows.items() if limit.name in declared.limits]
    running = 0
    if users:
        running = sum(n for _w, _k, n in c.execute(flow_sql.running(len(users)), (*users, now)))
    for holder, held, holders in c.execute(flow_sql.LIVE_SLOTS, (now, limit.name)):
        running += held - (holders if holder in users else 0)
    workflow, expires = fence
    (own,) = c.execute(flow_sql.OWN_SLOTS, (limit.name, lease.pk, lease.token)).fetchone()
    counted = workflow in users and expires is not None and expires > now and own == 0
    started, edge = 0, None
    if limit.rate is not None:
        scope = RateScope("limit", limit.name, tuple(users), limit.rate)
        started, edge = _starts(c, scope, now, False)
    return SlotUse(running, counted, started, edge)


def release_limit(c: sqlite3.Connection, lease: Lease, limit: str, step: str, now: float) -> bool:
    """``Store.release_limit``: whether a slot was given back (then the instance parked on the
    limit that would wake first is ready now)."""
    if not c.execute(flow_sql.RELEASE_SLOT, (limit, lease.pk, step, lease.token)).rowcount:
        return False
    c.execute(flow_sql.WAKE_PARKED, (now, limit, now))
    return True


class SqliteFlow(FlowStore):
    """The flow control operations beyond the claim on SQLite (``Store.flow``)."""

    def __init__(
        self, db: Database, now: Callable[[], float], notify_ready: Callable[[], None]
    ) -> None:
        self._db = db
        self._now = now
        self._notify_ready = notify_ready

    async def acquire_limit(self, lease: Lease, limit: str, step: str, now: float) -> float | None:
        retry_at: float | None = await self._db.write(
            lambda c: acquire_limit(c, lease, limit, step, now)
        )
        return retry_at

    async def release_limit(self, lease: Lease, limit: str, step: str, now: float) -> None:
        released: bool = await self._db.write(lambda c: release_limit(c, lease, limit, step, now))
        if released:
            self._notify_ready()

    async def limit_states(self, workflow: str, key: str | None) -> list[LimitState]:
        now = self._now()
        states: list[LimitState] = await self._db.read_with(
            lambda c: limit_states(c, workflow, key, now)
        )
        return states

    async def running_by_worker(
        self, workflows: Sequence[str], now: float
    ) -> dict[tuple[str, str], int]:
        if not workflows:
            return {}
        rows = await self._db.read(flow_sql.running_by_worker(len(workflows)), (*workflows, now))
        return {(owner, workflow): count for owner, workflow, count in rows}
