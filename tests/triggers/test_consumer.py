"""The queue consumer against Redis, on both stores: messages become instances exactly once,
poison is dead-lettered with its reason, nothing is acknowledged before the create, back-pressure
and outages."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import pytest
import redis

from stepline import Engine, StoreUnavailableError, WorkflowNotFoundError
from stepline.triggers import QueueTrigger
from stepline.triggers.queues import Broker, BrokerError, Consumer, Message
from stepline.triggers.queues.redis import RedisBroker

from ..brokers import _redis
from ..conftest import EngineFactory
from .conftest import Invoices, Orders

CLAIM_IDLE = 0.2


def trigger(stream: str, **options: Any) -> QueueTrigger:
    options.setdefault("workflow", "orders")
    return QueueTrigger(broker=_redis.URL, queue=stream, claim_idle=CLAIM_IDLE, **options)


async def publish(stream: str, *bodies: Any, ids: Sequence[str] | None = None) -> None:
    broker = RedisBroker(_redis.URL, stream)
    for index, body in enumerate(bodies):
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        message_id = ids[index] if ids is not None else f"m-{index}"
        await broker.publish(data, message_id=message_id)
    await broker.close()


async def ids_of(engine: Engine, workflow: str = "orders") -> list[str]:
    page = await engine.list_instances(workflow, limit=1000)
    return sorted(record.id for record in page.instances)


async def drain(consumer: Consumer, expected: int, timeout: float = 0.5) -> int:
    handled = 0
    for _ in range(20):
        handled += await consumer.run_once(timeout)
        if handled >= expected:
            break
    return handled


async def test_messages_become_instances_once_even_when_delivered_again(
    make_engine: EngineFactory, stream: str
) -> None:
    async with make_engine([Orders]) as engine:
        consumer = Consumer(engine, trigger(stream, id_key="order_id", id_prefix="o-"))
        orders = [{"order_id": n, "total": n * 10} for n in range(1, 4)]
        await publish(stream, *orders)
        assert await drain(consumer, 3) == 3
        assert await ids_of(engine) == ["o-1", "o-2", "o-3"]
        record = await (await engine.get_instance("orders", "o-2")).record()
        assert (record.params, record.trigger) == ({"order_id": 2, "total": 20}, f"queue:{stream}")
        # Published again (another message id, the same order): nothing new.
        await publish(stream, *orders, ids=["again-1", "again-2", "again-3"])
        assert await drain(consumer, 3) == 3
        assert await ids_of(engine) == ["o-1", "o-2", "o-3"]
        await consumer.close()


async def test_tags_come_from_the_params_keys_and_the_envelope(
    make_engine: EngineFactory, stream: str
) -> None:
    async with make_engine([Orders]) as engine:
        consumer = Consumer(
            engine, trigger(stream, workflow=None, id_key="order_id", tag_keys=["customer"])
        )
        await publish(
            stream,
            {"workflow": "orders", "params": {"order_id": 1, "customer": "c-42"}},
            {"workflow": "orders", "params": {"order_id": 2}, "tags": {"campaign": "spring"}},
            {"workflow": "orders", "params": {"order_id": 3, "customer": ["not", "a", "tag"]}},
        )
        assert await drain(consumer, 3) == 3
        assert await engine.count_instances("customer = 'c-42'") == 1
        assert await engine.count_instances("campaign = 'spring'") == 1
        assert await ids_of(engine) == ["1", "2"]  # the third is poison: its tag is refused
        await consumer.close()


async def test_without_id_key_the_message_id_is_the_instance_id(
    make_engine: EngineFactory, stream: str
) -> None:
    async with make_engine([Orders]) as engine:
        consumer = Consumer(engine, trigger(stream))
        await publish(stream, {"a": 1}, {"a": 2}, {"a": 1}, ids=["x1", "x2", "x1"])
        assert await drain(consumer, 3) == 3
        assert await ids_of(engine) == ["x1", "x2"]
        await consumer.close()


async def test_envelopes_name_the_workflow_and_may_carry_the_id(
    make_engine: EngineFactory, stream: str
) -> None:
    async with make_engine([Orders, Invoices]) as engine:
        consumer = Consumer(engine, trigger(stream, workflow=None))
        await publish(
            stream,
            {"workflow": "orders", "params": {"n": 1}, "id": "first"},
            {"workflow": "invoices", "params": [1, 2]},
            ids=["m-a", "m-b"],
        )
        assert await drain(consumer, 2) == 2
        assert await ids_of(engine, "orders") == ["first"]
        assert await ids_of(engine, "invoices") == ["m-b"]
        await consumer.close()


async def test_poison_messages_are_dead_lettered_with_their_reason(
    make_engine: EngineFactory, stream: str
) -> None:
    async with make_engine([Orders]) as engine:
        consumer = Consumer(engine, trigger(stream, workflow=None, id_key="order_id"))
        await publish(
            stream,
            b"{not json",
            {"workflow": "nope", "params": {"order_id": "a"}},
            {"workflow": "orders", "params": {"order_id": "bad id!"}},
            {"workflow": "orders", "params": {"total": 1}},
            b'{"workflow": "orders", "params": {"order_id": "big", "n": 1180591620717411303424}}',
            {"workflow": "orders", "params": {"order_id": "good"}},
            [1, 2],
        )
        client = redis.Redis.from_url(_redis.URL)
        client.xadd(stream, {"id": "no-body", "order_id": "a"})  # not written by stepline
        client.close()
        assert await drain(consumer, 8) == 8
        assert await ids_of(engine) == ["good"]
        reasons = {
            body: headers["x-stepline-reason"] for body, headers in _redis.dead_letters(stream)
        }
        assert len(reasons) == 7
        assert reasons[b"{not json"].startswith("not valid JSON: ")
        assert reasons[b'{"workflow":"nope","params":{"order_id":"a"}}'] == (
            "unknown workflow 'nope'"
        )
        bad_id = reasons[b'{"workflow":"orders","params":{"order_id":"bad id!"}}']
        assert bad_id.startswith("invalid instance id 'bad id!' from id_key 'order_id'")
        missing = reasons[b'{"workflow":"orders","params":{"total":1}}']
        assert missing == "id_key 'order_id' is missing from the params"
        wide = next(reason for body, reason in reasons.items() if b'"big"' in body)
        assert wide.startswith("params rejected: ") and "1180591620717411303424" in wide
        assert reasons[b"[1,2]"].startswith("the message must be an object")
        assert reasons[b""] == (
            "no body field: stepline reads a message from the entry's field 'body' "
            "(this entry has 'id', 'order_id')"
        )
        assert consumer.dead_lettered == 7
        # Dead-lettered messages are acknowledged: nothing comes back, even after claim_idle.
        await asyncio.sleep(CLAIM_IDLE * 2)
        assert await consumer.run_once(0.1) == 0
        await consumer.close()


async def test_params_over_the_engines_limit_are_dead_lettered_alone(
    make_engine: EngineFactory, stream: str
) -> None:
    async with make_engine([Orders], max_payload=100) as engine:
        consumer = Consumer(engine, trigger(stream))
        await publish(stream, {"n": 1}, {"text": "x" * 200}, {"n": 3}, ids=["a", "b", "c"])
        assert await drain(consumer, 3) == 3
        assert await ids_of(engine) == ["a", "c"]
        [(_, headers)] = _redis.dead_letters(stream)
        assert headers["x-stepline-reason"].startswith("params rejected: ")
        assert "over the limit of 100 bytes" in headers["x-stepline-reason"]
        await consumer.close()


class _BrokenStore:
    """Bindings whose creates fail as a database outage would."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.attempts = 0

    def workflow(self, workflow: str) -> Any:
        outer = self

        class Binding:
            async def create_batch(self, items: Any, *, trigger: str) -> Any:
                outer.attempts += 1
                raise StoreUnavailableError("the database is down (test)")

        return Binding()

    async def list_workflows(self) -> Any:
        return await self.engine.list_workflows()


