"""The SQLite store's flow control: which due instances a claim takes under the registered
limits, when a worker should look again, the limits' use now, and the slots of named limits
that steps take and give back.

Claims run inside ``BEGIN IMMEDIATE`` (the group commit of ``db``): what a claim reads of what
runs and what started cannot change before its leases are written, so the reference rules of
``store/_admission`` apply as they are, one instance at a time in claim order, and concurrent
claims of several processes never together exceed a limit.

- The rules (``workflows.limits`` and ``limits``) are read at every claim, since another
  process may register new ones; a database without limits returns no row.
- What runs and what started (``Usage``) is read only when a workflow of the claim has
  fleet-wide limits, and only for the scopes it uses.
- Due instances are read one priority at a time, in ``ready_at`` order, a page at a time. What
  the limits hold back is left out of the SQL: a workflow with no room left is dropped from
  the read (the others are then read a workflow at a time, past its backlog), and a workflow
  whose rate is used up is read only for its instances that started before (a rate counts
  first starts), through their own index: the first starts waiting for the rate are not
  walked.
- A queued instance whose key is full is set aside by the claim that reads it (``sql``'s
  ``park_behind_keys``): out of the ready indexes, its place in line kept, until an instance of
  its key stops running and brings back the first in line (:func:`bring_back`); the first in
  line of each key alone has a recheck time. A busy key's backlog is so read once, not by
  every claim. Instances of a full key that are not queued (woken from a sleep, say) are
  filtered out of the SQL instead.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import LeaseLostError, UnknownLimitError
from ...limits import Rate
from ...records import LimitState
from .._admission import (
    Admission,
    RateScope,
    Rules,
    Usage,
    UsagePlan,
    recheck_time,
    reopen_time,
    rules_from_rows,
)
from .._admission import limit_states as states_of
from .._rows import N_INSTANCE_COLUMNS, InstanceRow
from ..base import Lease, Store
from . import sql
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


@dataclass
class Picked:
    """What a claim takes: the rows of :func:`sql.claim_due` it admitted, in claim order, and
    the pauses pending it carries out (pks)."""

    rows: list[Sequence[Any]] = field(default_factory=list)
    pauses: dict[int, None] = field(default_factory=dict)
    held_by_rate: bool = False
    """Whether a rate held back a due instance."""
    filled_rate: bool = False
    """Whether a start it took used up a rate (``reopens`` does not know)."""
    reopens: float | None = None
    """When the earliest used-up rate of the claim's scopes lets the next start."""
    held_all: bool = False
    """Whether the claim took all it asked for and so left every workflow of the claim held back
    whole (by a concurrency limit or the worker's cap): none of them can start until one of
    theirs ends."""
    parked: dict[int, tuple[str, str]] = field(default_factory=dict)
    """The queued instances it found behind a full key, to set aside: pk -> (workflow, key)."""


