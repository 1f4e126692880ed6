"""The ``[telemetry]`` and ``[logging]`` tables of ``stepline.toml`` (docs/observability.md)::

[telemetry]
traces = true              # trace even if no tracer provider is set up in code (default:
                           # only when one is; `opentelemetry-instrument stepline ...` sets one)
metrics = true             # Prometheus metrics: `stepline serve` answers GET /metrics
metrics_port = 9464        # `stepline worker` serves /metrics on this port (metrics on)
metrics_host = "0.0.0.0"   # where that port listens (default 127.0.0.1)

[logging]
format = "json"            # one JSON object per line (default "text")
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ._config_keys import check_keys
from ._shown import shown
from .errors import ConfigError

TELEMETRY_KEYS = ("traces", "metrics", "metrics_port", "metrics_host")
LOGGING_KEYS = ("format",)
LOG_FORMATS = ("text", "json")
DEFAULT_METRICS_HOST = "127.0.0.1"

LogFormat = Literal["text", "json"]


@dataclass(frozen=True)
class TelemetryConfig:
    """The ``[telemetry]`` and ``[logging]`` tables (every key optional)."""

    traces: bool | None = None
    """True: trace whatever the tracer provider; None: when one is configured."""
    metrics: bool = False
    metrics_port: int | None = None
    metrics_host: str = DEFAULT_METRICS_HOST
    log_format: LogFormat = "text"


def check_port(port: object, what: str) -> int:
    """A TCP port number (1-65535), else ``ValueError`` naming ``what``."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"{what} must be a port number from 1 to 65535, got {shown(port)}")
    return port


def read_telemetry(telemetry: Any, logging: Any, path: Path, prefix: str) -> TelemetryConfig:
    """The two tables (absent: the defaults); a bad value is a ``ConfigError`` naming the file
    and the key."""
    found: dict[str, Any] = {}
    key = f"{prefix}telemetry"
    if telemetry is not None:
        if not isinstance(telemetry, dict):
            raise ConfigError(f"{path}: key '{key}' must be a table ([telemetry])")
        check_keys(telemetry, TELEMETRY_KEYS, path, key)
        for name in ("traces", "metrics"):
            if name in telemetry and not isinstance(telemetry[name], bool):
                raise ConfigError(f"{path}: key '{key}.{name}' must be true or false")
            if name in telemetry:
                found[name] = telemetry[name]
        if "metrics_port" in telemetry:
            try:
                found["metrics_port"] = check_port(telemetry["metrics_port"], "the value")
            except ValueError as exc:
                raise ConfigError(f"{path}: key '{key}.metrics_port': {exc}") from None
        host = telemetry.get("metrics_host", DEFAULT_METRICS_HOST)
        if not isinstance(host, str) or not host.strip():
            raise ConfigError(f"{path}: key '{key}.metrics_host' must be a host name or address")
        found["metrics_host"] = host
    key = f"{prefix}logging"
    if logging is not None:
        if not isinstance(logging, dict):
            raise ConfigError(f"{path}: key '{key}' must be a table ([logging])")
        check_keys(logging, LOGGING_KEYS, path, key)
        log_format = logging.get("format", "text")
        if log_format not in LOG_FORMATS:
            raise ConfigError(
                f"{path}: key '{key}.format' must be one of {', '.join(LOG_FORMATS)}, "
                f"got {shown(log_format)}"
            )
        found["log_format"] = log_format
    return TelemetryConfig(**found)
