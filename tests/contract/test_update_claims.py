"""MessageStore.send_update_and_claim: an update sent with the instance claimed in the send's
own transaction, for a worker in the sending process, only when the instance could run at once
and a claim by that worker could take it: never one leased by another worker, one whose
workflow has limits, one routed to other code, one paused or with a control action pending."""

from __future__ import annotations

import asyncio

import pytest

from stepline import IllegalStateError, InstanceNotFoundError, ManualClock
from stepline.limits import Limit, Rate, WorkflowLimits
from stepline.store.base import Finish, NewInstance, Store, WorkflowMeta
from stepline.store.types import UPDATE_EVENT, Claim, UpdateRecord

from ._support import (
    FINISHED,
    HOUR,
    LEASE,
    OWNER,
    WF,
    all_states,
    claimed_ids,
    create,
    raw,
    write,
)
from .conftest import OpenStore
from .test_flow_control import make
from .test_messages import waiting
from .test_patch_routing import suspended_after
from .test_signals import Calls

TAKER = "worker-here"


async def send(
    store: Store, instance_id: str, update_id: str = "u1", **routing: object
) -> tuple[UpdateRecord, Claim | None]:
    return await store.messages.send_update_and_claim(
        WF, instance_id, update_id, "decide", "[7]", owner=TAKER, lease_seconds=LEASE,
        **routing,  # type: ignore[arg-type]
    )  # fmt: skip


async def test_a_waiting_instance_is_claimed_with_the_update_in_its_history(
    store: Store, clock: ManualClock
) -> None:
    await suspended_after(store, "a")  # one step, "s"
    clock.advance(1)
    now = store.now()
    record, claim = await send(store, "a")
    assert (record.update_id, record.status, record.created_at) == ("u1", "pending", now)
    assert claim is not None
    assert claim.lease.owner == TAKER and claim.lease.pk == claim.instance.pk
    assert claim.control is None
    assert (claim.instance.status, claim.instance.lease_owner) == ("running", TAKER)
    assert claim.instance.ready_at == now + LEASE
    [event] = claim.history.events
    assert (event.type, event.payload) == (UPDATE_EVENT, [7])
    assert [step.name for step in claim.history.steps] == ["s"]
    # it is leased: no other claim takes it, and the lease holds for writes and the finish
    assert await claimed_ids(store) == []
    await store.record_step(claim.lease, write("after", 2), now)
    finish = Finish("waiting", event_seq=claim.event_seq)
    assert await store.finish(claim.lease, finish, now) == "waiting"
    assert await store.messages.get_update(WF, "a", "u1") == record


async def test_the_claims_event_count_counts_the_update(store: Store) -> None:
    """A finish passing the claim's ``event_seq`` suspends: nothing came after the update."""
    await waiting(store, "a")
    _, claim = await send(store, "a")
    assert claim is not None
    finish = Finish("waiting", wake_at=store.now() + 100, event_seq=claim.event_seq)
    assert await store.finish(claim.lease, finish, store.now()) == "waiting"
    assert await claimed_ids(store) == []


async def test_a_queued_instance_is_claimed_and_started(store: Store) -> None:
    [created] = await create(store, "q")
    assert created.started_at is None
    _, claim = await send(store, "q")
    assert claim is not None and claim.instance.started_at == store.now()
    assert claim.history.steps == [] and len(claim.history.events) == 1


async def test_a_retry_of_a_recorded_update_id_claims_nothing(store: Store) -> None:
    await waiting(store, "a")
    first = await store.messages.send_update(WF, "a", "u1", "decide", "[1]")
    again, claim = await send(store, "a")
    assert again == first and claim is None
    assert await claimed_ids(store) == ["a"]  # woken by the first send, for any claim


async def test_an_instance_leased_by_another_worker_is_not_taken(store: Store) -> None:
    states = await all_states(store)
    running = states["running"]
    assert running is not None
    record, claim = await send(store, "running")
    assert record.status == "pending" and claim is None
    assert (await store.get_instance(WF, "running")).lease_owner == OWNER
    # its holder sees the update: a finish with the event count it had makes it ready
    finish = Finish("waiting", event_seq=running.event_seq)
    assert await store.finish(running.lease, finish, store.now()) == "waiting"
    assert await claimed_ids(store) == ["queued", "running"]


