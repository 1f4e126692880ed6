"""Which runnable instances a claim may take under the registered limits: the rules of
``Store.claim`` in one place. A store reads what runs and what started (``Usage``) under the
lock its claims serialise on, then asks :class:`Admission` about each runnable instance in
claim order; each instance it admits counts toward the next decisions."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from .._json import loads
from ..limits import Limit, Rate, WorkflowLimits
from ..records import LimitState

RECHECK = 60.0
"""How often, at most, a store that sets a busy key's queued instances aside looks for keys
freed without a write that brought back their first in line (SQLite: a recheck time on each
key's first in line, on multiples of it, so that those of many keys come due in one claim;
PostgreSQL: a look at every key with instances set aside)."""


def recheck_time(now: float) -> float:
    """When instances set aside at ``now`` are read again though nothing brought them back:
    the second multiple of :data:`RECHECK` after ``now``."""
    return (math.floor(now / RECHECK) + 2) * RECHECK


@dataclass(frozen=True)
class Rules:
    """The registered limits of the workflows a claim looks at, and the named limits they use."""

    workflows: Mapping[str, WorkflowLimits]
    limits: Mapping[str, Limit]

    def limited(self, workflow: str) -> bool:
        found = self.workflows.get(workflow)
        return found is not None and found.fleet_wide

    def keyed(self, workflow: str) -> bool:
        """Whether ``workflow`` limits how many instances of one key run at once."""
        found = self.workflows.get(workflow)
        return found is not None and found.key_concurrency is not None

    def key_limit(self, workflow: str) -> int:
        """The ``key_concurrency`` of ``workflow``, a workflow limited per key."""
        limit = self.workflows[workflow].key_concurrency
        if limit is None:
            raise ValueError(f"workflow {workflow!r} has no key_concurrency")
        return limit


def rules_from_rows(
    workflows: Iterable[tuple[str, str]],
    limits: Iterable[tuple[str, int | None, int | None, float | None]],
) -> Rules:
    """The rules from a store's rows: (name, limits as JSON) of every workflow that has some,
    and (name, concurrency, rate count, rate period) of every named limit."""
    declared = {name: WorkflowLimits.from_json(loads(text)) for name, text in workflows}
    named: dict[str, Limit] = {}
    if any(found.limits for found in declared.values()):
        for name, concurrency, count, period in limits:
            if concurrency is not None or count is not None:
                rate = None if count is None or period is None else Rate(count, period)
                named[name] = Limit(name, concurrency=concurrency, rate=rate)
    return Rules(declared, named)


@dataclass
class Usage:
    """What runs now (a live lease) and what started within each rate's period, per scope:
    ``running`` and ``started`` by workflow name, ``key_running`` by (workflow, key),
    ``limit_running`` and ``limit_started`` by named limit. ``reopens`` holds, for each rate
    already used up, when it lets the next start (keys ``workflow:NAME`` and ``limit:NAME``)."""

    running: Counter[str] = field(default_factory=Counter)
    started: Counter[str] = field(default_factory=Counter)
    key_running: Counter[tuple[str, str]] = field(default_factory=Counter)
    limit_running: Counter[str] = field(default_factory=Counter)
    limit_started: Counter[str] = field(default_factory=Counter)
    reopens: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Held:
    """What limits hold back, for a read of runnable instances to leave out: the workflows
    that may still run (those with no room left dropped), the full (workflow, key) pairs among
    them, and those whose first starts a used-up rate holds."""

    active: list[str]
    full_keys: list[tuple[str, str]]
    no_starts: list[str]


def reopen_time(edge: float, period: float) -> float:
    """When a rate whose ``count``-th latest start was at ``edge`` lets the next start: the
    first time at which ``edge`` no longer lies within the period (a start at ``now - period``
    no longer counts)."""
    reopens = edge + period
    while reopens - period < edge:  # float rounding: the very time at which it stops counting
        reopens = math.nextafter(reopens, math.inf)
    return reopens


@dataclass(frozen=True)
class RateScope:
    """A rate a claim must know the use of: a workflow's own (``scope`` "workflow") or a
    named limit's ("limit"), counting the first starts of ``workflows`` (and, for a named
    limit, the slots steps took of it)."""

    scope: Literal["workflow", "limit"]
    name: str
    workflows: tuple[str, ...]
    rate: Rate


@dataclass(frozen=True)
class UsagePlan:
    """What a store reads to know the use of the scopes of ``workflows``' fleet-wide limits:
    the running instances of ``counted`` (by workflow and key), the live slots of steps of
    ``users``' named limits, and the recent starts of each of ``rates``; :meth:`usage` puts
    what it read together."""

    users: Mapping[str, tuple[str, ...]]
    """Each named limit the workflows use: every workflow listing it."""
    counted: tuple[str, ...]
    rates: tuple[RateScope, ...]

    @classmethod
    def of(cls, rules: Rules, workflows: Sequence[str]) -> UsagePlan:
        limited = [name for name in workflows if rules.limited(name)]
        users: dict[str, tuple[str, ...]] = {}
        for name in limited:
            for limit_name in rules.workflows[name].limits:
                if limit_name in rules.limits and limit_name not in users:
                    users[limit_name] = tuple(
                        w
                        for w, declared in rules.workflows.items()
                        if limit_name in declared.limits
                    )
        counted = tuple(dict.fromkeys([*limited, *(w for found in users.values() for w in found)]))
        rates = [
            RateScope("workflow", name, (name,), rate)
            for name in limited
            if (rate := rules.workflows[name].rate) is not None
        ]
        rates += [
            RateScope("limit", name, using, rate)
            for name, using in users.items()
            if (rate := rules.limits[name].rate) is not None
        ]
        return cls(users, counted, tuple(rates))

    def usage(
        self,
        rules: Rules,
        running: Iterable[tuple[str, str | None, int]],
        slots: Iterable[tuple[str, str, int, int]],
        starts: Mapping[tuple[str, str], tuple[int, float | None]],
    ) -> Usage:
        """The use read: ``running`` (workflow, key, instances with a live lease), ``slots``
        (named limit, the workflow of the instances holding live slots of it, slots, instances)
        and, per rate scope (``scope``, ``name``), how many starts lie within its period and
        the ``count``-th latest (None if fewer)."""
        usage = Usage()
        for workflow, key, n in running:
            usage.running[workflow] += n
            declared = rules.workflows[workflow]
            if key is not None and declared.key_concurrency is not None:
                usage.key_running[(workflow, key)] += n
            for limit_name in declared.limits:
                if limit_name in self.users:
                    usage.limit_running[limit_name] += n
        # Every live slot counts, less one per running instance of a listing workflow that
        # holds some: that instance counts once per slot, not once more for itself.
        for limit_name, workflow, held, holders in slots:
            if limit_name in self.users:
                listed = workflow in self.users[limit_name]
                usage.limit_running[limit_name] += held - (holders if listed else 0)
        for scope in self.rates:
            count, edge = starts.get((scope.scope, scope.name), (0, None))
            started = usage.started if scope.scope == "workflow" else usage.limit_started
            started[scope.name] = count
            if count >= scope.rate.count and edge is not None:
                usage.reopens[f"{scope.scope}:{scope.name}"] = reopen_time(edge, scope.rate.period)
        return usage


class Admission:
    """Decides, one runnable instance at a time in claim order, whether a claim may take it."""

    def __init__(self, rules: Rules, usage: Usage, caps: Mapping[str, int] | None) -> None:
        self._rules = rules
        self._usage = usage
        self._caps = caps or {}
        self._taken: Counter[str] = Counter()
        self.held_by_rate = False
        """Whether a rate held an instance back (so ``reopens`` says when to look again)."""
        self.filled_rate = False
        """Whether a start it admitted used up a rate: ``reopens``, read before, misses it."""

    def admit(self, workflow: str, key: str | None, starting: bool) -> bool:
        """Whether an instance of ``workflow`` with ``key`` may run (``starting``: its first
        start); if so it counts from now on."""
        cap = self._caps.get(workflow)
        if cap is not None and self._taken[workflow] >= cap:
            return False
        declared = self._rules.workflows.get(workflow)
        if declared is None or not declared.fleet_wide:
            self._taken[workflow] += 1
            return True
        usage = self._usage
        if declared.concurrency is not None and usage.running[workflow] >= declared.concurrency:
            return False
        keyed = key is not None and declared.key_concurrency is not None
        if keyed and usage.key_running[(workflow, key or "")] >= (declared.key_concurrency or 0):
            return False
        if (
            starting
            and declared.rate is not None
            and usage.started[workflow] >= declared.rate.count
        ):
            self.held_by_rate = True
            return False
        named = [self._rules.limits[name] for name in declared.limits if name in self._rules.limits]
        for limit in named:
            if (
                limit.concurrency is not None
                and usage.limit_running[limit.name] >= limit.concurrency
            ):
                return False
            if (
                starting
                and limit.rate is not None
                and usage.limit_started[limit.name] >= limit.rate.count
            ):
                self.held_by_rate = True
                return False
        self._taken[workflow] += 1
        usage.running[workflow] += 1
        if keyed:
            usage.key_running[(workflow, key or "")] += 1
        if starting:
            usage.started[workflow] += 1
            rate = declared.rate
            self.filled_rate |= rate is not None and usage.started[workflow] >= rate.count
        for limit in named:
            usage.limit_running[limit.name] += 1
            if starting:
                usage.limit_started[limit.name] += 1
                started = usage.limit_started[limit.name]
                self.filled_rate |= limit.rate is not None and started >= limit.rate.count
        return True

    def key_full(self, workflow: str, key: str | None) -> bool:
        """Whether ``key`` runs as many instances of ``workflow`` as its ``key_concurrency``
        lets run (counting what the claim took)."""
        declared = self._rules.workflows.get(workflow)
        if key is None or declared is None or declared.key_concurrency is None:
            return False
        return self._usage.key_running[(workflow, key)] >= declared.key_concurrency

    def open(self, workflow: str, starting: bool) -> bool:
        """Whether an instance of ``workflow``, a workflow with limits (``starting``: its first
        start), whose key has room could run now: no cap, concurrency or rate holds it back."""
        declared = self._rules.workflows[workflow]
        return not self._full(workflow, declared) and not (starting and self._rate_used(workflow))

    def held(self, workflows: Sequence[str]) -> Held:
        """What a store's read of runnable instances of ``workflows`` can leave out now."""
        saturated, full_keys = self.saturated()
        active = [
            name
            for name in workflows
            if name not in saturated
            and (name not in self._caps or self._taken[name] < self._caps[name])
        ]
        running = set(active)
        return Held(
            active,
            sorted(pair for pair in full_keys if pair[0] in running),
            [name for name in active if self._rate_used(name)],
        )

    def reopen_at(self, workflow: str) -> float | None:
        """When every used-up rate of ``workflow``'s scopes lets a first start again (None if
        none is used up)."""
        declared = self._rules.workflows.get(workflow)
        if declared is None or not declared.fleet_wide:
            return None
        reopens = self._usage.reopens
        times = [reopens[f"workflow:{workflow}"]] if f"workflow:{workflow}" in reopens else []
        times += [reopens[f"limit:{n}"] for n in declared.limits if f"limit:{n}" in reopens]
        return max(times) if times else None

    def _rate_used(self, workflow: str) -> bool:
        """Whether the workflow's rate or one of its named limits' lets no instance start now."""
        declared = self._rules.workflows.get(workflow)
        if declared is None or not declared.fleet_wide:
            return False
        usage = self._usage
        if declared.rate is not None and usage.started[workflow] >= declared.rate.count:
            return True
        for name in declared.limits:
            limit = self._rules.limits.get(name)
            rate = None if limit is None else limit.rate
            if rate is not None and usage.limit_started[name] >= rate.count:
                return True
        return False

    def saturated(self) -> tuple[set[str], set[tuple[str, str]]]:
        """The workflows none of whose instances may run now, and the (workflow, key) pairs
        likewise: what a store's read of runnable instances can skip."""
        usage = self._usage
        workflows = {
            name for name, declared in self._rules.workflows.items() if self._full(name, declared)
        }
        keys = {
            (name, key)
            for (name, key), running in usage.key_running.items()
            if (limit := self._rules.workflows[name].key_concurrency) is not None
            and running >= limit
        }
        return workflows, keys

    def _full(self, name: str, declared: WorkflowLimits) -> bool:
        """Whether the worker's cap, the workflow's concurrency or one of its named limits'
        leaves no room for another instance of ``name``."""
        cap = self._caps.get(name)
        if cap is not None and self._taken[name] >= cap:
            return True
        if declared.concurrency is not None and self._usage.running[name] >= declared.concurrency:
            return True
        for limit_name in declared.limits:
            limit = self._rules.limits.get(limit_name)
            room = None if limit is None else limit.concurrency
            if room is not None and self._usage.limit_running[limit_name] >= room:
                return True
        return False


