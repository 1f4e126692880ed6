"""The OpenTelemetry SDK set up for the telemetry benchmark: every span sampled (or a share of
the traces), queued by the SDK's batch processor and handed to an exporter that drops it, so
that the figure is the cost of making the spans in the worker, not of a backend or a network;
and what a span costs that SDK alone (:func:`span_cpu`), the floor of traces' cost per step."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased

from stepline.telemetry._traces import Tracing


class Dropped(SpanExporter):
    """Counts the spans it is given and keeps none."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def sdk_provider(ratio: float = 1.0) -> Any:
    """Every span sampled, or (``ratio`` under 1) that share of the traces started here, their
    spans' children following them (the SDK's ``parentbased_traceidratio``)."""
    sampler = ALWAYS_ON if ratio >= 1 else ParentBased(TraceIdRatioBased(ratio))
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    return provider


def spans(provider: Any, kind: str, n: int) -> float:
    """CPU seconds, every thread counted (as the worker's CPU is), of ``n`` spans on
    ``provider``: ``bare`` ones (started and ended, no attribute, no parent), or ``step``
    attempts' as the engine makes them (two attributes, made the current span, the outcome
    set, ended)."""
    started = time.process_time()
    if kind == "bare":
        tracer = provider.get_tracer("floor")
        for _ in range(n):
            tracer.start_span("bare").end()
    else:
        tracing = Tracing(provider)
        for index in range(n):
            span, token = tracing.step(f"s{index % 10}", 1)
            tracing.step_ended(span, token, "success", None, False)
    return time.process_time() - started


def span_cpu(n: int = 20_000) -> tuple[float, float]:
    """CPU µs per span of :func:`spans`, bare and a step's, on :func:`sdk_provider`'s set-up
    (a fresh provider, its batch processor's thread stopped afterwards)."""
    provider = sdk_provider()
    try:
        for kind in ("bare", "step"):  # warm up: the SDK's first spans, the queue's thread
            spans(provider, kind, 1_000)
        bare, step = (spans(provider, kind, n) / n * 1e6 for kind in ("bare", "step"))
    finally:
        provider.shutdown()
    return bare, step
