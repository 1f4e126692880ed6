"""The worker side of an activation: record_step, renew, finish, release, next_wakeup; and a
child's end waking its parent."""

from __future__ import annotations

import pytest

from stepline import LeaseLostError, ManualClock
from stepline.store.base import Finish, NewInstance, StepWrite, Store

from ._support import (
    HOUR,
    LEASE,
    OWNER,
    WF,
    claim_one,
    claimed_ids,
    create,
    in_state,
    lease_lost,
    write,
)


async def _outputs(store: Store, instance_id: str = "a") -> dict[str, object]:
    return {f"{s.name}-{s.count}": s.output for s in await store.get_steps(WF, instance_id)}


# -- record_step -----------------------------------------------------------------------------------


async def test_record_step_inserts_then_replaces_the_record_of_the_same_step(
    store: Store,
) -> None:
    await create(store, "a")
    claim = await claim_one(store, "a")
    now = store.now()
    await store.record_step(claim.lease, write("s", 1, status="running", output=None), now)
    assert [(r.status, r.output) for r in await store.get_steps(WF, "a")] == [("running", None)]
    await store.record_step(claim.lease, write("s", 1, output='"done"', ended_at=now + 1), now)
    await store.record_step(claim.lease, write("s", 2, count=2, output='"again"'), now)
    (first, second) = await store.get_steps(WF, "a")
    assert (first.name, first.count, first.status, first.output, first.ended_at) == (
        "s",
        1,
        "complete",
        "done",
        now + 1,
    )
    assert (second.count, second.output) == (2, "again")


async def test_record_step_returns_the_status_showing_a_pause_request(store: Store) -> None:
    await create(store, "a")
    claim = await claim_one(store, "a")
    assert await store.record_step(claim.lease, write("one", 1), store.now()) == "running"
    await store.control(WF, "a", "pause")
    assert await store.record_step(claim.lease, write("two", 2), store.now()) == "waitingForPause"
    await store.control(WF, "a", "resume")
    assert await store.record_step(claim.lease, write("three", 3), store.now()) == "running"
    assert list(await _outputs(store)) == ["one-1", "two-1", "three-1"]


async def test_record_step_with_a_lost_lease_raises_and_writes_nothing(
    store: Store, clock: ManualClock
) -> None:
    """Lost: taken over after expiry (by another owner, or by the same one), finished or
    released."""
    await create(store, "a")
    old = await claim_one(store, "a")
    clock.advance(LEASE + 1)
    other = await claim_one(store, "a", owner="worker-2")
    assert await lease_lost(store.record_step(old.lease, write("stale", 1), store.now()))
    clock.advance(LEASE + 1)
    same = await claim_one(store, "a")  # OWNER again: only the token tells them apart
    for lease in (old.lease, other.lease):
        assert await lease_lost(store.record_step(lease, write("stale", 1), store.now()))
    assert await _outputs(store) == {}
    await store.release(same.lease, store.now())
    assert await lease_lost(store.record_step(same.lease, write("stale", 1), store.now()))
    last = await claim_one(store, "a")
    await store.finish(last.lease, Finish("complete"), store.now())
    assert await lease_lost(store.record_step(last.lease, write("stale", 1), store.now()))
    assert await _outputs(store) == {}


async def test_record_step_consumes_its_event_atomically_with_the_write(
    store: Store, clock: ManualClock
) -> None:
    await create(store, "a")
    await store.send_event(WF, "a", "go", '"payload"')
    await store.send_event(WF, "a", "go", '"second"')
    old = await claim_one(store, "a")
    first, second = old.history.events
    clock.advance(LEASE + 1)
    new = await claim_one(store, "a")
    # the stale activation's consuming write: neither the step nor the consumption
    stale = write("wait", 1, output='"payload"', consume_event=first.pk)
    assert await lease_lost(store.record_step(old.lease, stale, store.now()))
    assert [e.consumed_by for e in await store.get_events(WF, "a")] == [None, None]
    assert await _outputs(store) == {}
    took = write("wait", 1, output='"payload"', consume_event=first.pk)
    await store.record_step(new.lease, took, store.now())
    assert [e.consumed_by for e in await store.get_events(WF, "a")] == ["wait-1", None]
    assert await _outputs(store) == {"wait-1": "payload"}
    await store.release(new.lease, store.now())
    again = await claim_one(store, "a")
    assert [e.pk for e in again.history.events] == [second.pk]


