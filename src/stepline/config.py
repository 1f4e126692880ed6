"""Step configuration: retries, backoff and timeouts, validated when a step is declared."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from .durations import parse_duration

Backoff = Literal["constant", "linear", "exponential"]
DelayFunction = Callable[[int, BaseException], Any]

_BACKOFFS = ("constant", "linear", "exponential")


@dataclass(frozen=True)
class RetryConfig:
    """How a failing step is retried.

    ``limit`` counts retries after the first attempt (so ``limit=5`` allows 6 attempts).
    The delay after failed attempt ``n`` (1-based) is ``delay`` (constant), ``delay * n``
    (linear) or ``delay * 2 ** (n - 1)`` (exponential). ``delay`` may instead be a callable
    ``(attempt, error) -> duration`` whose answer is used as is.
    """

    limit: int = 5
    delay: float | DelayFunction = 10.0
    backoff: Backoff = "exponential"

    def delay_after(self, attempt: int, error: BaseException) -> float:
        """Seconds to wait after failed attempt number ``attempt`` before the next one."""
        if not isinstance(self.delay, int | float):
            return parse_duration(self.delay(attempt, error), what="retries.delay result")
        base = float(self.delay)
        if self.backoff == "constant":
            return base
        if self.backoff == "linear":
            return base * attempt
        return base * 2.0 ** (attempt - 1)


@dataclass(frozen=True)
class StepConfig:
    """Per-step settings: ``retries`` and the per-attempt ``timeout`` (seconds)."""

    retries: RetryConfig = field(default_factory=RetryConfig)
    timeout: float = 600.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-able description (callables are shown by name)."""
        delay = self.retries.delay
        return {
            "retries": {
                "limit": self.retries.limit,
                "delay": delay if not callable(delay) else getattr(delay, "__name__", "callable"),
                "backoff": self.retries.backoff,
            },
            "timeout": self.timeout,
        }


DEFAULT_STEP_CONFIG = StepConfig()


def _parse_retries(value: object) -> RetryConfig:
    if isinstance(value, RetryConfig):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"invalid step config key 'retries': expected a dict, got {value!r}")
    unknown = sorted(set(value) - {"limit", "delay", "backoff"})
    if unknown:
        raise ValueError(
            f"unknown step config key 'retries.{unknown[0]}'; allowed: limit, delay, backoff"
        )
    limit = value.get("limit", 5)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(
            f"invalid step config key 'retries.limit': {limit!r} (a whole number >= 0)"
        )
    raw_delay = value.get("delay", 10.0)
    delay: float | DelayFunction
    if callable(raw_delay):
        delay = cast(DelayFunction, raw_delay)
    else:
        try:
            delay = parse_duration(raw_delay, what="retries.delay")
        except ValueError as exc:
            raise ValueError(f"invalid step config key 'retries.delay': {exc}") from None
    backoff = value.get("backoff", "exponential")
    if backoff not in _BACKOFFS:
        raise ValueError(
            f"invalid step config key 'retries.backoff': {backoff!r} "
            "(one of 'constant', 'linear', 'exponential')"
        )
    return RetryConfig(limit=limit, delay=delay, backoff=cast(Backoff, backoff))


def parse_step_config(value: object) -> StepConfig:
    """Validate a ``StepConfig`` or a dict ``{"retries": {...}, "timeout": ...}``.

    Unknown keys and invalid values raise :class:`ValueError` naming the key.
    """
    if value is None:
        return DEFAULT_STEP_CONFIG
    if isinstance(value, StepConfig):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"invalid step config {value!r}: expected a dict or a StepConfig")
    unknown = sorted(set(value) - {"retries", "timeout"})
    if unknown:
        raise ValueError(f"unknown step config key {unknown[0]!r}; allowed: retries, timeout")
    retries = _parse_retries(value["retries"]) if "retries" in value else RetryConfig()
    timeout = 600.0
    if "timeout" in value:
        try:
            timeout = parse_duration(value["timeout"], what="timeout")
        except ValueError as exc:
            raise ValueError(f"invalid step config key 'timeout': {exc}") from None
        if timeout <= 0:
            raise ValueError("invalid step config key 'timeout': must be greater than zero")
    return StepConfig(retries=retries, timeout=timeout)
