"""Times given to the schedule operations (``parse_moment``), and the tick maths at the end
of the range they accept; each test under several host time zones (``tests/_host_zone``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from stepline import Schedule
from stepline.triggers.cron import parse_moment
from stepline.triggers.cron.moments import LATEST

from .._host_zone import host_zone

__all__ = ["host_zone"]  # the autouse fixture: every test under each host time zone

JAN31 = datetime(2024, 1, 31, 9, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    "value",
    [
        "2024-01-31T09:00Z",
        "2024-01-31T09:00:00+00:00",
        "2024-01-31 10:00+01:00",
        "2024-01-31T09:00",  # no offset: UTC
        "1706691600",
        " 1706691600.0 ",
        1706691600,
        1706691600.0,
    ],
)
def test_iso_and_epoch_times(value: object) -> None:
    assert parse_moment(value, "--at") == JAN31


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("soon", "invalid --at 'soon': use an ISO 8601 time"),
        ("", "invalid --at ''"),
        (True, "invalid --at True"),
        (None, "invalid --at None"),
        ([1], "invalid --at [1]"),
        (-1, "--at -1 is out of range"),
        ("-1", "--at '-1' is out of range"),
        (float("nan"), "--at nan is out of range"),
        (10**400, f"--at {'1' + '0' * 56}... is out of range"),
        ("1" * 400, f"--at '{'1' * 56}... is out of range"),
        ("10000-01-01", "invalid --at"),
    ],
)
def test_bad_times_name_the_option(value: object, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("[", r"\[").replace(".", r"\.")):
        parse_moment(value, "--at")


def test_the_latest_time_is_accepted() -> None:
    assert parse_moment("9999-12-31T23:59Z", "--to") == LATEST


def test_ticks_up_to_the_last_year() -> None:
    yearly = Schedule("0 0 1 1 *", name="yearly")
    start = datetime(9998, 6, 1, tzinfo=UTC).timestamp()
    assert yearly.ticks_between(start, LATEST) == [datetime(9999, 1, 1, tzinfo=UTC).timestamp()]
