"""MessageStore: updates with their replies, stream items, routed queries (docs/messaging.md).

An update is recorded once per update id and travels as an event of type ``@update``; the step
record of its handler marks it running and answers it, once; a rejection consumes its event and
records no step. Stream items are numbered per stream, never twice for one origin, trimmed to
their cap and age, and read after a cursor. Query requests are taken once and answered once.
"""

from __future__ import annotations

import asyncio

import pytest

from stepline import IllegalStateError, InstanceNotFoundError, ManualClock
from stepline.store.base import (
    Finish,
    NewStreamItem,
    QueryAnswer,
    StepWrite,
    Store,
    StreamItem,
)
from stepline.store.messages import QUERY_EXPIRY
from stepline.store.types import UPDATE_EVENT

from ._support import (
    FINISHED,
    HOUR,
    LEASE,
    UNFINISHED,
    WF,
    all_states,
    claim_one,
    claimed_ids,
    create,
    lease_lost,
    raw,
    rows_of,
)
from .conftest import OpenStore


def marker(
    status: str, update_id: str, *, count: int = 1, seq: int = 1, **fields: object
) -> StepWrite:
    """The record of an update's handler (kind ``update``)."""
    return StepWrite(
        "@update:decide",
        count,
        seq,
        "update",
        status,
        update=update_id,
        **fields,  # type: ignore[arg-type]
    )


def item(
    value: str, origin: str, *, stream: str = "progress", keep: int = 100, **kw: object
) -> NewStreamItem:
    return NewStreamItem(stream, value, origin, keep, **kw)  # type: ignore[arg-type]


async def waiting(store: Store, instance_id: str) -> None:
    """An instance suspended until an event (or update) comes."""
    await create(store, instance_id)
    claim = await claim_one(store, instance_id)
    await store.finish(claim.lease, Finish("waiting", event_seq=claim.event_seq), store.now())


# -- updates -----------------------------------------------------------------------------------


async def test_send_update_records_it_pending_and_wakes_the_instance(
    store: Store, clock: ManualClock
) -> None:
    await waiting(store, "a")
    clock.advance(1)
    sent = await store.messages.send_update(WF, "a", "u1", "decide", '{"args": [1]}')
    assert (sent.update_id, sent.name, sent.status, sent.reply, sent.error) == (
        "u1", "decide", "pending", None, None,
    )  # fmt: skip
    assert sent.created_at == store.now() and sent.ended_at is None and not sent.answered
    record = await store.get_instance(WF, "a")
    assert (record.status, record.ready_at) == ("waiting", store.now())
    assert await store.messages.get_update(WF, "a", "u1") == sent
    assert await store.messages.get_update(WF, "a", "other") is None
    # it travels as an event, which the claim's history carries and get_events leaves out
    [claim] = (await store.claim("w", [WF], 10, LEASE, store.now())).claims
    [event] = claim.history.events
    assert (event.type, event.payload) == (UPDATE_EVENT, {"args": [1]})
    assert await store.get_events(WF, "a") == []


async def test_an_update_id_is_recorded_once(store: Store, clock: ManualClock) -> None:
    await waiting(store, "a")
    first = await store.messages.send_update(WF, "a", "u1", "decide", "[1]")
    clock.advance(5)
    again = await store.messages.send_update(WF, "a", "u1", "other-name", "[2]")
    assert again == first
    [claim] = (await store.claim("w", [WF], 10, LEASE, store.now())).claims
    assert [e.payload for e in claim.history.events] == [[1]]
    # the same id on another instance is another update
    await create(store, "b")
    assert (
        await store.messages.send_update(WF, "b", "u1", "decide", "[3]")
    ).created_at == store.now()


async def test_concurrent_sends_of_one_update_id_record_it_once(open_store: OpenStore) -> None:
    stores = [await open_store() for _ in range(3)]
    await waiting(stores[0], "a")
    sent = await asyncio.gather(
        *(
            s.messages.send_update(WF, "a", "same", "decide", f"[{n}]")
            for n, s in enumerate(stores * 3)
        )
    )
    assert len({(r.created_at, r.status) for r in sent}) == 1
    [claim] = (await stores[0].claim("w", [WF], 10, LEASE, stores[0].now())).claims
    assert len(claim.history.events) == 1


