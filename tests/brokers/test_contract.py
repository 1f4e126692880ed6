"""The broker contract: every promise of ``stepline.triggers.queues.broker`` on every broker.

Each test runs once per broker kind (``conftest.BROKERS``) on a fresh queue.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from stepline.triggers.queues.broker import Broker, BrokerError, Message, open_broker

from .conftest import (
    NO_IDLE_REDELIVERY,
    SECRET,
    claim_idle,
    dead_letter_dedup,
    dead_letters,
    kit,
    unreachable_url,
)


async def receive_all(broker: Broker, count: int, within: float = 5.0) -> list[Message]:
    """Receive until ``count`` messages came (or ``within`` seconds passed)."""
    got: list[Message] = []
    deadline = time.monotonic() + within
    while len(got) < count and time.monotonic() < deadline:
        got.extend(await broker.receive(count - len(got), 0.2))
    return got


async def test_publish_then_receive_round_trips_id_body_and_headers(broker: Broker) -> None:
    await broker.publish(b'{"n": 1}', message_id="order-1", headers={"source": "tests"})
    [message] = await receive_all(broker, 1)
    assert message.id == "order-1"
    assert message.body == b'{"n": 1}'
    assert message.headers.get("source") == "tests"
    assert message.redelivered is False
    await broker.ack([message])


async def test_receive_waits_at_most_the_timeout(broker: Broker) -> None:
    started = time.monotonic()
    assert await broker.receive(10, 0.3) == []
    # Generous bound: the promise is "at most timeout", plus a round trip.
    assert time.monotonic() - started < 3.0


async def test_receive_returns_at_most_max_messages(broker: Broker) -> None:
    for n in range(5):
        await broker.publish(b"{}", message_id=f"m-{n}")
    first = await receive_all(broker, 2)
    assert len(first) == 2
    rest = await receive_all(broker, 3)
    assert sorted(m.id or "" for m in first + rest) == [f"m-{n}" for n in range(5)]
    await broker.ack(first + rest)


async def test_acknowledged_messages_are_never_delivered_again(
    broker: Broker, make_broker: Callable[..., Broker], broker_kind: str
) -> None:
    await broker.publish(b"{}", message_id="once")
    messages = await receive_all(broker, 1)
    await broker.ack(messages)
    await broker.close()
    other = make_broker()
    await other.connect()
    # Past the redelivery interval, nothing comes back.
    deadline = time.monotonic() + claim_idle(broker_kind) * 3
    while time.monotonic() < deadline:
        assert await other.receive(10, 0.1) == []


async def test_unacknowledged_messages_are_delivered_again_after_the_consumer_left(
    broker: Broker, make_broker: Callable[..., Broker]
) -> None:
    await broker.publish(b'{"k": "v"}', message_id="again")
    assert len(await receive_all(broker, 1)) == 1
    await broker.close()  # as if the consumer died: never acknowledged
    other = make_broker()
    await other.connect()
    [second] = await receive_all(other, 1)
    assert (second.id, second.body) == ("again", b'{"k": "v"}')
    assert second.redelivered is True
    await other.ack([second])


async def test_unacknowledged_messages_of_a_live_but_stuck_consumer_go_on_as_promised(
    broker: Broker, make_broker: Callable[..., Broker], broker_kind: str
) -> None:
    """The consumer still holds its connection. A broker with a timer (claim_idle, ack wait)
    hands the message on to another consumer; one without (``NO_IDLE_REDELIVERY``) keeps it
    with the stuck consumer for as long as its connection lives, and hands it on once it
    closes."""
    await broker.publish(b"{}", message_id="stuck")
    await receive_all(broker, 1)
    other = make_broker()
    await other.connect()
    if broker_kind in NO_IDLE_REDELIVERY:
        assert await receive_all(other, 1, within=3.0) == []
        await broker.close()
    [again] = await receive_all(other, 1)
    assert again.id == "stuck"
    assert again.redelivered is True
    await other.ack([again])


async def test_dead_letter_moves_the_message_with_its_reason(
    broker: Broker, broker_kind: str, queue_name: str, make_broker: Callable[..., Broker]
) -> None:
    await broker.publish(b"not json", message_id="poison", headers={"source": "tests"})
    [message] = await receive_all(broker, 1)
    await broker.dead_letter(message, "not valid JSON: unexpected character")
    await broker.close()
    [(body, headers)] = await dead_letters(broker_kind, queue_name)
    assert body == b"not json"
    assert headers["x-stepline-reason"] == "not valid JSON: unexpected character"
    assert headers.get("source") == "tests"
    assert "x-stepline-original-id" in headers
    # Dead-lettered means acknowledged on the queue: never delivered again.
    other = make_broker()
    await other.connect()
    deadline = time.monotonic() + claim_idle(broker_kind) * 3
    while time.monotonic() < deadline:
        assert await other.receive(10, 0.1) == []


POISON = {
    "poison-1": (b"not json", "not valid JSON: unexpected character"),
    "poison-2": (b"[1, 2]", "the message must be an object"),
    "poison-3": (b'{"workflow": "nope"}', "unknown workflow 'nope'"),
    "poison-4": (b"not json", "not valid JSON: unexpected character"),  # poison-1's body again
}
"""Message id -> (body, reason) of distinct poison messages, two of them alike."""


async def test_every_dead_lettered_message_arrives_once_with_its_reason(
    broker: Broker, broker_kind: str, queue_name: str
) -> None:
    """Several messages dead-lettered one after the other each leave their own copy; one
    dead-lettered twice (as after a crash between the copy and the acknowledgement) leaves one
    copy where the broker deduplicates them and two elsewhere, never none."""
    for message_id, (body, _) in POISON.items():
        await broker.publish(body, message_id=message_id, headers={"source": message_id})
    received = {m.id: m for m in await receive_all(broker, len(POISON))}
    assert sorted(received) == sorted(POISON)
    for message_id, (_, reason) in POISON.items():
        await broker.dead_letter(received[message_id], reason)
    await broker.dead_letter(received["poison-2"], POISON["poison-2"][1])
    copies = await dead_letters(broker_kind, queue_name)
    twice = 1 if dead_letter_dedup(broker_kind) else 2
    arrived = sorted(
        (headers["source"], body, headers["x-stepline-reason"]) for body, headers in copies
    )
    assert arrived == sorted(
        (message_id, body, reason)
        for message_id, (body, reason) in POISON.items()
        for _ in range(twice if message_id == "poison-2" else 1)
    )
    originals = {headers["source"]: headers["x-stepline-original-id"] for _, headers in copies}
    assert len(set(originals.values())) == len(POISON)  # each copy names its own original


async def test_connect_and_close_are_idempotent(broker: Broker) -> None:
    await broker.connect()
    await broker.publish(b"{}", message_id="after-reconnect")
    assert [m.id for m in await receive_all(broker, 1)] == ["after-reconnect"]
    await broker.close()
    await broker.close()


async def test_a_closed_broker_connects_again_and_receives_what_was_left(
    broker: Broker, broker_kind: str
) -> None:
    await broker.publish(b"{}", message_id="left")
    await broker.close()
    await broker.connect()
    [message] = await receive_all(broker, 1, within=claim_idle(broker_kind) + 5)
    assert message.id == "left"
    await broker.ack([message])


async def test_an_unreachable_broker_raises_broker_error_without_credentials(
    broker_kind: str, queue_name: str
) -> None:
    broker_class = type(kit(broker_kind).make(queue_name))
    unreachable = broker_class(unreachable_url(kit(broker_kind).URL), queue_name)
    with pytest.raises(BrokerError) as caught:
        await unreachable.connect()
    await unreachable.close()
    assert SECRET not in str(caught.value)
    assert SECRET not in unreachable.url


async def test_open_broker_picks_the_broker_by_url_scheme(
    broker_kind: str, queue_name: str
) -> None:
    module = kit(broker_kind)
    opened = open_broker(module.URL, queue_name)
    assert type(opened) is type(module.make(queue_name))
    await opened.close()
