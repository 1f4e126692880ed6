"""Step configs validate when built, and which errors a step retries (docs/configuration.md).

``StepConfig`` and ``RetryConfig`` check every field on construction (not only when given as a
dict), with messages naming the field and quoting the value. Programming errors (``TypeError``,
``NameError``, ``AttributeError``, ``SyntaxError``) fail a step at once by default;
``retries.non_retryable`` replaces that set with classes or class names.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from stepline import (
    DEFAULT_NON_RETRYABLE,
    NonRetryableError,
    RetryConfig,
    StepConfig,
    WorkflowEvent,
    WorkflowStep,
)
from stepline import workflow as workflow_decorator
from stepline.config import parse_step_config

from ..conftest import TestEnvFactory

# -- construction validates ----------------------------------------------------------------------


INVALID: list[tuple[Any, list[str]]] = [
    (lambda: StepConfig(retries={"delay": "5 fortnights"}), ["retries.delay", "5 fortnights"]),
    (lambda: StepConfig(retries={"limit": "3"}), ["retries.limit", "'3'"]),
    (lambda: StepConfig(retries={"limits": 3}), ["retries.limits"]),
    (lambda: StepConfig(retries={"backoff": "quadratic"}), ["retries.backoff", "quadratic"]),
    (lambda: StepConfig(retries="3 times"), ["retries", "3 times"]),  # type: ignore[arg-type]
    (lambda: StepConfig(timeout="forever"), ["timeout", "forever"]),
    (lambda: StepConfig(timeout=0), ["timeout", "0"]),
    (lambda: StepConfig(timeout=-5), ["timeout", "-5"]),
    (lambda: StepConfig(timeout=float("inf")), ["timeout", "inf"]),
    (lambda: RetryConfig(delay="5 fortnights"), ["retries.delay", "5 fortnights"]),
    (lambda: RetryConfig(delay=-1), ["retries.delay", "-1"]),
    (lambda: RetryConfig(limit=-1), ["retries.limit", "-1"]),
    (lambda: RetryConfig(limit=1.5), ["retries.limit", "1.5"]),  # type: ignore[arg-type]
    (lambda: RetryConfig(limit=True), ["retries.limit", "True"]),
    (lambda: RetryConfig(backoff="fast"), ["retries.backoff", "fast"]),  # type: ignore[arg-type]
    (lambda: RetryConfig(non_retryable=[42]), ["retries.non_retryable", "42"]),  # type: ignore[list-item]
    (lambda: RetryConfig(non_retryable=["no name"]), ["retries.non_retryable", "no name"]),
    (lambda: RetryConfig(non_retryable=[int]), ["retries.non_retryable", "int"]),  # type: ignore[list-item]
    (lambda: RetryConfig(non_retryable=7), ["retries.non_retryable", "7"]),  # type: ignore[arg-type]
    (lambda: parse_step_config({"retries": {"non_retryable": {"a": 1}}}), ["non_retryable"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("build", "named"), INVALID, ids=[f"{i}-{named[0]}" for i, (_, named) in enumerate(INVALID)]
)
def test_construction_validates_every_field(build: Any, named: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        build()
    for part in named:
        assert part in str(info.value), (part, str(info.value))


def test_construction_normalises_what_it_accepts() -> None:
    built = StepConfig(retries={"limit": 2, "delay": "5 seconds", "backoff": "linear"})
    assert built == StepConfig(RetryConfig(2, 5.0, "linear"))
    assert built == parse_step_config({"retries": {"limit": 2, "delay": 5, "backoff": "linear"}})
    assert StepConfig(timeout=timedelta(minutes=2)).timeout == 120.0
    assert RetryConfig(delay="1 minute").delay == 60.0
    assert RetryConfig(non_retryable=ValueError).non_retryable == (ValueError,)
    assert RetryConfig(non_retryable="mylib.Permanent").non_retryable == ("mylib.Permanent",)
    assert StepConfig(retries=None) == StepConfig()


def test_documented_defaults() -> None:
    """The defaults README and docs/configuration.md state."""
    cfg = StepConfig()
    assert cfg.timeout == 600.0
    assert (cfg.retries.limit, cfg.retries.delay, cfg.retries.backoff) == (5, 10.0, "exponential")
    assert cfg.retries.non_retryable == DEFAULT_NON_RETRYABLE
    assert list(DEFAULT_NON_RETRYABLE) == [TypeError, NameError, AttributeError, SyntaxError]
    delays = [cfg.retries.delay_after(n, RuntimeError()) for n in range(1, 6)]
    assert delays == [10, 20, 40, 80, 160]


# -- which errors are retried --------------------------------------------------------------------


class PermanentError(Exception):
    pass


class ShortOfStock(PermanentError):
    pass


class CardDeclined(NonRetryableError):
    """A user's own subclass: fails its step at once, like the class itself."""