async def test_updates_to_finished_or_unknown_instances_are_refused(store: Store) -> None:
    await all_states(store)
    for status in FINISHED:
        with pytest.raises(IllegalStateError, match="send an update to"):
            await store.messages.send_update(WF, status, "u", "decide", "[]")
        assert await store.messages.get_update(WF, status, "u") is None
    for status in UNFINISHED:
        assert (
            await store.messages.send_update(WF, status, "u", "decide", "[]")
        ).status == "pending"
    with pytest.raises(InstanceNotFoundError):
        await store.messages.send_update(WF, "nope", "u", "decide", "[]")
    with pytest.raises(InstanceNotFoundError):
        await store.messages.get_update(WF, "nope", "u")


async def test_the_handler_record_marks_the_update_running_then_answers_it_once(
    store: Store, clock: ManualClock
) -> None:
    await waiting(store, "a")
    await store.messages.send_update(WF, "a", "u1", "decide", "[]")
    await store.messages.send_update(WF, "a", "u2", "decide", "[]")
    claim = await claim_one(store, "a")
    e1, e2 = claim.history.events
    now = store.now()
    await store.record_step(claim.lease, marker("running", "u1", consume_event=e1.pk), now)
    assert (await store.messages.get_update(WF, "a", "u1")).status == "running"  # type: ignore[union-attr]
    clock.advance(1)
    done = marker("complete", "u1", output='{"ok": true}', ended_at=store.now())
    assert await store.record_step(claim.lease, done, store.now()) == "running"
    answered = await store.messages.get_update(WF, "a", "u1")
    assert answered is not None
    assert (answered.status, answered.reply, answered.ended_at) == (
        "complete", {"ok": True}, store.now(),
    )  # fmt: skip
    assert answered.answered and answered.instance_status == "running"
    # an answer is given once: a later record of the same handler changes the step only
    again = marker("errored", "u1", error={"name": "X", "message": "late"}, ended_at=now)
    await store.record_step(claim.lease, again, store.now())
    assert await store.messages.get_update(WF, "a", "u1") == answered
    # a handler that failed answers with its error
    failed = marker(
        "errored",
        "u2",
        count=2,
        seq=2,
        error={"name": "Boom", "message": "no"},
        consume_event=e2.pk,
    )
    await store.record_step(claim.lease, failed, store.now())
    u2 = await store.messages.get_update(WF, "a", "u2")
    assert u2 is not None
    assert (u2.status, u2.reply, u2.error) == ("errored", None, {"name": "Boom", "message": "no"})
    steps = {s.display_name: s for s in await store.get_steps(WF, "a")}
    assert steps["@update:decide-1"].kind == "update"
    assert steps["@update:decide-1"].status == "errored"  # the step's record is the later one
    consumed = raw(store.url, "SELECT consumed_by FROM events ORDER BY pk")
    assert consumed == [("@update:decide-1",), ("@update:decide-2",)]


async def test_a_handler_record_under_a_lost_lease_answers_nothing(store: Store) -> None:
    await waiting(store, "a")
    await store.messages.send_update(WF, "a", "u1", "decide", "[]")
    claim = await claim_one(store, "a")
    await store.control(WF, "a", "terminate")
    done = marker("complete", "u1", output='"x"', ended_at=store.now())
    assert await lease_lost(store.record_step(claim.lease, done, store.now()))
    update = await store.messages.get_update(WF, "a", "u1")
    assert update is not None and update.status == "pending"
    assert update.instance_status == "terminated"


