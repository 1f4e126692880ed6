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
import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ...errors import ConfigError


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
    unreadable: str | None = None
    """Why the broker could not read a message out of what it received (a Redis entry without
    a ``body`` field), or None; the consumer dead-letters such a message with this reason."""


class Broker(abc.ABC):
    """One queue on one broker, consumed with explicit acknowledgement.

    Every method may raise :class:`BrokerError` when the broker is unreachable; the caller
    retries. Methods are called from one task at a time per broker object.
    """

    url: str
    """Where the broker is, without credentials (for logs and errors)."""
    queue: str
    """The queue as configured (the Redis stream, the RabbitMQ queue, the NATS subject)."""

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


# -- choosing a broker by URL ---------------------------------------------------------------------

_SCHEMES: dict[str, tuple[str, str, str]] = {
    "redis": ("redis", "RedisBroker", "redis"),
    "rediss": ("redis", "RedisBroker", "redis"),
    "amqp": ("rabbitmq", "RabbitMQBroker", "rabbitmq"),
    "amqps": ("rabbitmq", "RabbitMQBroker", "rabbitmq"),
    "nats": ("nats", "NatsBroker", "nats"),
    "tls": ("nats", "NatsBroker", "nats"),
}
"""URL scheme -> (module in this package, class, the pip extra that installs its client)."""

SCHEMES = tuple(_SCHEMES)


def redact_url(url: str) -> str:
    """``url`` without its password, for logs and errors (``redis://user:***@host:6379/0``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))


def broker_scheme(url: str) -> str:
    """The scheme of a broker URL, checked; ``ConfigError`` names the supported ones."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in _SCHEMES:
        raise ConfigError(
            f"unsupported broker URL {redact_url(url)!r}: use redis://host:6379/0, "
            "amqp://user:password@host:5672/ or nats://host:4222"
        )
    return scheme


def open_broker(
    url: str,
    queue: str,
    *,
    group: str = "stepline",
    dead_letter: str | None = None,
    **options: Any,
) -> Broker:
    """A :class:`Broker` for ``queue`` on the broker at ``url``, chosen by the URL's scheme
    (``redis``/``rediss``, ``amqp``/``amqps``, ``nats``/``tls``); not connected yet.

    The broker's client library is an optional extra, imported only here: when it is missing,
    :class:`~stepline.ConfigError` says which one to install (``pip install 'stepline[redis]'``).
    ``options`` go to the broker's constructor (``claim_idle``, ...).
    """
    module_name, class_name, extra = _SCHEMES[broker_scheme(url)]
    try:
        module = importlib.import_module(f"{__package__}.{module_name}")
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.startswith(f"{__package__}."):
            raise ConfigError(
                f"the {extra} broker is not available in this stepline version"
            ) from exc
        raise ConfigError(
            f"broker URL {redact_url(url)!r} needs the {extra} client library "
            f"({exc.name} is not installed): pip install 'stepline[{extra}]'"
        ) from exc
    broker_class = getattr(module, class_name)
    broker = broker_class(url, queue, group=group, dead_letter=dead_letter, **options)
    if not isinstance(broker, Broker):
        raise TypeError(f"{module.__name__}.{class_name} is not a Broker")
    return broker
