"""Worker liveness for clients: flag instances that wait for a worker no live one provides.

Workers register themselves with a heartbeat (:meth:`stepline.store.base.Store.heartbeat`); a
worker is live while its last heartbeat is recent (:meth:`stepline.records.WorkerInfo.live`).
An instance that is due to run (queued, or its wake-up time or a dead worker's lease has come)
but of a workflow that no live worker runs would wait forever without a hint: describe, the
HTTP API and the dashboard show :func:`unserved_warning` for it.
"""

from __future__ import annotations

from collections.abc import Sequence

from .records import DEFAULT_VERSION, InstanceRecord, WorkerInfo
from .workflow import validate_version, version_order


def unserved_warning(
    record: InstanceRecord, workers: Sequence[WorkerInfo], now: float
) -> str | None:
    """``"no live worker serves 'name'"`` when ``record`` is due to run at ``now`` and none of
    the live ``workers`` runs its workflow (``"no live worker serves version 'v' of 'name'"``
    when some run the workflow but none its version; ``"no live worker has patch 'p' of
    version 'v' of 'name'"`` when some run its version but none has every patch it took: a
    worker claims only instances whose patches its code has); else None.

    Due: its ``ready_at`` (creation, wake-up time, retry time, or the expiry of the lease of
    the worker running it) has come; paused and finished instances have none. An instance
    sleeping until a later time is not flagged: it needs no worker yet.
    """
    if not record.due(now):
        return None
    live = [worker for worker in workers if worker.live(now)]
    serving = [w for w in live if w.serves(record.workflow, record.version)]
    if any(w.has_patches(record.workflow, record.version, record.patches) for w in serving):
        return None
    if serving:
        missing = [
            patch
            for patch in record.patches
            if not any(w.has_patches(record.workflow, record.version, (patch,)) for w in serving)
        ] or list(record.patches)  # each had by some, never all by one
        named = ", ".join(repr(patch) for patch in missing)
        return (
            f"no live worker has patch{'es' if len(missing) > 1 else ''} {named} of version "
            f"{record.version!r} of {record.workflow!r}"
        )
    if any(record.workflow in worker.workflows for worker in live):
        return f"no live worker serves version {record.version!r} of {record.workflow!r}"
    return f"no live worker serves {record.workflow!r}"


def version_served(name: str, version: str | None, workers: Sequence[WorkerInfo]) -> str:
    """The version a create of workflow ``name`` uses when only the live ``workers`` know its
    code: ``version`` if one of them serves it, else the newest they serve (``version`` None);
    with none serving ``name``, the default version. An unknown ``version`` raises
    ``ValueError`` naming it and the versions served."""
    served = sorted(
        {
            v
            for w in workers
            if name in w.workflows
            for v in w.versions.get(name, (DEFAULT_VERSION,))
        },
        key=version_order,
    )
    if version is None:
        return served[-1] if served else DEFAULT_VERSION
    validate_version(version)
    if version in served or (not served and version == DEFAULT_VERSION):
        return version
    known = ", ".join(repr(v) for v in served) or "none"
    raise ValueError(
        f"workflow {name!r} has no version {version!r}: the live workers serve {known}"
    )
