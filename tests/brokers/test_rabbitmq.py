"""What is particular to RabbitMQ, beyond the shared contract (``test_contract.py``): redelivery
to another consumer, exactly which deliveries an ack covers, the dead-letter copy and RabbitMQ's
own dead-lettering, messages without ``message_id``, declaration conflicts, credentials and
outages."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import aio_pika
import pamqp.body
import pamqp.exceptions
import pamqp.frame
import pamqp.header
import pytest
from pamqp import commands

from stepline.triggers.queues.broker import BrokerError, Message
from stepline.triggers.queues.rabbitmq import RabbitMQBroker, redact_url

from . import _rabbitmq

pytestmark = pytest.mark.broker


@pytest.fixture
async def queue() -> AsyncIterator[str]:
    name = f"stepline-test-{uuid.uuid4().hex[:12]}"
    yield name
    await _rabbitmq.cleanup(name)


@pytest.fixture
async def opened(queue: str) -> AsyncIterator[Callable[[], RabbitMQBroker]]:
    """Makes brokers on the test's queue; closes all of them at the end."""
    brokers: list[RabbitMQBroker] = []

    def new() -> RabbitMQBroker:
        brokers.append(_rabbitmq.make(queue))
        return brokers[-1]

    yield new
    for b in brokers:
        await b.close()


@pytest.fixture
async def broker(opened: Callable[[], RabbitMQBroker]) -> RabbitMQBroker:
    b = opened()
    await b.connect()
    return b


