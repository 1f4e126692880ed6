"""Spans as the tests read them: from the OpenTelemetry SDK's in-memory exporter (in this
process) or from the JSON lines a worker process's console exporter wrote (``span.to_json()``),
both made into :class:`Seen`."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@dataclass(frozen=True)
class Seen:
    """One ended span: ids in hex, as W3C ``traceparent`` writes them."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    attributes: dict[str, Any] = field(default_factory=dict)
    status: str = "UNSET"
    events: tuple[str, ...] = ()
    start: float = 0.0
    end: float = 0.0

    @property
    def outcome(self) -> Any:
        return self.attributes.get("workflow.outcome")


def from_sdk(span: ReadableSpan) -> Seen:
    ctx = span.get_span_context()
    assert ctx is not None
    return Seen(
        span.name,
        f"{ctx.trace_id:032x}",
        f"{ctx.span_id:016x}",
        None if span.parent is None else f"{span.parent.span_id:016x}",
        dict(span.attributes or {}),
        span.status.status_code.name,
        tuple(event.name for event in span.events),
        (span.start_time or 0) / 1e9,
        (span.end_time or 0) / 1e9,
    )


def from_json_lines(paths: Iterable[Path]) -> list[Seen]:
    """The spans a console exporter wrote as one JSON document per line."""
    found: list[Seen] = []
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            data = json.loads(line)
            found.append(
                Seen(
                    data["name"],
                    data["context"]["trace_id"].removeprefix("0x"),
                    data["context"]["span_id"].removeprefix("0x"),
                    None if data["parent_id"] is None else data["parent_id"].removeprefix("0x"),
                    data["attributes"],
                    data["status"]["status_code"],
                    tuple(e["name"] for e in data["events"]),
                )
            )
    return found


class Recorder:
    """A tracer provider whose spans are kept in memory, as the tests read them."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def spans(self) -> list[Seen]:
        return [from_sdk(span) for span in self.exporter.get_finished_spans()]

    def named(self, name: str) -> list[Seen]:
        return [span for span in self.spans() if span.name == name]

    def one(self, name: str) -> Seen:
        (found,) = self.named(name)
        return found
