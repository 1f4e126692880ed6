from datetime import timedelta
from typing import Any

import pytest

from stepline import RetryConfig, StepConfig, parse_duration
from stepline._shown import shown
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
        ("5", 5.0),
        ("0.5", 0.5),
        (" 30 ", 30.0),
    ],
)
def test_durations(value: object, seconds: float) -> None:
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value",
    [
        "",
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


UNITS = "(units: millisecond, second, minute, hour, day, week)"


@pytest.mark.parametrize(
    ("value", "options", "message"),
    [
        ("5 fortnights", {}, f"invalid --lease '5 fortnights': it is not a duration: expected a "
         f"number of seconds or 'N unit' {UNITS}"),
        ("5s", {}, "invalid --lease '5s': it is not a duration: expected a number of seconds"),
        ([1], {}, "invalid --lease [1]: it is not a duration: expected a number of seconds, a "
         "timedelta or 'N unit'"),
        (0, {}, "invalid --lease 0: it must be positive"),
        ("0 seconds", {}, "invalid --lease '0 seconds': it must be positive"),
        ("-5 days", {}, "invalid --lease '-5 days': it must be positive"),
        ("-5", {}, "invalid --lease '-5': it must be positive"),
        (timedelta(seconds=-1), {}, "invalid --lease datetime.timedelta(days=-1, seconds=86399): "
         "it must be positive"),
        ("-5 days", {"allow_zero": True}, "invalid --lease '-5 days': it must not be negative"),
        (-0.5, {"allow_zero": True}, "invalid --lease -0.5: it must not be negative"),
        ("0", {"at_least": 0.1}, "invalid --lease '0': it must be at least 0.1 seconds"),
        ("50 milliseconds", {"at_least": 0.1},
         "invalid --lease '50 milliseconds': it must be at least 0.1 seconds"),
        (float("inf"), {}, "invalid --lease inf: it must be a finite duration"),
        (float("nan"), {"allow_zero": True}, "invalid --lease nan: it must be a finite duration"),
        ("9" * 400 + " weeks", {}, "it must be a finite duration"),
    ],
)  # fmt: skip
def test_what_is_wrong_is_said(value: object, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_duration(value, what="--lease", **options)
    assert message in str(info.value)
    assert str(info.value).startswith(f"invalid --lease {shown(value)}: ")


def test_zero_only_where_allowed() -> None:
    assert parse_duration(0, allow_zero=True) == 0.0
    assert parse_duration("0 seconds", allow_zero=True) == 0.0
    assert parse_duration("0", allow_zero=True) == 0.0
    assert parse_duration("0.1", at_least=0.1) == 0.1
    with pytest.raises(ValueError, match="it must be positive"):
        parse_duration(timedelta(0))


def test_a_long_value_is_cut() -> None:
    with pytest.raises(ValueError) as info:
        parse_duration("x" * 5000, what="--older-than")
    assert len(str(info.value)) < 250
    assert shown("x" * 5000) in str(info.value)


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
    assert not cfg.inline and "inline" not in cfg.to_json()


def test_step_config_inline() -> None:
    cfg = parse_step_config({"inline": True})
    assert cfg == StepConfig(inline=True) and cfg.inline
    assert cfg.to_json()["inline"] is True


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
        ({"inline": "yes"}, "inline"),
        ({"inline": 1}, "inline"),
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
