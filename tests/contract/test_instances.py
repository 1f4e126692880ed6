"""Client-side instance operations: create_instances, create_and_claim, get_instance,
list_instances, get_steps, unfinished_steps; and how records read back (encoded JSON decoded,
float times)."""

from __future__ import annotations

import pytest

from stepline import InstanceAlreadyExistsError, InstanceNotFoundError, ManualClock
from stepline.records import Attempt, StepRecord
from stepline.store.base import Finish, History, NewInstance, StepWrite, Store

from ._support import LEASE, OWNER, WF, claim_one, claimed_ids, create, write
from .conftest import OpenStore

PARENT = '{"workflow": "parent", "id": "p1", "step": "start"}'


# -- create_instances ------------------------------------------------------------------------------


async def test_create_instances_returns_the_stored_instances_in_the_order_of_items(
    store: Store,
) -> None:
    now = store.now()
    items = [
        NewInstance("c", '{"n": 3}'),
        NewInstance("a", None),
        NewInstance("b", '["x"]', parent=PARENT),
    ]
    created = await store.create_instances(WF, items, trigger="cron", skip_existing=False)
    assert [r.id for r in created] == ["c", "a", "b"]
    assert created == [await store.get_instance(WF, i) for i in ("c", "a", "b")]
    assert [r.params for r in created] == [{"n": 3}, None, ["x"]]
    assert [r.parent for r in created] == [
        None,
        None,
        {"workflow": "parent", "id": "p1", "step": "start"},
    ]
    for record in created:
        assert (record.workflow, record.status, record.trigger) == (WF, "queued", "cron")
        assert (record.output, record.error, record.rollback) == (None, None, None)
        assert (record.created_at, record.updated_at) == (now, now)
        assert (record.started_at, record.ended_at, record.lease_owner) == (None, None, None)
    assert len({r.pk for r in created}) == 3


async def test_create_instances_counts_a_repeated_id_once_as_its_first_occurrence(
    store: Store,
) -> None:
    items = [NewInstance("a", '"first"'), NewInstance("b", None), NewInstance("a", '"second"')]
    created = await store.create_instances(WF, items, trigger="api", skip_existing=False)
    assert [(r.id, r.params) for r in created] == [("a", "first"), ("b", None)]
    assert (await store.get_instance(WF, "a")).params == "first"


async def test_created_instances_are_runnable_at_once(store: Store) -> None:
    created = await create(store, "a", "b")
    assert all(r.ready_at is not None and r.ready_at <= store.now() for r in created)
    assert await claimed_ids(store) == ["a", "b"]


async def test_created_instances_are_durable_when_create_returns(
    store: Store, open_store: OpenStore
) -> None:
    await create(store, "a")
    other = await open_store()
    assert (await other.get_instance(WF, "a")).status == "queued"


async def test_an_existing_id_raises_already_exists_and_nothing_is_created(store: Store) -> None:
    await create(store, "old")
    items = [NewInstance("new1", None), NewInstance("old", '"again"'), NewInstance("new2", None)]
    with pytest.raises(InstanceAlreadyExistsError) as refused:
        await store.create_instances(WF, items, trigger="api", skip_existing=False)
    assert (refused.value.workflow, refused.value.instance_id) == (WF, "old")
    for missing in ("new1", "new2"):
        with pytest.raises(InstanceNotFoundError):
            await store.get_instance(WF, missing)
    assert (await store.get_instance(WF, "old")).params is None


async def test_skip_existing_creates_and_returns_only_the_new_ids(store: Store) -> None:
    await create(store, "old")
    items = [NewInstance("new1", None), NewInstance("old", '"again"'), NewInstance("new2", None)]
    created = await store.create_instances(WF, items, trigger="api", skip_existing=True)
    assert [r.id for r in created] == ["new1", "new2"]
    assert (await store.get_instance(WF, "old")).params is None
    assert await store.create_instances(WF, items, trigger="api", skip_existing=True) == []


async def test_the_same_id_in_another_workflow_is_another_instance(store: Store) -> None:
    (a,) = await create(store, "same")
    (b,) = await create(store, "same", workflow="other")
    assert a.pk != b.pk and b.workflow == "other"


