"""Frozen records passed between the store, the runtime and the client."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from .values import readable

InstanceStatusName = Literal[
    "queued",
    "running",
    "paused",
    "errored",
    "terminated",
    "complete",
    "waiting",
    "waitingForPause",
]
INSTANCE_STATUSES: tuple[InstanceStatusName, ...] = (
    "queued",
    "running",
    "paused",
    "errored",
    "terminated",
    "complete",
    "waiting",
    "waitingForPause",
)
FINISHED_STATUSES: frozenset[str] = frozenset({"errored", "terminated", "complete"})
DEFAULT_VERSION = "1"
"""The version of a workflow that declares none (docs/versioning.md)."""

StepKind = Literal[
    "do",
    "sleep",
    "wait_for_event",
    "rollback",
    "start_workflow",
    "wait_for_workflow",
    "update",
    "publish",
    "patch",
]
"""``update``: an update's handler accepted (its reply is the record's output or error);
``publish``: an item ``run()`` published to a stream (docs/messaging.md); ``patch``: the marker
of a patch the instance took (``step.patched``, docs/versioning.md)."""
StepStatus = Literal["running", "waiting", "complete", "errored"]


AttemptState = Literal["running", "success", "failed", "interrupted"]


@dataclass(frozen=True)
class Attempt:
    """One attempt of a ``step.do``: its number (from 1), start, end, and error if it failed.

    ``interrupted``: the worker running it stopped before it ended (killed, crashed, or its lease
    was lost); the step ran again in a later attempt. ``ended_at`` is then when a worker found it
    interrupted, ``error`` says so.
    """

    number: int
    started_at: float
    ended_at: float | None = None
    error: dict[str, str] | None = None
    interrupted: bool = False

    @property
    def state(self) -> AttemptState:
        if self.interrupted:
            return "interrupted"
        if self.ended_at is None:
            return "running"
        return "failed" if self.error is not None else "success"

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "state": self.state,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Attempt:
        return cls(
            data["number"],
            data["started_at"],
            data.get("ended_at"),
            data.get("error"),
            data.get("state") == "interrupted",
        )


@dataclass(frozen=True)
class StepRecord:
    """A recorded step of an instance, identified by ``name`` and occurrence ``count``."""

    name: str
    count: int
    seq: int
    kind: StepKind
    status: StepStatus
    output: Any = None
    error: dict[str, str] | None = None
    attempts: tuple[Attempt, ...] = ()
    wake_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    info: dict[str, Any] | None = None

    @property
    def display_name(self) -> str:
        return f"{self.name}-{self.count}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.display_name,
            "step": self.name,
            "count": self.count,
            "seq": self.seq,
            "type": self.kind,
            "status": self.status,
            "output": readable(self.output),
            "error": self.error,
            "wake_at": self.wake_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "info": self.info,
            "attempts": [a.to_json() for a in self.attempts],
        }


@dataclass(frozen=True)
class EventRecord:
    """An event sent to an instance, as ``wait_for_event`` returns it."""

    type: str
    payload: Any
    timestamp: float

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "payload": self.payload, "timestamp": self.timestamp}


@dataclass(frozen=True)
class InstanceEvent:
    """An event sent to an instance, pending or consumed (:meth:`stepline.Instance.events`)."""

    type: str
    payload: Any
    sent_at: float
    consumed_by: str | None
    """The ``wait_for_event`` step that consumed it (``name-count``), or None while pending."""

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "payload": readable(self.payload),
            "sent_at": self.sent_at,
            "consumed_by": self.consumed_by,
        }


@dataclass(frozen=True)
class PendingEvent:
    """An event that no ``wait_for_event`` has consumed yet (store-internal id included)."""

    pk: int
    type: str
    payload: Any
    timestamp: float


@dataclass(frozen=True)
class InstanceRecord:
    """An instance as stored."""

    pk: int
    workflow: str
    id: str
    status: InstanceStatusName
    params: Any
    output: Any
    error: dict[str, str] | None
    rollback: dict[str, Any] | None
    trigger: str
    created_at: float
    updated_at: float
    started_at: float | None
    ended_at: float | None
    ready_at: float | None = None
    lease_owner: str | None = None
    parent: dict[str, Any] | None = None
    schedule: dict[str, Any] | None = None
    """For an instance a cron schedule created: ``{"name", "cron", "tick"}`` (tick: seconds
    since the epoch); None otherwise."""
    key: str | None = None
    """The flow control key given at creation (``create(key=...)``): the workflow's
    ``key_concurrency`` limits how many instances of one key run at once."""
    priority: int = 0
    """Lower runs first among runnable instances; equal priorities run in the order they
    became runnable."""
    dedup_key: str | None = None
    """While this instance is unfinished, no other instance of its workflow has this key."""
    traceparent: str | None = None
    """The W3C ``traceparent`` of the span that created it (its creator's, a queue message's,
    its parent workflow's), stored so that every activation continues one trace; None when its
    creator traced nothing (docs/observability.md)."""
    version: str = DEFAULT_VERSION
    """The version of its workflow's code it started under: only that code runs it
    (docs/versioning.md)."""
    delete_at: float | None = None
    """When retention deletes it (epoch seconds), set as it ends from its outcome's retention
    (its own, else its workflow's); None while unfinished, or when kept (docs/reliability.md)."""
    deadline_at: float | None = None
    """When the instance errors with :class:`~stepline.WorkflowTimeoutError` if it has not
    ended (its workflow's ``timeout``, ``create(timeout=...)``, or its parent's deadline); None
    for none, and once the deadline has been carried out (docs/operations.md, "Deadlines")."""
    patches: tuple[str, ...] = ()
    """The ids of the patches it took (its ``patch:<id>`` markers), sorted: only workers whose
    code has them all claim it (docs/versioning.md)."""
    tags: dict[str, Any] | None = None
    """Its tags (docs/operations.md), where the read that made this record read them (a
    filtered list, ``describe``); None where it did not."""

    def due(self, now: float) -> bool:
        """Whether its time to run has come at ``now`` (queued, its wake-up time, or the expiry
        of the lease of the worker that ran it): paused and finished instances have none."""
        return self.ready_at is not None and self.ready_at <= now

    def to_json(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "id": self.id,
            "status": self.status,
            "params": readable(self.params),
            "output": readable(self.output),
            "error": self.error,
            "rollback": self.rollback,
            "trigger": self.trigger,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "wake_at": self.ready_at if self.status == "waiting" else None,
            "parent": self.parent,
            "schedule": self.schedule,
            "key": self.key,
            "priority": self.priority,
            "dedup_key": self.dedup_key,
            "version": self.version,
            "delete_at": self.delete_at,
            "deadline_at": self.deadline_at,
            **({} if self.tags is None else {"tags": self.tags}),
        }


@dataclass(frozen=True)
class PendingRetry:
    """A step of an unfinished instance whose last attempt failed and that waits to be tried
    again (:func:`stepline.retrying.retry_of`): what ``status()``, lists and describe show of
    a retrying instance, which is otherwise just ``waiting``."""

    step: str
    """The step, ``name-count``."""
    attempt: int
    """The number of its attempt that failed last (1 for the first)."""
    error: dict[str, str]
    """That attempt's error, ``{"name", "message"}``."""
    next_attempt_at: float | None
    """When the next attempt is due (seconds since the epoch); None while it waits for a slot
    of a named limit instead."""

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "attempt": self.attempt,
            "error": self.error,
            "next_attempt_at": self.next_attempt_at,
        }


@dataclass(frozen=True)
class InstanceStatus:
    """What ``instance.status()`` returns: the fields Cloudflare Workflows reports, and the
    retry an unfinished instance waits for, if any."""

    status: InstanceStatusName
    output: Any = None
    error: dict[str, str] | None = None
    rollback: dict[str, Any] | None = None
    retry: PendingRetry | None = None
    warning: str | None = None
    """Why a due instance does not run, as describe and the dashboard say it: ``"no live
    worker serves 'name'"`` (or its version); None when a live worker serves it, or it is not
    due (docs/versioning.md)."""


@dataclass(frozen=True)
class InstancePage:
    """One page of ``list_instances``; pass ``cursor`` back to get the next page."""

    instances: list[InstanceRecord]
    cursor: str | None


@dataclass(frozen=True)
class WorkflowInfo:
    """A workflow known to the database, with its instance counts by status."""

    name: str
    class_name: str
    created_at: float
    updated_at: float
    definition: dict[str, Any] | None = None
    counts: dict[str, int] = field(default_factory=dict)
    limits: dict[str, Any] | None = None
    """Its flow control as registered (``WorkflowLimits.to_json``), None without limits."""
    retention: dict[str, float] | None = None
    """Its retention as registered, seconds by outcome; None without one."""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "class_name": self.class_name,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "definition": self.definition,
            "counts": self.counts,
            "limits": self.limits,
            "retention": self.retention,
        }


