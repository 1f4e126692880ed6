"""Publishing to a queue from a step, keyed on the step so that a retried step's message
creates one instance at the consumer.

A step callback may run more than once (a retry, a worker that died mid-step), and so may the
publish inside it. The message id is derived from the workflow, the instance, the step's name
and occurrence, the queue and an optional ``key``, never from the attempt: every run of the
step publishes the same id, and the consumer, which makes the instance id from the message id,
creates one instance. Whether the broker also stores the message once depends on the broker
(docs/triggers.md): NATS JetStream drops a repeat within its duplicate window; Redis and
RabbitMQ keep both copies and the consumer skips the second.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from .. import _json
from ..errors import ConfigError
from ..project import load_project
from ..step import StepContext
from .queues.broker import Broker, open_broker
from .queues.config import QueueTrigger


def message_id(ctx: StepContext, queue: str, key: str = "") -> str:
    """The id a message published by this step gets: the same on every attempt, a valid
    instance id (``p-`` and 40 hex digits)."""
    identity = [ctx.workflow_name, ctx.instance_id, ctx.step_name, ctx.count, queue, key]
    return "p-" + hashlib.sha256(orjson.dumps(identity)).hexdigest()[:40]


def _trigger(name: str, config_path: Path | None) -> QueueTrigger:
    project = load_project(config_path=config_path)
    for entry in project.queue_triggers:
        if entry.name == name:
            return QueueTrigger.from_entry(entry, project.path)
    known = ", ".join(entry.name for entry in project.queue_triggers) or "none"
    raise ConfigError(
        f"no queue trigger named {name!r} in {project.describe_source()} (configured: {known}); "
        "pass a broker URL such as redis://127.0.0.1:6379/0 instead"
    )


async def publish(
    ctx: StepContext,
    broker: str | Broker,
    queue: str | None,
    message: Any,
    *,
    key: str = "",
    headers: Mapping[str, str] | None = None,
    config_path: Path | None = None,
) -> str:
    """Publish ``message`` (a JSON value; ``bytes`` are sent as they are) from inside a
    ``step.do`` callback that takes the :class:`~stepline.StepContext`; returns the message id.

    ``broker`` is a broker URL (``queue`` names the queue), the name of a
    ``[[triggers.queue]]`` table in stepline.toml (its broker and queue; ``queue`` may be None),
    or a :class:`~stepline.triggers.queues.Broker` the caller opened and closes (its own queue).
    A connection is opened and closed per call otherwise. Publish several messages from one
    step with a different ``key`` each. While stepline traces, the message carries the step's
    W3C ``traceparent`` header (:attr:`StepContext.traceparent`), and the instance a consumer
    makes of it continues the trace.
    """
    body = message if isinstance(message, bytes) else _json.dumps(message, what="message").encode()
    if ctx.traceparent is not None:
        headers = {"traceparent": ctx.traceparent, **(headers or {})}
    if isinstance(broker, Broker):
        ident = message_id(ctx, broker.queue, key)
        await broker.publish(body, message_id=ident, headers=headers)
        return ident
    if "://" in broker:
        if queue is None:
            raise ValueError("publish to a broker URL needs the queue")
        opened = open_broker(broker, queue)
    else:
        trigger = _trigger(broker, config_path)
        if queue is not None and queue != trigger.queue:
            raise ValueError(
                f"queue trigger {broker!r} consumes {trigger.queue!r}, not {queue!r}; "
                "pass queue=None or the broker URL"
            )
        queue = trigger.queue
        opened = open_broker(trigger.broker, queue, **trigger.broker_options())
    ident = message_id(ctx, queue, key)
    try:
        await opened.connect()
        await opened.publish(body, message_id=ident, headers=headers)
    finally:
        await opened.close()
    return ident
