"""One activation of one instance: replay the recorded steps, run the next ones, suspend.

``run()`` is called from the top. Each step call is identified by (name, occurrence count); a
recorded step returns its stored result without running. When ``run()`` reaches a sleep that has
not elapsed, an event that has not arrived or a retry delay, that step *parks*. Once nothing is
running any more (no step callback in flight, no write pending) every parked step is released with
:class:`~stepline.errors.SuspendInstance`, ``run()`` unwinds, and the instance is stored as
``waiting`` until the earliest wake-up time. Nothing of the instance stays in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import math
import re
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NoReturn, TypeVar

from . import _json
from ._callbacks import ShapeMemo, invoke, rollback_arguments, rollback_shape
from ._divergence import ReplayCheck
from .config import StepConfig, parse_step_config
from .durations import Duration, parse_duration
from .errors import (
    InstanceFatalError,
    InvalidPayloadError,
    LeaseLostError,
    NonDeterminismError,
    StepFailedError,
    SteplineError,
    StepTimeoutError,
    StoreError,
    SuspendInstance,
    WorkflowFailedError,
    _EngineSignal,
)
from .records import Attempt, EventRecord, PendingEvent, StepKind, StepRecord, StepStatus
from .step import StepCallback, StepContext, WorkflowStep
from .store.base import Claim, Finish, History, NewInstance, StepWrite, Store
from .workflow import Workflow, WorkflowEvent, validate_name

log = logging.getLogger("stepline.runtime")

_T = TypeVar("_T")

RECORD_RUNNING_AFTER = 0.2
"""Seconds after which a running step attempt is written to the store as ``running``."""

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
_ROLLBACK_SUFFIX = ":rollback"


class ActivationAborted(_EngineSignal):
    """The activation must stop at once (lease lost, or the worker is shutting down)."""


class _Terminating(_EngineSignal):
    """Raised at the first step that is not recorded when a terminate-with-rollback runs."""


def validate_step_name(name: object) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= 256:
        raise ValueError(f"invalid step name {name!r}: use 1 to 256 characters")
    # isprintable() is the quick test; a name it rejects may still be valid (only ASCII control
    # characters are refused)
    if not name.isprintable() and _CONTROL_CHARS.search(name):
        raise ValueError(f"invalid step name {name!r}: control characters are not allowed")
    if name.endswith(_ROLLBACK_SUFFIX):
        raise ValueError(f"invalid step name {name!r}: the suffix ':rollback' is reserved")
    return name


def error_info(exc: BaseException) -> dict[str, str]:
    """``{name, message}`` of an error; a :class:`StepFailedError` reports the step's error."""
    if isinstance(exc, StepFailedError):
        return {"name": exc.error_name, "message": exc.message}
    if isinstance(exc, InstanceFatalError):
        return {"name": exc.name, "message": exc.message}
    return {"name": type(exc).__name__, "message": str(exc)}


def _interrupted(record: StepRecord, number: int, now: float) -> Attempt:
    """The attempt a ``running`` record shows, found by a later activation: interrupted."""
    started = (record.info or {}).get("attempt_started_at", record.started_at)
    return Attempt(
        number,
        float(started if started is not None else now),
        now,
        dict(INTERRUPTED_ATTEMPT),
        interrupted=True,
    )


INTERRUPTED_ATTEMPT = {
    "name": "Interrupted",
    "message": "the worker running this attempt stopped before it ended (killed, crashed or its "
    "lease lost); the step ran again",
}
"""The error of an attempt whose activation stopped while it ran."""


@dataclass
class _Rollback:
    seq: int
    ended_at: float
    """When the step completed: rollbacks run latest-completed first (ties: latest-started)."""
    name: str
    count: int
    fn: Callable[..., Any]
    config: StepConfig
    output: Any


class RunningMarks:
    """The clock of step attempts in flight: their ``running`` record and their timeout.

    An attempt that runs longer than ``RECORD_RUNNING_AFTER`` is written as ``running`` so that
    observers in other processes see it; quick steps skip that write. An attempt that outlives
    its timeout is cancelled (and becomes a :class:`~stepline.StepTimeoutError`). One timer per
    worker sweeps the attempts in flight every ``SWEEP`` seconds for both, instead of timers per
    attempt: an attempt that ends quickly costs a dictionary insert and delete. So the running
    record comes 0.2 to 0.25 s into an attempt, and a timeout of ``PRECISE_BELOW`` seconds or
    more fires up to ``SWEEP`` late; a shorter timeout gets a timer of its own and fires on time.
    """

    SWEEP = 0.05
    PRECISE_BELOW = 2.0

    def __init__(self) -> None:
        self._pending: dict[int, _Mark] = {}
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def add(
        self,
        activation: Activation,
        make_write: Callable[[], StepWrite],
        timeout: float,
        loop: asyncio.AbstractEventLoop,
    ) -> _Mark:
        """Start the clock of an attempt of the current task, on ``loop`` (the running loop,
        passed in: asking asyncio for it costs a system call)."""
        now = loop.time()
        mark = _Mark(self, activation, make_write, now + RECORD_RUNNING_AFTER, now + timeout, loop)
        if timeout < self.PRECISE_BELOW:
            mark.timer = loop.call_at(mark.deadline, mark.expire)
        self._pending[id(mark)] = mark
        if self._handle is None or self._loop is not loop:
            self._loop = loop
            self._handle = loop.call_later(self.SWEEP, self._sweep)
        return mark

    def discard(self, mark: _Mark) -> None:
        self._pending.pop(id(mark), None)

    def _sweep(self) -> None:
        self._handle = None
        loop = self._loop
        if loop is None:
            return
        now = loop.time()
        for mark in list(self._pending.values()):
            if mark.due <= now:
                mark.due = math.inf
                mark.fire()
            if mark.deadline <= now:
                mark.expire()
        if self._pending:
            self._handle = loop.call_later(self.SWEEP, self._sweep)


