"""control: pause, resume, terminate (with and without rollback) and restart (from the start or
from a step) in every state; illegal ones raise IllegalStateError and change nothing."""

from __future__ import annotations

from typing import Any

import pytest

from stepline import IllegalStateError, InstanceNotFoundError, ManualClock
from stepline.store.base import Claim, ControlAction, Finish, Store

from ._support import (
    FINISHED,
    HOUR,
    LEASE,
    STATES,
    UNFINISHED,
    WF,
    all_states,
    claim_one,
    claimed_ids,
    create,
    lease_lost,
    write,
)
from .conftest import OpenStore

ILLEGAL = "IllegalStateError"


async def _apply(store: Store, action: ControlAction, **options: Any) -> dict[str, str]:
    """``action`` on the instance in each state (its id is the state): the new status, or
    :data:`ILLEGAL` (the instance then unchanged, the error naming it and its status)."""
    outcome: dict[str, str] = {}
    for status in STATES:
        before = await store.get_instance(WF, status)
        try:
            record = await store.control(WF, status, action, **options)
        except IllegalStateError as refused:
            assert (refused.workflow, refused.instance_id, refused.status) == (WF, status, status)
            assert await store.get_instance(WF, status) == before
            outcome[status] = ILLEGAL
        else:
            assert record == await store.get_instance(WF, status)
            assert record.updated_at == store.now()
            outcome[status] = record.status
    return outcome


async def _fenced_out(store: Store, claim: Claim | None) -> bool:
    """Whether every write of the activation holding ``claim`` is now refused."""
    assert claim is not None
    now = store.now()
    return (
        await lease_lost(store.record_step(claim.lease, write("late", 9), now))
        and await lease_lost(store.finish(claim.lease, Finish("complete"), now))
        and await store.renew([claim.lease], LEASE, now) == {}
    )


async def test_pause_pauses_queued_and_waiting_and_asks_a_running_one_to_stop(
    store: Store, clock: ManualClock
) -> None:
    claims = await all_states(store)
    clock.advance(1)
    assert await _apply(store, "pause") == {
        "queued": "paused",
        "running": "waitingForPause",
        "paused": ILLEGAL,
        "waiting": "paused",
        "waitingForPause": ILLEGAL,
        "complete": ILLEGAL,
        "errored": ILLEGAL,
        "terminated": ILLEGAL,
    }
    for paused in ("queued", "waiting"):
        assert (await store.get_instance(WF, paused)).ready_at is None
    # the running activation keeps its lease and sees the request at its next step
    running = claims["running"]
    assert running is not None
    assert await store.record_step(running.lease, write("t", 2), store.now()) == "waitingForPause"
    assert (await store.get_instance(WF, "running")).lease_owner == running.lease.owner
    assert await claimed_ids(store, at=store.now() + HOUR) == []


async def test_resume_makes_paused_queued_and_a_waiting_for_pause_running_again(
    store: Store, clock: ManualClock
) -> None:
    claims = await all_states(store)
    clock.advance(1)
    assert await _apply(store, "resume") == {
        "queued": ILLEGAL,
        "running": ILLEGAL,
        "paused": "queued",
        "waiting": ILLEGAL,
        "waitingForPause": "running",
        "complete": ILLEGAL,
        "errored": ILLEGAL,
        "terminated": ILLEGAL,
    }
    assert (await store.get_instance(WF, "paused")).ready_at == store.now()
    held = claims["waitingForPause"]
    assert held is not None
    assert await store.record_step(held.lease, write("t", 2), store.now()) == "running"
    assert await claimed_ids(store) == ["paused", "queued"]


async def test_terminate_ends_any_unfinished_instance_at_once_fencing_out_its_activation(
    store: Store, clock: ManualClock
) -> None:
    claims = await all_states(store)
    clock.advance(1)
    outcome = await _apply(store, "terminate")
    assert outcome == {s: "terminated" for s in UNFINISHED} | {s: ILLEGAL for s in FINISHED}
    for status in UNFINISHED:
        record = await store.get_instance(WF, status)
        assert (record.ended_at, record.ready_at, record.lease_owner) == (store.now(), None, None)
    assert await _fenced_out(store, claims["running"])
    assert await _fenced_out(store, claims["waitingForPause"])
    assert await claimed_ids(store, at=store.now() + HOUR) == []
    assert (await store.get_instance(WF, "complete")).output == "done"


async def test_terminate_with_rollback_marks_an_unfinished_instance_and_makes_it_runnable(
    store: Store, clock: ManualClock
) -> None:
    """A worker then claims it with ``Claim.control == "terminate_rollback"``, runs the
    rollbacks and ends it ``terminated``."""
    claims = await all_states(store)
    clock.advance(1)
    outcome = await _apply(store, "terminate", rollback=True)
    assert {s for s, status in outcome.items() if status == ILLEGAL} == set(FINISHED)
    for status in ("queued", "paused", "waiting"):
        assert outcome[status] == "queued"
    for status in UNFINISHED:
        record = await store.get_instance(WF, status)
        assert (record.ready_at, record.lease_owner, record.ended_at) == (store.now(), None, None)
    assert await _fenced_out(store, claims["running"])
    assert await _fenced_out(store, claims["waitingForPause"])
    taken = (await store.claim("worker-2", [WF], 10, LEASE, store.now())).claims
    assert sorted(c.instance.id for c in taken) == sorted(UNFINISHED)
    assert {c.control for c in taken} == {"terminate_rollback"}
    assert {c.instance.status for c in taken} == {"running"}
    rollback = {"ran": ["undo-1"], "errors": []}
    for claim in taken:
        finish = Finish("terminated", rollback=rollback)
        assert await store.finish(claim.lease, finish, store.now()) == "terminated"
        record = await store.get_instance(WF, claim.instance.id)
        assert (record.status, record.rollback, record.ended_at) == (
            "terminated",
            rollback,
            store.now(),
        )


async def test_a_claim_without_a_termination_pending_has_no_control(store: Store) -> None:
    claims = await all_states(store)
    assert all(c.control is None for c in claims.values() if c is not None)
    assert {c.control for c in (await store.claim("w", [WF], 10, LEASE, store.now())).claims} == {
        None
    }


async def test_restart_queues_any_instance_without_its_steps_output_or_error(
    store: Store, clock: ManualClock
) -> None:
    claims = await all_states(store)
    clock.advance(1)
    assert await _apply(store, "restart") == {s: "queued" for s in STATES}
    for status in STATES:
        record = await store.get_instance(WF, status)
        assert (record.output, record.error, record.rollback) == (None, None, None)
        assert (record.ready_at, record.lease_owner, record.ended_at) == (store.now(), None, None)
        assert await store.get_steps(WF, status) == []
    assert await _fenced_out(store, claims["running"])
    assert await _fenced_out(store, claims["waitingForPause"])
    assert await claimed_ids(store) == sorted(STATES)


async def test_restart_from_a_step_deletes_it_and_the_steps_started_after_it(
    store: Store, clock: ManualClock
) -> None:
    """From ``(name, count)`` on, in start order (``seq``), not in name or count order."""
    await create(store, "a")
    claim = await claim_one(store, "a")
    for name, count, seq in (("a", 1, 1), ("b", 1, 2), ("a", 2, 3), ("c", 1, 4)):
        await store.record_step(claim.lease, write(name, seq, count=count), store.now())
    await store.finish(claim.lease, Finish("complete", output='"done"'), store.now())
    record = await store.control(WF, "a", "restart", from_step=("a", 2))
    assert (record.status, record.output) == ("queued", None)
    assert [(s.name, s.count) for s in await store.get_steps(WF, "a")] == [("a", 1), ("b", 1)]
    again = await claim_one(store, "a")
    assert await _fenced_out(store, claim)
    await store.control(WF, "a", "restart", from_step=("b", 1))
    assert [(s.name, s.count) for s in await store.get_steps(WF, "a")] == [("a", 1)]
    assert await _fenced_out(store, again)


async def test_restart_from_an_unknown_step_raises_value_error_and_changes_nothing(
    store: Store,
) -> None:
    await all_states(store)
    before = await store.get_instance(WF, "complete")
    for unknown in (("nope", 1), ("s", 2)):
        with pytest.raises(ValueError):
            await store.control(WF, "complete", "restart", from_step=unknown)
    assert await store.get_instance(WF, "complete") == before
    assert [s.name for s in await store.get_steps(WF, "complete")] == ["s"]


async def test_a_control_action_is_durable_when_it_returns(
    store: Store, open_store: OpenStore
) -> None:
    await all_states(store)
    record = await store.control(WF, "queued", "pause")
    other = await open_store()
    assert await other.get_instance(WF, "queued") == record


@pytest.mark.parametrize("action", ["pause", "resume", "terminate", "restart"])
async def test_a_control_action_on_an_unknown_instance_raises_instance_not_found(
    store: Store, action: ControlAction
) -> None:
    """(Not in the docstring; both stores do it.)"""
    with pytest.raises(InstanceNotFoundError):
        await store.control(WF, "nope", action)
