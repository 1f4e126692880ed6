"""What only the Redis broker does: reserved field names, entries deleted while pending, the
consumer names it leaves in the group."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import redis

from stepline.triggers.queues.redis import RedisBroker

from . import _redis

pytestmark = pytest.mark.broker


@pytest.fixture
async def stream() -> AsyncIterator[str]:
    name = f"test-{uuid.uuid4().hex[:12]}"
    yield name
    _redis.cleanup(name)


def pending(stream: str) -> int:
    client = redis.Redis.from_url(_redis.URL)
    try:
        return int(client.xpending(stream, "stepline")["pending"])
    finally:
        client.close()


def consumers(stream: str) -> list[str]:
    client = redis.Redis.from_url(_redis.URL)
    try:
        return [c["name"].decode() for c in client.xinfo_consumers(stream, "stepline")]
    finally:
        client.close()


async def test_header_names_id_and_body_are_reserved(stream: str) -> None:
    broker = _redis.make(stream)
    with pytest.raises(ValueError, match="header name 'body' is reserved"):
        await broker.publish(b"{}", message_id="x", headers={"body": "no"})
    await broker.close()


async def test_an_entry_without_a_body_field_is_received_as_unreadable(stream: str) -> None:
    """Entries another program added with fields of its own: the consumer dead-letters them
    with this reason, not as an empty JSON document."""
    broker = _redis.make(stream)
    await broker.connect()
    client = redis.Redis.from_url(_redis.URL)
    client.xadd(stream, {"id": "raw-1", "order_id": "42"})
    client.xadd(stream, {"order_id": "43", "x" * 100: "1"})
    client.close()
    first, second = await broker.receive(2, 0.5)
    assert (first.id, first.body, first.headers) == ("raw-1", b"", {"order_id": "42"})
    assert first.unreadable == (
        "no body field: stepline reads a message from the entry's field 'body' "
        "(this entry has 'id', 'order_id')"
    )
    assert second.unreadable is not None
    assert second.unreadable.startswith("no body field: ")
    assert len(second.unreadable) < 200  # the field names are cut
    await broker.publish(b"", message_id="empty")
    [empty] = await broker.receive(1, 0.5)
    assert (empty.body, empty.unreadable) == (b"", None)  # a body, empty: JSON's to refuse
    await broker.close()


async def test_an_entry_deleted_while_pending_is_dropped_from_the_pending_list(
    stream: str,
) -> None:
    broker = _redis.make(stream)
    await broker.connect()
    await broker.publish(b"{}", message_id="gone")
    [message] = await broker.receive(1, 0.5)
    client = redis.Redis.from_url(_redis.URL)
    client.xdel(stream, message.handle)
    client.close()
    await asyncio.sleep(_redis.CLAIM_IDLE * 1.5)
    assert await broker.receive(1, 0.1) == []
    assert pending(stream) == 0
    await broker.close()


async def test_a_consumer_leaves_the_group_on_close_only_with_nothing_pending(
    stream: str,
) -> None:
    idle, busy = _redis.make(stream), _redis.make(stream)
    for broker in (idle, busy):
        await broker.connect()
        await broker.receive(1, 0.01)  # joins the group
    await busy.publish(b"{}", message_id="held")
    assert len(await busy.receive(1, 0.5)) == 1
    await idle.close()
    await busy.close()
    assert consumers(stream) == [busy.consumer]
    assert pending(stream) == 1


def test_the_dead_letter_stream_and_group_have_defaults() -> None:
    broker = RedisBroker(_redis.URL, "orders")
    assert (broker.group, broker.dead_letter_stream, broker.claim_idle) == (
        "stepline",
        "orders.dead",
        30.0,
    )
    with pytest.raises(ValueError, match="claim_idle must be positive"):
        RedisBroker(_redis.URL, "orders", claim_idle=0)
