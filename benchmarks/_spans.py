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


def span_cpu(n: int = 20_000) -> tuple[float, float]:
    """CPU µs per span on :func:`sdk_provider`'s set-up, every thread counted (as the worker's
    CPU is): a bare span (started and ended, no attribute, no parent), and a step attempt's
    span as the engine makes it (two attributes, made the current span, its outcome set,
    ended). A fresh provider each time; its batch processor's thread stopped afterwards."""
    provider = sdk_provider()
    tracer = provider.get_tracer("floor")
    tracing = Tracing(provider)
    try:
        for index in range(1_000):  # warm up: the SDK's first spans, the queue's thread
            tracer.start_span("bare").end()
            span, token = tracing.step("s", index)
            tracing.step_ended(span, token, "success", None, False)
        started = time.process_time()
        for _ in range(n):
            tracer.start_span("bare").end()
        bare = time.process_time() - started
        started = time.process_time()
        for index in range(n):
            span, token = tracing.step(f"s{index % 10}", 1)
            tracing.step_ended(span, token, "success", None, False)
        step = time.process_time() - started
    finally:
        provider.shutdown()
    return bare / n * 1e6, step / n * 1e6
