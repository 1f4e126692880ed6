"""The store's operations over many instances (``Store.operations``): filtered reads, tags
written from a running workflow, and bulk jobs (docs/operations.md).

A filter arrives parsed (``operations.language.Filter``); each store renders it to its SQL
with ``operations.language.render`` and runs it with parameters, over the tags table's and the
instances' indexes.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

from ..errors import (
    DuplicateInstanceError,
    IllegalStateError,
    InstanceNotFoundError,
    SteplineError,
)
from ..operations.language import Filter
from ..records import InstancePage, InstanceRecord, StepRecord
from .types import Lease

BulkAction = Literal["terminate", "pause", "resume", "restart", "delete"]
BULK_ACTIONS: tuple[BulkAction, ...] = ("terminate", "pause", "resume", "restart", "delete")
BulkStatus = Literal["running", "complete", "cancelled"]
SKIPPABLE = (IllegalStateError, ValueError, DuplicateInstanceError, InstanceNotFoundError)
"""What an action raises, before it writes anything, for an instance it does not apply to: the
batch skips that instance and goes on in the same transaction."""


class BulkJobNotFoundError(SteplineError, LookupError):
    """No bulk job has this id."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"no bulk job {job_id!r}: `stepline bulk list` shows the jobs")
        self.job_id = job_id


@dataclass(frozen=True)
class NewBulkJob:
    """A bulk job to start: ``filter_text`` is stored and parsed again by the workers."""

    id: str
    action: BulkAction
    filter: Filter
    from_step: str | None = None
    started_by: str | None = None
    """Who started it (an API token's name, say), kept to be shown; None for nobody named."""


