"""The observer telemetry gives an engine (:class:`~stepline._runtime.observer.Observer`): one
object that feeds whichever of traces, metrics and the log context are on.

One :class:`_Activation` per activation and one :class:`_Attempt` per step attempt, each doing
only what is on; an engine with nothing on gets no observer at all (see :mod:`._wiring`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._runtime.observer import AttemptOutcome, CreateEnd, TickOutcome, WaitOutcome
from ..records import StepKind
from ..store.base import Claim, NewInstance
from . import _logs

if TYPE_CHECKING:  # the extras' modules, imported at wiring time only
    from opentelemetry.trace import Span

    from ._metrics import Metrics
    from ._traces import Tracing

_FINISHED = frozenset({"complete", "errored", "terminated"})


class TelemetryObserver:
    """Traces (``tracing``), metrics (``metrics``) and the log context (``log_context``), each
    None or False when off."""

    def __init__(self, tracing: Tracing | None, metrics: Metrics | None, log_context: bool) -> None:
        self.tracing = tracing
        self.metrics = metrics
        self.log_context = log_context

    # -- creates ---------------------------------------------------------------------------------

    def creating(
        self, workflow: str, trigger: str, items: Sequence[NewInstance]
    ) -> tuple[Sequence[NewInstance], CreateEnd]:
        spans: list[Span] = []
        tracing = self.tracing
        if tracing is not None and items:
            items, spans = _traced(tracing, workflow, trigger, items)
        metrics = self.metrics

        def ended(count: int, error: BaseException | None) -> None:
            if metrics is not None and count:
                metrics.created.add((workflow, trigger), count)
            if tracing is not None:
                outcome = "created" if error is None else "failed"
                for span in spans:
                    tracing.end(span, outcome, error, failed=error is not None)

        return items, ended

    # -- activations -----------------------------------------------------------------------------

    def activation(self, claim: Claim) -> _Activation:
        return _Activation(self, claim)

    def tick(self, schedule: str, outcome: TickOutcome) -> None:
        if self.metrics is not None:
            self.metrics.ticks.add((schedule, outcome))

    def store_error(self, operation: str, error: BaseException) -> None:
        if self.metrics is not None:
            self.metrics.store_error(operation, error)


def _traced(
    tracing: Tracing, workflow: str, trigger: str, items: Sequence[NewInstance]
) -> tuple[list[NewInstance], list[Span]]:
    """The items with the traceparent of their create span: one span per distinct parent (an
    item's own traceparent, from a queue message or an HTTP header; else the caller's span)."""
    spans: dict[str | None, tuple[Span, str | None]] = {}
    traced: list[NewInstance] = []
    for item in items:
        found = spans.get(item.traceparent)
        if found is None:
            parent = None if item.traceparent is None else tracing.parent(item.traceparent)
            attributes: dict[str, Any] = {"workflow.name": workflow, "workflow.trigger": trigger}
            if len(items) == 1:
                attributes["workflow.instance.id"] = item.id
            span = tracing.start(f"create {workflow}", attributes, parent=parent, kind="producer")
            found = spans[item.traceparent] = (span, tracing.traceparent(span))
        traceparent = found[1] or item.traceparent
        traced.append(
            item
            if traceparent == item.traceparent
            else dataclasses.replace(item, traceparent=traceparent)
        )
    return traced, [span for span, _ in spans.values()]


class _Activation:
    """One activation's observation (:class:`~stepline._runtime.ActivationObservation`)."""

    __slots__ = (
        "_ended",
        "_log",
        "_span",
        "_started",
        "_token",
        "_unsampled",
        "instance_id",
        "owner",
        "recording",
        "workflow",
    )

    def __init__(self, owner: TelemetryObserver, claim: Claim) -> None:
        instance = claim.instance
        self.owner = owner
        self.workflow = instance.workflow
        self.instance_id = instance.id
        self._started = 0.0 if owner.metrics is None else time.perf_counter()
        self._ended = False
        self._span: Span | None = None
        self._token: object = None
        self._log: Any = None
        self.recording = False
        """Whether the activation's span records: its steps make spans only then."""
        self._unsampled: _Unsampled | None = None
        tracing = owner.tracing
        ids = None
        if tracing is not None:
            self._span = tracing.start(
                f"run {self.workflow}",
                {
                    "workflow.name": self.workflow,
                    "workflow.instance.id": self.instance_id,
                    "stepline.worker.id": claim.lease.owner,
                },
                parent=tracing.parent(instance.traceparent),
                kind="consumer",
            )
            self._token = tracing.attach(self._span)
            self.recording = self._span.is_recording()
            if owner.log_context:
                ids = tracing.ids(self._span)
        if owner.log_context:
            trace_id, span_id = ids if ids is not None else (None, None)
            fields = _logs.LogFields(self.workflow, self.instance_id, None, None, trace_id, span_id)
            self._log = _logs.enter(fields)
        metrics = owner.metrics
        if metrics is not None:
            _claimed(metrics, claim)
        elif tracing is not None and not self.recording and not owner.log_context:
            self._unsampled = _Unsampled(tracing)

    def attempt(self, kind: StepKind, name: str, count: int, number: int) -> _Attempt | _Unsampled:
        if self._unsampled is not None:
            return self._unsampled
        return _Attempt(self, kind, name, count, number)

    def waited(
        self,
        kind: StepKind,
        name: str,
        count: int,
        started_at: float | None,
        ended_at: float,
        outcome: WaitOutcome,
    ) -> None:
        tracing = self.owner.tracing
        if tracing is None:
            return
        span = tracing.start(
            kind,
            self._step_attributes(kind, name, count),
            start=ended_at if started_at is None else started_at,
        )
        tracing.end(
            span,
            outcome,
            error_type="StepTimeoutError" if outcome == "timeout" else None,
            at=ended_at,
        )

    def rollbacks(self) -> Callable[[str], None]:
        tracing = self.owner.tracing
        if tracing is None:
            return _ignore
        attributes = {"workflow.name": self.workflow, "workflow.instance.id": self.instance_id}
        span = tracing.start(f"rollback {self.workflow}", attributes)
        token = tracing.attach(span)

        def ended(outcome: str) -> None:
            tracing.detach(token)
            tracing.end(span, outcome, failed=outcome == "failed")

        return ended

    def child_traceparent(self) -> str | None:
        tracing = self.owner.tracing
        return None if tracing is None else tracing.current_traceparent()

    def created(self, workflow: str, trigger: str, count: int) -> None:
        metrics = self.owner.metrics
        if metrics is not None and count:
            metrics.created.add((workflow, trigger), count)

    def ended(self, outcome: str, error: dict[str, str] | None) -> None:
        if self._ended:
            return
        self._ended = True
        owner = self.owner
        metrics = owner.metrics
        if metrics is not None:
            elapsed = time.perf_counter() - self._started
            metrics.activation_seconds.observe((self.workflow,), elapsed)
            if outcome in _FINISHED:
                metrics.finished.add((self.workflow, outcome))
        if self._log is not None:
            _logs.leave(self._log)
        tracing = owner.tracing
        if tracing is not None and self._span is not None:
            tracing.detach(self._token)
            error_type = None if error is None else error.get("name")
            tracing.end(self._span, outcome, error_type=error_type, failed=outcome == "errored")

    def _step_attributes(self, kind: StepKind, name: str, count: int) -> dict[str, Any]:
        return {
            "workflow.name": self.workflow,
            "workflow.instance.id": self.instance_id,
            "workflow.step.name": name,
            "workflow.step.count": count,
            "workflow.step.kind": kind,
        }


