"""What telemetry an engine keeps (:class:`Telemetry`), and wiring it: the optional libraries
are imported here, when a feature is turned on, and only then.

Traces are on when asked (``traces=True``) or, by default, when the process has configured an
OpenTelemetry tracer provider by the time the engine first needs its observer (it opens, makes
its worker or a workflow binding): a process that never imported OpenTelemetry has none, and is
not made to import it. Metrics are on when asked. An engine with nothing on has no observer.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..store.base import Store
from ._fleet import TTL, FleetReadings
from ._observer import TelemetryObserver

if TYPE_CHECKING:  # the extras' modules, imported at wiring time only
    from ._metrics import Metrics


def _extra(module: str, feature: str, extra: str, library: str) -> ModuleType:
    """Import a module of this package that needs an optional library, or say how to get it."""
    try:
        return importlib.import_module(f"{__package__}.{module}")
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.startswith(__package__ or "stepline"):
            raise
        raise ConfigError(
            f"{feature} need {library}, which is not installed ({exc.name} is missing): "
            f"pip install 'stepline[{extra}]'"
        ) from exc


def provider_configured() -> bool:
    """Whether this process has set a global OpenTelemetry tracer provider (looked at only if
    it imported OpenTelemetry's trace API: a process that did not has none)."""
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return False
    provider = api.get_tracer_provider()
    return not isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider)


class Telemetry:
    """What an :class:`~stepline.Engine` reports, given as ``Engine(telemetry=...)``
    (docs/observability.md).

    ``traces``: OpenTelemetry spans of creates, activations, step attempts, waits and rollbacks
    (``pip install 'stepline[otel]'``). None (default): on if an OpenTelemetry tracer provider
    is configured (globally, or ``tracer_provider``); True: on, on the global provider
    whatever it is (one set later, by ``opentelemetry-instrument`` say); False: off.

    ``metrics``: Prometheus metrics (``pip install 'stepline[metrics]'``) in ``registry`` (a
    ``prometheus_client.CollectorRegistry``; default: one of this object's own), exposed by
    ``stepline worker --metrics-port``, ``stepline serve``'s ``/metrics``, or
    :meth:`exposition`. The fleet's figures are read from the store at most every
    ``fleet_ttl`` seconds.

    ``log_context``: the ids of the instance, step, attempt and trace on log records (see
    :class:`LogContextFilter`; JSON logs turn it on).

    A feature turned on without its library raises :class:`~stepline.ConfigError` naming the
    extra to install, when the engine first needs it.
    """

    def __init__(
        self,
        *,
        traces: bool | None = None,
        metrics: bool = False,
        log_context: bool = False,
        tracer_provider: Any = None,
        registry: Any = None,
        fleet_ttl: float = TTL,
    ) -> None:
        self.traces = traces
        self.want_metrics = metrics
        self.log_context = log_context
        self.tracer_provider = tracer_provider
        self.registry = registry
        self.fleet_ttl = fleet_ttl
        self._wired = False
        self._observer: TelemetryObserver | None = None
        self._metrics: Metrics | None = None

    def __repr__(self) -> str:
        return (
            f"Telemetry(traces={self.traces!r}, metrics={self.want_metrics!r}, "
            f"log_context={self.log_context!r})"
        )

    @property
    def metrics(self) -> Metrics | None:
        """The metrics, once wired (None when off)."""
        return self._metrics

    def observer(self, store: Store) -> TelemetryObserver | None:
        """The observer for an engine on ``store`` (made once; None when nothing is on)."""
        if self._wired:
            return self._observer
        tracing = None
        if self.traces or (self.traces is None and self._provider()):
            module = _extra("_traces", "traces", "otel", "OpenTelemetry")
            tracing = module.Tracing(self.tracer_provider)
        metrics = None
        if self.want_metrics:
            module = _extra("_metrics", "metrics", "metrics", "prometheus-client")
            metrics = module.Metrics(self.registry)
            metrics.watch_fleet(FleetReadings(store, self.fleet_ttl))
        self._metrics = metrics
        if tracing is not None or metrics is not None or self.log_context:
            self._observer = TelemetryObserver(tracing, metrics, self.log_context)
        self._wired = True
        return self._observer

    def _provider(self) -> bool:
        return self.tracer_provider is not None or provider_configured()

    async def exposition(self) -> tuple[bytes, str]:
        """The Prometheus text format of the metrics (the fleet's figures read first) and its
        content type; :class:`~stepline.ConfigError` if metrics are off."""
        if self._metrics is None:
            raise ConfigError(
                "metrics are off: turn them on with Telemetry(metrics=True), "
                "`stepline worker --metrics-port`, or [telemetry] metrics = true"
            )
        return await self._metrics.exposition(), self._metrics.content_type
