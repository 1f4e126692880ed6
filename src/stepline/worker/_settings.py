"""A worker's tuning and its default id."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field

from ..payloads import PayloadCodec


@dataclass(frozen=True)
class WorkerSettings:
    """Tuning of a worker. Defaults suit most deployments."""

    concurrency: int = 100
    """Activations run at once. One whose run is over no longer counts while its final write
    (finish) is in flight: it holds its lease until that commits, but runs no more code."""
    lease: float = 30.0
    """Seconds a claim is valid without renewal; a dead worker's instances move after this."""
    poll_interval: float = 0.5
    """Longest idle wait between looks at the database (other processes' work, timers)."""
    min_poll_interval: float = 0.002
    """First idle wait after activity; doubles up to ``poll_interval``."""
    grace_period: float = 10.0
    """On shutdown, how long running steps may take to finish before they are cancelled."""
    claim_batch: int = 50
    max_payload: int = 1024 * 1024
    retention: float | None = None
    """Delete complete, errored and terminated instances this long after they ended."""
    heartbeat: float = 5.0
    """Seconds between the worker's heartbeats: its row in the store's worker list (what
    ``stepline workers list`` shows). It counts as live while its last heartbeat is at most
    :data:`~stepline.records.WORKER_LIVE_BEATS` intervals old."""
    stream_keep: int = 1000
    """Items each stream of an instance keeps (its last ones), unless the workflow says."""
    stream_keep_for: float | None = 7 * 86400.0
    """Seconds a stream's items are kept (None: no age limit), unless the workflow says."""
    payloads: PayloadCodec = field(default_factory=PayloadCodec)
    """Seals and opens stored values (offload, encryption; :mod:`stepline.payloads`)."""
    sweep_grace: float = 3600.0
    """Seconds an unreferenced blob is kept before the orphan sweep deletes it."""


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
