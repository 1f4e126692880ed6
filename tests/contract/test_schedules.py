"""Cron schedules in the store: sync_schedules, list_schedules, get_schedule,
set_schedule_paused, advance_schedule (the compare-and-set that claims a tick)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from stepline import ManualClock
from stepline.errors import ScheduleNotFoundError
from stepline.store.base import NewInstance, ScheduleDefinition, Store

from .conftest import OpenStore


def declared(name: str, workflow: str = "wf", **changes: object) -> ScheduleDefinition:
    base = ScheduleDefinition(name, workflow, "*/5 * * * *", "UTC", None, "skip", 100, "allow")
    return replace(base, **changes)  # type: ignore[arg-type]


def tick_instance(instance_id: str) -> NewInstance:
    return NewInstance(instance_id, '{"n": 1}', schedule='{"name": "s", "cron": "c", "tick": 1.5}')


async def test_sync_inserts_new_schedules_unpaused_without_ticks(
    store: Store, clock: ManualClock
) -> None:
    t0 = store.now()
    synced = await store.schedules.sync_schedules(
        ["wf"], [declared("b", params='{"x": 1}', timezone="Europe/Paris"), declared("a")]
    )
    assert [s.name for s in synced] == ["a", "b"]
    b = synced[1]
    assert (b.workflow, b.cron, b.timezone, b.params) == (
        "wf",
        "*/5 * * * *",
        "Europe/Paris",
        {"x": 1},
    )
    assert (b.catch_up, b.catch_up_limit, b.overlap) == ("skip", 100, "allow")
    assert not b.paused
    assert (b.last_tick, b.last_instance, b.buffered_tick) == (None, None, None)
    assert b.created_at == b.updated_at == t0
    assert await store.schedules.list_schedules() == synced


async def test_sync_replaces_declarations_and_keeps_state(store: Store, clock: ManualClock) -> None:
    t0 = store.now()
    await store.schedules.sync_schedules(["wf"], [declared("a"), declared("same")])
    await store.schedules.set_schedule_paused("a", True)
    assert await store.schedules.advance_schedule(
        "a", expected_last_tick=None, expected_buffered_tick=None, last_tick=100.0,
        buffered_tick=90.0, create=NewInstance("a-1", None),
    )  # fmt: skip
    clock.advance(10)
    changed = declared("a", cron="0 * * * *", catch_up="all", catch_up_limit=3, overlap="skip")
    a, same = await store.schedules.sync_schedules(["wf"], [changed, declared("same")])
    assert (a.cron, a.catch_up, a.catch_up_limit, a.overlap) == ("0 * * * *", "all", 3, "skip")
    assert a.paused and (a.last_tick, a.buffered_tick, a.last_instance) == (100.0, 90.0, "a-1")
    assert a.created_at == t0 and a.updated_at == t0 + 10
    assert same.updated_at == t0  # declaration unchanged


async def test_sync_deletes_undeclared_schedules_of_the_given_workflows_only(
    store: Store,
) -> None:
    await store.schedules.sync_schedules(["wf", "other"], [declared("a"), declared("o", "other")])
    synced = await store.schedules.sync_schedules(["wf"], [])
    assert synced == []
    assert [s.name for s in await store.schedules.list_schedules()] == ["o"]


async def test_sync_refuses_a_schedule_of_another_workflow(store: Store) -> None:
    with pytest.raises(ValueError, match="'x'"):
        await store.schedules.sync_schedules(["wf"], [declared("a"), declared("x", "other")])
    assert await store.schedules.list_schedules() == []


async def test_list_by_workflow_and_get(store: Store) -> None:
    await store.schedules.sync_schedules(["wf", "other"], [declared("b"), declared("a", "other")])
    assert [s.name for s in await store.schedules.list_schedules("wf")] == ["b"]
    assert [s.name for s in await store.schedules.list_schedules()] == ["a", "b"]
    assert (await store.schedules.get_schedule("a")).workflow == "other"
    with pytest.raises(ScheduleNotFoundError, match="'nope'"):
        await store.schedules.get_schedule("nope")


async def test_pause_and_resume(store: Store, clock: ManualClock) -> None:
    t0 = store.now()
    await store.schedules.sync_schedules(["wf"], [declared("a")])
    clock.advance(5)
    paused = await store.schedules.set_schedule_paused("a", True)
    assert paused.paused and paused.updated_at == t0 + 5
    clock.advance(5)
    again = await store.schedules.set_schedule_paused("a", True)
    assert again.updated_at == t0 + 5  # unchanged
    resumed = await store.schedules.set_schedule_paused("a", False)
    assert not resumed.paused and resumed.updated_at == t0 + 10
    assert resumed.last_tick is None
    with pytest.raises(ScheduleNotFoundError, match="'nope'"):
        await store.schedules.set_schedule_paused("nope", True)


async def test_advance_sets_the_state_and_creates_the_instance(
    store: Store, clock: ManualClock
) -> None:
    await store.schedules.sync_schedules(["wf"], [declared("a")])
    clock.advance(3)
    applied = await store.schedules.advance_schedule(
        "a", expected_last_tick=None, expected_buffered_tick=None, last_tick=60.0,
        buffered_tick=None, create=tick_instance("a-60"),
    )  # fmt: skip
    assert applied
    record = await store.schedules.get_schedule("a")
    assert (record.last_tick, record.buffered_tick, record.last_instance) == (60.0, None, "a-60")
    assert record.updated_at == store.now()
    instance = await store.get_instance("wf", "a-60")
    assert (instance.status, instance.trigger, instance.params) == ("queued", "cron", {"n": 1})
    assert instance.schedule == {"name": "s", "cron": "c", "tick": 1.5}
    assert instance.ready_at is not None and instance.ready_at <= store.now()


async def test_advance_without_create_keeps_the_last_instance(store: Store) -> None:
    await store.schedules.sync_schedules(["wf"], [declared("a")])
    await store.schedules.advance_schedule(
        "a", expected_last_tick=None, expected_buffered_tick=None, last_tick=60.0,
        buffered_tick=None, create=NewInstance("a-60", None),
    )  # fmt: skip
    assert await store.schedules.advance_schedule(
        "a", expected_last_tick=60.0, expected_buffered_tick=None, last_tick=120.0,
        buffered_tick=120.0,
    )  # fmt: skip
    record = await store.schedules.get_schedule("a")
    assert (record.last_tick, record.buffered_tick, record.last_instance) == (120.0, 120.0, "a-60")
    assert [r.id for r in (await store.list_instances("wf", None, 10, None)).instances] == ["a-60"]


async def test_advance_with_a_stale_expectation_changes_nothing(store: Store) -> None:
    await store.schedules.sync_schedules(["wf"], [declared("a")])
    assert await store.schedules.advance_schedule(
        "a", expected_last_tick=None, expected_buffered_tick=None, last_tick=60.0,
        buffered_tick=30.0,
    )  # fmt: skip
    for expected in ((None, None), (60.0, None), (30.0, 30.0), (60.0, 31.0)):
        assert not await store.schedules.advance_schedule(
            "a", expected_last_tick=expected[0], expected_buffered_tick=expected[1],
            last_tick=120.0, buffered_tick=None, create=NewInstance("a-120", None),
        )  # fmt: skip
    record = await store.schedules.get_schedule("a")
    assert (record.last_tick, record.buffered_tick, record.last_instance) == (60.0, 30.0, None)
    assert (await store.list_instances("wf", None, 10, None)).instances == []


async def test_advance_does_not_create_an_existing_id_again(store: Store) -> None:
    await store.schedules.sync_schedules(["wf"], [declared("a")])
    await store.create_instances(
        "wf", [NewInstance("a-60", '"mine"')], trigger="api", skip_existing=False
    )
    assert await store.schedules.advance_schedule(
        "a", expected_last_tick=None, expected_buffered_tick=None, last_tick=60.0,
        buffered_tick=None, create=tick_instance("a-60"),
    )  # fmt: skip
    instance = await store.get_instance("wf", "a-60")
    assert (instance.params, instance.trigger) == ("mine", "api")
    assert (await store.schedules.get_schedule("a")).last_instance == "a-60"


async def test_advance_an_unknown_schedule(store: Store) -> None:
    with pytest.raises(ScheduleNotFoundError, match="'nope'"):
        await store.schedules.advance_schedule(
            "nope", expected_last_tick=None, expected_buffered_tick=None, last_tick=1.0,
            buffered_tick=None,
        )  # fmt: skip


async def test_concurrent_advances_from_three_stores_exactly_one_wins(
    store: Store, open_store: OpenStore
) -> None:
    await store.schedules.sync_schedules(["wf"], [declared("a")])
    stores = [store, await open_store(), await open_store()]
    for round_ in range(5):
        before = await store.schedules.get_schedule("a")
        tick = 60.0 * (round_ + 1)
        results = await asyncio.gather(
            *(
                s.schedules.advance_schedule(
                    "a", expected_last_tick=before.last_tick, expected_buffered_tick=None,
                    last_tick=tick, buffered_tick=None,
                    create=NewInstance(f"a-{round_}-{n}", None),
                )
                for n, s in enumerate(stores)
            )
        )  # fmt: skip
        assert sorted(results) == [False, False, True]
        winner = results.index(True)
        record = await store.schedules.get_schedule("a")
        assert (record.last_tick, record.last_instance) == (tick, f"a-{round_}-{winner}")
    page = await store.list_instances("wf", None, 100, None)
    assert len(page.instances) == 5
