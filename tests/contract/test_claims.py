"""claim: which instances it takes, the lease it gives, the history it carries, and that
concurrent claims never share an instance."""

from __future__ import annotations

import asyncio

from stepline import ManualClock
from stepline.records import PendingEvent
from stepline.store.base import Finish, NewInstance, Store

from ._support import (
    HOUR,
    LEASE,
    OWNER,
    WF,
    claim_one,
    claimed_ids,
    create,
    lease_lost,
    raw,
    write,
)
from .conftest import OpenStore


async def test_claim_takes_runnable_instances_earliest_ready_first(
    store: Store, clock: ManualClock
) -> None:
    await create(store, "a")
    clock.advance(1)
    await create(store, "b")
    clock.advance(1)
    await create(store, "c")
    clock.advance(1)
    await store.control(WF, "a", "pause")
    await store.control(WF, "a", "resume")  # a is ready again, latest of all
    claims = (await store.claim(OWNER, [WF], 2, LEASE, store.now())).claims
    assert [c.instance.id for c in claims] == ["b", "c"]
    assert [
        c.instance.id for c in (await store.claim(OWNER, [WF], 2, LEASE, store.now())).claims
    ] == ["a"]


async def test_claim_takes_at_most_limit_instances_of_the_given_workflows(store: Store) -> None:
    await create(store, "a", "b", "c")
    await create(store, "x", workflow="other")
    await create(store, "y", workflow="third")
    assert len((await store.claim(OWNER, [WF], 2, LEASE, store.now())).claims) == 2
    claims = (await store.claim(OWNER, [WF, "other"], 10, LEASE, store.now())).claims
    assert sorted((c.instance.workflow, c.instance.id) for c in claims)[0] == ("other", "x")
    assert len(claims) == 2  # x and the third of WF
    assert (await store.claim(OWNER, [WF, "other"], 10, LEASE, store.now())).claims == []
    assert (await store.claim(OWNER, ["third"], 0, LEASE, store.now())).claims == []
    assert (await store.claim(OWNER, [], 10, LEASE, store.now())).claims == []


async def test_claim_takes_only_instances_ready_at_the_now_it_is_given(store: Store) -> None:
    await create(store, "a")
    claim = await claim_one(store, "a")
    wake = store.now() + 100
    await store.finish(claim.lease, Finish("waiting", wake_at=wake, event_seq=0), store.now())
    assert (await store.claim(OWNER, [WF], 10, LEASE, wake - 0.5)).claims == []
    (woken,) = (await store.claim(OWNER, [WF], 10, LEASE, wake)).claims
    assert woken.instance.id == "a" and woken.instance.ready_at == wake + LEASE


async def test_claim_makes_queued_and_waiting_instances_running_under_a_fresh_lease(
    store: Store, clock: ManualClock
) -> None:
    await create(store, "a")
    t0 = store.now()
    first = await claim_one(store, "a")
    record = first.instance
    assert (record.status, record.lease_owner, record.started_at) == ("running", OWNER, t0)
    assert (record.updated_at, record.ready_at) == (t0, t0 + LEASE)
    assert (first.lease.pk, first.lease.owner) == (record.pk, OWNER)
    assert record == await store.get_instance(WF, "a")
    await store.finish(first.lease, Finish("waiting", wake_at=t0 + 10), t0)
    clock.advance(10)
    second = await claim_one(store, "a", owner="worker-2")
    assert second.instance.status == "running"
    assert second.lease.token != first.lease.token
    assert second.instance.started_at == t0  # the first start is kept
    assert second.instance.ready_at == store.now() + LEASE


async def test_claim_skips_a_live_lease_and_takes_an_expired_one(
    store: Store, clock: ManualClock
) -> None:
    await create(store, "a")
    first = await claim_one(store, "a")
    clock.advance(LEASE - 1)
    assert (await store.claim("worker-2", [WF], 10, LEASE, store.now())).claims == []
    clock.advance(2)
    taken = await claim_one(store, "a", owner="worker-2")
    assert taken.instance.status == "running" and taken.instance.lease_owner == "worker-2"
    assert taken.lease.token != first.lease.token


async def test_a_lease_claimed_again_by_the_same_owner_gets_a_fresh_token(
    store: Store, clock: ManualClock
) -> None:
    await create(store, "a")
    tokens = []
    for _ in range(3):
        tokens.append((await claim_one(store, "a")).lease.token)
        clock.advance(LEASE + 1)
    assert len(set(tokens)) == 3


LEASE_COLUMNS = "status, lease_owner, lease_token, lease_expires_at, ready_at, started_at"


