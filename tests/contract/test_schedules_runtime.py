"""Schedules made at run time in the store: create_schedule, update_schedule, delete_schedule,
and sync_schedules leaving them alone."""

from __future__ import annotations

import asyncio

import pytest

from stepline import ManualClock
from stepline.errors import ScheduleExistsError, ScheduleNotFoundError, ScheduleReadOnlyError
from stepline.store.base import NewInstance, Store

from .conftest import OpenStore
from .test_schedules import declared


async def test_create_stores_an_api_schedule(store: Store, clock: ManualClock) -> None:
    t0 = store.now()
    made = await store.schedules.create_schedule(declared("r", params='{"x": 1}'))
    assert (made.name, made.source, made.params, made.paused) == ("r", "api", {"x": 1}, False)
    assert (made.last_tick, made.created_at, made.updated_at) == (None, t0, t0)
    assert await store.schedules.get_schedule("r") == made
    assert made.to_json()["source"] == "api"


async def test_create_refuses_a_taken_name_of_either_source(store: Store) -> None:
    await store.schedules.sync_schedules(["wf"], [declared("code")])
    await store.schedules.create_schedule(declared("api"))
    with pytest.raises(ScheduleExistsError, match=r"'code'.*declared in code") as caught:
        await store.schedules.create_schedule(declared("code", cron="0 * * * *"))
    assert caught.value.source == "code"
    with pytest.raises(ScheduleExistsError, match=r"'api'.*run time"):
        await store.schedules.create_schedule(declared("api", cron="0 * * * *"))
    assert (await store.schedules.get_schedule("code")).cron == "*/5 * * * *"
    assert (await store.schedules.get_schedule("code")).source == "code"


async def test_concurrent_creates_of_one_name_store_one(open_store: OpenStore) -> None:
    stores = [await open_store() for _ in range(4)]
    results = await asyncio.gather(
        *(s.schedules.create_schedule(declared("same")) for s in stores), return_exceptions=True
    )
    assert sum(not isinstance(r, BaseException) for r in results) == 1
    assert all(isinstance(r, ScheduleExistsError) for r in results if isinstance(r, BaseException))


async def test_update_replaces_the_declaration_and_keeps_the_state(
    store: Store, clock: ManualClock
) -> None:
    t0 = store.now()
    await store.schedules.create_schedule(declared("r"))
    await store.schedules.set_schedule_paused("r", True)
    assert await store.schedules.advance_schedule(
        "r", expected_last_tick=None, expected_buffered_tick=None, last_tick=60.0,
        buffered_tick=None, create=NewInstance("r-60", None),
    )  # fmt: skip
    clock.advance(7)
    updated = await store.schedules.update_schedule(
        declared("r", "other", cron="0 9 * * *", timezone="Europe/Paris", params="[1]",
                 catch_up="all", catch_up_limit=3, overlap="skip")
    )  # fmt: skip
    assert (updated.workflow, updated.cron, updated.timezone, updated.params) == (
        "other", "0 9 * * *", "Europe/Paris", [1],
    )  # fmt: skip
    assert (updated.catch_up, updated.catch_up_limit, updated.overlap) == ("all", 3, "skip")
    assert updated.paused and (updated.last_tick, updated.last_instance) == (60.0, "r-60")
    assert (updated.created_at, updated.updated_at, updated.source) == (t0, t0 + 7, "api")


async def test_update_and_delete_refuse_code_and_unknown_schedules(store: Store) -> None:
    await store.schedules.sync_schedules(["wf"], [declared("code")])
    with pytest.raises(ScheduleReadOnlyError, match="'code'"):
        await store.schedules.update_schedule(declared("code", cron="0 * * * *"))
    with pytest.raises(ScheduleReadOnlyError, match="'code'"):
        await store.schedules.delete_schedule("code")
    assert (await store.schedules.get_schedule("code")).cron == "*/5 * * * *"
    with pytest.raises(ScheduleNotFoundError, match="'nope'"):
        await store.schedules.update_schedule(declared("nope"))
    with pytest.raises(ScheduleNotFoundError, match="'nope'"):
        await store.schedules.delete_schedule("nope")


async def test_delete_removes_it_and_keeps_its_instances(store: Store) -> None:
    await store.schedules.create_schedule(declared("r"))
    await store.schedules.advance_schedule(
        "r", expected_last_tick=None, expected_buffered_tick=None, last_tick=60.0,
        buffered_tick=None, create=NewInstance("r-60", None),
    )  # fmt: skip
    gone = await store.schedules.delete_schedule("r")
    assert gone.name == "r" and gone.last_instance == "r-60"
    assert await store.schedules.list_schedules() == []
    assert (await store.get_instance("wf", "r-60")).id == "r-60"


async def test_sync_leaves_api_schedules_alone_and_takes_over_a_name_it_declares(
    store: Store, clock: ManualClock
) -> None:
    await store.schedules.create_schedule(declared("api"))
    await store.schedules.create_schedule(declared("taken"))
    await store.schedules.set_schedule_paused("taken", True)
    clock.advance(3)
    synced = await store.schedules.sync_schedules(["wf"], [declared("taken", cron="0 * * * *")])
    assert [(s.name, s.source, s.cron, s.paused) for s in synced] == [
        ("taken", "code", "0 * * * *", True)
    ]
    assert synced[0].updated_at == store.now()
    assert (await store.schedules.get_schedule("api")).source == "api"
    await store.schedules.sync_schedules(["wf"], [])
    assert [s.name for s in await store.schedules.list_schedules()] == ["api"]
