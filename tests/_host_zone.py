"""Tests run under host time zones of their own (``TZ`` set in the test, not inherited), so that
a computation that slips into the host's local time fails on a UTC host too, as CI is one.

``host_zone`` is an autouse fixture for a module to import: each of its tests runs once per
zone of :data:`HOST_ZONES`, and the zone is put back afterwards.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

import pytest

HOST_ZONES = ("America/New_York", "Asia/Kolkata", "Australia/Lord_Howe")
"""Behind UTC with daylight saving; ahead by a half hour without; ahead with a half-hour
daylight saving shift."""


@contextlib.contextmanager
def host_time_zone(zone: str) -> Iterator[None]:
    """The process's local time zone is ``zone`` inside the block."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = zone
    time.tzset()
    try:
        # An unknown zone would silently be UTC, and the test would prove nothing.
        assert time.localtime(0).tm_gmtoff != 0, f"the C library does not know {zone!r}"
        yield
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


@pytest.fixture(autouse=True, params=HOST_ZONES)
def host_zone(request: pytest.FixtureRequest) -> Iterator[str]:
    zone = str(request.param)
    with host_time_zone(zone):
        yield zone
