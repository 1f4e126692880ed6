"""``SyncEngine.schedules()``: the blocking twin of ``engine.schedules()``, on both stores."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from stepline import ManualClock, Schedule, SyncEngine, Workflow, WorkflowEvent, WorkflowStep
from stepline.errors import ScheduleNotFoundError

T0 = datetime(2024, 1, 31, 9, 0, 30, tzinfo=UTC).timestamp()


class Hourly(Workflow):
    name = "hourly"
    schedules = (Schedule("0 * * * *", name="hourly-sync"),)

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return None


def test_the_sync_facade_operates_schedules(store_url: str) -> None:
    clock = ManualClock(T0)
    # With a worker, the engine stores its schedules as it starts.
    with SyncEngine(store_url, [Hourly], worker=True, clock=clock, poll_interval=0.05) as engine:
        client = engine.schedules()
        (info,) = client.list()
        assert info.name == "hourly-sync" and info.next_run == T0 - 30 + 3600
        assert client.list("other") == []
        assert client.pause("hourly-sync").record.paused is True
        assert client.get("hourly-sync").next_run is None
        assert client.resume("hourly-sync").record.paused is False
        record = client.trigger("hourly-sync", at=T0 - 3600)
        assert record.id == "hourly-sync-20240131T0800Z" and record.trigger == "cron"
        made = client.backfill("hourly-sync", T0 - 3 * 3600, T0)
        assert [r.id for r in made] == [f"hourly-sync-20240131T0{h}00Z" for h in (7, 8, 9)]
        assert (made.created, made.existing) == (2, 1)  # 8:00 was triggered above
        with pytest.raises(ScheduleNotFoundError):
            client.pause("nope")