async def test_a_claim_the_database_lost_and_made_again_fences_out_the_first(
    store: Store, store_url: str
) -> None:
    """A server crash can undo a claim whose worker already runs the instance (PostgreSQL
    commits claims without waiting for the WAL flush). The same worker then claims it again;
    the activation of the lost claim must be fenced out, so the new lease must differ from the
    lost one although the row is back exactly as it was before the lost claim."""
    await create(store, "a")
    (before,) = raw(store_url, f"SELECT {LEASE_COLUMNS} FROM instances WHERE id = 'a'")
    lost = await claim_one(store, "a")
    values = ", ".join("NULL" if v is None else repr(v) for v in before)
    raw(store_url, f"UPDATE instances SET ({LEASE_COLUMNS}) = ({values}) WHERE id = 'a'")
    again = await claim_one(store, "a")
    assert again.lease.owner == lost.lease.owner == OWNER
    assert again.lease != lost.lease
    assert await lease_lost(store.record_step(lost.lease, write("s", 1), store.now()))
    assert await store.record_step(again.lease, write("s", 1), store.now())


async def test_claim_never_returns_the_same_instance_twice_to_concurrent_claims(
    store: Store, open_store: OpenStore, clock: ManualClock
) -> None:
    others = [await open_store(), await open_store()]
    ids = [f"i{n:02}" for n in range(24)]
    await store.create_instances(
        WF, [NewInstance(i, None) for i in ids], trigger="api", skip_existing=False
    )
    stores = [store, *others]
    for _ in range(3):  # fresh instances, then the same ones once their leases expired
        results = await asyncio.gather(
            *(s.claim(f"worker-{n}", [WF], 12, LEASE, s.now()) for n, s in enumerate(stores))
        )
        taken = [c.instance.id for claimed in results for c in claimed.claims]
        assert len(taken) == len(set(taken)), f"an instance was claimed twice: {sorted(taken)}"
        pks = [c.lease.pk for claimed in results for c in claimed.claims]
        assert len(pks) == len(set(pks))
        clock.advance(LEASE + 1)


async def test_a_claim_carries_the_history_it_read_under_its_new_lease(
    store: Store, clock: ManualClock
) -> None:
    """Recorded steps in start order, unconsumed events in send order; ``event_seq`` counts
    every event sent."""
    await create(store, "a")
    first = await claim_one(store, "a")
    assert (first.event_seq, first.history.steps, first.history.events) == (0, [], [])
    t0 = store.now()
    await store.send_event(WF, "a", "one", '"1"')
    clock.advance(1)
    await store.send_event(WF, "a", "two", '{"n": 2}')
    await store.record_step(first.lease, write("later", 2), t0)
    await store.record_step(first.lease, write("earlier", 1), t0)
    await store.release(first.lease, store.now())
    clock.advance(1)
    await store.send_event(WF, "a", "three", None)
    second = await claim_one(store, "a")
    assert second.event_seq == 3
    assert [s.name for s in second.history.steps] == ["earlier", "later"]
    assert second.history.steps == await store.get_steps(WF, "a")
    events = second.history.events
    assert [(e.type, e.payload, e.timestamp) for e in events] == [
        ("one", "1", t0),
        ("two", {"n": 2}, t0 + 1),
        ("three", None, t0 + 2),
    ]
    assert all(isinstance(e, PendingEvent) and isinstance(e.timestamp, float) for e in events)
    consume = write("wait", 3, consume_event=events[0].pk)
    await store.record_step(second.lease, consume, store.now())
    await store.release(second.lease, store.now())
    third = await claim_one(store, "a")
    assert [e.type for e in third.history.events] == ["two", "three"]  # consumed: not pending
    assert third.event_seq == 3


async def test_a_claim_history_holds_every_event_its_event_seq_counts(
    store: Store, open_store: OpenStore
) -> None:
    """Events sent while claims run: each claim's history holds at least the events its
    ``event_seq`` counts (none is consumed here)."""
    sender = await open_store()
    await create(store, "a")
    for n in range(6):
        sent, claimed = await asyncio.gather(
            sender.send_event(WF, "a", "go", str(n)),
            store.claim(OWNER, [WF], 1, LEASE, store.now()),
        )
        assert sent is None
        claims = claimed.claims
        if not claims:  # the claim skipped the row the event's transaction held
            claims = (await store.claim(OWNER, [WF], 1, LEASE, store.now())).claims
        (claim,) = claims
        assert len(claim.history.events) >= claim.event_seq, (n, claim.event_seq)
        await store.release(claim.lease, store.now())


async def test_an_expired_lease_with_a_pause_pending_is_paused_not_claimed(
    store: Store, clock: ManualClock
) -> None:
    """A worker that died with a pause pending: the pause takes effect when its lease ends.
    (Not in the claim docstring; both stores do it, and the worker relies on it.)"""
    await create(store, "a")
    await claim_one(store, "a")
    await store.control(WF, "a", "pause")
    clock.advance(LEASE + 1)
    assert await claimed_ids(store) == []
    record = await store.get_instance(WF, "a")
    assert (record.status, record.lease_owner, record.ready_at) == ("paused", None, None)
    clock.advance(HOUR)
    assert await claimed_ids(store) == []
