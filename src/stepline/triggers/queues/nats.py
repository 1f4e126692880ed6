"""NATS JetStream as a stepline queue broker, on nats-py (``pip install 'stepline[nats]'``).

The queue is a subject held by a stream (by default named after the queue: ``orders.new`` ->
``ORDERS_NEW``), read through a durable pull consumer named after the group with explicit
acknowledgement. A message received and never acknowledged comes back once the consumer's ack
wait (``claim_idle`` seconds) runs out, which is how a dead consumer's messages are redelivered.
Publishing sets ``Nats-Msg-Id``, so the stream's duplicate window drops a second publish of one id.

The client never reconnects on its own: a broken connection surfaces as :class:`BrokerError`
and the next call opens a new one, so the caller's backoff is the only retry loop.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy
from nats.js.errors import BadRequestError, NotFoundError

from ...errors import ConfigError
from .broker import Broker, BrokerError, Message

log = logging.getLogger("stepline.triggers")

MSG_ID = "Nats-Msg-Id"
REASON = "x-stepline-reason"
ORIGINAL_ID = "x-stepline-original-id"

DUPLICATE_WINDOW = 120.0
"""Seconds during which JetStream drops a publish whose ``Nats-Msg-Id`` it has already stored."""

_API_TIMEOUT = 5.0
_CONNECT_TIMEOUT = 2  # seconds per attempt; nats-py types it as int
_FLUSH_TIMEOUT = 5
_MIN_FETCH_WAIT = 0.01  # nats-py refuses a fetch timeout of zero
_MAX_REASON = 2000  # the dead-letter copy must still fit the server's max_payload

_SUBJECT = re.compile(r"[^\s.*>]+(\.[^\s.*>]+)*")
_NAME = re.compile(r"[^\s.*>/\\]+")


def stream_name_for(queue: str) -> str:
    """The default stream of a queue subject: upper case, anything not a letter or digit as
    ``_`` (``orders.new`` -> ``ORDERS_NEW``)."""
    return re.sub(r"[^A-Za-z0-9]", "_", queue).upper()


@dataclass(frozen=True)
class _Session:
    """One live connection with everything :meth:`NatsBroker.connect` declared on it."""

    nc: Client
    js: JetStreamContext
    sub: JetStreamContext.PullSubscription


class NatsBroker(Broker):
    """One JetStream subject consumed by one durable pull consumer (see the module docstring).

    ``stream`` names the stream holding ``queue`` (default :func:`stream_name_for`). The
    dead-letter subject (default ``f"{queue}.dead"``) goes to whichever stream already holds it,
    else to a stream ``f"{stream}_DEAD"`` created for it, so the consumer never reads it back.
    Options other brokers take are accepted and ignored.
    """

    def __init__(
        self,
        url: str,
        queue: str,
        *,
        group: str = "stepline",
        dead_letter: str | None = None,
        claim_idle: float = 30.0,
        stream: str | None = None,
        **_ignored: object,
    ) -> None:
        servers = [s.strip() for s in url.split(",") if s.strip()]
        if not servers:
            raise ConfigError("NATS broker: the URL is empty")
        self._servers = servers
        self.url = ",".join(_without_credentials(s) for s in servers)
        self.queue = _checked(queue, _SUBJECT, "queue (a NATS subject without wildcards)")
        self.dead_letter_subject = _checked(
            f"{queue}.dead" if dead_letter is None else dead_letter,
            _SUBJECT,
            "dead_letter (a NATS subject without wildcards)",
        )
        if self.dead_letter_subject == self.queue:
            raise ConfigError(f"NATS broker: dead_letter must differ from the queue {queue!r}")
        self.group = _checked(group, _NAME, "group (a JetStream consumer name)")
        self.stream = _checked(
            stream_name_for(queue) if stream is None else stream, _NAME, "stream name"
        )
        if not claim_idle > 0:
            raise ConfigError(f"NATS broker: claim_idle must be positive, not {claim_idle!r}")
        self.claim_idle = claim_idle
        self._session: _Session | None = None
        self._last_error: Exception | None = None

    # -- Broker ----------------------------------------------------------------------------

    async def connect(self) -> None:
        await self._live()

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.nc.is_closed:
            # close() writes out what is still buffered (acks included) before disconnecting.
            try:
                await session.nc.close()
            except (NatsError, OSError) as exc:
                log.debug("NATS %s: error while closing: %s", self.url, _describe(exc))

    async def receive(self, max_messages: int, timeout: float) -> list[Message]:
        if max_messages < 1:
            raise ValueError(f"max_messages must be at least 1, not {max_messages}")
        session = await self._live()
        async with self._guard("receive"):
            try:
                msgs = await session.sub.fetch(
                    batch=max_messages, timeout=max(timeout, _MIN_FETCH_WAIT)
                )
            except TimeoutError:  # nats-py raises both its own and asyncio's when none came
                await self._check_consumer(session)
                return []
            return [_message(m) for m in msgs]

    async def ack(self, messages: Sequence[Message]) -> None:
        if not messages:
            return
        replies = [_reply_subject(m) for m in messages]
        session = await self._live()
        async with self._guard("ack"):
            await self._ack(session, replies)

    async def dead_letter(self, message: Message, reason: str) -> None:
        reply = _reply_subject(message)
        # Nats-Expected-* headers are preconditions of the original publish, not its content.
        headers = {
            k: v for k, v in message.headers.items() if not k.lower().startswith("nats-expected-")
        }
        headers[REASON] = _header_value(reason)[:_MAX_REASON]
        headers[ORIGINAL_ID] = message.id or ""
        # The stream's duplicate window then drops a second copy after a crash before the ack.
        headers[MSG_ID] = f"{self.queue}/{message.id}"
        session = await self._live()
        async with self._guard("dead-letter"):
            await session.js.publish(self.dead_letter_subject, message.body, headers=headers)
            await self._ack(session, [reply])

    async def publish(
        self, body: bytes, *, message_id: str, headers: Mapping[str, str] | None = None
    ) -> None:
        all_headers = dict(headers or {})
        all_headers[MSG_ID] = message_id
        session = await self._live()
        async with self._guard("publish"):
            # Awaits the PubAck; a duplicate within the window is acknowledged and not stored.
            await session.js.publish(self.queue, body, headers=all_headers)

    # -- the connection ----------------------------------------------------------------------

    async def _live(self) -> _Session:
        session = self._session
        if session is None or session.nc.is_closed:
            await self.close()
            session = self._session = await self._open()
        return session

    async def _open(self) -> _Session:
        nc = Client()
        self._last_error = None
        try:
            # Two quick attempts per server and no background reconnection: the caller retries.
            await nc.connect(
                self._servers,
                allow_reconnect=False,
                max_reconnect_attempts=1,
                reconnect_time_wait=0,
                connect_timeout=_CONNECT_TIMEOUT,
                error_cb=self._on_error,
                name=f"stepline {self.group}",
            )
        except (TimeoutError, NatsError, OSError) as exc:
            await nc.close()
            cause = self._last_error or exc
            raise BrokerError(f"NATS {self.url}: cannot connect: {_describe(cause)}") from exc
        try:
            js = nc.jetstream(timeout=_API_TIMEOUT)
            async with self._guard("declaring the stream and consumer"):
                await self._declare_stream(js)
                await self._declare_dead_letter_stream(js)
                await self._declare_consumer(js)
                sub = await js.pull_subscribe_bind(durable=self.group, stream=self.stream)
        except BaseException:
            await nc.close()
            raise
        return _Session(nc=nc, js=js, sub=sub)

    async def _check_consumer(self, session: _Session) -> None:
        # A pull from a consumer (or stream) deleted meanwhile gets no answer at all, which
        # looks like an idle queue: after an empty wait, make sure it is still there.
        try:
            await session.js.consumer_info(self.stream, self.group)
        except NotFoundError:
            log.warning(
                "NATS %s: consumer %r of stream %r is gone; declaring it again",
                self.url,
                self.group,
                self.stream,
            )
            await self.close()

    async def _on_error(self, exc: Exception) -> None:
        # Errors reach the caller as BrokerError; this keeps the cause for that message.
        self._last_error = exc
        log.debug("NATS %s: %s", self.url, _describe(exc))

    @asynccontextmanager
    async def _guard(self, doing: str) -> AsyncIterator[None]:
        """Turn the client's errors into BrokerError and drop the connection, so the next call
        starts over on a fresh one (declaring again whatever went missing)."""
        try:
            yield
        except BrokerError:
            await self.close()
            raise
        except (TimeoutError, NatsError, OSError) as exc:
            await self.close()
            raise BrokerError(f"NATS {self.url}: {doing} failed: {_describe(exc)}") from exc

    async def _ack(self, session: _Session, replies: Sequence[str]) -> None:
        # Acks go out without JetStream's per-message reply and one PING/PONG confirms the
        # server has them: a lost ack only means a redelivery, which creates nothing new.
        # Sent on the current connection, they also ack messages received on an earlier one.
        for reply in replies:
            await session.nc.publish(reply, Msg.Ack.Ack)
        await session.nc.flush(timeout=_FLUSH_TIMEOUT)

    # -- declarations ----------------------------------------------------------------------

    async def _declare_stream(self, js: JetStreamContext) -> None:
        holder = await _stream_holding(js, self.queue)
        if holder == self.stream:
            return
        if holder is not None:
            raise BrokerError(
                f"NATS {self.url}: subject {self.queue!r} belongs to stream {holder!r}, "
                f"not {self.stream!r} (pass stream={holder!r})"
            )
        await self._create_stream(js, self.stream, self.queue)

    async def _declare_dead_letter_stream(self, js: JetStreamContext) -> None:
        if await _stream_holding(js, self.dead_letter_subject) is None:
            await self._create_stream(js, f"{self.stream}_DEAD", self.dead_letter_subject)

    async def _create_stream(self, js: JetStreamContext, name: str, subject: str) -> None:
        try:
            await js.add_stream(name=name, subjects=[subject], duplicate_window=DUPLICATE_WINDOW)
        except BadRequestError as exc:
            try:
                info = await js.stream_info(name)
            except NotFoundError:
                raise exc from None
            raise BrokerError(
                f"NATS {self.url}: stream {name!r} exists with subjects "
                f"{info.config.subjects}, which do not include {subject!r}; "
                "stepline adds nothing to an existing stream"
            ) from exc

    async def _declare_consumer(self, js: JetStreamContext) -> None:
        info: ConsumerInfo | None
        try:
            info = await js.consumer_info(self.stream, self.group)
        except NotFoundError:
            info = None
        if info is not None and info.config.filter_subject != self.queue:
            raise BrokerError(
                f"NATS {self.url}: consumer {self.group!r} of stream {self.stream!r} reads "
                f"{info.config.filter_subject!r}, not {self.queue!r}; choose another group"
            )
        # Creates the consumer, or updates its ack wait when claim_idle changed.
        await js.add_consumer(
            self.stream,
            ConsumerConfig(
                durable_name=self.group,
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=self.claim_idle,
                max_deliver=-1,
                deliver_policy=DeliverPolicy.ALL,
                filter_subject=self.queue,
            ),
        )


async def _stream_holding(js: JetStreamContext, subject: str) -> str | None:
    try:
        return await js.find_stream_name_by_subject(subject)
    except NotFoundError:
        return None


def _message(msg: Msg) -> Message:
    meta = msg.metadata
    headers = dict(msg.headers or {})
    return Message(
        id=headers.get(MSG_ID) or f"{meta.stream}-{meta.sequence.stream}",
        body=msg.data,
        headers=headers,
        redelivered=meta.num_delivered > 1,
        handle=msg,
    )


def _reply_subject(message: Message) -> str:
    handle = message.handle
    if not isinstance(handle, Msg) or not handle.reply:
        raise ValueError(f"message {message.id!r} was not received from a NATS broker")
    return handle.reply


def _header_value(text: str) -> str:
    # A line break would end the header block of the NATS protocol.
    return re.sub(r"[\r\n]+", " ", text)


def _checked(value: str, pattern: re.Pattern[str], what: str) -> str:
    if not pattern.fullmatch(value):
        raise ConfigError(f"NATS broker: invalid {what}: {value!r}")
    return value


def _without_credentials(url: str) -> str:
    parts = urlsplit(url if "://" in url else f"nats://{url}")
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