# -- create_and_claim ------------------------------------------------------------------------------


async def test_create_and_claim_claims_the_first_limit_distinct_ids(store: Store) -> None:
    now = store.now()
    items = [NewInstance(i, None) for i in ("a", "b", "a", "c", "d")]
    created, claims = await store.create_and_claim(
        WF, items, trigger="api", skip_existing=False, owner=OWNER, lease_seconds=LEASE, limit=2
    )
    assert [r.id for r in created] == ["a", "b", "c", "d"]
    assert [c.instance.id for c in claims] == ["a", "b"]
    for claim in claims:
        record = claim.instance
        assert record == await store.get_instance(WF, record.id)
        assert (record.status, record.lease_owner) == ("running", OWNER)
        assert (record.started_at, record.updated_at, record.ready_at) == (now, now, now + LEASE)
        assert (claim.lease.pk, claim.lease.token, claim.lease.owner) == (record.pk, 1, OWNER)
        assert (claim.control, claim.event_seq, claim.history) == (None, 0, History([], []))
    assert [r for r in created if r.id in ("a", "b")] == [c.instance for c in claims]
    for queued in created[2:]:
        assert queued == await store.get_instance(WF, queued.id)
        assert (queued.status, queued.lease_owner, queued.ready_at) == ("queued", None, now)


async def test_create_and_claim_an_id_skipped_as_existing_uses_up_its_place(store: Store) -> None:
    await create(store, "a")
    items = [NewInstance(i, None) for i in ("a", "b", "c")]
    created, claims = await store.create_and_claim(
        WF, items, trigger="api", skip_existing=True, owner=OWNER, lease_seconds=LEASE, limit=2
    )
    assert [r.id for r in created] == ["b", "c"]
    assert [c.instance.id for c in claims] == ["b"]
    assert [r.status for r in created] == ["running", "queued"]
    assert (await store.get_instance(WF, "a")).status == "queued"


async def test_create_and_claim_an_existing_id_raises_and_nothing_is_created_or_claimed(
    store: Store,
) -> None:
    await create(store, "old")
    items = [NewInstance("new", None), NewInstance("old", None)]
    with pytest.raises(InstanceAlreadyExistsError):
        await store.create_and_claim(
            WF, items, trigger="api", skip_existing=False, owner=OWNER, lease_seconds=LEASE, limit=2
        )
    with pytest.raises(InstanceNotFoundError):
        await store.get_instance(WF, "new")
    assert (await store.get_instance(WF, "old")).lease_owner is None


async def test_create_and_claim_leases_as_if_claim_had_taken_them(
    store: Store, clock: ManualClock
) -> None:
    """The lease holds until ``now + lease_seconds`` and fences like a claim's."""
    items = [NewInstance(i, None) for i in ("a", "b")]
    _, (claim,) = await store.create_and_claim(
        WF, items, trigger="api", skip_existing=False, owner=OWNER, lease_seconds=LEASE, limit=1
    )
    assert await store.record_step(claim.lease, write("s", 1), store.now()) == "running"
    assert await claimed_ids(store) == ["b"]  # a is leased
    clock.advance(LEASE - 1)
    assert await claimed_ids(store) == []
    clock.advance(2)
    taken = {
        c.instance.id: c
        for c in (await store.claim("worker-2", [WF], 10, LEASE, store.now())).claims
    }
    assert set(taken) == {"a", "b"}  # both leases expired
    assert taken["a"].lease.token != claim.lease.token
    assert [s.name for s in taken["a"].history.steps] == ["s"]


async def test_create_and_claim_is_durable_when_it_returns(
    store: Store, open_store: OpenStore
) -> None:
    items = [NewInstance(i, None) for i in ("a", "b")]
    created, _ = await store.create_and_claim(
        WF, items, trigger="api", skip_existing=False, owner=OWNER, lease_seconds=LEASE, limit=1
    )
    other = await open_store()
    assert [await other.get_instance(WF, r.id) for r in created] == created


# -- get_instance, list_instances ------------------------------------------------------------------


