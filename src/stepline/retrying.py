"""Whether an unfinished instance is retrying a step, and which attempt failed with what.

A step whose attempt failed and that will be tried again is recorded ``waiting`` until its next
attempt, with its attempts so far; the instance meanwhile is ``waiting`` (or ``running``, while
a short delay passes in memory), like one that sleeps. :func:`read_retries` tells them apart
for a whole page of instances with one read
(:meth:`stepline.store.operations.OperationsStore.unfinished_steps`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .records import FINISHED_STATUSES, InstanceRecord, PendingRetry, StepRecord
from .store.base import Store


def retry_of(steps: Iterable[StepRecord]) -> PendingRetry | None:
    """The retry among an instance's steps: a ``do`` or rollback step recorded ``waiting`` whose
    last attempt failed; of several (parallel steps), the one whose attempt failed last."""
    found: PendingRetry | None = None
    failed_at = float("-inf")
    for step in steps:
        if step.kind not in ("do", "rollback") or step.status != "waiting" or not step.attempts:
            continue
        last = step.attempts[-1]
        if last.state != "failed" or last.error is None:
            continue
        ended = last.ended_at if last.ended_at is not None else last.started_at
        if found is not None and ended <= failed_at:
            continue
        for_slot = bool((step.info or {}).get("limit"))
        found = PendingRetry(
            step.display_name, last.number, dict(last.error), None if for_slot else step.wake_at
        )
        failed_at = ended
    return found


async def read_retries(
    store: Store, records: Sequence[InstanceRecord]
) -> list[PendingRetry | None]:
    """:func:`retry_of` for each record (None for a finished one), in one read for all."""
    pks = [record.pk for record in records if record.status not in FINISHED_STATUSES]
    if not pks:
        return [None] * len(records)
    steps = await store.operations.unfinished_steps(pks)
    return [
        None if record.status in FINISHED_STATUSES else retry_of(steps.get(record.pk, ()))
        for record in records
    ]
