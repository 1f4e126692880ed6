"""Patch routing in the store: an instance that recorded a patch marker is claimed only by code
that has that patch (``Store.claim``'s ``patches``, by workflow and version); next_wakeup and a
claim's ``next_look`` count it for nothing otherwise; an instance without markers is claimed
whatever the code's patches; a restart forgets the markers it removes."""

from __future__ import annotations

import asyncio

from stepline.limits import WorkflowLimits
from stepline.records import WorkerInfo
from stepline.store.base import Finish, NewInstance, StepWrite, Store, WorkflowMeta
from stepline.store.migrations import load_migrations

from ._support import LEASE, OWNER, WF, claim_one, create, raw, write
from .conftest import OpenStore


def marker(patch: str, seq: int) -> StepWrite:
    """A patch marker's record, as the runtime writes it."""
    return StepWrite(f"patch:{patch}", 1, seq, "patch", "complete")


async def suspended_after(
    store: Store, instance_id: str, *patches: str, in_finish: bool = False, later: float = 0.0
) -> None:
    """Create ``instance_id``, record a step and the markers of ``patches`` (through
    ``record_step``, or with the finish if ``in_finish``), and suspend it, due at once (or
    ``later`` seconds from now)."""
    await create(store, instance_id)
    claim = await claim_one(store, instance_id)
    now = store.now()
    await store.record_step(claim.lease, write("s", 1), now)
    markers = tuple(marker(p, 2 + n) for n, p in enumerate(patches))
    if not in_finish:
        for record in markers:
            await store.record_step(claim.lease, record, now)
    finish = Finish(
        "waiting",
        wake_at=now + later,
        event_seq=claim.event_seq,
        steps=markers if in_finish else (),
    )
    assert await store.finish(claim.lease, finish, now) == "waiting"


async def taken(store: Store, patches: dict[tuple[str, str], list[str]] | None) -> list[str]:
    """The ids a claim with the code's ``patches`` takes now (they stay claimed)."""
    claimed = await store.claim("w2", [WF], 10, LEASE, store.now(), patches=patches)
    return sorted(c.instance.id for c in claimed.claims)


async def test_an_instance_with_a_patch_is_claimed_only_by_code_that_has_it(
    store: Store,
) -> None:
    await suspended_after(store, "a", "x")
    assert await taken(store, {(WF, "1"): []}) == []
    assert await taken(store, {(WF, "1"): ["y"], (WF, "2"): ["x"]}) == []  # of another version
    assert await taken(store, {(WF, "1"): ["y", "x"]}) == ["a"]


async def test_every_patch_an_instance_took_is_needed(store: Store) -> None:
    await suspended_after(store, "a", "y", "x")
    assert (await store.get_instance(WF, "a")).patches == ("x", "y")
    assert await taken(store, {(WF, "1"): ["x"]}) == []
    assert await taken(store, {(WF, "1"): ["y"]}) == []
    assert await taken(store, {(WF, "1"): ["x", "y"]}) == ["a"]


async def test_a_marker_written_with_the_finish_counts_too(store: Store) -> None:
    await suspended_after(store, "a", "x", "y", in_finish=True)
    assert await taken(store, {(WF, "1"): ["x"]}) == []
    assert await taken(store, {(WF, "1"): ["x", "y"]}) == ["a"]


async def test_markers_recorded_together_each_count(store: Store) -> None:
    # written at once: a store that groups commits puts them in one batch
    await create(store, "a", "b")
    claims = (await store.claim(OWNER, [WF], 10, LEASE, store.now())).claims
    now = store.now()
    await asyncio.gather(
        *(
            store.record_step(c.lease, marker(p, n), now)
            for c in claims
            for n, p in enumerate(("x", c.instance.id), start=1)
        )
    )
    for c in claims:
        await store.finish(c.lease, Finish("waiting", wake_at=now, event_seq=c.event_seq), now)
    assert await taken(store, {(WF, "1"): ["x"]}) == []
    assert await taken(store, {(WF, "1"): ["x", "a"]}) == ["a"]
    assert await taken(store, {(WF, "1"): ["x", "b"]}) == ["b"]


async def test_instances_without_patches_are_claimed_whatever_the_code_has(
    store: Store,
) -> None:
    await suspended_after(store, "patched", "x")
    await create(store, "plain")
    assert await taken(store, {}) == ["plain"]
    assert await taken(store, None) == ["patched"]  # None: every patch


