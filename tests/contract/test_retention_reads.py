"""The contract of ``OperationsStore.histories``, ``RetentionStore.purge_expired`` and a store
opened read-only, on both stores."""

from __future__ import annotations

import json

import pytest

from stepline import ManualClock
from stepline.errors import StoreError
from stepline.store import create_store
from stepline.store.base import DeletedInstance, Finish, NewInstance, Store, WorkflowMeta

from ._support import HOUR, WF, all_states, claim_one, create, write


async def test_histories_reads_every_step_of_many_instances_as_get_steps_does(
    store: Store,
) -> None:
    await all_states(store)
    records = [await store.get_instance(WF, status) for status in ("queued", "complete", "waiting")]
    found = await store.operations.histories(records)
    assert set(found) == {r.pk for r in records if r.status != "queued"}  # no steps: absent
    for record in records[1:]:
        assert found[record.pk] == await store.get_steps(WF, record.id)
    assert await store.operations.histories([]) == {}


async def _ended(
    store: Store, instance_id: str, status: str, retention: dict[str, float] | None
) -> None:
    """``instance_id`` created with its own ``retention`` and ended ``status`` now."""
    own = None if retention is None else json.dumps(retention)
    await store.create_instances(
        WF, [NewInstance(instance_id, None, retention=own)], trigger="api", skip_existing=False
    )
    if status == "terminated":
        await store.control(WF, instance_id, "terminate")
        return
    claim = await claim_one(store, instance_id)
    await store.record_step(claim.lease, write("s", 1), store.now())
    finish = (
        Finish("complete", output="1")
        if status == "complete"
        else Finish("errored", error={"name": "Boom", "message": "no"})
    )
    await store.finish(claim.lease, finish, store.now())


async def test_delete_at_comes_from_the_instance_then_the_workflow_by_outcome(
    store: Store, clock: ManualClock
) -> None:
    await store.register_workflows([WorkflowMeta(WF, "m:W", retention={"complete": 10 * HOUR})])
    now = clock()
    await _ended(store, "own", "complete", {"complete": HOUR})
    await _ended(store, "workflow", "complete", None)
    await _ended(store, "kept", "errored", {"complete": HOUR})
    await _ended(store, "terminated", "terminated", {"terminated": 2 * HOUR})
    deadlines = {i: (await store.get_instance(WF, i)).delete_at for i in
                 ("own", "workflow", "kept", "terminated")}  # fmt: skip
    assert deadlines == {
        "own": pytest.approx(now + HOUR),
        "workflow": pytest.approx(now + 10 * HOUR),
        "kept": None,
        "terminated": pytest.approx(now + 2 * HOUR),
    }


async def test_purge_expired_deletes_in_batches_counting_by_workflow_and_outcome(
    store: Store, clock: ManualClock
) -> None:
    await store.register_workflows([WorkflowMeta(WF, "m:W", retention={"complete": HOUR})])
    for n in range(5):
        await _ended(store, f"c{n}", "complete", None)
    await _ended(store, "t", "terminated", {"terminated": HOUR})
    await _ended(store, "undated", "errored", None)
    now = store.now()
    assert await store.retention.purge_expired(now + HOUR - 1, 100) == []
    first = await store.retention.purge_expired(now + HOUR, 4)
    assert len(first) == 4
    second = await store.retention.purge_expired(now + HOUR, 4)
    assert sorted((d.workflow, d.status) for d in second) == [
        (WF, "complete"),
        (WF, "terminated"),
    ]
    assert {d.id for d in [*first, *second]} == {"c0", "c1", "c2", "c3", "c4", "t"}
    assert await store.retention.purge_expired(now + HOUR, 4) == []
    # the workers' one retention: instances without a deadline, by when they ended
    assert await store.retention.purge_expired(now + HOUR, 4, now - 1) == []
    assert await store.retention.purge_expired(now + HOUR, 4, now + 1) == [
        DeletedInstance(WF, "undated", "errored")
    ]
    assert [i.id for i in (await store.list_instances(WF, None, 10, None)).instances] == []


async def test_a_read_only_store_reads_and_refuses_every_write(
    store: Store, store_url: str, clock: ManualClock
) -> None:
    await create(store, "a")
    reader = create_store(store_url, clock, read_only=True)
    await reader.open()
    try:
        assert (await reader.get_instance(WF, "a")).status == "queued"
        with pytest.raises(StoreError):
            await create(reader, "b")
    finally:
        await reader.close()
    assert [i.id for i in (await store.list_instances(WF, None, 10, None)).instances] == ["a"]
