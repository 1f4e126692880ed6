"""Telemetry: OpenTelemetry traces, Prometheus metrics and structured JSON logs
(docs/observability.md).

They observe the engine through the runtime's one seam (:class:`stepline._runtime.Observer`),
and cost nothing when off: an engine with nothing on has no observer. Traces need ``pip install
'stepline[otel]'``, metrics ``pip install 'stepline[metrics]'``; those libraries are imported
only when the feature is turned on (:mod:`._wiring`). JSON logs need nothing more.

Modules: ``_wiring`` (:class:`Telemetry`: what is on, and importing the extras), ``_observer``
(the observer), ``_traces`` (spans, on OpenTelemetry), ``_metrics`` (on prometheus-client),
``_fleet`` (the fleet's figures read from the store, for the gauges and the dashboard's chart),
``_logs`` (the log context, its filter, the JSON formatter).
"""

from ._fleet import Activity, ActivityReadings, Fleet, FleetReadings, WorkflowFigures
from ._logs import JsonFormatter, LogContextFilter, LogFields, current_fields
from ._wiring import Telemetry, provider_configured

__all__ = [
    "Activity",
    "ActivityReadings",
    "Fleet",
    "FleetReadings",
    "JsonFormatter",
    "LogContextFilter",
    "LogFields",
    "Telemetry",
    "WorkflowFigures",
    "current_fields",
    "provider_configured",
]
