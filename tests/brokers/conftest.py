"""The broker contract's fixtures: one ``broker`` per broker kind, on a fresh queue.

Each broker kind has a module ``_<kind>.py`` here with ``URL``, ``make(queue) -> Broker`` (not
connected), ``cleanup(queue)`` (sync or async: delete the queue and its dead letters) and
``dead_letters(queue) -> [(body, headers)]`` (sync or async: what the dead-letter queue holds,
oldest first, for the contract to check every copy and its reason); optionally ``CLAIM_IDLE``
(how long an unacknowledged message waits before it is delivered again, default 1 s) and
``DEAD_LETTER_DEDUP`` (True where a message dead-lettered twice leaves one copy; default False,
a copy each time). Adding a broker is one more name in :data:`BROKERS`; the process tests of
``tests/triggers`` use the same list.
``STEPLINE_TEST_BROKERS`` (comma-separated) runs other kinds instead.
"""

from __future__ import annotations

import importlib
import inspect
import os
import uuid
from collections.abc import AsyncIterator, Callable
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from stepline.triggers.queues.broker import Broker

BROKERS = [
    b for b in os.environ.get("STEPLINE_TEST_BROKERS", "redis,rabbitmq,nats").split(",") if b
]

NO_IDLE_REDELIVERY = {"rabbitmq"}
"""Brokers that redeliver an unacknowledged message only when its consumer disconnects (no
timer hands on the messages of a live but stuck consumer)."""

SECRET = "s3cret-pw"
"""The password of :func:`unreachable_url`, which no error may show."""


def kit(kind: str) -> ModuleType:
    """The fixture module of one broker kind (``tests/brokers/_<kind>.py``)."""
    return importlib.import_module(f"tests.brokers._{kind}")


def claim_idle(kind: str) -> float:
    return float(getattr(kit(kind), "CLAIM_IDLE", 1.0))


async def cleanup(kind: str, queue: str) -> None:
    done = kit(kind).cleanup(queue)
    if inspect.isawaitable(done):
        await done


def unreachable_url(url: str) -> str:
    """``url`` on a port nothing listens on (1), with the password :data:`SECRET`."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username or 'user'}:{SECRET}@127.0.0.1:1"))


BROKER_PARAMS = [pytest.param(kind, marks=pytest.mark.broker) for kind in BROKERS]
"""The broker kinds as fixture parameters, marked so that CI can tell that none was skipped."""


@pytest.fixture(params=BROKER_PARAMS)
def broker_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def queue_name(broker_kind: str) -> AsyncIterator[str]:
    name = f"test-{uuid.uuid4().hex[:12]}"
    yield name
    await cleanup(broker_kind, name)


@pytest.fixture
async def make_broker(broker_kind: str, queue_name: str) -> AsyncIterator[Callable[..., Broker]]:
    """``make_broker()``: another broker object on the test's queue (closed afterwards)."""
    made: list[Broker] = []

    def factory() -> Broker:
        broker: Broker = kit(broker_kind).make(queue_name)
        made.append(broker)
        return broker

    yield factory
    for broker in made:
        await broker.close()


@pytest.fixture
async def broker(make_broker: Callable[..., Broker]) -> Broker:
    """A connected broker on the test's queue."""
    created = make_broker()
    await created.connect()
    return created


def dead_letter_dedup(kind: str) -> bool:
    return bool(getattr(kit(kind), "DEAD_LETTER_DEDUP", False))


async def dead_letters(kind: str, queue: str) -> list[tuple[bytes, dict[str, str]]]:
    """What the dead-letter queue holds, oldest first: (body, headers)."""
    found: Any = kit(kind).dead_letters(queue)
    return list(await found) if inspect.isawaitable(found) else list(found)
