"""Flow control in the store: the claim's order (priority, then ready_at), the limits it applies
(workflow and key concurrency, rates, named limits shared by workflows, a worker's caps), what
frees a slot, ``next_wakeup`` for instances held back, ``limit_states``, and deduplication."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from stepline import InstanceAlreadyExistsError, ManualClock
from stepline.errors import DuplicateInstanceError
from stepline.limits import Limit, Rate, WorkflowLimits
from stepline.records import LimitState
from stepline.store.base import Claim, Finish, NewInstance, Store, WorkflowMeta

from ._support import LEASE, OWNER, WF, create
from .conftest import OpenStore

OTHER = "other"
MINUTE = 60.0


async def limit(store: Store, workflow: str = WF, *named: Limit, **limits: Any) -> None:
    """Register ``workflow`` with ``WorkflowLimits(**limits)``, and the ``named`` limits."""
    meta = WorkflowMeta(workflow, "tests:Flow", None, WorkflowLimits(**limits))
    await store.register_workflows([meta], list(named))


async def make(store: Store, *items: NewInstance, workflow: str = WF) -> None:
    await store.create_instances(workflow, items, trigger="api", skip_existing=False)


async def claim(
    store: Store, workflows: tuple[str, ...] = (WF,), n: int = 10, **options: Any
) -> list[Claim]:
    return (await store.claim(OWNER, list(workflows), n, LEASE, store.now(), **options)).claims


def ids(claims: list[Claim]) -> list[str]:
    return sorted(c.instance.id for c in claims)


async def complete(store: Store, taken: Claim) -> None:
    await store.finish(taken.lease, Finish("complete", output="1"), store.now())


# -- order -------------------------------------------------------------------------------------


async def test_claim_takes_lower_priorities_first_and_equal_ones_in_ready_order(
    store: Store, clock: ManualClock
) -> None:
    for instance_id, priority in (("a", 5), ("b", 0), ("c", 5), ("d", -1), ("e", 0)):
        await make(store, NewInstance(instance_id, None, priority=priority))
        clock.advance(1)
    taken = [(await claim(store, n=1))[0].instance.id for _ in range(5)]
    assert taken == ["d", "b", "e", "a", "c"]
    assert await claim(store) == []


async def test_claim_batches_follow_priority_then_ready_order(
    store: Store, clock: ManualClock
) -> None:
    for instance_id, priority in (("a", 2), ("b", 1), ("c", 2), ("d", 1)):
        await make(store, NewInstance(instance_id, None, priority=priority))
        clock.advance(1)
    assert ids(await claim(store, n=3)) == ["a", "b", "d"]
    assert ids(await claim(store, n=3)) == ["c"]


async def test_created_instances_carry_key_priority_and_dedup_key(store: Store) -> None:
    items = [NewInstance("a", None, key="k", priority=3, dedup_key="d"), NewInstance("b", None)]
    created = await store.create_instances(WF, items, trigger="api", skip_existing=False)
    assert [(r.key, r.priority, r.dedup_key) for r in created] == [("k", 3, "d"), (None, 0, None)]
    assert created == [await store.get_instance(WF, "a"), await store.get_instance(WF, "b")]
    taken = {c.instance.id: c.instance for c in await claim(store)}
    assert (taken["a"].key, taken["a"].priority, taken["a"].dedup_key) == ("k", 3, "d")


# -- concurrency -------------------------------------------------------------------------------


async def test_workflow_concurrency_holds_across_claims_and_store_objects(
    store: Store, open_store: OpenStore
) -> None:
    await limit(store, concurrency=2)
    await create(store, *"abcdef")
    await create(store, "x", workflow=OTHER)
    others = [await open_store() for _ in range(2)]
    batches = await asyncio.gather(
        claim(store, (WF, OTHER)), *(claim(s, (WF, OTHER)) for s in others)
    )
    taken = [c for batch in batches for c in batch]
    assert sorted(c.instance.workflow for c in taken) == [OTHER, WF, WF]
    assert await claim(others[0]) == []
    await complete(store, next(c for c in taken if c.instance.workflow == WF))
    assert len(await claim(others[1])) == 1
    assert await claim(store) == []


async def stop(store: Store, clock: ManualClock, running: Claim, how: str) -> None:
    """Make the instance of ``running`` stop running: its activation completes, suspends or is
    released, or with its pause pending (``paused``) suspends; it is paused then suspends,
    terminated, deleted; or its lease expires, a pause pending (``expired-pause``) or not."""
    instance_id, now = running.instance.id, store.now()
    if how in ("pause", "expired-pause"):
        await store.control(WF, instance_id, "pause")
    if how == "complete":
        await complete(store, running)
    elif how in ("waiting", "pause", "paused"):
        await store.finish(running.lease, Finish("waiting", wake_at=now + 3600), now)
    elif how == "release":
        await store.release(running.lease, now)
    elif how == "terminate":
        await store.control(WF, instance_id, "terminate")
    elif how == "delete":
        assert await store.retention.delete_instances(WF, [instance_id]) == 1
    else:
        clock.advance(LEASE)


@pytest.mark.parametrize("how", ["complete", "waiting", "release", "pause"])
async def test_a_slot_frees_when_its_instance_stops_running(
    store: Store, clock: ManualClock, how: str
) -> None:
    await limit(store, concurrency=1)
    await create(store, "a", "b")
    (first,) = await claim(store)
    if how == "pause":
        await store.control(WF, "a", "pause")
        assert await claim(store) == []  # waitingForPause under a live lease still runs
        how = "paused"
    await stop(store, clock, first, how)
    if how == "paused":
        assert (await store.get_instance(WF, "a")).status == "paused"
    (second,) = await claim(store)
    assert second.instance.id == ("a" if how == "release" else "b")


async def test_an_expired_lease_frees_its_slot_at_expiry(store: Store, clock: ManualClock) -> None:
    await limit(store, concurrency=1)
    await create(store, "a", "b")
    (first,) = await claim(store)
    expiry = store.now() + LEASE
    assert await store.next_wakeup([WF]) == expiry  # b is held back: not due before then
    clock.advance(LEASE - 1)
    assert await claim(store) == []
    clock.advance(1)
    assert ids(await claim(store)) == ["b"]  # earlier ready than a's expired lease
    assert first.instance.id == "a"


async def test_after_a_claim_that_fills_the_concurrency_the_next_look_is_the_first_timer(
    store: Store, clock: ManualClock
) -> None:
    """A claim that took all it asked for: with room left under the limit, what else is due is
    runnable now; with the limit full, nothing can start before a timer comes or a lease
    expires (a store may know this from the claim)."""
    await limit(store, concurrency=2)
    await create(store, "a", "b", "c", "d")
    t0 = store.now()
    (a,) = await claim(store, n=1)
    await store.finish(a.lease, Finish("waiting", wake_at=t0 + 5), t0)  # a sleeping one: no slot
    (b,) = await claim(store, n=1)  # one slot left
    assert await store.next_wakeup([WF]) == t0
    clock.advance(1)
    (c,) = await claim(store, n=1)  # the limit is full now
    assert await store.next_wakeup([WF]) == t0 + 5  # a's timer, before b's and c's expiries
    assert (a.instance.id, b.instance.id, c.instance.id) == ("a", "b", "c")
    assert await claim(store) == []


async def test_key_concurrency_holds_each_key_while_others_proceed(store: Store) -> None:
    await limit(store, key_concurrency=1)
    await make(
        store,
        NewInstance("k1-a", None, key="k1"),
        NewInstance("k1-b", None, key="k1"),
        NewInstance("k2-a", None, key="k2"),
        NewInstance("k2-b", None, key="k2"),
        NewInstance("none-a", None),
        NewInstance("none-b", None),
    )
    taken = await claim(store)
    assert ids(taken) == ["k1-a", "k2-a", "none-a", "none-b"]
    assert await claim(store) == []
    await complete(store, next(c for c in taken if c.instance.id == "k1-a"))
    assert ids(await claim(store)) == ["k1-b"]
    assert await store.next_wakeup([WF]) == store.now() + LEASE  # k2-b waits for a slot


async def keyed(store: Store, clock: ManualClock, *ids: str) -> None:
    """Instances ``ids`` in that order, each keyed by its first letter (``a1`` has key ``a``)."""
    for instance_id in ids:
        await make(store, NewInstance(instance_id, None, key=instance_id[0]))
        clock.advance(1)


@pytest.mark.parametrize(
    "how",
    ["complete", "waiting", "release", "pause", "terminate", "delete", "expired", "expired-pause"],
)
async def test_a_key_frees_for_its_next_instance_however_its_instance_stops_running(
    store: Store, clock: ManualClock, how: str
) -> None:
    await limit(store, key_concurrency=1)
    await keyed(store, clock, "a1", "a2", "a3", "b1")
    taken = await claim(store)
    assert ids(taken) == ["a1", "b1"]
    assert await claim(store) == []  # a2 and a3 wait for key a; reading them again...
    assert await claim(store) == []  # ...changes nothing
    await stop(store, clock, next(c for c in taken if c.instance.id == "a1"), how)
    # An expired lease frees b's key too: b1 runs again.
    assert ids(await claim(store)) == (["a2", "b1"] if how.startswith("expired") else ["a2"])
    if how == "expired-pause":
        assert (await store.get_instance(WF, "a1")).status == "paused"
    assert await claim(store) == []


async def test_a_key_runs_its_instances_in_priority_then_ready_order(
    store: Store, clock: ManualClock
) -> None:
    await limit(store, key_concurrency=1)
    await keyed(store, clock, "a1", "a2", "b1", "a3", "b2")
    running = {c.instance.id: c for c in await claim(store)}
    assert await claim(store) == []
    await make(store, NewInstance("a4", None, key="a", priority=-1))  # first in its key's line
    started: list[str] = []
    while running:
        started += sorted(running)
        for taken in running.values():
            await complete(store, taken)
        clock.advance(1)
        running = {c.instance.id: c for c in await claim(store)}
    assert started == ["a1", "b1", "a4", "b2", "a2", "a3"]


async def test_a_busy_keys_line_runs_in_priority_then_the_order_it_became_runnable(
    store: Store, clock: ManualClock
) -> None:
    """The line behind a busy key (set aside at once on SQLite) is created over distinct times,
    so its order by the time each became runnable differs from the order it was stored in: a
    restarted instance, stored first, goes to the back; two created in one batch share a time
    and keep their order."""
    await limit(store, key_concurrency=1)
    await keyed(store, clock, "a0")
    await complete(store, (await claim(store))[0])
    await keyed(store, clock, "a1")
    (running,) = await claim(store)
    await keyed(store, clock, "a2", "a3")
    await make(store, NewInstance("a4", None, key="a", priority=-1))
    clock.advance(1)
    await make(store, NewInstance("a5", None, key="a"), NewInstance("a6", None, key="a"))
    clock.advance(1)
    await store.control(WF, "a0", "restart")
    clock.advance(1)
    await keyed(store, clock, "a7")
    assert await claim(store) == []
    started = []
    for _ in range(7):
        await complete(store, running)
        clock.advance(1)
        (running,) = await claim(store)
        started.append(running.instance.id)
    assert started == ["a4", "a2", "a3", "a5", "a6", "a0", "a7"]
    await complete(store, running)
    assert await claim(store) == []


async def test_a_raised_key_limit_lets_held_instances_run_at_the_next_claim(
    store: Store, clock: ManualClock, open_store: OpenStore
) -> None:
    await limit(store, key_concurrency=1)
    await keyed(store, clock, "a1", "a2", "a3", "a4")
    assert ids(await claim(store)) == ["a1"]
    assert await claim(store) == []
    await limit(await open_store(), key_concurrency=2)  # another process registers more
    assert ids(await claim(store)) == ["a2"]
    await limit(store)
    assert ids(await claim(store)) == ["a3", "a4"]


async def test_an_instance_held_by_its_key_reads_as_due(store: Store, clock: ManualClock) -> None:
    await limit(store, key_concurrency=1)
    await keyed(store, clock, "a1", "a2")
    assert ids(await claim(store)) == ["a1"]
    assert await claim(store) == []
    held = await store.get_instance(WF, "a2")
    assert (held.status, held.due(store.now())) == ("queued", True)
    page = await store.list_instances(WF, None, 10, None)
    (listed,) = [r for r in page.instances if r.id == "a2"]
    assert listed == held
    await store.control(WF, "a2", "pause")
    assert not (await store.get_instance(WF, "a2")).due(store.now())
    await store.control(WF, "a2", "resume")
    assert (await store.get_instance(WF, "a2")).due(store.now())
    assert await claim(store) == []


async def test_a_claim_reads_past_instances_held_back(store: Store, clock: ManualClock) -> None:
    await limit(store, concurrency=1)
    await create(store, *"abcde")
    clock.advance(1)
    await create(store, "x", "y", workflow=OTHER)
    assert sorted(c.instance.id for c in await claim(store, (WF, OTHER), n=3)) == ["a", "x", "y"]


async def test_caps_bound_each_workflow_in_one_claim(store: Store, clock: ManualClock) -> None:
    await create(store, *"abcde")
    clock.advance(1)
    await create(store, "x", "y", "z", workflow=OTHER)
    taken = await claim(store, (WF, OTHER), caps={WF: 2, OTHER: 5})
    assert ids(taken) == ["a", "b", "x", "y", "z"]
    assert ids(await claim(store, (WF, OTHER), caps={WF: 1})) == ["c"]
    assert ids(await claim(store, (WF, OTHER), caps={WF: 0})) == []


async def test_caps_come_on_top_of_the_workflow_limits(store: Store) -> None:
    await limit(store, concurrency=3)
    await create(store, *"abcde")
    assert len(await claim(store, caps={WF: 2})) == 2
    assert len(await claim(store, caps={WF: 2})) == 1


async def test_a_lowered_limit_holds_back_later_claims_only(
    store: Store, open_store: OpenStore
) -> None:
    await limit(store, concurrency=3)
    await create(store, *"abcde")
    taken = await claim(store)
    assert len(taken) == 3
    await limit(await open_store(), concurrency=1)  # another process registers a lower limit
    held = await store.renew([c.lease for c in taken], LEASE, store.now())
    assert sorted(held) == sorted(c.lease.pk for c in taken)  # nothing running is touched
    await complete(store, taken[0])
    await complete(store, taken[1])
    assert await claim(store) == []  # one still runs: the new limit is reached
    await complete(store, taken[2])
    assert len(await claim(store)) == 1
    await limit(store, concurrency=None)
    assert len(await claim(store)) == 1


# -- rates -------------------------------------------------------------------------------------


async def test_a_rate_limits_starts_per_period_and_reopens_when_told(
    store: Store, clock: ManualClock
) -> None:
    await limit(store, rate=Rate(2, MINUTE))
    await create(store, "a", "b", "c")
    t0 = store.now()
    first, second = sorted(await claim(store), key=lambda c: c.instance.id)
    assert (first.instance.id, second.instance.id) == ("a", "b")
    (state,) = await store.flow.limit_states(WF, None)
    assert (state.started, state.rate_count, state.next_start, state.full) == (
        2,
        2,
        t0 + MINUTE,
        True,
    )
    await complete(store, second)
    # a resume is not a start: a sleeps a second and runs again while c waits
    await store.finish(first.lease, Finish("waiting", wake_at=t0 + 1), t0)
    assert await store.next_wakeup([WF]) == t0 + 1
    clock.advance(1)
    (resumed,) = await claim(store)
    assert resumed.instance.id == "a"
    await complete(store, resumed)
    assert await store.next_wakeup([WF]) == t0 + MINUTE  # c: when the rate reopens
    clock.advance(MINUTE - 1.5)
    assert await claim(store) == []
    clock.advance(0.5)
    assert ids(await claim(store)) == ["c"]


async def test_the_next_wakeup_after_a_claim_that_used_up_a_rate_is_its_reopening(
    store: Store,
) -> None:
    """The claim's own starts used the rate up: the next look is due when it reopens, not at
    the leases' expiry (each store may know this from the claim or read it again)."""
    await limit(store, rate=Rate(2, 5.0))
    await create(store, "a", "b", "c", "d")
    t0 = store.now()
    assert len(await claim(store)) == 2
    assert await store.next_wakeup([WF]) == t0 + 5.0


