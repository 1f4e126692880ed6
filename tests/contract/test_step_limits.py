"""Named limits on a step in the store: ``acquire_limit`` and ``release_limit`` under a limit's
concurrency and rate, fenced on the lease; slots and instances counted together, whichever way
a limit is used; a release waking the instance parked longest on the limit."""

from __future__ import annotations

import asyncio
import math

import pytest

from stepline import LeaseLostError, ManualClock
from stepline.limits import Limit, Rate, WorkflowLimits
from stepline.store.base import Claim, Finish, Store, WorkflowMeta

from ._support import LEASE, OWNER, WF, create
from .conftest import OpenStore

LISTED = "listed"
"""A workflow whose instances count toward the limit ``api`` themselves."""
MINUTE = 60.0


async def define(store: Store, api: Limit, *, listed: bool = False) -> None:
    metas = [WorkflowMeta(WF, "tests:Plain")]
    if listed:
        metas.append(WorkflowMeta(LISTED, "tests:Listed", None, WorkflowLimits(limits=("api",))))
    await store.register_workflows(metas, [api])


async def running(store: Store, *ids: str, workflow: str = WF) -> dict[str, Claim]:
    """Create and claim instances; their claims by id."""
    await create(store, *ids, workflow=workflow)
    claims = (await store.claim(OWNER, [workflow], len(ids), LEASE, store.now())).claims
    assert sorted(c.instance.id for c in claims) == sorted(ids)
    return {c.instance.id: c for c in claims}


async def take(store: Store, claim: Claim, step: str = "call-1") -> float | None:
    return await store.flow.acquire_limit(claim.lease, "api", step, store.now())


async def give(store: Store, claim: Claim, step: str = "call-1") -> None:
    await store.flow.release_limit(claim.lease, "api", step, store.now())


async def test_slots_up_to_the_concurrency_and_a_release_frees_one(store: Store) -> None:
    await define(store, Limit("api", concurrency=2))
    held = await running(store, "a", "b", "c")
    assert await take(store, held["a"]) is None
    assert await take(store, held["b"]) is None
    assert await take(store, held["c"]) == math.inf
    assert await take(store, held["a"], "other-1") == math.inf  # a second slot of one instance
    await give(store, held["a"])
    await give(store, held["a"])  # nothing left to give: nothing happens
    assert await take(store, held["c"]) is None
    assert await take(store, held["a"]) == math.inf


async def test_each_slot_taken_is_a_start_and_the_rate_reopens_when_told(
    store: Store, clock: ManualClock
) -> None:
    await define(store, Limit("api", rate=Rate(2, MINUTE)))
    held = await running(store, "a", "b")
    t0 = store.now()
    assert await take(store, held["a"]) is None
    await give(store, held["a"])
    clock.advance(10)
    assert await take(store, held["a"], "call-2") is None  # another attempt: another start
    assert await take(store, held["b"]) == t0 + MINUTE
    clock.advance(MINUTE - 10.5)
    assert await take(store, held["b"]) == t0 + MINUTE
    clock.advance(0.5)
    assert await take(store, held["b"]) is None
    assert await take(store, held["a"], "call-3") == t0 + 10 + MINUTE


async def test_acquire_is_fenced_on_the_lease(store: Store, clock: ManualClock) -> None:
    await define(store, Limit("api", concurrency=1))
    held = await running(store, "a")
    await store.control(WF, "a", "terminate")
    with pytest.raises(LeaseLostError):
        await take(store, held["a"])
    other = await running(store, "b")
    assert await take(store, other["b"]) is None  # the refused call took nothing


async def test_a_retried_acquire_holds_the_one_slot_and_counts_one_start(store: Store) -> None:
    await define(store, Limit("api", concurrency=2, rate="2/minute"))
    held = await running(store, "a", "b")
    assert await take(store, held["a"]) is None
    assert await take(store, held["a"]) is None  # its reply was lost: the slot is held already
    assert await take(store, held["b"]) is None  # one slot and one start each


