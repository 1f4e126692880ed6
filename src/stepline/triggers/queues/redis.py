"""Redis Streams as a :class:`~.broker.Broker`, on redis-py's asyncio client.

The queue is a stream consumed by a consumer group (created with the stream, idempotently).
Each broker object is one consumer of the group, under a name of its own. An entry read and
never acknowledged stays in the group's pending list; once it has been idle longer than
``claim_idle`` seconds any consumer of the group takes it over with XAUTOCLAIM, which is how
the entries of a consumer that died are delivered again. Entries carry the fields ``id`` (the
publisher's message id), ``body`` and any headers, one field each; an entry without ``body``
is received as :attr:`~.broker.Message.unreadable` (the consumer dead-letters it).
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, TypeVar, cast

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from ..._shown import SHOWN_CHARS
from .broker import Broker, BrokerError, Message, redact_url

_T = TypeVar("_T")
_Fields = dict[Any, Any]

ID_FIELD = b"id"
BODY_FIELD = b"body"
REASON_FIELD = "x-stepline-reason"
ORIGINAL_ID_FIELD = "x-stepline-original-id"
_GRACE = 10.0
"""Seconds a blocking read may overrun its own timeout before the connection counts as dead."""


def _consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _no_body(fields: Mapping[bytes, bytes]) -> str:
    # An entry another program added with fields of its own: say so, rather than read its
    # missing body as an empty (invalid) JSON document.
    names = ", ".join(repr(_text(name)) for name in fields)
    if len(names) > SHOWN_CHARS:
        names = f"{names[: SHOWN_CHARS - 3]}..."
    return (
        "no body field: stepline reads a message from the entry's field 'body' "
        f"(this entry has {names})"
    )


class RedisBroker(Broker):
    """One Redis stream consumed by consumer group ``group``; dead letters go to the stream
    ``dead_letter`` (default ``<queue>.dead``)."""

    def __init__(
        self,
        url: str,
        queue: str,
        *,
        group: str = "stepline",
        dead_letter: str | None = None,
        claim_idle: float = 30.0,
        **_ignored: Any,
    ) -> None:
        if claim_idle <= 0:
            raise ValueError(f"claim_idle must be positive, got {claim_idle!r}")
        self._url = url
        self.url = redact_url(url)
        self.queue = queue
        self.group = group
        self.dead_letter_stream = dead_letter or f"{queue}.dead"
        self.claim_idle = claim_idle
        self.consumer = _consumer_name()
        self._client: aioredis.Redis | None = None
        self._group_ready = False

    def __repr__(self) -> str:
        return f"<RedisBroker {self.url} stream {self.queue!r} group {self.group!r}>"

    async def _call(self, what: str, call: Awaitable[_T]) -> _T:
        try:
            return await call
        except (RedisError, OSError) as exc:
            raise BrokerError(
                f"redis at {self.url}: {what} on stream {self.queue!r} failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def _connected(self) -> aioredis.Redis:
        if self._client is None:
            raise BrokerError(f"redis at {self.url}: not connected (call connect() first)")
        return self._client

    async def connect(self) -> None:
        if self._client is None:
            try:
                self._client = aioredis.Redis.from_url(self._url)
            except ValueError as exc:
                raise BrokerError(f"redis at {self.url}: invalid URL: {exc}") from None
        if self._group_ready:
            return
        try:
            await self._call(
                "creating the consumer group",
                self._client.xgroup_create(self.queue, self.group, id="0", mkstream=True),
            )
        except BrokerError as exc:
            cause = exc.__cause__
            if not (isinstance(cause, ResponseError) and "BUSYGROUP" in str(cause)):
                raise
        self._group_ready = True

    async def close(self) -> None:
        client, self._client = self._client, None
        self._group_ready = False
        if client is None:
            return
        try:
            # A consumer with nothing pending is forgotten, so that the group does not collect
            # one name per process ever started; one with pending entries must stay: deleting
            # it would drop them from the pending list and they would never be redelivered.
            pending = await client.xpending_range(
                self.queue, self.group, min="-", max="+", count=1, consumername=self.consumer
            )
            if not pending:
                await client.xgroup_delconsumer(self.queue, self.group, self.consumer)
        except (RedisError, OSError):
            pass  # unreachable: the name stays in the group, which is harmless
        finally:
            await client.aclose()

    def _message(
        self, entry_id: bytes, fields: Mapping[bytes, bytes], redelivered: bool
    ) -> Message:
        publisher_id = fields.get(ID_FIELD)
        headers = {
            _text(key): _text(value)
            for key, value in fields.items()
            if key not in (ID_FIELD, BODY_FIELD)
        }
        return Message(
            id=_text(publisher_id) if publisher_id is not None else _text(entry_id),
            body=fields.get(BODY_FIELD, b""),
            headers=headers,
            redelivered=redelivered,
            handle=entry_id,
            unreadable=None if BODY_FIELD in fields else _no_body(fields),
        )

    async def receive(self, max_messages: int, timeout: float) -> list[Message]:
        client = self._connected()
        if max_messages < 1:
            return []
        # Entries another consumer (or this one, before a failure) left pending come first.
        reply = await self._call(
            "claiming idle entries",
            client.xautoclaim(
                self.queue,
                self.group,
                self.consumer,
                min_idle_time=int(self.claim_idle * 1000),
                start_id="0-0",
                count=max_messages,
            ),
        )
        claimed = reply[1]
        deleted = reply[2] if len(reply) > 2 else []
        gone = [entry_id for entry_id, fields in claimed if fields is None]
        if deleted or gone:
            # Trimmed away while pending: nothing is left to deliver.
            await self._call("acknowledging", client.xack(self.queue, self.group, *deleted, *gone))
        messages = [
            self._message(entry_id, fields, redelivered=True)
            for entry_id, fields in claimed
            if fields is not None
        ]
        if messages:
            return messages
        block = int(timeout * 1000) if timeout > 0 else None
        try:
            async with asyncio.timeout(timeout + _GRACE):
                streams = await self._call(
                    "reading",
                    client.xreadgroup(
                        self.group,
                        self.consumer,
                        {self.queue: ">"},
                        count=max_messages,
                        block=block,
                    ),
                )
        except TimeoutError:
            raise BrokerError(
                f"redis at {self.url}: reading stream {self.queue!r} got no answer"
            ) from None
        replies = cast(list[tuple[bytes, list[tuple[bytes, _Fields]]]], streams or [])
        return [
            self._message(entry_id, fields, redelivered=False)
            for _stream, entries in replies
            for entry_id, fields in entries
        ]

    async def ack(self, messages: Sequence[Message]) -> None:
        if not messages:
            return
        client = self._connected()
        await self._call(
            "acknowledging", client.xack(self.queue, self.group, *(m.handle for m in messages))
        )

    async def dead_letter(self, message: Message, reason: str) -> None:
        client = self._connected()
        fields: _Fields = {
            BODY_FIELD: message.body,
            **{key: value for key, value in message.headers.items()},
            REASON_FIELD: reason,
            ORIGINAL_ID_FIELD: _text(message.handle),
        }
        if message.id is not None:
            fields[ID_FIELD] = message.id
        async with client.pipeline(transaction=True) as pipe:
            pipe.xadd(self.dead_letter_stream, fields)
            pipe.xack(self.queue, self.group, message.handle)
            await self._call("dead-lettering", pipe.execute())

    async def publish(
        self, body: bytes, *, message_id: str, headers: Mapping[str, str] | None = None
    ) -> None:
        fields: _Fields = {}
        for key, value in (headers or {}).items():
            if key.encode() in (ID_FIELD, BODY_FIELD):
                raise ValueError(f"header name {key!r} is reserved on Redis streams")
            fields[key] = value
        fields[ID_FIELD] = message_id
        fields[BODY_FIELD] = body
        client = self._client or aioredis.Redis.from_url(self._url)
        try:
            await self._call("publishing", client.xadd(self.queue, fields))
        finally:
            if client is not self._client:
                await client.aclose()
