"""What is particular to NATS JetStream, beyond the shared contract (``test_contract.py``): the
stream and consumer it declares, the duplicate window, ids from the stream sequence, acks
across a reconnect, dead letters kept once after a crash, outages."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.js import JetStreamContext

from stepline.errors import ConfigError
from stepline.triggers.queues.broker import BrokerError, Message
from stepline.triggers.queues.nats import NatsBroker, stream_name_for

from ._nats import CLAIM_IDLE, URL, cleanup, make

pytestmark = pytest.mark.broker


@pytest.fixture
def queue() -> str:
    return f"stepline-test.{uuid.uuid4().hex}"


@pytest.fixture
async def broker(queue: str) -> AsyncIterator[NatsBroker]:
    b = make(queue)
    await b.connect()
    try:
        yield b
    finally:
        await b.close()
        await cleanup(queue)


@pytest.fixture
async def js() -> AsyncIterator[JetStreamContext]:
    nc = await nats.connect(URL, allow_reconnect=False, max_reconnect_attempts=1)
    try:
        yield nc.jetstream()
    finally:
        await nc.close()


async def publish_ids(broker: NatsBroker, *ids: str) -> None:
    for i in ids:
        await broker.publish(f'{{"n": "{i}"}}'.encode(), message_id=i)


async def receive_all(broker: NatsBroker, count: int, timeout: float = 5.0) -> list[Message]:
    """Receive until ``count`` messages arrived or ``timeout`` passed."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += await broker.receive(count - len(got), max(deadline - time.monotonic(), 0.01))
    return got


async def test_receive_returns_a_message_published_while_it_waits(broker: NatsBroker) -> None:
    async def later() -> None:
        await asyncio.sleep(0.2)
        await publish_ids(broker, "late")

    task = asyncio.create_task(later())
    got = await broker.receive(10, 10.0)
    await task
    assert [m.id for m in got] == ["late"]


async def test_a_second_publish_with_the_same_id_is_dropped(broker: NatsBroker) -> None:
    await broker.publish(b"first", message_id="same")
    await broker.publish(b"second", message_id="same")
    await broker.publish(b"other", message_id="other")
    got = await receive_all(broker, 3, timeout=1.0)
    assert [(m.id, m.body) for m in got] == [("same", b"first"), ("other", b"other")]


async def test_receive_returns_at_most_max_messages_in_order(broker: NatsBroker) -> None:
    await publish_ids(broker, "a", "b", "c", "d", "e")
    first = await broker.receive(3, 5.0)
    assert [m.id for m in first] == ["a", "b", "c"]
    rest = await receive_all(broker, 2)
    assert [m.id for m in rest] == ["d", "e"]
    await broker.ack(first + rest)


async def test_a_message_received_before_a_reconnect_can_still_be_acknowledged(
    broker: NatsBroker,
) -> None:
    await publish_ids(broker, "a")
    got = await receive_all(broker, 1)
    await broker.close()
    await broker.ack(got)  # on a new connection
    assert await broker.receive(10, CLAIM_IDLE + 0.5) == []


async def test_dead_letter_moves_the_message_with_its_reason(
    broker: NatsBroker, queue: str, js: JetStreamContext
) -> None:
    await broker.publish(b"not json", message_id="poison", headers={"k": "v"})
    [m] = await receive_all(broker, 1)
    await broker.dead_letter(m, "invalid JSON:\r\nExpecting value")

    dead_stream = f"{stream_name_for(queue)}_DEAD"
    copy = await js.get_last_msg(dead_stream, f"{queue}.dead")
    assert copy.data == b"not json"
    assert copy.headers is not None
    assert copy.headers["x-stepline-reason"] == "invalid JSON: Expecting value"
    assert copy.headers["x-stepline-original-id"] == "poison"
    assert copy.headers["k"] == "v"
    assert not any(k.lower().startswith("nats-expected-") for k in copy.headers)
    # The original is acknowledged: it does not come back.
    assert await broker.receive(10, CLAIM_IDLE + 0.5) == []


async def test_dead_lettering_again_after_a_crash_keeps_one_copy(
    broker: NatsBroker, queue: str, js: JetStreamContext
) -> None:
    await publish_ids(broker, "poison")
    [m] = await receive_all(broker, 1)
    await broker.dead_letter(m, "unknown workflow")
    await broker.dead_letter(m, "unknown workflow")
    info = await js.stream_info(f"{stream_name_for(queue)}_DEAD")
    assert info.state.messages == 1


async def test_a_message_published_without_an_id_gets_the_stream_and_sequence(
    broker: NatsBroker, queue: str, js: JetStreamContext
) -> None:
    ack = await js.publish(queue, b"{}")
    [m] = await receive_all(broker, 1)
    assert m.id == f"{stream_name_for(queue)}-{ack.seq}"
    await broker.ack([m])


