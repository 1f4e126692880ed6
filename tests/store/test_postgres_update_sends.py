"""An update's send on PostgreSQL: one round trip, whether it claims the instance or not; a
send that claims reads the history after the lock it waited for (an event committed while it
waited is in the history it hands over, as its event count says), and retried after its reply
was lost it finds the update and the lease it took."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg import sql

from stepline import ManualClock
from stepline.store.base import Finish, NewInstance
from stepline.store.postgres import PostgresStore, split_url
from stepline.store.types import UPDATE_EVENT

from ..conftest import STORES
from .test_postgres import fresh, lose_one_reply, schemas, update_events, url_for
from .test_postgres_flow import round_trips

__all__ = ["schemas"]  # the fixture, used by name

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif("postgres" not in STORES, reason="STEPLINE_TEST_STORES leaves out postgres"),
]

LEASE = 30.0


@pytest.fixture
async def store(schemas: list[str]) -> AsyncIterator[PostgresStore]:
    opened = PostgresStore(url_for(fresh(schemas)), ManualClock(1000.0), pool_size=2)
    await opened.open()
    yield opened
    await opened.close()


@pytest.fixture
def schema_of(store: PostgresStore) -> str:
    return split_url(store.url)[1]


async def waiting(store: PostgresStore, instance_id: str) -> int:
    """An instance suspended until an event comes; its pk."""
    await store.create_instances(
        "w", [NewInstance(instance_id, None)], trigger="api", skip_existing=False
    )
    [claim] = (await store.claim("x", ["w"], 1, LEASE, store.now())).claims
    await store.finish(claim.lease, Finish("waiting", event_seq=claim.event_seq), store.now())
    return claim.instance.pk


async def test_a_send_that_claims_is_one_round_trip_as_a_send_is(store: PostgresStore) -> None:
    await waiting(store, "a")
    await waiting(store, "b")
    with round_trips() as plain:
        await store.messages.send_update("w", "a", "u1", "decide", "[]")
    with round_trips() as claiming:
        _, claim = await store.messages.send_update_and_claim(
            "w", "b", "u1", "decide", "[]", owner="me", lease_seconds=LEASE
        )
    assert claim is not None
    assert plain == {"alone": 1}  # one statement, autocommitted
    assert claiming == {"pipelines": 1}  # BEGIN, the send, the history, COMMIT


async def test_an_event_committed_while_the_send_waited_is_in_its_claims_history(
    store: PostgresStore,
) -> None:
    pk = await waiting(store, "a")
    conninfo, schema = split_url(store.url)
    async with await psycopg.AsyncConnection.connect(conninfo) as other:
        await other.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        # an event sent in a transaction that holds the instance's row meanwhile
        await other.execute(
            "INSERT INTO events (instance_pk, type, payload, created_at) VALUES (%s, 'go', %s, 1)",
            (pk, "1"),
        )
        await other.execute("UPDATE instances SET event_seq = event_seq + 1 WHERE pk = %s", (pk,))
        send = asyncio.ensure_future(
            store.messages.send_update_and_claim(
                "w", "a", "u1", "decide", "[]", owner="me", lease_seconds=LEASE
            )
        )
        await asyncio.sleep(0.5)
        assert not send.done(), "the send did not wait for the instance's row"
        await other.commit()
    _, claim = await send
    assert claim is not None
    assert [event.type for event in claim.history.events] == ["go", UPDATE_EVENT]
    assert claim.event_seq == 2


async def test_a_claiming_send_whose_reply_is_lost_returns_its_claim(
    store: PostgresStore, schema_of: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await waiting(store, "a")
    lost = lose_one_reply(store, monkeypatch, f'INSERT INTO "{schema_of}".updates')
    record, claim = await store.messages.send_update_and_claim(
        "w", "a", "u1", "decide", "[1]", owner="me", lease_seconds=LEASE
    )
    assert lost == [True], "the fault was not injected"
    monkeypatch.undo()
    assert (record.update_id, record.status) == ("u1", "pending")
    assert claim is not None and claim.lease.owner == "me"
    assert [event.type for event in claim.history.events] == [UPDATE_EVENT]
    assert update_events(schema_of) == 1
    assert (await store.claim("other", ["w"], 5, LEASE, store.now())).claims == []
