"""Client side: workflow bindings and instance handles (what the CLI and HTTP API sit on)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import uuid
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, Literal, Protocol, Unpack

from . import _json
from ._creating import OnConflict, check_key, check_priority, deadline, is_text, keyed_conflict
from ._json import DEFAULT_MAX_PAYLOAD
from ._runtime.observer import Observer
from ._traceparent import valid_traceparent
from .durations import Duration, format_duration, parse_duration
from .errors import DuplicateInstanceError, InstanceNotFoundError
from .messages import Messaging
from .operations.language import Filter
from .operations.search import Ranges, build_filter, listing_filter, search, tags_json
from .payloads import PayloadCodec, Slot, event_column
from .payloads.records import (
    open_events,
    open_instance,
    open_instances,
    open_steps,
    open_stream_items,
)
from .records import (
    DEFAULT_VERSION,
    FINISHED_STATUSES,
    INSTANCE_STATUSES,
    InstanceEvent,
    InstancePage,
    InstanceRecord,
    InstanceStatus,
    StepRecord,
)
from .retention import parse_retention
from .retrying import read_retries
from .store.base import ChangeWatch, Claim, NewInstance, Store, StreamItem, StreamRead
from .values import convert
from .workflow import is_valid_name, validate_name, validate_version

CheckWorkflow = Callable[[str], Awaitable[None]]

FINISHED_ORDER = tuple(s for s in INSTANCE_STATUSES if s in FINISHED_STATUSES)
OnDuplicate = Literal["return", "raise"]
StatusAction = Literal["pause", "resume", "terminate", "restart"]
STATUS_ACTIONS: tuple[StatusAction, ...] = ("pause", "resume", "terminate", "restart")
"""The status changes an instance takes (:meth:`Instance.control`)."""


def check_listing(status: str | None, limit: int) -> None:
    """Refuse a status filter that is no status, and a page size under 1 (``ValueError``)."""
    if status is not None and status not in INSTANCE_STATUSES:
        raise ValueError(f"unknown status {status!r}; use one of {', '.join(INSTANCE_STATUSES)}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit!r}")


def _check_from_step(name: object) -> str:
    """A step name to restart from. No recorded step has a name that is not such text: refused
    here, it is refused alike by every store (PostgreSQL text cannot even hold a NUL)."""
    if not is_text(name):
        raise ValueError(
            f"invalid step name {name!r} to restart from: step names are UTF-8 text without "
            "control characters"
        )
    return str(name)


async def _delete(
    store: Store, codec: PayloadCodec, workflow: str, ids: Sequence[str], force: bool
) -> int:
    deleted = await store.retention.delete_instances(workflow, ids, finished_only=not force)
    if deleted:
        await codec.forget(workflow, list(ids))  # the blobs go with their instances
    return deleted


async def _sealed_params(
    codec: PayloadCodec, workflow: str, instance_id: str, params: Any, what: str
) -> str:
    text = _json.dumps(params, what=what, limit=codec.encode_limit)
    return await codec.seal(text, Slot(workflow, instance_id, "params"))


class Reservation(Protocol):
    """Slots that a worker in this process holds for instances about to be created here
    (:class:`stepline.worker.Reservation`): the create claims up to ``slots`` of them for
    ``owner`` (:meth:`Store.create_and_claim`), then either hands the claims over
    (:meth:`take_created`) or, if it failed, gives the slots back (:meth:`release`)."""

    @property
    def owner(self) -> str: ...

    @property
    def lease_seconds(self) -> float: ...

    @property
    def slots(self) -> int: ...

    def take_created(self, claims: Sequence[Claim]) -> None: ...

    def release(self) -> None: ...


ReserveSlots = Callable[[str, int, str], Reservation | None]
"""Asks the worker running in this process, if one is, to hold slots for up to ``count``
instances of ``workflow`` at a version about to be created
(:meth:`stepline.worker.Worker.reserve`); None when it takes none."""

VersionOf = Callable[[str, str | None], Awaitable[str]]
"""The version a create of ``workflow`` uses, given the one asked for (None: the newest);
raises ``ValueError`` naming an unknown one."""


async def _given_version(workflow: str, version: str | None) -> str:
    """A binding's :data:`VersionOf` when none is given: the version asked for, or the default."""
    return DEFAULT_VERSION if version is None else validate_version(version)


