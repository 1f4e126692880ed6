"""expire_deadlines, close_children and create_keyed against their contracts, on both stores."""

from __future__ import annotations

import asyncio

import pytest

from stepline import InstanceAlreadyExistsError, ManualClock
from stepline.store.base import NewInstance, Store
from stepline.store.closing import DEADLINE_BATCH

from ._support import HOUR, LEASE, UNFINISHED, WF, claim_one, in_state, lease_lost, raw, write
from .conftest import OpenStore


async def _with_deadline(store: Store, instance_id: str, at: float, **fields: object) -> None:
    item = NewInstance(instance_id, None, deadline_at=at, **fields)  # type: ignore[arg-type]
    await store.create_instances(WF, [item], trigger="api", skip_existing=False)


@pytest.mark.parametrize("status", UNFINISHED)
async def test_a_deadline_ends_or_interrupts_each_unfinished_state(
    store: Store, clock: ManualClock, status: str
) -> None:
    claim = await in_state(store, status, "i")
    await _set_deadline(store, "i", clock())
    assert await store.closing.expire_deadlines([WF], clock()) is None
    record = await store.get_instance(WF, "i")
    assert record.deadline_at is None
    if status in ("queued", "paused"):  # never started: ended at once
        assert record.status == "errored"
        assert record.error is not None and record.error["name"] == "WorkflowTimeoutError"
        assert record.ended_at == clock()
        return
    # Started: runnable now with the control "timeout", any lease fenced out.
    assert record.status in ("queued", "running") and record.ready_at == clock()
    if claim is not None:
        assert await lease_lost(store.record_step(claim.lease, write("t", 2), clock()))
    taken = (await store.claim("w2", [WF], 10, LEASE, clock())).claims
    assert [(c.instance.id, c.control) for c in taken] == [("i", "timeout")]


async def _set_deadline(store: Store, instance_id: str, at: float) -> None:
    """A deadline on an existing instance (through a raw write: creates set them)."""
    url = store.url
    pk = (await store.get_instance(WF, instance_id)).pk
    raw(url, f"UPDATE instances SET deadline_at = {at!r} WHERE pk = {pk}")


async def test_the_next_deadline_and_a_full_batch(store: Store, clock: ManualClock) -> None:
    now = clock()
    await _with_deadline(store, "later", now + HOUR)
    assert await store.closing.expire_deadlines([WF], now) == now + HOUR
    assert await store.closing.expire_deadlines(["other"], now) is None
    items = [NewInstance(f"d{n}", None, deadline_at=now) for n in range(DEADLINE_BATCH + 1)]
    await store.create_instances(WF, items, trigger="api", skip_existing=False)
    # more were due than one call takes
    assert await store.closing.expire_deadlines([WF], now) == now
    assert await store.closing.expire_deadlines([WF], now) == now + HOUR
    page = await store.list_instances(WF, "errored", 1000, None)
    assert len(page.instances) == DEADLINE_BATCH + 1


async def test_a_pending_control_is_kept(store: Store, clock: ManualClock) -> None:
    await in_state(store, "waiting", "i")
    await store.control(WF, "i", "terminate", rollback=True)
    await _set_deadline(store, "i", clock())
    await store.closing.expire_deadlines([WF], clock())
    (taken,) = (await store.claim("w", [WF], 10, LEASE, clock())).claims
    assert taken.control == "terminate_rollback"


async def test_close_children_applies_each_policy_and_is_fenced(
    store: Store, clock: ManualClock
) -> None:
    await store.create_instances(WF, [NewInstance("p", None)], trigger="api", skip_existing=False)
    parent = await claim_one(store, "p")
    pk = parent.lease.pk
    kids = [
        NewInstance(f"k-{policy}", None, parent_pk=pk, on_parent_close=policy)
        for policy in ("terminate", "request_cancel", "abandon")
    ] + [NewInstance("k-none", None, parent_pk=pk)]
    await store.create_instances("kid", kids, trigger="workflow", skip_existing=False)
    created = await store.get_instance("kid", "k-terminate")
    grand = NewInstance("g", None, parent_pk=created.pk, on_parent_close="terminate")
    await store.create_instances("kid", [grand], trigger="workflow", skip_existing=False)
    await store.closing.close_children(parent.lease, clock())
    statuses = {
        i: (await store.get_instance("kid", i)).status
        for i in ("k-terminate", "k-request_cancel", "k-abandon", "k-none", "g")
    }
    assert statuses == {
        "k-terminate": "terminated",
        "k-request_cancel": "errored",  # never started: ended at once
        "k-abandon": "queued",
        "k-none": "queued",
        "g": "terminated",
    }
    cancelled = await store.get_instance("kid", "k-request_cancel")
    assert cancelled.error is not None and cancelled.error["name"] == "WorkflowCancelledError"
    await store.control(WF, "p", "terminate")
    assert await lease_lost(store.closing.close_children(parent.lease, clock()))


async def test_create_keyed_debounce_and_replace(store: Store, clock: ManualClock) -> None:
    now = clock()
    first = await store.closing.create_keyed(
        WF, NewInstance("a", "1", key="k"), trigger="api", on_conflict="debounce", ready_at=now + 5
    )
    assert (first.id, first.status, first.ready_at) == ("a", "queued", now + 5)
    joined = await store.closing.create_keyed(
        WF, NewInstance("b", "2", key="k"), trigger="api", on_conflict="debounce", ready_at=now + 9
    )
    assert (joined.id, joined.params, joined.ready_at) == ("a", 2, now + 9)
    plain = await store.closing.create_keyed(
        WF, NewInstance("c", None, key="k"), trigger="api", on_conflict="replace_queued"
    )
    assert plain.status == "queued" and plain.ready_at == now
    assert (await store.get_instance(WF, "a")).status == "terminated"
    with pytest.raises(InstanceAlreadyExistsError):
        await store.closing.create_keyed(
            WF, NewInstance("c", None, key="k"), trigger="api", on_conflict="replace_queued"
        )
    assert (await store.get_instance(WF, "c")).status == "queued"


async def test_concurrent_debounces_from_two_stores_make_one_instance(
    open_store: OpenStore, clock: ManualClock
) -> None:
    stores = [await open_store(), await open_store()]
    records = await asyncio.gather(
        *(
            stores[n % 2].closing.create_keyed(
                WF,
                NewInstance(f"i{n}", str(n), key="k"),
                trigger="api",
                on_conflict="debounce",
                ready_at=clock() + 5,
            )
            for n in range(16)
        )
    )
    assert len({r.id for r in records}) == 1
    page = await stores[0].list_instances(WF, None, 100, None)
    assert len(page.instances) == 1