async def test_connect_is_idempotent_and_declares_the_stream_and_consumer(
    broker: NatsBroker, queue: str, js: JetStreamContext
) -> None:
    await broker.connect()
    await broker.connect()
    stream = await js.stream_info(stream_name_for(queue))
    assert stream.config.subjects == [queue]
    assert stream.config.duplicate_window == 120.0
    consumer = await js.consumer_info(stream_name_for(queue), "stepline")
    assert consumer.config.filter_subject == queue
    assert consumer.config.ack_wait == CLAIM_IDLE
    # A second consumer of the group connects to what exists and shares the work.
    other = make(queue)
    await other.connect()
    try:
        await publish_ids(broker, "a")
        got = await receive_all(other, 1)
        assert [m.id for m in got] == ["a"]
        await other.ack(got)
    finally:
        await other.close()


async def test_a_consumer_deleted_meanwhile_is_declared_again(
    broker: NatsBroker, queue: str, js: JetStreamContext
) -> None:
    await js.delete_consumer(stream_name_for(queue), "stepline")
    assert await broker.receive(10, 0.3) == []  # finds it gone
    await publish_ids(broker, "a")
    got = await receive_all(broker, 1)
    assert [m.id for m in got] == ["a"]
    await broker.ack(got)


async def test_a_changed_claim_idle_updates_the_consumer(
    broker: NatsBroker, queue: str, js: JetStreamContext
) -> None:
    slower = NatsBroker(URL, queue, claim_idle=7.0)
    await slower.connect()
    await slower.close()
    consumer = await js.consumer_info(stream_name_for(queue), "stepline")
    assert consumer.config.ack_wait == 7.0


async def test_an_existing_stream_with_other_subjects_is_refused_and_left_alone(
    queue: str, js: JetStreamContext
) -> None:
    stream = stream_name_for(queue)
    await js.add_stream(name=stream, subjects=[f"{queue}-other"])
    broker = make(queue)
    try:
        with pytest.raises(BrokerError, match="exists with subjects"):
            await broker.connect()
        assert (await js.stream_info(stream)).config.subjects == [f"{queue}-other"]
    finally:
        await broker.close()
        await cleanup(queue)


async def test_a_subject_held_by_another_stream_is_refused(
    queue: str, js: JetStreamContext
) -> None:
    holder = f"HOLDER_{uuid.uuid4().hex}"
    await js.add_stream(name=holder, subjects=[queue])
    broker = make(queue)
    try:
        with pytest.raises(BrokerError, match=f"belongs to stream '{holder}'"):
            await broker.connect()
        # Naming that stream works, the dead letters getting their own.
        named = NatsBroker(URL, queue, stream=holder, claim_idle=CLAIM_IDLE)
        await named.connect()
        await publish_ids(named, "a")
        got = await receive_all(named, 1)
        assert [m.id for m in got] == ["a"]
        await named.close()
    finally:
        await broker.close()
        await js.delete_stream(holder)
        await cleanup(queue)
        await js.delete_stream(f"{holder}_DEAD")


NATS_SERVER = shutil.which("nats-server") or shutil.which("/usr/sbin/nats-server")


def start_private_server(port: int, store: Path) -> subprocess.Popen[bytes]:
    assert NATS_SERVER is not None
    return subprocess.Popen(
        [NATS_SERVER, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(store)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def wait_until_up(broker: NatsBroker) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            await broker.connect()
            return
        except BrokerError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


@pytest.mark.skipif(NATS_SERVER is None, reason="needs the nats-server binary")
async def test_an_outage_raises_broker_error_and_the_next_call_after_it_reconnects(
    tmp_path: Path,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = start_private_server(port, tmp_path)
    broker = NatsBroker(f"nats://127.0.0.1:{port}", "orders", claim_idle=CLAIM_IDLE)
    try:
        await wait_until_up(broker)
        await publish_ids(broker, "a")
        assert [m.id for m in await receive_all(broker, 1)] == ["a"]

        server.terminate()
        server.wait()
        with pytest.raises(BrokerError, match=f"127.0.0.1:{port}"):
            await asyncio.wait_for(broker.receive(1, 0.5), 15)
        with pytest.raises(BrokerError):
            await asyncio.wait_for(broker.publish(b"{}", message_id="b"), 15)

        server = start_private_server(port, tmp_path)
        await wait_until_up(broker)
        again = await receive_all(broker, 1, timeout=CLAIM_IDLE + 5.0)
        assert [(m.id, m.redelivered) for m in again] == [("a", True)]
        await broker.ack(again)
    finally:
        await broker.close()
        server.terminate()
        server.wait()


@pytest.mark.parametrize(
    ("queue", "options"),
    [
        ("orders.*", {}),
        ("orders.>", {}),
        ("orders new", {}),
        ("orders", {"dead_letter": "orders"}),
        ("orders", {"group": "a.b"}),
        ("orders", {"stream": "A.B"}),
        ("orders", {"claim_idle": 0}),
    ],
)
def test_invalid_names_are_refused(queue: str, options: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        NatsBroker(URL, queue, **options)


def test_the_default_stream_is_derived_from_the_queue() -> None:
    assert stream_name_for("orders.new") == "ORDERS_NEW"
    assert NatsBroker(URL, "orders.new").stream == "ORDERS_NEW"
    assert NatsBroker(URL, "orders.new", stream="MINE").stream == "MINE"