@dataclass(frozen=True)
class LimitState:
    """One limit that applies to an instance, and how much of it is in use now (what
    ``Store.limit_states`` reads to tell why an instance is still queued)."""

    scope: Literal["workflow", "key", "limit"]
    """What it limits: the workflow's instances, those of one key, or a named limit's."""
    name: str
    """The workflow's name, the key, or the named limit's name."""
    running: int
    """Instances it counts that run now (a live lease)."""
    concurrency: int | None
    started: int
    """First starts it counts within the last ``rate_period`` (0 without a rate)."""
    rate_count: int | None = None
    rate_period: float | None = None
    next_start: float | None = None
    """When the rate lets the next instance start, if ``started`` has reached ``rate_count``."""

    @property
    def full(self) -> bool:
        """Whether no more instances may run (concurrency) or start (rate) under it now."""
        at_capacity = self.concurrency is not None and self.running >= self.concurrency
        return at_capacity or self.next_start is not None


WORKER_LIVE_BEATS = 3
"""A worker is live while its last heartbeat is at most this many of its own heartbeat
intervals old: one late or lost beat does not make it look dead."""
WORKER_EXPIRE_BEATS = 20
"""A worker's row is deleted, by the next heartbeat of any worker, once its last heartbeat is
this many of its own intervals old (a worker killed without a graceful shutdown)."""