@dataclass(frozen=True)
class BulkJob:
    """A bulk job as stored: its progress over the instances that matched when it started."""

    id: str
    action: BulkAction
    filter: str
    from_step: str | None
    status: BulkStatus
    total: int
    """How many instances matched when it started (the most it acts on)."""
    done: int
    """Instances acted on."""
    skipped: int
    """Instances it reached that no longer matched the filter's action (an illegal state for it,
    a restart from a step the instance never ran); ``last_skip`` says why for the last one."""
    last_skip: str | None
    created_at: float
    updated_at: float
    ended_at: float | None
    cursor: int = 0
    """The pk of the last instance it reached (in pk order)."""
    started_by: str | None = None
    """Who started it (:attr:`NewBulkJob.started_by`)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "action": self.action,
            "filter": self.filter,
            "from_step": self.from_step,
            "status": self.status,
            "total": self.total,
            "done": self.done,
            "skipped": self.skipped,
            "last_skip": self.last_skip,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "ended_at": self.ended_at,
            "started_by": self.started_by,
        }


BULK_COLUMNS = (
    "id, action, filter, from_step, status, total, done, skipped, last_skip, created_at,"
    " updated_at, ended_at, cursor, started_by"
)


_BULK_FIELDS = [f.name for f in fields(BulkJob)]


@dataclass(frozen=True)
class BulkBatch:
    """What one batch of a bulk job did (:meth:`OperationsStore.run_bulk_batch`)."""

    job: BulkJob
    """The job after the batch."""
    deleted: tuple[tuple[str, str], ...] = ()
    """``(workflow, id)`` of the instances whose rows the batch deleted (a ``delete`` job): their
    offloaded values go next, as after any delete."""


def bulk_from_row(row: Sequence[Any]) -> BulkJob:
    """The job of a row read with ``BULK_COLUMNS``."""
    return BulkJob(**dict(zip(_BULK_FIELDS, row, strict=False)))


class OperationsStore(abc.ABC):
    """Filtered reads, the steps of many instances, tags and bulk jobs; every store implements
    it (``store.operations``)."""

    @abc.abstractmethod
    async def search(
        self, where: Filter, limit: int, cursor: str | None, *, oldest_first: bool = False
    ) -> InstancePage:
        """A page of the instances ``where`` matches, newest first (by pk; or oldest first),
        each with its tags (:attr:`InstanceRecord.tags`). ``cursor`` is a previous page's
        ``next_cursor`` (a malformed one: ``ValueError``)."""

    @abc.abstractmethod
    async def count(self, where: Filter) -> int:
        """How many instances ``where`` matches."""

    @abc.abstractmethod
    async def version_counts(self, workflow: str) -> dict[str, dict[str, int]]:
        """The instances of ``workflow`` by version, then status: ``{"1": {"complete": 3}}``
        (only the versions and statuses some instance has). One read."""

    @abc.abstractmethod
    async def unfinished_steps(self, instance_pks: Sequence[int]) -> dict[int, list[StepRecord]]:
        """The steps of the instances ``instance_pks`` whose status is ``running`` or
        ``waiting``, by instance pk, each list in start order (``seq``); instances without one,
        and pks of no instance, are absent. One read however many instances (what a list reads
        to show what each instance waits for). Records as stored: a sleep past its wake time
        still reads ``waiting`` here."""

    @abc.abstractmethod
    async def histories(self, instances: Sequence[InstanceRecord]) -> dict[int, list[StepRecord]]:
        """The step histories of ``instances`` (records as read from this store), by pk, each in
        start order (``seq``) as :meth:`Store.get_steps` reads it; an instance without steps, or
        no longer stored, is absent. A few reads however many instances (what a replay check of
        thousands of instances reads), and no write.
        """

    @abc.abstractmethod
    async def tags_of(self, instance_pks: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The tags of these instances by pk (those without tags absent), one read."""

    @abc.abstractmethod
    async def add_tags(self, lease: Lease, tags: str) -> dict[str, Any]:
        """Merge ``tags`` (JSON text of an object, checked) into the instance's tags, fenced on
        the lease (``LeaseLostError``, nothing written); return all its tags. More than
        ``MAX_TAGS`` in the result: ``TagError``, nothing written."""

    @abc.abstractmethod
    async def start_bulk(self, job: NewBulkJob) -> BulkJob:
        """Record a running bulk job durably, in one transaction with what it will act on: the
        instances that match its filter now, up to the newest pk now (instances created later
        are not in it); ``total`` is how many match; ``started_by`` is kept as given. An id in
        use: ``ValueError``."""

    @abc.abstractmethod
    async def run_bulk_batch(self, job_id: str, batch: int) -> BulkBatch:
        """Act on the next ``batch`` instances of a running job, in pk order after its cursor,
        among those that still match its filter, and advance its cursor past them, in ONE
        transaction: a crash before it commits leaves nothing acted on and the cursor where it
        was, so each instance is acted on exactly once however often the job is resumed.
        Concurrent calls for one job take turns (each batch is distinct).

        The action is the one of :meth:`Store.control` (restart from ``(from_step, 1)``) or, for
        ``delete``, :meth:`RetentionStore.delete_instances` with ``finished_only``. An instance
        the action does not apply to (``IllegalStateError``, an unknown step, a dedup key taken)
        is skipped, counted and the reason kept in ``last_skip``. The job ends ``complete``
        when no matching instance is left. Returns the job after the batch and, for ``delete``,
        the instances it deleted. A job that is not running is returned unchanged; an unknown
        one raises :class:`BulkJobNotFoundError`."""

    @abc.abstractmethod
    async def bulk_jobs(self, status: BulkStatus | None, limit: int) -> list[BulkJob]:
        """The latest ``limit`` jobs (newest first), of ``status`` if given."""

    @abc.abstractmethod
    async def bulk_job(self, job_id: str) -> BulkJob:
        """The job, or :class:`BulkJobNotFoundError`."""

    @abc.abstractmethod
    async def cancel_bulk(self, job_id: str) -> BulkJob:
        """Stop a running job durably: no batch acts after this returns (what was acted on
        stays so). A job that ended is returned unchanged. Unknown: ``BulkJobNotFoundError``."""


__all__ = [
    "BULK_ACTIONS",
    "BULK_COLUMNS",
    "SKIPPABLE",
    "BulkAction",
    "BulkBatch",
    "BulkJob",
    "BulkJobNotFoundError",
    "BulkStatus",
    "InstanceRecord",
    "NewBulkJob",
    "OperationsStore",
    "bulk_from_row",
]
