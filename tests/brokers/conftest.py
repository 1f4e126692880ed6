"""The broker contract's fixtures: one ``broker`` per broker kind, on a fresh queue.

Each broker kind has a module ``_<kind>.py`` here with ``URL``, ``make(queue, url=URL) ->
Broker`` (not connected), ``cleanup(queue)`` (delete the queue and its dead letters),
``dead_letters(queue) -> [(body, headers)]``, ``CLOSED_PORT_URL`` (nothing listens there; it
carries the password ``SECRET``, which no error may show), ``CLAIM_IDLE`` (how long an
unacknowledged message waits before it is delivered again) and optionally ``IDLE_REDELIVERY =
False`` when the broker redelivers only on disconnect. Adding a broker is one more name in
:data:`BROKERS` (the process tests of ``tests/triggers`` use the same list).
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from types import ModuleType
from typing import Any

import pytest

from stepline.triggers.queues.broker import Broker

BROKERS = ["redis"]


def kit(kind: str) -> ModuleType:
    """The fixture module of one broker kind (``tests/brokers/_<kind>.py``)."""
    return importlib.import_module(f"tests.brokers._{kind}")


@pytest.fixture(params=BROKERS)
def broker_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def queue_name(broker_kind: str) -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:12]}"
    yield name
    kit(broker_kind).cleanup(name)


@pytest.fixture
async def make_broker(broker_kind: str, queue_name: str) -> AsyncIterator[Callable[..., Broker]]:
    """``make_broker()``: another broker object on the test's queue (closed afterwards)."""
    made: list[Broker] = []

    def factory(**options: Any) -> Broker:
        broker: Broker = kit(broker_kind).make(queue_name, **options)
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
