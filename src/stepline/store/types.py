"""The values the store contract passes (see :mod:`stepline.store.base`): leases and claims,
histories, instances to create, step writes, how an activation ends, what a worker registers,
and the watch on one instance's changes."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..flow.claiming import NextLook
from ..limits import WorkflowLimits
from ..records import (
    DEFAULT_VERSION,
    Attempt,
    InstanceRecord,
    PendingEvent,
    StepKind,
    StepRecord,
    StepStatus,
)
from ..values import readable


@dataclass(frozen=True)
class Lease:
    """Proof that a worker holds an instance: every fenced write checks ``token``.

    A lease is held until a claim takes the instance over, a terminate or restart fences it out,
    or :meth:`Store.finish` / :meth:`Store.release` gives it back. Expiry alone does not end it:
    it makes the instance claimable, and the holder's writes succeed until someone claims it.
    """

    pk: int
    token: int
    owner: str


def new_lease_token() -> int:
    """The lease token of a claim: random, not a count. A worker keeps one id for its life, so
    only the token tells its activations of one instance apart; a count would repeat the token
    of a claim the database lost in a crash (a PostgreSQL claim commits without waiting for the
    WAL flush), and the lost claim's activation, still running, would pass the new one's fence."""
    return secrets.randbits(62)


@dataclass(frozen=True)
class Claim:
    """A claimed instance, ready to be activated."""

    instance: InstanceRecord
    lease: Lease
    control: str | None
    """``"terminate_rollback"`` when a termination with rollback is waiting to be carried out;
    ``"timeout"`` or ``"cancel"`` when an interruption is (a deadline passed, a parent's end:
    ``store.closing``): the rollbacks run, then the instance ends errored."""
    event_seq: int
    """A counter of what may wake the instance (events sent, children ended); passed back to
    :meth:`Store.finish` to catch what came during the activation."""
    history: History
    """The instance's recorded steps and unconsumed events when it was claimed: every event
    counted in ``event_seq`` is here unless consumed (one sent later may be too). Nothing but
    the lease holder writes steps, so they stay current while the lease is held."""


@dataclass(frozen=True)
class Claimed:
    """What :meth:`Store.claim` took, and when the worker should look for runnable instances
    again if the claim can tell (instead of asking :meth:`Store.next_wakeup`)."""

    claims: list[Claim]
    next_look: NextLook | None = None
    """None when the claim cannot tell: it took all it asked for and more may be runnable, it
    stopped reading before the end of what is due, or a start it took used up a rate."""


@dataclass(frozen=True)
class History:
    """Everything an activation needs to replay: recorded steps and unconsumed events."""

    steps: list[StepRecord]
    """In start order (``seq``)."""
    events: list[PendingEvent]
    """In send order."""


ROUTE_SEPARATOR = "\x1f"
"""Between a workflow's name and a version in a route (``chr(31)`` in SQL)."""


PATCH_PREFIX = "patch:"
"""A patch marker's record (kind ``patch``) is named this and the patch id."""


def patch_id(marker: str) -> str:
    """The patch id a marker's record name holds (``patch:<id>``)."""
    return marker[len(PATCH_PREFIX) :]


PatchesKnown = Mapping[tuple[str, str], Collection[str]]
"""The patch ids a worker's code has, by (workflow name, version) (``Store.claim``'s
``patches``)."""


@dataclass(frozen=True)
class Routing:
    """What a claim may take of its workflows' instances, as the stores compare it: ``routes``,
    the (workflow, version) pairs, each ``name + ROUTE_SEPARATOR + version`` (None: every
    version); ``patches``, the patches its code has, each a route, ``ROUTE_SEPARATOR`` and the
    id (None: every patch). An instance is taken only if its route is one of ``routes`` and
    each patch it recorded, prefixed by its route, is one of ``patches``."""

    routes: tuple[str, ...] | None
    patches: tuple[str, ...] | None

    @property
    def shape(self) -> tuple[int | None, int | None]:
        """How many routes and patches (a statement's shape, for those built per shape)."""
        return (
            None if self.routes is None else len(self.routes),
            None if self.patches is None else len(self.patches),
        )

    @property
    def params(self) -> tuple[str, ...]:
        """The routes, then the patches: the parameters in the order statements take them."""
        return (*(self.routes or ()), *(self.patches or ()))


def routing(
    workflows: Sequence[str],
    versions: Mapping[str, Sequence[str]] | None,
    patches: PatchesKnown | None = None,
) -> Routing | None:
    """A claim's :class:`Routing` (None when it takes every version and every patch)."""
    served = routes(workflows, versions)
    if served is None and patches is None:
        return None
    known = (
        None
        if patches is None
        else tuple(
            sorted(
                f"{name}{ROUTE_SEPARATOR}{version}{ROUTE_SEPARATOR}{found}"
                for (name, version), ids in patches.items()
                if name in workflows
                for found in ids
            )
        )
    )
    return Routing(served, known)


