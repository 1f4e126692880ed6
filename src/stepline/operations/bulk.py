"""Bulk actions, the client's side: start a durable job over the instances a filter matches,
count them first (a dry run), follow, list and cancel jobs. The workers run the jobs
(``runner``); each batch commits its actions with the job's progress."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

from ..durations import Duration, parse_duration
from ..records import InstanceRecord
from ..store.base import Store
from ..store.operations import (
    BULK_ACTIONS,
    BulkAction,
    BulkJob,
    BulkJobNotFoundError,
    BulkStatus,
    NewBulkJob,
)
from .language import Filter
from .search import build_filter, plain_text

BULK_STATUSES: tuple[BulkStatus, ...] = ("running", "complete", "cancelled")


@dataclass(frozen=True)
class DryRun:
    """What a bulk action would act on: how many instances match now, and the first of them."""

    action: BulkAction
    filter: str
    count: int
    first: list[InstanceRecord]

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "filter": self.filter,
            "count": self.count,
            "first": [{"workflow": r.workflow, "id": r.id, "status": r.status} for r in self.first],
        }


class Bulk:
    """Bulk actions over one store (``engine.bulk``)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def _filter(self, action: str, where: str | Filter | None, workflow: str | None) -> Filter:
        if action not in BULK_ACTIONS:
            raise ValueError(f"unknown bulk action {action!r}: one of {', '.join(BULK_ACTIONS)}")
        chosen = build_filter(where, workflow=workflow)
        if chosen is None:
            raise ValueError(
                "a bulk action needs a filter (where) or a workflow: it never acts on every "
                "instance by default"
            )
        return chosen

    async def dry_run(
        self,
        action: BulkAction,
        where: str | Filter | None = None,
        *,
        workflow: str | None = None,
        first: int = 10,
    ) -> DryRun:
        """How many instances ``action`` would act on now, and the first ``first`` (oldest
        first, the order a job takes them); nothing is changed."""
        chosen = self._filter(action, where, workflow)
        count = await self._store.operations.count(chosen)
        page = await self._store.operations.search(chosen, max(first, 1), None, oldest_first=True)
        return DryRun(action, chosen.text, count, page.instances[:first])

    async def start(
        self,
        action: BulkAction,
        where: str | Filter | None = None,
        *,
        workflow: str | None = None,
        from_step: str | None = None,
        id: str | None = None,
        started_by: str | None = None,
    ) -> BulkJob:
        """Start a durable job: the workers act on every instance that matches now (those
        created later are not in it), in batches, each exactly once; returns the job (see
        :meth:`get`, :meth:`wait`, :meth:`cancel`). ``from_step``: a restart from that step
        (its first run), kept steps before it. ``started_by``: who starts it (1-200 characters
        of plain text), kept with the job to be shown (the HTTP API gives the token's name)."""
        chosen = self._filter(action, where, workflow)
        if from_step is not None and action != "restart":
            raise ValueError("from_step goes with the restart action only")
        if from_step is not None and (not plain_text(from_step) or not from_step):
            raise ValueError(f"from_step must be a step name, got {from_step!r}")
        job_id = id if id is not None else f"bulk-{uuid.uuid4().hex[:12]}"
        if not plain_text(job_id) or not 0 < len(job_id) <= 200:
            raise ValueError(f"invalid bulk job id {job_id!r}: 1-200 characters of plain text")
        if started_by is not None and (
            not plain_text(started_by) or not 0 < len(started_by) <= 200
        ):
            raise ValueError(
                f"started_by must be 1-200 characters of plain text, got {started_by!r}"
            )
        return await self._store.operations.start_bulk(
            NewBulkJob(job_id, action, chosen, from_step, started_by)
        )

    async def get(self, job_id: str) -> BulkJob:
        """The job's state and progress (``BulkJobNotFoundError`` if unknown)."""
        if not plain_text(job_id):
            raise BulkJobNotFoundError(str(job_id))
        return await self._store.operations.bulk_job(job_id)

    async def list(self, *, status: BulkStatus | None = None, limit: int = 50) -> list[BulkJob]:
        """The latest jobs, newest first."""
        if status is not None and status not in BULK_STATUSES:
            raise ValueError(
                f"unknown bulk job status {status!r}: one of {', '.join(BULK_STATUSES)}"
            )
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit!r}")
        return await self._store.operations.bulk_jobs(status, limit)

    async def cancel(self, job_id: str) -> BulkJob:
        """Stop a running job: no batch acts after this returns."""
        if not plain_text(job_id):
            raise BulkJobNotFoundError(str(job_id))
        return await self._store.operations.cancel_bulk(job_id)

    async def wait(
        self, job_id: str, *, timeout: Duration | None = None, poll: float = 0.2
    ) -> BulkJob:
        """Wait until the job has ended (a worker must be running it); ``TimeoutError``."""
        limit = None if timeout is None else parse_duration(timeout, what="timeout")

        async def ended() -> BulkJob:
            while True:
                job = await self.get(job_id)
                if job.status != "running":
                    return job
                await asyncio.sleep(poll)

        return await asyncio.wait_for(ended(), limit)