async def test_a_restarted_instance_starts_again_under_the_rate(
    store: Store, clock: ManualClock
) -> None:
    await limit(store, rate=Rate(1, MINUTE))
    await create(store, "a", "b")
    (first,) = await claim(store)
    await complete(store, first)
    clock.advance(MINUTE)
    (second,) = await claim(store)
    await complete(store, second)
    await store.control(WF, first.instance.id, "restart")
    assert await claim(store) == []  # the restart is a start: the rate is used up
    clock.advance(MINUTE)
    assert [c.instance.id for c in await claim(store)] == [first.instance.id]


async def test_a_pause_pending_takes_effect_whatever_the_limits(
    store: Store, clock: ManualClock
) -> None:
    await limit(store, concurrency=2)
    await create(store, "a", "b")
    (first,) = await claim(store, n=1)
    clock.advance(10)
    await claim(store, n=1)  # b runs 10 s longer than a
    await store.control(WF, "a", "pause")
    await limit(store, concurrency=1)
    clock.advance(LEASE - 10)  # a's lease expired, b's lives: the limit is reached
    assert await claim(store) == []
    assert (await store.get_instance(WF, first.instance.id)).status == "paused"


# -- named limits ------------------------------------------------------------------------------


async def test_a_named_limit_is_shared_by_the_workflows_that_use_it(
    store: Store, clock: ManualClock
) -> None:
    shared = Limit("shared", concurrency=2)
    await limit(store, WF, shared, limits=("shared",))
    await limit(store, OTHER, shared, limits=("shared",))
    await create(store, "a", "b", "c")
    await create(store, "x", "y", workflow=OTHER)
    taken = await claim(store)
    assert ids(taken) == ["a", "b"]
    assert await claim(store, (OTHER,)) == []
    await complete(store, taken[0])
    assert ids(await claim(store, (OTHER,))) == ["x"]
    assert await claim(store, (WF, OTHER)) == []