@pytest.mark.parametrize("how", ["expired", "suspended", "terminated"])
async def test_a_slot_whose_lease_is_gone_is_not_counted(
    store: Store, clock: ManualClock, how: str
) -> None:
    await define(store, Limit("api", concurrency=1))
    held = await running(store, "a")
    assert await take(store, held["a"]) is None
    if how == "expired":
        clock.advance(LEASE)
    elif how == "suspended":
        now = store.now()
        await store.finish(held["a"].lease, Finish("waiting", wake_at=now + 3600), now)
    else:
        await store.control(WF, "a", "terminate")
    other = await running(store, "b", workflow="other")  # not a, whose lease may have expired
    assert await take(store, other["b"]) is None


async def test_a_claim_counts_the_slots_of_steps(store: Store) -> None:
    await define(store, Limit("api", concurrency=2), listed=True)
    held = await running(store, "a", "b")
    assert await take(store, held["a"]) is None
    assert await take(store, held["b"]) is None
    await create(store, "x", workflow=LISTED)
    assert (await store.claim(OWNER, [LISTED], 5, LEASE, store.now())).claims == []
    states = await store.flow.limit_states(LISTED, None)
    assert [(s.name, s.running, s.concurrency) for s in states] == [("api", 2, 2)]
    await give(store, held["a"])
    assert [
        c.instance.id for c in (await store.claim(OWNER, [LISTED], 5, LEASE, store.now())).claims
    ] == ["x"]


async def test_a_claim_counts_the_starts_of_steps_toward_the_rate(
    store: Store, clock: ManualClock
) -> None:
    await define(store, Limit("api", rate=Rate(1, MINUTE)), listed=True)
    held = await running(store, "a")
    t0 = store.now()
    assert await take(store, held["a"]) is None
    await create(store, "x", workflow=LISTED)
    assert (await store.claim(OWNER, [LISTED], 5, LEASE, store.now())).claims == []
    assert await store.next_wakeup([LISTED]) == t0 + MINUTE
    clock.advance(MINUTE)
    assert len((await store.claim(OWNER, [LISTED], 5, LEASE, store.now())).claims) == 1


async def test_acquire_counts_running_instances_of_workflows_listing_the_limit(
    store: Store,
) -> None:
    await define(store, Limit("api", concurrency=2), listed=True)
    listed = await running(store, "x", "y", workflow=LISTED)
    plain = await running(store, "a")
    assert await take(store, plain["a"]) == math.inf
    # a listed instance already counts once: its first slot is that one, a second is more
    assert await take(store, listed["x"]) is None
    assert await take(store, listed["x"], "more-1") == math.inf
    await store.finish(listed["y"].lease, Finish("complete", output="1"), store.now())
    assert await take(store, plain["a"]) is None


async def test_a_release_wakes_the_instance_parked_longest_on_the_limit(
    store: Store, clock: ManualClock
) -> None:
    await define(store, Limit("api", concurrency=1))
    now = store.now()
    parked = await running(store, "p1", "p2", "p3")
    for instance_id, wake, limit in (("p1", 30, "api"), ("p2", 20, "api"), ("p3", 10, "x")):
        end = Finish("waiting", wake_at=now + wake, parked_on=limit)
        await store.finish(parked[instance_id].lease, end, now)
    holder = await running(store, "h")
    assert await take(store, holder["h"]) is None
    clock.advance(1)
    await give(store, holder["h"])
    ready = {i: (await store.get_instance(WF, i)).ready_at for i in ("p1", "p2", "p3")}
    assert ready == {"p1": now + 30, "p2": now + 1, "p3": now + 10}
    # p2 runs, and waits again for something else: a claim cleared what it was parked on
    (again,) = (await store.claim(OWNER, [WF], 5, LEASE, store.now())).claims
    assert again.instance.id == "p2"
    await store.finish(again.lease, Finish("waiting", wake_at=now + 5), store.now())
    assert await take(store, holder["h"]) is None
    await give(store, holder["h"])
    assert (await store.get_instance(WF, "p1")).ready_at == now + 1
    assert (await store.get_instance(WF, "p2")).ready_at == now + 5


