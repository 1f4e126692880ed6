"""The limits a claim applies, as the stores hold them, and their use now.

:class:`Rules` are the registered limits (``workflows.limits`` and ``limits``, read by every
claim: another process may register new ones). :class:`UsagePlan` says which of their scopes a
claim must know the use of, and which locks serialise the claims and step slots that count
toward them; :class:`Usage` is that use, read by a store under those locks."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from .._json import loads
from ..limits import Limit, Rate, WorkflowLimits


@dataclass(frozen=True)
class Rules:
    """The registered limits of the workflows a claim looks at, and the named limits they use."""

    workflows: Mapping[str, WorkflowLimits]
    limits: Mapping[str, Limit]

    def limited(self, workflow: str) -> bool:
        """Whether ``workflow`` has a limit that applies across workers."""
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


NO_RULES = Rules({}, {})


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
    what it read together. Claims and step slots that count toward one scope are serialised
    by its lock (:attr:`locks`)."""

    users: Mapping[str, tuple[str, ...]]
    """Each named limit the workflows use: every workflow listing it."""
    counted: tuple[str, ...]
    rates: tuple[RateScope, ...]
    locks: tuple[str, ...]
    """The names of the scopes' locks, sorted (so two claims never wait for each other's):
    ``w:NAME`` per limited workflow, ``l:NAME`` per named limit (a step slot takes that one)."""

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
        locks = sorted({*(f"w:{name}" for name in limited), *(f"l:{name}" for name in users)})
        return cls(users, counted, tuple(rates), tuple(locks))

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