async def test_a_named_rate_counts_the_starts_of_every_workflow_using_it(
    store: Store, clock: ManualClock
) -> None:
    api = Limit("api", rate="1/minute")
    await limit(store, WF, api, limits=("api",))
    await limit(store, OTHER, api, limits=("api",))
    await create(store, "a")
    await create(store, "x", workflow=OTHER)
    t0 = store.now()
    assert ids(await claim(store)) == ["a"]
    assert await claim(store, (OTHER,)) == []
    assert await store.next_wakeup([OTHER]) == t0 + MINUTE
    clock.advance(MINUTE)
    assert ids(await claim(store, (OTHER,))) == ["x"]


# -- next_wakeup -------------------------------------------------------------------------------


async def test_next_wakeup_reports_what_limits_let_run(store: Store, clock: ManualClock) -> None:
    await limit(store, concurrency=1)
    await create(store, "a", "b")
    assert await store.next_wakeup([WF]) == store.now()  # a may run now
    (first,) = await claim(store)
    sleeper = [NewInstance("s", None)]
    await store.create_instances(OTHER, sleeper, trigger="api", skip_existing=False)
    assert await store.next_wakeup([WF, OTHER]) == store.now()  # s is unlimited and due
    await store.finish(first.lease, Finish("waiting", wake_at=store.now() + 5), store.now())
    assert await store.next_wakeup([WF]) == store.now()  # b may run now
    await claim(store)
    assert await store.next_wakeup([WF]) == store.now() + 5  # a's wake-up, though b runs
    clock.advance(5)
    assert await claim(store) == []  # a is held back by b
    assert await store.next_wakeup([WF]) == store.now() + LEASE - 5  # b's lease expiry