async def test_nothing_is_acknowledged_before_the_create_returned(
    make_engine: EngineFactory, stream: str
) -> None:
    async with make_engine([Orders]) as engine:
        broken = _BrokenStore(engine)
        failing = Consumer(broken, trigger(stream))  # type: ignore[arg-type]
        await publish(stream, {"n": 1}, {"n": 2}, ids=["k1", "k2"])
        with pytest.raises(StoreUnavailableError):
            await failing.run_once(0.5)
        assert broken.attempts == 1
        await failing.close()  # as if it died: both messages stay pending
        assert await ids_of(engine) == []
        await asyncio.sleep(CLAIM_IDLE * 1.5)
        consumer = Consumer(engine, trigger(stream))
        assert await drain(consumer, 2) == 2
        assert await ids_of(engine) == ["k1", "k2"]
        assert _redis.dead_letters(stream) == []
        await consumer.close()


async def test_max_queued_stops_pulling_until_the_queue_shrinks(
    make_engine: EngineFactory, stream: str
) -> None:
    async with make_engine([Orders]) as engine:
        orders = engine.workflow("orders")
        for n in range(2):
            await orders.create(f"queued-{n}")
        consumer = Consumer(engine, trigger(stream, max_queued=3))
        await publish(stream, *[{"n": n} for n in range(4)], ids=["a", "b", "c", "d"])
        # Room for one: 2 queued, max 3.
        assert await consumer.run_once(0.5) == 1
        assert await consumer.run_once(0.5) == 0
        assert len(await ids_of(engine)) == 3
        await (await orders.get("queued-0")).terminate()
        await (await orders.get("queued-1")).terminate()
        assert await consumer.run_once(0.5) == 2
        assert len(await ids_of(engine)) == 5
        await consumer.close()


