"""Structured logs: one JSON object per line, and the ids of the instance, step, attempt and
trace a log line was written in, for stepline's own loggers and the user's.

The ids live in a context variable that the log context observer (:mod:`._observer`) sets for
each activation and each step attempt; asyncio tasks and the threads that run sync steps copy
it, so a ``logging`` call anywhere inside a step sees its ids. :class:`LogContextFilter` copies
them onto each record; :class:`JsonFormatter` writes them (standard library only: no extra).
"""

from __future__ import annotations

import contextvars
import logging
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class LogFields:
    """What a log line written now is about (None: does not apply)."""

    workflow: str | None = None
    instance_id: str | None = None
    step: str | None = None
    """The step's name and occurrence, ``name-count``."""
    attempt: int | None = None
    trace_id: str | None = None
    """32 hex digits, as trace backends show it."""
    span_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in FIELDS if getattr(self, name) is not None}


FIELDS = ("workflow", "instance_id", "step", "attempt", "trace_id", "span_id")
"""The record attributes :class:`LogContextFilter` sets (None where they do not apply)."""

_CURRENT: contextvars.ContextVar[LogFields | None] = contextvars.ContextVar(
    "stepline_log_fields", default=None
)


def current_fields() -> LogFields | None:
    """The ids of the activation and step attempt running in this context, if any."""
    return _CURRENT.get()


def enter(fields: LogFields) -> contextvars.Token[LogFields | None]:
    """Make ``fields`` the current ones (until :func:`leave` with the token)."""
    return _CURRENT.set(fields)


def enter_step(
    step: str, attempt: int, span: tuple[str, str] | None
) -> contextvars.Token[LogFields | None]:
    """The current fields with a step attempt's (and its span's trace and span ids)."""
    base = _CURRENT.get() or LogFields()
    if span is None:
        return _CURRENT.set(replace(base, step=step, attempt=attempt))
    return _CURRENT.set(
        replace(base, step=step, attempt=attempt, trace_id=span[0], span_id=span[1])
    )


def leave(token: contextvars.Token[LogFields | None]) -> None:
    _CURRENT.reset(token)


class LogContextFilter(logging.Filter):
    """Adds ``workflow``, ``instance_id``, ``step``, ``attempt``, ``trace_id`` and ``span_id``
    to every record that passes (None outside an activation or a step), so that a formatter
    can show them: add it to your own handler to get stepline's ids on your logs from inside
    steps (``logging.getLogger().handlers[0].addFilter(LogContextFilter())``). The ids are set
    while an engine keeps the log context (``Telemetry(log_context=True)``, or JSON logs)."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = _CURRENT.get()
        for name in FIELDS:
            setattr(record, name, None if fields is None else getattr(fields, name))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``timestamp`` (UTC, ISO 8601), ``level``, ``logger``,
    ``message``, then the ids of :class:`LogContextFilter` that apply (read from the context
    even without the filter) and ``exception`` (the formatted traceback) if there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = _CURRENT.get()
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is None and fields is not None:
                value = getattr(fields, name)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return orjson.dumps(line, default=str).decode()
