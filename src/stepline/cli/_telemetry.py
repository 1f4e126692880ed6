"""The commands' telemetry options: ``--log-format`` and ``--metrics-port`` / ``--metrics-host``,
over the ``[logging]`` and ``[telemetry]`` tables of stepline.toml (docs/observability.md)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from .._project_telemetry import LOG_FORMATS, check_port
from ..engine import Engine
from ..telemetry import JsonFormatter, LogContextFilter, Telemetry
from ._common import State, fail

F = TypeVar("F", bound=Callable[..., Any])


def log_format_option(fn: F) -> F:
    return click.option(
        "--log-format",
        type=click.Choice(LOG_FORMATS, case_sensitive=False),
        default=None,
        help="Log lines as text or one JSON object per line [[logging] format, else text].",
    )(fn)


def metrics_options(fn: F) -> F:
    fn = click.option(
        "--metrics-host",
        metavar="HOST",
        default=None,
        help="Address the metrics port listens on [[telemetry] metrics_host, else 127.0.0.1].",
    )(fn)
    return click.option(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="Serve Prometheus metrics on http://HOST:PORT/metrics [[telemetry] metrics_port].",
    )(fn)


def log_format(state: State, given: str | None) -> str:
    """The log format: ``--log-format``, else the ``[logging]`` table's."""
    return (given or state.project.telemetry.log_format).lower()


def json_handler() -> logging.Handler:
    """A stderr handler writing one JSON object per line, with the log context's ids."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(LogContextFilter())
    return handler


def telemetry(state: State, *, json_logs: bool, metrics: bool = False) -> Telemetry:
    """The engine's telemetry: traces as ``[telemetry] traces`` says, metrics if asked, the log
    context with JSON logs."""
    return Telemetry(traces=state.project.telemetry.traces, metrics=metrics, log_context=json_logs)


def metrics_address(state: State, port: int | None, host: str | None) -> tuple[str, int] | None:
    """Where to serve metrics: the options, else the ``[telemetry]`` table; None: nowhere."""
    configured = state.project.telemetry
    port = port if port is not None else configured.metrics_port
    if port is None:
        return None
    try:
        check_port(port, "--metrics-port")
    except ValueError as exc:
        fail(str(exc))
    return host or configured.metrics_host, port


def serve_metrics(engine: Engine, address: tuple[str, int] | None) -> Callable[[], None]:
    """Serve the engine's metrics at ``address`` (a no-op without one); what stops it."""
    metrics = engine.telemetry.metrics
    if address is None or metrics is None:
        return _nothing
    return metrics.serve(*address)


def _nothing() -> None:
    pass
