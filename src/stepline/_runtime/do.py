"""``step.do``: run a callback durably, with attempts, retries, backoff and timeouts.

A recorded step returns its stored result (or raises its stored failure) without running.
Otherwise each attempt runs the callback under the attempt clock (:mod:`.marks`: the ``running``
record and the timeout); a failure is retried after the backoff (the step parks meanwhile, so
the instance may suspend), and the result is sent write-behind (:mod:`.writer`). A step whose
config names a limit holds a slot of it during each attempt (:mod:`.slots`).
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from .. import _json
from .._callbacks import CallbackShape, invoke, rollback_arguments
from ..config import StepConfig, parse_step_config
from ..errors import (
    BlobStoreError,
    InstanceFatalError,
    InvalidPayloadError,
    StepFailedError,
    StepTimeoutError,
    _EngineSignal,
)
from ..payloads import escaped, step_column
from ..records import Attempt, StepRecord
from ..step import StepCallback, StepContext
from . import slots
from .calls import IN_CALLBACK, CallbackScope
from .observer import AttemptObservation
from .replay import validate_step_name
from .signals import error_info
from .state import ActivationState, Rollback
from .writer import StepRef

INTERRUPTED_ATTEMPT = {
    "name": "Interrupted",
    "message": "the worker running this attempt stopped before it ended (killed, crashed or its "
    "lease lost); the step ran again",
}
"""The error of an attempt whose activation stopped while it ran."""
_SENSITIVE = {"sensitive": True}
"""The info of a step run with ``{"sensitive": True}``: every reader but the runtime redacts its
result (``stepline.payloads.records``)."""


def timeout_error(label: str, attempt: int, timeout: float) -> StepTimeoutError:
    """The error of an attempt that ran past its timeout."""
    return StepTimeoutError(f"step {label!r} attempt {attempt} timed out after {timeout:g} seconds")


async def do(
    state: ActivationState,
    name: str,
    config: Any,
    callback: StepCallback,
    rollback: StepCallback | None,
    rollback_config: Any,
) -> Any:
    validate_step_name(name)
    cfg = parse_step_config(config)
    if not callable(callback):
        raise TypeError(f"step {name!r}: the callback must be callable, got {callback!r}")
    rb_cfg = parse_step_config(rollback_config) if rollback is not None else cfg
    replay = state.replay
    state.quiet.progress += 1
    key, record = replay.find(name, "do")
    turns = state.turns
    if turns is not None:
        await turns.reach(key, record)
    if record is None and replay.check.unvisited:
        await state.quiet.hold(key)
    step = StepRef(key, replay.seq_for(record), "do")
    if record is not None and record.status == "complete":
        # Opened only now: a history is read without fetching offloaded results.
        output = await state.open(record.output, step_column(*key))
        if rollback is not None:
            ended = record.ended_at or 0.0
            state.rollbacks.append(Rollback(key, step.seq, ended, rollback, rb_cfg, output))
        return output
    shape = state.settings.shapes.step(callback)
    output, ended = await run_attempts(state, step, record, cfg, callback, shape)
    if rollback is not None:
        state.rollbacks.append(Rollback(key, step.seq, ended, rollback, rb_cfg, output))
    return output


async def run_attempts(
    state: ActivationState,
    step: StepRef,
    record: StepRecord | None,
    cfg: StepConfig,
    callback: StepCallback,
    shape: CallbackShape,
    undoing: tuple[BaseException | None, Any] | None = None,
) -> tuple[Any, float]:
    """Run the callback until it succeeds or fails for good, recording each outcome; return its
    result as a replay will see it, and when it ended. ``undoing``: the step is a rollback,
    called with (error, output) of the step it undoes, as its shape says."""
    label = step.label
    if record is not None and record.status == "errored":
        error = record.error or {"name": "Error", "message": ""}
        raise StepFailedError(label, error["name"], error["message"])
    attempts = step.attempts
    if record is not None:
        attempts.extend(record.attempts)
        if record.status == "running":
            # Its previous activation stopped while an attempt ran (the worker died or lost its
            # lease): that attempt stays in the history, as interrupted.
            attempts.append(_interrupted(record, len(attempts) + 1, state.store.now()))
    # Interrupted attempts did not fail: they count neither toward the retry limit nor the
    # backoff.
    cut_off = sum(1 for a in attempts if a.interrupted) if attempts else 0
    quiet, writer = state.quiet, state.writer
    await writer.committed()  # earlier steps' records, before this callback runs
    retry_at = record.wake_at if record is not None else None
    limit = cfg.limit
    if record is not None and record.status == "waiting" and (record.info or {}).get("limit"):
        retry_at = None  # waited for a slot, and may have been woken early by a release
    if quiet.gate_needed(retry_at):
        await quiet.gate(step.key, retry_at)
    step.started_at = record.started_at if record is not None else None

    while True:
        if limit is not None:
            await slots.take(state, step, limit)
        number = len(attempts) + 1
        now = state.store.now()
        if step.started_at is None:
            step.started_at = now
        quiet.begin()
        mark = state.settings.marks.add(
            functools.partial(writer.record_running, step, number, now), cfg.timeout, state.loop
        )
        observed = state.observed
        seen = None if observed is None else observed.attempt(step.kind, *step.key, number)
        try:
            if state.settings.listeners:
                state.emit("step_start", {"step": label, "attempt": number})
            hooks = state.settings.hooks
            context = None
            if undoing is not None:
                context = _context(state, step, number, cfg, seen)
                args = rollback_arguments(shape.arity, *undoing, context)
            elif shape.arity or hooks is not None:
                context = _context(state, step, number, cfg, seen)
                args = (context,) if shape.arity else ()
            else:
                args = ()
            inside = IN_CALLBACK.set(CallbackScope(label))
            try:
                if hooks is None or context is None:
                    result = await invoke(callback, shape.is_async, args, cfg.inline)
                else:
                    call = functools.partial(invoke, callback, shape.is_async, args, cfg.inline)
                    result = await hooks.attempt(context, call)
            except asyncio.CancelledError:
                if mark.timed_out():
                    raise timeout_error(label, number, cfg.timeout) from None
                raise
            finally:
                IN_CALLBACK.reset(inside)
                mark.disarm()
        except (_EngineSignal, asyncio.CancelledError):
            if seen is not None:
                seen.ended("interrupted", None)
            mark.cancel()
            quiet.end()
            if limit is not None:
                await slots.give_back_cancelled(state, step, limit)
            raise
        except Exception as exc:
            try:
                running = mark.stop()
                if running is not None:
                    await running  # the final record must not race the `running` one
                if limit is not None:
                    await slots.give_back(state, step, limit)  # before the retry's delay
                wake_at = await _failed(state, step, cfg, number, now, number - cut_off, exc, seen)
            finally:
                if seen is not None:  # ended by _failed, unless a write failed before
                    seen.ended("interrupted", None)
                quiet.end()
            if wake_at is not None:
                await quiet.gate(step.key, wake_at)
            continue
        # Succeeded (inline: every step takes this path)
        try:
            running = mark.stop()
            if running is not None:
                await running  # the final record must not race the `running` one
            ended = state.store.now()
            if limit is not None:
                await slots.give_back(state, step, limit)
            try:
                encoded, decoded = _json.encode(
                    result, what=f"the result of step {label!r}", limit=state.encode_limit
                )
                payloads = state.settings.payloads
                if payloads.plain:  # most deployments: no coroutine, no slot
                    encoded = escaped(encoded)
                else:
                    encoded = await payloads.seal(encoded, state.slot(step_column(*step.key)))
            except InvalidPayloadError as exc:
                attempts.append(Attempt(number, now, ended, None))
                if seen is not None:
                    seen.ended("failed", exc)
                info = {"name": "InvalidPayloadError", "message": str(exc)}
                await writer.write(step, "errored", error=info, ended_at=ended)
                raise InstanceFatalError("InvalidPayloadError", str(exc)) from exc
            except BlobStoreError as exc:
                # The result could not be kept: this attempt failed, and the step retries.
                wake_at = await _failed(state, step, cfg, number, now, number - cut_off, exc, seen)
            else:
                attempts.append(Attempt(number, now, ended, None))
                shown = _SENSITIVE if cfg.sensitive else None
                writer.send(step, "complete", output=encoded, ended_at=ended, info=shown)
                if seen is not None:
                    seen.ended("success", None)
                if state.settings.listeners:
                    state.emit("step_complete", {"step": label, "attempt": number})
                # The step returns what a replay will: its result as decoded from the record (equal
                # to it; a model as validated back from its JSON).
                return decoded, ended
        finally:
            if seen is not None:  # ended above, unless its records failed (a lost lease)
                seen.ended("interrupted", None)
            quiet.end()
        if wake_at is not None:  # only a result that could not be offloaded gets here
            await quiet.gate(step.key, wake_at)


async def _failed(
    state: ActivationState,
    step: StepRef,
    cfg: StepConfig,
    number: int,
    started: float,
    failed: int,
    exc: Exception,
    seen: AttemptObservation | None,
) -> float | None:
    """Record a failed attempt: the step fails for good (raise), or waits for its retry (return
    when the retry is due, None if at once). ``failed``: attempts failed so far."""
    ended = state.store.now()
    info = error_info(exc)
    step.attempts.append(Attempt(number, started, ended, info))
    if failed > cfg.retries.limit or not cfg.retries.retryable(exc):
        if seen is not None:
            seen.ended("failed", exc)
        state.emit("step_failed", {"step": step.label, "attempt": number, **info})
        await state.writer.write(step, "errored", error=info, ended_at=ended)
        raise StepFailedError(step.label, info["name"], info["message"]) from exc
    if seen is not None:
        seen.ended("retry", exc)
    delay = cfg.retries.delay_after(failed, exc)
    wake_at = ended + delay
    state.emit("step_retry", {"step": step.label, "attempt": number, "delay": delay, **info})
    await state.writer.write(step, "waiting", wake_at=wake_at)
    return wake_at if delay > 0 else None


def _context(
    state: ActivationState,
    step: StepRef,
    number: int,
    cfg: StepConfig,
    seen: AttemptObservation | None,
) -> StepContext:
    name, count = step.key
    instance = state.instance
    traceparent = None if seen is None else seen.traceparent
    return StepContext(name, count, number, cfg, instance.id, instance.workflow, traceparent)


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
