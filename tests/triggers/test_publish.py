"""Publishing from a step: a retried step publishes the same message id, and the consumer
creates one instance from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from stepline import (
    ConfigError,
    RetryConfig,
    StepConfig,
    StepContext,
    Workflow,
    WorkflowEvent,
    WorkflowStep,
)
from stepline.triggers import QueueTrigger, publish
from stepline.triggers.publish import message_id
from stepline.triggers.queues import Consumer

from ..brokers import _redis
from ..conftest import EngineFactory, drain
from .conftest import Orders

attempts: dict[str, int] = {}


class Producer(Workflow):
    name = "producer"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        stream = event.payload["stream"]

        async def send(ctx: StepContext) -> str:
            ident = await publish(ctx, _redis.URL, stream, {"from": ctx.instance_id})
            attempts[ctx.instance_id] = ctx.attempt
            if ctx.attempt == 1:
                raise RuntimeError("fails after publishing, once")
            return ident

        config = StepConfig(retries=RetryConfig(limit=2, delay=0))
        return await step.do("send", config, send)


async def test_a_retried_step_publishes_one_id_and_the_consumer_creates_one_instance(
    make_engine: EngineFactory, stream: str
) -> None:
    async with make_engine([Producer, Orders]) as engine:
        instance = await engine.workflow("producer").create("p1", {"stream": stream})
        await drain(engine)
        status = await instance.status()
        assert status.status == "complete" and attempts["p1"] == 2
        client = redis.Redis.from_url(_redis.URL)
        entries = client.xrange(stream)
        client.close()
        # Redis keeps both copies; both carry the step's id.
        assert [fields[b"id"].decode() for _, fields in entries] == [status.output] * 2
        consumer = Consumer(
            engine, QueueTrigger(broker=_redis.URL, queue=stream, workflow="orders")
        )
        assert await consumer.run_once(0.5) == 2
        page = await engine.list_instances("orders")
        assert [r.id for r in page.instances] == [status.output]
        assert page.instances[0].params == {"from": "p1"}
        await consumer.close()


def context(**changes: Any) -> StepContext:
    values: dict[str, Any] = {
        "step_name": "send",
        "count": 1,
        "attempt": 1,
        "config": StepConfig(),
        "instance_id": "i1",
        "workflow_name": "w",
    }
    values.update(changes)
    return StepContext(**values)


def test_the_message_id_ignores_the_attempt_and_tells_steps_apart() -> None:
    first = message_id(context(), "q")
    assert message_id(context(attempt=3), "q") == first
    others = {
        message_id(context(count=2), "q"),
        message_id(context(step_name="other"), "q"),
        message_id(context(instance_id="i2"), "q"),
        message_id(context(), "q2"),
        message_id(context(), "q", key="second"),
    }
    assert first not in others and len(others) == 5
    assert first.startswith("p-") and len(first) == 42


async def test_publish_to_a_configured_trigger_by_name(tmp_path: Path, stream: str) -> None:
    config = tmp_path / "stepline.toml"
    config.write_text(
        f'[[triggers.queue]]\nname = "out"\nbroker = "{_redis.URL}"\nqueue = "{stream}"\n'
    )
    ident = await publish(context(), "out", None, [1, 2], config_path=config)
    client = redis.Redis.from_url(_redis.URL)
    [(_, fields)] = client.xrange(stream)
    client.close()
    assert (fields[b"id"].decode(), fields[b"body"]) == (ident, b"[1,2]")
    with pytest.raises(ConfigError, match="no queue trigger named 'nope'"):
        await publish(context(), "nope", None, {}, config_path=config)


async def test_publish_through_an_open_broker(stream: str) -> None:
    broker = _redis.make(stream)
    await broker.connect()
    ident = await publish(context(), broker, None, {"a": 1})
    [message] = await broker.receive(1, 0.5)
    assert message.id == ident and message.body == b'{"a":1}'
    await broker.close()
