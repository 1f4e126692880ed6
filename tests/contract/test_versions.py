"""Versions in the store: an instance keeps the version it was created with, a claim takes
only the versions it is given (never another, whatever its order), next_wakeup looks at those
alone, limits count every version together, and a restart keeps the version."""

from __future__ import annotations

from stepline import ManualClock
from stepline.limits import WorkflowLimits
from stepline.records import WorkerInfo
from stepline.store.base import NewInstance, Store, WorkflowMeta

from ._support import LEASE, OWNER, WF


async def create_versions(store: Store, *pairs: tuple[str, str]) -> None:
    items = [NewInstance(i, None, version=v) for i, v in pairs]
    await store.create_instances(WF, items, trigger="api", skip_existing=False)


async def test_an_instance_keeps_its_version(store: Store) -> None:
    await create_versions(store, ("a", "2"), ("b", "1"))
    assert (await store.get_instance(WF, "a")).version == "2"
    assert (await store.get_instance(WF, "b")).version == "1"
    page = await store.list_instances(WF, None, 10, None)
    assert {r.id: r.version for r in page.instances} == {"a": "2", "b": "1"}


async def test_a_claim_takes_only_the_versions_it_is_given(store: Store) -> None:
    # the v2 instances come first in claim order: a claim of v1 walks past them
    await create_versions(store, ("n1", "2"), ("n2", "2"), ("o1", "1"), ("o2", "1"))
    now = store.now()
    old = await store.claim(OWNER, [WF], 10, LEASE, now, versions={WF: ["1"]})
    assert sorted(c.instance.id for c in old.claims) == ["o1", "o2"]
    assert all(c.instance.version == "1" for c in old.claims)
    new = await store.claim("w2", [WF], 10, LEASE, now, versions={WF: ["2", "3"]})
    assert sorted(c.instance.id for c in new.claims) == ["n1", "n2"]


async def test_a_workflow_absent_from_versions_claims_the_default_version(store: Store) -> None:
    await create_versions(store, ("n", "2"), ("o", "1"))
    claimed = await store.claim(OWNER, [WF], 10, LEASE, store.now(), versions={})
    assert [c.instance.id for c in claimed.claims] == ["o"]


async def test_next_wakeup_sees_only_the_versions_given(store: Store, clock: ManualClock) -> None:
    await create_versions(store, ("n", "2"))
    assert await store.next_wakeup([WF], {WF: ["1"]}) is None
    assert await store.next_wakeup([WF], {WF: ["2"]}) == store.now()
    assert await store.next_wakeup([WF]) == store.now()
    claimed = await store.claim(OWNER, [WF], 10, LEASE, store.now(), versions={WF: ["1"]})
    assert claimed.claims == []
    if claimed.next_look is not None:
        assert claimed.next_look.at is None


async def test_limits_count_every_version_together(store: Store) -> None:
    await store.register_workflows([WorkflowMeta(WF, "m:C", None, WorkflowLimits(concurrency=1))])
    await create_versions(store, ("o", "1"), ("n", "2"))
    now = store.now()
    first = await store.claim(OWNER, [WF], 10, LEASE, now, versions={WF: ["1"]})
    assert [c.instance.id for c in first.claims] == ["o"]
    second = await store.claim("w2", [WF], 10, LEASE, now, versions={WF: ["2"]})
    assert second.claims == []  # the v1 instance holds the workflow's one slot


async def test_a_restart_keeps_the_version(store: Store) -> None:
    await create_versions(store, ("a", "2"))
    await store.control(WF, "a", "restart")
    assert (await store.get_instance(WF, "a")).version == "2"


async def test_a_heartbeat_keeps_the_versions_a_worker_serves(store: Store) -> None:
    now = store.now()
    info = WorkerInfo("w", "h", 1, now, now, 1.0, (WF, "other"), 4, 0, {WF: ("1", "2")})
    await store.workers.heartbeat(info, now)
    (row,) = await store.workers.list_workers()
    assert row.versions == {WF: ("1", "2")}
    assert row.serves(WF, "2") and not row.serves(WF, "3")
    assert row.serves("other", "1") and not row.serves("other", "2")