async def test_a_write_marked_new_ends_with_exactly_its_record_if_one_exists_after_all(
    store: Store, clock: ManualClock
) -> None:
    """``StepWrite.new``: a hint only; a record there after all (a retried write whose first
    attempt committed) is replaced, never duplicated or kept; the write is still fenced."""
    await create(store, "a")
    claim = await claim_one(store, "a")
    now = store.now()
    await store.record_step(claim.lease, write("s", 1, output='"first"', new=True), now)
    assert await store.record_step(claim.lease, write("s", 1, output='"retry"', new=True), now)
    assert await _outputs(store) == {"s-1": "retry"}
    # a wrong hint: the record came from an earlier activation's history
    await store.release(claim.lease, store.now())
    again = await claim_one(store, "a")
    await store.record_step(again.lease, write("s", 1, output='"rerun"', new=True), now)
    assert await _outputs(store) == {"s-1": "rerun"}
    assert len(await store.get_steps(WF, "a")) == 1
    clock.advance(LEASE + 1)
    await claim_one(store, "a", owner="worker-2")
    stale = write("t", 2, new=True)
    assert await lease_lost(store.record_step(again.lease, stale, store.now()))
    assert await _outputs(store) == {"s-1": "rerun"}


# -- renew -----------------------------------------------------------------------------------------


async def test_renew_extends_the_leases_still_held_and_returns_their_status(
    store: Store, clock: ManualClock
) -> None:
    await create(store, "a", "b")
    claims = {
        c.instance.id: c for c in (await store.claim(OWNER, [WF], 2, LEASE, store.now())).claims
    }
    leases = [claims["a"].lease, claims["b"].lease]
    assert await store.renew([], LEASE, store.now()) == {}
    clock.advance(LEASE - 10)
    await store.control(WF, "b", "pause")
    held = await store.renew(leases, LEASE, store.now())
    assert held == {leases[0].pk: "running", leases[1].pk: "waitingForPause"}
    assert (await store.get_instance(WF, "a")).ready_at == store.now() + LEASE
    clock.advance(LEASE - 1)  # past the first expiry, not the renewed one
    assert (await store.claim("worker-2", [WF], 10, LEASE, store.now())).claims == []
    await store.renew([leases[1]], LEASE, store.now())
    clock.advance(2)
    (taken,) = (await store.claim("worker-2", [WF], 10, LEASE, store.now())).claims
    assert taken.instance.id == "a"
    assert await store.renew(leases, LEASE, store.now()) == {leases[1].pk: "waitingForPause"}


# -- finish ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("finish", "stored"),
    [
        (Finish("complete", output='{"n": 1}'), ("complete", {"n": 1}, None, None)),
        (
            Finish("errored", error={"name": "Boom", "message": "m"}),
            ("errored", None, {"name": "Boom", "message": "m"}, None),
        ),
        (
            Finish("terminated", rollback={"ran": ["undo-1"], "errors": []}),
            ("terminated", None, None, {"ran": ["undo-1"], "errors": []}),
        ),
    ],
    ids=["complete", "errored", "terminated"],
)
async def test_finish_ends_the_instance_and_releases_the_lease(
    store: Store, clock: ManualClock, finish: Finish, stored: tuple[object, ...]
) -> None:
    await create(store, "a")
    claim = await claim_one(store, "a")
    clock.advance(5)
    now = store.now()
    assert await store.finish(claim.lease, finish, now) == finish.status
    record = await store.get_instance(WF, "a")
    assert (record.status, record.output, record.error, record.rollback) == stored
    assert (record.ended_at, record.updated_at) == (now, now)
    assert (record.lease_owner, record.ready_at) == (None, None)
    assert await lease_lost(store.record_step(claim.lease, write("late", 1), now))
    assert await lease_lost(store.finish(claim.lease, Finish("complete"), now))
    assert await store.renew([claim.lease], LEASE, now) == {}
    assert await claimed_ids(store, at=now + HOUR) == []


async def test_finish_waiting_makes_the_instance_ready_at_wake_at(
    store: Store, clock: ManualClock
) -> None:
    await create(store, "a")
    claim = await claim_one(store, "a")
    wake = store.now() + 60
    finish = Finish("waiting", wake_at=wake, event_seq=claim.event_seq)
    assert await store.finish(claim.lease, finish, store.now()) == "waiting"
    record = await store.get_instance(WF, "a")
    assert (record.status, record.ready_at, record.lease_owner) == ("waiting", wake, None)
    assert await lease_lost(store.record_step(claim.lease, write("late", 1), store.now()))
    assert await claimed_ids(store, at=wake - 1) == []
    assert await claimed_ids(store, at=wake) == ["a"]


async def test_finish_waiting_without_wake_at_waits_for_an_event(
    store: Store, clock: ManualClock
) -> None:
    await create(store, "a")
    claim = await claim_one(store, "a")
    await store.finish(claim.lease, Finish("waiting", event_seq=claim.event_seq), store.now())
    record = await store.get_instance(WF, "a")
    assert (record.status, record.ready_at) == ("waiting", None)
    assert await store.next_wakeup([WF]) is None
    clock.advance(HOUR)
    assert (await store.claim(OWNER, [WF], 10, LEASE, store.now())).claims == []
    await store.send_event(WF, "a", "go", None)
    assert await claimed_ids(store) == ["a"]