async def receive_all(broker: RabbitMQBroker, count: int, timeout: float = 5.0) -> list[Message]:
    """Receive until ``count`` messages came, failing after ``timeout`` seconds."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += await broker.receive(count - len(got), 0.5)
    assert len(got) == count, [m.id for m in got]
    return got


async def reopen(opened: Callable[[], RabbitMQBroker], old: RabbitMQBroker) -> RabbitMQBroker:
    await old.close()
    new = opened()
    await new.connect()
    return new


async def test_receive_returns_a_message_published_while_it_waits(broker: RabbitMQBroker) -> None:
    async def later() -> None:
        await asyncio.sleep(0.1)
        await broker.publish(b"late", message_id="m-late")

    started = time.monotonic()
    task = asyncio.create_task(later())
    # Runs on a second channel-user task; receive must return on arrival, not at its timeout.
    got = await broker.receive(10, 30)
    await task
    assert [m.body for m in got] == [b"late"]
    assert time.monotonic() - started < 20


async def test_unacknowledged_messages_go_to_another_consumer_when_one_closes(
    broker: RabbitMQBroker, opened: Callable[[], RabbitMQBroker]
) -> None:
    other = opened()
    await other.connect()
    await broker.publish(b"x", message_id="m0")
    [m] = await receive_all(broker, 1)
    assert await other.receive(10, 0.2) == []
    await broker.close()
    [again] = await receive_all(other, 1)
    assert (again.id, again.redelivered) == (m.id, True)


@pytest.mark.parametrize(
    ("acked", "left"),
    [
        ([0, 1], [2]),  # contiguous from the first unacked: one multiple ack
        ([0, 2], [1]),  # a gap: each on its own, 1 must stay unacked
        ([1, 2], [0]),  # contiguous but not from the first unacked: 0 must stay unacked
        ([2], [0, 1]),
    ],
)
async def test_ack_acknowledges_exactly_the_messages_given(
    broker: RabbitMQBroker,
    opened: Callable[[], RabbitMQBroker],
    acked: list[int],
    left: list[int],
) -> None:
    for i in range(3):
        await broker.publish(b"x", message_id=f"m{i}")
    got = {m.id: m for m in await receive_all(broker, 3)}
    await broker.ack([got[f"m{i}"] for i in acked])
    again = await reopen(opened, broker)
    assert sorted(m.id or "" for m in await receive_all(again, len(left))) == [
        f"m{i}" for i in left
    ]
    assert await again.receive(10, 0.2) == []


async def test_ack_is_idempotent(
    broker: RabbitMQBroker, opened: Callable[[], RabbitMQBroker]
) -> None:
    for i in range(2):
        await broker.publish(b"x", message_id=f"m{i}")
    got = await receive_all(broker, 2)
    await broker.ack([got[0], got[0], got[1]])  # one message twice in one call
    # A second ack of one delivery tag would make RabbitMQ close the channel.
    await broker.ack(got)
    await broker.ack(got[:1])
    await broker.publish(b"y", message_id="m2")
    [m] = await receive_all(broker, 1)
    assert m.id == "m2"
    await broker.ack([m])
    again = await reopen(opened, broker)
    assert await again.receive(10, 0.2) == []


async def raw_get(queue: str) -> aio_pika.abc.AbstractIncomingMessage | None:
    """One message taken from ``queue`` outside stepline, acknowledged."""
    connection = await aio_pika.connect(_rabbitmq.URL)
    try:
        channel = await connection.channel()
        q = await channel.get_queue(queue, ensure=False)
        message = await q.get(fail=False)
        if message is not None:
            await message.ack()
        return message
    finally:
        await connection.close()


async def publish_without_message_id(queue: str, body: bytes, headers: dict[str, Any]) -> None:
    """Publish as clients other than aio-pika do (pika, the Java client): without a
    ``message_id``. aiormq gives every message it publishes one, so this speaks AMQP 0-9-1 in
    pamqp's frames: log in, open a channel with confirms, publish, wait for the ack."""
    url = urlsplit(_rabbitmq.URL)
    reader, writer = await asyncio.open_connection(url.hostname, url.port or 5672)
    received = b""

    async def expect(kind: type[Any]) -> Any:
        nonlocal received
        while True:
            try:
                used, _, frame = pamqp.frame.unmarshal(received)
            except pamqp.exceptions.UnmarshalingException:
                chunk = await reader.read(65536)
                assert chunk, f"connection closed waiting for {kind.__name__}"
                received += chunk
                continue
            received = received[used:]
            if isinstance(frame, kind):
                return frame

    def send(frame: Any, channel: int = 0) -> None:
        writer.write(pamqp.frame.marshal(frame, channel))

    try:
        send(pamqp.header.ProtocolHeader())
        await expect(commands.Connection.Start)
        login = f"\0{url.username}\0{url.password}"
        send(commands.Connection.StartOk(mechanism="PLAIN", response=login))
        tune = await expect(commands.Connection.Tune)
        send(commands.Connection.TuneOk(tune.channel_max, tune.frame_max, 0))
        send(commands.Connection.Open(virtual_host="/"))
        await expect(commands.Connection.OpenOk)
        send(commands.Channel.Open(), 1)
        await expect(commands.Channel.OpenOk)
        send(commands.Confirm.Select(), 1)
        await expect(commands.Confirm.SelectOk)
        send(commands.Basic.Publish(exchange="", routing_key=queue, mandatory=True), 1)
        properties = commands.Basic.Properties(headers=headers, delivery_mode=2)
        send(pamqp.header.ContentHeader(0, len(body), properties), 1)
        send(pamqp.body.ContentBody(body), 1)
        await expect(commands.Basic.Ack)
        send(commands.Connection.Close(200, "done", 0, 0))
        await expect(commands.Connection.CloseOk)
    finally:
        writer.close()
        await writer.wait_closed()


async def test_dead_letter_moves_the_message_with_its_reason(
    broker: RabbitMQBroker, opened: Callable[[], RabbitMQBroker], queue: str
) -> None:
    await broker.publish(b"not json", message_id="m0", headers={"source": "test"})
    await broker.publish(b"{}", message_id="m1")
    got = {m.id: m for m in await receive_all(broker, 2)}
    await broker.dead_letter(got["m0"], "body is not JSON: Expecting value")
    dead = await raw_get(f"{queue}.dead")
    assert dead is not None
    assert dead.body == b"not json"
    assert dead.message_id == "m0"
    assert dead.headers == {
        "source": "test",
        "x-stepline-reason": "body is not JSON: Expecting value",
        "x-stepline-original-id": "m0",
    }
    assert await raw_get(f"{queue}.dead") is None
    # The original is acknowledged; the other message, never acked, comes back alone.
    again = await reopen(opened, broker)
    assert [m.id for m in await receive_all(again, 1)] == ["m1"]
    assert await again.receive(10, 0.2) == []