async def test_get_instance_of_an_unknown_id_raises_instance_not_found(store: Store) -> None:
    await create(store, "a")
    with pytest.raises(InstanceNotFoundError) as missing:
        await store.get_instance(WF, "b")
    assert (missing.value.workflow, missing.value.instance_id) == (WF, "b")
    with pytest.raises(InstanceNotFoundError):
        await store.get_instance("other", "a")


async def _pages(
    store: Store,
    limit: int,
    workflow: str | None = None,
    status: str | None = None,
    *,
    oldest_first: bool = False,
) -> list[list[str]]:
    """The ids of every page, following the cursors to the end."""
    pages: list[list[str]] = []
    cursor: str | None = None
    while True:
        page = await store.list_instances(
            workflow, status, limit, cursor, oldest_first=oldest_first
        )
        pages.append([r.id for r in page.instances])
        if page.cursor is None:
            return pages
        cursor = page.cursor


async def test_list_instances_pages_newest_first_or_oldest_first(store: Store) -> None:
    await create(store, "a", "b", "c")
    await create(store, "x", workflow="other")
    await create(store, "d", "e")
    assert await _pages(store, 2, workflow=WF) == [["e", "d"], ["c", "b"], ["a"]]
    assert await _pages(store, 2, workflow=WF, oldest_first=True) == [["a", "b"], ["c", "d"], ["e"]]
    assert await _pages(store, 5, workflow=WF) == [["e", "d", "c", "b", "a"]]
    assert await _pages(store, 10) == [["e", "d", "x", "c", "b", "a"]]
    page = await store.list_instances(WF, None, 10, None)
    assert page.instances == [await store.get_instance(WF, i) for i in "edcba"]
    with pytest.raises(ValueError, match="invalid cursor"):  # (not in the docstring)
        await store.list_instances(WF, None, 10, "not a cursor")


async def test_list_instances_filters_by_workflow_and_status(store: Store) -> None:
    await create(store, "a", "b", "c", "d")
    await create(store, "x", "y", workflow="other")
    for workflow, instance_id in ((WF, "b"), (WF, "d"), ("other", "y")):
        await store.control(workflow, instance_id, "pause")
    assert await _pages(store, 10, status="paused") == [["y", "d", "b"]]
    assert await _pages(store, 1, workflow=WF, status="paused") == [["d"], ["b"]]
    assert await _pages(store, 10, workflow="other", status="queued") == [["x"]]
    assert await _pages(store, 10, workflow="none") == [[]]


# -- get_steps and how records read back -----------------------------------------------------------


async def test_get_steps_returns_the_history_in_start_order(store: Store) -> None:
    await create(store, "a", "b")
    claims = (await store.claim(OWNER, [WF], 2, LEASE, store.now())).claims
    lease = {c.instance.id: c.lease for c in claims}
    for name, seq in (("third", 3), ("first", 1), ("second", 2)):
        await store.record_step(lease["a"], write(name, seq), store.now())
    await store.record_step(lease["b"], write("elsewhere", 1), store.now())
    assert [s.name for s in await store.get_steps(WF, "a")] == ["first", "second", "third"]
    assert [s.seq for s in await store.get_steps(WF, "a")] == [1, 2, 3]
    with pytest.raises(InstanceNotFoundError):
        await store.get_steps(WF, "nope")


async def test_a_step_reads_back_as_written_with_its_json_decoded(
    store: Store, clock: ManualClock
) -> None:
    """Every field of a StepWrite reads back, in get_steps and in the next claim's history;
    times are float seconds, whole or not."""
    await create(store, "a")
    claim = await claim_one(store, "a")
    t = store.now()
    attempts = (
        Attempt(1, t, t + 0.25, {"name": "ValueError", "message": "no"}),
        Attempt(2, t + 1, None),
    )
    written = StepWrite(
        "fetch", 2, 7, "do", "running", '{"rows": [1, 2.5, "ü"]}',
        error={"name": "ValueError", "message": "no"}, attempts=attempts, wake_at=t + 60,
        started_at=t, ended_at=t + 2, info={"timeout": 30, "tags": ["a"]},
    )  # fmt: skip
    await store.record_step(claim.lease, written, t)
    expected = StepRecord(
        "fetch", 2, 7, "do", "running", {"rows": [1, 2.5, "ü"]},
        {"name": "ValueError", "message": "no"}, attempts, t + 60, t, t + 2,
        {"timeout": 30, "tags": ["a"]},
    )  # fmt: skip
    assert await store.get_steps(WF, "a") == [expected]
    await store.release(claim.lease, store.now())
    clock.advance(1)
    again = await claim_one(store, "a")
    assert again.history.steps == [expected]
    for record in (*await store.get_steps(WF, "a"), *again.history.steps):
        for value in (record.wake_at, record.started_at, record.ended_at):
            assert isinstance(value, float)
        for attempt in record.attempts:
            assert isinstance(attempt.started_at, float)


