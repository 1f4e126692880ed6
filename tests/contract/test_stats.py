"""The fleet-wide figures (``StatsStore``): fleet_counts and ended_counts, on both stores."""

from __future__ import annotations

import pytest

from stepline import ManualClock
from stepline.limits import WorkflowLimits
from stepline.store.base import Finish, FleetCounts, NewInstance, Store, WorkflowMeta
from stepline.store.stats import UNFINISHED_STATUSES

from ._support import HOUR, LEASE, WF, all_states, claim_one, create, raw


async def _counts(store: Store, cap: int = 100) -> dict[str, FleetCounts]:
    return {c.workflow: c for c in await store.stats.fleet_counts(store.now(), cap)}


async def test_fleet_counts_every_registered_workflow_by_unfinished_status(store: Store) -> None:
    await store.register_workflows(
        [
            WorkflowMeta(WF, "W"),
            WorkflowMeta("limited", "L", limits=WorkflowLimits(concurrency=3)),
            WorkflowMeta("idle", "I"),
        ]
    )
    await all_states(store)  # one instance in each status, of WF
    await create(store, "x", workflow="unregistered")
    counts = await store.stats.fleet_counts(store.now(), 100)
    assert [c.workflow for c in counts] == ["idle", "limited", WF]
    wf = counts[2]
    assert wf.statuses == dict.fromkeys(UNFINISHED_STATUSES, 1)
    assert list(wf.statuses) == list(UNFINISHED_STATUSES)
    assert counts[0] == FleetCounts("idle", dict.fromkeys(UNFINISHED_STATUSES, 0))
    assert counts[1].limits == WorkflowLimits(concurrency=3).to_json()
    assert wf.limits is None


async def test_due_counts_what_waits_for_a_worker_and_the_oldest_due_time(
    store: Store, clock: ManualClock
) -> None:
    await store.register_workflows([WorkflowMeta(WF, "W")])
    t0 = store.now()
    await create(store, "first")
    sleeper = await claim_one(store, "first")
    await store.finish(sleeper.lease, Finish("waiting", wake_at=t0 + HOUR), store.now())
    clock.advance(5)
    await create(store, "second")
    runner = await claim_one(store, "second")
    clock.advance(1)
    await create(store, "queued")
    counts = (await _counts(store))[WF]
    assert (counts.due, counts.oldest_due) == (1, store.now())  # not the sleeper, not the runner
    queued_at = store.now()
    clock.advance(LEASE)  # the runner's lease expired: due again, since its expiry
    counts = (await _counts(store))[WF]
    assert runner.instance.ready_at is not None and runner.instance.ready_at > queued_at
    assert (counts.due, counts.oldest_due) == (2, queued_at)
    clock.advance(HOUR)  # the sleeper's timer came
    counts = (await _counts(store))[WF]
    assert (counts.due, counts.oldest_due) == (3, queued_at)
    assert counts.statuses["waiting"] == 1


async def test_due_is_read_across_priorities(store: Store) -> None:
    await store.register_workflows([WorkflowMeta(WF, "W")])
    items = [NewInstance(f"p{p}", None, priority=p) for p in (5, -3, 0, 5)]
    await store.create_instances(WF, items, trigger="api", skip_existing=True)
    counts = (await _counts(store))[WF]
    assert (counts.due, counts.statuses["queued"], counts.oldest_due) == (3, 3, store.now())


async def test_every_count_stops_at_the_cap(store: Store, store_url: str) -> None:
    await store.register_workflows([WorkflowMeta(WF, "W")])
    items = [NewInstance(f"i{n}", None, priority=n % 2) for n in range(7)]
    await store.create_instances(WF, items, trigger="api", skip_existing=True)
    raw(store_url, "UPDATE instances SET held_ready_at = ready_at, ready_at = NULL WHERE pk < 100")
    await create(store, *(f"j{n}" for n in range(6)))
    counts = (await _counts(store, cap=4))[WF]
    assert (counts.statuses["queued"], counts.due, counts.set_aside) == (4, 4, 4)
    counts = (await _counts(store, cap=1000))[WF]
    assert (counts.statuses["queued"], counts.due, counts.set_aside) == (13, 6, 7)
    with pytest.raises(ValueError, match="cap must be at least 1"):
        await store.stats.fleet_counts(store.now(), 0)


async def test_ended_counts_by_bucket_and_status(store: Store, clock: ManualClock) -> None:
    await store.register_workflows([WorkflowMeta(WF, "W")])
    since = store.now()
    ends = [
        ("a", "complete", 10),
        ("b", "errored", 15),
        ("c", "complete", 70),
        ("d", "complete", 75),
    ]
    for instance_id, status, at in ends:
        clock.set(since + at)
        await create(store, instance_id)
        claim = await claim_one(store, instance_id)
        finish = (
            Finish("complete")
            if status == "complete"
            else Finish(status, error={"name": "E", "message": "m"})
        )  # type: ignore[arg-type]
        await store.finish(claim.lease, finish, store.now())
    await create(store, "unfinished")
    await store.control(WF, "unfinished", "terminate")  # ended at since + 75, terminated
    counts = await store.stats.ended_counts(since, 60.0, 3, 100)
    assert [(c.start - since, c.status, c.count) for c in counts] == [
        (0.0, "complete", 1),
        (0.0, "errored", 1),
        (60.0, "complete", 2),
        (60.0, "terminated", 1),
    ]
    capped = await store.stats.ended_counts(since, 60.0, 2, 2)
    assert sum(c.count for c in capped if c.start == since + 60) == 2
    assert await store.stats.ended_counts(since + 120, 60.0, 5, 100) == []