async def test_finish_waiting_after_late_events_makes_the_instance_ready_at_once(
    store: Store, clock: ManualClock
) -> None:
    """An event sent after the claim read ``event_seq`` is never missed."""
    await create(store, "a")
    claim = await claim_one(store, "a")
    await store.send_event(WF, "a", "late", None)
    clock.advance(1)
    now = store.now()
    finish = Finish("waiting", wake_at=now + HOUR, event_seq=claim.event_seq)
    assert await store.finish(claim.lease, finish, now) == "waiting"
    assert (await store.get_instance(WF, "a")).ready_at == now
    again = await claim_one(store, "a")
    assert [e.type for e in again.history.events] == ["late"]
    # with the event counted, the next wait sleeps as asked
    finish = Finish("waiting", wake_at=now + HOUR, event_seq=again.event_seq)
    await store.finish(again.lease, finish, now)
    assert (await store.get_instance(WF, "a")).ready_at == now + HOUR


async def test_a_pause_requested_meanwhile_turns_waiting_into_paused(
    store: Store, clock: ManualClock
) -> None:
    await create(store, "a")
    claim = await claim_one(store, "a")
    await store.control(WF, "a", "pause")
    finish = Finish("waiting", wake_at=store.now() + 60, event_seq=claim.event_seq)
    assert await store.finish(claim.lease, finish, store.now()) == "paused"
    record = await store.get_instance(WF, "a")
    assert (record.status, record.ready_at, record.lease_owner) == ("paused", None, None)
    clock.advance(HOUR)
    assert (await store.claim(OWNER, [WF], 10, LEASE, store.now())).claims == []
    assert (await store.control(WF, "a", "resume")).status == "queued"
    assert await claimed_ids(store) == ["a"]


async def test_finish_writes_its_steps_with_the_end_inserting_or_replacing(store: Store) -> None:
    await create(store, "a")
    claim = await claim_one(store, "a")
    now = store.now()
    await store.record_step(claim.lease, write("s", 1, status="running", output=None), now)
    steps = (
        write("s", 1, output='"done"'),
        StepWrite("nap", 1, 2, "sleep", "waiting", wake_at=now + HOUR, started_at=now),
        write("new", 3, output='"fresh"', new=True),
    )
    finish = Finish("waiting", wake_at=now + HOUR, event_seq=claim.event_seq, steps=steps)
    assert await store.finish(claim.lease, finish, now) == "waiting"
    records = await store.get_steps(WF, "a")
    assert [(r.name, r.status, r.output) for r in records] == [
        ("s", "complete", "done"),
        ("nap", "waiting", None),
        ("new", "complete", "fresh"),
    ]
    assert records[1].wake_at == now + HOUR


async def test_finish_with_a_lost_lease_raises_and_writes_none_of_its_steps(
    store: Store, clock: ManualClock
) -> None:
    await create(store, "a")
    old = await claim_one(store, "a")
    clock.advance(LEASE + 1)
    new = await claim_one(store, "a")  # the same owner, a fresh token
    steps = (write("s", 1), write("t", 2))
    for finish in (
        Finish("complete", output='"stale"', steps=steps),
        Finish("waiting", wake_at=store.now() + 60, steps=steps),
    ):
        with pytest.raises(LeaseLostError):
            await store.finish(old.lease, finish, store.now())
    record = await store.get_instance(WF, "a")
    assert (record.status, record.output, record.lease_owner) == ("running", None, OWNER)
    assert await _outputs(store) == {}
    assert await store.finish(new.lease, Finish("complete", steps=steps), store.now())
    assert await _outputs(store) == {"s-1": "x", "t-1": "x"}


# -- a child's end wakes its parent ----------------------------------------------------------------


def _child_of(parent_id: str, child_id: str) -> NewInstance:
    return NewInstance(
        child_id, None, f'{{"workflow": "parent", "id": "{parent_id}", "step": "s"}}'
    )