async def test_next_wakeup_and_next_look_leave_out_what_the_code_cannot_run(
    store: Store,
) -> None:
    await suspended_after(store, "a", "x")
    assert await store.next_wakeup([WF], None, {(WF, "1"): []}) is None
    assert await store.next_wakeup([WF], None, {(WF, "1"): ["x"]}) == store.now()
    claimed = await store.claim("w2", [WF], 10, LEASE, store.now(), patches={})
    assert claimed.claims == []
    if claimed.next_look is not None:
        assert claimed.next_look.at is None


async def test_routing_holds_under_limits(store: Store) -> None:
    await store.register_workflows([WorkflowMeta(WF, "m:C", None, WorkflowLimits(concurrency=5))])
    await suspended_after(store, "a", "x")
    await create(store, "plain")
    assert await taken(store, {(WF, "1"): []}) == ["plain"]
    # the lease of "plain" is the one timer left, not "a"
    assert await store.next_wakeup([WF], None, {(WF, "1"): []}) == store.now() + LEASE
    assert await taken(store, {(WF, "1"): ["x"]}) == ["a"]


async def test_versions_and_patches_route_together(store: Store) -> None:
    items = [NewInstance("v2", None, version="2")]
    await store.create_instances(WF, items, trigger="api", skip_existing=False)
    claim = (await store.claim(OWNER, [WF], 1, LEASE, store.now(), versions={WF: ["2"]})).claims
    now = store.now()
    await store.record_step(claim[0].lease, marker("x", 1), now)
    await store.finish(
        claim[0].lease, Finish("waiting", wake_at=now, event_seq=claim[0].event_seq), now
    )
    known = {(WF, "2"): ["x"]}
    old = await store.claim("w1", [WF], 10, LEASE, now, versions={WF: ["1"]}, patches=known)
    assert old.claims == []
    new = await store.claim("w2", [WF], 10, LEASE, now, versions={WF: ["2"]}, patches=known)
    assert [c.instance.id for c in new.claims] == ["v2"]


async def test_a_restart_forgets_the_markers_it_removes(store: Store) -> None:
    await suspended_after(store, "kept", "x")
    claim = await claim_one(store, "kept")  # a step after the marker, to restart from
    now = store.now()
    await store.record_step(claim.lease, write("t", 3), now)
    finish = Finish("waiting", wake_at=now + 3600, event_seq=claim.event_seq)
    await store.finish(claim.lease, finish, now)
    for instance_id in ("whole", "from-marker"):
        await suspended_after(store, instance_id, "x", later=3600.0)
    await store.control(WF, "whole", "restart")
    await store.control(WF, "from-marker", "restart", from_step=("patch:x", 1))
    await store.control(WF, "kept", "restart", from_step=("t", 1))
    assert await taken(store, {(WF, "1"): []}) == ["from-marker", "whole"]
    assert await taken(store, {(WF, "1"): ["x"]}) == ["kept"]


async def test_a_heartbeat_keeps_the_patches_a_worker_has(store: Store) -> None:
    now = store.now()
    patches = {WF: {"1": ("x", "y"), "2": ()}}
    info = WorkerInfo("w", "h", 1, now, now, 1.0, (WF,), 4, 0, {WF: ("1", "2")}, patches)
    await store.workers.heartbeat(info, now)
    unsaid = WorkerInfo("u", "h", 2, now, now, 1.0, (WF,), 4, 0, {WF: ("1",)})
    await store.workers.heartbeat(unsaid, now)
    rows = {row.id: row for row in await store.workers.list_workers()}
    assert rows["w"].patches == patches
    assert rows["w"].has_patches(WF, "1", ("y",)) and not rows["w"].has_patches(WF, "2", ("y",))
    assert rows["u"].patches is None


async def test_the_migration_fills_in_the_patches_of_the_markers_recorded_before(
    store: Store, open_store: OpenStore, store_url: str, store_kind: str
) -> None:
    await suspended_after(store, "a", "y", "x")
    await create(store, "plain")
    await store.close()
    # the database as the release before the patches column left it
    (migration,) = [m for m in load_migrations(store_kind) if m.name == "patches"]
    for table in ("instances", "workers"):
        raw(store_url, f"ALTER TABLE {table} DROP COLUMN patches")
    raw(store_url, f"DELETE FROM schema_migrations WHERE version = {migration.version}")
    reopened = await open_store()
    assert (await reopened.get_instance(WF, "a")).patches == ("x", "y")
    assert (await reopened.get_instance(WF, "plain")).patches == ()
    claimed = await reopened.claim("w2", [WF], 10, LEASE, reopened.now(), patches={})
    assert [c.instance.id for c in claimed.claims] == ["plain"]