def routes(
    workflows: Sequence[str], versions: Mapping[str, Sequence[str]] | None
) -> tuple[str, ...] | None:
    """The (workflow, version) pairs a claim may take, as ``name + ROUTE_SEPARATOR + version``
    (what the stores compare ``workflow || chr(31) || version`` with): for each of
    ``workflows``, its ``versions`` (absent: the default version); None for ``versions`` None
    (every version)."""
    if versions is None:
        return None
    return tuple(
        f"{name}{ROUTE_SEPARATOR}{version}"
        for name in workflows
        for version in versions.get(name, (DEFAULT_VERSION,))
    )


@dataclass(frozen=True)
class NewInstance:
    """An instance to create: ``params`` is already-encoded JSON text (or None)."""

    id: str
    params: str | None
    parent: str | None = None
    """JSON text ``{"workflow", "id", "step"}`` for child instances started by a parent's step."""
    schedule: str | None = None
    """JSON text ``{"name", "cron", "tick"}`` for instances a cron schedule created."""
    key: str | None = None
    """The flow control key (see :attr:`InstanceRecord.key`)."""
    priority: int = 0
    """Lower is claimed first (see :meth:`Store.claim`)."""
    dedup_key: str | None = None
    """No two unfinished instances of a workflow share one (see :meth:`Store.create_instances`)."""
    traceparent: str | None = None
    """The W3C trace context its activations continue (see :attr:`InstanceRecord.traceparent`)."""
    version: str = DEFAULT_VERSION
    """The version of its workflow it starts under (see :attr:`InstanceRecord.version`)."""
    retention: str | None = None
    """JSON text ``{outcome: seconds}``: its own retention, over its workflow's (see
    :meth:`RetentionStore.purge_expired`)."""
    deadline_at: float | None = None
    """When it errors with ``WorkflowTimeoutError`` if unfinished (see
    :meth:`ClosingStore.expire_deadlines`)."""
    parent_pk: int | None = None
    """The pk of the parent instance whose step starts this one (with :attr:`parent`)."""
    on_parent_close: str | None = None
    """``"terminate"``, ``"request_cancel"`` or ``"abandon"``: what the parent's end (errored
    or terminated) does to this child while it is unfinished (see :meth:`Store.finish`)."""
    tags: str | None = None
    """JSON text of its tags, an object of key to text, number or boolean (checked by
    ``operations.language.check_tags``); None for none."""


KeyedConflict = Literal["debounce", "replace_queued"]
"""What :meth:`ClosingStore.create_keyed` does with the instances its key holds."""


@dataclass(frozen=True)
class BatchItem:
    """One item of :meth:`ClosingStore.create_keyed_batch`: an instance to create, and for a
    keyed create what it does with the instances its key holds and when it becomes runnable."""

    item: NewInstance
    on_conflict: KeyedConflict | None = None
    ready_at: float | None = None


@dataclass(frozen=True)
class StepWrite:
    """A step's new state, written by :meth:`Store.record_step` (insert or replace)."""

    name: str
    count: int
    seq: int
    kind: StepKind
    status: StepStatus
    output: str | None = None
    """Encoded JSON text."""
    error: dict[str, str] | None = None
    attempts: tuple[Attempt, ...] = ()
    wake_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    info: dict[str, Any] | None = None
    consume_event: int | None = None
    """The pk of a pending event this step consumes, atomically with the write."""
    update: str | None = None
    """The id of the update whose handler this record (kind ``update``) is: written
    ``running`` it marks the update running; ``complete`` or ``errored`` it records the
    record's output or error as the update's reply, unless the update has one already (a
    finish may carry such an ending record, see :attr:`Finish.steps`)."""
    publish: NewStreamItem | None = None
    """An item this record (kind ``publish``) appends to a stream of its instance, atomically
    with the write (see :meth:`MessageStore.publish`). Only :meth:`Store.record_step` writes it."""
    new: bool = False
    """True when the writer knows of no record of this step (``name``, ``count``): none in the
    claim's history and none written under its lease. A store may then insert without first
    looking for a record to replace, or ignore the field. It must still end with exactly this
    record if one exists after all (a retried write whose first attempt committed, its reply
    lost): replace it, never fail or keep two."""


FinishStatus = Literal["complete", "errored", "terminated", "waiting"]

UpdateStatus = Literal["pending", "running", "complete", "errored", "rejected"]
"""An update's progress: sent, its handler running, answered (a reply or the handler's
error), or turned down before it ran (an unknown name, arguments its handler does not take,
its validator)."""

UPDATE_EVENT = "@update"
"""The type of the event that carries an update to its instance (no event a client sends can
have it: event types start with a letter, a digit or ``_``)."""


@dataclass(frozen=True)
class UpdateRecord:
    """An update as stored (:meth:`MessageStore.get_update`)."""

    update_id: str
    name: str
    status: UpdateStatus
    reply: Any
    """The handler's return value (decoded JSON) once ``complete``."""
    error: dict[str, str] | None
    """``{name, message}`` once ``errored`` or ``rejected``."""
    created_at: float
    ended_at: float | None
    instance_status: str
    """The status of the instance when this was read (a pending update of a finished instance
    will never run)."""

    @property
    def answered(self) -> bool:
        return self.status in ("complete", "errored", "rejected")