# -- limit_states ------------------------------------------------------------------------------


async def test_limit_states_tell_each_limit_and_its_use(store: Store) -> None:
    shared = Limit("shared", concurrency=3, rate="10/hour")
    alone = Limit("alone", concurrency=4)
    declared = dict(concurrency=2, rate=Rate(5, MINUTE), key_concurrency=1, worker_concurrency=7)
    await limit(store, WF, shared, alone, limits=("shared", "alone"), **declared)
    await limit(store, OTHER, shared, limits=("shared",))
    await make(store, NewInstance("a", None, key="k"), NewInstance("b", None, key="k"))
    await create(store, "x", workflow=OTHER)
    assert ids(await claim(store, (WF, OTHER))) == ["a", "x"]
    assert await store.flow.limit_states(WF, "k") == [
        LimitState("workflow", WF, 1, 2, 1, 5, MINUTE, None),
        LimitState("key", "k", 1, 1, 0),
        LimitState("limit", "shared", 2, 3, 2, 10, 3600.0, None),
        LimitState("limit", "alone", 1, 4, 0),
    ]
    states = await store.flow.limit_states(WF, None)
    assert [s.scope for s in states] == ["workflow", "limit", "limit"]
    assert [s.full for s in await store.flow.limit_states(WF, "other-key")] == [False] * 4
    await limit(store, "plain")
    assert await store.flow.limit_states("plain", "k") == []
    assert await store.flow.limit_states("unknown", None) == []
    await limit(store, "local", worker_concurrency=2)
    assert await store.flow.limit_states("local", None) == []


