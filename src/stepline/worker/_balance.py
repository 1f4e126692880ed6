"""A worker's share of a workflow limited per key or by named limits only: limits that bound
the fleet without saying how many instances it runs at once, so there is no number to split
as ``_shares`` splits a ``concurrency``.

Without a share the worker whose instance ends claims the key's next instance at once (its
claim follows its own finish), while its peers see the key free only at their next poll, by
which time it is taken again: one process ends up running all of the workflow and the rest of
the fleet idles. So at each refresh the worker reads how many instances of the workflow every
worker runs (``Store.running_by_worker``). While a live peer that has room runs clearly fewer
than an even split, ``ceil(R / n)`` (``R`` the instances running on the worker and its peers
with room, ``n`` those workers), the worker takes no more than that split: the keys its
instances free as they end go to the peer. Once the split is even no cap
applies, and it keeps: each worker claims the next instance of every key it frees.

The peer must take those keys soon: a claim that answers a worker's own ends asks for as many
as ended, so a worker behind grows only at its polls. Where polls are slow (a store that
pushes notifications), the worker that runs clearly fewer than an even split while a peer runs
clearly more (``catch_up``) asks, at each such claim, for the difference as well.

``R`` is the largest seen while a peer lags: a peer that does not take the freed keys (its
loop busy, its ``worker_concurrency`` reached) leaves the split where it was, instead of
shrinking it at every refresh as the worker's own count falls.

A lag is acted on only once a second read confirms it (``confirming``; the caller reads again
soon): instances that start together end together, so a worker's count, read at one moment,
swings between its share and nothing while it claims their successors. One read that caught a
worker between two such rounds would cap its peer at half the split it had, or cap the worker
itself, and the keys would drain from the capped worker for a whole refresh.

While the fleet runs none of the workflow (workers starting together, say), the worker caps
itself at an even split of its own slots: the first of them to claim would otherwise take
every key it has room for, and keep them as they end, until the next refresh."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ..records import WorkerInfo
from ..workflow import WorkflowDefinition

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
