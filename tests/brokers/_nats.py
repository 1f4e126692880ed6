"""The NATS JetStream side of the broker contract tests: a broker on a fresh queue, what its
dead-letter stream holds, and its streams (with their consumers) deleted afterwards.

``STEPLINE_TEST_NATS_URL`` (default ``nats://127.0.0.1:4222``) names a server with JetStream.
"""

from __future__ import annotations

import contextlib
import os

import nats
from nats.js.errors import NotFoundError

from stepline.triggers.queues.nats import NatsBroker, stream_name_for

URL = os.environ.get("STEPLINE_TEST_NATS_URL", "nats://127.0.0.1:4222")

CLAIM_IDLE = 1.0
"""The consumer's ack wait in tests: an unacknowledged message comes back after this long."""

DEAD_LETTER_DEDUP = True
"""A dead letter's ``Nats-Msg-Id`` derives from the original's: the duplicate window drops a
second copy of one message."""


def make(queue: str) -> NatsBroker:
    return NatsBroker(URL, queue, claim_idle=CLAIM_IDLE)


async def cleanup(queue: str) -> None:
    """Delete the queue's stream and its dead-letter stream (their consumers go with them)."""
    nc = await nats.connect(URL, allow_reconnect=False, max_reconnect_attempts=1)
    try:
        js = nc.jetstream()
        stream = stream_name_for(queue)
        for name in (stream, f"{stream}_DEAD"):
            with contextlib.suppress(NotFoundError):
                await js.delete_stream(name)
    finally:
        await nc.close()


async def dead_letters(queue: str) -> list[tuple[bytes, dict[str, str]]]:
    """What the queue's dead-letter stream holds, oldest first: (body, headers)."""
    nc = await nats.connect(URL, allow_reconnect=False, max_reconnect_attempts=1)
    try:
        js = nc.jetstream()
        stream = f"{stream_name_for(queue)}_DEAD"
        try:
            state = (await js.stream_info(stream)).state
        except NotFoundError:
            return []
        found = []
        for seq in range(state.first_seq, state.last_seq + 1):
            stored = await js.get_msg(stream, seq)
            found.append((stored.data or b"", dict(stored.headers or {})))
        return found
    finally:
        await nc.close()