class _Mark:
    """The clock of one attempt (see :class:`RunningMarks`).

    Its final write waits for the running write, if one was started (:meth:`settle`), so the
    two never race. Its timeout works like ``asyncio.timeout``: it cancels the attempt's task,
    and :meth:`timed_out` tells that cancellation from any other.
    """

    __slots__ = (
        "_activation",
        "_cancelling",
        "_expired",
        "_make_write",
        "_marks",
        "_owner",
        "_task",
        "deadline",
        "due",
        "timer",
    )

    def __init__(
        self,
        marks: RunningMarks,
        activation: Activation,
        make_write: Callable[[], StepWrite],
        due: float,
        deadline: float,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._marks = marks
        self._activation = activation
        self._make_write = make_write
        self._task: asyncio.Task[None] | None = None
        self._owner = asyncio.current_task(loop)
        self._cancelling = self._owner.cancelling() if self._owner is not None else 0
        self._expired = False
        self.due = due
        self.deadline = deadline
        self.timer: asyncio.TimerHandle | None = None

    def fire(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._record())

    async def _record(self) -> None:
        activation = self._activation
        with contextlib.suppress(ActivationAborted, SteplineError):
            await activation.store.record_step(
                activation.lease, self._make_write(), activation.store.now()
            )

    def expire(self) -> None:
        """The timeout is up: cancel the attempt (once)."""
        if self._expired or self.deadline == math.inf or self._owner is None:
            return
        self._expired = True
        self._owner.cancel()

    def disarm(self) -> None:
        """The attempt's callback is over: its timeout no longer applies."""
        self.deadline = math.inf
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def timed_out(self) -> bool:
        """After a ``CancelledError`` in the attempt: whether it was this timeout alone (then the
        cancellation is absorbed) rather than a cancellation from outside."""
        if not self._expired or self._owner is None:
            return False
        self._expired = False
        return self._owner.uncancel() <= self._cancelling

    def cancel(self) -> None:
        self.disarm()
        self._marks.discard(self)
        if self._task is not None:
            self._task.cancel()

    def recording(self) -> bool:
        """Whether the ``running`` record was started (then :meth:`settle` must wait for it)."""
        return self._task is not None

    def finish(self) -> None:
        """The attempt is over and no ``running`` record was started: stop its clock."""
        self.disarm()
        self._marks.discard(self)

    async def settle(self) -> None:
        """The attempt is over: stop its clock and wait for its ``running`` record, if any."""
        self.finish()
        if self._task is not None:
            await self._task


def _retrieve(task: asyncio.Future[Any]) -> None:
    """A background write's failure is raised where it is awaited; never logged as lost."""
    if not task.cancelled():
        task.exception()


@dataclass(frozen=True)
class ActivationSettings:
    max_payload: int
    listeners: tuple[Callable[[str, dict[str, Any]], None], ...] = ()
    marks: RunningMarks = field(default_factory=RunningMarks)
    shapes: ShapeMemo = field(default_factory=ShapeMemo)


def _running_write(write: Callable[..., StepWrite], attempt: int, started: float) -> StepWrite:
    return write("running", info={"running_attempt": attempt, "attempt_started_at": started})


class Activation:
    """Runs one instance from its recorded history to its next suspension or its end."""

    def __init__(
        self,
        store: Store,
        claim: Claim,
        history: History,
        workflow: Workflow,
        settings: ActivationSettings,
    ) -> None:
        self.store = store
        self.claim = claim
        self.lease = claim.lease
        self.instance = claim.instance
        self.workflow = workflow
        self.settings = settings
        self._recorded: dict[tuple[str, int], StepRecord] = {
            (s.name, s.count): s for s in history.steps
        }
        self._next_seq = max((s.seq for s in history.steps), default=0) + 1
        self._replay = ReplayCheck(history.steps)
        self._calls: list[tuple[str, str, Coroutine[Any, Any, Any]]] = []
        """Step calls made by run(): (method, name, coroutine), to find those never awaited."""
        self._ended_at: dict[tuple[str, int], float] = {}
        self._events: list[PendingEvent] = list(history.events)
        self._counts: dict[str, int] = {}
        self._in_flight = 0
        self._progress = 0
        self._parked: list[tuple[float | None, asyncio.Future[None]]] = []
        self._settling = False
        self._suspend_wake: float | None = None
        self._stop_reason: str | None = None
        self._terminating = claim.control == "terminate_rollback"
        self._rollbacks: list[_Rollback] = []
        self._unsent: list[StepWrite] = []
        """Records nothing waits for yet (:meth:`_write_soon`), to send at the end of the turn."""
        self._send_scheduled = False
        """An end-of-turn send is scheduled (one per turn, however many records)."""
        self._loop = asyncio.get_running_loop()
        """Kept: ``asyncio.get_running_loop()`` costs a ``getpid`` system call each time."""
        self._sending: list[asyncio.Future[None]] = []
        """Records sent and maybe not yet committed (one future per group sent)."""
        self.step = WorkflowStep(self)

    # -- control from the worker -----------------------------------------------------------------

    def request_stop(self, reason: str) -> None:
        """Start no new step (pause requested, or shutdown); running steps finish."""
        if self._stop_reason is None:
            self._stop_reason = reason
            self._check_quiescent()

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    # -- the activation as a whole ---------------------------------------------------------------

    async def execute(self) -> Finish:
        """Run to the next suspension or the end; return how the activation ends."""
        self._emit("instance_start", {})
        try:
            finish = await self._execute()
        except SuspendInstance:
            wake_at = self._suspend_wake
            if self._stop_reason == "pause":
                # Steps parked only because a pause was requested. The store turns this into
                # `paused`, unless the pause was withdrawn (resumed) meanwhile: then the instance
                # must run again at once, not wait for a wake-up that nothing will send.
                wake_at = self.store.now()
            finish = Finish("waiting", wake_at=wake_at, event_seq=self.claim.event_seq)
        if finish.status == "waiting" and self._stop_reason == "shutdown":
            await self._committed()  # released, not finished: nothing carries them
            return finish
        # Records sent earlier commit before the finish; those still unsent go with it, in its
        # transaction (one commit instead of two for the activation's last records).
        await self._sent_committed()
        if self._unsent:
            # Not dataclasses.replace: it costs ~4% of a short activation.
            finish = Finish(
                finish.status, finish.output, finish.error, finish.rollback, finish.wake_at,
                finish.event_seq, tuple(self._unsent),
            )  # fmt: skip
            self._unsent = []
        return finish

    async def _execute(self) -> Finish:
        try:
            try:
                output = await self.workflow.run(self._event(), self.step)
            finally:
                unawaited = self._drop_unawaited()
        except SuspendInstance:
            raise
        except (ActivationAborted, LeaseLostError, asyncio.CancelledError):
            raise
        except (_Terminating, InstanceFatalError, Exception) as exc:
            if self._terminating:
                # A termination with rollback: replay stopped at the first unrecorded step, or
                # at a step whose run the termination interrupted. Either way: roll back, end.
                return await self._terminated()
            return await self._errored(exc)
        if self._terminating:
            return await self._terminated()
        if unawaited:
            return await self._errored(InstanceFatalError("DefinitionError", unawaited))
        if self._replay.unvisited or self._replay.diverged:
            fatal = await self._replayed_all()
            if fatal is not None:
                return await self._errored(fatal)
        try:
            encoded = self._encode(output, "the output of run()")
        except InvalidPayloadError as exc:
            return await self._errored(InstanceFatalError("InvalidPayloadError", str(exc)))
        return Finish("complete", output=encoded)

    def track(
        self, method: str, name: str, call: Coroutine[Any, Any, _T]
    ) -> Coroutine[Any, Any, _T]:
        """Note a step call of run() (returned as is), to tell at the end whether it was awaited."""
        calls = self._calls
        calls.append((method, name, call))
        if len(calls) >= 1024:  # keep only the calls not started yet (amortised)
            self._calls = [
                c for c in calls if inspect.getcoroutinestate(c[2]) == inspect.CORO_CREATED
            ]
        return call

    def _drop_unawaited(self) -> str | None:
        """Close the step calls run() never awaited (no "never awaited" warning escapes); say
        which they were."""
        dropped: list[tuple[str, str]] = []
        for method, name, call in self._calls:
            if inspect.getcoroutinestate(call) == inspect.CORO_CREATED:
                dropped.append((method, name))
                call.close()
        self._calls = []
        if not dropped:
            return None
        calls = ", ".join(f"step.{method}({name!r})" for method, name in dropped[:5])
        more = f" and {len(dropped) - 5} more" if len(dropped) > 5 else ""
        return (
            f"run() called {calls}{more} without awaiting it, so the step never ran; write "
            "`await step.do(...)`, or pass the calls to asyncio.gather(...) and await that"
        )

    async def _replayed_all(self) -> InstanceFatalError | None:
        """After run() returned: the replay diverged, or left recorded steps uncalled once the
        loop has quiesced (a sibling task may still be on its way to them)."""
        check = self._replay
        while check.diverged is None and check.unvisited:
            mark = self._progress
            for _ in range(3):
                await asyncio.sleep(0)
            if self._in_flight:
                await asyncio.sleep(0.05)  # a step of a task run() left behind is still running
            elif mark == self._progress and check.unvisited:
                check.diverge_at_end()
                check.release([fut for _, fut in self._parked])
                self._parked = []
        return check.fatal() if check.diverged is not None else None

    async def _terminated(self) -> Finish:
        return Finish("terminated", rollback=await self._run_rollbacks(None))

    async def _errored(self, exc: BaseException) -> Finish:
        info = error_info(exc)
        log.info(
            "instance %s/%s failed: %s: %s",
            self.instance.workflow,
            self.instance.id,
            info["name"],
            info["message"],
        )
        rollback = await self._run_rollbacks(exc)
        return Finish("errored", error=info, rollback=rollback)

    def _event(self) -> WorkflowEvent:
        return WorkflowEvent(
            payload=self.instance.params,
            timestamp=datetime.fromtimestamp(self.instance.created_at, UTC),
            instance_id=self.instance.id,
            workflow_name=self.instance.workflow,
        )

    def _emit(self, kind: str, data: dict[str, Any]) -> None:
        if self.settings.listeners:
            payload = {"workflow": self.instance.workflow, "instance": self.instance.id, **data}
            for listener in self.settings.listeners:
                listener(kind, payload)

    # -- quiescence and suspension ---------------------------------------------------------------

    async def _park(self, wake_at: float | None) -> NoReturn:
        if self._terminating:
            raise _Terminating()
        fut: asyncio.Future[None] = self._loop.create_future()
        self._parked.append((wake_at, fut))
        self._progress += 1
        self._check_quiescent()
        await fut
        raise SuspendInstance()  # pragma: no cover - the future only ever fails

    async def _hold(self, key: tuple[str, int]) -> None:
        """A new step while recorded steps are still uncalled: wait until they are all called
        (then go on), or until the loop quiesces without that (the replay diverged)."""
        check = self._replay
        if check.diverged is not None:
            raise check.fatal()
        if self._terminating:
            return  # the step stops at its gate: a termination rolls back, not replays
        fut: asyncio.Future[None] = self._loop.create_future()
        check.held.append((f"{key[0]}-{key[1]}", fut))
        self._progress += 1
        self._check_quiescent()
        await fut

    def _check_quiescent(self) -> None:
        if self._in_flight == 0 and (self._parked or self._replay.held) and not self._settling:
            self._settling = True
            self._loop.create_task(self._settle())

    async def _settle(self) -> None:
        """Suspend once run() is stuck on parked steps only (a few idle loop turns); or, if new
        steps are held for recorded ones that nothing calls, end the replay as diverged."""
        suspended = False
        check = self._replay
        try:
            while self._in_flight == 0 and (self._parked or check.held):
                mark = self._progress
                for _ in range(3):
                    await asyncio.sleep(0)
                if self._in_flight == 0 and mark == self._progress:
                    if check.held and self._stop_reason is None:
                        check.diverge_at()
                        check.release([fut for _, fut in self._parked])
                        self._parked = []
                        return
                    # Stopping (pause, shutdown): a recorded step may be parked behind the stop
                    # at its gate, so held steps suspend with the rest; the next replay decides.
                    self._parked.extend((None, fut) for _, fut in check.held)
                    check.held = []
                    wakes = [w for w, _ in self._parked if w is not None]
                    self._suspend_wake = min(wakes) if wakes else None
                    parked, self._parked = self._parked, []
                    for _, fut in parked:
                        if not fut.done():
                            fut.set_exception(SuspendInstance())
                    suspended = True
                    return
        finally:
            self._settling = False
            if not suspended and self._unsent:  # held back while settling: send them now
                self._schedule_send()

    def _begin(self) -> None:
        self._in_flight += 1
        self._progress += 1

    def _end(self) -> None:
        self._in_flight -= 1
        self._progress += 1
        if self._in_flight == 0:
            self._check_quiescent()

    # -- helpers ---------------------------------------------------------------------------------

    def _key(self, name: str) -> tuple[str, int]:
        count = self._counts.get(name, 0) + 1
        self._counts[name] = count
        return name, count

    def _lookup(self, key: tuple[str, int], kind: StepKind) -> StepRecord | None:
        record = self._recorded.get(key)
        if record is not None and self._replay.unvisited:
            self._replay.visit(key)
        if record is not None and record.kind != kind:
            raise InstanceFatalError(
                "NonDeterminismError",
                str(
                    NonDeterminismError(
                        f"step '{key[0]}-{key[1]}' was recorded as {record.kind!r} but run() now "
                        f"calls it as {kind!r}; run() must call the same steps on every replay"
                    )
                ),
            )
        return record

    def _seq_for(self, record: StepRecord | None) -> int:
        if record is not None:
            return record.seq
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def _encode(self, value: Any, what: str) -> str:
        return _json.dumps(value, what=what, limit=self.settings.max_payload)

    async def _write(self, write: StepWrite) -> None:
        """Record a step (fenced). Sees a pause request; aborts if the lease is gone."""
        try:
            status = await self.store.record_step(self.lease, write, self.store.now())
        except LeaseLostError as exc:
            raise ActivationAborted(str(exc)) from exc
        except StoreError as exc:
            # The database failed, not the workflow: stop (run() cannot catch this) and let the
            # instance run again once the lease expires, instead of ending it errored.
            raise ActivationAborted(f"could not record step {write.name!r}: {exc}") from exc
        if write.ended_at is not None:
            self._ended_at[(write.name, write.count)] = write.ended_at
        if status == "waitingForPause":
            self.request_stop("pause")

    def _write_soon(self, write: StepWrite) -> None:
        """Record a step without waiting for its commit now.

        For a step's result and a sleep's start: the record is sent at the end of this loop turn
        (with every other write of the turn), or goes with the activation's finish if that comes
        first (or the activation is settling to suspend), and :meth:`_committed` waits for it
        before anything that follows it can be seen outside the activation: another step's
        callback, a child's creation, the finish. So
        ``step.do`` returns its result without a commit wait, and an activation that ends right
        after its last step commits once, not twice. A failed write surfaces there, as
        :class:`ActivationAborted`; what a crash loses meanwhile is re-run on replay, exactly as
        a step whose own commit had not finished.
        """
        if write.ended_at is not None:
            self._ended_at[(write.name, write.count)] = write.ended_at
        self._unsent.append(write)
        self._schedule_send()

    def _schedule_send(self) -> None:
        if not self._send_scheduled:
            self._send_scheduled = True
            self._loop.call_soon(self._send_at_turn_end)

    def _send_at_turn_end(self) -> None:
        self._send_scheduled = False
        # Not while the activation settles: it is about to suspend, and its finish carries them
        # (if it does not suspend after all, the settle schedules this again).
        if not self._settling:
            self._send_unsent()

    def _send_unsent(self) -> None:
        if self._unsent:
            writes, self._unsent = self._unsent, []
            task = asyncio.ensure_future(self._write_all(writes), loop=self._loop)
            task.add_done_callback(_retrieve)
            self._sending.append(task)

    def _write_all(self, writes: list[StepWrite]) -> Awaitable[Any]:
        if len(writes) == 1:
            return self._write(writes[0])
        return asyncio.gather(*(self._write(w) for w in writes))

    async def _sent_committed(self) -> None:
        """Wait until the records already sent have committed. Records whose write a
        cancellation cut off are back in ``_unsent`` afterwards (see :meth:`_committed`)."""
        while self._sending:
            pending = self._sending[0]
            try:
                # Shielded: a waiter cancelled here must not cancel a write others wait on.
                await asyncio.shield(pending)
            except asyncio.CancelledError:
                task = asyncio.current_task(self._loop)
                if not (pending.cancelled() and task is not None and not task.cancelling()):
                    raise
                # Its writer was cancelled, not this task: the records are back in _unsent.
            if self._sending and self._sending[0] is pending:
                self._sending.pop(0)

    async def _committed(self) -> None:
        """Wait until every record so far has committed (raises :class:`ActivationAborted` if one
        could not be written). Counted in flight, so nothing suspends meanwhile."""
        if not self._sending and not self._unsent:
            return
        self._begin()
        try:
            while self._unsent or self._sending:
                if self._unsent:
                    await self._write_unsent()
                if self._sending:
                    await self._sent_committed()
        finally:
            self._end()

    async def _write_unsent(self) -> None:
        # Written from this task (no task of its own: cheaper, and a lone writer commits at
        # once); others that must wait for it wait for its future.
        writes, self._unsent = self._unsent, []
        sent: asyncio.Future[None] = self._loop.create_future()
        self._sending.append(sent)
        try:
            await self._write_all(writes)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                # This task was cancelled, perhaps mid-write (PostgreSQL runs a lone write in its
                # caller's task): the records go back, for the next write or the finish (written
                # twice is harmless: a record write replaces the same row), and whoever waits on
                # them writes them itself.
                self._sending.remove(sent)
                self._unsent[:0] = writes
                sent.cancel()
            else:
                sent.set_exception(exc)
                sent.exception()  # retrieved: raised here, and to whoever awaits it
            raise
        sent.set_result(None)
        if len(self._sending) == 1 and self._sending[0] is sent:
            self._sending.clear()  # nothing else was in flight: no need to wait on it

    async def _record(
        self, key: tuple[str, int], seq: int, kind: StepKind, status: StepStatus, **fields: Any
    ) -> None:
        """Write a step's new state (the caller counts itself in flight)."""
        await self._write(StepWrite(key[0], key[1], seq, kind, status, **fields))

    async def _record_alone(
        self, key: tuple[str, int], seq: int, kind: StepKind, status: StepStatus, **fields: Any
    ) -> None:
        """Write a step's new state, counted in flight so that nothing suspends meanwhile."""
        await self._write_alone(StepWrite(key[0], key[1], seq, kind, status, **fields))

    async def _write_alone(self, write: StepWrite) -> None:
        """:meth:`_write`, counted in flight so that nothing suspends meanwhile."""
        self._begin()
        try:
            await self._write(write)
        finally:
            self._end()

    def _gate_needed(self, wake_at: float | None) -> bool:
        """Whether :meth:`_gate` would do anything (on a step's path, skipping it saves making a
        coroutine)."""
        return wake_at is not None or self._terminating or self._stop_reason is not None

    async def _gate(self, wake_at: float | None = None) -> None:
        """Before new work: park if the activation is stopping or terminating."""
        if self._terminating:
            raise _Terminating()
        if self._stop_reason is not None:
            await self._park(None)
        if wake_at is not None and wake_at > self.store.now():
            await self._park(wake_at)

    # -- step.do ---------------------------------------------------------------------------------

    async def do(
        self,
        name: str,
        config: Any,
        callback: StepCallback,
        rollback: Callable[..., Any] | None,
        rollback_config: Any,
    ) -> Any:
        validate_step_name(name)
        cfg = parse_step_config(config)
        if not callable(callback):
            raise TypeError(f"step {name!r}: the callback must be callable, got {callback!r}")
        rb_cfg = parse_step_config(rollback_config) if rollback is not None else cfg
        self._progress += 1
        key = self._key(name)
        record = self._lookup(key, "do")
        if record is None and self._replay.unvisited:
            await self._hold(key)
        seq = self._seq_for(record)
        if record is not None and record.status == "complete":
            if rollback is not None:
                self._rollbacks.append(
                    _Rollback(
                        seq, record.ended_at or 0.0, key[0], key[1], rollback, rb_cfg, record.output
                    )
                )
            return record.output
        output = await self._run_attempts(key, seq, "do", record, cfg, callback, ())
        if rollback is not None:
            ended = self._ended_at.get(key, 0.0)
            self._rollbacks.append(_Rollback(seq, ended, key[0], key[1], rollback, rb_cfg, output))
        return output

    async def _run_attempts(
        self,
        key: tuple[str, int],
        seq: int,
        kind: StepKind,
        record: StepRecord | None,
        cfg: StepConfig,
        callback: Callable[..., Any],
        extra_args: tuple[Any, ...],
    ) -> Any:
        name, count = key
        label = f"{name}-{count}"
        if record is not None and record.status == "errored":
            error = record.error or {"name": "Error", "message": ""}
            raise StepFailedError(label, error["name"], error["message"])
        attempts = list(record.attempts) if record is not None else []
        if record is not None and record.status == "running":
            # Its previous activation stopped while an attempt ran (the worker died or lost its
            # lease): that attempt stays in the history, as interrupted.
            attempts.append(_interrupted(record, len(attempts) + 1, self.store.now()))
        # Interrupted attempts did not fail: they count neither toward the retry limit nor the
        # backoff.
        cut_off = sum(1 for a in attempts if a.interrupted) if attempts else 0
        await self._committed()  # earlier steps' records, before this callback runs
        retry_at = record.wake_at if record is not None else None
        if self._gate_needed(retry_at):
            await self._gate(retry_at)
        started_at = record.started_at if record is not None else None
        shape = rollback_shape(callback) if extra_args else self.settings.shapes.step(callback)

        new = record is None  # until the first write: then the step has a record to replace

        def write(status: StepStatus, **fields: Any) -> StepWrite:
            nonlocal new
            step_write = StepWrite(
                name, count, seq, kind, status,
                attempts=tuple(attempts), started_at=started_at, new=new, **fields,
            )  # fmt: skip
            new = False
            return step_write

        while True:
            number = len(attempts) + 1
            now = self.store.now()
            if started_at is None:
                started_at = now
            self._begin()
            marker = self.settings.marks.add(
                self,
                functools.partial(_running_write, write, number, now),
                cfg.timeout,
                self._loop,
            )
            try:
                if self.settings.listeners:
                    self._emit("step_start", {"step": label, "attempt": number})
                if extra_args:
                    context = StepContext(
                        name, count, number, cfg, self.instance.id, self.instance.workflow
                    )
                    args = rollback_arguments(shape.arity, extra_args[0], extra_args[1], context)
                elif shape.arity:
                    args = (
                        StepContext(
                            name, count, number, cfg, self.instance.id, self.instance.workflow
                        ),
                    )
                else:
                    args = ()
                try:
                    result = await invoke(callback, shape.is_async, args)
                except asyncio.CancelledError:
                    if marker.timed_out():
                        raise StepTimeoutError(
                            f"step {label!r} attempt {number} timed out after "
                            f"{cfg.timeout:g} seconds"
                        ) from None
                    raise
                finally:
                    marker.disarm()
            except (_EngineSignal, asyncio.CancelledError):
                marker.cancel()
                self._end()
                raise
            except Exception as exc:
                try:
                    await marker.settle()
                    ended = self.store.now()
                    info = error_info(exc)
                    attempts.append(Attempt(number, now, ended, info))
                    failed = number - cut_off
                    if failed > cfg.retries.limit or not cfg.retries.retryable(exc):
                        self._emit("step_failed", {"step": label, "attempt": number, **info})
                        await self._write(write("errored", error=info, ended_at=ended))
                        raise StepFailedError(label, info["name"], info["message"]) from exc
                    delay = cfg.retries.delay_after(failed, exc)
                    wake_at = ended + delay
                    self._emit(
                        "step_retry", {"step": label, "attempt": number, "delay": delay, **info}
                    )
                    await self._write(write("waiting", wake_at=wake_at))
                finally:
                    self._end()
                if delay > 0:
                    await self._gate(wake_at)
                continue
            try:
                if marker.recording():
                    await marker.settle()
                else:
                    marker.finish()
                ended = self.store.now()
                attempts.append(Attempt(number, now, ended, None))
                try:
                    encoded, decoded = _json.encode(
                        result,
                        what=f"the result of step {label!r}",
                        limit=self.settings.max_payload,
                    )
                except InvalidPayloadError as exc:
                    info = {"name": "InvalidPayloadError", "message": str(exc)}
                    await self._write(write("errored", error=info, ended_at=ended))
                    raise InstanceFatalError("InvalidPayloadError", str(exc)) from exc
                self._write_soon(write("complete", output=encoded, ended_at=ended))
                if self.settings.listeners:
                    self._emit("step_complete", {"step": label, "attempt": number})
                # The step returns what a replay will: its result as decoded from the record
                # (equal to it, but a tuple comes back a list).
                return decoded
            finally:
                self._end()

    # -- sleeps ----------------------------------------------------------------------------------

    async def sleep(self, name: str, duration: Duration) -> None:
        seconds = parse_duration(duration, what=f"duration of sleep {name!r}")
        await self._sleep(name, lambda now: now + seconds)

    async def sleep_until(self, name: str, when: datetime | float | int) -> None:
        if isinstance(when, datetime):
            target = (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
        elif isinstance(when, int | float) and not isinstance(when, bool):
            target = float(when)
        else:
            raise ValueError(f"sleep_until {name!r}: expected a datetime or epoch seconds")
        await self._sleep(name, lambda _now: target)

    async def _sleep(self, name: str, wake: Callable[[float], float]) -> None:
        validate_step_name(name)
        self._progress += 1
        key = self._key(name)
        record = self._lookup(key, "sleep")
        if record is not None and record.status == "complete":
            return
        if record is None and self._replay.unvisited:
            await self._hold(key)
        seq = self._seq_for(record)
        await self._gate()
        now = self.store.now()
        wake_at = record.wake_at if record is not None and record.wake_at else wake(now)
        started = record.started_at if record is not None else now
        if now >= wake_at:
            # A sleep is recorded once, when it starts, with its wake time: from then on it is
            # over by the clock, for replay here and for readers (see ``settle_sleeps``), so
            # waking costs no write. One found over on its first call is recorded complete.
            if record is None:
                done = StepWrite(
                    name, key[1], seq, "sleep", "complete",
                    wake_at=wake_at, started_at=started, ended_at=wake_at, new=True,
                )  # fmt: skip
                await self._write_alone(done)
            return
        if record is None:
            self._emit("step_sleep", {"step": f"{name}-{key[1]}", "until": wake_at})
            start = StepWrite(
                name, key[1], seq, "sleep", "waiting", wake_at=wake_at, started_at=started, new=True
            )
            self._write_soon(start)
        await self._park(wake_at)

    # -- events ----------------------------------------------------------------------------------

    async def wait_for_event(self, name: str, event_type: str, timeout: Duration) -> EventRecord:
        validate_step_name(name)
        validate_name(event_type, what="event type")
        seconds = parse_duration(timeout, what=f"timeout of wait_for_event {name!r}")
        self._progress += 1
        key = self._key(name)
        label = f"{name}-{key[1]}"
        record = self._lookup(key, "wait_for_event")
        if record is not None and record.status == "complete":
            out = record.output
            return EventRecord(out["type"], out["payload"], out["timestamp"])
        if record is not None and record.status == "errored":
            raise StepTimeoutError(f"wait_for_event {label!r} timed out waiting for {event_type!r}")
        if record is None and self._replay.unvisited:
            await self._hold(key)
        seq = self._seq_for(record)
        await self._gate()
        now = self.store.now()
        deadline = record.wake_at if record is not None and record.wake_at else now + seconds
        started = record.started_at if record is not None else now
        info = {"type": event_type}
        for index, pending in enumerate(self._events):
            if pending.type == event_type:
                del self._events[index]
                event = EventRecord(pending.type, pending.payload, pending.timestamp)
                await self._record_alone(
                    key,
                    seq,
                    "wait_for_event",
                    "complete",
                    new=record is None,
                    output=_json.dumps(event.to_json(), what="event", limit=1 << 62),
                    wake_at=deadline,
                    started_at=started,
                    ended_at=now,
                    info=info,
                    consume_event=pending.pk,
                )
                self._emit("event_received", {"step": label, "type": event_type})
                return event
        if now >= deadline:
            error = {
                "name": "StepTimeoutError",
                "message": f"no {event_type!r} event within {seconds:g} seconds",
            }
            await self._record_alone(
                key,
                seq,
                "wait_for_event",
                "errored",
                new=record is None,
                error=error,
                wake_at=deadline,
                started_at=started,
                ended_at=now,
                info=info,
            )
            raise StepTimeoutError(f"wait_for_event {label!r} timed out waiting for {event_type!r}")
        if record is None:
            self._emit("step_wait", {"step": label, "type": event_type, "until": deadline})
            await self._record_alone(
                key,
                seq,
                "wait_for_event",
                "waiting",
                new=record is None,
                wake_at=deadline,
                started_at=started,
                info=info,
            )
        await self._park(deadline)

    # -- child workflows -------------------------------------------------------------------------

    async def start_workflow(self, workflow: str, params: Any, child_id: str | None) -> str:
        validate_name(workflow, what="workflow name")
        # With an explicit id the step is named after it, so concurrent starts of one workflow
        # (DAG branches, gather) replay correctly whatever order they run in.
        name = f"start {workflow}" if child_id is None else f"start {workflow} {child_id}"
        self._progress += 1
        key = self._key(name)
        record = self._lookup(key, "start_workflow")
        if record is not None and record.status == "complete":
            return str(record.output)
        if record is None and self._replay.unvisited:
            await self._hold(key)
        seq = self._seq_for(record)
        await self._gate()
        if child_id is None:
            child_id = f"{self.instance.id[:60]}-{workflow[:30]}-{key[1]}"
        validate_name(child_id, what="instance id")
        encoded = self._encode(params, f"params of child workflow {workflow!r}")
        parent = _json.dumps(
            {
                "workflow": self.instance.workflow,
                "id": self.instance.id,
                "step": f"{name}-{key[1]}",
            },
            what="parent",
        )
        await self._committed()  # earlier steps' records, before the child can run
        now = self.store.now()
        self._begin()
        try:
            await self.store.create_instances(
                workflow,
                [NewInstance(child_id, encoded, parent)],
                trigger="workflow",
                skip_existing=True,
            )
            await self._record(
                key,
                seq,
                "start_workflow",
                "complete",
                new=record is None,
                output=_json.dumps(child_id, what="id"),
                started_at=now,
                ended_at=self.store.now(),
                info={"workflow": workflow, "id": child_id},
            )
        finally:
            self._end()
        return child_id

    async def wait_for_workflow(self, workflow: str, child_id: str, timeout: Duration) -> Any:
        seconds = parse_duration(timeout, what="timeout of wait_for_workflow")
        name = f"wait {workflow} {child_id}"
        self._progress += 1
        key = self._key(name)
        record = self._lookup(key, "wait_for_workflow")
        info = {"workflow": workflow, "id": child_id}
        if record is not None and record.status in ("complete", "errored"):
            if record.status == "complete":
                return record.output
            error = record.error or {}
            if error.get("name") == "StepTimeoutError":
                raise StepTimeoutError(error.get("message", ""))
            recorded = record.info or {}
            raise WorkflowFailedError(
                workflow, child_id, recorded.get("status", "errored"), recorded.get("child_error")
            )
        if record is None and self._replay.unvisited:
            await self._hold(key)
        seq = self._seq_for(record)
        await self._gate()
        now = self.store.now()
        deadline = record.wake_at if record is not None and record.wake_at else now + seconds
        started = record.started_at if record is not None else now
        self._begin()
        try:
            child = await self.store.get_instance(workflow, child_id)
            if child.status in ("complete", "errored", "terminated"):
                if child.status == "complete":
                    await self._record(
                        key,
                        seq,
                        "wait_for_workflow",
                        "complete",
                        new=record is None,
                        output=self._encode(child.output, "child output"),
                        started_at=started,
                        ended_at=now,
                        info=info,
                    )
                    return child.output
                err = {
                    "name": "WorkflowFailedError",
                    "message": f"{workflow} {child_id} ended {child.status}",
                }
                failed_info = {**info, "status": child.status, "child_error": child.error}
                await self._record(
                    key,
                    seq,
                    "wait_for_workflow",
                    "errored",
                    new=record is None,
                    error=err,
                    started_at=started,
                    ended_at=now,
                    info=failed_info,
                )
                raise WorkflowFailedError(workflow, child_id, child.status, child.error)
            if now >= deadline:
                err = {
                    "name": "StepTimeoutError",
                    "message": f"{workflow} {child_id} did not end within {seconds:g} seconds",
                }
                await self._record(
                    key,
                    seq,
                    "wait_for_workflow",
                    "errored",
                    new=record is None,
                    error=err,
                    wake_at=deadline,
                    started_at=started,
                    ended_at=now,
                    info=info,
                )
                raise StepTimeoutError(err["message"])
            if record is None:
                await self._record(
                    key,
                    seq,
                    "wait_for_workflow",
                    "waiting",
                    new=record is None,
                    wake_at=deadline,
                    started_at=started,
                    info=info,
                )
        finally:
            self._end()
        await self._park(deadline)

    # -- rollbacks -------------------------------------------------------------------------------

    async def _run_rollbacks(self, error: BaseException | None) -> dict[str, Any] | None:
        """Run the registered rollbacks, latest-completed first; each is a durable step.

        Completion order is the recorded ``ended_at`` of each step (ties, as with a manual clock:
        latest-started first). It differs from start order only for steps run concurrently.
        """
        if not self._rollbacks:
            return None
        self._terminating = False  # rollbacks themselves must be allowed to run
        failures: list[dict[str, str]] = []
        for rb in sorted(self._rollbacks, key=lambda r: (r.ended_at, r.seq), reverse=True):
            key = (rb.name + _ROLLBACK_SUFFIX, rb.count)
            record = self._lookup(key, "rollback")
            if record is not None and record.status == "complete":
                continue
            seq = self._seq_for(record)
            try:
                await self._run_attempts(
                    key, seq, "rollback", record, rb.config, rb.fn, (error, rb.output)
                )
            except StepFailedError as exc:
                failures.append({"step": f"{rb.name}-{rb.count}", **error_info(exc)})
        if failures:
            first = failures[0]
            return {
                "outcome": "failed",
                "error": {"name": first["name"], "message": first["message"]},
                "failed": failures,
            }
        return {"outcome": "complete", "error": None}
