"""create_keyed_batch against its contract, on both stores: keyed and plain items in one
transaction, each key settled in order, existing ids skipped before their key is touched."""

from __future__ import annotations

import asyncio

from stepline import ManualClock
from stepline.store.base import BatchItem, NewInstance, Store

from ._support import WF
from .conftest import OpenStore


async def test_a_batch_settles_each_key_in_order(store: Store, clock: ManualClock) -> None:
    now = clock()
    queued = NewInstance("old", None, key="r")
    await store.create_instances(WF, [queued], trigger="api", skip_existing=False)
    records = await store.closing.create_keyed_batch(
        WF,
        [
            BatchItem(NewInstance("a", "1", key="k"), "debounce", now + 5),
            BatchItem(NewInstance("b", "2", key="k"), "debounce", now + 9),
            BatchItem(NewInstance("plain", "3", deadline_at=now + 60)),
            BatchItem(NewInstance("new", None, key="r"), "replace_queued"),
        ],
        trigger="http",
    )
    assert [r.id if r else None for r in records] == ["a", "a", "plain", "new"]
    joined = records[1]
    assert joined is not None and (joined.params, joined.ready_at) == (2, now + 9)
    stored = await store.get_instance(WF, "a")
    assert (stored.status, stored.params, stored.ready_at) == ("queued", 2, now + 9)
    plain = await store.get_instance(WF, "plain")
    assert (plain.status, plain.deadline_at, plain.trigger) == ("queued", now + 60, "http")
    assert (await store.get_instance(WF, "old")).status == "terminated"
    assert (await store.get_instance(WF, "new")).status == "queued"
    page = await store.list_instances(WF, None, 100, None)
    assert sorted(r.id for r in page.instances) == ["a", "new", "old", "plain"]


async def test_existing_ids_are_skipped_before_their_key_is_settled(
    store: Store, clock: ManualClock
) -> None:
    first = await store.closing.create_keyed_batch(
        WF, [BatchItem(NewInstance("x", None, key="k"), "replace_queued")], trigger="api"
    )
    assert first[0] is not None and first[0].id == "x"
    # The same batch again (a retry): x exists, so it is skipped and not replaced by itself.
    again = await store.closing.create_keyed_batch(
        WF,
        [
            BatchItem(NewInstance("x", None, key="k"), "replace_queued"),
            BatchItem(NewInstance("y", None)),
            BatchItem(NewInstance("y", "2")),
        ],
        trigger="api",
    )
    assert again[0] is None and again[2] is None
    assert again[1] is not None and again[1].id == "y"
    assert (await store.get_instance(WF, "x")).status == "queued"
    assert (await store.get_instance(WF, "y")).params is None


async def test_concurrent_batches_on_two_keys_make_one_debounced_instance_each(
    open_store: OpenStore, clock: ManualClock
) -> None:
    stores = [await open_store(), await open_store()]
    ready = clock() + 5

    def batch(n: int) -> list[BatchItem]:
        keys = ("k1", "k2") if n % 2 else ("k2", "k1")  # opposite orders: no deadlock
        return [
            BatchItem(NewInstance(f"{key}-{n}", str(n), key=key), "debounce", ready) for key in keys
        ]

    results = await asyncio.gather(
        *(stores[n % 2].closing.create_keyed_batch(WF, batch(n), trigger="api") for n in range(8))
    )
    ids = {r.id for records in results for r in records if r is not None}
    assert len(ids) == 2
    page = await stores[0].list_instances(WF, None, 100, None)
    assert len(page.instances) == 2
