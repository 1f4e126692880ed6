"""Whether a claim may take a runnable instance, by the rules of ``Store.claim``: one decision
at a time in claim order, each instance admitted counting toward the next decisions; what a
store's read of runnable instances can leave out meanwhile (:class:`Held`); and the limits' state
as ``describe`` shows it (:func:`limit_states`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ..limits import Rate, WorkflowLimits
from ..records import LimitState
from .rules import Rules, Usage


@dataclass(frozen=True)
class Held:
    """What limits hold back, for a read of runnable instances to leave out: the workflows
    that may still run (those with no room left dropped), the full (workflow, key) pairs among
    them, and those whose first starts a used-up rate holds."""

    active: list[str]
    full_keys: list[tuple[str, str]]
    no_starts: list[str]


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