def read_rules(c: sqlite3.Connection) -> Rules:
    """The registered limits: every workflow's that has some, and the named limits."""
    return rules_from_rows(c.execute(sql.WORKFLOW_LIMITS), c.execute(sql.NAMED_LIMITS))


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
    running = c.execute(sql.running(len(plan.counted)), (*plan.counted, now)).fetchall()
    slots = [
        (limit, workflow, held, holders)
        for limit in plan.users
        for workflow, held, holders in c.execute(sql.LIVE_SLOTS, (now, limit))
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
        latest = [at for (at,) in c.execute(sql.recent_starts(len(workflows)), params)]
    if limit is not None:
        taken = c.execute(sql.RECENT_LIMIT_STARTS, (limit, since, rate.count))
        latest = sorted([*latest, *(at for (at,) in taken)], reverse=True)[: rate.count]
    if len(latest) < rate.count:
        return len(latest), None
    started = rate.count
    if exact:
        started = 0
        if workflows:
            (started,) = c.execute(sql.count_starts(len(workflows)), (*workflows, since)).fetchone()
        if limit is not None:
            (taken_n,) = c.execute(sql.COUNT_LIMIT_STARTS, (limit, since)).fetchone()
            started += taken_n
    return started, latest[-1]


def pick(
    c: sqlite3.Connection,
    workflows: Sequence[str],
    limit: int,
    now: float,
    head: tuple[float, float, float, str, int],
    caps: Mapping[str, int] | None,
    rules: Rules,
    *,
    probe: bool = False,
) -> Picked:
    """The due instances of ``workflows`` a claim at ``now`` takes, at most ``limit``, and the
    pauses it carries out; nothing is written. ``head``: the claim's parameters of
    :func:`sql.claim_due` (now, now, lease expiry, owner, lease token). A ``probe``
    (:func:`next_wakeup`) reads one instance a rate holds back, so as to learn that one is;
    any other pick also reports the queued instances of full keys it read, to set aside."""
    picked = Picked()
    limited = [name for name in workflows if rules.limited(name)]
    admission: Admission | None = None
    usage = Usage()
    if limited or caps:
        usage = read_usage(c, rules, limited, now)
        if usage.reopens:
            picked.reopens = min(usage.reopens.values())
        admission = Admission(rules, usage, caps)
        for (pk,) in c.execute(sql.pauses_due(len(workflows)), (*workflows, now)):
            picked.pauses[pk] = None
    active: list[str] = list(workflows)
    keys: list[tuple[str, str]] = []
    no_starts: list[str] = []
    if admission is not None:
        active, keys, no_starts = _held(admission, workflows)
        if probe:
            no_starts = []
    remaining = limit
    (priority,) = c.execute(sql.FIRST_PRIORITY).fetchone()
    while priority is not None and remaining > 0 and active:
        after: tuple[float, int] | None = None
        while remaining > 0 and active:
            page = remaining
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
            )
            flat_keys = [part for pair in keys for part in pair]
            params = (
                *head,
                priority,
                now,
                *read_whole,
                *resuming,
                *flat_keys,
                *(after or ()),
                page,
            )
            read, held_more = 0, False
            # Rows are stepped one at a time: once admission refuses one, what the claim took
            # filled a key or a limit, which the next read leaves out in its SQL; stepping on
            # through this read would fetch every due row of that key only to refuse it.
            for row in c.execute(statement, params):
                read += 1
                if row[_STATUS] == "waitingForPause":
                    picked.pauses[row[0]] = None
                elif admission is None or admission.admit(
                    row[_WORKFLOW], row[_KEY], bool(row[_STARTING])
                ):
                    picked.rows.append(row)
                    remaining -= 1
                else:
                    if not probe and row[_QUEUED] and admission.key_full(row[_WORKFLOW], row[_KEY]):
                        # Set aside, it is out of every later read until its key frees.
                        picked.parked[row[0]] = (row[_WORKFLOW], row[_KEY])
                        if admission.open(row[_WORKFLOW], bool(row[_STARTING])):
                            continue  # nothing else changed: step on
                    held = _held(admission, workflows)
                    if held != (active, keys, no_starts):
                        active, keys, no_starts = held
                        after, held_more = (row[_READY], row[0]), True
                        break
            if held_more:
                continue
            if read < page or remaining <= 0:
                break  # nothing more is due, or the claim is full: what follows would go unused
            after = (row[_READY], row[0])
            if admission is not None:
                active, keys, no_starts = _held(admission, workflows)
        if remaining <= 0:
            break
        (priority,) = c.execute(sql.NEXT_PRIORITY, (priority,)).fetchone()
    if admission is not None:
        picked.held_by_rate, picked.filled_rate = admission.held_by_rate, admission.filled_rate
        # Only a full claim asks (a short one read all that is due; a probe is no claim).
        picked.held_all = not probe and remaining <= 0 and not admission.held(workflows).active
    return picked


def park(c: sqlite3.Connection, picked: Picked, now: float) -> None:
    """Set aside the instances ``picked`` found behind full keys; the first in line of each
    of those keys gets a recheck time."""
    c.execute(sql.park_behind_keys(len(picked.parked)), tuple(picked.parked))
    recheck = recheck_time(now)
    for workflow, key in dict.fromkeys(picked.parked.values()):
        c.execute(sql.RECHECK_FIRST, (recheck, workflow, key))


def bring_back(c: sqlite3.Connection, workflow: str, key: str | None, now: float) -> bool:
    """A slot of ``key`` freed: bring back its first in line, if one is set aside, and give
    the next in line a recheck time; whether one came back."""
    if key is None or not c.execute(sql.UNPARK_NEXT, (workflow, key)).rowcount:
        return False
    c.execute(sql.RECHECK_FIRST, (recheck_time(now), workflow, key))
    return True


def bring_back_of(c: sqlite3.Connection, pk: int, now: float) -> bool:
    """:func:`bring_back` for the key of instance ``pk``."""
    found = c.execute(sql.KEY_OF, (pk,)).fetchone()
    return found is not None and bring_back(c, found[0], found[1], now)


def bring_back_expired(
    c: sqlite3.Connection, rules: Rules, workflows: Sequence[str], now: float
) -> None:
    """Before a claim reads them: bring back the first in line of each key of ``workflows``
    whose instances all lost their leases (``sql.expired_keys``)."""
    keyed = [name for name in workflows if rules.keyed(name)]
    if keyed:
        for workflow, key in c.execute(sql.expired_keys(len(keyed)), (*keyed, now, now)):
            bring_back(c, workflow, key, now)


def _held(
    admission: Admission, workflows: Sequence[str]
) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    held = admission.held(workflows)
    return held.active, held.full_keys[:_MAX_KEYS], held.no_starts