CONFIGS: dict[str, Any] = {
    "default": None,
    "names": {"retries": {"non_retryable": ["ValueError", "LookupError"]}},
    "qualified": {"retries": {"non_retryable": [f"{__name__}.PermanentError"]}},
    "classes": StepConfig(retries=RetryConfig(non_retryable=(PermanentError,))),
    "retry all": {"retries": {"non_retryable": ()}},
    "extended": {"retries": {"non_retryable": (*DEFAULT_NON_RETRYABLE, ValueError)}},
}


def _raise(kind: str) -> Any:
    if kind == "real TypeError":
        return len(5)  # type: ignore[arg-type]
    if kind == "real AttributeError":
        return None.upper()  # type: ignore[attr-defined]
    if kind == "real NameError":
        return undefined_name  # type: ignore[name-defined]  # noqa: F821
    if kind == "real SyntaxError":
        return compile("def (", "<step>", "exec")
    errors: dict[str, type[BaseException]] = {
        "ValueError": ValueError,
        "KeyError": KeyError,
        "ImportError": ImportError,
        "RuntimeError": RuntimeError,
        "TypeError": TypeError,
        "NonRetryableError": NonRetryableError,
        "PermanentError": PermanentError,
        "ShortOfStock": ShortOfStock,
        "CardDeclined": CardDeclined,
    }
    raise errors[kind](f"a {kind}")


@workflow_decorator(name="raiser")
async def raiser(event: WorkflowEvent, step: WorkflowStep) -> Any:
    kind = event.payload["error"]
    return await step.do("call", CONFIGS[event.payload["config"]], lambda: _raise(kind))


# (error raised, config, whether the first failure ends the step)
CASES: list[tuple[str, str, bool]] = [
    ("real TypeError", "default", True),
    ("real AttributeError", "default", True),
    ("real NameError", "default", True),
    ("real SyntaxError", "default", True),
    ("ValueError", "default", False),
    ("ImportError", "default", False),
    ("RuntimeError", "default", False),
    ("NonRetryableError", "default", True),
    ("ValueError", "names", True),
    ("KeyError", "names", True),  # matched through its base class LookupError
    ("TypeError", "names", False),  # the option replaces the default set
    ("ShortOfStock", "qualified", True),
    ("RuntimeError", "qualified", False),
    ("ShortOfStock", "classes", True),
    ("ValueError", "classes", False),
    ("real TypeError", "retry all", False),
    ("NonRetryableError", "retry all", True),  # always fails at once
    ("CardDeclined", "default", True),  # a subclass too
    ("CardDeclined", "retry all", True),
    ("TypeError", "extended", True),
    ("ValueError", "extended", True),
    ("KeyError", "extended", False),
]


async def test_which_errors_fail_at_once(make_test_env: TestEnvFactory) -> None:
    async with make_test_env([raiser]) as env:
        for index, (error, config, _) in enumerate(CASES):
            await env.create(raiser, f"case-{index}", {"error": error, "config": config})
        await env.run_until_idle()
        for index, (error, config, at_once) in enumerate(CASES):
            instance = await env.get(raiser, f"case-{index}")
            status = await instance.status()
            (record,) = await instance.steps()
            assert len(record.attempts) == 1, (error, config, record)
            expected = error.removeprefix("real ")
            assert record.attempts[0].error is not None
            assert record.attempts[0].error["name"] == expected, (error, config, record)
            if at_once:
                assert status.status == "errored", (error, config, status)
                assert status.error is not None and status.error["name"] == expected
                assert record.status == "errored"
            else:
                assert status.status == "waiting", (error, config, status)
                assert record.status == "waiting" and record.wake_at is not None
                assert record.wake_at - env.now() == pytest.approx(10.0, abs=1.0)


def test_describe_shows_the_option_by_name() -> None:
    described = StepConfig(retries={"non_retryable": (PermanentError, "ValueError")}).to_json()
    assert described["retries"]["non_retryable"] == [f"{__name__}.PermanentError", "ValueError"]
    assert StepConfig().to_json()["retries"]["non_retryable"] == [
        "TypeError",
        "NameError",
        "AttributeError",
        "SyntaxError",
    ]
