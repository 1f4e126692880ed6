"""The Redis broker under the contract: a fresh stream per test, deleted afterwards."""

from __future__ import annotations

import os

import redis

from stepline.triggers.queues.redis import RedisBroker

URL = os.environ.get("STEPLINE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
CLAIM_IDLE = 0.3


def make(queue: str, url: str = URL) -> RedisBroker:
    return RedisBroker(url, queue, claim_idle=CLAIM_IDLE)


def cleanup(queue: str) -> None:
    client = redis.Redis.from_url(URL)
    try:
        client.delete(queue, f"{queue}.dead")
    finally:
        client.close()


def dead_letters(queue: str) -> list[tuple[bytes, dict[str, str]]]:
    """What the dead-letter stream holds: (body, the other fields as text)."""
    client = redis.Redis.from_url(URL)
    try:
        entries = client.xrange(f"{queue}.dead")
    finally:
        client.close()
    found = []
    for _entry_id, fields in entries:
        body = fields.pop(b"body")
        found.append((body, {k.decode(): v.decode() for k, v in fields.items()}))
    return found