def _hand_over(
    reservation: Reservation,
    task: asyncio.Task[tuple[list[InstanceRecord], list[Claim]]],
) -> None:
    if task.cancelled() or task.exception() is not None:
        reservation.release()
    else:
        reservation.take_created(task.result()[1])


class Instance:
    """A handle on one instance. Cheap to create; every call reads or writes the store."""

    def __init__(
        self,
        store: Store,
        workflow: str,
        instance_id: str,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        messaging: Messaging | None = None,
        version_of: VersionOf | None = None,
        payloads: PayloadCodec | None = None,
    ) -> None:
        self._store = store
        self._max_payload = max_payload
        self._messaging = messaging or Messaging(store, max_payload)
        self._version_of = version_of or _given_version
        self._payloads = payloads or PayloadCodec(max_payload=max_payload)
        self.workflow = workflow
        self.id = instance_id

    def __repr__(self) -> str:
        return f"<Instance {self.workflow}/{self.id}>"

    async def record(self) -> InstanceRecord:
        """Everything stored about the instance (params, timestamps, ...)."""
        record = await self._store.get_instance(self.workflow, self.id)
        return await open_instance(self._payloads, record)

    async def status(self) -> InstanceStatus:
        """``InstanceStatus(status, output, error, rollback, retry)``: ``retry``
        (:class:`~stepline.records.PendingRetry`) names the step an unfinished instance waits to try
        again, its attempt that failed last, that attempt's error and when the next is due."""
        rec = await self.record()
        (retry,) = await read_retries(self._store, [rec])
        return InstanceStatus(rec.status, rec.output, rec.error, rec.rollback, retry)

    async def steps(self, *, redact: bool = False) -> list[StepRecord]:
        """The full step history in start order, with every attempt. ``redact``: the result of
        a step run with ``{"sensitive": True}`` reads ``"[redacted]"`` (what the CLI, the HTTP
        APIs and the dashboard show)."""
        steps = await self._store.get_steps(self.workflow, self.id)
        return await open_steps(self._payloads, self.workflow, self.id, steps, redact=redact)

    async def events(self) -> list[InstanceEvent]:
        """Every event sent to the instance, in send order: ``type``, ``payload``, ``sent_at``
        and ``consumed_by`` (the ``wait_for_event`` step that took it, ``name-count``; None
        while it is pending)."""
        events = await self._store.get_events(self.workflow, self.id)
        return await open_events(self._payloads, self.workflow, self.id, events)

    async def delete(self, *, force: bool = False) -> None:
        """Delete the instance with its steps and events.

        Only a finished instance (complete, errored, terminated) is deleted, unless ``force``:
        otherwise :class:`~stepline.IllegalStateError` (terminate it first). The status is
        checked in the deleting transaction. Unknown: ``InstanceNotFoundError``.
        """
        deleted = await _delete(self._store, self._payloads, self.workflow, [self.id], force)
        if not deleted:
            raise InstanceNotFoundError(self.workflow, self.id)

    @contextlib.contextmanager
    def watch_changes(self) -> Iterator[ChangeWatch]:
        """Watch the instance for changes while the block runs (see
        :meth:`stepline.store.signals.Signals.watch_changes`): changes made in this process always
        wake ``await watch.wait(timeout)``; other processes' only on PostgreSQL, so poll too."""
        with self._store.signals.watch_changes(self.workflow, self.id) as watch:
            yield watch

    async def pause(self) -> None:
        """Pause: at once if queued or waiting; when the running step ends if running."""
        await self._store.control(self.workflow, self.id, "pause")

    async def resume(self) -> None:
        """Resume a paused instance (or cancel a pending pause)."""
        await self._store.control(self.workflow, self.id, "resume")

    async def terminate(self, *, rollback: bool = False) -> None:
        """End the instance ``terminated``; with ``rollback`` its rollbacks run first.

        Raises :class:`~stepline.IllegalStateError` if it is already complete, errored or
        terminated.
        """
        await self._store.control(self.workflow, self.id, "terminate", rollback=rollback)

    async def restart(
        self, from_step: str | None = None, *, count: int = 1, version: str | None = None
    ) -> None:
        """Run again from the start, or from step ``from_step`` (occurrence ``count``), keeping
        the results recorded before it. It keeps its version unless ``version`` names another
        (one unknown raises ``ValueError`` naming it, and nothing changes)."""
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 2**31:
            raise ValueError(f"invalid step count {count!r}: a whole number from 1")
        target = (_check_from_step(from_step), count) if from_step is not None else None
        chosen = None if version is None else await self._version_of(self.workflow, version)
        await self._store.control(
            self.workflow, self.id, "restart", from_step=target, version=chosen
        )

    async def control(
        self,
        action: str,
        *,
        rollback: bool = False,
        from_step: str | None = None,
        count: int = 1,
        version: str | None = None,
    ) -> InstanceStatus:
        """Apply one of :data:`STATUS_ACTIONS` by name (what the HTTP APIs receive): ``pause``,
        ``resume``, ``terminate`` (with ``rollback``) or ``restart`` (``from_step``,
        ``count``, ``version``); return the status after it. Unknown actions raise
        ``ValueError``."""
        if version is not None and action != "restart":
            raise ValueError(f"a version goes with 'restart' only, not with {action!r}")
        if action == "pause":
            await self.pause()
        elif action == "resume":
            await self.resume()
        elif action == "terminate":
            await self.terminate(rollback=rollback)
        elif action == "restart":
            await self.restart(from_step, count=count, version=version)
        else:
            raise ValueError(f"unknown action {action!r}; use one of {', '.join(STATUS_ACTIONS)}")
        return await self.status()

    async def send_event(self, type: str, payload: Any = None) -> None:
        """Deliver an event to ``wait_for_event(type=...)``; kept until a wait consumes it."""
        validate_name(type, what="event type")
        what = f"payload of event {type!r}"
        codec = self._payloads
        encoded = await codec.seal(
            _json.dumps(payload, what=what, limit=codec.encode_limit),
            Slot(self.workflow, self.id, event_column(type)),
        )
        await self._store.send_event(self.workflow, self.id, type, encoded)

    # -- messages (docs/messaging.md) -------------------------------------------------------------

    async def query(self, name: str, *args: Any, timeout: Duration | None = None) -> Any:
        """The answer of the workflow's ``@stepline.query`` ``name`` with ``args``: its handler
        called on the state ``run()`` keeps, rebuilt by replaying the recorded history (no
        callback runs, nothing is written), so a paused or parked instance answers too.

        Replayed in this process if its engine has the workflow's code, else by a live worker
        that serves it (``timeout``, default 10 seconds, bounds that wait). Raises
        :class:`~stepline.QueryError` if it cannot answer (no such query, arguments the
        handler does not take, the handler raised or tried to change the state or run a step).
        """
        return await self._messaging.query(self.workflow, self.id, name, args, timeout)

    async def update(
        self,
        name: str,
        *args: Any,
        update_id: str | None = None,
        timeout: Duration | None = None,
    ) -> Any:
        """Send the workflow's ``@stepline.update`` ``name`` with ``args`` and return its
        handler's reply.

        The update is recorded durably before this waits; its handler runs once, when
        ``run()`` is idle, in the order updates came. ``update_id`` (default: a new UUID) makes
        it idempotent: sending it again returns the recorded reply without a second run. Raises
        :class:`~stepline.UpdateRejectedError` (no such update, arguments it does not take, its
        validator said no: nothing ran), :class:`~stepline.UpdateFailedError` (the handler
        raised, or the instance ended first), :class:`TimeoutError` after ``timeout`` (default:
        no limit; the update stays recorded: wait again with :meth:`update_result`).
        """
        return await self._messaging.update(self.workflow, self.id, name, args, update_id, timeout)

    async def send_update(self, name: str, *args: Any, update_id: str | None = None) -> str:
        """Record an update (as :meth:`update` does) without waiting for its reply; return its
        id, for :meth:`update_result`."""
        record = await self._messaging.send_update(self.workflow, self.id, name, args, update_id)
        return record.update_id

    async def update_result(self, update_id: str, *, timeout: Duration | None = None) -> Any:
        """The reply of update ``update_id`` (sent by :meth:`update` or :meth:`send_update`),
        waiting for it as :meth:`update` does; ``LookupError`` for an id never sent here."""
        return await self._messaging.reply(self.workflow, self.id, update_id, timeout)

    def subscribe(
        self, stream: str, *, after: int = 0, follow: bool = True
    ) -> AsyncIterator[StreamItem]:
        """The items published to ``stream`` (``step.publish``) after the cursor ``after`` (an
        item's ``seq``), in order, each once: ``async for item in instance.subscribe(...)``.
        With ``follow`` it waits for more until the instance has ended and every item is read.
        Come back with the last ``seq`` read to miss nothing (of what the stream still keeps)."""
        return self._messaging.subscribe(self.workflow, self.id, stream, after, follow)

    async def read_stream(self, stream: str, *, after: int = 0, limit: int = 100) -> StreamRead:
        """Up to ``limit`` items of ``stream`` after the cursor ``after``, and the instance's
        status (one read; :meth:`subscribe` follows a stream with it)."""
        return await self._messaging.read_stream(self.workflow, self.id, stream, after, limit)

    async def streams(self) -> list[StreamItem]:
        """The last item of each of the instance's streams, by stream name."""
        items = await self._store.messages.latest_stream_items(self.workflow, self.id)
        return await open_stream_items(self._payloads, self.workflow, self.id, items)

    async def wait(self, timeout: Duration | None = None) -> InstanceStatus:
        """Wait until the instance is complete, errored or terminated; return its status.

        Raises :class:`TimeoutError` after ``timeout`` (a duration: seconds, a ``timedelta`` or
        ``"5 minutes"``; 0 looks once; None, the default: no limit).
        """
        limit = (
            None if timeout is None else parse_duration(timeout, what="timeout", allow_zero=True)
        )
        deadline = None if limit is None else time.monotonic() + limit
        waited = "" if limit is None else format_duration(limit)
        # Stores that notify every end (PostgreSQL) wake this wait at once, so it polls only
        # as a fallback; otherwise poll quickly at first, then back off.
        notified = self._store.pushes_notifications
        interval, longest = (1.0, 1.0) if notified else (0.005, 0.25)
        # Watching from before the first read: an end that lands while a read is in flight
        # still wakes the wait at once.
        with self._store.signals.watch_changes(self.workflow, self.id) as changes:
            while True:
                # The record alone: a finished instance retries nothing, and polling an
                # unfinished one needs only its status.
                rec = await self.record()
                if rec.status in FINISHED_STATUSES:
                    return InstanceStatus(rec.status, rec.output, rec.error, rec.rollback)
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(
                        f"instance {self.id!r} of {self.workflow!r} is still {rec.status} "
                        f"after {waited}"
                    )
                pause = interval if remaining is None else min(interval, remaining)
                await changes.wait(pause)
                interval = min(interval * 2, longest)


