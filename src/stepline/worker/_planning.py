"""How a worker plans its claims: how many to ask for, of which workflows, under which caps,
and when to look again. The rules, by concern (each a class or function below):

**Room** (:class:`WorkflowCaps`, :class:`ClaimPlan`). A claim asks for at most the worker's free
slots (``concurrency``) and ``claim_batch``. A workflow with a ``worker_concurrency`` has that
much room in this process; one at its cap is left out of the claim (and of the look for the next
timer: it would look runnable now, a busy loop), and a slot that frees wakes the loop for it.

**Shares of a fleet-wide limit** (:func:`shares`). A workflow with a ``concurrency`` is split
among the live workers that run it and have room: this worker claims it only while it runs fewer
than ``ceil(concurrency / n)``. Without a share the worker whose instance ends sees the freed
slot first (its claim follows its own finish) and ends up running all of the limit while the
fleet idles. A worker alone, or whose peers are full, takes the whole limit; the store still
enforces the limit itself, the share only spreads it.

**Balance** (:class:`Balance`). Workflows limited per key or by named limits only have no number
to split: while a live peer with room runs clearly fewer than an even split ``ceil(R / n)``, the
worker caps itself there, so the keys its instances free go to the peer. A lag counts once a
second read confirms it (instances that start together end together, and one read can catch a
worker between two rounds); ``R`` is the largest seen while a peer lags; while the fleet runs
none of the workflow the worker caps itself at an even split of its own slots. Where polls are
slow (a store that pushes notifications), a worker clearly behind a peer that runs clearly more
adds the difference to its answers (``catch_up``).

**Pacing** (:class:`Pacing`). Without notifications from other processes (SQLite) the loop polls
quickly after a poll found work and backs off while polls find nothing; with them (PostgreSQL) it
polls at the longest interval throughout. Woken only by the ends of its own instances under a
limit, the worker asks for as many instances as ended (what they freed is mostly what there is to
take) and, while more of those ends are being written, waits for them so that one claim answers
them all. A claim that took all it asked for may have left more: the loop claims again at once.

**When to look again.** After a claim the worker waits until the next timer: the claim's own
answer (``Claimed.next_look``) when it could tell and no wake came meanwhile, else
``Store.next_wakeup`` for the workflows with room; at most the poll interval.

The worker's side task ``_shares.FleetShares`` reads the worker list and what each worker runs,
and sets the shares and balance caps here."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..records import WorkerInfo
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


def shares(
    limits: Mapping[str, int], workers: Sequence[WorkerInfo], worker_id: str, now: float
) -> dict[str, int]:
    """The share of worker ``worker_id`` of each workflow's fleet-wide concurrency in
    ``limits``, given the worker list: only for those with live peers that have room."""
    found: dict[str, int] = {}
    for name, concurrency in limits.items():
        peers = 1 + sum(
            1
            for worker in workers
            if worker.id != worker_id
            and worker.live(now)
            and name in worker.workflows
            and worker.running < worker.concurrency
        )
        if peers > 1:
            found[name] = math.ceil(concurrency / peers)
    return found


SLACK = 1
"""How far below an even split a peer may run and not lag: what rounding and the instances
in flight at a refresh leave."""


def balanced_workflows(registry: Mapping[str, WorkflowDefinition]) -> dict[str, int | None]:
    """The workflows to balance, each with its ``worker_concurrency`` (a peer's room for it):
    those holding slots of a fleet-wide limit without a ``concurrency`` of their own (which
    ``_shares`` splits instead)."""
    return {
        name: definition.limits.worker_concurrency
        for name, definition in registry.items()
        if definition.limits.holds_slots and definition.limits.concurrency is None
    }


class Balance:
    """The caps that even out the balanced workflows over the fleet, refresh after refresh."""

    def __init__(self, workflows: Mapping[str, int | None], worker_id: str, slots: int) -> None:
        self.workflows = dict(workflows)
        self._worker_id = worker_id
        self._slots = slots
        """The worker's ``concurrency``."""
        self._peaks: dict[str, int] = {}
        """Per workflow capped at the last refresh: the largest ``R`` seen since it was."""
        self._suspects: dict[str, int] = {}
        """Per workflow a peer lagged on at the last read, uncapped: ``R`` at that read."""

    @property
    def confirming(self) -> bool:
        """Whether the last read found a lag that the next must confirm before a cap."""
        return bool(self._suspects)

    def caps(
        self,
        running: Mapping[tuple[str, str], int],
        workers: Sequence[WorkerInfo],
        now: float,
    ) -> dict[str, int]:
        """The worker's cap of each balanced workflow that a peer lags on, given how many
        instances each worker runs (``running``, by worker and workflow) and the worker list."""
        found: dict[str, int] = {}
        for name, worker_cap in self.workflows.items():
            counts = [
                count
                for worker, count in self._peers(name, running, workers, now)
                if worker.running < worker.concurrency
                and (worker_cap is None or count < worker_cap)
            ]
            total = running.get((self._worker_id, name), 0) + sum(counts)
            if total == 0 and counts:
                room = self._slots if worker_cap is None else min(worker_cap, self._slots)
                found[name] = math.ceil(room / (1 + len(counts)))
                continue
            even = math.ceil(total / (1 + len(counts)))
            if not any(count + SLACK < even for count in counts):
                self._peaks.pop(name, None)
                self._suspects.pop(name, None)
                continue
            if name not in self._peaks:
                if name not in self._suspects:
                    self._suspects[name] = total
                    continue
                total = max(total, self._suspects.pop(name))
            peak = self._peaks[name] = max(total, self._peaks.get(name, 0))
            found[name] = math.ceil(peak / (1 + len(counts)))
        return found

    def catch_up(
        self,
        running: Mapping[tuple[str, str], int],
        workers: Sequence[WorkerInfo],
        now: float,
    ) -> dict[str, int]:
        """The even split of each balanced workflow that the worker runs clearly fewer of
        while a peer runs clearly more (a peer that then caps itself, :meth:`caps`): how many
        the worker may grow to by asking for more than its own ends freed."""
        found: dict[str, int] = {}
        for name, worker_cap in self.workflows.items():
            counts = [count for _worker, count in self._peers(name, running, workers, now)]
            mine = running.get((self._worker_id, name), 0)
            even = math.ceil((mine + sum(counts)) / (1 + len(counts)))
            if mine + SLACK < even and any(count > even + SLACK for count in counts):
                found[name] = even if worker_cap is None else min(even, worker_cap)
        return found

    def _peers(
        self,
        name: str,
        running: Mapping[tuple[str, str], int],
        workers: Sequence[WorkerInfo],
        now: float,
    ) -> list[tuple[WorkerInfo, int]]:
        """The live peers that run workflow ``name``, with how many of it each runs."""
        return [
            (worker, running.get((worker.id, name), 0))
            for worker in workers
            if worker.id != self._worker_id and worker.live(now) and name in worker.workflows
        ]


class Pacing:
    """The claim loop's waits and asks.

    Without notifications from other processes (SQLite) the loop polls quickly after a poll
    found work and backs off while polls find nothing; with them (PostgreSQL) it polls at the
    longest interval throughout. A claim answering a wake from this process (its own finish or
    create) says nothing of other processes' work, so it leaves the wait as it is: quick polls
    that find nothing new would each take the database's time.

    Woken only by the ends of its own instances under a limit, the worker asks for as many
    instances as ended: what they freed is mostly what there is to take, and on PostgreSQL a
    key-limited claim that cannot fill its ask reads past every held key to the end of the due
    backlog. Anything else due is found by the next poll or wake. While more of those ends are
    being written, the claim waits for them (``WorkflowCaps.ending``), so that one claim answers
    them all.
    """

    __slots__ = ("_answered", "_fastest", "_held_ends", "_longest", "_polled", "_told", "wait")

    def __init__(self) -> None:
        self._fastest = self._longest = self.wait = 0.0
        self._polled = True
        """Whether the coming claim is a poll, not the answer to a wake."""
        self._told = False
        """Whether anything but the end of an instance under a limit came since the last claim."""
        self._held_ends = 0
        """Instances under a limit that ended since the last claim."""
        self._answered = False
        """Whether the last claim only answered this worker's own ends."""

    def start(self, fastest: float, longest: float) -> None:
        """The loop begins: its quickest and longest waits."""
        self._fastest, self._longest = fastest, longest
        self.wait = fastest
        self._polled = True

    def told(self) -> None:
        """Something may be runnable (a wake, or the end of an instance under no limit)."""
        self._told = True

    def held_end(self) -> None:
        """An instance under a limit ended, its finish written."""
        self._held_ends += 1

    def answering(self) -> bool:
        """Whether the next claim would only answer this worker's own ends under a limit."""
        return not self._polled and not self._told and self._held_ends > 0

    def ask(self, limit: int) -> tuple[int, bool]:
        """How many the next claim asks for, at most ``limit``, and whether it only answers
        this worker's own ends (then a full answer is not a sign of more)."""
        answer = self._answered = self.answering()
        if answer:
            limit = min(limit, self._held_ends)
        self._told = False
        self._held_ends = 0
        return limit, answer

    def claimed(self, asked: int, took: int, *, contested: bool = False) -> None:
        """The claim took ``took`` of the ``asked`` instances. After a poll that found work,
        more may follow soon. After an answer to the worker's own ends that came back short
        while peers run the same key-limited work (``contested``), a peer's claim took what
        they freed, and the peer, above its split, leaves keys soon."""
        if (took and self._polled) or (contested and self._answered and took < asked):
            self.wait = self._fastest

    def waited(self, woken: bool, *, back_off: bool = True) -> None:
        """The loop waited, until a wake (``woken``) or its timeout; with ``back_off`` the
        next wait doubles up to the longest."""
        self._polled = not woken
        if back_off:
            self.wait = min(self.wait * 2, self._longest)