async def test_reject_update_consumes_its_event_and_records_no_step(
    store: Store, clock: ManualClock
) -> None:
    await waiting(store, "a")
    await store.messages.send_update(WF, "a", "u1", "nope", "[]")
    claim = await claim_one(store, "a")
    [event] = claim.history.events
    clock.advance(2)
    error = {"name": "UnknownUpdateError", "message": "no update 'nope'"}
    await store.messages.reject_update(claim.lease, event.pk, "u1", error, store.now())
    rejected = await store.messages.get_update(WF, "a", "u1")
    assert rejected is not None
    assert (rejected.status, rejected.error, rejected.ended_at) == ("rejected", error, store.now())
    assert await store.get_steps(WF, "a") == []
    await store.finish(claim.lease, Finish("waiting", event_seq=claim.event_seq), store.now())
    assert await claimed_ids(store) == []  # nothing pending: the event was consumed
    # fenced: a lost lease rejects nothing
    await store.messages.send_update(WF, "a", "u2", "nope", "[]")
    assert await lease_lost(
        store.messages.reject_update(claim.lease, event.pk + 1, "u2", error, 0.0)
    )
    assert (await store.messages.get_update(WF, "a", "u2")).status == "pending"  # type: ignore[union-attr]


# -- streams -----------------------------------------------------------------------------------


async def test_publish_numbers_items_per_stream_once_per_origin(
    store: Store, clock: ManualClock
) -> None:
    await create(store, "a")
    claim = await claim_one(store, "a")
    t0 = store.now()
    assert await store.messages.publish(claim.lease, item('{"done": 1}', "s-1#1"), t0) == 1
    clock.advance(1)
    assert await store.messages.publish(claim.lease, item('{"done": 2}', "s-1#2"), store.now()) == 2
    assert (
        await store.messages.publish(claim.lease, item('"other"', "x", stream="log"), store.now())
        == 1
    )
    assert (
        await store.messages.publish(claim.lease, item('{"done": 9}', "s-1#1"), store.now()) is None
    )
    read = await store.messages.read_stream(WF, "a", "progress", 0, 10)
    assert read.instance_status == "running"
    assert read.items == [
        StreamItem("progress", 1, {"done": 1}, t0),
        StreamItem("progress", 2, {"done": 2}, t0 + 1),
    ]
    assert (await store.messages.read_stream(WF, "a", "progress", 1, 10)).items == read.items[1:]
    assert (await store.messages.read_stream(WF, "a", "progress", 0, 1)).items == read.items[:1]
    assert (await store.messages.read_stream(WF, "a", "progress", 2, 10)).items == []
    assert (await store.messages.read_stream(WF, "a", "none", 0, 10)).items == []
    assert await store.messages.latest_stream_items(WF, "a") == [
        StreamItem("log", 1, "other", t0 + 1),
        StreamItem("progress", 2, {"done": 2}, t0 + 1),
    ]
    await create(store, "b")
    assert await store.messages.latest_stream_items(WF, "b") == []
    with pytest.raises(InstanceNotFoundError):
        await store.messages.read_stream(WF, "nope", "progress", 0, 10)
    with pytest.raises(InstanceNotFoundError):
        await store.messages.latest_stream_items(WF, "nope")


async def test_a_stream_keeps_its_last_items_within_its_age(
    store: Store, clock: ManualClock
) -> None:
    await create(store, "a")
    claim = await claim_one(store, "a")
    for n in range(1, 6):
        await store.messages.publish(claim.lease, item(str(n), f"o{n}", keep=3), store.now())
        clock.advance(10)
    assert [
        i.seq for i in (await store.messages.read_stream(WF, "a", "progress", 0, 10)).items
    ] == [3, 4, 5]
    # older than 15 seconds: gone as the next item comes; numbers are never reused
    await store.messages.publish(
        claim.lease, item("6", "o6", keep=3, keep_seconds=15.0), store.now()
    )
    items = (await store.messages.read_stream(WF, "a", "progress", 0, 10)).items
    assert [(i.seq, i.value) for i in items] == [(5, 5), (6, 6)]


async def test_publish_is_fenced_on_the_lease(store: Store) -> None:
    await create(store, "a")
    claim = await claim_one(store, "a")
    await store.control(WF, "a", "terminate")
    assert await lease_lost(store.messages.publish(claim.lease, item("1", "o1"), store.now()))
    assert (await store.messages.read_stream(WF, "a", "progress", 0, 10)).items == []