async def test_a_child_that_ends_makes_its_waiting_parent_ready_at_once(
    store: Store, clock: ManualClock
) -> None:
    """Complete or errored through finish, terminated through control."""
    ends = ("complete", "errored", "terminated")
    for end in ends:
        await in_state(store, "waiting", f"p-{end}", workflow="parent")
    clock.advance(1)
    for end in ends:
        child = f"c-{end}"
        await store.create_instances(
            "child", [_child_of(f"p-{end}", child)], trigger="api", skip_existing=False
        )
        if end == "terminated":
            await store.control("child", child, "terminate")
            continue
        claim = await claim_one(store, child, workflow="child")
        finish = Finish("complete") if end == "complete" else Finish("errored", error={})
        await store.finish(claim.lease, finish, store.now())
    for end in ends:
        assert (await store.get_instance("parent", f"p-{end}")).ready_at == store.now()
    assert await claimed_ids(store, "parent") == [f"p-{end}" for end in sorted(ends)]


async def test_a_parent_running_when_its_child_ends_does_not_sleep_through_it(
    store: Store, clock: ManualClock
) -> None:
    await create(store, "p1", workflow="parent")
    await store.create_instances(
        "child", [_child_of("p1", "c1")], trigger="api", skip_existing=False
    )
    parent = await claim_one(store, "p1", workflow="parent")
    child = await claim_one(store, "c1", workflow="child")
    await store.finish(child.lease, Finish("complete", output='"result"'), store.now())
    clock.advance(1)
    now = store.now()
    finish = Finish("waiting", event_seq=parent.event_seq)  # waits for the child, read as running
    assert await store.finish(parent.lease, finish, now) == "waiting"
    assert (await store.get_instance("parent", "p1")).ready_at == now
    assert await claimed_ids(store, "parent") == ["p1"]


# -- release ---------------------------------------------------------------------------------------


async def test_release_gives_the_instance_back_runnable_at_once(
    store: Store, clock: ManualClock
) -> None:
    await create(store, "a")
    claim = await claim_one(store, "a")
    await store.record_step(claim.lease, write("s", 1), store.now())
    clock.advance(5)
    await store.release(claim.lease, store.now())
    record = await store.get_instance(WF, "a")
    assert (record.status, record.lease_owner, record.ready_at) == ("queued", None, store.now())
    assert await lease_lost(store.record_step(claim.lease, write("t", 2), store.now()))
    taken = await claim_one(store, "a", owner="worker-2")
    assert taken.lease.token != claim.lease.token
    assert [s.name for s in taken.history.steps] == ["s"]  # unfinished: its steps are kept


async def test_release_of_a_lost_lease_changes_nothing(store: Store, clock: ManualClock) -> None:
    await create(store, "a")
    old = await claim_one(store, "a")
    clock.advance(LEASE + 1)
    new = await claim_one(store, "a", owner="worker-2")
    before = await store.get_instance(WF, "a")
    await store.release(old.lease, store.now())
    assert await store.get_instance(WF, "a") == before
    assert await store.record_step(new.lease, write("s", 1), store.now()) == "running"


async def test_release_with_a_pause_pending_leaves_the_instance_paused(store: Store) -> None:
    """Not "runnable at once": the pending pause takes effect (both stores; the docstring does
    not say)."""
    await create(store, "a")
    claim = await claim_one(store, "a")
    await store.control(WF, "a", "pause")
    await store.release(claim.lease, store.now())
    record = await store.get_instance(WF, "a")
    assert (record.status, record.lease_owner, record.ready_at) == ("paused", None, None)
    assert await claimed_ids(store) == []


# -- next_wakeup -----------------------------------------------------------------------------------


async def test_next_wakeup_is_the_earliest_ready_at_among_the_workflows_instances(
    store: Store, clock: ManualClock
) -> None:
    assert await store.next_wakeup([WF]) is None
    t0 = store.now()
    for instance_id, workflow, wake in (("a", WF, 100.0), ("b", WF, 50.0), ("x", "other", 10.0)):
        await create(store, instance_id, workflow=workflow)
        claim = await claim_one(store, instance_id, workflow=workflow)
        await store.finish(claim.lease, Finish("waiting", wake_at=t0 + wake), t0)
    assert await store.next_wakeup([WF]) == t0 + 50
    assert await store.next_wakeup([WF, "other"]) == t0 + 10
    assert await store.next_wakeup(["none"]) is None
    assert await store.next_wakeup([]) is None
    clock.advance(5)
    await create(store, "q")  # runnable now
    assert await store.next_wakeup([WF]) == t0 + 5


async def test_next_wakeup_ignores_paused_and_finished_instances(store: Store) -> None:
    for status in ("paused", "complete", "errored", "terminated"):
        await in_state(store, status, status)
    assert await store.next_wakeup([WF]) is None


async def test_next_wakeup_counts_a_lease_expiry(store: Store) -> None:
    """A leased instance is runnable again when its lease expires (if it is not renewed): both
    stores count that time. (The docstring says "among unleased instances".)"""
    await create(store, "a")
    claim = await claim_one(store, "a")
    assert await store.next_wakeup([WF]) == claim.instance.ready_at == store.now() + LEASE
