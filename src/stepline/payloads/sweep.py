"""The orphan sweep: deletes blobs that no row references any more.

A blob is written before the row that references it, so a crash between the two, a step
attempt whose record was fenced out, or a purge that removed rows leaves a blob behind. The
sweep lists the blob store and deletes what is older than a grace period (a blob a running step
just wrote has no row yet) and is referenced by no row of its instance, or whose instance is
gone. It reads rows with the store's ordinary reads; a worker runs it beside retention.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from ..errors import InstanceNotFoundError
from ..store.base import Store
from .blobs import split_key
from .codec import PayloadCodec
from .envelope import BLOB, envelope_kind


async def sweep_orphans(
    codec: PayloadCodec, store: Store, *, grace: float, now: float | None = None
) -> int:
    """Delete the orphaned blobs older than ``grace`` seconds (by the blob store's clock, ``now``
    default real time); return how many were deleted."""
    if codec.blobs is None:
        return 0
    cutoff = (time.time() if now is None else now) - grace
    by_instance: dict[tuple[str, str], list[str]] = defaultdict(list)
    for entry in await codec.blobs.list_blobs():
        parts = split_key(entry.key)
        if parts is not None and entry.modified < cutoff:
            by_instance[parts[0], parts[1]].append(entry.key)
    doomed: list[str] = []
    for (workflow, instance_id), keys in by_instance.items():
        referenced = await _referenced(store, workflow, instance_id)
        doomed.extend(key for key in keys if key not in referenced)
    if doomed:
        await codec.blobs.delete(doomed)
    return len(doomed)


async def _referenced(store: Store, workflow: str, instance_id: str) -> set[str]:
    """The blob keys the rows of an instance reference (none when it no longer exists)."""
    try:
        record = await store.get_instance(workflow, instance_id)
        steps = await store.get_steps(workflow, instance_id)
        events = await store.get_events(workflow, instance_id)
    except InstanceNotFoundError:
        return set()
    values: list[Any] = [record.params, record.output]
    values.extend(step.output for step in steps)
    values.extend(event.payload for event in events)
    return set(_blob_keys(values))


def _blob_keys(values: Iterable[Any]) -> Iterable[str]:
    for value in values:
        if envelope_kind(value) == BLOB and isinstance(value[BLOB], dict):
            yield str(value[BLOB].get("key"))
