"""The store contract's deletes: instances deleted by id, by age, and as their retention says
(:class:`RetentionStore`, ``Store.retention``)."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DeletedInstance:
    """An instance that a purge deleted: the caller deletes what lives outside the store with
    it (its offloaded values' blobs)."""

    workflow: str
    id: str
    status: str


class RetentionStore(abc.ABC):
    """Instances deleted with their steps, events, updates and streams."""

    @abc.abstractmethod
    async def delete_instances(
        self, workflow: str, instance_ids: Sequence[str], *, finished_only: bool = False
    ) -> int:
        """Delete instances with their steps, events, updates and streams; return how many
        existed.

        Ids that do not exist are skipped. With ``finished_only`` the statuses are checked in
        the deleting transaction, under the lock that status changes take: if any of the
        instances is unfinished at that moment, ``IllegalStateError`` names the first such one
        (in ``instance_ids`` order) and nothing is deleted. So an instance that a restart makes
        unfinished concurrently is either deleted before it or kept.
        """

    @abc.abstractmethod
    async def purge_instances(
        self, workflow: str | None, statuses: Sequence[str], older_than: float
    ) -> list[DeletedInstance]:
        """Delete finished instances in ``statuses`` that ended before ``older_than`` (with what
        :meth:`delete_instances` deletes), of ``workflow`` (every workflow when None), in one
        transaction; return those it deleted, in no particular order."""

    @abc.abstractmethod
    async def purge_expired(
        self, now: float, limit: int, default_cutoff: float | None = None
    ) -> list[DeletedInstance]:
        """Delete at most ``limit`` finished instances whose ``delete_at`` has come (``<=
        now``), earliest first, and with ``default_cutoff`` finished instances without a
        ``delete_at`` that ended before it (the workers' one ``retention``), with what
        :meth:`delete_instances` deletes, in one transaction. Returns those it deleted, in no
        particular order; fewer than ``limit`` means none is left to delete.

        ``delete_at`` is set by the database as an instance ends (``ended_at`` set): its end
        plus the retention of its outcome, from the instance's own ``NewInstance.retention``,
        else its workflow's ``WorkflowMeta.retention`` as registered then; None (kept) when
        neither names the outcome. A restart (``ended_at`` cleared) clears it. Concurrent
        callers delete different instances (rows another holds are skipped).
        """