async def test_a_publish_record_appends_its_item_once(store: Store, clock: ManualClock) -> None:
    await create(store, "a")
    claim = await claim_one(store, "a")
    now = store.now()
    published = StepWrite(
        "@publish:progress", 1, 1, "publish", "complete", output="null", ended_at=now,
        publish=item('"half"', "@publish:progress-1"),
    )  # fmt: skip
    await store.record_step(claim.lease, published, now)
    await store.record_step(claim.lease, published, now)  # a retried write
    assert (await store.messages.read_stream(WF, "a", "progress", 0, 10)).items == [
        StreamItem("progress", 1, "half", now)
    ]
    [step] = await store.get_steps(WF, "a")
    assert (step.kind, step.status) == ("publish", "complete")


async def test_concurrent_publishes_to_one_stream_get_distinct_numbers(
    open_store: OpenStore,
) -> None:
    stores = [await open_store() for _ in range(3)]
    await create(stores[0], "a")
    claim = await claim_one(stores[0], "a")
    seqs = await asyncio.gather(
        *(
            stores[n % 3].messages.publish(claim.lease, item(str(n), f"o{n}"), stores[0].now())
            for n in range(30)
        )
    )
    assert sorted(seqs) == list(range(1, 31))  # type: ignore[type-var]
    items = (await stores[0].messages.read_stream(WF, "a", "progress", 0, 100)).items
    assert [i.seq for i in items] == list(range(1, 31))


async def test_deleting_an_instance_deletes_its_updates_and_streams(store: Store) -> None:
    await create(store, "a")
    claim = await claim_one(store, "a")
    await store.messages.publish(claim.lease, item("1", "o1"), store.now())
    await store.messages.send_update(WF, "a", "u1", "decide", "[]")
    await store.finish(claim.lease, Finish("complete", output="null"), store.now())
    assert await store.retention.delete_instances(WF, ["a"]) == 1
    for table in ("updates", "streams", "stream_items", "events"):
        assert rows_of(store.url, table) == 0, table
    await create(store, "b")
    claim = await claim_one(store, "b")
    await store.messages.publish(claim.lease, item("1", "o1"), store.now())
    await store.finish(claim.lease, Finish("complete", output="null"), store.now())
    assert len(await store.retention.purge_instances(WF, ["complete"], store.now() + 1)) == 1
    assert rows_of(store.url, "stream_items") == 0


# -- waiters -----------------------------------------------------------------------------------


async def test_replies_items_and_answers_wake_the_instances_watchers(
    open_store: OpenStore, store_kind: str
) -> None:
    worker = await open_store()
    # on SQLite only the store that wrote tells its watchers; PostgreSQL tells every store
    watching = await open_store() if store_kind == "postgres" else worker
    await waiting(worker, "a")
    await worker.messages.send_update(WF, "a", "u1", "decide", "[]")
    claim = await claim_one(worker, "a")
    with watching.signals.watch_changes(WF, "a") as watch:
        await worker.record_step(
            claim.lease, marker("complete", "u1", output="1", ended_at=worker.now()), worker.now()
        )
        await asyncio.wait_for(watch.wait(5), 10)
        assert watch._changed is False  # consumed by the wait that returned
        await worker.messages.publish(claim.lease, item("1", "o1"), worker.now())
        await asyncio.wait_for(watch.wait(5), 10)
        pk = await watching.messages.ask_query(WF, "a", "total", "[]", worker.now())
        [request] = await worker.messages.take_queries("w", [WF], 10, LEASE, worker.now())
        await worker.messages.answer_query(request.pk, QueryAnswer("3", None), worker.now())
        started = asyncio.get_running_loop().time()
        await watch.wait(5)
        assert asyncio.get_running_loop().time() - started < 4
        assert await watching.messages.query_answer(pk) == QueryAnswer("3", None)


# -- routed queries ----------------------------------------------------------------------------


