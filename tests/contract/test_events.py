"""send_event and get_events: events are stored in send order, wake a waiting instance, are
refused by finished ones, and a restart gives back the events of the steps it removes."""

from __future__ import annotations

import pytest

from stepline import IllegalStateError, InstanceNotFoundError, ManualClock
from stepline.records import InstanceEvent
from stepline.store.base import Finish, Store

from ._support import (
    FINISHED,
    HOUR,
    LEASE,
    UNFINISHED,
    WF,
    all_states,
    claim_one,
    claimed_ids,
    create,
    write,
)
from .conftest import OpenStore


async def test_send_event_stores_events_pending_in_send_order(
    store: Store, clock: ManualClock
) -> None:
    await create(store, "a", "b")
    assert await store.get_events(WF, "a") == []
    t0 = store.now()
    await store.send_event(WF, "a", "go", '{"n": [1, "ü"]}')
    clock.advance(1)
    await store.send_event(WF, "a", "stop", None)
    await store.send_event(WF, "b", "other", '"b"')
    clock.advance(1)
    await store.send_event(WF, "a", "go", '"again"')
    events = await store.get_events(WF, "a")
    assert events == [
        InstanceEvent("go", {"n": [1, "ü"]}, t0, None),
        InstanceEvent("stop", None, t0 + 1, None),
        InstanceEvent("go", "again", t0 + 2, None),
    ]
    assert all(isinstance(e.sent_at, float) for e in events)
    assert await store.get_events(WF, "b") == [InstanceEvent("other", "b", t0 + 1, None)]


async def test_send_event_wakes_a_waiting_instance(store: Store, clock: ManualClock) -> None:
    await create(store, "timer")
    claim = await claim_one(store, "timer")
    await store.finish(claim.lease, Finish("waiting", wake_at=store.now() + HOUR), store.now())
    await create(store, "forever")
    claim = await claim_one(store, "forever")
    await store.finish(claim.lease, Finish("waiting"), store.now())
    clock.advance(1)
    for instance_id in ("timer", "forever"):
        await store.send_event(WF, instance_id, "go", None)
        record = await store.get_instance(WF, instance_id)
        assert (record.status, record.ready_at) == ("waiting", store.now())
    assert await claimed_ids(store) == ["forever", "timer"]


async def test_send_event_to_an_unfinished_instance_that_is_not_waiting_only_stores_it(
    store: Store, clock: ManualClock
) -> None:
    claims = await all_states(store)
    clock.advance(1)
    before = {s: await store.get_instance(WF, s) for s in UNFINISHED}
    for status in UNFINISHED:
        if status != "waiting":
            await store.send_event(WF, status, "go", '"x"')
            assert await store.get_instance(WF, status) == before[status]
            assert [e.type for e in await store.get_events(WF, status)] == ["go"]
    # a running activation keeps its lease; it learns of the event through event_seq
    running = claims["running"]
    assert running is not None
    assert await store.record_step(running.lease, write("t", 2), store.now()) == "running"
    assert await claimed_ids(store) == ["queued"]  # the paused one is not woken


async def test_send_event_to_a_finished_instance_raises_illegal_state(store: Store) -> None:
    await all_states(store)
    for status in FINISHED:
        with pytest.raises(IllegalStateError) as refused:
            await store.send_event(WF, status, "go", None)
        assert (refused.value.instance_id, refused.value.status) == (status, status)
        assert await store.get_events(WF, status) == []


async def test_send_event_is_durable_when_it_returns(store: Store, open_store: OpenStore) -> None:
    await create(store, "a")
    await store.send_event(WF, "a", "go", '"x"')
    other = await open_store()
    assert [e.payload for e in await other.get_events(WF, "a")] == ["x"]


async def test_send_event_to_an_unknown_instance_raises_instance_not_found(store: Store) -> None:
    """(Not in the docstring; both stores do it.)"""
    with pytest.raises(InstanceNotFoundError):
        await store.send_event(WF, "nope", "go", None)


async def test_get_events_names_the_step_that_consumed_each_event(store: Store) -> None:
    await create(store, "a")
    for n in range(3):
        await store.send_event(WF, "a", "go", str(n))
    claim = await claim_one(store, "a")
    first, _, third = claim.history.events
    await store.record_step(claim.lease, write("wait", 1, consume_event=third.pk), store.now())
    took = write("wait", 2, count=2, consume_event=first.pk)
    await store.record_step(claim.lease, took, store.now())
    events = await store.get_events(WF, "a")
    assert [(e.payload, e.consumed_by) for e in events] == [(0, "wait-2"), (1, None), (2, "wait-1")]
    with pytest.raises(InstanceNotFoundError):
        await store.get_events(WF, "nope")


async def test_a_restart_that_removes_the_consuming_step_makes_its_event_pending_again(
    store: Store,
) -> None:
    await create(store, "a")
    await store.send_event(WF, "a", "go", '"first"')
    await store.send_event(WF, "a", "go", '"second"')
    claim = await claim_one(store, "a")
    first, second = claim.history.events
    now = store.now()
    await store.record_step(claim.lease, write("w", 1, consume_event=first.pk), now)
    await store.record_step(claim.lease, write("x", 2), now)
    await store.record_step(claim.lease, write("w", 3, count=2, consume_event=second.pk), now)
    await store.finish(claim.lease, Finish("complete"), now)
    await store.control(WF, "a", "restart", from_step=("x", 1))
    assert [e.consumed_by for e in await store.get_events(WF, "a")] == ["w-1", None]
    again = (await store.claim("worker-2", [WF], 1, LEASE, store.now())).claims
    assert [e.pk for e in again[0].history.events] == [second.pk]
    await store.control(WF, "a", "restart")
    assert [e.consumed_by for e in await store.get_events(WF, "a")] == [None, None]
