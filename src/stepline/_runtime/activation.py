"""One activation of one instance: replay the recorded steps, run the next ones, then suspend or
end.

``run()`` is called from the top with a :class:`~stepline.WorkflowStep` whose methods come here;
each step kind lives in a module of its own (:mod:`.do`, :mod:`.waits`, :mod:`.children`) and
works on the activation's shared parts (:class:`.state.ActivationState`). :meth:`execute` turns
how ``run()`` ended into the :class:`~stepline.store.base.Finish` the worker writes: complete,
errored (after the rollbacks), terminated, or waiting (suspended, see :mod:`.quiesce`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any, TypeVar

from ..durations import Duration
from ..errors import (
    BlobStoreError,
    InstanceFatalError,
    InvalidPayloadError,
    LeaseLostError,
    SuspendInstance,
    WorkflowCancelledError,
    WorkflowTimeoutError,
)
from ..records import EventRecord
from ..step import ChildOptions, EventMatch, RollbackCallback, StepCallback, WorkflowStep
from ..store.base import Claim, Finish, History, Store
from ..store.closing import ERRORS, INTERRUPTIONS
from ..values import convert
from ..workflow import Workflow, WorkflowEvent, payload_type
from . import children, do, streams, tags, updates, waits
from .calls import StepCalls
from .observer import ActivationObservation
from .patches import Patches
from .rollback import run_rollbacks
from .signals import ActivationAborted, Terminating, error_info
from .state import ActivationSettings, ActivationState

log = logging.getLogger("stepline.runtime")
OUTPUT_RETRY = 30.0
"""Seconds before an instance whose output the blob store refused tries to store it again."""

_T = TypeVar("_T")


class Activation:
    """Runs one instance from its recorded history to its next suspension or its end."""

    def __init__(
        self,
        store: Store,
        claim: Claim,
        history: History,
        workflow: Workflow,
        settings: ActivationSettings,
        observed: ActivationObservation | None = None,
        *,
        replay_only: bool = False,
    ) -> None:
        """``replay_only``: a query's replay (:mod:`.query`), which stops where the recorded
        history does, runs no callback and writes nothing: use :meth:`replay_to_frontier`."""
        self.claim = claim
        self.workflow = workflow
        self._state = ActivationState(store, claim, history, settings, observed)
        self._calls = StepCalls(f"{claim.instance.workflow}/{claim.instance.id}")
        self.step = WorkflowStep(self)
        self._updates = updates.attach(self._state, self, workflow, replay_only=replay_only)
        self._replay_only = replay_only
        self._patches = Patches(self._state, record=not replay_only)

    # -- control from the worker -----------------------------------------------------------------

    def request_stop(self, reason: str) -> None:
        """Start no new step (pause requested, or shutdown); running steps finish."""
        self._state.quiet.request_stop(reason)

    @property
    def stop_reason(self) -> str | None:
        return self._state.quiet.stop_reason

    # -- the steps run() calls (WorkflowStep's StepRunner) ---------------------------------------

    def do(
        self,
        name: str,
        config: Any,
        callback: StepCallback,
        rollback: RollbackCallback | None,
        rollback_config: Any,
    ) -> Coroutine[Any, Any, Any]:
        return do.do(self._state, name, config, callback, rollback, rollback_config)

    def sleep(self, name: str, duration: Duration) -> Coroutine[Any, Any, None]:
        return waits.sleep(self._state, name, duration)

    def sleep_until(self, name: str, when: datetime | float | int) -> Coroutine[Any, Any, None]:
        return waits.sleep_until(self._state, name, when)

    def wait_for_event(
        self, name: str, event_type: str, timeout: Duration, match: EventMatch | None = None
    ) -> Coroutine[Any, Any, EventRecord]:
        return waits.wait_for_event(self._state, name, event_type, timeout, match)

    def publish(
        self, stream: str, value: Any, keep: int | None, keep_for: Duration | None
    ) -> Coroutine[Any, Any, None]:
        streams.check_thread()
        return streams.publish(self._state, stream, value, keep, keep_for)

    def tag(self, key: str, value: Any) -> Coroutine[Any, Any, None]:
        streams.check_thread()
        return tags.tag(self._state, key, value, write=not self._replay_only)

    def start_workflow(
        self, workflow: str, params: Any, child_id: str | None, options: ChildOptions
    ) -> Coroutine[Any, Any, str]:
        return children.start_workflow(self._state, workflow, params, child_id, options)

    def wait_for_workflow(
        self, workflow: str, child_id: str, timeout: Duration
    ) -> Coroutine[Any, Any, Any]:
        return children.wait_for_workflow(self._state, workflow, child_id, timeout)

    def track(
        self, method: str, name: str, call: Coroutine[Any, Any, _T]
    ) -> Coroutine[Any, Any, _T]:
        """Note a step call of run(), to tell at the end whether it was awaited."""
        return self._calls.track(method, name, call)

    def patched(self, patch_id: str) -> bool:
        return self._patches.patched(patch_id)

    def deprecate_patch(self, patch_id: str) -> None:
        self._patches.deprecate(patch_id)

    # -- the activation as a whole ---------------------------------------------------------------

    async def execute(self) -> Finish:
        """Run to the next suspension or the end; return how the activation ends."""
        try:
            return await self._execute()
        finally:
            self._calls.end()
            if self._updates is not None:
                self._updates.close()

    async def replay_to_frontier(self) -> InstanceFatalError | None:
        """For a query (``replay_only``): call run() and let it go as far as the recorded
        history takes it (every branch parked where a step has no final record, or run() over),
        the recorded updates' handlers replayed in their places. Returns the error if the replay
        left its history (then the state on the workflow object is not the instance's)."""
        check = self._state.replay.check
        try:
            try:
                await self.workflow.run(await self._event(), self.step)
            finally:
                self._calls.drop_unawaited()
        except SuspendInstance:
            pass
        except InstanceFatalError as exc:
            if exc.name == "NonDeterminismError":
                return exc
        except (ActivationAborted, LeaseLostError, asyncio.CancelledError):
            raise
        except (Terminating, Exception):
            pass  # run() failed on its history, as the instance did: its state stands
        finally:
            self._calls.end()
            if self._updates is not None:
                self._updates.close()
        if check.diverged is None and check.unvisited:
            check.diverge_at_end()
        return check.fatal() if check.diverged is not None else None

    async def _execute(self) -> Finish:
        state = self._state
        quiet = state.quiet
        state.emit("instance_start", {})
        try:
            finish = await self._run()
        except SuspendInstance:
            wake_at = quiet.wake_at
            if quiet.stop_reason == "pause":
                # Steps parked only because a pause was requested. The store turns this into
                # `paused`, unless the pause was withdrawn (resumed) meanwhile: then the instance
                # must run again at once, not wait for a wake-up that nothing will send.
                wake_at = state.store.now()
            finish = Finish(
                "waiting",
                wake_at=wake_at,
                event_seq=self.claim.event_seq,
                parked_on=quiet.parked_on,
            )
        if finish.status == "waiting" and quiet.stop_reason == "shutdown":
            await state.writer.committed()  # released, not finished: nothing carries them
            return finish
        if finish.status in ("errored", "terminated") and state.parenting:
            await state.writer.committed()
            await state.store.closing.close_children(state.lease, state.store.now())
        steps = await state.writer.for_finish()
        if steps:
            # Not dataclasses.replace: it reads the fields anew on every call, on every
            # activation's path.
            finish = Finish(
                finish.status, finish.output, finish.error, finish.rollback, finish.wake_at,
                finish.event_seq, steps, finish.parked_on,
            )  # fmt: skip
        return finish

    async def _run(self) -> Finish:
        """Call run() and tell how it ended."""
        state = self._state
        try:
            try:
                output = await self.workflow.run(await self._event(), self.step)
            finally:
                unawaited = self._calls.drop_unawaited()
        except SuspendInstance:
            raise
        except (ActivationAborted, LeaseLostError, asyncio.CancelledError):
            raise
        except (Terminating, InstanceFatalError, Exception) as exc:
            if state.quiet.terminating:
                # A termination with rollback: replay stopped at the first unrecorded step, or
                # at a step whose run the termination interrupted. Either way: roll back, end.
                return await self._terminated()
            return await self._errored(exc)
        if state.quiet.terminating:
            return await self._terminated()
        if unawaited:
            return await self._errored(InstanceFatalError("DefinitionError", unawaited))
        check = state.replay.check
        if check.unvisited or check.diverged:
            fatal = await state.quiet.divergence_at_end()
            if fatal is not None:
                return await self._errored(fatal)
        try:
            encoded = await state.seal(output, "the output of run()", "output")
        except InvalidPayloadError as exc:
            return await self._errored(InstanceFatalError("InvalidPayloadError", str(exc)))
        except BlobStoreError as exc:
            # The output could not be offloaded: the instance waits and ends on a later replay
            # (its steps are recorded and do not run again).
            instance = state.instance
            log.warning(
                "instance %s/%s: cannot store its output, trying again in %g seconds: %s",
                instance.workflow, instance.id, OUTPUT_RETRY, exc,
            )  # fmt: skip
            wake_at = state.store.now() + OUTPUT_RETRY
            return Finish("waiting", wake_at=wake_at, event_seq=self.claim.event_seq)
        return Finish("complete", output=encoded)

    async def _terminated(self) -> Finish:
        """A termination with rollback, or an interruption (a deadline, a cancellation: see
        ``store.closing``) that ends it errored once its rollbacks ran."""
        control = self.claim.control
        if control not in INTERRUPTIONS:
            return Finish("terminated", rollback=await run_rollbacks(self._state, None))
        error = dict(ERRORS[control])
        exc = (WorkflowTimeoutError if control == "timeout" else WorkflowCancelledError)(
            error["message"]
        )
        return Finish("errored", error=error, rollback=await run_rollbacks(self._state, exc))

    async def _errored(self, exc: BaseException) -> Finish:
        info = error_info(exc)
        instance = self._state.instance
        log.info(
            "instance %s/%s failed: %s: %s",
            instance.workflow,
            instance.id,
            info["name"],
            info["message"],
        )
        rollback = await run_rollbacks(self._state, exc)
        return Finish("errored", error=info, rollback=rollback)

    async def _event(self) -> WorkflowEvent:
        instance = self._state.instance
        payload = await self._state.open(instance.params, "params")
        declared = payload_type(self.workflow)
        if declared is not None and payload is not None:
            payload = convert(payload, declared, f"the params of instance {instance.id!r}")
        return WorkflowEvent(
            payload=payload,
            timestamp=datetime.fromtimestamp(instance.created_at, UTC),
            instance_id=instance.id,
            workflow_name=instance.workflow,
            schedule=None
            if instance.schedule is None
            else {
                "cron": instance.schedule["cron"],
                "scheduled_time": datetime.fromtimestamp(instance.schedule["tick"], UTC),
            },
        )
