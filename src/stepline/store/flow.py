"""The store contract's flow control operations beyond the claim (which applies the limits
itself: ``Store.claim``): :class:`FlowStore`, ``Store.flow``."""

from __future__ import annotations

import abc
from collections.abc import Sequence

from ..records import LimitState
from .types import Lease


class FlowStore(abc.ABC):
    """Slots of named limits taken by steps, and the use of every limit now."""

    @abc.abstractmethod
    async def acquire_limit(self, lease: Lease, limit: str, step: str, now: float) -> float | None:
        """Take a slot of named limit ``limit`` for step ``step`` (``name-count``) of the leased
        instance and return None; or take nothing and return when to try again: when the rate
        reopens if the rate is what is used up, else ``math.inf`` (only a release makes room).

        Fenced on the lease (``LeaseLostError``, nothing taken). A slot is *live* while its
        instance holds the lease it was taken under (same token, not expired). There is room if
        live slots plus running instances (:meth:`claim`) of the workflows listing ``limit``,
        an instance holding slots counting once per slot, stay within ``concurrency`` (so a
        listed instance's first slot costs nothing), and if the starts within the rate's
        period (slots taken, and first starts of the listing workflows' instances) are fewer
        than its count; each slot taken is a start. If the instance already holds a live slot
        for ``step``, return None (a retried call). An unknown ``limit`` raises
        ``UnknownLimitError`` (a ``LookupError``) naming it. Acquisitions of one limit, and
        claims counting it, are serialised."""

    @abc.abstractmethod
    async def release_limit(self, lease: Lease, limit: str, step: str, now: float) -> None:
        """Give back the slot ``step`` took under ``lease`` (nothing if none; not fenced: a lost
        lease's slot is dead anyway). If there was one, make the instance parked on ``limit``
        (:attr:`Finish.parked_on`) with the earliest ``ready_at`` after ``now`` ready now, and
        tell workers (this process's ready listeners; other processes where notified)."""

    @abc.abstractmethod
    async def limit_states(self, workflow: str, key: str | None) -> list[LimitState]:
        """The registered limits that apply to an instance of ``workflow`` with ``key``, each
        with its use now: the workflow's own (concurrency and rate, scope ``workflow``), its
        key's (scope ``key``, when both ``key`` and ``key_concurrency`` are set), then each
        named limit's (scope ``limit``), in the workflow's order. Empty for a workflow without
        limits, or unknown."""

    @abc.abstractmethod
    async def running_by_worker(
        self, workflows: Sequence[str], now: float
    ) -> dict[tuple[str, str], int]:
        """How many instances of each of ``workflows`` each worker runs at ``now``: those
        whose unexpired lease it holds, running or pausing, as :meth:`claim` counts them
        toward a concurrency limit. Keyed by (worker id, workflow); pairs with none are left
        out. A read of the running instances alone (``instances_status``), however large the
        backlog."""