def next_wakeup(c: sqlite3.Connection, workflows: Sequence[str], now: float) -> float | None:
    """``Store.next_wakeup``: the earliest ``ready_at`` of the workflows without fleet-wide
    limits (one read when none has any); for the others, their timers and leases after ``now``,
    what a claim would take now, and the reopening of a rate that holds an instance back."""
    rules = read_rules(c)
    limited = [name for name in workflows if rules.limited(name)]
    if not limited:
        return _earliest(c, workflows)
    free = [name for name in workflows if not rules.limited(name)]
    found = [_earliest(c, free) if free else None, _earliest(c, limited, after=now)]
    probe = pick(c, limited, 1, now, (now, now, now, "", 0), None, rules, probe=True)
    if probe.pauses:
        found.append(now)
    if probe.rows:
        found.append(probe.rows[0][_READY])
    elif probe.held_by_rate:
        found.append(probe.reopens)
    times = [at for at in found if at is not None]
    return min(times) if times else None


def after_claim(
    c: sqlite3.Connection, workflows: Sequence[str], now: float, picked: Picked
) -> tuple[float | None] | None:
    """The next wake-up after a claim at ``now`` that took all it was let take (``picked``),
    in a 1-tuple: nothing else is runnable now, so what :func:`next_wakeup` would find is the
    earliest timer or lease expiry after ``now``, or the reopening of a used-up rate. None
    when the claim cannot tell: its own starts used up a rate, whose reopening it read
    before, and a workflow is not held back whole (one that is waits for an end, not for the
    rate)."""
    if picked.filled_rate and not picked.held_all:
        return None
    times = [_earliest(c, workflows, after=now), picked.reopens]
    known = [at for at in times if at is not None]
    return (min(known) if known else None,)


def _earliest(
    c: sqlite3.Connection, workflows: Sequence[str], *, after: float | None = None
) -> float | None:
    params = tuple(workflows) if after is None else (after, *workflows)
    (earliest,) = c.execute(
        sql.next_wakeup(len(workflows), after=after is not None), params
    ).fetchone()
    return None if earliest is None else float(earliest)


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
    fence = c.execute(sql.FENCE_LIMIT, (lease.pk, lease.token, lease.owner)).fetchone()
    if fence is None:
        raise LeaseLostError(f"lease on instance {lease.pk} lost by worker {lease.owner}")
    if c.execute(sql.SLOT_HELD, (limit, lease.pk, step, lease.token)).fetchone() is not None:
        return None  # a retried call whose reply was lost
    found = c.execute(sql.LIMIT_BY_NAME, (limit,)).fetchone()
    if found is None:
        raise UnknownLimitError(f"limit {limit!r} is not defined")
    concurrency, count, period = found
    rate = None if count is None else Rate(count, period)
    c.execute(sql.DELETE_DEAD_SLOTS, (limit,))
    c.execute(sql.PRUNE_LIMIT_STARTS, (limit, now - (0.0 if rate is None else rate.period)))
    rules = read_rules(c)
    users = [name for name, declared in rules.workflows.items() if limit in declared.limits]
    if concurrency is not None:
        running = 0
        if users:
            running = sum(n for _w, _k, n in c.execute(sql.running(len(users)), (*users, now)))
        # Every live slot counts, less one per listing instance holding some (see UsagePlan).
        for holder, held, holders in c.execute(sql.LIVE_SLOTS, (now, limit)):
            running += held - (holders if holder in users else 0)
        workflow, expires = fence
        (own,) = c.execute(sql.OWN_SLOTS, (limit, lease.pk, lease.token)).fetchone()
        # A running instance of a listing workflow already counts once: its first slot is that.
        counted = workflow in users and expires is not None and expires > now and own == 0
        if running + (0 if counted else 1) > concurrency:
            return math.inf
    if rate is not None:
        started, edge = _starts(c, RateScope("limit", limit, tuple(users), rate), now, False)
        if started >= rate.count and edge is not None:
            return reopen_time(edge, rate.period)
        c.execute(sql.LOG_LIMIT_START, (limit, now))
    c.execute(sql.TAKE_SLOT, (limit, lease.pk, step, lease.token, now))
    return None


def release_limit(c: sqlite3.Connection, lease: Lease, limit: str, step: str, now: float) -> bool:
    """``Store.release_limit``: whether a slot was given back (then the instance parked on the
    limit that would wake first is ready now)."""
    if not c.execute(sql.RELEASE_SLOT, (limit, lease.pk, step, lease.token)).rowcount:
        return False
    c.execute(sql.WAKE_PARKED, (now, limit, now))
    return True


class FlowOperations(Store):
    """The store contract's flow control operations (:class:`~stepline.store.flow.FlowStore`)
    on SQLite: a base of :class:`~stepline.store.sqlite.SqliteStore`, which sets ``_db``."""

    _db: Database

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
        now = self.now()
        states: list[LimitState] = await self._db.read_with(
            lambda c: limit_states(c, workflow, key, now)
        )
        return states

    async def running_by_worker(
        self, workflows: Sequence[str], now: float
    ) -> dict[tuple[str, str], int]:
        if not workflows:
            return {}
        rows = await self._db.read(sql.running_by_worker(len(workflows)), (*workflows, now))
        return {(owner, workflow): count for owner, workflow, count in rows}
