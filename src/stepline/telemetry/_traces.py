"""Traces on OpenTelemetry's API (the ``otel`` extra): the spans of creates, activations, step
attempts, waits and rollbacks, and the W3C ``traceparent`` that ties an instance's activations
into one trace.

Imported only when tracing is wired (:mod:`._wiring`): the plain install has no OpenTelemetry.
Spans go to the tracer provider given, else to the global one (whatever the application or
``opentelemetry-instrument`` configured); nothing here configures an exporter.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata
from typing import Any, Literal

from opentelemetry import context, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

AttributeValue = str | int | float | bool
Kind = Literal["internal", "producer", "consumer"]
_KINDS = {
    "internal": SpanKind.INTERNAL,
    "producer": SpanKind.PRODUCER,
    "consumer": SpanKind.CONSUMER,
}
_propagator = TraceContextTextMapPropagator()
_EMPTY = context.Context()


def traceparent_of(span: Span) -> str | None:
    """The W3C ``traceparent`` of ``span``, None for an invalid span (nothing traces)."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def ids_of(span: Span) -> tuple[str, str] | None:
    """``(trace id, span id)`` in hex, as logs show them; None for an invalid span."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


class Tracing:
    """Starts stepline's spans on one tracer."""

    def __init__(self, tracer_provider: Any = None) -> None:
        try:
            version: str | None = metadata.version("stepline")
        except metadata.PackageNotFoundError:
            version = None
        self._tracer = trace.get_tracer("stepline", version, tracer_provider=tracer_provider)
        self._start_span = self._tracer.start_span

    def parent(self, traceparent: str | None) -> context.Context:
        """The context a span continuing ``traceparent`` starts in: an empty one (a new trace)
        when there is none, never the context the caller happens to run in."""
        if traceparent is None:
            return _EMPTY
        return _propagator.extract({"traceparent": traceparent}, context=_EMPTY)

    def start(
        self,
        name: str,
        attributes: Mapping[str, AttributeValue],
        *,
        parent: context.Context | None = None,
        kind: Kind = "internal",
        start: float | None = None,
    ) -> Span:
        """A span started now (or at ``start``, seconds since the epoch), a child of ``parent``
        (default: the current span)."""
        return self._tracer.start_span(
            name,
            context=parent,
            kind=_KINDS[kind],
            attributes=attributes,
            start_time=None if start is None else _ns(start),
        )

    def step(self, name: str, attempt: int) -> tuple[Span, object]:
        """A step attempt's span, started now as a child of the current span and made the current
        one (the spans its callback starts are its children): the span and the token for
        :meth:`step_ended`. On the path of every step: the SDK's calls, and nothing else."""
        span = self._start_span(
            f"step {name}",
            attributes={"workflow.step.name": name, "workflow.step.attempt": attempt},
        )
        return span, context.attach(trace.set_span_in_context(span))

    @staticmethod
    def step_ended(
        span: Span, token: object, outcome: str, error: BaseException | None, failed: bool
    ) -> None:
        """End a span of :meth:`step` (see :meth:`end`), no longer the current one."""
        context.detach(token)  # type: ignore[arg-type]
        if error is None and not failed:  # every attempt that succeeds
            span.set_attribute("workflow.outcome", outcome)
            span.end()
        else:
            Tracing.end(span, outcome, error, failed=failed)

    traceparent = staticmethod(traceparent_of)
    ids = staticmethod(ids_of)

    @staticmethod
    def attach(span: Span) -> object:
        """Make ``span`` the current one in this context (a token for :meth:`detach`)."""
        return context.attach(trace.set_span_in_context(span))

    @staticmethod
    def detach(token: object) -> None:
        context.detach(token)  # type: ignore[arg-type]

    @staticmethod
    def current_traceparent() -> str | None:
        return traceparent_of(trace.get_current_span())

    @staticmethod
    def end(
        span: Span,
        outcome: str,
        error: BaseException | None = None,
        error_type: str | None = None,
        *,
        failed: bool = False,
        at: float | None = None,
    ) -> None:
        """End ``span`` with its outcome; an error recorded on it (``record_exception``) and its
        status set to ERROR when ``failed``."""
        if span.is_recording():
            span.set_attribute("workflow.outcome", outcome)
            if error is not None:
                span.record_exception(error)
            if error_type is not None or error is not None:
                span.set_attribute("error.type", error_type or type(error).__qualname__)
            if failed:
                description = str(error) if error is not None else error_type
                span.set_status(Status(StatusCode.ERROR, description))
        span.end(end_time=None if at is None else _ns(at))