def limit_states(
    workflow: str,
    key: str | None,
    rules: Rules,
    usage: Usage,
) -> list[LimitState]:
    """``Store.limit_states`` from the rules and usage a store read for ``workflow``."""
    declared = rules.workflows.get(workflow)
    if declared is None or not declared.fleet_wide:
        return []
    states: list[LimitState] = []
    if declared.concurrency is not None or declared.rate is not None:
        running, started = usage.running[workflow], usage.started[workflow]
        states.append(
            _state(
                "workflow", workflow, running, declared.concurrency, declared.rate, started, usage
            )
        )
    if key is not None and declared.key_concurrency is not None:
        states.append(
            LimitState("key", key, usage.key_running[(workflow, key)], declared.key_concurrency, 0)
        )
    for name in declared.limits:
        limit = rules.limits.get(name)
        if limit is not None:
            running, started = usage.limit_running[name], usage.limit_started[name]
            states.append(
                _state("limit", name, running, limit.concurrency, limit.rate, started, usage)
            )
    return states


def _state(
    scope: Literal["workflow", "limit"],
    name: str,
    running: int,
    concurrency: int | None,
    rate: Rate | None,
    started: int,
    usage: Usage,
) -> LimitState:
    """A workflow's or named limit's state; ``started`` counts only under a rate."""
    if rate is None:
        return LimitState(scope, name, running, concurrency, 0)
    reopens = usage.reopens.get(f"{scope}:{name}")
    return LimitState(scope, name, running, concurrency, started, rate.count, rate.period, reopens)