class _Flaky(Broker):
    """A Redis broker that fails every call while ``down`` is set."""

    def __init__(self, inner: Broker) -> None:
        self.inner = inner
        self.url = inner.url
        self.down = True

    def _check(self) -> None:
        if self.down:
            raise BrokerError(f"{self.url}: connection refused (test)")

    async def connect(self) -> None:
        self._check()
        await self.inner.connect()

    async def close(self) -> None:
        await self.inner.close()

    async def receive(self, max_messages: int, timeout: float) -> list[Message]:
        self._check()
        return await self.inner.receive(max_messages, min(timeout, 0.1))

    async def ack(self, messages: Sequence[Message]) -> None:
        self._check()
        await self.inner.ack(messages)

    async def dead_letter(self, message: Message, reason: str) -> None:
        self._check()
        await self.inner.dead_letter(message, reason)

    async def publish(
        self, body: bytes, *, message_id: str, headers: Mapping[str, str] | None = None
    ) -> None:
        self._check()
        await self.inner.publish(body, message_id=message_id, headers=headers)


async def test_an_outage_is_retried_and_logged_once_when_it_starts_and_once_when_it_ends(
    make_engine: EngineFactory, stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="stepline.triggers")
    async with make_engine([Orders]) as engine:
        flaky = _Flaky(RedisBroker(_redis.URL, stream, claim_idle=CLAIM_IDLE))
        consumer = Consumer(
            engine,
            trigger(stream),
            broker_factory=lambda: flaky,
            receive_timeout=0.1,
            backoff=(0.005, 0.02),
        )
        running = asyncio.create_task(consumer.run())
        await asyncio.sleep(0.3)  # many failed attempts
        await publish(stream, {"n": 1}, ids=["after"])
        flaky.down = False
        for _ in range(100):
            if await ids_of(engine):
                break
            await asyncio.sleep(0.02)
        consumer.stop()
        await running
        assert await ids_of(engine) == ["after"]
    messages = [r.getMessage() for r in caplog.records if r.name == "stepline.triggers"]
    failed = [m for m in messages if "broker failed" in m]
    recovered = [m for m in messages if "recovered after" in m]
    assert len(failed) == 1 and "connection refused (test)" in failed[0]
    assert len(recovered) == 1


async def test_an_unknown_configured_workflow_stops_the_consumer_before_it_receives(
    make_engine: EngineFactory, stream: str
) -> None:
    async with make_engine([Orders]) as engine:
        consumer = Consumer(engine, trigger(stream, workflow="missing"))
        with pytest.raises(WorkflowNotFoundError, match="missing"):
            await consumer.run()


async def test_run_consumes_with_several_lanes_until_stopped(
    make_engine: EngineFactory, stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="stepline.triggers")
    async with make_engine([Orders]) as engine:
        consumer = Consumer(
            engine, trigger(stream, batch_size=7, concurrency=3), receive_timeout=0.2
        )
        await publish(stream, *[{"n": n} for n in range(50)], ids=[f"n{n}" for n in range(50)])
        running = asyncio.create_task(consumer.run())
        for _ in range(200):
            if consumer.handled >= 50:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.05)  # the lanes wait in receive
        consumer.stop()
        await asyncio.wait_for(running, 5)
        assert len(await ids_of(engine)) == 50
    # Stopping abandons the waiting receives quietly: no failure is logged.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