@dataclass(frozen=True)
class UpdateAnswer:
    """An update's answer as a handler's end record wrote it (:meth:`Signals.answered`)."""

    update_id: str
    status: UpdateStatus
    reply: str | None
    """The reply as stored (JSON text) when ``complete``."""
    error: dict[str, str] | None

    @classmethod
    def of(cls, write: StepWrite) -> UpdateAnswer | None:
        """The answer a step record carries: one that ends an update's handler."""
        if write.update is None or write.status not in ("complete", "errored"):
            return None
        reply = write.output if write.status == "complete" else None
        return cls(write.update, write.status, reply, write.error)


@dataclass(frozen=True)
class NewStreamItem:
    """An item to append to one stream of an instance (:meth:`MessageStore.publish`)."""

    stream: str
    value: str | None
    """Encoded JSON text."""
    origin: str
    """Who published it, unique within the stream: an item whose origin the stream holds
    already is not appended again (a retried step publishing what its first attempt did)."""
    keep: int
    """The stream keeps its last ``keep`` items (older ones are deleted as this one is added)."""
    keep_seconds: float | None = None
    """And, if given, none older than this many seconds."""


@dataclass(frozen=True)
class StreamItem:
    """An item of a stream: its place ``seq`` (1, 2, ... in publish order: a reader's cursor),
    its value (decoded JSON) and when it was published."""

    stream: str
    seq: int
    value: Any
    created_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "seq": self.seq,
            "value": readable(self.value),
            "created_at": self.created_at,
        }


@dataclass(frozen=True)
class StreamRead:
    """Items of one stream after a cursor, and the instance's status when they were read."""

    items: list[StreamItem]
    instance_status: str


@dataclass(frozen=True)
class QueryRequest:
    """A query a client without the workflow's code asks a worker to answer
    (:meth:`MessageStore.take_queries`)."""

    pk: int
    workflow: str
    instance_id: str
    name: str
    args: str
    """Encoded JSON text: the list of arguments."""


@dataclass(frozen=True)
class QueryAnswer:
    """A worker's answer to a :class:`QueryRequest`: the handler's value (encoded JSON text), or
    the error ``{name, message}``."""

    answer: str | None
    error: dict[str, str] | None


@dataclass(frozen=True)
class Finish:
    """How an activation ends.

    ``waiting`` means suspended: the instance becomes ready again at ``wake_at`` (or when an event
    arrives if ``wake_at`` is None). If events arrived since ``event_seq`` was read, it is made
    ready at once instead, so no event is ever missed. A pause requested meanwhile
    (``waitingForPause``) turns ``waiting`` into ``paused``.
    """

    status: FinishStatus
    output: str | None = None
    error: dict[str, str] | None = None
    rollback: dict[str, Any] | None = None
    wake_at: float | None = None
    event_seq: int = 0
    steps: tuple[StepWrite, ...] = ()
    """Step records not yet written, written by :meth:`Store.finish` in its own transaction,
    fenced on the same lease and before the status change: all of them with the end, or
    (lease lost) none. Each is its step's latest record, one per step (``name``, ``count``);
    none sets ``consume_event`` or ``publish``, and one that sets ``update`` ends its handler
    (complete or errored); a store must write them, and record such a reply, as
    :meth:`Store.record_step` would (its waiters told, as of a finish)."""
    parked_on: str | None = None
    """With ``waiting``: the named limit a step waits for a slot of (see
    :meth:`Store.release_limit`, which wakes the instance parked longest on it). A claim clears
    it."""


@dataclass(frozen=True)
class WorkflowMeta:
    """What a worker registers about a workflow it can run."""

    name: str
    class_name: str
    definition: dict[str, Any] | None = None
    limits: WorkflowLimits = field(default_factory=WorkflowLimits)
    """Its flow control, which every worker's claims apply (see :meth:`Store.claim`)."""
    retention: dict[str, float] | None = None
    """Seconds its instances are kept after they end, by outcome: what sets each one's
    ``delete_at`` when it ends (see :meth:`RetentionStore.purge_expired`)."""


@dataclass(frozen=True)
class ScheduleDefinition:
    """A schedule as declared in code, for :meth:`Store.sync_schedules`: ``params`` is
    already-encoded JSON text (or None)."""

    name: str
    workflow: str
    cron: str
    timezone: str
    params: str | None
    catch_up: str
    catch_up_limit: int
    overlap: str


ControlAction = Literal["pause", "resume", "terminate", "restart"]


class ChangeWatch:
    """Changes of one instance since the watch began or since its last :meth:`wait` returned
    (see ``Signals.watch_changes``)."""

    def __init__(self) -> None:
        self._changed = False
        self._waiter: asyncio.Future[None] | None = None

    def changed(self) -> None:
        """Called by the store when the instance changed."""
        self._changed = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self, timeout: float) -> None:
        """Return once the instance has changed since the last call (at once if it already
        has), or after ``timeout`` seconds. One wait at a time."""
        if self._waiter is not None:
            raise RuntimeError("a ChangeWatch serves one wait at a time")
        if not self._changed:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait((self._waiter,), timeout=timeout)
            finally:
                self._waiter = None
        self._changed = False
