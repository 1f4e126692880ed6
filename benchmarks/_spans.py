"""The OpenTelemetry SDK set up for the telemetry benchmark: every span sampled, queued by the
SDK's batch processor and handed to an exporter that drops it, so that the figure is the cost
of making the spans in the worker, not of a backend or a network."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON


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


def sdk_provider() -> Any:
    provider = TracerProvider(sampler=ALWAYS_ON)
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    return provider
