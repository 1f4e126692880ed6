"""The PostgreSQL store's connection class (``stepline.store.postgres.connection``): the socket
stays registered with the event loop between round trips, and everything psycopg's own wait promises
still holds (idle connections leave the loop alone, closed ones leave no registration behind,
cancelled queries are cancelled in the server, large queries and timeouts work)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest

from stepline.store.postgres import connection as _pgconn
from stepline.store.postgres.connection import StoreConnection

from ._pg import pg_admin_url
from .conftest import STORES

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif("postgres" not in STORES, reason="STEPLINE_TEST_STORES leaves out postgres"),
]


@pytest.fixture
async def conn() -> AsyncIterator[StoreConnection]:
    connection = await StoreConnection.connect(pg_admin_url(), autocommit=True)
    try:
        yield connection
    finally:
        await connection.close()


async def admin(statement: str, params: Any = ()) -> None:
    """Run ``statement`` on a connection of its own (psycopg's stock class)."""
    async with await psycopg.AsyncConnection.connect(pg_admin_url(), autocommit=True) as other:
        await other.execute(statement, params)


def registered(conn: StoreConnection) -> bool:
    return conn._watch is not None and conn._watch.registered


def counting(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop, name: str
) -> list[int]:
    """Count the calls to ``loop.<name>`` (asyncio's own loop, whose methods can be patched)."""
    calls: list[int] = []
    original: Callable[..., Any] = getattr(loop, name)

    def wrapper(fd: int, *args: Any) -> Any:
        calls.append(fd)
        return original(fd, *args)

    monkeypatch.setattr(loop, name, wrapper)
    return calls


async def test_round_trips_register_the_socket_once(
    conn: StoreConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psycopg's own wait adds and removes a reader around every round trip; this one registers
    the socket at the first and keeps it."""
    loop = asyncio.get_running_loop()
    added = counting(monkeypatch, loop, "add_reader")
    removed = counting(monkeypatch, loop, "remove_reader")
    cursor = conn.kept_cursor()
    for n in range(50):
        await cursor.execute("SELECT %s::int", (n,))
        assert await cursor.fetchall() == [(n,)]
    assert added == [conn.pgconn.socket]
    assert removed == []
    assert registered(conn)


@pytest.mark.both_loops
async def test_data_nobody_waits_for_unregisters_the_socket_and_is_delivered_later(
    conn: StoreConnection,
) -> None:
    """A notification arriving at an idle connection makes the socket readable with nobody
    waiting: the socket is unregistered (a level-triggered reader would otherwise run again on
    every turn of the loop), and the notification is read with the next round trip."""
    await conn.execute("LISTEN pgconn_test")
    assert registered(conn)
    await admin("NOTIFY pgconn_test, 'hello'")
    cpu = time.process_time()
    await asyncio.sleep(0.3)
    assert time.process_time() - cpu < 0.15  # a busy loop would have used the whole 0.3 s
    assert not registered(conn)
    assert await (await conn.execute("SELECT 1")).fetchall() == [(1,)]
    assert registered(conn)
    notes = [note.payload async for note in conn.notifies(timeout=2.0, stop_after=1)]
    assert notes == ["hello"]


@pytest.mark.both_loops
async def test_notifications_wake_a_waiting_listener(conn: StoreConnection) -> None:
    await conn.execute("LISTEN pgconn_wake")

    async def first() -> str:
        async for note in conn.notifies():
            return note.payload
        raise AssertionError("notifies() ended")

    listening = asyncio.create_task(first())
    await asyncio.sleep(0.05)
    await admin("NOTIFY pgconn_wake, 'up'")
    assert await asyncio.wait_for(listening, 5.0) == "up"


@pytest.mark.both_loops
async def test_a_connection_the_server_drops_while_idle_leaves_the_loop_alone(
    conn: StoreConnection,
) -> None:
    await conn.execute("SELECT 1")
    pid = conn.pgconn.backend_pid
    await admin("SELECT pg_terminate_backend(%s)", (pid,))
    cpu = time.process_time()
    await asyncio.sleep(0.3)
    assert time.process_time() - cpu < 0.15
    assert not registered(conn)
    with pytest.raises(psycopg.OperationalError):
        await conn.execute("SELECT 1")


@pytest.mark.both_loops
async def test_a_connection_lost_mid_query_leaves_no_registration_behind(
    conn: StoreConnection,
) -> None:
    """libpq closes the socket itself when it reads that the server went away, while the
    socket is registered: the registration goes at once, so the next connection, which the
    operating system gives the same descriptor, works."""
    fd = conn.pgconn.socket
    running = asyncio.create_task(conn.execute("SELECT pg_sleep(30)"))
    await asyncio.sleep(0.2)
    await admin("SELECT pg_terminate_backend(%s)", (conn.pgconn.backend_pid,))
    with pytest.raises(psycopg.OperationalError):
        await asyncio.wait_for(running, 10)
    assert not registered(conn)
    reused = False
    for n in range(5):
        other = await StoreConnection.connect(pg_admin_url(), autocommit=True)
        try:
            reused = reused or other.pgconn.socket == fd
            query = other.execute("SELECT %s::int", (n,))
            assert await (await asyncio.wait_for(query, 10)).fetchall() == [(n,)]
        finally:
            await other.close()
    assert reused  # the case this test is about happened


@pytest.mark.both_loops
async def test_closing_unregisters_so_a_reused_descriptor_works() -> None:
    """The operating system gives a new socket the lowest free descriptor, often the one a
    connection just closed: a registration left behind would be found by the next connection."""
    descriptors = []
    for n in range(20):
        connection = await StoreConnection.connect(pg_admin_url(), autocommit=True)
        descriptors.append(connection.pgconn.socket)
        assert await (await connection.execute("SELECT %s::int", (n,))).fetchall() == [(n,)]
        assert registered(connection)
        await connection.close()
        assert not registered(connection)
    assert len(set(descriptors)) < len(descriptors)  # the reuse this test is about happened


@pytest.mark.both_loops
async def test_a_cancelled_query_is_cancelled_in_the_server_and_the_connection_recovers(
    conn: StoreConnection,
) -> None:
    """As with psycopg's own wait: cancelling the task cancels the query in the server and
    brings the connection back to idle (the store keeps its spare connection on that)."""
    running = asyncio.create_task(conn.execute("SELECT pg_sleep(30)"))
    await asyncio.sleep(0.2)
    running.cancel()
    started = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert time.monotonic() - started < 10  # not the query's 30 s
    assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert await (await conn.execute("SELECT 2")).fetchall() == [(2,)]
    assert registered(conn)


@pytest.mark.both_loops
async def test_a_query_larger_than_the_socket_buffer(conn: StoreConnection) -> None:
    """Sending it waits for the socket to be writable: psycopg's own wait does that part, and
    the next round trip registers the socket again."""
    big = "x" * (16 * 1024 * 1024)
    cursor = await conn.execute("SELECT length(%s)", (big,))
    assert await cursor.fetchall() == [(len(big),)]
    assert await (await conn.execute("SELECT 3")).fetchall() == [(3,)]
    assert registered(conn)


@pytest.mark.both_loops
async def test_a_wait_with_a_timeout_uses_psycopgs_own(conn: StoreConnection) -> None:
    await conn.execute("LISTEN pgconn_quiet")
    assert registered(conn)
    started = time.monotonic()
    assert [note async for note in conn.notifies(timeout=0.2)] == []
    assert time.monotonic() - started >= 0.2
    assert not registered(conn)  # psycopg's wait registers and unregisters on its own
    assert await (await conn.execute("SELECT 4")).fetchall() == [(4,)]
    assert registered(conn)


@pytest.mark.both_loops
async def test_without_poll_psycopgs_own_wait_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where ``select.poll`` is missing (Windows), the connection waits as psycopg does."""
    monkeypatch.setattr(_pgconn, "_HAS_POLL", False)
    fresh = await StoreConnection.connect(pg_admin_url(), autocommit=True)
    try:
        for n in range(3):
            assert await (await fresh.execute("SELECT %s::int", (n,))).fetchall() == [(n,)]
        assert fresh._watch is None
    finally:
        await fresh.close()
