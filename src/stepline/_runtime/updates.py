"""Updates: their handlers run inside the instance's activation, one at a time, in the order the
updates came, each accepted once, its reply recorded (docs/messaging.md).

- *When.* An update's handler starts when ``run()`` is idle: every branch parked (a sleep, a
  wait, a retry delay) or done, and no handler running. ``run()`` does not move on while a
  handler runs (its parked steps stay parked; the next activation goes on), so a handler never
  races ``run()`` for ``self``.
- *Accepting.* An unknown name, arguments the handler does not take, or a validator that raises
  turn the update down (:meth:`Store.reject_update`: no step recorded). Otherwise its record
  (kind ``update``, ``@update:<name>-<n>``) is written ``running`` before the handler runs,
  consuming its event, with the *frontier*: the steps ``run()`` was parked in.
- *Running.* The handler's steps are recorded like ``run()``'s, under the update's label
  (``@update:decide-1/charge``), so their names never meet ``run()``'s. Its end is recorded
  with the reply (or the handler's error) on the update's record, and the store keeps that
  reply for the caller, once.
- *Replaying.* Each recorded handler replays, in its place: the frontier steps wait for it
  (:mod:`.turns`), and it starts at the first idle moment, as it did. A handler whose record
  is still ``running`` (its worker died, or a step of it waits) goes on from there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import orjson

from ..durations import Duration
from ..errors import (
    DefinitionError,
    InstanceFatalError,
    InvalidPayloadError,
    LeaseLostError,
    StoreError,
    SuspendInstance,
    _EngineSignal,
)
from ..handlers import Handlers, UpdateHandler, handlers_of
from ..payloads import event_column, update_column
from ..records import EventRecord, PendingEvent, StepRecord, StepStatus
from ..step import (
    ChildOptions,
    EventMatch,
    RollbackCallback,
    StepCallback,
    StepRunner,
    WorkflowStep,
)
from ..store.types import UPDATE_EVENT
from ..workflow import Workflow
from . import streams
from .readonly import read_only_call
from .signals import ActivationAborted, error_info
from .state import ActivationState
from .turns import FINAL, Turns
from .writer import StepRef

log = logging.getLogger("stepline.runtime")

_T = TypeVar("_T")

UPDATE_PREFIX = "@update:"
"""An update's record is named this and the update's name."""


@dataclass(frozen=True)
class UpdateRequest:
    """What an update's event carries (``{"id", "name", "args"}``)."""

    update_id: str
    name: str
    args: list[Any]

    @classmethod
    def read(cls, payload: Any) -> UpdateRequest | None:
        if not isinstance(payload, dict):
            return None
        update_id, name, args = payload.get("id"), payload.get("name"), payload.get("args")
        if not isinstance(update_id, str) or not isinstance(name, str):
            return None
        return cls(update_id, name, args if isinstance(args, list) else [])


class HandlerSteps:
    """The ``step`` of an update's handler: ``run()``'s steps, each named under the update's
    label (``@update:decide-1/``)."""

    def __init__(self, runner: StepRunner, state: ActivationState, prefix: str) -> None:
        self._runner = runner
        self._state = state
        self._prefix = prefix

    def do(
        self,
        name: str,
        config: Any,
        callback: StepCallback,
        rollback: RollbackCallback | None,
        rollback_config: Any,
    ) -> Coroutine[Any, Any, Any]:
        return self._runner.do(self._prefix + name, config, callback, rollback, rollback_config)

    def sleep(self, name: str, duration: Duration) -> Coroutine[Any, Any, None]:
        return self._runner.sleep(self._prefix + name, duration)

    def sleep_until(self, name: str, when: datetime | float | int) -> Coroutine[Any, Any, None]:
        return self._runner.sleep_until(self._prefix + name, when)

    def wait_for_event(
        self, name: str, event_type: str, timeout: Duration, match: EventMatch | None
    ) -> Coroutine[Any, Any, EventRecord]:
        return self._runner.wait_for_event(self._prefix + name, event_type, timeout, match)

    def publish(
        self, stream: str, value: Any, keep: int | None, keep_for: Duration | None
    ) -> Coroutine[Any, Any, None]:
        streams.check_thread()
        return streams.publish(self._state, stream, value, keep, keep_for, prefix=self._prefix)

    def tag(self, key: str, value: Any) -> Coroutine[Any, Any, None]:
        return self._runner.tag(key, value)

    def start_workflow(
        self, workflow: str, params: Any, child_id: str | None, options: ChildOptions
    ) -> Coroutine[Any, Any, str]:
        raise DefinitionError(
            f"an update handler cannot start a child workflow ({workflow!r}): start it in run()"
        )

    def wait_for_workflow(
        self, workflow: str, child_id: str, timeout: Duration
    ) -> Coroutine[Any, Any, Any]:
        raise DefinitionError(
            f"an update handler cannot wait for a child workflow ({workflow!r} {child_id!r}): "
            "wait for it in run()"
        )

    def track(
        self, method: str, name: str, call: Coroutine[Any, Any, _T]
    ) -> Coroutine[Any, Any, _T]:
        return self._runner.track(method, self._prefix + name, call)

    def patched(self, patch_id: str) -> bool:
        return self._runner.patched(patch_id)

    def deprecate_patch(self, patch_id: str) -> None:
        self._runner.deprecate_patch(patch_id)


