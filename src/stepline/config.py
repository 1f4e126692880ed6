"""Step configuration: retries, backoff and timeouts, validated whenever a config is built.

A :class:`StepConfig` or :class:`RetryConfig` is checked when it is constructed, directly or from
a dict, so a mistake (``"5 fortnights"``, ``limit=-1``) raises :class:`ValueError` naming the
setting where the step is declared, never later when a retry needs it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from ._shown import shown
from .durations import Duration, format_duration, parse_duration
from .errors import NonRetryableError, SteplineError
from .limits import is_valid_limit_name

Backoff = Literal["constant", "linear", "exponential"]
DelayFunction = Callable[[int, BaseException], Any]
ErrorType = type[BaseException] | str
"""An exception class, or its name (``"ValueError"``, ``"mylib.errors.Permanent"``)."""

DEFAULT_RETRY_LIMIT = 5
DEFAULT_RETRY_DELAY = 10.0
DEFAULT_BACKOFF: Backoff = "exponential"
DEFAULT_TIMEOUT = 600.0
DEFAULT_NON_RETRYABLE: tuple[ErrorType, ...] = (TypeError, NameError, AttributeError, SyntaxError)
"""Errors that fail a step at once by default: programming errors, which a retry repeats."""

_BACKOFFS = ("constant", "linear", "exponential")
_RETRY_KEYS = ("limit", "delay", "backoff", "non_retryable")
_STEP_KEYS = ("retries", "timeout", "limit", "inline", "sensitive")
_ERROR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class RetryAfter(SteplineError):
    """Raise from a step callback to try again after ``delay`` (a duration: seconds, a
    ``timedelta`` or ``"30 seconds"``) instead of the configured backoff, for instance after an
    HTTP 429 with a ``Retry-After`` header: ``raise RetryAfter("30 seconds", exc)``.

    The attempt counts as failed: the step's retry limit still applies (once it is used up the
    step fails with ``cause``'s error). ``cause`` is the error recorded for the attempt (and
    chained as ``__cause__``); without one the attempt's error is this one. It wins over a
    ``retries.delay`` callable, which is not called for the attempt.
    """

    def __init__(self, delay: Duration, cause: BaseException | None = None) -> None:
        self.seconds = parse_duration(delay, what="RetryAfter delay", allow_zero=True)
        self.cause = cause
        shown = f"{type(cause).__name__}: {cause}; " if cause is not None else ""
        super().__init__(f"{shown}retry after {format_duration(self.seconds)}")
        if cause is not None:
            self.__cause__ = cause


def _invalid(key: str, detail: str) -> ValueError:
    return ValueError(f"invalid step config key {key!r}: {detail}")


def _check_limit(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _invalid("retries.limit", f"{value!r} (a whole number >= 0)")
    return value


def _check_delay(value: object) -> float | DelayFunction:
    if callable(value) and not isinstance(value, type):
        return cast(DelayFunction, value)
    try:
        return parse_duration(value, what="retries.delay", allow_zero=True)
    except ValueError as exc:
        raise _invalid("retries.delay", str(exc)) from None


def _check_backoff(value: object) -> Backoff:
    if value not in _BACKOFFS:
        raise _invalid("retries.backoff", f"{value!r} (one of 'constant', 'linear', 'exponential')")
    return cast(Backoff, value)


def _check_error_types(value: object) -> tuple[ErrorType, ...]:
    items: Iterable[object]
    if isinstance(value, str | type):
        items = (value,)  # one class or name, not its characters
    elif isinstance(value, Iterable) and not isinstance(value, Mapping):
        items = value
    else:
        raise _invalid(
            "retries.non_retryable", f"{value!r} (a tuple of exception classes or class names)"
        )
    checked: list[ErrorType] = []
    for item in items:
        is_class = isinstance(item, type) and issubclass(item, BaseException)
        if is_class or (isinstance(item, str) and _ERROR_NAME.match(item)):
            checked.append(cast(ErrorType, item))
        else:
            raise _invalid(
                "retries.non_retryable",
                f"{item!r} is neither an exception class nor a class name like 'ValueError' "
                "or 'mylib.errors.Permanent'",
            )
    return tuple(checked)


def _error_type_name(error_type: ErrorType) -> str:
    if isinstance(error_type, str):
        return error_type
    if error_type.__module__ == "builtins":
        return error_type.__qualname__
    return f"{error_type.__module__}.{error_type.__qualname__}"


@dataclass(frozen=True, init=False)
class RetryConfig:
    """How a failing step is retried.

    ``limit`` counts retries after the first attempt (so ``limit=5`` allows 6 attempts).
    The delay after failed attempt ``n`` (1-based) is ``delay`` (constant), ``delay * n``
    (linear) or ``delay * 2 ** (n - 1)`` (exponential); ``delay`` is a duration (seconds, a
    ``timedelta`` or ``"10 seconds"``), or a callable ``(attempt, error) -> duration`` whose
    answer is used as is.

    An error that is an instance of one of ``non_retryable`` (classes, or class names matched
    against the error's class and its bases, plain or module-qualified) fails the step at once,
    as :class:`~stepline.NonRetryableError` always does. The default is
    :data:`DEFAULT_NON_RETRYABLE` (``TypeError``, ``NameError``, ``AttributeError``,
    ``SyntaxError``); ``non_retryable=()`` retries those too, and
    ``(*DEFAULT_NON_RETRYABLE, ValueError)`` adds to them.
    """

    limit: int
    delay: float | DelayFunction
    backoff: Backoff
    non_retryable: tuple[ErrorType, ...]

    def __init__(
        self,
        limit: int = DEFAULT_RETRY_LIMIT,
        delay: Duration | DelayFunction = DEFAULT_RETRY_DELAY,
        backoff: Backoff = DEFAULT_BACKOFF,
        non_retryable: Iterable[ErrorType] | ErrorType = DEFAULT_NON_RETRYABLE,
    ) -> None:
        object.__setattr__(self, "limit", _check_limit(limit))
        object.__setattr__(self, "delay", _check_delay(delay))
        object.__setattr__(self, "backoff", _check_backoff(backoff))
        object.__setattr__(self, "non_retryable", _check_error_types(non_retryable))

    def delay_after(self, attempt: int, error: BaseException) -> float:
        """Seconds to wait after failed attempt number ``attempt`` before the next one (what a
        :class:`RetryAfter` raised by the attempt says, if it raised one)."""
        if isinstance(error, RetryAfter):
            return error.seconds
        if not isinstance(self.delay, int | float):
            return parse_duration(
                self.delay(attempt, error), what="retries.delay result", allow_zero=True
            )
        base = float(self.delay)
        if self.backoff == "constant":
            return base
        if self.backoff == "linear":
            return base * attempt
        return base * 2.0 ** (attempt - 1)

    def retryable(self, error: BaseException) -> bool:
        """False for a :class:`~stepline.NonRetryableError` and for the ``non_retryable`` types."""
        if isinstance(error, NonRetryableError):
            return False
        names: set[str] | None = None
        for error_type in self.non_retryable:
            if not isinstance(error_type, str):
                if isinstance(error, error_type):
                    return False
                continue
            if names is None:
                names = set()
                for cls in type(error).__mro__:
                    names.add(cls.__qualname__)
                    names.add(f"{cls.__module__}.{cls.__qualname__}")
            if error_type in names:
                return False
        return True

    def to_json(self) -> dict[str, Any]:
        """A JSON-able description (callables and classes are shown by name)."""
        delay = self.delay
        return {
            "limit": self.limit,
            "delay": delay if not callable(delay) else getattr(delay, "__name__", "callable"),
            "backoff": self.backoff,
            "non_retryable": [_error_type_name(t) for t in self.non_retryable],
        }


_DEFAULT_RETRIES = RetryConfig()


@dataclass(frozen=True, init=False)
class StepConfig:
    """Per-step settings: ``retries`` (a :class:`RetryConfig`, or a dict of its fields), the
    per-attempt ``timeout`` (a duration, default 10 minutes), ``limit``, the name of a named
    limit (:class:`~stepline.Limit`) each attempt holds a slot of while it runs, and ``inline``:
    a sync callback that never blocks runs on the event loop instead of in a thread (cheaper,
    but the loop, and every other instance of the worker, waits while it runs); ``sensitive``:
    the result is used by the workflow but shown as ``[redacted]`` everywhere else (the
    client's step history, the CLI, the HTTP APIs, the dashboard)."""

    retries: RetryConfig
    timeout: float
    limit: str | None
    inline: bool
    sensitive: bool

    def __init__(
        self,
        retries: RetryConfig | Mapping[str, Any] | None = None,
        timeout: Duration = DEFAULT_TIMEOUT,
        limit: str | None = None,
        inline: bool = False,
        sensitive: bool = False,
    ) -> None:
        if limit is not None and not is_valid_limit_name(limit):
            raise _invalid(
                "limit",
                f"{limit!r} (the name of a limit: 1-100 ASCII letters, digits, '_', '-', '.' "
                "or ':')",
            )
        if not isinstance(inline, bool):
            raise _invalid("inline", f"{shown(inline)} (True or False)")
        object.__setattr__(self, "limit", limit)
        if not isinstance(sensitive, bool):
            raise _invalid("sensitive", f"{shown(sensitive)} (True or False)")
        object.__setattr__(self, "inline", inline)
        object.__setattr__(self, "sensitive", sensitive)
        object.__setattr__(self, "retries", _parse_retries(retries))
        try:
            seconds = parse_duration(timeout, what="timeout")
        except ValueError as exc:
            raise _invalid("timeout", str(exc)) from None
        object.__setattr__(self, "timeout", seconds)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able description (callables and classes are shown by name)."""
        described: dict[str, Any] = {"retries": self.retries.to_json(), "timeout": self.timeout}
        if self.limit is not None:
            described["limit"] = self.limit
        if self.inline:
            described["inline"] = True
        if self.sensitive:
            described["sensitive"] = True
        return described


def _parse_retries(value: object) -> RetryConfig:
    if value is None:
        return _DEFAULT_RETRIES
    if isinstance(value, RetryConfig):
        return value
    if not isinstance(value, Mapping):
        raise _invalid("retries", f"expected a dict or a RetryConfig, got {value!r}")
    unknown = sorted(set(value) - set(_RETRY_KEYS))
    if unknown:
        raise ValueError(
            f"unknown step config key 'retries.{unknown[0]}'; allowed: {', '.join(_RETRY_KEYS)}"
        )
    return RetryConfig(**value)


DEFAULT_STEP_CONFIG = StepConfig()


def parse_step_config(value: object) -> StepConfig:
    """Validate a ``StepConfig`` or a dict ``{"retries": {...}, "timeout": ..., "limit": ...,
    "inline": ..., "sensitive": ...}``.

    Unknown keys and invalid values raise :class:`ValueError` naming the key.
    """
    if value is None:
        return DEFAULT_STEP_CONFIG
    if isinstance(value, StepConfig):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"invalid step config {value!r}: expected a dict or a StepConfig")
    unknown = sorted(set(value) - set(_STEP_KEYS))
    if unknown:
        raise ValueError(
            f"unknown step config key {unknown[0]!r}; allowed: {', '.join(_STEP_KEYS)}"
        )
    return StepConfig(**value)
