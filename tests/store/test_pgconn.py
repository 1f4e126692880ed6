"""The PostgreSQL store's connections (``stepline.store.postgres.db``): what psycopg logs about
them in an outage is demoted to DEBUG (the store logs the outage once itself), and only about
them: an application's own pools and connections keep their warnings."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from stepline.errors import StoreError
from stepline.store import create_store
from stepline.store.postgres.pools import POOL_NAMES, StoreConnection, quiet_psycopg

from .._pg import pg_admin_url
from ..conftest import STORES

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif("postgres" not in STORES, reason="STEPLINE_TEST_STORES leaves out postgres"),
]


@pytest.fixture
def pool_logger() -> Iterator[logging.Logger]:
    """psycopg's pool logger with the store's filter on it, at WARNING unless a test lowers it."""
    logger = logging.getLogger("psycopg.pool")
    level, filters = logger.level, list(logger.filters)
    quiet_psycopg()
    logger.setLevel(logging.WARNING)
    try:
        yield logger
    finally:
        logger.setLevel(level)
        logger.filters[:] = filters


@pytest.fixture
async def connections() -> AsyncIterator[tuple[StoreConnection, psycopg.AsyncConnection[Any]]]:
    """One of the store's connections and one of an application's."""
    ours = await StoreConnection.connect(pg_admin_url(), autocommit=True)
    theirs = await psycopg.AsyncConnection.connect(pg_admin_url(), autocommit=True)
    try:
        yield ours, theirs
    finally:
        await ours.close()
        await theirs.close()


def passed(logger: logging.Logger, msg: str, *args: Any) -> logging.LogRecord | None:
    """The record of a warning ``logger`` logs, as its filters leave it (None: dropped)."""
    record = logger.makeRecord(logger.name, logging.WARNING, __file__, 0, msg, args, None)
    return record if logger.filter(record) else None


def test_the_store_pools_failures_are_dropped_unless_debug_is_wanted(
    pool_logger: logging.Logger,
) -> None:
    for name in POOL_NAMES:
        assert passed(pool_logger, "error connecting in %r: %s", name, "refused") is None
        message = "reconnection attempt in pool %r failed after %s sec"
        assert passed(pool_logger, message, name, 2.0) is None
    pool_logger.setLevel(logging.DEBUG)
    record = passed(pool_logger, "error connecting in %r: %s", POOL_NAMES[0], "refused")
    assert record is not None
    assert (record.levelno, record.levelname) == (logging.DEBUG, "DEBUG")


def test_other_pools_and_other_messages_keep_their_warnings(pool_logger: logging.Logger) -> None:
    record = passed(pool_logger, "error connecting in %r: %s", "the-app's-pool", "refused")
    assert record is not None and record.levelno == logging.WARNING
    record = passed(pool_logger, "connection lost in %r: %s", POOL_NAMES[0], "refused")
    assert record is not None and record.levelno == logging.WARNING


async def test_only_the_store_connections_are_quietened(
    pool_logger: logging.Logger,
    connections: tuple[StoreConnection, psycopg.AsyncConnection[Any]],
) -> None:
    ours, theirs = connections
    for message in ("discarding broken connection: %s", "discarding closed connection: %s"):
        assert passed(pool_logger, message, ours) is None
        record = passed(pool_logger, message, theirs)
        assert record is not None and record.levelno == logging.WARNING
    async with ours.pipeline() as pipeline:  # a pipeline's own message names the pipeline
        assert passed(pool_logger, "error ignored terminating %r: %s", pipeline, "x") is None


def test_the_filter_is_installed_once(pool_logger: logging.Logger) -> None:
    installed = len(pool_logger.filters)
    quiet_psycopg()
    quiet_psycopg()
    assert len(pool_logger.filters) == installed


def test_the_store_uses_psycopgs_own_wait() -> None:
    """The store's connection class adds a kept cursor and overrides nothing of psycopg's
    (docs/architecture.md, "The PostgreSQL store")."""
    overridden = {
        name
        for name in vars(StoreConnection)
        if not name.startswith("__") and hasattr(psycopg.AsyncConnection, name)
    }
    assert overridden == set()


async def test_a_refused_connection_asks_whether_the_server_runs_once() -> None:
    """psycopg's own message already asks whether the server is running: the store's advice
    after it names what else to check, without asking again."""
    store = create_store("postgresql://postgres@127.0.0.1:1/test")
    with pytest.raises(StoreError) as raised:
        await store.open()
    message = str(raised.value)
    assert message.startswith("cannot connect to PostgreSQL at 127.0.0.1:1/test"), message
    assert len(re.findall(r"server (is )?running", message, flags=re.IGNORECASE)) == 1, message
    assert "host, port, user, password and database" in message, message


async def test_a_server_that_answers_is_not_asked_whether_it_runs() -> None:
    store = create_store(urlsplit(pg_admin_url())._replace(path="/no_such_database").geturl())
    with pytest.raises(StoreError) as raised:
        await store.open()
    message = str(raised.value)
    assert 'database "no_such_database" does not exist' in message, message
    assert "is running" not in message, message
    assert "host, port, user, password and database" in message, message