# -- running_by_worker -------------------------------------------------------------------------


async def test_running_by_worker_counts_live_leases_per_worker_and_workflow(
    store: Store, clock: ManualClock
) -> None:
    await create(store, "a", "b", "c", "d")
    await create(store, "x", "y", workflow=OTHER)
    await create(store, "z", workflow="unasked")
    first = (await store.claim("first", [WF, OTHER, "unasked"], 4, LEASE, store.now())).claims
    second = (await store.claim("second", [WF, OTHER, "unasked"], 10, LEASE, store.now())).claims
    assert len(first) + len(second) == 7
    expected = Counter(
        (c.lease.owner, c.instance.workflow)
        for c in [*first, *second]
        if c.instance.workflow != "unasked"
    )
    assert await store.flow.running_by_worker([WF, OTHER], store.now()) == expected
    # An instance that ends or sleeps runs nowhere; one asked to pause runs until it stops.
    ended, asleep, pausing = [c for c in [*first, *second] if c.instance.workflow == WF][:3]
    await complete(store, ended)
    wake = store.now() + 60
    await store.finish(asleep.lease, Finish("waiting", wake_at=wake, event_seq=0), store.now())
    await store.control(WF, pausing.instance.id, "pause")
    expected.subtract([(ended.lease.owner, WF), (asleep.lease.owner, WF)])
    assert await store.flow.running_by_worker([WF, OTHER], store.now()) == {
        k: v for k, v in expected.items() if v
    }
    assert await store.flow.running_by_worker([OTHER], store.now()) == {
        k: v for k, v in expected.items() if k[1] == OTHER
    }
    assert await store.flow.running_by_worker([], store.now()) == {}
    # An expired lease runs nowhere either: its worker is presumed dead.
    assert await store.flow.running_by_worker([WF, OTHER], store.now() + LEASE + 1) == {}


