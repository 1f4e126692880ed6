"""Cron schedules end to end on both stores, with the manual clock: exactly one instance per
tick, catch-up and overlap policies, DST, pause/resume, trigger, backfill, event.schedule; each
test under several host time zones (``tests/_host_zone``): a tick's instance id is in UTC."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from stepline import Engine, ManualClock, Schedule, Workflow, WorkflowEvent, WorkflowStep
from stepline.errors import ScheduleNotFoundError

from .._host_zone import host_zone

__all__ = ["host_zone"]  # the autouse fixture: every test under each host time zone

T0 = datetime(2024, 1, 1, 12, 0, 30, tzinfo=UTC).timestamp()  # 30 s past a minute
MINUTE = 60.0
SEEN: list[dict[str, Any]] = []


class Every(Workflow):
    """Records its event.schedule; sleeps when asked so it stays unfinished."""

    name = "every"
    schedules = (
        Schedule("* * * * *", name="every-minute", params={"x": 1}, tags={"source": "cron"}),
    )

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        SEEN.append({"id": event.instance_id, "schedule": event.schedule, "params": event.payload})
        return None


def slow(
    overlap: str, catch_up: str = "skip", limit: int = 100, cron: str = "* * * * *"
) -> type[Workflow]:
    class Slow(Workflow):
        name = "slow"
        schedules = (
            Schedule(
                cron, name="slow", overlap=overlap, catch_up=catch_up,  # type: ignore[arg-type]
                catch_up_limit=limit,
            ),
        )  # fmt: skip

        async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
            await step.sleep("long", 150)  # longer than two ticks
            return None

    return Slow


MakeEngine = Callable[..., Awaitable[Engine]]


@pytest.fixture
async def make_engine(store_url: str, clock: ManualClock) -> AsyncIterator[MakeEngine]:
    async with AsyncExitStack() as stack:

        async def make(*workflows: Any) -> Engine:
            engine = Engine(store_url, list(workflows), worker=False, clock=clock)
            await stack.enter_async_context(engine)
            await engine.scheduler.sync()
            return engine

        clock.set(T0)
        SEEN.clear()
        yield make


async def ids(engine: Engine, workflow: str) -> list[str]:
    page = await engine.list_instances(workflow, limit=1000, oldest_first=True)
    return [r.id for r in page.instances]


def stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y%m%dT%H%MZ")


async def test_three_engines_create_exactly_one_instance_per_tick(
    make_engine: MakeEngine, clock: ManualClock
) -> None:
    engines = [await make_engine(Every) for _ in range(3)]
    for _ in range(10):
        clock.advance(MINUTE)
        now = clock()
        results = await asyncio.gather(*(e.scheduler.run_once(now) for e in engines))
        assert sum(len(r) for r in results) == 1
    expected = [f"every-minute-{stamp(T0 - 30 + MINUTE * n)}" for n in range(1, 11)]
    assert await ids(engines[0], "every") == expected
    record = (await engines[0].schedules().get("every-minute")).record
    assert record.last_instance == expected[-1]


async def test_event_schedule_and_trigger(make_engine: MakeEngine, clock: ManualClock) -> None:
    engine = await make_engine(Every)
    clock.advance(MINUTE)
    (created,) = await engine.scheduler.run_once(clock())
    await engine.worker.run_once()
    tick = datetime.fromtimestamp(T0 - 30 + MINUTE, UTC)
    seen = list(SEEN)
    assert seen == [
        {
            "id": created,
            "schedule": {"cron": "* * * * *", "scheduled_time": tick},
            "params": {"x": 1},
        }
    ]
    instance = await engine.store.get_instance("every", created)
    assert instance.trigger == "cron"
    assert await engine.count_instances("source = 'cron'") == 1  # the schedule's tags


async def test_a_fresh_schedule_does_not_fire_ticks_before_it_existed(
    make_engine: MakeEngine, clock: ManualClock
) -> None:
    engine = await make_engine(Every)
    assert await engine.scheduler.run_once(clock()) == []
    clock.advance(29)  # 12:00:59
    assert await engine.scheduler.run_once(clock()) == []
    clock.advance(1)  # 12:01:00
    assert len(await engine.scheduler.run_once(clock())) == 1


@pytest.mark.parametrize(
    ("catch_up", "fired_minutes"),
    [("skip", []), ("one", [20]), ("all", [10, 15, 20])],
)
async def test_catch_up_after_a_gap(
    make_engine: MakeEngine, clock: ManualClock, catch_up: str, fired_minutes: list[int]
) -> None:
    engine = await make_engine(slow("allow", catch_up, limit=3, cron="*/5 * * * *"))
    clock.advance(22 * MINUTE + 35)  # 12:23:05: ticks 12:05..12:20 missed, the latest 185 s ago
    now = clock()
    created = await engine.scheduler.run_once(now)
    base = T0 - 30
    assert created == [f"slow-{stamp(base + MINUTE * m)}" for m in fired_minutes]
    record = (await engine.schedules().get("slow")).record
    assert record.last_tick == base + 20 * MINUTE  # every missed tick is past
    assert await engine.scheduler.run_once(now) == []


async def test_catch_up_skip_still_fires_a_tick_within_the_grace(
    make_engine: MakeEngine, clock: ManualClock
) -> None:
    engine = await make_engine(slow("allow", "skip"))
    clock.advance(5 * MINUTE)  # ticks 12:01..12:05 due; 12:05 is 30 s old
    created = await engine.scheduler.run_once(clock())
    assert created == [f"slow-{stamp(T0 - 30 + 5 * MINUTE)}"]


async def test_overlap_allow_skip_buffer_one(make_engine: MakeEngine, clock: ManualClock) -> None:
    base = T0 - 30
    for overlap, second, third in [
        ("allow", 1, 1),  # every tick fires
        ("skip", 0, 0),  # the first instance is still sleeping: skipped
        ("buffer_one", 0, 0),  # held back
    ]:
        # Each policy on a fresh schedule name in the same database.
        engine = await make_engine(slow(overlap))
        await engine.store.schedules.sync_schedules(["slow"], [])  # forget the previous round
        await engine.scheduler.sync()
        start = clock()
        clock.advance(MINUTE)
        first = await engine.scheduler.run_once(clock())
        assert len(first) == 1
        await engine.worker.run_once()  # starts, then sleeps 150 s
        clock.advance(MINUTE)
        assert len(await engine.scheduler.run_once(clock())) == second, overlap
        clock.advance(MINUTE)
        assert len(await engine.scheduler.run_once(clock())) == third, overlap
        if overlap == "buffer_one":
            record = (await engine.schedules().get("slow")).record
            tick3 = start - (start - base) % MINUTE + 3 * MINUTE
            assert record.buffered_tick == tick3  # the latest held tick
            clock.advance(40)  # the first instance's sleep ends
            await engine.worker.run_once()
            assert (await engine.store.get_instance("slow", first[0])).status == "complete"
            assert await engine.scheduler.run_once(clock()) == [f"slow-{stamp(tick3)}"]
            record = (await engine.schedules().get("slow")).record
            assert record.buffered_tick is None
        await engine.store.retention.delete_instances("slow", await ids(engine, "slow"))
        clock.advance(200)
        await engine.worker.run_once()


async def test_ticks_across_a_dst_change(make_engine: MakeEngine, clock: ManualClock) -> None:
    class Nightly(Workflow):
        name = "nightly"
        schedules = (Schedule("30 2 * * *", timezone="Europe/Paris", name="nightly"),)

        async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
            return None

    paris = ZoneInfo("Europe/Paris")
    clock.set(datetime(2024, 3, 29, 12, 0, tzinfo=paris).timestamp())
    engine = await make_engine(Nightly)
    fired: list[str] = []
    for _ in range(4 * 24 * 4):  # every 15 minutes for four days
        clock.advance(900)
        fired.extend(await engine.scheduler.run_once(clock()))
    # 03-31 has no 02:30 (02:00 jumps to 03:00): it fires at 03:00 CEST = 01:00 UTC.
    assert fired == [
        "nightly-20240330T0130Z",
        "nightly-20240331T0100Z",
        "nightly-20240401T0030Z",
        "nightly-20240402T0030Z",
    ]


async def test_pause_stops_firing_and_resume_skips_the_paused_ticks(
    make_engine: MakeEngine, clock: ManualClock
) -> None:
    engine = await make_engine(slow("allow", "all"))
    client = engine.schedules()
    paused = await client.pause("slow")
    assert paused.record.paused and paused.next_run is None
    for _ in range(3):
        clock.advance(MINUTE)
        assert await engine.scheduler.run_once(clock()) == []
    resumed = await client.resume("slow")
    assert not resumed.record.paused
    assert resumed.next_run == T0 - 30 + 4 * MINUTE
    assert await engine.scheduler.run_once(clock()) == []  # catch_up "all" fires none of them
    clock.advance(MINUTE)
    assert await engine.scheduler.run_once(clock()) == [f"slow-{stamp(T0 - 30 + 4 * MINUTE)}"]
    with pytest.raises(ScheduleNotFoundError):
        await client.pause("nope")


async def test_client_list_trigger_and_backfill(
    make_engine: MakeEngine, clock: ManualClock
) -> None:
    engine = await make_engine(Every)
    client = engine.schedules()
    (info,) = await client.list()
    assert info.name == "every-minute" and info.last_run is None
    assert info.next_run == T0 + 30
    assert info.to_json()["next_run"] == T0 + 30 and info.to_json()["cron"] == "* * * * *"
    triggered = await client.trigger("every-minute")
    assert triggered.id == f"every-minute-{stamp(T0)}" and triggered.trigger == "cron"
    assert (await client.trigger("every-minute", at=T0 + 10)).pk == triggered.pk  # same minute
    start = datetime(2023, 12, 31, 23, 58, tzinfo=UTC)
    end = datetime(2024, 1, 1, 0, 1, tzinfo=UTC)
    filled = await client.backfill("every-minute", start, end)
    assert [r.id for r in filled] == [f"every-minute-20231231T{m}Z" for m in ("2358", "2359")] + [
        f"every-minute-20240101T{m}Z" for m in ("0000", "0001")
    ]
    assert (filled.created, filled.existing) == (4, 0)
    again = await client.backfill("every-minute", start, end)
    assert [r.pk for r in again] == [r.pk for r in filled]
    assert (again.created, again.existing) == (0, 4)
    wider = await client.backfill("every-minute", start, end.timestamp() + 120)
    assert (len(wider), wider.created, wider.existing) == (6, 2, 4)
    assert wider[:4] == again[:] and wider[-1].id == "every-minute-20240101T0003Z"
    with pytest.raises(ValueError, match="more than"):
        await client.backfill("every-minute", T0 - 86400 * 30, T0)
    with pytest.raises(ValueError, match="timezone-aware"):
        await client.trigger("every-minute", at=datetime(2024, 1, 1))
    await engine.worker.run_once()
    assert SEEN[0]["schedule"]["scheduled_time"] == datetime(2024, 1, 1, 12, 0, tzinfo=UTC)


async def test_an_unknown_schedule_says_where_schedules_come_from(store_url: str) -> None:
    async with Engine(store_url, [Every], worker=False) as engine:
        client = engine.schedules()
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: client.get("every-minute"),
            lambda: client.pause("every-minute"),
            lambda: client.resume("every-minute"),
            lambda: client.trigger("every-minute"),
            lambda: client.backfill("every-minute", T0, T0 + 60),
        ]
        for call in calls:
            with pytest.raises(ScheduleNotFoundError) as info:
                await call()
            assert str(info.value) == (
                "no schedule is named 'every-minute': no schedules are stored yet (a worker "
                "serving a workflow with schedules stores them when it starts)"
            )
        await engine.scheduler.sync()
        with pytest.raises(ScheduleNotFoundError) as info:
            await client.trigger("every-minut")
        assert str(info.value) == (
            "no schedule is named 'every-minut'; stored schedules: every-minute (a worker "
            "serving a workflow with schedules stores them when it starts)"
        )
        assert info.value.name == "every-minut"


async def test_a_schedule_removed_from_code_stops_firing(
    make_engine: MakeEngine, clock: ManualClock
) -> None:
    engine = await make_engine(Every)

    class Every2(Workflow):
        name = "every"

        async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
            return None

    newer = await make_engine(Every2)  # synced at start: "every" declares no schedule now
    assert await newer.schedules().list() == []
    clock.advance(MINUTE)
    assert await engine.scheduler.run_once(clock()) == []  # its stored row is gone


async def test_the_engine_runs_the_scheduler_next_to_its_worker(
    store_url: str, clock: ManualClock
) -> None:
    clock.set(T0 + 29.9)  # a tick is due 0.1 s (of real waiting) later
    SEEN.clear()
    async with Engine(store_url, [Every], clock=clock, poll_interval=0.05) as engine:
        assert [s.name for s in await engine.schedules().list()] == ["every-minute"]
        clock.advance(0.2)
        for _ in range(200):
            if SEEN:
                break
            await asyncio.sleep(0.05)
    assert [s["id"] for s in SEEN] == [f"every-minute-{stamp(T0 + 30)}"]
