"""Values in the shapes Cloudflare's Python Workflows SDK gives them: dicts with attribute access
(the event, the step context, step results), durations in its units, its step config.

The SDK converts what JavaScript hands it with ``python_from_rpc``: objects become dicts whose
keys are also attributes (``event["payload"]`` and ``event.payload``), with JavaScript's key
names (``instanceId``). A bare number given as a duration goes to JavaScript as it is, where it
counts milliseconds (``step.sleep("nap", 500)`` sleeps half a second; see docs/cloudflare.md).
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from .._shown import shown
from ..config import StepConfig
from ..errors import DefinitionError, NonRetryableError, StepFailedError
from ..records import EventRecord
from ..step import StepContext
from ..workflow import WorkflowEvent as SteplineEvent

_UNITS: dict[str, float] = {
    "millisecond": 0.001,
    "second": 1.0,
    "minute": 60.0,
    "hour": 3600.0,
    "day": 86400.0,
    "week": 604800.0,
    "month": 30 * 86400.0,
    "year": 365.25 * 86400.0,
}
"""Cloudflare's duration labels in seconds; a month and a year as wrangler's local engine counts
them (30 and 365.25 days)."""
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s+([a-z]+?)s?\s*$")
_CONFIG_KEYS = ("retries", "timeout")
_RETRY_KEYS = ("limit", "delay", "backoff")


class AttrDict(dict[str, Any]):
    """A dict whose keys are also attributes, as the SDK's converted JavaScript objects are."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value


class WorkflowEvent(AttrDict):
    """What a Cloudflare Python workflow's ``run()`` receives: ``payload``, ``timestamp`` (a
    naive datetime in UTC, as on Workers), ``instanceId``, ``workflowName`` and, for a cron
    schedule's instance, ``schedule`` (``cron``, ``scheduledTime`` in epoch milliseconds).
    ``instance_id`` and ``workflow_name`` are also attributes."""

    @property
    def instance_id(self) -> str:
        return str(self["instanceId"])

    @property
    def workflow_name(self) -> str:
        return str(self["workflowName"])


def converted(value: Any) -> Any:
    """A stored value as the SDK hands it over: every dict made an :class:`AttrDict`."""
    if isinstance(value, dict):
        return AttrDict({key: converted(item) for key, item in value.items()})
    if isinstance(value, list):
        return [converted(item) for item in value]
    return value


def _naive_utc(moment: datetime | float) -> datetime:
    if isinstance(moment, datetime):
        return moment.astimezone(UTC).replace(tzinfo=None)
    return datetime.fromtimestamp(moment, UTC).replace(tzinfo=None)


def event_of(event: SteplineEvent) -> WorkflowEvent:
    """Stepline's event in the SDK's shape."""
    shaped = WorkflowEvent(
        payload=converted(event.payload),
        timestamp=_naive_utc(event.timestamp),
        instanceId=event.instance_id,
        workflowName=event.workflow_name,
    )
    if event.schedule is not None:
        tick = event.schedule["scheduled_time"]
        shaped["schedule"] = AttrDict(
            cron=event.schedule["cron"], scheduledTime=round(tick.timestamp() * 1000)
        )
    return shaped


def received_event(record: EventRecord) -> AttrDict:
    """An event ``wait_for_event`` received: ``payload``, ``timestamp``, ``type``."""
    return AttrDict(
        payload=converted(record.payload),
        timestamp=_naive_utc(record.timestamp),
        type=record.type,
    )


def context_of(ctx: StepContext) -> AttrDict:
    """The step context in the SDK's shape: ``step`` (``name``, ``count``), ``attempt`` and
    ``config`` (durations in milliseconds)."""
    retries = ctx.config.retries
    delay = retries.delay
    return AttrDict(
        step=AttrDict(name=ctx.step_name, count=ctx.count),
        attempt=ctx.attempt,
        config=AttrDict(
            retries=AttrDict(
                limit=retries.limit,
                delay=round(delay * 1000) if isinstance(delay, int | float) else None,
                backoff=retries.backoff,
            ),
            timeout=round(ctx.config.timeout * 1000),
        ),
    )


