"""RabbitMQ as a stepline :class:`~.broker.Broker`, on aio-pika (the ``rabbitmq`` extra).

One durable queue consumed with manual acknowledgements over a robust connection (aio-pika
reconnects and restores the channel, its prefetch, declarations and consumer in the background).
The queue is declared with ``x-dead-letter-exchange`` pointing at a durable fanout exchange bound
to a durable dead-letter queue, both named ``dead_letter`` (default ``"<queue>.dead"``).

Redelivery after a consumer died is RabbitMQ's own: when a channel closes, for whatever reason,
every delivery it had not acknowledged goes back to the queue, flagged redelivered. The prefetch
is the batch size asked of :meth:`RabbitMQBroker.receive`, so a dead consumer holds at most one
batch. ``group`` and ``claim_idle`` are accepted for the common constructor and unused: competing
consumers of one queue are RabbitMQ's consumer group, and nothing needs reclaiming.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aio_pika
import aio_pika.abc
import aio_pika.exceptions

from .broker import Broker, BrokerError, Message

CONNECT_TIMEOUT = 10.0
"""Seconds the first connection may take before :meth:`RabbitMQBroker.connect` gives up."""

REASON_HEADER = "x-stepline-reason"
ORIGINAL_ID_HEADER = "x-stepline-original-id"

_ERRORS = (
    aio_pika.exceptions.AMQPError,
    aio_pika.exceptions.ChannelInvalidStateError,
    OSError,  # ConnectionError and TimeoutError included
)


def redact_url(url: str) -> str:
    """``url`` without its password: ``amqp://guest@127.0.0.1:5672/``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}@{hostport}"))


def _text_headers(headers: Mapping[str, Any] | None) -> dict[str, str]:
    """AMQP header values are typed (numbers, tables, byte strings); :class:`Message` carries
    text, so anything not a string is shown as its text."""
    out: dict[str, str] = {}
    for key, value in (headers or {}).items():
        if isinstance(value, str):
            out[key] = value
        elif isinstance(value, bytes | bytearray):
            out[key] = bytes(value).decode("utf-8", "replace")
        else:
            out[key] = str(value)
    return out


