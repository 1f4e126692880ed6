"""The RabbitMQ side of the broker contract suite: a broker on a fresh queue, and its removal.

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