async def test_paused_and_pausing_instances_are_not_taken(store: Store) -> None:
    await all_states(store)
    for status in ("paused", "waitingForPause"):
        record, claim = await send(store, status)
        assert record.status == "pending" and claim is None
        assert (await store.get_instance(WF, status)).status == status


async def test_finished_and_unknown_instances_are_refused_as_by_send_update(
    store: Store,
) -> None:
    await all_states(store)
    for status in FINISHED:
        with pytest.raises(IllegalStateError, match="send an update to"):
            await send(store, status)
        assert await store.messages.get_update(WF, status, "u1") is None
    with pytest.raises(InstanceNotFoundError):
        await send(store, "nope")


@pytest.mark.parametrize(
    "limits",
    [
        {"concurrency": 5},
        {"key_concurrency": 1},
        {"rate": Rate(10, 60.0)},
        {"limits": ("shared",)},
    ],
)
async def test_a_workflow_with_limits_is_left_to_a_claim(
    store: Store, limits: dict[str, object]
) -> None:
    named = [Limit("shared", concurrency=3)]
    meta = WorkflowMeta(WF, "tests:Limited", None, WorkflowLimits(**limits))  # type: ignore[arg-type]
    await store.register_workflows([meta], named)
    await waiting(store, "a")
    record, claim = await send(store, "a")
    assert record.status == "pending" and claim is None
    assert await claimed_ids(store) == ["a"]  # woken, for a claim that applies the limits


async def test_a_worker_limit_alone_does_not_stop_the_claim(store: Store) -> None:
    """``worker_concurrency`` is the worker's own: it decides whether to ask."""
    meta = WorkflowMeta(WF, "tests:Capped", None, WorkflowLimits(worker_concurrency=2))
    await store.register_workflows([meta])
    await waiting(store, "a")
    assert (await send(store, "a"))[1] is not None


async def test_an_instance_of_a_version_not_served_is_not_taken(store: Store) -> None:
    await make(store, NewInstance("v2", None, version="2"))
    record, claim = await send(store, "v2", versions={WF: ["1"]})
    assert record.status == "pending" and claim is None
    assert (await send(store, "v2", "u2", versions={WF: ["1", "2"]}))[1] is not None


async def test_an_instance_with_a_patch_the_code_lacks_is_not_taken(store: Store) -> None:
    await suspended_after(store, "a", "x")
    _, claim = await send(store, "a", patches={(WF, "1"): ["y"]})
    assert claim is None
    _, claim = await send(store, "a", "u2", patches={(WF, "1"): ["x", "y"]})
    assert claim is not None and claim.instance.patches == ("x",)


async def test_a_pending_control_or_a_passed_deadline_is_left_to_a_claim(
    store: Store, clock: ManualClock
) -> None:
    await waiting(store, "a")
    await store.control(WF, "a", "terminate", rollback=True)
    assert (await send(store, "a"))[1] is None
    await make(store, NewInstance("late", None, deadline_at=store.now() + 5))
    clock.advance(10)
    assert (await send(store, "late"))[1] is None


async def test_an_instance_not_due_yet_is_not_taken(store: Store, store_url: str) -> None:
    """A queued instance due later (a debounced start) keeps its time."""
    later = store.now() + 60
    await create(store, "d")
    raw(store_url, f"UPDATE instances SET ready_at = {later} WHERE id = 'd'")
    record, claim = await send(store, "d")
    assert record.status == "pending" and claim is None
    assert (await store.get_instance(WF, "d")).ready_at == later


async def test_a_claimed_update_wakes_no_worker(store: Store, open_store: OpenStore) -> None:
    """Its taker runs it: no worker here, nor in another process, is told to look for work
    (waiters on the instance elsewhere are told it changed). One not taken wakes them."""
    other = await open_store()
    await waiting(store, "a")
    here, there = Calls(), asyncio.Event()
    store.signals.add_ready_listener(here)
    other.signals.add_ready_listener(there.set)
    with other.signals.watch_changes(WF, "a") as watch:
        assert (await send(store, "a"))[1] is not None
        assert here.count == 0
        if other.pushes_notifications:
            await asyncio.wait_for(watch.wait(HOUR), 10)
            assert not there.is_set()
    await waiting(store, "b")
    seen = here.count
    there.clear()
    assert (await send(store, "b", versions={WF: ["2"]}))[1] is None
    assert here.count == seen + 1
    if other.pushes_notifications:
        await asyncio.wait_for(there.wait(), 10)