# -- deduplication -----------------------------------------------------------------------------


async def test_a_duplicate_dedup_key_raises_naming_the_holder_and_creates_nothing(
    store: Store,
) -> None:
    await make(store, NewInstance("a", None, dedup_key="order-1"))
    with pytest.raises(DuplicateInstanceError) as caught:
        await make(store, NewInstance("c", None), NewInstance("b", None, dedup_key="order-1"))
    assert (caught.value.workflow, caught.value.dedup_key, caught.value.instance_id) == (
        WF,
        "order-1",
        "a",
    )
    page = await store.list_instances(WF, None, 10, None)
    assert [r.id for r in page.instances] == ["a"]
    await make(store, NewInstance("b", None, dedup_key="order-1"), workflow=OTHER)  # per workflow


async def test_skip_existing_skips_duplicates(store: Store) -> None:
    await make(store, NewInstance("a", None, dedup_key="d1"))
    items = [NewInstance("b", None, dedup_key="d1"), NewInstance("c", None, dedup_key="d2")]
    created = await store.create_instances(WF, items, trigger="api", skip_existing=True)
    assert [r.id for r in created] == ["c"]


async def test_duplicates_within_one_create(store: Store) -> None:
    items = [NewInstance("p", None, dedup_key="z"), NewInstance("q", None, dedup_key="z")]
    with pytest.raises(DuplicateInstanceError) as caught:
        await store.create_instances(WF, items, trigger="api", skip_existing=False)
    assert (caught.value.dedup_key, caught.value.instance_id) == ("z", "p")
    assert (await store.list_instances(WF, None, 10, None)).instances == []
    created = await store.create_instances(WF, items, trigger="api", skip_existing=True)
    assert [r.id for r in created] == ["p"]