async def test_query_requests_are_taken_once_and_answered_once(
    open_store: OpenStore, clock: ManualClock
) -> None:
    client, one, two = [await open_store() for _ in range(3)]
    now = client.now()
    first = await client.messages.ask_query(WF, "a", "total", "[1]", now)
    second = await client.messages.ask_query("other", "b", "total", "[]", now)
    third = await client.messages.ask_query(WF, "c", "count", "[]", now)
    assert await client.messages.query_answer(first) is None
    taken = await asyncio.gather(
        one.messages.take_queries("w1", [WF], 10, LEASE, now),
        two.messages.take_queries("w2", [WF], 10, LEASE, now),
    )
    got = sorted((r.pk, r.workflow, r.instance_id, r.name, r.args) for t in taken for r in t)
    assert got == [(first, WF, "a", "total", "[1]"), (third, WF, "c", "count", "[]")]
    assert await one.messages.take_queries("w1", [WF], 10, LEASE, now) == []
    # a taker that does not answer in time: the request is taken again
    clock.advance(LEASE + 1)
    again = await two.messages.take_queries("w2", [WF, "other"], 10, LEASE, client.now())
    assert sorted(r.pk for r in again) == sorted([first, second, third])
    await one.messages.answer_query(first, QueryAnswer('{"n": 3}', None), client.now())
    await two.messages.answer_query(
        first, QueryAnswer(None, {"name": "Late", "message": ""}), client.now()
    )
    await two.messages.answer_query(
        third, QueryAnswer(None, {"name": "E", "message": "m"}), client.now()
    )
    assert await client.messages.query_answer(first) == QueryAnswer('{"n": 3}', None)
    assert await client.messages.query_answer(third) == QueryAnswer(
        None, {"name": "E", "message": "m"}
    )
    with pytest.raises(LookupError):
        await client.messages.query_answer(first)  # read once, then deleted
    await client.messages.forget_query(second)
    with pytest.raises(LookupError):
        await client.messages.query_answer(second)
    await client.messages.forget_query(second)  # nothing left: nothing happens


async def test_old_query_requests_are_deleted(store: Store, clock: ManualClock) -> None:
    old = await store.messages.ask_query(WF, "a", "total", "[]", store.now())
    clock.advance(QUERY_EXPIRY + 1)
    await store.messages.ask_query(WF, "a", "total", "[]", store.now())
    with pytest.raises(LookupError):
        await store.messages.query_answer(old)
    assert len(await store.messages.take_queries("w", [WF], 10, LEASE, store.now())) == 1


async def test_an_update_of_a_waiting_instance_is_counted_as_an_event(
    store: Store, clock: ManualClock
) -> None:
    """A running activation learns of an update sent meanwhile as of an event: its finish
    does not suspend the instance until the next timer."""
    await create(store, "a")
    claim = await claim_one(store, "a")
    await store.messages.send_update(WF, "a", "u1", "decide", "[]")
    now = store.now()
    await store.finish(
        claim.lease, Finish("waiting", wake_at=now + HOUR, event_seq=claim.event_seq), now
    )
    assert (await store.get_instance(WF, "a")).ready_at == now


async def test_a_finish_carrying_a_handlers_end_records_its_reply(
    open_store: OpenStore, store_kind: str
) -> None:
    worker = await open_store()
    watching = await open_store() if store_kind == "postgres" else worker
    await waiting(worker, "a")
    await worker.messages.send_update(WF, "a", "u1", "decide", "[]")
    claim = await claim_one(worker, "a")
    [event] = claim.history.events
    now = worker.now()
    await worker.record_step(claim.lease, marker("running", "u1", consume_event=event.pk), now)
    with watching.signals.watch_changes(WF, "a") as watch:
        done = marker("complete", "u1", output='{"n": 1}', ended_at=now)
        finish = Finish("waiting", event_seq=claim.event_seq, steps=(done,))
        assert await worker.finish(claim.lease, finish, now) == "waiting"
        await asyncio.wait_for(watch.wait(5), 10)
    update = await watching.messages.get_update(WF, "a", "u1")
    assert update is not None
    assert (update.status, update.reply, update.instance_status) == (
        "complete",
        {"n": 1},
        "waiting",
    )
    [step] = await worker.get_steps(WF, "a")
    assert (step.kind, step.status, step.output) == ("update", "complete", {"n": 1})