class WorkflowBinding:
    """What ``engine.workflow(name)`` returns: create and look up instances of one workflow."""

    def __init__(
        self,
        store: Store,
        name: str,
        check: CheckWorkflow,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        reserve: ReserveSlots | None = None,
        observer: Observer | None = None,
        messaging: Messaging | None = None,
        version_of: VersionOf | None = None,
        payloads: PayloadCodec | None = None,
        params_type: Any = None,
        timeout_of: Callable[[str], float | None] | None = None,
    ) -> None:
        self._store = store
        self._version_of = version_of or _given_version
        self._max_payload = max_payload
        self._params_type = params_type
        self._messaging = messaging or Messaging(store, max_payload)
        self._payloads = payloads or PayloadCodec(max_payload=max_payload)
        self._timeout_of = timeout_of
        """A workflow's declared ``timeout`` (seconds), known once ``check`` passed."""
        self.name = name
        self._check_known = check
        self._reserve = reserve
        self._observer = observer
        self._possible = is_valid_name(name)
        """False for a name no workflow can have: an unknown workflow, and no store query (text
        PostgreSQL cannot hold, such as a NUL, would fail there)."""

    def __repr__(self) -> str:
        return f"<WorkflowBinding {self.name}>"

    async def _check(self) -> None:
        await self._check_known(self.name)

    def _default_timeout(self) -> float | None:
        return None if self._timeout_of is None else self._timeout_of(self.name)

    async def _params(self, instance_id: str, params: Any, what: str) -> str:
        """Params as stored, checked against the type ``run()`` declares for them
        (``WorkflowEvent[Order]``) when this process has the workflow: stored as given."""
        if self._params_type is not None and params is not None:
            convert(params, self._params_type, what)
        return await _sealed_params(self._payloads, self.name, instance_id, params, what)

    async def _create(
        self, items: Sequence[NewInstance], trigger: str, skip_existing: bool
    ) -> list[InstanceRecord]:
        """Create ``items``; a worker in this process takes what it has room for at once."""
        if self._observer is None:
            return await self._create_observed(items, trigger, skip_existing)
        items, ended = self._observer.creating(self.name, trigger, items)
        try:
            created = await self._create_observed(items, trigger, skip_existing)
        except BaseException as exc:
            ended(0, exc)
            raise
        ended(len(created), None)
        return created

    async def _create_observed(
        self, items: Sequence[NewInstance], trigger: str, skip_existing: bool
    ) -> list[InstanceRecord]:
        version = items[0].version if items else DEFAULT_VERSION  # one version per create
        reserve = self._reserve
        reservation = reserve(self.name, len(items), version) if reserve is not None else None
        if reservation is None:
            return await self._store.create_instances(
                self.name, items, trigger=trigger, skip_existing=skip_existing
            )
        task = asyncio.ensure_future(
            self._store.create_and_claim(
                self.name,
                items,
                trigger=trigger,
                skip_existing=skip_existing,
                owner=reservation.owner,
                lease_seconds=reservation.lease_seconds,
                limit=reservation.slots,
            )
        )
        # The worker starts what the create claimed for it even if this caller is cancelled
        # meanwhile: otherwise those instances would wait for their lease to expire.
        task.add_done_callback(functools.partial(_hand_over, reservation))
        created, _ = await asyncio.shield(task)
        return created

    async def create(
        self,
        id: str | None = None,
        params: Any = None,
        *,
        trigger: str = "api",
        key: str | None = None,
        priority: int = 0,
        dedup_key: str | None = None,
        on_duplicate: OnDuplicate = "return",
        traceparent: str | None = None,
        version: str | None = None,
        retention: Mapping[str, Duration] | None = None,
        timeout: Duration | None = None,
        on_conflict: OnConflict | None = None,
        debounce: Duration | None = None,
        tags: Mapping[str, Any] | None = None,
    ) -> Instance:
        """Create an instance (durable when this returns): queued, or already running when the
        engine's own worker has room for it.

        ``id`` defaults to a random UUID; an existing id raises
        :class:`~stepline.InstanceAlreadyExistsError`.

        Flow control: ``key`` (1-200 characters) groups instances for the workflow's
        ``key_concurrency``; ``priority`` (a 32-bit signed integer, default 0) orders the
        claims, lower first; ``dedup_key`` (1-200 characters): while an unfinished instance of
        the workflow holds it, no other is created, and ``on_duplicate`` says what happens
        instead: ``"return"`` a handle on that instance, ``"raise"``
        :class:`~stepline.DuplicateInstanceError` (its ``instance_id`` names it).

        ``traceparent``: a W3C trace context for the instance's trace to continue (what an HTTP
        server received); by default, while stepline traces, the caller's current span's. An
        invalid one is ignored (docs/observability.md).

        ``version``: the version of the workflow's code to run it (docs/versioning.md); by
        default the newest (of this engine's registry, else of the live workers'). One no
        worker or registry here has raises ``ValueError`` naming it; nothing is created.
        ``retention``: how long this instance is kept once it ends, by outcome (``{"complete":
        "1 day"}``), over its workflow's retention (docs/reliability.md, "Retention").
        ``timeout``: the instance's deadline from now (default: the workflow's ``timeout``):
        past it, it errors with :class:`~stepline.WorkflowTimeoutError` after its rollbacks.
        ``on_conflict`` (with ``key``): ``"debounce"`` (with ``debounce``, a quiet period) makes
        a burst of creates for the key one instance, run with the last params once the key has
        been quiet that long (the handle names that instance); ``"replace_queued"`` terminates
        the key's instances that have not started, keeping the newest (docs/operations.md).
        ``tags``: up to 20 ``key: value`` pairs (text, numbers, booleans) to find it by with a
        filter (docs/operations.md); ``TagError`` names one that breaks the rules.
        """
        if on_duplicate not in ("return", "raise"):
            raise ValueError(f"invalid on_duplicate {on_duplicate!r}: use 'return' or 'raise'")
        checked_key = check_key(key, what="key")
        conflict, quiet = keyed_conflict(on_conflict, checked_key, debounce)
        deadline(timeout, None, 0.0)  # checked before anything is read
        await self._check()
        chosen = await self._version_of(self.name, version)
        now = self._store.now()
        deadline_at = deadline(timeout, self._default_timeout(), now)
        instance_id = str(uuid.uuid4()) if id is None else validate_name(id, what="instance id")
        new = NewInstance(
            instance_id,
            await self._params(instance_id, params, "instance params"),
            key=checked_key,
            priority=check_priority(priority),
            dedup_key=check_key(dedup_key, what="dedup_key"),
            traceparent=valid_traceparent(traceparent),
            version=chosen,
            retention=_retention_json(retention),
            deadline_at=deadline_at,
            tags=tags_json(tags),
        )
        if conflict is not None:
            ready_at = None if quiet is None else now + quiet
            record = await self._store.closing.create_keyed(
                self.name, new, trigger=trigger, on_conflict=conflict, ready_at=ready_at
            )
            return self._instance(record.id)
        try:
            await self._create([new], trigger, skip_existing=False)
        except DuplicateInstanceError as exc:
            if on_duplicate == "raise":
                raise
            return self._instance(exc.instance_id)
        return self._instance(new.id)

    async def create_batch(
        self,
        items: Iterable[Mapping[str, Any]],
        *,
        trigger: str = "api",
        version: str | None = None,
    ) -> list[Instance]:
        """Create many instances in one transaction: ``[{"id"?: ..., "params"?: ...,
        "key"?: ..., "priority"?: ..., "traceparent"?: ..., "tags"?: ...}, ...]`` (``key``,
        ``priority``, ``traceparent`` and ``tags`` as in :meth:`create`).

        Idempotent: ids that already exist are skipped. Returns a handle for every item, in order.
        Items take no ``dedup_key``: a duplicate would be skipped, and its handle would name an
        instance that was never created; use :meth:`create` for those. ``version``: as in
        :meth:`create`, for every item.
        """
        await self._check()
        chosen = await self._version_of(self.name, version)
        new: list[NewInstance] = []
        for index, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise TypeError(
                    f"create_batch item {index} must be a dict like {{'id': ..., 'params': ...}}, "
                    f"got {type(item).__name__}"
                )
            unknown = set(item) - {"id", "params", "key", "priority", "traceparent", "tags"}
            if unknown:
                raise ValueError(
                    f"create_batch item {index}: unknown key {sorted(unknown)[0]!r} (items take "
                    "id, params, key, priority, traceparent and tags)"
                )
            raw_id = item.get("id")
            instance_id = (
                str(uuid.uuid4()) if raw_id is None else validate_name(raw_id, what="instance id")
            )
            new.append(
                NewInstance(
                    instance_id,
                    await self._params(
                        instance_id, item.get("params"), f"params of batch item {index}"
                    ),
                    key=check_key(item.get("key"), what=f"key of batch item {index}"),
                    priority=check_priority(
                        item.get("priority", 0), what=f"priority of batch item {index}"
                    ),
                    traceparent=valid_traceparent(item.get("traceparent")),
                    tags=tags_json(item.get("tags"), where=f"tags of batch item {index}"),
                    version=chosen,
                    deadline_at=deadline(None, self._default_timeout(), self._store.now()),
                )
            )
        await self._create(new, trigger, skip_existing=True)
        return [self._instance(item.id) for item in new]

    async def get(self, id: str) -> Instance:
        """A handle on an existing instance; unknown ids raise ``InstanceNotFoundError``, ids no
        instance can have ``ValueError``."""
        validate_name(id, what="instance id")
        if not self._possible:
            raise InstanceNotFoundError(self.name, id)
        await self._store.get_instance(self.name, id)
        return self._instance(id)

    def _instance(self, instance_id: str) -> Instance:
        return Instance(
            self._store,
            self.name,
            instance_id,
            self._max_payload,
            self._messaging,
            self._version_of,
            self._payloads,
        )

    async def create_and_update(
        self,
        id: str,
        update: str,
        *args: Any,
        params: Any = None,
        update_id: str | None = None,
        timeout: Duration | None = None,
        trigger: str = "api",
        key: str | None = None,
        priority: int = 0,
    ) -> Any:
        """Update-with-start: create instance ``id`` with ``params`` unless it exists, then
        send it the update (:meth:`Instance.update`) and return the reply. Both halves are
        idempotent (an existing id is kept; ``update_id`` makes the update run once), so a
        caller that retries after a failure between them gets one instance and one run."""
        await self._check()
        instance_id = validate_name(id, what="instance id")
        new = NewInstance(
            instance_id,
            await self._params(instance_id, params, "instance params"),
            key=check_key(key, what="key"),
            priority=check_priority(priority),
            deadline_at=deadline(None, self._default_timeout(), self._store.now()),
            version=await self._version_of(self.name, None),
        )
        await self._create([new], trigger, skip_existing=True)
        return await self._instance(new.id).update(
            update, *args, update_id=update_id, timeout=timeout
        )

    async def list(
        self,
        *,
        status: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        oldest_first: bool = False,
        where: str | Filter | None = None,
        **ranges: Unpack[Ranges],
    ) -> InstancePage:
        """Instances of this workflow, newest first (or oldest first). ``where``: a filter
        (docs/operations.md; ``FilterError`` names the column of a mistake); the ranges bound
        the creation and end times. A filtered list's records carry their tags."""
        check_listing(status, limit)
        chosen = listing_filter(where, workflow=self.name, status=status, **ranges)
        if not self._possible:
            return InstancePage([], None)
        if chosen is not None:
            page = await search(self._store, chosen, limit, cursor, oldest_first=oldest_first)
        else:
            page = await self._store.list_instances(
                self.name, status, limit, cursor, oldest_first=oldest_first
            )
        return InstancePage(await open_instances(self._payloads, page.instances), page.cursor)

    async def count(self, where: str | Filter | None = None) -> int:
        """How many instances of this workflow match ``where`` (all of them without)."""
        chosen = build_filter(where, workflow=self.name)
        if not self._possible or chosen is None:
            return 0
        return await self._store.operations.count(chosen)

    async def delete(self, ids: Iterable[str], *, force: bool = False) -> int:
        """Delete the instances ``ids`` (with their steps and events); return how many existed.

        All or nothing: unless ``force``, if any of them is unfinished, nothing is deleted and
        :class:`~stepline.IllegalStateError` names it (checked in the deleting transaction).
        Unknown ids are skipped.
        """
        chosen = [validate_name(i, what="instance id") for i in ids]
        if not self._possible:
            return 0
        return await _delete(self._store, self._payloads, self.name, chosen, force)

    async def purge(
        self, *, statuses: Iterable[str] = FINISHED_ORDER, older_than: Duration = 0
    ) -> int:
        """Delete finished instances in ``statuses`` (default: complete, errored, terminated)
        that ended more than ``older_than`` ago; return how many. Unfinished statuses are
        refused (``ValueError``): delete those by id with ``force``."""
        chosen = tuple(statuses)
        wrong = [s for s in chosen if s not in FINISHED_STATUSES]
        if wrong or not chosen:
            raise ValueError(
                f"purge deletes finished instances only ({', '.join(FINISHED_ORDER)}), "
                f"got {wrong[0] if wrong else 'no status'!r}"
            )
        age = parse_duration(older_than, what="older_than", allow_zero=True)
        if not self._possible:
            return 0
        return await self._store.retention.purge_instances(
            self.name, chosen, self._store.now() - age
        )


def _retention_json(retention: Mapping[str, Duration] | None) -> str | None:
    """An instance's own retention as stored: JSON seconds by outcome; ValueError if bad."""
    policy = parse_retention(retention, where="retention of the instance")
    return None if policy is None else _json.dumps(policy, what="retention")
