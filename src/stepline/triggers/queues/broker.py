"""The one small interface every message broker implements for stepline.

A :class:`Broker` is one queue (a Redis stream, a RabbitMQ queue, a NATS JetStream subject) seen
by one consumer with explicit acknowledgement. The consumer (:mod:`.consumer`) depends on this
interface only; each broker module (``redis``, ``rabbitmq``, ``nats``) implements it with the
broker's maintained client, and all of them pass one contract test suite
(``tests/brokers/``).

Delivery is at least once: a message is redelivered until it is acknowledged, including after
the consumer that received it died (each broker's own mechanism: pending entries reclaimed,
unacknowledged deliveries requeued, an ack wait that runs out). The consumer makes that exactly
once where it matters, in the instances it creates: an instance's id derives from the message,
so a redelivered message creates nothing new.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class BrokerError(Exception):
    """The broker could not be reached or refused an operation; the consumer retries with
    backoff. ``str()`` says which broker and what failed, without credentials."""


@dataclass(frozen=True)
class Message:
    """One message as received, to be acknowledged or dead-lettered through the same broker."""

    id: str | None
    """The broker's stable id of this message: the same on every redelivery (a Redis entry id,
    the AMQP ``message_id`` property, the ``Nats-Msg-Id`` header or the stream and sequence), or
    None where the broker has none (an AMQP message published without ``message_id``)."""
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    redelivered: bool = False
    """The broker says it delivered this message before (as far as it can tell)."""
    handle: Any = field(default=None, compare=False, repr=False)
    """The broker's own handle (a delivery, a JetStream message, an entry id) for ack."""


class Broker(abc.ABC):
    """One queue on one broker, consumed with explicit acknowledgement.

    Every method may raise :class:`BrokerError` when the broker is unreachable; the caller
    retries. Methods are called from one task at a time per broker object.
    """

    url: str
    """Where the broker is, without credentials (for logs and errors)."""

    @abc.abstractmethod
    async def connect(self) -> None:
        """Connect and declare what the queue needs (stream and consumer group, queue and its
        dead-letter exchange, JetStream stream and durable consumer), idempotently."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Disconnect; unacknowledged messages stay with the broker for redelivery. Idempotent."""

    @abc.abstractmethod
    async def receive(self, max_messages: int, timeout: float) -> list[Message]:
        """Up to ``max_messages`` messages, waiting at most ``timeout`` seconds for the first.

        Includes messages another consumer of the same group received and never acknowledged
        once the broker considers that consumer gone (Redis: pending entries idle longer than
        the claim interval, reclaimed; RabbitMQ and NATS: redelivered by the broker itself).
        """

    @abc.abstractmethod
    async def ack(self, messages: Sequence[Message]) -> None:
        """Acknowledge: the broker never delivers these messages again."""

    @abc.abstractmethod
    async def dead_letter(self, message: Message, reason: str) -> None:
        """Move a message that can never be processed to the dead-letter stream or queue, with
        ``reason`` attached (a header or field ``x-stepline-reason``), and acknowledge it.
        Where the broker cannot do both atomically, the copy is written first: a crash between
        the two leaves the message to be dead-lettered again, never lost."""

    @abc.abstractmethod
    async def publish(
        self, body: bytes, *, message_id: str, headers: Mapping[str, str] | None = None
    ) -> None:
        """Publish a message to the queue, confirmed by the broker before this returns.
        ``message_id`` becomes the message's :attr:`Message.id` on the consumer side (so a
        message published twice with one id creates one instance)."""