async def test_a_message_without_message_id_has_no_id_and_can_be_dead_lettered(
    broker: RabbitMQBroker, queue: str
) -> None:
    await publish_without_message_id(queue, b"{}", {"n": 7})
    [m] = await receive_all(broker, 1)
    assert m.id is None
    assert m.headers == {"n": "7"}
    await broker.dead_letter(m, "no message_id and no id_key")
    dead = await raw_get(f"{queue}.dead")
    assert dead is not None
    assert dead.headers == {"n": 7, "x-stepline-reason": "no message_id and no id_key"}
    assert await broker.receive(10, 0.2) == []


async def test_messages_rabbitmq_dead_letters_itself_reach_the_dead_letter_queue(
    broker: RabbitMQBroker, queue: str
) -> None:
    await broker.publish(b"x", message_id="m0")
    [m] = await receive_all(broker, 1)
    await m.handle.reject(requeue=False)
    dead = None
    for _ in range(50):
        if (dead := await raw_get(f"{queue}.dead")) is not None:
            break
        await asyncio.sleep(0.05)
    assert dead is not None and dead.message_id == "m0"


async def test_a_queue_declared_with_other_arguments_is_a_broker_error(queue: str) -> None:
    connection = await aio_pika.connect(_rabbitmq.URL)
    try:
        channel = await connection.channel()
        await channel.declare_queue(queue, durable=True)
    finally:
        await connection.close()
    broker = _rabbitmq.make(queue)
    with pytest.raises(BrokerError, match="already exists with other arguments") as raised:
        await broker.connect()
    assert "x-dead-letter-exchange" in str(raised.value)
    await broker.close()


async def test_close_is_idempotent_and_a_closed_broker_reconnects(
    broker: RabbitMQBroker,
) -> None:
    await broker.close()
    await broker.close()
    with pytest.raises(BrokerError, match="not connected"):
        await broker.receive(1, 0)
    await broker.connect()
    await broker.publish(b"x", message_id="m0")
    assert [m.id for m in await receive_all(broker, 1)] == ["m0"]


async def test_wrong_credentials_are_a_broker_error(queue: str) -> None:
    broker = RabbitMQBroker("amqp://guest:wrong-pw@127.0.0.1:5672/", queue)
    with pytest.raises(BrokerError) as raised:
        await broker.connect()
    assert "amqp://guest@127.0.0.1:5672/" in str(raised.value)
    assert "wrong-pw" not in str(raised.value)


def test_redact_url() -> None:
    assert redact_url("amqp://guest:guest@127.0.0.1:5672/") == "amqp://guest@127.0.0.1:5672/"
    assert redact_url("amqps://u:p%40ss@[::1]:5671/vh") == "amqps://u@[::1]:5671/vh"
    assert redact_url("amqp://127.0.0.1/") == "amqp://127.0.0.1/"


async def test_an_outage_is_a_broker_error_and_the_connection_comes_back(queue: str) -> None:
    """The connection drops (a proxy aborts it): every method raises BrokerError, the
    unacknowledged delivery cannot be acked and comes again, redelivered, once aio-pika has
    reconnected."""
    links: list[asyncio.StreamWriter] = []

    async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        sink.close()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        url = urlsplit(_rabbitmq.URL)
        up_reader, up_writer = await asyncio.open_connection(url.hostname, url.port or 5672)
        links.extend([writer, up_writer])
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    proxy = await asyncio.start_server(relay, "127.0.0.1", 0)
    port = proxy.sockets[0].getsockname()[1]
    broker = RabbitMQBroker(f"amqp://guest:guest@127.0.0.1:{port}/?reconnect_interval=0.2", queue)
    try:
        await broker.connect()
        await broker.publish(b"x", message_id="m0")
        got = await receive_all(broker, 1)
        for link in links:
            link.transport.abort()
        await asyncio.sleep(0.05)
        with pytest.raises(BrokerError, match="connection lost"):
            await broker.receive(10, 0.1)
        with pytest.raises(BrokerError, match="cannot acknowledge"):
            await broker.ack(got)
        with pytest.raises(BrokerError, match="connection lost"):
            await broker.publish(b"y", message_id="m1")
        again: list[Message] = []
        for _ in range(100):
            with contextlib.suppress(BrokerError):
                again = await broker.receive(10, 0.1)
            if again:
                break
            await asyncio.sleep(0.05)
        assert [(m.id, m.redelivered) for m in again] == [("m0", True)]
        await broker.ack(again)
        assert await broker.receive(10, 0.2) == []
    finally:
        await broker.close()
        proxy.close()
        await proxy.wait_closed()
