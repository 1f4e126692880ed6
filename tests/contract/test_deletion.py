"""delete_instances (with finished_only, checked in the deleting transaction) and
purge_instances: instances go with their steps and events."""

from __future__ import annotations

import asyncio

import pytest

from stepline import IllegalStateError, InstanceNotFoundError, ManualClock
from stepline.records import InstanceRecord
from stepline.store.base import Finish, Store

from ._support import (
    FINISHED,
    STATES,
    WF,
    all_states,
    claim_one,
    create,
    in_state,
    rows_of,
    write,
)
from .conftest import OpenStore


async def _with_history(store: Store, instance_id: str) -> None:
    """A complete instance with two steps and two events (one consumed)."""
    await create(store, instance_id)
    await store.send_event(WF, instance_id, "go", '"x"')
    await store.send_event(WF, instance_id, "go", '"y"')
    claim = await claim_one(store, instance_id)
    event = claim.history.events[0].pk
    await store.record_step(claim.lease, write("w", 1, consume_event=event), store.now())
    await store.finish(claim.lease, Finish("complete", steps=(write("s", 2),)), store.now())


async def _exists(store: Store, instance_id: str) -> bool:
    try:
        await store.get_instance(WF, instance_id)
    except InstanceNotFoundError:
        return False
    return True


async def test_delete_instances_deletes_them_with_their_steps_and_events(
    store: Store, store_url: str
) -> None:
    for instance_id in ("a", "b", "kept"):
        await _with_history(store, instance_id)
    assert (rows_of(store_url, "steps"), rows_of(store_url, "events")) == (6, 6)
    assert await store.retention.delete_instances(WF, ["a", "nope", "b", "a"]) == 2
    assert [await _exists(store, i) for i in ("a", "b", "kept")] == [False, False, True]
    assert (rows_of(store_url, "steps"), rows_of(store_url, "events")) == (2, 2)
    assert len(await store.get_steps(WF, "kept")) == 2
    assert len(await store.get_events(WF, "kept")) == 2
    assert await store.retention.delete_instances(WF, ["a", "b"]) == 0
    assert await store.retention.delete_instances(WF, []) == 0
    assert await store.retention.delete_instances("other", ["kept"]) == 0  # another workflow's id


async def test_delete_instances_without_finished_only_deletes_any_status(store: Store) -> None:
    await all_states(store)
    assert await store.retention.delete_instances(WF, list(STATES)) == len(STATES)
    assert (await store.list_instances(WF, None, 100, None)).instances == []


async def test_delete_finished_only_names_the_first_unfinished_and_deletes_nothing(
    store: Store,
) -> None:
    await all_states(store)
    ids = ["complete", "nope", "waiting", "errored", "queued", "terminated"]
    with pytest.raises(IllegalStateError) as refused:
        await store.retention.delete_instances(WF, ids, finished_only=True)
    assert (refused.value.instance_id, refused.value.status) == ("waiting", "waiting")
    with pytest.raises(IllegalStateError) as refused:
        await store.retention.delete_instances(WF, list(reversed(ids)), finished_only=True)
    assert (refused.value.instance_id, refused.value.status) == ("queued", "queued")
    assert all([await _exists(store, s) for s in STATES])
    assert await store.retention.delete_instances(WF, [*FINISHED, "nope"], finished_only=True) == 3
    assert [await _exists(store, s) for s in STATES] == [s not in FINISHED for s in STATES]


async def test_delete_finished_only_keeps_or_deletes_an_instance_a_restart_makes_unfinished(
    store: Store, open_store: OpenStore
) -> None:
    """A restart that lands during the delete: the instance is deleted before the restart
    (which then finds nothing) or kept, queued (and the delete refused); never deleted queued."""
    other = await open_store()
    rounds = 8
    for n in range(rounds):
        await in_state(store, "complete", f"i{n}")
    for n in range(rounds):
        instance_id = f"i{n}"
        delete = store.retention.delete_instances(WF, [instance_id], finished_only=True)
        restart = other.control(WF, instance_id, "restart")
        calls = (delete, restart) if n % 2 else (restart, delete)
        results = await asyncio.gather(*calls, return_exceptions=True)
        deleted, restarted = results if n % 2 else results[::-1]
        if deleted == 1:
            assert isinstance(restarted, InstanceNotFoundError), restarted
            assert not await _exists(store, instance_id)
        else:
            assert isinstance(deleted, IllegalStateError), deleted
            assert isinstance(restarted, InstanceRecord) and restarted.status == "queued"
            assert (await store.get_instance(WF, instance_id)).status == "queued"


async def test_purge_deletes_finished_instances_in_statuses_that_ended_before_older_than(
    store: Store, store_url: str, clock: ManualClock
) -> None:
    await all_states(store)  # complete and errored have a step each
    await in_state(store, "complete", "elsewhere", workflow="other")
    ended = store.now()
    clock.advance(10)
    assert (
        await store.retention.purge_instances(WF, ["complete", "errored"], ended) == []
    )  # not before
    steps = rows_of(store_url, "steps")
    purged = await store.retention.purge_instances(WF, ["complete", "errored"], ended + 1)
    assert sorted((d.workflow, d.id, d.status) for d in purged) == [
        (WF, "complete", "complete"),
        (WF, "errored", "errored"),
    ]
    assert rows_of(store_url, "steps") == steps - 2
    assert [await _exists(store, s) for s in STATES] == [
        s not in ("complete", "errored") for s in STATES
    ]
    assert (await store.get_instance("other", "elsewhere")).status == "complete"
    # unfinished statuses are never purged; no workflow: every workflow
    statuses = ["queued", "running", "paused", "waiting", "waitingForPause", "terminated"]
    purged = await store.retention.purge_instances(None, [*statuses, "complete"], ended + 1)
    assert sorted((d.workflow, d.id) for d in purged) == [
        ("other", "elsewhere"),
        (WF, "terminated"),
    ]
    assert [await _exists(store, s) for s in STATES] == [s not in FINISHED for s in STATES]
    with pytest.raises(InstanceNotFoundError):
        await store.get_instance("other", "elsewhere")