async def test_unfinished_steps_reads_the_running_and_waiting_steps_of_many_instances(
    store: Store,
) -> None:
    """One read for a whole page of instances (lists show how each one waits): by instance pk,
    in start order, as stored; finished steps, instances without any and unknown pks absent."""
    created = await create(store, "a", "b", "c")
    pk = {record.id: record.pk for record in created}
    claims = (await store.claim(OWNER, [WF], 3, LEASE, store.now())).claims
    lease = {c.instance.id: c.lease for c in claims}
    t = store.now()
    failed = (Attempt(1, t, t + 1, {"name": "ValueError", "message": "no"}),)
    retrying = StepWrite("charge", 1, 2, "do", "waiting", attempts=failed, wake_at=t + 10)
    running = StepWrite("other", 1, 3, "do", "running", info={"running_attempt": 1})
    sleeping = StepWrite("nap", 1, 1, "sleep", "waiting", wake_at=t - 5, started_at=t - 10)
    for lease_of, step in (
        ("a", running),
        ("a", write("done", 1)),
        ("a", retrying),
        ("b", write("done", 1)),
        ("c", sleeping),
    ):
        await store.record_step(lease[lease_of], step, t)
    found = await store.operations.unfinished_steps(
        [pk["c"], pk["b"], pk["a"], max(pk.values()) + 100]
    )
    assert found == {
        pk["a"]: [
            StepRecord("charge", 1, 2, "do", "waiting", attempts=failed, wake_at=t + 10),
            StepRecord("other", 1, 3, "do", "running", info={"running_attempt": 1}),
        ],
        pk["c"]: [StepRecord("nap", 1, 1, "sleep", "waiting", wake_at=t - 5, started_at=t - 10)],
    }
    assert await store.operations.unfinished_steps([]) == {}
    many = [*range(max(pk.values()) + 1, max(pk.values()) + 1200), pk["c"]]  # several batches
    assert await store.operations.unfinished_steps(many) == {pk["c"]: found[pk["c"]]}


async def test_instance_times_are_float_seconds(store: Store) -> None:
    await create(store, "a")
    claim = await claim_one(store, "a")
    for record in (claim.instance, await store.get_instance(WF, "a")):
        for value in (record.created_at, record.updated_at, record.started_at, record.ready_at):
            assert isinstance(value, float)
    await store.finish(claim.lease, Finish("complete", output='{"ok": true}'), store.now())
    finished = await store.get_instance(WF, "a")
    assert isinstance(finished.ended_at, float) and finished.output == {"ok": True}


async def test_the_traceparent_given_at_creation_is_kept_for_every_reader(store: Store) -> None:
    trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    created = await store.create_instances(
        WF, [NewInstance("a", None, traceparent=trace), NewInstance("b", None)],
        trigger="api", skip_existing=False,
    )  # fmt: skip
    assert [c.traceparent for c in created] == [trace, None]
    assert (await store.get_instance(WF, "a")).traceparent == trace
    claims = (await store.claim(OWNER, [WF], 10, LEASE, store.now())).claims
    assert {c.instance.id: c.instance.traceparent for c in claims} == {"a": trace, "b": None}
    new, leased = await store.create_and_claim(
        WF, [NewInstance("c", None, traceparent=trace)], trigger="api", skip_existing=False,
        owner=OWNER, lease_seconds=LEASE, limit=1,
    )  # fmt: skip
    assert new[0].traceparent == leased[0].instance.traceparent == trace
    page = await store.list_instances(WF, None, 10, None)
    assert {r.id: r.traceparent for r in page.instances} == {"a": trace, "b": None, "c": trace}