def seconds(value: object, *, what: str) -> float:
    """A Cloudflare duration in seconds: a number of milliseconds, ``"N unit"`` (second ...
    year, singular or plural) or a ``timedelta``. Else ``ValueError`` quoting it."""
    if isinstance(value, timedelta):
        total = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        total = float(value) / 1000
    elif isinstance(value, str):
        match = _DURATION.match(value.lower())
        if match is None or match.group(2) not in _UNITS:
            raise ValueError(
                f"invalid {what} {shown(value)}: expected 'N unit' with unit one of second, "
                "minute, hour, day, week, month, year (e.g. '10 seconds'), or a number of "
                "milliseconds"
            )
        total = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise ValueError(
            f"invalid {what} {shown(value)}: use a number of milliseconds or e.g. '5 minutes'"
        )
    if math.isnan(total) or math.isinf(total) or total < 0:
        raise ValueError(f"invalid {what} {shown(value)}: must be a finite, non-negative duration")
    return total


def epoch_seconds(value: object, *, what: str) -> datetime | float:
    """``sleep_until``'s timestamp: a datetime (naive: UTC, as on Workers) or epoch
    milliseconds."""
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value) / 1000
    raise ValueError(
        f"invalid {what} {shown(value)}: use a datetime or milliseconds since the epoch"
    )


def step_config(config: object, name: str | None) -> StepConfig | None:
    """Cloudflare's ``WorkflowStepConfig`` (a dict) as a :class:`~stepline.StepConfig`:
    durations in its units, every error retried (Cloudflare stops only at a
    ``NonRetryableError``), ``limit`` possibly infinite. A key or value it would refuse, or one
    stepline cannot honour (``sensitive``), raises :class:`~stepline.DefinitionError` naming
    the step and the key."""
    if config is None:
        return StepConfig(retries={"non_retryable": ()})
    where = f"step {name!r}" if name is not None else "@step.do()"
    try:
        return _step_config(config)
    except ValueError as exc:
        raise DefinitionError(f"{where}: {exc}") from None


def _step_config(config: object) -> StepConfig:
    if not isinstance(config, Mapping):
        raise ValueError(
            f"config must be a dict like {{'retries': ..., 'timeout': ...}}, got {config!r}"
        )
    if "sensitive" in config:
        raise ValueError(
            "config key 'sensitive' is not supported: stepline stores every step's output and "
            "shows it in the API and dashboard; remove the key, or keep the secret out of the "
            "output"
        )
    unknown = sorted(set(config) - set(_CONFIG_KEYS))
    if unknown:
        raise ValueError(f"unknown config key {unknown[0]!r}; allowed: retries, timeout")
    retries: dict[str, Any] = {"non_retryable": ()}
    given = config.get("retries")
    if given is not None:
        if not isinstance(given, Mapping):
            raise ValueError(f"config key 'retries' must be a dict, got {given!r}")
        unknown = sorted(set(given) - set(_RETRY_KEYS))
        if unknown:
            raise ValueError(
                f"unknown config key 'retries.{unknown[0]}'; allowed: limit, delay, backoff"
            )
        retries.update(given)
        limit = given.get("limit")
        if isinstance(limit, float) and math.isinf(limit) and limit > 0:
            retries["limit"] = sys.maxsize  # JavaScript's Infinity: retry without end
        if "delay" in given:
            delay = given["delay"]
            if callable(delay):
                raise ValueError(
                    "config key 'retries.delay': a delay function is not supported; give a "
                    "duration (milliseconds or e.g. '10 seconds')"
                )
            retries["delay"] = seconds(delay, what="retries.delay")
    timeout = config.get("timeout")
    if timeout is None:
        return StepConfig(retries=retries)
    return StepConfig(retries=retries, timeout=seconds(timeout, what="timeout"))


def failure_of(exc: Exception) -> BaseException:
    """The error an awaited step raises once it failed for good, as the SDK rebuilds it: a
    ``TypeError``, ``ValueError`` or ``NonRetryableError`` raised by the step comes back as
    that class (its message the last line of the Python traceback); anything else stays
    stepline's :class:`~stepline.StepFailedError`."""
    if not isinstance(exc, StepFailedError):
        return exc
    rebuilt: dict[str, type[Exception]] = {
        "TypeError": TypeError,
        "ValueError": ValueError,
        "NonRetryableError": NonRetryableError,
    }
    kind = rebuilt.get(exc.error_name)
    if kind is None:
        return exc
    label = "workers.workflows.NonRetryableError" if kind is NonRetryableError else exc.error_name
    return kind(f"{label}: {exc.message}")