async def test_an_existing_id_is_reported_before_a_duplicate_key(store: Store) -> None:
    await make(store, NewInstance("a", None, dedup_key="d"))
    with pytest.raises(InstanceAlreadyExistsError):
        await make(store, NewInstance("a", None, dedup_key="d"))


@pytest.mark.parametrize("end", ["complete", "terminate"])
async def test_a_dedup_key_is_free_once_its_instance_finished(store: Store, end: str) -> None:
    await make(store, NewInstance("a", None, dedup_key="d"))
    if end == "complete":
        (taken,) = await claim(store)
        await complete(store, taken)
    else:
        await store.control(WF, "a", "terminate")
    await make(store, NewInstance("b", None, dedup_key="d"))
    with pytest.raises(DuplicateInstanceError) as caught:
        await make(store, NewInstance("c", None, dedup_key="d"))
    assert caught.value.instance_id == "b"


async def test_restarting_a_finished_instance_whose_dedup_key_is_taken_raises(
    store: Store,
) -> None:
    await make(store, NewInstance("a", None, dedup_key="d"))
    await store.control(WF, "a", "terminate")
    await make(store, NewInstance("b", None, dedup_key="d"))
    with pytest.raises(DuplicateInstanceError) as caught:
        await store.control(WF, "a", "restart")
    assert caught.value.instance_id == "b"
    assert (await store.get_instance(WF, "a")).status == "terminated"


async def test_create_and_claim_applies_dedup(store: Store) -> None:
    await make(store, NewInstance("a", None, dedup_key="d"))
    items = [NewInstance("b", None, dedup_key="d"), NewInstance("c", None, dedup_key="e")]
    created, claims = await store.create_and_claim(
        WF, items, trigger="api", skip_existing=True, owner=OWNER, lease_seconds=LEASE, limit=2
    )
    assert [r.id for r in created] == ["c"] and [c.instance.id for c in claims] == ["c"]
    again = [NewInstance("f", None, dedup_key="g"), NewInstance("h", None, dedup_key="e")]
    with pytest.raises(DuplicateInstanceError) as caught:
        await store.create_and_claim(
            WF, again, trigger="api", skip_existing=False, owner=OWNER, lease_seconds=LEASE, limit=2
        )
    assert caught.value.instance_id == "c"


async def test_of_concurrent_creates_with_one_dedup_key_one_wins(
    store: Store, open_store: OpenStore
) -> None:
    other = await open_store()
    results = await asyncio.gather(
        make(store, NewInstance("a", None, dedup_key="d")),
        make(other, NewInstance("b", None, dedup_key="d")),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in results) == ["DuplicateInstanceError", "NoneType"]
    assert len((await store.list_instances(WF, None, 10, None)).instances) == 1


async def test_a_key_keeps_its_order_however_long_its_instances_wait(
    store: Store, clock: ManualClock
) -> None:
    """Instances that wait minutes for a busy key (a store may look at them again meanwhile)
    still run in the order they were created."""
    await limit(store, key_concurrency=1)
    await keyed(store, clock, "a1", "a2")
    (running,) = await claim(store)

    async def wait(seconds: int) -> None:  # a1 keeps running: its lease is renewed
        for _ in range(seconds // 10):
            clock.advance(10)
            assert await store.renew([running.lease], LEASE, store.now())
            assert await claim(store) == []

    await wait(70)
    await keyed(store, clock, "a3")
    await wait(70)
    await keyed(store, clock, "a4")
    await wait(200)
    started = [running.instance.id]
    for _ in range(3):
        await complete(store, running)
        (running,) = await claim(store)
        started.append(running.instance.id)
    assert started == ["a1", "a2", "a3", "a4"]
