"""Checking a deploy: replay recorded histories from a database through today's code.

The database is opened read-only (the server or SQLite refuses writes, and nothing migrates);
histories are read a page at a time (:meth:`OperationsStore.histories`), and every replay writes
to one scratch store in memory (:class:`Replayer`), so no callback runs and nothing stored
changes.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._json import DEFAULT_MAX_PAYLOAD
from ..clock import ManualClock
from ..payloads import PayloadConfig, build_codec
from ..records import InstanceRecord, StepRecord
from ..store import create_store
from ..store.base import Store
from ..workflow import WorkflowDefinition, definition_of
from ._replay import Replayer, ReplayError

PAGE = 500
"""Instances read (with their histories) per round of reads."""

STATUSES = (
    "complete",
    "errored",
    "terminated",
    "queued",
    "running",
    "paused",
    "waiting",
    "waitingForPause",
)
"""What a check replays by default: every instance, finished or in flight."""


@dataclass(frozen=True)
class ReplayResult:
    """One instance replayed: ``step`` and ``message`` say where and how it diverged (both
    None when it replays)."""

    workflow: str
    id: str
    status: str
    step: str | None = None
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.message is None

    def to_json(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "id": self.id,
            "status": self.status,
            "ok": self.ok,
            "step": self.step,
            "message": self.message,
        }


@dataclass(frozen=True)
class ReplayReport:
    """What :func:`replay_check` found: every instance replayed, in the order read."""

    results: list[ReplayResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def diverged(self) -> list[ReplayResult]:
        return [r for r in self.results if not r.ok]

    @property
    def ok(self) -> bool:
        return not self.diverged


async def replay_check(
    url: str,
    workflows: Iterable[Any],
    *,
    statuses: Sequence[str] | None = None,
    limit: int | None = 1000,
    since: float | None = None,
    max_payload: int = DEFAULT_MAX_PAYLOAD,
    payloads: PayloadConfig | None = None,
) -> ReplayReport:
    """Replay the recorded instances of ``workflows`` (classes, objects or definitions as
    registered) stored at ``url`` with the code as it is now, running no callback and changing
    nothing in the database (opened read-only).

    ``statuses``: only instances in these (default: all). ``limit``: at most this many
    instances per workflow, newest first (None: all). ``since``: only instances created at or
    after this time (epoch seconds). ``payloads``: the blob store and keys that open stored
    values, as the engine's (docs/data.md). Returns a :class:`ReplayReport`: its ``diverged``
    results name each instance and the step where today's code leaves its history. Each
    instance is replayed by the code of its version (docs/versioning.md); one of a version no
    given workflow has is left out (no code of today's would run it).
    """
    definitions = [w if isinstance(w, WorkflowDefinition) else definition_of(w) for w in workflows]
    by_name: dict[str, dict[str, WorkflowDefinition]] = {}
    for definition in definitions:
        by_name.setdefault(definition.name, {})[definition.version] = definition
    wanted = tuple(statuses) if statuses else STATUSES
    started = time.perf_counter()
    store = create_store(url, create=False, read_only=True)
    await store.open()
    results: list[ReplayResult] = []
    try:
        clock = ManualClock(store.now())
        codec = build_codec(payloads, url, max_payload)
        async with Replayer(clock, max_payload, codec) as replayer:
            for name, versions in by_name.items():
                async for record, steps in _histories(store, name, wanted, limit, since):
                    code = versions.get(record.version)
                    if code is not None:
                        results.append(await _one(replayer, record, steps, code))
    finally:
        await store.close()
    return ReplayReport(results, time.perf_counter() - started)


async def _one(
    replayer: Replayer,
    record: InstanceRecord,
    steps: list[StepRecord],
    definition: WorkflowDefinition,
) -> ReplayResult:
    try:
        await replayer.replay(record, steps, definition.make())
    except ReplayError as exc:
        return ReplayResult(record.workflow, record.id, record.status, exc.step, str(exc))
    return ReplayResult(record.workflow, record.id, record.status)


async def _histories(
    store: Store, workflow: str, statuses: tuple[str, ...], limit: int | None, since: float | None
) -> AsyncIterator[tuple[InstanceRecord, list[StepRecord]]]:
    """The instances of ``workflow`` in ``statuses`` with their histories, newest first, a page
    at a time, ``limit`` at most, none created before ``since``."""
    left = limit
    cursor: str | None = None
    while left is None or left > 0:
        size = PAGE if left is None else min(PAGE, left)
        # One status: the store filters (an index); several: this loop does.
        only = statuses[0] if len(statuses) == 1 else None
        page = await store.list_instances(workflow, only, size, cursor)
        chosen = [
            i
            for i in page.instances
            if i.status in statuses and (since is None or i.created_at >= since)
        ]
        if left is not None:
            chosen = chosen[:left]
            left -= len(chosen)
        histories = await store.operations.histories(chosen)
        for record in chosen:
            yield record, histories.get(record.pk, [])
        older = page.instances and since is not None and page.instances[-1].created_at < since
        cursor = page.cursor
        if cursor is None or older:
            return