def _ignore(outcome: str) -> None:
    pass


def _claimed(metrics: Metrics, claim: Claim) -> None:
    """Claim latency and lease takeovers, from what the claim read."""
    instance, steps = claim.instance, claim.history.steps
    claimed_at = instance.updated_at  # a claim writes its time there
    if any(step.status == "running" for step in steps):
        metrics.takeovers.add((instance.workflow,))
        return
    due: float | None = instance.created_at if not steps else None
    for step in steps:
        if step.status == "waiting" and step.wake_at is not None and step.wake_at <= claimed_at:
            due = step.wake_at if due is None else max(due, step.wake_at)
    for event in claim.history.events:
        due = event.timestamp if due is None else max(due, event.timestamp)
    if due is not None:
        latency = max(0.0, claimed_at - due)
        metrics.claim_latency.observe((instance.workflow,), latency)


class _Attempt:
    """One attempt's observation (:class:`~stepline._runtime.AttemptObservation`). On the path
    of every step: each attribute of a span costs the SDK microseconds, so a step's span carries
    only its name and attempt (the activation's span, its parent, has the instance). An
    activation whose span the sampler dropped makes none for its steps: children of a span not
    sampled, OpenTelemetry's default sampler drops them too, after they cost the SDK a span."""

    __slots__ = ("_activation", "_ended", "_log", "_span", "_started", "_token", "name")

    def __init__(
        self, activation: _Activation, kind: StepKind, name: str, count: int, number: int
    ) -> None:
        self._activation = activation
        self.name = name
        owner = activation.owner
        self._started = 0.0 if owner.metrics is None else time.perf_counter()
        self._ended = False
        tracing = owner.tracing
        span = None
        if tracing is not None and activation.recording:
            span, self._token = tracing.step(name, number)
        self._span = span
        self._log = None
        if owner.log_context:
            ids = None if span is None or tracing is None else tracing.ids(span)
            self._log = _logs.enter_step(f"{name}-{count}", number, ids)

    @property
    def traceparent(self) -> str | None:
        tracing = self._activation.owner.tracing
        if tracing is None:
            return None
        if self._span is None:  # not sampled: the span it runs in passes that on
            return tracing.current_traceparent()
        return tracing.traceparent(self._span)

    def ended(self, outcome: AttemptOutcome, error: BaseException | None) -> None:
        if self._ended:
            return
        self._ended = True
        activation = self._activation
        owner = activation.owner
        metrics = owner.metrics
        if metrics is not None:
            key = (activation.workflow, self.name)
            metrics.step_seconds.observe(key, time.perf_counter() - self._started)
            metrics.attempts.add((*key, outcome))
        if self._log is not None:
            _logs.leave(self._log)
        tracing = owner.tracing
        if tracing is not None and self._span is not None:
            failed = outcome == "retry" or outcome == "failed"
            tracing.step_ended(self._span, self._token, outcome, error, failed)


class _Unsampled:
    """Every attempt of an activation the sampler dropped, when only traces are on: nothing to
    record, and the trace passes on, not sampled, from the span the step runs in."""

    __slots__ = ("_tracing",)

    def __init__(self, tracing: Tracing) -> None:
        self._tracing = tracing

    @property
    def traceparent(self) -> str | None:
        return self._tracing.current_traceparent()

    def ended(self, outcome: AttemptOutcome, error: BaseException | None) -> None:
        pass
