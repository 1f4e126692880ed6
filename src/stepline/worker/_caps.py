"""``worker_concurrency`` and the worker's share of a fleet-wide ``concurrency``: how many
activations of a workflow one worker runs at once, and what that leaves for its next claim
(``Store.claim(..., caps=)``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from ..workflow import WorkflowDefinition
from ._slots import Slots


@dataclass(frozen=True)
class ClaimPlan:
    """What the next claim asks the store for."""

    workflows: tuple[str, ...]
    """The workflows with room: those at their ``worker_concurrency`` are left out."""
    caps: dict[str, int] | None
    """The room of each capped workflow among them (None: no cap)."""
    limit: int
    """How many to claim: no more than the capped workflows' room when all of them are capped."""
    held_back: bool
    """Whether a workflow was left out for want of room: a slot that frees may let it claim."""


class WorkflowCaps:
    """The ``worker_concurrency`` of each registered workflow that sets one, and the worker's
    share of each fleet-wide ``concurrency`` (set by ``_shares.FleetShares``): the lower of
    the two caps a workflow."""

    __slots__ = ("_caps", "_catch_up", "_own", "holding", "shares", "workflows")

    def __init__(self, registry: Mapping[str, WorkflowDefinition]) -> None:
        self.workflows = tuple(sorted(registry))
        self.holding = frozenset(
            name for name, definition in registry.items() if definition.limits.holds_slots
        )
        """Workflows whose running instances hold a slot of a fleet-wide limit in the store
        until their finish lands."""
        self._own = {
            name: cap
            for name, definition in registry.items()
            if (cap := definition.limits.worker_concurrency) is not None
        }
        self._caps = self._own
        """Each capped workflow's cap: the lower of its worker_concurrency and its share."""
        self.shares: Mapping[str, int] = {}
        self._catch_up: Mapping[str, int] = {}
        """The even split of each balanced workflow the worker runs clearly fewer of than a
        peer (``_balance``'s ``catch_up``)."""

    def set_shares(self, shares: Mapping[str, int]) -> None:
        """The worker's shares of fleet-wide limits, and its caps of the workflows it balances
        (``_balance``), as ``_shares`` last read them."""
        self.shares, own = shares, self._own
        self._caps = {**shares, **{n: min(c, shares.get(n, c)) for n, c in own.items()}}

    def set_catch_up(self, targets: Mapping[str, int]) -> None:
        """The even splits the worker is behind (``_balance``'s ``catch_up``), as ``_shares``
        last read them."""
        self._catch_up = targets

    def behind(self, slots: Slots) -> int:
        """How far the worker's running instances fall short of the even splits it is behind."""
        if not self._catch_up:
            return 0
        running = self._running(slots)
        return sum(max(0, even - running[name]) for name, even in self._catch_up.items())

    def ending(self, slots: Slots) -> bool:
        """Whether the final write of an activation that keeps its place in the store until it
        lands is in flight."""
        holding = self.holding
        return any(
            slot.ending and slot.claim.instance.workflow in holding
            for slot in slots.active.values()
        )

    def plan(self, slots: Slots, limit: int) -> ClaimPlan:
        """The claim of at most ``limit`` that the activations in ``slots`` leave room for."""
        caps = self._caps
        if not caps:  # the common case costs nothing
            return ClaimPlan(self.workflows, None, limit, held_back=False)
        running = self._running(slots)
        room = {name: cap - running[name] for name, cap in caps.items()}
        workflows = tuple(name for name in self.workflows if room.get(name, 1) > 0)
        capped = {name: room[name] for name in workflows if name in room}
        if all(name in room for name in workflows):
            limit = min(limit, sum(capped.values()))
        return ClaimPlan(workflows, capped or None, limit, len(workflows) < len(self.workflows))

    def _running(self, slots: Slots) -> Counter[str]:
        """The activations in ``slots`` by workflow, counted as ``Slots.free`` counts: one whose
        final write is in flight runs no more code and takes no room; but under a fleet-wide
        limit it keeps its place in the store until that write lands, and a claim meanwhile
        would find it taken."""
        holding = self.holding
        running: Counter[str] = Counter()
        for slot in slots.active.values():
            workflow = slot.claim.instance.workflow
            if not slot.ending or workflow in holding:
                running[workflow] += 1
        return running
