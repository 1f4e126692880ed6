"""Worker liveness for clients: flag instances that wait for a worker no live one provides.

Workers register themselves with a heartbeat (:meth:`stepline.store.base.Store.heartbeat`); a
worker is live while its last heartbeat is recent (:meth:`stepline.records.WorkerInfo.live`).
An instance that is due to run (queued, or its wake-up time or a dead worker's lease has come)
but of a workflow that no live worker runs would wait forever without a hint: describe, the
HTTP API and the dashboard show :func:`unserved_warning` for it.
"""

from __future__ import annotations

from collections.abc import Sequence

from .records import InstanceRecord, WorkerInfo


def unserved_warning(
    record: InstanceRecord, workers: Sequence[WorkerInfo], now: float
) -> str | None:
    """``"no live worker serves 'name'"`` when ``record`` is due to run at ``now`` and none of
    the live ``workers`` runs its workflow; else None.

    Due: its ``ready_at`` (creation, wake-up time, retry time, or the expiry of the lease of
    the worker running it) has come; paused and finished instances have none. An instance
    sleeping until a later time is not flagged: it needs no worker yet.
    """
    if not record.due(now):
        return None
    if any(record.workflow in worker.workflows and worker.live(now) for worker in workers):
        return None
    return f"no live worker serves {record.workflow!r}"