class RabbitMQBroker(Broker):
    """One RabbitMQ queue with its dead-letter exchange and queue; see the module docstring."""

    def __init__(
        self,
        url: str,
        queue: str,
        *,
        group: str = "stepline",
        dead_letter: str | None = None,
        claim_idle: float = 30.0,
    ) -> None:
        self._dsn = url
        self.url = redact_url(url)
        self.queue = queue
        self.dead_letter_name = dead_letter if dead_letter is not None else f"{queue}.dead"
        self._connection: aio_pika.abc.AbstractRobustConnection | None = None
        self._channel: aio_pika.abc.AbstractRobustChannel | None = None
        self._queue: aio_pika.abc.AbstractQueue | None = None
        self._dead_exchange: aio_pika.abc.AbstractExchange | None = None
        self._consumer_tag: str | None = None
        self._prefetch = 0
        # Deliveries pushed by the broker, not yet returned by receive.
        self._buffer: collections.deque[aio_pika.abc.AbstractIncomingMessage] = collections.deque()
        self._arrived = asyncio.Event()
        # Delivery tag -> consumer tag of every delivery not yet acknowledged, on the channel
        # they came on (tags are per channel and restart at 1 on the channel a reconnect
        # opens). Makes ack idempotent (RabbitMQ closes the channel on a second ack of one
        # tag), tells when one ``multiple`` ack covers exactly the messages asked, and when
        # the consumer has used up its prefetch.
        self._tags_channel: object = None
        self._tags: dict[int, str] = {}

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except _ERRORS as exc:
            raise BrokerError(f"RabbitMQ at {self.url}: {what} failed: {self._scrub(exc)}") from exc

    def _scrub(self, exc: BaseException) -> str:
        text = str(exc) or type(exc).__name__
        password = urlsplit(self._dsn).password
        return text.replace(password, "***") if password else text

    # -- connection --------------------------------------------------------------------------

    async def connect(self) -> None:
        if self._connection is not None and not self._connection.is_closed:
            return
        with self._errors("connecting"):
            connection = await aio_pika.connect_robust(self._dsn, timeout=CONNECT_TIMEOUT)
        try:
            await self._declare(connection)
        except BaseException:
            await connection.close()
            raise
        self._connection = connection

    async def _declare(self, connection: aio_pika.abc.AbstractRobustConnection) -> None:
        with self._errors("opening a channel"):
            channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        try:
            dead_exchange = await channel.declare_exchange(
                self.dead_letter_name, aio_pika.ExchangeType.FANOUT, durable=True
            )
            dead_queue = await channel.declare_queue(self.dead_letter_name, durable=True)
            await dead_queue.bind(dead_exchange)
            queue = await channel.declare_queue(
                self.queue,
                durable=True,
                arguments={"x-dead-letter-exchange": self.dead_letter_name},
            )
        except aio_pika.exceptions.ChannelPreconditionFailed as exc:
            raise BrokerError(
                f"RabbitMQ at {self.url}: queue {self.queue!r} or exchange "
                f"{self.dead_letter_name!r} already exists with other arguments than stepline "
                f"declares (durable, x-dead-letter-exchange={self.dead_letter_name!r}; "
                f"a fanout exchange): {self._scrub(exc)}"
            ) from exc
        except _ERRORS as exc:
            raise BrokerError(
                f"RabbitMQ at {self.url}: declaring queue {self.queue!r} failed: {self._scrub(exc)}"
            ) from exc
        self._channel = channel
        self._queue = queue
        self._dead_exchange = dead_exchange

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        self._channel = self._queue = self._dead_exchange = None
        self._consumer_tag = None
        self._prefetch = 0
        self._buffer.clear()
        self._arrived.clear()
        self._tags_channel, self._tags = None, {}
        if connection is None or connection.is_closed:
            return
        # Closing the channel hands every unacknowledged delivery back to the queue.
        with self._errors("closing"):
            await connection.close()

    def _ready(self) -> tuple[aio_pika.abc.AbstractRobustChannel, aio_pika.abc.AbstractQueue]:
        if self._channel is None or self._queue is None:
            raise BrokerError(f"RabbitMQ at {self.url}: not connected (call connect first)")
        if self._channel.is_closed:
            raise BrokerError(f"RabbitMQ at {self.url}: connection lost, reconnecting")
        return self._channel, self._queue

    # -- consuming ---------------------------------------------------------------------------

    async def _on_delivery(self, delivery: aio_pika.abc.AbstractIncomingMessage) -> None:
        try:
            channel = delivery.channel
        except aio_pika.exceptions.ChannelInvalidStateError:
            return  # its channel already closed: the broker requeued it
        if channel is not self._tags_channel:
            self._tags_channel, self._tags = channel, {}
        if delivery.delivery_tag is not None:
            self._tags[delivery.delivery_tag] = delivery.consumer_tag or ""
        self._buffer.append(delivery)
        self._arrived.set()

    def _stalled(self) -> bool:
        """Nothing buffered and the consumer's prefetch all held unacknowledged by the caller:
        RabbitMQ sends nothing more until an ack, so only a new consumer receives more."""
        if self._buffer:
            return False
        held = sum(1 for tag in self._tags.values() if tag == self._consumer_tag)
        return held >= self._prefetch

    async def _consume(self, prefetch: int) -> None:
        """Consume with ``prefetch`` unacknowledged deliveries at most. RabbitMQ applies a
        prefetch to the consumers started after it, so a new prefetch restarts the consumer;
        the deliveries already received stay valid on the channel (and off the new consumer's
        count)."""
        channel, queue = self._ready()
        with self._errors("starting the consumer"):
            if self._consumer_tag is not None:
                await queue.cancel(self._consumer_tag)
                self._consumer_tag = None
            await channel.set_qos(prefetch_count=prefetch)
            self._consumer_tag = await queue.consume(self._on_delivery)
        self._prefetch = prefetch

    def _next_buffered(self) -> aio_pika.abc.AbstractIncomingMessage | None:
        while self._buffer:
            delivery = self._buffer.popleft()
            try:
                delivery.channel  # noqa: B018 - raises once the channel closed
            except aio_pika.exceptions.ChannelInvalidStateError:
                continue  # the broker requeued it when the channel closed; it comes again
            return delivery
        self._arrived.clear()
        return None

    async def receive(self, max_messages: int, timeout: float) -> list[Message]:
        if max_messages < 1:
            raise ValueError(f"max_messages must be at least 1, not {max_messages}")
        self._ready()
        # A consumer the broker pushes to (not basic.get in a loop): a message is handed over
        # as soon as it arrives, with no polling interval and no round trip per message.
        if self._consumer_tag is None or max_messages > self._prefetch or self._stalled():
            await self._consume(max_messages)
        first = self._next_buffered()
        if first is None and timeout > 0:
            with suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), timeout)
            first = self._next_buffered()
        if first is None:
            self._ready()  # an outage, not an empty queue, raises
            return []
        batch = [first]
        while len(batch) < max_messages and (delivery := self._next_buffered()) is not None:
            batch.append(delivery)
        return [self._message(d) for d in batch]

    @staticmethod
    def _message(delivery: aio_pika.abc.AbstractIncomingMessage) -> Message:
        return Message(
            id=delivery.message_id,
            body=delivery.body,
            headers=_text_headers(delivery.headers),
            redelivered=bool(delivery.redelivered),
            handle=delivery,
        )

    # -- acknowledging -----------------------------------------------------------------------

    async def ack(self, messages: Sequence[Message]) -> None:
        # Delivery tag -> delivery, for those not acknowledged yet (acking is idempotent).
        pending: dict[int, aio_pika.abc.AbstractIncomingMessage] = {}
        for message in messages:
            delivery: aio_pika.abc.AbstractIncomingMessage = message.handle
            try:
                channel = delivery.channel
            except aio_pika.exceptions.ChannelInvalidStateError as exc:
                raise BrokerError(
                    f"RabbitMQ at {self.url}: cannot acknowledge, the channel the message came "
                    "on closed (the broker delivers it again)"
                ) from exc
            tag = delivery.delivery_tag
            if channel is self._tags_channel and tag is not None and tag in self._tags:
                pending[tag] = delivery
        if not pending:
            return
        upto = max(pending)
        with self._errors("acknowledging"):
            # One ack "up to and including" the last tag, when exactly these are unacked up
            # to it; otherwise it would acknowledge a delivery the caller has not processed.
            if len(pending) > 1 and pending.keys() == {t for t in self._tags if t <= upto}:
                await pending[upto].ack(multiple=True)
                for tag in pending:
                    del self._tags[tag]
                return
            for tag in sorted(pending):
                await pending[tag].ack()
                del self._tags[tag]

    async def dead_letter(self, message: Message, reason: str) -> None:
        """Publish a confirmed copy to the dead-letter exchange, then acknowledge the original.

        Not ``reject(requeue=False)`` through the queue's own dead-letter exchange: RabbitMQ
        would record only "rejected" in ``x-death``, and the reason would not travel with the
        message. The exchange is still declared on the queue, so messages RabbitMQ itself
        dead-letters (rejected by another client, expired) land in the same place.
        """
        self._ready()
        exchange = self._dead_exchange
        if exchange is None:
            raise BrokerError(f"RabbitMQ at {self.url}: not connected (call connect first)")
        delivery: aio_pika.abc.AbstractIncomingMessage = message.handle
        headers: dict[str, Any] = dict(delivery.headers or {})
        headers[REASON_HEADER] = reason
        if message.id is not None:
            headers[ORIGINAL_ID_HEADER] = message.id
        copy = aio_pika.Message(
            body=delivery.body,
            headers=headers,
            content_type=delivery.content_type,
            content_encoding=delivery.content_encoding,
            correlation_id=delivery.correlation_id,
            message_id=delivery.message_id,
            timestamp=delivery.timestamp,
            type=delivery.type,
            app_id=delivery.app_id,
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        )
        with self._errors(f"dead-lettering to {self.dead_letter_name!r}"):
            await exchange.publish(copy, routing_key=self.queue)
        await self.ack([message])

    # -- publishing --------------------------------------------------------------------------

    async def publish(
        self, body: bytes, *, message_id: str, headers: Mapping[str, str] | None = None
    ) -> None:
        channel, _ = self._ready()
        message = aio_pika.Message(
            body=body,
            message_id=message_id,
            headers=dict(headers) if headers else None,
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        )
        # Mandatory (aio-pika's default) with confirms: the broker returns an unroutable
        # message (the queue was deleted) and that raises, instead of confirming a drop.
        with self._errors(f"publishing to {self.queue!r}"):
            await channel.default_exchange.publish(message, routing_key=self.queue)