@dataclass(frozen=True)
class WorkerInfo:
    """A worker as it registers itself in the database with every heartbeat."""

    id: str
    host: str
    pid: int
    started_at: float
    last_seen: float
    """When its last heartbeat was written (seconds since the epoch, the store's clock)."""
    heartbeat: float
    """Seconds between its heartbeats."""
    workflows: tuple[str, ...]
    """The workflows it runs."""
    concurrency: int
    running: int
    """Activations it was running at its last heartbeat."""
    versions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The versions of each of its workflows it runs (a workflow absent: version "1")."""
    patches: dict[str, dict[str, tuple[str, ...]]] | None = None
    """The patch ids its code has, by workflow then version (it claims only instances whose
    patches are among them); None when it did not say (a worker of an earlier release)."""

    def live(self, now: float) -> bool:
        """Whether its last heartbeat is recent enough (:data:`WORKER_LIVE_BEATS`) at ``now``."""
        return now - self.last_seen <= self.heartbeat * WORKER_LIVE_BEATS

    def serves(self, workflow: str, version: str) -> bool:
        """Whether it runs ``version`` of ``workflow``."""
        return workflow in self.workflows and version in self.versions.get(
            workflow, (DEFAULT_VERSION,)
        )

    def has_patches(self, workflow: str, version: str, patches: Iterable[str]) -> bool:
        """Whether its code has every one of ``patches`` for ``version`` of ``workflow`` (a
        worker that did not say is taken to have them: no warning it cannot back)."""
        if self.patches is None:
            return True
        known = self.patches.get(workflow, {}).get(version, ())
        return all(patch in known for patch in patches)

    def to_json(self, now: float) -> dict[str, Any]:
        return {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "started_at": self.started_at,
            "last_seen": self.last_seen,
            "heartbeat": self.heartbeat,
            "workflows": list(self.workflows),
            "versions": {
                name: list(self.versions.get(name, (DEFAULT_VERSION,))) for name in self.workflows
            },
            "concurrency": self.concurrency,
            "running": self.running,
            "live": self.live(now),
        }


ScheduleSource = Literal["code", "api"]


@dataclass(frozen=True)
class ScheduleRecord:
    """A cron schedule as stored: its declaration (from code, or made at run time) and its state.

    ``last_tick``: the latest tick the scheduler handled (fired, skipped or buffered), None
    before the first; ``last_instance``: the id of the instance it last created;
    ``buffered_tick``: a tick held back by ``overlap = "buffer_one"`` until the previous
    instance finishes. Times are seconds since the epoch.
    """

    name: str
    workflow: str
    cron: str
    timezone: str
    params: Any
    catch_up: str
    catch_up_limit: int
    overlap: str
    paused: bool
    last_tick: float | None
    last_instance: str | None
    buffered_tick: float | None
    created_at: float
    updated_at: float
    source: ScheduleSource = "code"
    """``code``: declared by a workflow, synced by schedulers, read-only at run time; ``api``:
    created at run time (``engine.schedules().create``), changed and deleted the same way."""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "workflow": self.workflow,
            "cron": self.cron,
            "timezone": self.timezone,
            "params": self.params,
            "catch_up": self.catch_up,
            "catch_up_limit": self.catch_up_limit,
            "overlap": self.overlap,
            "paused": self.paused,
            "last_tick": self.last_tick,
            "last_instance": self.last_instance,
            "buffered_tick": self.buffered_tick,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }
