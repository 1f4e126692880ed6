"""In-process signals: ready listeners (an instance may have become runnable) and change
watches (an instance changed); on stores that push notifications, other stores' changes too."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from stepline import ManualClock
from stepline.store.base import ChangeWatch, Finish, NewInstance, StepWrite, Store
from stepline.store.types import UpdateAnswer

from ._support import HOUR, WF, claim_one, create, in_state
from .conftest import OpenStore


class Calls:
    """A ready listener that counts its calls."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


async def changed(watch: ChangeWatch) -> bool:
    """Whether the watch has a change waiting: its wait returns at once (and clears it)."""
    waiting = asyncio.ensure_future(watch.wait(HOUR))
    await asyncio.sleep(0)
    if waiting.done():
        return True
    waiting.cancel()
    return False


async def test_ready_listeners_are_called_whenever_an_instance_may_have_become_runnable(
    store: Store, clock: ManualClock
) -> None:
    calls = Calls()
    store.signals.add_ready_listener(calls)

    def signalled(what: str, before: int) -> None:
        assert calls.count > before, f"no ready signal after {what}"

    seen = calls.count
    await create(store, "a")
    signalled("create_instances", seen)
    claim = await claim_one(store, "a")
    seen = calls.count
    await store.release(claim.lease, store.now())
    signalled("release", seen)
    claim = await claim_one(store, "a")
    await store.finish(claim.lease, Finish("waiting", event_seq=0), store.now())  # no wake_at
    seen = calls.count
    await store.send_event(WF, "a", "go", None)
    signalled("send_event to a waiting instance", seen)
    claim = await claim_one(store, "a")
    await store.send_event(WF, "a", "late", None)
    seen = calls.count
    await store.finish(claim.lease, Finish("waiting", wake_at=store.now() + HOUR), store.now())
    signalled("finish waiting after a late event", seen)
    await store.control(WF, "a", "pause")
    seen = calls.count
    await store.control(WF, "a", "resume")
    signalled("resume", seen)
    await store.control(WF, "a", "terminate")
    seen = calls.count
    await store.control(WF, "a", "restart")
    signalled("restart", seen)
    seen = calls.count
    await store.control(WF, "a", "terminate", rollback=True)
    signalled("terminate with rollback", seen)
    # a child's end makes its waiting parent runnable
    await in_state(store, "waiting", "p", workflow="parent")
    parent = '{"workflow": "parent", "id": "p", "step": "s"}'
    child_of_p = [NewInstance("c", None, parent)]
    await store.create_instances("child", child_of_p, trigger="api", skip_existing=False)
    child = await claim_one(store, "c", workflow="child")
    seen = calls.count
    await store.finish(child.lease, Finish("complete"), store.now())
    signalled("a child's end", seen)
    store.signals.remove_ready_listener(calls)
    store.signals.remove_ready_listener(calls)  # removing twice is harmless
    seen = calls.count
    await create(store, "b")
    assert calls.count == seen


async def test_a_suspension_until_a_time_signals_that_timer_not_ready(
    store: Store, clock: ManualClock
) -> None:
    """A finish that suspends an instance until a later time tells the timer listeners that
    time, and the ready listeners nothing; one that an event overtook (runnable now) tells the
    ready listeners; a suspension without a time tells neither."""
    ready = Calls()
    timers: list[float] = []
    store.signals.add_ready_listener(ready)
    store.signals.add_timer_listener(timers.append)
    await create(store, "a")
    claim = await claim_one(store, "a")
    seen = ready.count
    wake_at = store.now() + HOUR
    await store.finish(claim.lease, Finish("waiting", wake_at=wake_at, event_seq=0), store.now())
    assert (ready.count, timers) == (seen, [wake_at])
    clock.advance(HOUR)
    claim = await claim_one(store, "a")
    await store.finish(claim.lease, Finish("waiting", event_seq=claim.event_seq), store.now())
    assert (ready.count, timers) == (seen, [wake_at])
    await store.send_event(WF, "a", "go", None)
    claim = await claim_one(store, "a")
    await store.send_event(WF, "a", "late", None)
    seen = ready.count
    later = store.now() + HOUR
    end = Finish("waiting", wake_at=later, event_seq=claim.event_seq)
    await store.finish(claim.lease, end, store.now())
    assert ready.count > seen and timers == [wake_at]
    store.signals.remove_timer_listener(timers.append)
    store.signals.remove_ready_listener(ready)


async def test_an_answer_watch_is_told_the_answer_a_handler_s_end_record_wrote(
    store: Store,
) -> None:
    """A handler's end, carried by a finish or written as a step record, tells the watches of
    its update the answer once committed; an acceptance tells nothing."""
    await create(store, "a")
    claim = await claim_one(store, "a")
    await store.finish(claim.lease, Finish("waiting", event_seq=0), store.now())
    for update_id in ("u1", "u2"):
        await store.messages.send_update(WF, "a", update_id, "decide", "[]")
    claim = await claim_one(store, "a")
    (first, second) = claim.history.events
    signals = store.signals
    with signals.watch_answer(WF, "a", "u1") as one, signals.watch_answer(WF, "a", "u2") as two:
        accept = StepWrite(
            "@update:decide", 1, 0, "update", "running", started_at=store.now(),
            consume_event=first.pk, update="u1",
        )  # fmt: skip
        await store.record_step(claim.lease, accept, store.now())
        assert not one.done()
        ended = replace(accept, status="complete", output='{"ok": 1}', consume_event=None)
        await store.record_step(claim.lease, ended, store.now())
        assert one.result() == UpdateAnswer("u1", "complete", '{"ok": 1}', None)
        error = {"name": "ValueError", "message": "no"}
        accept = replace(accept, count=2, seq=1, consume_event=second.pk, update="u2")
        await store.record_step(claim.lease, accept, store.now())
        ended = replace(accept, status="errored", error=error, consume_event=None)
        end = Finish("waiting", event_seq=claim.event_seq, steps=(ended,))
        await store.finish(claim.lease, end, store.now())
        assert two.result() == UpdateAnswer("u2", "errored", None, error)


async def test_a_change_watch_sees_this_process_s_control_actions_and_finishes(
    store: Store,
) -> None:
    await create(store, "a", "other")
    with (
        store.signals.watch_changes(WF, "a") as watch,
        store.signals.watch_changes(WF, "a") as second,
    ):
        assert not await changed(watch)
        await store.control(WF, "a", "pause")
        assert await changed(watch) and await changed(second)
        assert not await changed(watch)  # the wait consumed it
        await store.control(WF, "other", "pause")
        assert not await changed(watch)  # another instance
        for action in ("resume", "terminate", "restart"):
            await store.control(WF, "a", action)  # type: ignore[arg-type]
            assert await changed(watch), action
        claim = await claim_one(store, "a")
        await store.finish(claim.lease, Finish("waiting", wake_at=store.now() + HOUR), store.now())
        assert await changed(watch)
    await store.control(WF, "a", "pause")
    assert not await changed(watch)  # watched only while the block ran


async def test_a_change_that_lands_before_the_wait_is_kept(store: Store) -> None:
    """Watching starts before the read: a change made while the caller reads is not lost."""
    await create(store, "a")
    with store.signals.watch_changes(WF, "a") as watch:
        await store.get_instance(WF, "a")  # the caller's read
        await store.control(WF, "a", "pause")  # lands before the caller waits
        await asyncio.wait_for(watch.wait(HOUR), 5)  # returns at once


async def test_a_change_watch_wait_returns_after_its_timeout_without_a_change(
    store: Store,
) -> None:
    await create(store, "a")
    with store.signals.watch_changes(WF, "a") as watch:
        await asyncio.wait_for(watch.wait(0), 5)
        first = asyncio.ensure_future(watch.wait(HOUR))
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="one wait at a time"):
            await watch.wait(0)
        first.cancel()


async def test_a_store_that_pushes_notifications_signals_other_stores_changes(
    store: Store, open_store: OpenStore
) -> None:
    if not store.pushes_notifications:
        pytest.skip("this store is told only of its own process's changes")
    other = await open_store()
    await create(store, "a")
    ready = asyncio.Event()
    store.signals.add_ready_listener(ready.set)
    with store.signals.watch_changes(WF, "a") as watch:
        await other.control(WF, "a", "pause")
        await asyncio.wait_for(watch.wait(HOUR), 10)
        await other.control(WF, "a", "resume")  # runnable again
        await asyncio.wait_for(ready.wait(), 10)
    ready.clear()
    await create(other, "b")
    await asyncio.wait_for(ready.wait(), 10)
