from datetime import timedelta

import pytest

from stepline import RetryConfig, StepConfig, parse_duration
from stepline.config import parse_step_config
from stepline.durations import format_duration


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (timedelta(minutes=2), 120.0),
        (5, 5.0),
        (0.25, 0.25),
        ("1 millisecond", 0.001),
        ("250 milliseconds", 0.25),
        ("1 second", 1.0),
        ("10 seconds", 10.0),
        ("1 minute", 60.0),
        ("3 minutes", 180.0),
        ("1 hour", 3600.0),
        ("2 hours", 7200.0),
        ("1 day", 86400.0),
        ("2 days", 172800.0),
        ("1 week", 604800.0),
        ("2 weeks", 1209600.0),
        ("1.5 hours", 5400.0),
        ("5 Seconds", 5.0),
    ],
)
def test_durations(value: object, seconds: float) -> None:
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "5",
        "five seconds",
        "5 fortnights",
        "-1 second",
        "1 second ago",
        -3,
        float("nan"),
        float("inf"),
        True,
        None,
        [1],
        "5s",
    ],
)
def test_invalid_durations_quote_the_input(value: object) -> None:
    with pytest.raises(ValueError) as info:
        parse_duration(value)
    assert repr(value) in str(info.value)


def test_format_duration() -> None:
    assert format_duration(0) == "0 seconds"
    assert format_duration(1) == "1 second"
    assert format_duration(60) == "1 minute"
    assert format_duration(90) == "1.5 minutes"
    assert format_duration(8 * 3600) == "8 hours"


def test_step_config_defaults() -> None:
    cfg = parse_step_config(None)
    assert cfg.retries.limit == 5
    assert cfg.retries.delay == 10.0
    assert cfg.retries.backoff == "exponential"
    assert cfg.timeout == 600.0


def test_step_config_from_dict() -> None:
    cfg = parse_step_config(
        {"retries": {"limit": 2, "delay": "5 seconds", "backoff": "linear"}, "timeout": "1 minute"}
    )
    assert cfg == StepConfig(RetryConfig(2, 5.0, "linear"), 60.0)


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"retry": {}}, "retry"),
        ({"retries": {"limits": 3}}, "retries.limits"),
        ({"retries": {"limit": -1}}, "retries.limit"),
        ({"retries": {"limit": 1.5}}, "retries.limit"),
        ({"retries": {"limit": True}}, "retries.limit"),
        ({"retries": {"delay": "soon"}}, "retries.delay"),
        ({"retries": {"backoff": "quadratic"}}, "retries.backoff"),
        ({"retries": "3"}, "retries"),
        ({"timeout": "forever"}, "timeout"),
        ({"timeout": 0}, "timeout"),
    ],
)
def test_invalid_step_config_names_the_key(config: dict[str, object], key: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_step_config(config)
    assert key in str(info.value)


@pytest.mark.parametrize(
    ("backoff", "delays"),
    [
        ("constant", [10, 10, 10, 10]),
        ("linear", [10, 20, 30, 40]),
        ("exponential", [10, 20, 40, 80]),
    ],
)
def test_backoff_delays(backoff: str, delays: list[float]) -> None:
    cfg = parse_step_config({"retries": {"delay": 10, "backoff": backoff}})
    err = RuntimeError("x")
    assert [cfg.retries.delay_after(n, err) for n in range(1, 5)] == delays


def test_callable_delay() -> None:
    cfg = parse_step_config({"retries": {"delay": lambda attempt, error: f"{attempt * 3} seconds"}})
    assert cfg.retries.delay_after(2, RuntimeError()) == 6.0
