"""Fixtures of the contract suite: an opened store on a fresh database, for each store kind.

``store`` follows the test's :class:`~stepline.ManualClock` (``clock``); ``open_store`` opens
more store objects on the same database (another process's view, for concurrency promises).
Both come from ``store_url`` (tests/conftest.py): a fresh SQLite file or PostgreSQL schema.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from stepline import ManualClock
from stepline.store import create_store
from stepline.store.base import Store

OpenStore = Callable[[], Awaitable[Store]]


@pytest.fixture
async def open_store(store_url: str, clock: ManualClock) -> AsyncIterator[OpenStore]:
    """``await open_store()``: another opened store on the test's database, closed at the end."""
    opened: list[Store] = []

    async def factory() -> Store:
        store = create_store(store_url, clock)
        await store.open()
        opened.append(store)
        return store

    yield factory
    for store in reversed(opened):
        await store.close()


@pytest.fixture
async def store(open_store: OpenStore) -> Store:
    return await open_store()
