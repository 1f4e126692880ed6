"""Schedules made at run time (``engine.schedules().create/update/delete``) on both stores:
fired exactly once per tick by running schedulers without a restart, bad input named."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import Any

import pytest

from stepline import (
    DefinitionError,
    Engine,
    ManualClock,
    Schedule,
    ScheduleExistsError,
    ScheduleReadOnlyError,
    SyncEngine,
    Workflow,
    WorkflowEvent,
    WorkflowNotFoundError,
    WorkflowStep,
)
from stepline.errors import ScheduleNotFoundError

T0 = datetime(2024, 1, 1, 12, 0, 30, tzinfo=UTC).timestamp()  # 30 s past a minute
MINUTE = 60.0


class Report(Workflow):
    name = "report"
    schedules = (Schedule("0 * * * *", name="report-hourly"),)

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return event.payload


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
        yield make


def stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y%m%dT%H%MZ")


async def ids(engine: Engine) -> list[str]:
    page = await engine.list_instances("report", limit=1000, oldest_first=True)
    return [r.id for r in page.instances]


async def test_three_schedulers_fire_a_created_schedule_exactly_once_per_tick(
    make_engine: MakeEngine, clock: ManualClock
) -> None:
    engines = [await make_engine(Report) for _ in range(3)]
    for engine in engines:
        assert await engine.scheduler.run_once(clock()) == []  # running, before the create
    info = (
        await engines[0]
        .schedules()
        .create("minutely", "report", "* * * * *", params={"n": 1}, overlap="allow")
    )
    assert (info.record.source, info.next_run) == ("api", T0 - 30 + MINUTE)
    for _ in range(5):
        clock.advance(MINUTE)
        results = await asyncio.gather(*(e.scheduler.run_once(clock()) for e in engines))
        assert sum(len(r) for r in results) == 1
    expected = [f"minutely-{stamp(T0 - 30 + MINUTE * n)}" for n in range(1, 6)]
    assert await ids(engines[0]) == expected
    instance = await engines[0].store.get_instance("report", expected[0])
    assert (instance.trigger, instance.params) == ("cron", {"n": 1})


async def test_update_and_delete_reach_running_schedulers(
    make_engine: MakeEngine, clock: ManualClock
) -> None:
    engine = await make_engine(Report)
    client = engine.schedules()
    await client.create("r", "report", "* * * * *")
    clock.advance(MINUTE)
    assert len(await engine.scheduler.run_once(clock())) == 1
    updated = await client.update("r", cron="*/5 * * * *", params=[2])
    assert (updated.record.cron, updated.record.params) == ("*/5 * * * *", [2])
    assert updated.record.last_tick == T0 - 30 + MINUTE  # state kept
    clock.advance(MINUTE)  # 12:02:30: no */5 tick
    assert await engine.scheduler.run_once(clock()) == []
    clock.advance(3 * MINUTE)  # 12:05:30
    assert await engine.scheduler.run_once(clock()) == [f"r-{stamp(T0 - 30 + 5 * MINUTE)}"]
    gone = await client.delete("r")
    assert gone.name == "r" and gone.next_run is None
    clock.advance(5 * MINUTE)
    assert await engine.scheduler.run_once(clock()) == []
    assert [s.name for s in await client.list()] == ["report-hourly"]
    assert engine.scheduler.next_tick(clock()) == T0 - 30 + MINUTE * 60  # only the hourly one


async def test_a_scheduler_started_with_the_worker_picks_up_a_created_schedule(
    store_url: str, clock: ManualClock
) -> None:
    clock.set(T0)
    async with Engine(store_url, [Report], worker=True, clock=clock, poll_interval=0.02) as e:
        await e.schedules().create("soon", "report", "* * * * *")
        clock.advance(MINUTE)
        for _ in range(200):  # the scheduler was woken by the create and sleeps to the tick
            if await ids(e):
                break
            await asyncio.sleep(0.02)
        assert await ids(e) == [f"soon-{stamp(T0 - 30 + MINUTE)}"]


async def test_code_declared_schedules_are_read_only(make_engine: MakeEngine) -> None:
    client = (await make_engine(Report)).schedules()
    with pytest.raises(ScheduleReadOnlyError, match=r"'report-hourly'.*declared in code"):
        await client.update("report-hourly", cron="* * * * *")
    with pytest.raises(ScheduleReadOnlyError, match="'report-hourly'"):
        await client.delete("report-hourly")
    with pytest.raises(ScheduleExistsError, match=r"'report-hourly'.*declared in code"):
        await client.create("report-hourly", "report", "* * * * *")
    assert (await client.get("report-hourly")).record.cron == "0 * * * *"


async def test_a_name_the_code_declares_is_refused_before_any_worker_stored_it(
    store_url: str,
) -> None:
    async with Engine(store_url, [Report], worker=False) as engine:  # nothing synced
        with pytest.raises(ScheduleExistsError, match="'report-hourly'"):
            await engine.schedules().create("report-hourly", "report", "* * * * *")
        assert await engine.schedules().list() == []


@pytest.mark.parametrize(
    ("args", "options", "error", "match"),
    [
        (("x", "report", "not a cron"), {}, DefinitionError, "'not a cron'"),
        (("x", "report", "61 * * * *"), {}, DefinitionError, "'61 "),
        (("x", "nope", "* * * * *"), {}, WorkflowNotFoundError, "'nope'"),
        (("x", "report", "* * * * *"), {"timezone": "Mars/Base"}, DefinitionError, "Mars/Base"),
        (("bad name", "report", "* * * * *"), {}, DefinitionError, "'bad name'"),
        (("x", "report", "* * * * *"), {"overlap": "never"}, DefinitionError, "'never'"),
        (("x", "report", "* * * * *"), {"params": {1, object()}}, DefinitionError, "params"),
    ],
)
async def test_bad_input_is_named_and_nothing_is_stored(
    make_engine: MakeEngine,
    args: tuple[str, str, str],
    options: dict[str, Any],
    error: type[Exception],
    match: str,
) -> None:
    client = (await make_engine(Report)).schedules()
    with pytest.raises(error, match=match):
        await client.create(*args, **options)
    assert [s.name for s in await client.list()] == ["report-hourly"]


async def test_bad_updates_change_nothing(make_engine: MakeEngine) -> None:
    client = (await make_engine(Report)).schedules()
    await client.create("r", "report", "* * * * *")
    with pytest.raises(DefinitionError, match=r"'name'.*changeable"):
        await client.update("r", name="other")
    with pytest.raises(DefinitionError, match="'bad'"):
        await client.update("r", cron="bad")
    with pytest.raises(WorkflowNotFoundError, match="'nope'"):
        await client.update("r", workflow="nope")
    with pytest.raises(ScheduleNotFoundError, match="'missing'"):
        await client.update("missing", cron="* * * * *")
    assert (await client.get("r")).record.cron == "* * * * *"


def test_the_sync_facade_creates_updates_and_deletes(store_url: str) -> None:
    with SyncEngine(store_url, [Report]) as engine:
        client = engine.schedules()
        assert (
            client.create("s", "report", "0 9 * * *", timezone="Europe/Paris").record.source
            == "api"
        )
        assert client.update("s", cron="0 10 * * *").record.cron == "0 10 * * *"
        assert client.delete("s").name == "s"
        assert client.list() == []


async def test_an_update_at_the_same_instant_as_the_last_read_is_seen(
    make_engine: MakeEngine, clock: ManualClock
) -> None:
    """The scheduler keeps what it built of a run-time schedule until its declaration changes,
    not its ``updated_at`` (which a clock that did not move leaves equal)."""
    engine = await make_engine(Report)
    client = engine.schedules()
    await client.create("r", "report", "* * * * *")
    assert await engine.scheduler.run_once(clock()) == []  # read at this instant
    await client.update("r", cron="*/5 * * * *")  # the same instant: updated_at unchanged
    clock.advance(MINUTE)  # 12:01:30: a tick of the old cron, none of the new
    assert await engine.scheduler.run_once(clock()) == []