class Updates:
    """The updates of one activation: the recorded ones to replay, the pending ones to accept."""

    def __init__(
        self,
        state: ActivationState,
        runner: StepRunner,
        workflow: Workflow,
        markers: list[StepRecord],
        pending: list[PendingEvent],
        *,
        replay_only: bool,
    ) -> None:
        self._state = state
        self._runner = runner
        self._workflow = workflow
        self._handlers: Handlers = handlers_of(type(workflow))
        self._markers = markers
        self._pending = pending
        self._replay_only = replay_only
        self._next = 0
        self._task: asyncio.Task[None] | None = None
        self._failed = False
        turns = state.turns
        assert turns is not None  # attach() gives every activation with updates its turns
        self._done: list[asyncio.Future[None]] = []
        for record in markers:
            done: asyncio.Future[None] = state.loop.create_future()
            self._done.append(done)
            for name, count in (record.info or {}).get("frontier", ()):
                turns.hold((name, count), done)

    # -- when run() is idle ------------------------------------------------------------------------

    def on_idle(self) -> bool:
        """Start the next handler if one is due (see the module); whether one started."""
        if self._failed or (self._task is not None and not self._task.done()):
            return False
        if self._next < len(self._markers):
            index = self._next
            self._next += 1
            self._start(self._replay(self._markers[index], self._done[index]))
            return True
        if self._replay_only or not self._pending:
            return False
        event = self._pending.pop(0)
        frontier = [list(key) for _, _, key in self._state.quiet.parked]
        self._start(self._accept(event, frontier))
        return True

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        self._state.quiet.progress += 1
        self._task = self._state.loop.create_task(self._guarded(work))

    async def _guarded(self, work: Coroutine[Any, Any, None]) -> None:
        """A handler's task: one that the activation's suspension stops ends there; an error
        that ends the activation is raised in every branch of ``run()``."""
        try:
            await work
        except SuspendInstance:
            pass
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._failed = True
            if not isinstance(exc, _EngineSignal):
                log.error("update handler failed unexpectedly", exc_info=exc)
                exc = ActivationAborted(f"an update handler failed: {exc}")
            for done in self._done:
                if not done.done():
                    done.set_exception(exc)
                    done.exception()  # retrieved: raised in the steps waiting on it
            self._state.quiet.abort(exc)

    def close(self) -> None:
        """The activation is over: a handler still running (awaiting something other than a
        step) stops; its update goes on in the next activation."""
        if self._task is not None and not self._task.done():
            self._task.cancel()

    # -- replaying and accepting -------------------------------------------------------------------

    async def _replay(self, record: StepRecord, done: asyncio.Future[None]) -> None:
        key, found = self._state.replay.find(record.name, "update")
        info = dict(record.info or {})  # written again as recorded: its arguments stay sealed
        update_id = info.get("update")
        args = info.get("args")
        if isinstance(update_id, str):
            args = await self._busy(self._state.open(args, update_column(update_id)))
        request = UpdateRequest.read({**info, "id": update_id, "args": args})
        handler = None if request is None else self._handlers.updates.get(request.name)
        if found is None or request is None or handler is None:
            name = info.get("name")
            raise InstanceFatalError(
                "NonDeterminismError",
                f"the instance accepted update {name!r} ({record.display_name}), but the "
                f"workflow no longer has an update handler of that name; keep the handlers of "
                "updates that instances in flight accepted",
            )
        marker = StepRef(key, record.seq, "update", started_at=record.started_at)
        await self._run(marker, info, handler, request, record)
        done.set_result(None)

    async def _accept(self, event: PendingEvent, frontier: list[list[Any]]) -> None:
        state = self._state
        payload = await self._busy(state.open(event.payload, event_column(UPDATE_EVENT)))
        request = UpdateRequest.read(payload)
        if request is None:
            await self._reject(event, "", "InvalidUpdateError", "the update could not be read")
            return
        handler = self._handlers.updates.get(request.name)
        if handler is None:
            known = ", ".join(sorted(self._handlers.updates)) or "none"
            await self._reject(
                event,
                request.update_id,
                "UnknownUpdateError",
                f"workflow {state.instance.workflow!r} has no update {request.name!r} "
                f"(its updates: {known})",
            )
            return
        problem = handler.check_arguments(tuple(request.args), 2)
        if problem is not None:
            await self._reject(event, request.update_id, "InvalidArgumentsError", problem)
            return
        if handler.validator_fn is not None:
            state.quiet.begin()
            try:
                where = f"the validator of update {request.name!r}"
                await read_only_call(self._workflow, handler.validator_fn, request.args, where)
            except Exception as exc:
                await self._reject(event, request.update_id, type(exc).__name__, str(exc))
                return
            finally:
                state.quiet.end()
        args = await self._busy(self._sealed_args(request))
        key, _ = state.replay.find(UPDATE_PREFIX + request.name, "update")
        now = state.store.now()
        marker = StepRef(key, state.replay.seq_for(None), "update", started_at=now)
        info = {
            "update": request.update_id,
            "name": request.name,
            "args": args,
            "frontier": frontier,
        }
        await state.writer.write(
            marker, "running", info=info, consume_event=event.pk, update=request.update_id
        )
        state.emit("update_start", {"update": request.name, "id": request.update_id})
        await self._run(marker, info, handler, request, None)

    async def _busy(self, work: Coroutine[Any, Any, _T]) -> _T:
        """``work`` (a blob fetched or written) counted as progress: the activation does not
        take the handler for idle and end meanwhile."""
        self._state.quiet.begin()
        try:
            return await work
        finally:
            self._state.quiet.end()

    async def _sealed_args(self, request: UpdateRequest) -> Any:
        """The arguments as the update's record keeps them: encrypted when values are (never
        offloaded: the record's info is no column the orphan sweep reads)."""
        state = self._state
        codec = state.settings.payloads
        if codec.keys is None:
            return request.args
        text = state.encode(request.args, f"arguments of update {request.name!r}")
        slot = state.slot(update_column(request.update_id))
        return orjson.loads(await codec.seal(text, slot, offload=False))

    async def _reject(self, event: PendingEvent, update_id: str, name: str, message: str) -> None:
        state = self._state
        state.emit("update_rejected", {"id": update_id, "error": name, "message": message})
        state.quiet.begin()
        try:
            error = {"name": name, "message": message}
            await state.store.messages.reject_update(
                state.lease, event.pk, update_id, error, state.store.now()
            )
        except LeaseLostError as exc:
            raise ActivationAborted(str(exc)) from exc
        except StoreError as exc:
            raise ActivationAborted(f"could not turn down update {update_id!r}: {exc}") from exc
        finally:
            state.quiet.end()

    async def _run(
        self,
        marker: StepRef,
        info: dict[str, Any],
        handler: UpdateHandler[Any],
        request: UpdateRequest,
        record: StepRecord | None,
    ) -> None:
        """Run (or replay) the handler; record how it ended unless that is recorded."""
        state = self._state
        step = WorkflowStep(HandlerSteps(self._runner, state, f"{marker.label}/"))
        output: str | None = None
        error: dict[str, str] | None = None
        try:
            reply = await handler.fn(self._workflow, step, *request.args)
        except (LeaseLostError, asyncio.CancelledError):
            raise
        except Exception as exc:
            error = error_info(exc)
            reply = None
        if (record is not None and record.status in FINAL) or self._replay_only:
            return  # replayed: how it ended is recorded (or, for a query, not to be written)
        if error is None:
            try:
                what = f"the reply of update {request.name!r}"
                output = await self._busy(state.seal(reply, what, update_column(request.update_id)))
            except InvalidPayloadError as exc:
                error = {"name": "InvalidPayloadError", "message": str(exc)}
        status: StepStatus = "complete" if error is None else "errored"
        # Write-behind: the activation's finish (or the next write) carries the reply, in one
        # commit with the handler's last step records.
        state.writer.send(
            marker, status, output=output, error=error, ended_at=state.store.now(), info=info,
            update=request.update_id,
        )  # fmt: skip
        state.emit(
            "update_end", {"update": request.name, "id": request.update_id, "status": status}
        )


def attach(
    state: ActivationState, runner: StepRunner, workflow: Workflow, *, replay_only: bool
) -> Updates | None:
    """Give the activation its turns and updates when it needs them: a query's replay, or
    recorded or pending updates (else None, and nothing on a step's path changes)."""
    markers = [s for s in state.replay.recorded.values() if s.kind == "update"]
    pending = [e for e in state.events if e.type == UPDATE_EVENT]
    if replay_only:
        state.turns = Turns(state.quiet, stops_at_frontier=True)
    elif markers or pending:
        state.turns = Turns(state.quiet, stops_at_frontier=False)
    if not markers and not pending:
        return None
    if pending:
        state.events = [e for e in state.events if e.type != UPDATE_EVENT]
    markers.sort(key=lambda s: s.seq)
    updates = Updates(state, runner, workflow, markers, pending, replay_only=replay_only)
    state.quiet.on_idle = updates.on_idle
    return updates
