"""The RabbitMQ side of the broker contract suite: a broker on a fresh queue, what its
dead-letter queue holds, and their removal.

The server is ``STEPLINE_TEST_RABBITMQ_URL`` (default ``amqp://guest:guest@127.0.0.1:5672/``).
"""

from __future__ import annotations

import os

import aio_pika

from stepline.triggers.queues.rabbitmq import RabbitMQBroker

URL = os.environ.get("STEPLINE_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")


def make(queue: str) -> RabbitMQBroker:
    """A broker on ``queue`` (not connected); its dead-letter queue is ``<queue>.dead``."""
    return RabbitMQBroker(URL, queue, claim_idle=0.5)


async def cleanup(queue: str) -> None:
    """Delete the queue, its dead-letter queue and its dead-letter exchange."""
    connection = await aio_pika.connect(URL)
    try:
        channel = await connection.channel()
        await channel.queue_delete(queue)
        await channel.queue_delete(f"{queue}.dead")
        await channel.exchange_delete(f"{queue}.dead")
    finally:
        await connection.close()


async def dead_letters(queue: str) -> list[tuple[bytes, dict[str, str]]]:
    """What the dead-letter queue holds, oldest first: (body, headers as text). Reading takes
    them off the queue."""
    connection = await aio_pika.connect(URL)
    try:
        channel = await connection.channel()
        dead = await channel.get_queue(f"{queue}.dead")
        found = []
        while (copy := await dead.get(no_ack=True, fail=False)) is not None:
            headers = {key: _text(value) for key, value in (copy.headers or {}).items()}
            found.append((copy.body, headers))
        return found
    finally:
        await connection.close()


def _text(value: object) -> str:
    return bytes(value).decode() if isinstance(value, bytes | bytearray) else str(value)
