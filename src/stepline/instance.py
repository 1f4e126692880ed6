"""A handle on one instance (:class:`Instance`): its record, steps and events, its status
changes, the messages it takes, and waiting for its end. What ``WorkflowBinding`` and the
engine hand out (:mod:`stepline.client`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any, Literal

from . import _json
from ._creating import is_text
from ._json import DEFAULT_MAX_PAYLOAD
from .durations import Duration, format_duration, parse_duration
from .errors import InstanceNotFoundError
from .liveness import unserved_warning
from .messages import Messaging
from .payloads import PayloadCodec, Slot, event_column
from .payloads.records import open_events, open_instance, open_steps, open_stream_items
from .records import (
    DEFAULT_VERSION,
    FINISHED_STATUSES,
    INSTANCE_STATUSES,
    InstanceEvent,
    InstanceRecord,
    InstanceStatus,
    StepRecord,
)
from .retrying import read_retries
from .store.base import ChangeWatch, Store, StreamItem, StreamRead
from .workflow import validate_name, validate_version

StatusAction = Literal["pause", "resume", "terminate", "restart"]
STATUS_ACTIONS: tuple[StatusAction, ...] = ("pause", "resume", "terminate", "restart")
"""The status changes an instance takes (:meth:`Instance.control`)."""

VersionOf = Callable[[str, str | None], Awaitable[str]]
"""The version a create of ``workflow`` uses, given the one asked for (None: the newest);
raises ``ValueError`` naming an unknown one."""


async def given_version(workflow: str, version: str | None) -> str:
    """A :data:`VersionOf` when none is given: the version asked for, or the default."""
    return DEFAULT_VERSION if version is None else validate_version(version)


async def delete_instances(
    store: Store, codec: PayloadCodec, workflow: str, ids: Sequence[str], force: bool
) -> int:
    """Delete the instances ``ids`` of ``workflow`` (finished ones only unless ``force``) and
    the blobs that go with them; return how many were deleted."""
    deleted = await store.retention.delete_instances(workflow, ids, finished_only=not force)
    if deleted:
        await codec.forget((workflow, instance_id) for instance_id in ids)
    return deleted


FINISHED_ORDER = tuple(s for s in INSTANCE_STATUSES if s in FINISHED_STATUSES)
"""The finished statuses, in the order the docs list them (a purge's default)."""


def purge_arguments(statuses: Iterable[str], older_than: Duration) -> tuple[tuple[str, ...], float]:
    """The statuses and the age (seconds) of a purge, checked: finished statuses only, at least
    one (``ValueError`` otherwise)."""
    chosen = tuple(statuses)
    wrong = [s for s in chosen if s not in FINISHED_STATUSES]
    if wrong or not chosen:
        raise ValueError(
            f"purge deletes finished instances only ({', '.join(FINISHED_ORDER)}), "
            f"got {wrong[0] if wrong else 'no status'!r}"
        )
    return chosen, parse_duration(older_than, what="older_than", allow_zero=True)


async def purge_instances(
    store: Store, codec: PayloadCodec, workflow: str, statuses: tuple[str, ...], age: float
) -> int:
    """Delete the finished instances of ``workflow`` in ``statuses`` that ended more than
    ``age`` seconds ago, and the blobs that go with them; return how many."""
    deleted = await store.retention.purge_instances(workflow, statuses, store.now() - age)
    await codec.forget((d.workflow, d.id) for d in deleted)
    return len(deleted)


def _check_from_step(name: object) -> str:
    """A step name to restart from. No recorded step has a name that is not such text: refused
    here, it is refused alike by every store (PostgreSQL text cannot even hold a NUL)."""
    if not is_text(name):
        raise ValueError(
            f"invalid step name {name!r} to restart from: step names are UTF-8 text without "
            "control characters"
        )
    return str(name)


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
        self._version_of = version_of or given_version
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
        """``InstanceStatus(status, output, error, rollback, retry, warning)``: ``retry``
        (:class:`~stepline.records.PendingRetry`) names the step an unfinished instance waits to try
        again, its attempt that failed last, that attempt's error and when the next is due;
        ``warning`` says that no live worker serves a due instance's workflow or version."""
        rec = await self.record()
        (retry,) = await read_retries(self._store, [rec])
        warning = None
        now = self._store.now()
        if rec.due(now):  # the worker list is read only when it can matter
            warning = unserved_warning(rec, await self._store.workers.list_workers(), now)
        return InstanceStatus(rec.status, rec.output, rec.error, rec.rollback, retry, warning)

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
        deleted = await delete_instances(
            self._store, self._payloads, self.workflow, [self.id], force
        )
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
