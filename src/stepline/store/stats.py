"""The store contract's fleet-wide figures, read for monitoring (Prometheus gauges, the
dashboard's chart): :class:`StatsStore`, ``Store.stats`` of :class:`~stepline.store.base.Store`.

Every worker of a fleet and every server may read these at each scrape, so each read is bounded
whatever the number of instances: index reads that stop at ``cap`` entries, and a seek per
priority in use; never a scan of all instances.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

UNFINISHED_STATUSES = ("queued", "running", "waiting", "paused", "waitingForPause")
"""The statuses :meth:`StatsStore.fleet_counts` counts, in this order."""


@dataclass(frozen=True)
class FleetCounts:
    """One registered workflow's instances now, each count stopping at the ``cap`` asked for (a
    count equal to ``cap`` means that many or more)."""

    workflow: str
    statuses: dict[str, int] = field(default_factory=dict)
    """Instances in each unfinished status (:data:`UNFINISHED_STATUSES`, every one present)."""
    due: int = 0
    """Instances due to run and not running: ``ready_at <= now`` (queued, woken by a timer or
    an event, or left by a worker whose lease expired)."""
    set_aside: int = 0
    """Instances set aside behind a busy key (docs/flow-control.md): due, and waiting for the
    key's running instance to end. Counted in ``due`` only while a recheck time of theirs has
    come."""
    oldest_due: float | None = None
    """The earliest ``ready_at`` of those ``due`` (None when none is due)."""
    limits: dict[str, Any] | None = None
    """The workflow's flow control as registered (:attr:`WorkflowInfo.limits`)."""


@dataclass(frozen=True)
class EndedCount:
    """Instances that ended in one time bucket with one status."""

    start: float
    """The bucket's start; it ends ``bucket`` seconds later."""
    status: str
    count: int


def check_cap(cap: int) -> None:
    """Refuse a ``cap`` under 1 (``ValueError``)."""
    if cap < 1:
        raise ValueError(f"cap must be at least 1, got {cap}")


class StatsStore(abc.ABC):
    """Bounded reads of fleet-wide figures (see the module's docstring)."""

    @abc.abstractmethod
    async def fleet_counts(self, now: float, cap: int) -> list[FleetCounts]:
        """For every registered workflow (:meth:`register_workflows`), sorted by name: its
        instances in each unfinished status, those due at ``now`` and those set aside behind a
        busy key, each counted up to ``cap`` (``cap`` >= 1); the earliest due ``ready_at``; its
        registered limits.

        Bounded: each count reads at most ``cap`` index entries, the earliest due time a seek
        per priority in use; the instances of a workflow that is not registered are not read.
        Consistent within each count, not across them (no transaction is needed)."""

    @abc.abstractmethod
    async def ended_counts(
        self, since: float, bucket: float, buckets: int, cap: int
    ) -> list[EndedCount]:
        """How many instances ended (``ended_at``) in each of ``buckets`` consecutive time
        buckets of ``bucket`` seconds from ``since``, by final status (complete, errored,
        terminated), each bucket counting up to ``cap`` instances in all: a bucket whose counts
        add up to ``cap`` may have had more. Sorted by bucket, then status; a status with none
        in a bucket is left out. Bounded: at most ``cap`` index entries per bucket, read
        through the index of end times."""
