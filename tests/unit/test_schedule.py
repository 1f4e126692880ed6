"""Schedule: validation on construction, tick maths, and daylight-saving behaviour (cronsim's,
which follows Debian cron); each test under several host time zones (``tests/_host_zone``)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from stepline import DefinitionError, Schedule
from stepline.schedule import NAME_MAX, as_schedule, tick_instance_id

from .._host_zone import host_zone

__all__ = ["host_zone"]  # the autouse fixture: every test under each host time zone

PARIS = ZoneInfo("Europe/Paris")


def at(*args: int, tz: ZoneInfo = PARIS, fold: int = 0) -> float:
    return datetime(*args, tzinfo=tz, fold=fold).timestamp()  # type: ignore[misc]


def local(ts: float) -> str:
    return datetime.fromtimestamp(ts, PARIS).isoformat()


def test_defaults() -> None:
    schedule = Schedule("*/5 * * * *")
    assert schedule.timezone == "UTC"
    assert schedule.params is None
    assert schedule.name is None
    assert (schedule.catch_up, schedule.catch_up_limit, schedule.overlap) == ("skip", 100, "allow")


@pytest.mark.parametrize("cron", ["61 * * * *", "* * *", "0 0 30 2 *", "@hourly", "* * * * * *"])
def test_invalid_cron_is_quoted(cron: str) -> None:
    with pytest.raises(DefinitionError, match="invalid cron expression") as info:
        Schedule(cron)
    assert repr(cron) in str(info.value)


def test_invalid_timezone_is_quoted() -> None:
    with pytest.raises(DefinitionError, match="'Mars/Olympus'"):
        Schedule("* * * * *", timezone="Mars/Olympus")
    with pytest.raises(DefinitionError, match="time zone ''"):
        Schedule("* * * * *", timezone="")


@pytest.mark.parametrize(
    ("options", "quoted"),
    [
        ({"catch_up": "some"}, "catch_up 'some'"),
        ({"overlap": "queue"}, "overlap 'queue'"),
        ({"catch_up_limit": 0}, "catch_up_limit 0"),
        ({"catch_up_limit": True}, "catch_up_limit True"),
        ({"name": "-bad"}, "schedule name '-bad'"),
        ({"name": "x" * (NAME_MAX + 1)}, "schedule name"),
    ],
)
def test_invalid_options_are_quoted(options: dict[str, object], quoted: str) -> None:
    with pytest.raises(DefinitionError, match=quoted):
        Schedule("* * * * *", **options)  # type: ignore[arg-type]


def test_params_follow_the_json_rule() -> None:
    with pytest.raises(DefinitionError, match="params of schedule"):
        Schedule("* * * * *", params={"when": object()})
    assert Schedule("* * * * *", params={"a": [1, "x"]}).params == {"a": [1, "x"]}
    when = datetime.now(UTC)  # a typed value (docs/data.md)
    assert Schedule("* * * * *", params={"when": when}).params == {"when": when}


def test_default_name_is_stable_and_distinct() -> None:
    a = Schedule("0 9 * * *").named("report")
    assert a.name == Schedule("0 9 * * *").named("report").name
    assert a.name is not None and a.name.startswith("report-")
    assert Schedule("0 9 * * *", timezone="Europe/Paris").named("report").name != a.name
    assert Schedule("0 9 * * *", params={"x": 1}).named("report").name != a.name
    assert Schedule("0 9 * * *", name="mine").named("report").name == "mine"
    long = Schedule("* * * * *").named("w" * 100)
    assert long.name is not None and len(long.name) <= NAME_MAX


def test_instance_id_is_the_name_and_the_utc_minute() -> None:
    tick = datetime(2024, 1, 31, 9, 0, tzinfo=UTC).timestamp()
    assert tick_instance_id("nightly", tick) == "nightly-20240131T0900Z"
    assert Schedule("0 9 * * *", name="n").instance_id(tick) == "n-20240131T0900Z"
    assert len(tick_instance_id("x" * NAME_MAX, tick)) == 100
    with pytest.raises(ValueError, match="has no name yet"):
        Schedule("0 9 * * *").instance_id(tick)


def test_as_schedule() -> None:
    assert as_schedule("*/5 * * * *", where="w") == Schedule("*/5 * * * *")
    with pytest.raises(DefinitionError, match=r"^w: invalid cron expression 'nope'"):
        as_schedule("nope", where="w")
    with pytest.raises(DefinitionError, match=r"^w: a schedule is a cron string"):
        as_schedule(5, where="w")


def test_ticks_are_strictly_after_and_in_range() -> None:
    schedule = Schedule("*/15 * * * *")
    start = datetime(2024, 1, 1, 10, 0, tzinfo=UTC).timestamp()
    assert schedule.next_tick(start) == start + 900
    assert schedule.next_tick(start - 1) == start
    ticks = schedule.ticks_between(start, start + 3600)
    assert ticks == [start + 900 * n for n in range(1, 5)]  # (start, end]
    assert schedule.ticks_between(start, start + 3600, limit=2) == ticks[:2]
    assert schedule.ticks_between(start, start + 3600, limit=0) == []
    assert schedule.ticks_between(start, start + 10) == []


def test_ticks_follow_the_timezone() -> None:
    schedule = Schedule("0 9 * * MON-FRI", timezone="Europe/Paris")
    friday = at(2024, 1, 5, 12, 0)
    assert local(schedule.next_tick(friday) or 0) == "2024-01-08T09:00:00+01:00"  # Monday
    summer = at(2024, 7, 1, 0, 0)
    assert local(schedule.next_tick(summer) or 0) == "2024-07-01T09:00:00+02:00"


def test_spring_forward_a_tick_in_the_skipped_hour_runs_right_after_the_jump() -> None:
    # 2024-03-31 in Paris: 02:00 jumps to 03:00; 02:30 does not exist that day.
    daily = Schedule("30 2 * * *", timezone="Europe/Paris")
    ticks = daily.ticks_between(at(2024, 3, 29, 12, 0), at(2024, 4, 2, 12, 0))
    assert [local(t) for t in ticks] == [
        "2024-03-30T02:30:00+01:00",
        "2024-03-31T03:00:00+02:00",
        "2024-04-01T02:30:00+02:00",
        "2024-04-02T02:30:00+02:00",
    ]
    half_hourly = Schedule("*/30 * * * *", timezone="Europe/Paris")
    ticks = half_hourly.ticks_between(at(2024, 3, 31, 1, 10), at(2024, 3, 31, 4, 0))
    assert [local(t) for t in ticks] == [
        "2024-03-31T01:30:00+01:00",
        "2024-03-31T03:00:00+02:00",
        "2024-03-31T03:30:00+02:00",
        "2024-03-31T04:00:00+02:00",
    ]


def test_fall_back_a_daily_tick_in_the_repeated_hour_runs_once() -> None:
    # 2024-10-27 in Paris: 03:00 goes back to 02:00, so 02:00-02:59 happens twice.
    daily = Schedule("30 2 * * *", timezone="Europe/Paris")
    ticks = daily.ticks_between(at(2024, 10, 26, 12, 0), at(2024, 10, 28, 12, 0))
    assert [local(t) for t in ticks] == [
        "2024-10-27T02:30:00+02:00",  # the first 02:30 only
        "2024-10-28T02:30:00+01:00",
    ]


def test_fall_back_a_frequent_schedule_runs_in_both_passes() -> None:
    # Debian cron runs jobs more frequent than hourly normally through the change.
    half_hourly = Schedule("*/30 * * * *", timezone="Europe/Paris")
    ticks = half_hourly.ticks_between(at(2024, 10, 27, 1, 10), at(2024, 10, 27, 3, 0))
    assert [local(t) for t in ticks] == [
        "2024-10-27T01:30:00+02:00",
        "2024-10-27T02:00:00+02:00",
        "2024-10-27T02:30:00+02:00",
        "2024-10-27T02:00:00+01:00",
        "2024-10-27T02:30:00+01:00",
        "2024-10-27T03:00:00+01:00",
    ]
    assert ticks == sorted(ticks) and len(set(ticks)) == len(ticks)
    # Every tick is a distinct UTC minute, so every tick gets its own instance id.
    assert len({tick_instance_id("s", t) for t in ticks}) == len(ticks)


@pytest.mark.parametrize(
    ("cron", "start"),
    [
        ("*/30 * * * *", (2024, 10, 27, 0, 10)),
        ("*/30 * * * *", (2024, 3, 31, 0, 10)),
        ("30 2 * * *", (2024, 3, 29, 12, 0)),
        ("30 2 * * *", (2024, 10, 25, 12, 0)),
    ],
)
def test_latest_ticks_read_backwards_match_the_forward_ticks(
    cron: str, start: tuple[int, ...]
) -> None:
    schedule = Schedule(cron, timezone="Europe/Paris")
    begin = at(*start)
    end = begin + 4 * 86400
    forward = schedule.ticks_between(begin, end)
    assert schedule.latest_ticks(begin, end, limit=1000) == forward
    assert schedule.latest_ticks(begin, end, limit=2) == forward[-2:]
    assert schedule.latest_ticks(begin, forward[0] - 0.5, limit=5) == []
    assert schedule.latest_ticks(begin, forward[1] + 0.5, limit=5) == forward[:2]
    assert schedule.latest_ticks(begin, forward[1], limit=5) == forward[:2]  # end included
    assert schedule.latest_ticks(forward[0], forward[1], limit=5) == [forward[1]]  # after excluded
