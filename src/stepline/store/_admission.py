"""Which runnable instances a claim may take under the registered limits: the rules of
``Store.claim`` in one place. A store reads what runs and what started (``Usage``) under the
lock its claims serialise on, then asks :class:`Admission` about each runnable instance in
claim order; each instance it admits counts toward the next decisions."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ..limits import Limit, Rate, WorkflowLimits
from ..records import LimitState


@dataclass(frozen=True)
class Rules:
    """The registered limits of the workflows a claim looks at, and the named limits they use."""

    workflows: Mapping[str, WorkflowLimits]
    limits: Mapping[str, Limit]

    def limited(self, workflow: str) -> bool:
        found = self.workflows.get(workflow)
        return found is not None and found.fleet_wide


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


class Admission:
    """Decides, one runnable instance at a time in claim order, whether a claim may take it."""

    def __init__(self, rules: Rules, usage: Usage, caps: Mapping[str, int] | None) -> None:
        self._rules = rules
        self._usage = usage
        self._caps = caps or {}
        self._taken: Counter[str] = Counter()
        self.held_by_rate = False
        """Whether a rate held an instance back (so ``reopens`` says when to look again)."""

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
        for limit in named:
            usage.limit_running[limit.name] += 1
            if starting:
                usage.limit_started[limit.name] += 1
        return True

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
