"""The store interface: every domain operation the engine needs from a database.

One narrow abstract class, :class:`Store`: the instances, their activations and the
workflows' registration; and, as objects of their own each with its interface, its cron
schedules (``store.schedules``: :class:`ScheduleStore`, ``schedules.py``), its flow control
beyond the claim (``store.flow``: :class:`FlowStore`, ``flow.py``), its fleet-wide figures
(``store.stats``: :class:`StatsStore`, ``stats.py``), its record of live workers
(``store.workers``: :class:`WorkerStore`, ``workers.py``), its messaging (``store.messages``:
:class:`MessageStore`, ``messages.py``), its operations over many instances
(``store.operations``: :class:`OperationsStore`, ``operations.py``, with the steps of many
instances read at once), the instances ended on
its own or by a key (``store.closing``: :class:`ClosingStore`, ``closing.py``) and its deletes
(``store.retention``: :class:`RetentionStore`, ``retention.py``). The values they pass are in
``types.py`` (re-exported here). SQLite and PostgreSQL implement them (one package each) and
both pass the same contract test suite. Every operation documents its contract. Driver errors
never escape: an implementation translates them into stepline's exceptions at this boundary,
chained with ``from``.

Times are float seconds since the epoch. Operations that depend on the current time take it as
``now`` from :meth:`Store.now`, the store's clock: the clock it was given, or without one real
time (the database server's where the server has a clock), so all workers agree on timers and
lease expiry.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Mapping, Sequence

from ..limits import Limit
from ..records import (
    InstanceEvent,
    InstancePage,
    InstanceRecord,
    StepRecord,
    WorkflowInfo,
)
from .closing import ClosingStore
from .flow import FlowStore
from .messages import MessageStore
from .operations import OperationsStore
from .retention import DeletedInstance, RetentionStore
from .schedules import ScheduleStore
from .signals import Signals
from .stats import EndedCount, FleetCounts, StatsStore
from .types import (
    BatchItem,
    ChangeWatch,
    Claim,
    Claimed,
    ControlAction,
    Finish,
    FinishStatus,
    History,
    KeyedConflict,
    Lease,
    NewInstance,
    NewStreamItem,
    PatchesKnown,
    QueryAnswer,
    QueryRequest,
    ScheduleDefinition,
    StepWrite,
    StreamItem,
    StreamRead,
    UpdateRecord,
    WorkflowMeta,
)
from .workers import WorkerStore

__all__ = [
    "BatchItem",
    "ChangeWatch",
    "Claim",
    "Claimed",
    "ClosingStore",
    "ControlAction",
    "DeletedInstance",
    "EndedCount",
    "Finish",
    "FinishStatus",
    "FleetCounts",
    "FlowStore",
    "History",
    "KeyedConflict",
    "Lease",
    "MessageStore",
    "NewInstance",
    "NewStreamItem",
    "OperationsStore",
    "PatchesKnown",
    "QueryAnswer",
    "QueryRequest",
    "RetentionStore",
    "ScheduleDefinition",
    "ScheduleStore",
    "StatsStore",
    "StepWrite",
    "Store",
    "StreamItem",
    "StreamRead",
    "UpdateRecord",
    "WorkerStore",
    "WorkflowMeta",
]


class Store(abc.ABC):
    """Abstract store. Subclasses: :class:`~stepline.store.sqlite.SqliteStore`, PostgreSQL."""

    url: str
    schedules: ScheduleStore
    """The cron schedule operations (``store/schedules.py``)."""
    flow: FlowStore
    """Flow control beyond the claim: step slots, the limits' use (``store/flow.py``)."""
    stats: StatsStore
    """The fleet-wide figures read for monitoring (``store/stats.py``)."""
    workers: WorkerStore
    """The record of live workers (``store/workers.py``)."""
    messages: MessageStore
    """Updates and their replies, stream items, routed queries (``store/messages.py``)."""
    operations: OperationsStore
    """Filtered reads, many instances' steps, tags, bulk jobs (``store/operations.py``)."""
    closing: ClosingStore
    """Deadlines, a parent's end applied to its children, keyed creates (``store/closing.py``)."""
    retention: RetentionStore
    """Instances deleted by id, by age, as their retention says (``store/retention.py``)."""
    schema_versions: tuple[int, int] | None = None
    """Set by :meth:`open`: the schema version it found (0: none, so it created the schema) and
    the version it left (the latest migration); None before."""
    pushes_notifications: bool = False
    """True when the store tells this process about work that other processes made runnable
    (PostgreSQL LISTEN/NOTIFY); then workers need not poll quickly to notice it."""

    def __init__(self, clock: Callable[[], float] | None) -> None:
        """``clock``: the time to follow (a test's manual clock); None for real time."""
        self._clock: Callable[[], float] = time.time if clock is None else clock
        self.signals = Signals()
        """What the store tells this process: instances that may have become runnable, and
        changes of watched instances (``store/signals.py``)."""

    # -- clock -----------------------------------------------------------------------------------

    def now(self) -> float:
        """The store's notion of the current time (seconds since the epoch)."""
        return self._clock()

    # -- lifecycle ---------------------------------------------------------------------------------

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect, then create or upgrade the schema through the numbered migrations, saying
        what it did in :attr:`schema_versions`."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Finish pending writes and release every connection. Idempotent."""

    # -- workflows ---------------------------------------------------------------------------------

    @abc.abstractmethod
    async def register_workflows(
        self, metas: Sequence[WorkflowMeta], limits: Sequence[Limit] = ()
    ) -> None:
        """Insert or update the workflows a worker or client knows (``created_at`` is kept),
        with their limits, and insert or update the named ``limits``, in one transaction.

        The stored limits are what :meth:`claim` applies from then on (a lowered limit cancels
        nothing: it only holds back later claims). Named limits not given are left as stored.
        """

    @abc.abstractmethod
    async def list_workflows(self) -> list[WorkflowInfo]:
        """Every registered workflow, sorted by name, with instance counts by status."""

    # -- instances (client side) -------------------------------------------------------------------

    @abc.abstractmethod
    async def create_instances(
        self, workflow: str, items: Sequence[NewInstance], *, trigger: str, skip_existing: bool
    ) -> list[InstanceRecord]:
        """Create queued instances durably (on disk before returning), runnable at once.

        Returns the created instances in the order of ``items`` (an id repeated in ``items``
        counts once, as its first occurrence). With ``skip_existing`` ids that exist are skipped
        and only new instances are returned; otherwise an existing id raises
        ``InstanceAlreadyExistsError`` and nothing is created.

        An item with a ``dedup_key`` that an unfinished instance of ``workflow`` holds (or an
        earlier item of ``items``) is a duplicate: with ``skip_existing`` it is skipped;
        otherwise ``DuplicateInstanceError`` names the key and the instance holding it, and
        nothing is created. Of concurrent creates with one key, exactly one creates an
        instance; the others see it. A key is free again once its instance has finished.
        """

    @abc.abstractmethod
    async def create_and_claim(
        self,
        workflow: str,
        items: Sequence[NewInstance],
        *,
        trigger: str,
        skip_existing: bool,
        owner: str,
        lease_seconds: float,
        limit: int,
    ) -> tuple[list[InstanceRecord], list[Claim]]:
        """:meth:`create_instances`, claiming some of the new instances for ``owner`` in the
        same transaction (a worker in the creating process runs them without claiming them).

        Claimed: the instances created from the first ``limit`` distinct ids of ``items`` (an
        id skipped as existing uses up its place). Each is stored ``running``, leased by
        ``owner`` with lease token 1 until ``now + lease_seconds`` (its ``ready_at`` too), as if
        :meth:`claim` had taken it the moment it was created: its :class:`Claim` has no control
        action, ``event_seq`` 0 and an empty history. The others are queued. Returns every
        created instance (as :meth:`create_instances` does) and the claims, in the same order;
        everything is durable on return.
        """

    @abc.abstractmethod
    async def get_instance(self, workflow: str, instance_id: str) -> InstanceRecord:
        """The instance, or ``InstanceNotFoundError``."""

    @abc.abstractmethod
    async def list_instances(
        self,
        workflow: str | None,
        status: str | None,
        limit: int,
        cursor: str | None,
        *,
        oldest_first: bool = False,
    ) -> InstancePage:
        """A page of instances, newest first (or oldest first), optionally filtered.

        ``cursor`` is the previous page's ``next_cursor``; a malformed one raises ``ValueError``.
        """

    @abc.abstractmethod
    async def get_steps(self, workflow: str, instance_id: str) -> list[StepRecord]:
        """The instance's step history in start order (``seq``), or ``InstanceNotFoundError``.

        A sleep whose wake time has passed reads ``complete``, ended at its wake time (unless the
        instance ended first); :attr:`Claim.history` has the raw record.
        """

    @abc.abstractmethod
    async def control(
        self,
        workflow: str,
        instance_id: str,
        action: ControlAction,
        *,
        rollback: bool = False,
        from_step: tuple[str, int] | None = None,
        version: str | None = None,
    ) -> InstanceRecord:
        """Pause, resume, terminate or restart an instance durably; return its new state.

        - pause: queued/waiting become ``paused``; running becomes ``waitingForPause`` (the
          activation stops at the next step boundary).
        - resume: paused becomes queued; waitingForPause becomes running again.
        - terminate: any unfinished instance. Without rollback it becomes ``terminated`` at once
          and a running activation is fenced out. With rollback it is marked for termination and
          made runnable at once (a running one stays ``running``, its activation fenced out;
          others become ``queued``), so that a worker runs the rollbacks and then ends it
          ``terminated``.
        - restart: any instance. Steps are deleted (all of them, or from ``from_step`` = (name,
          count) on, in start order), the output/error cleared, and the instance queued; a
          running activation is fenced out. Unknown ``from_step``: ``ValueError``. The
          instance keeps its version, or takes ``version`` if given (other actions ignore it).

        Any other case raises ``IllegalStateError``; an unknown instance
        ``InstanceNotFoundError``. An instance that ends here (terminate) wakes a parent waiting
        for it, as :meth:`finish` does, and applies its children's ``on_parent_close`` as
        :meth:`ClosingStore.close_children` does.
        """

    @abc.abstractmethod
    async def send_event(
        self, workflow: str, instance_id: str, event_type: str, payload: str | None
    ) -> None:
        """Store an event durably and wake the instance if it is waiting.

        Events to finished instances raise ``IllegalStateError``; to an unknown instance
        ``InstanceNotFoundError``.
        """

    @abc.abstractmethod
    async def get_events(self, workflow: str, instance_id: str) -> list[InstanceEvent]:
        """Every event sent to the instance and still stored, pending or consumed, in send
        order (those carrying updates left out), each with the step that consumed it
        (``name-count``, None while pending); or ``InstanceNotFoundError``. A restart that
        removes the consuming step makes its event pending again."""

    # -- activations (worker side) ---------------------------------------------------------------

    @abc.abstractmethod
    async def claim(
        self,
        owner: str,
        workflows: Sequence[str],
        limit: int,
        lease_seconds: float,
        now: float,
        *,
        caps: Mapping[str, int] | None = None,
        versions: Mapping[str, Sequence[str]] | None = None,
        patches: PatchesKnown | None = None,
    ) -> Claimed:
        """Atomically take up to ``limit`` runnable instances of ``workflows`` that their limits
        let run, lowest ``priority`` first, then earliest ``ready_at`` (then lowest ``pk``).

        Routing (None: no filter). ``versions``: each workflow's versions the claim may take
        (absent: ``"1"``). ``patches``: the patch ids the claiming code has, by (workflow,
        version) (absent: none); an instance is taken only if it holds every id it took (its
        ``patch:<id>`` markers, less those a restart removed). An instance routed away is never
        claimed and counts for nothing the claim answers (``next_look``), as if it were another
        workflow's. Limits count every version of a workflow together.

        Runnable: ``ready_at <= now`` and no live lease. Each claimed instance gets a fresh lease
        token (:func:`~stepline.store.types.new_lease_token`: never one the instance had, not
        even by a claim the database lost) and ``lease_expires = now + lease_seconds``; queued
        and waiting instances become ``running``. Two concurrent claims never return the same
        instance. Each claim carries the instance's history (:attr:`Claim.history`), read under
        its new lease. A runnable instance with a pause pending (``waitingForPause`` whose lease
        expired) becomes ``paused`` instead of being claimed, whatever the limits.

        Limits (as registered, :meth:`register_workflows`): an instance *runs* while it holds
        a live lease (``running`` or ``waitingForPause`` with ``lease_expires > now``); a
        *start* is the claim of an instance that has not started (``started_at`` unset). An
        instance is claimed only if, counting what runs and what this claim takes before it:
        its workflow runs fewer than ``concurrency``; its key (if it has one and the workflow
        sets ``key_concurrency``) runs fewer than ``key_concurrency``; each named limit of its
        workflow runs fewer than its ``concurrency`` (counting every workflow that uses it and
        the steps' live slots, as :meth:`acquire_limit` does); and, if the claim is a start,
        fewer than the rate's count started (``started_at``, and for a named limit the slots
        taken) within the rate's period before ``now``, for the workflow's rate and each named
        limit's.
        ``caps`` (a worker's own ``worker_concurrency`` room): at most ``caps[w]`` instances of
        workflow ``w`` (absent: no cap). An instance held back is left as it is, for a later
        claim. Of concurrent claims, none can together exceed a limit.

        A claim returns fewer than ``limit`` only if no other instance was runnable and allowed
        when it looked, or another claim took it; an instance it held back because of what it
        took itself may be left for the next claim.

        ``Claimed.next_look``, when the claim can tell, is what :meth:`next_wakeup` would
        answer for ``workflows`` (or any of them) right after it, nothing changing meanwhile:
        a claim that took fewer than ``limit`` read everything due. It may be earlier than that
        (a wake-up for nothing), never later. The rules of the limits and of this answer are
        ``stepline.flow``'s (``flow.claiming``); the stores only execute them.
        """

    @abc.abstractmethod
    async def record_step(self, lease: Lease, write: StepWrite, now: float) -> str:
        """Insert or replace a step record, fenced on the lease; return the instance status.

        The returned status lets the activation see a pause request (``waitingForPause``) at the
        next step boundary. Raises ``LeaseLostError`` if the lease is no longer held (nothing is
        written then). If ``write.consume_event`` is set the event is marked consumed atomically;
        a patch marker (kind ``patch``, ``patch:<id>``; also among a :meth:`finish`'s ``steps``)
        adds ``<id>`` to the instance's patches in the same transaction (:meth:`claim` routes).
        """

    @abc.abstractmethod
    async def renew(
        self, leases: Sequence[Lease], lease_seconds: float, now: float
    ) -> dict[int, str]:
        """Extend the leases still held; return ``{pk: status}`` for those (lost ones absent)."""

    @abc.abstractmethod
    async def finish(self, lease: Lease, finish: Finish, now: float) -> str:
        """End an activation, fenced on the lease, and release the lease; return the new status.

        See :class:`Finish` for how ``waiting`` interacts with late events and pause requests.
        Raises ``LeaseLostError`` if the lease is no longer held. An instance that ends here
        (complete, errored, terminated) makes a parent waiting for it ready at once and counts
        in the parent's ``event_seq``. An instance that ends or suspends here frees its slot of
        each named limit with a concurrency that its workflow lists, but the one it parks on
        now (``Finish.parked_on``): of the instances parked on each, the one that would wake
        first is made ready now, as :meth:`release_limit` does (as many as a batch of finishes
        freed; never one of the finished instances), and the ready listeners are called.
        """

    @abc.abstractmethod
    async def release(self, lease: Lease, now: float) -> None:
        """Give an instance back unfinished (graceful shutdown): runnable again at once, or
        ``paused`` if a pause is pending. Nothing changes if the lease is no longer held."""

    @abc.abstractmethod
    async def next_wakeup(
        self,
        workflows: Sequence[str],
        versions: Mapping[str, Sequence[str]] | None = None,
        patches: PatchesKnown | None = None,
    ) -> float | None:
        """The earliest time at which an instance of ``workflows`` may need a worker: a timer,
        a runnable instance, or a lease's expiry (when another worker may take it over). Of
        ``versions`` and ``patches`` only, as :meth:`claim` takes them (None: every version,
        every patch).

        A runnable instance that a limit holds back counts from when it may start: a rate's
        next opening; never, for a concurrency limit (of its workflow, key, or a named one),
        since a slot frees only when an instance ends, suspends or is released (which, in
        this process, calls the ready listeners) or when a lease expires (a timer of its own).
        """