@pytest.mark.parametrize("end", ["complete", "waiting"])
async def test_an_instance_of_a_listing_workflow_that_stops_running_wakes_a_parked_one(
    store: Store, clock: ManualClock, end: str
) -> None:
    """Its end or its suspension frees its slot of every limit its workflow lists, as a release
    does: the instance parked longest on each is woken, not left to its recheck."""
    await define(store, Limit("api", concurrency=1), listed=True)
    now = store.now()
    parked = await running(store, "p1", "p2")
    for instance_id, wake in (("p1", 30), ("p2", 20)):
        await store.finish(
            parked[instance_id].lease, Finish("waiting", wake_at=now + wake, parked_on="api"), now
        )
    listed = await running(store, "x", workflow=LISTED)
    clock.advance(1)
    if end == "complete":
        finish = Finish("complete", output="1")
    else:
        finish = Finish("waiting", wake_at=now + 3600)
    await store.finish(listed["x"].lease, finish, store.now())
    ready = {i: (await store.get_instance(WF, i)).ready_at for i in ("p1", "p2")}
    assert ready == {"p1": now + 30, "p2": now + 1}
    # An instance of a workflow that lists no limit frees no slot of one: it wakes nobody.
    (p2,) = (await store.claim(OWNER, [WF], 5, LEASE, store.now())).claims
    await store.finish(p2.lease, Finish("complete", output="1"), store.now())
    assert (await store.get_instance(WF, "p1")).ready_at == now + 30


async def test_ends_in_one_batch_wake_as_many_parked_and_a_parking_instance_wakes_none(
    store: Store, clock: ManualClock
) -> None:
    await define(store, Limit("api", concurrency=2), listed=True)
    now = store.now()
    parked = await running(store, "p1", "p2", "p3")
    for n, instance_id in enumerate(("p1", "p2", "p3")):
        end = Finish("waiting", wake_at=now + 30 + n, parked_on="api")
        await store.finish(parked[instance_id].lease, end, now)
    listed = await running(store, "x", "y", workflow=LISTED)
    clock.advance(1)
    done = Finish("complete", output="1")
    await asyncio.gather(*(store.finish(listed[i].lease, done, store.now()) for i in ("x", "y")))
    ready = {i: (await store.get_instance(WF, i)).ready_at for i in ("p1", "p2", "p3")}
    assert ready == {"p1": now + 1, "p2": now + 1, "p3": now + 32}
    # An instance of the listing workflow refused a slot parks on the limit: what it frees
    # leaves no room there, so it wakes nobody parked on it, itself least of all.
    (z,) = (await running(store, "z", workflow=LISTED)).values()
    await store.finish(z.lease, Finish("waiting", wake_at=now + 40, parked_on="api"), now + 1)
    assert (await store.get_instance(LISTED, "z")).ready_at == now + 40
    assert (await store.get_instance(WF, "p3")).ready_at == now + 32


async def test_a_finish_that_wakes_a_parked_instance_signals_that_it_is_runnable(
    store: Store, open_store: OpenStore
) -> None:
    """Its workers learn at once, in this process and (on a store that pushes notifications) in
    others: an ended top-level instance alone makes nothing runnable, so without the wake they
    would not look until a poll."""
    await define(store, Limit("api", concurrency=1), listed=True)
    now = store.now()
    parked = await running(store, "p1")
    await store.finish(
        parked["p1"].lease, Finish("waiting", wake_at=now + 30, parked_on="api"), now
    )
    listed = await running(store, "x", workflow=LISTED)
    here: list[bool] = []
    store.signals.add_ready_listener(lambda: here.append(True))
    elsewhere = asyncio.Event()
    if store.pushes_notifications:
        other = await open_store()
        other.signals.add_ready_listener(elsewhere.set)
    await store.finish(listed["x"].lease, Finish("complete", output="1"), store.now())
    assert here
    if store.pushes_notifications:
        await asyncio.wait_for(elsewhere.wait(), 10)


async def test_an_unknown_limit_raises_lookup_error_naming_it(store: Store) -> None:
    await define(store, Limit("api", concurrency=1))
    held = await running(store, "a")
    with pytest.raises(LookupError, match="'nope'"):
        await store.flow.acquire_limit(held["a"].lease, "nope", "call-1", store.now())
