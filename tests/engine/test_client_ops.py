"""The client's deletion rule, event listing and database creation, on both stores.

Store contract: ``get_events`` (pending and consumed events, in send order) and
``delete_instances(finished_only=True)`` (the status checked in the deleting transaction, all
or nothing). Client: ``Instance.events()``, ``Instance.delete(force=)``,
``WorkflowBinding.delete`` / ``purge``, ``Engine(create=False)``. HTTP: ``DELETE`` follows the
client's rule (``?force=true``), ``GET .../events``. The CLI side is in test_cli_client.py.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql

from stepline import (
    ConfigError,
    Engine,
    IllegalStateError,
    InstanceEvent,
    InstanceNotFoundError,
    ManualClock,
    SyncEngine,
    WorkflowEvent,
    WorkflowStep,
    workflow,
)
from stepline.http import create_app

from .._pg import drop_schema, pg_admin_url
from ..conftest import EngineFactory, drain


@workflow(name="gate")
async def gate(event: WorkflowEvent, step: WorkflowStep) -> Any:
    first = await step.wait_for_event("first", type="go", timeout="1 hour")
    second = await step.wait_for_event("second", type="go", timeout="1 hour")
    return [first.payload, second.payload]


@workflow(name="quick")
async def quick(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("only", lambda: "done")


async def _statuses(engine: Engine, workflow_name: str) -> dict[str, str]:
    page = await engine.list_instances(workflow_name, limit=100)
    return {record.id: record.status for record in page.instances}


# -- events --------------------------------------------------------------------------------------


async def test_get_events_lists_pending_and_consumed_in_send_order(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([gate], clock=clock) as engine:
        instance = await engine.workflow("gate").create("g1")
        await drain(engine)
        assert await instance.events() == []
        t0 = engine.now()
        await instance.send_event("noise", {"n": "ü'; DROP TABLE events; --"})
        clock.advance(1)
        await instance.send_event("go", [1, 2])
        clock.advance(1)
        await instance.send_event("go", None)
        await drain(engine)
        events = await instance.events()
        assert events == [
            InstanceEvent("noise", {"n": "ü'; DROP TABLE events; --"}, t0, None),
            InstanceEvent("go", [1, 2], t0 + 1, "first-1"),
            InstanceEvent("go", None, t0 + 2, "second-1"),
        ]
        assert (await instance.status()).output == [[1, 2], None]
        assert events[1].to_json() == {
            "type": "go",
            "payload": [1, 2],
            "sent_at": t0 + 1,
            "consumed_by": "first-1",
        }
        # A restart from the second wait gives its event back: pending again.
        await instance.restart("second")
        assert [e.consumed_by for e in await instance.events()] == [None, "first-1", None]
        with pytest.raises(InstanceNotFoundError):
            await engine.store.get_events("gate", "nope")
        other = await engine.workflow("gate").create("g2")
        assert await other.events() == []  # only this instance's events


# -- deletion --------------------------------------------------------------------------------


async def test_delete_finished_only_is_all_or_nothing(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([quick, gate], clock=clock) as engine:
        store = engine.store
        await engine.workflow("quick").create("done")
        await engine.workflow("quick").create("queued")
        await drain(engine)  # "done" and "queued" both complete
        await engine.workflow("quick").create("late")  # queued
        with pytest.raises(IllegalStateError) as refused:
            await store.retention.delete_instances(
                "quick", ["done", "late", "nope"], finished_only=True
            )
        assert "cannot delete instance 'late' of workflow 'quick': it is queued" in str(
            refused.value
        )
        assert await _statuses(engine, "quick") == {
            "done": "complete",
            "queued": "complete",
            "late": "queued",
        }
        deleted = await store.retention.delete_instances(
            "quick", ["done", "queued", "nope"], finished_only=True
        )
        assert deleted == 2
        assert (
            await store.retention.delete_instances("quick", ["late"]) == 1
        )  # no condition: any status
        assert await _statuses(engine, "quick") == {}


async def test_instance_delete_refuses_unfinished_unless_forced(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([gate], clock=clock) as engine:
        queued = await engine.workflow("gate").create("q1")
        with pytest.raises(IllegalStateError, match="it is queued"):
            await queued.delete()
        await drain(engine)
        waiting = await engine.workflow("gate").create("w1")
        await drain(engine)
        await waiting.send_event("go", 1)
        with pytest.raises(IllegalStateError, match="it is waiting"):
            await waiting.delete()
        await waiting.pause()
        with pytest.raises(IllegalStateError, match="it is paused"):
            await waiting.delete()
        assert [e.type for e in await waiting.events()] == ["go"]  # nothing was deleted
        await waiting.delete(force=True)
        with pytest.raises(InstanceNotFoundError):
            await waiting.status()
        with pytest.raises(InstanceNotFoundError):
            await waiting.delete(force=True)
        finished = await engine.workflow("gate").create("t1")
        await finished.terminate()
        await finished.delete()
        assert await _statuses(engine, "gate") == {"q1": "waiting"}


async def test_control_applies_an_action_by_name_and_returns_the_new_status(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    """``Instance.control``: the one dispatch of status changes both HTTP APIs use."""
    async with make_engine([gate], clock=clock) as engine:
        instance = await engine.workflow("gate").create("c1")
        await drain(engine)
        assert (await instance.control("pause")).status == "paused"
        assert (await instance.control("resume")).status == "queued"
        await drain(engine)
        await instance.send_event("go", 1)
        await drain(engine)
        assert [s.name for s in await instance.steps()] == ["first", "second"]
        assert (await instance.control("restart", from_step="second")).status == "queued"
        assert [s.name for s in await instance.steps()] == ["first"]
        with pytest.raises(ValueError, match="unknown action 'stop'; use one of pause, resume"):
            await instance.control("stop")
        assert (await instance.control("terminate")).status == "terminated"
        with pytest.raises(IllegalStateError):
            await instance.control("pause")


async def test_delete_does_not_check_then_delete(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    """A status read before the delete would race with a restart: the client must leave the
    check to the deleting transaction. Every read here restarts the instance right after it
    answers, so a client that read the status first would delete a queued instance."""
    async with make_engine([quick], clock=clock) as engine:
        instance = await engine.workflow("quick").create("r1")
        await drain(engine)
        store = engine.store
        restarted: list[str] = []

        def restarting(read: Any) -> Any:
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                result = await read(*args, **kwargs)
                if not restarted:
                    restarted.append("r1")
                    await store.control("quick", "r1", "restart")
                return result

            return wrapper

        for name in ("get_instance", "get_steps", "get_events", "list_instances"):
            setattr(store, name, restarting(getattr(store, name)))
        try:
            await instance.delete()
        except IllegalStateError:
            assert restarted  # refused because the restart landed first: right
        else:
            assert not restarted, "deleted an instance that a restart had made queued"
        await engine.workflow("quick").delete(["r1"], force=True)


@pytest.mark.postgres
async def test_postgres_delete_waits_for_a_status_change_in_flight() -> None:
    """A status change that holds the row when the delete starts is seen by the delete's
    check (the check reads after taking the row lock, not from an older snapshot)."""
    base = pg_admin_url()
    schema = f"t_{uuid.uuid4().hex[:12]}"
    url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
    try:
        async with Engine(url, [quick], worker=False) as engine:
            instance = await engine.workflow("quick").create("p1")
            await instance.terminate()
            update = sql.SQL("UPDATE {}.instances SET status = 'queued' WHERE id = 'p1'")
            other = await psycopg.AsyncConnection.connect(base)
            async with other, other.transaction():
                await other.execute(update.format(sql.Identifier(schema)))
                deleting = asyncio.ensure_future(instance.delete())
                await asyncio.sleep(0.3)
                assert not deleting.done()  # waiting for the row lock
            with pytest.raises(IllegalStateError, match="it is queued"):
                await deleting
            assert (await instance.status()).status == "queued"
    finally:
        drop_schema(base, schema)


async def test_purge_deletes_finished_instances_by_age(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([quick], clock=clock) as engine:
        binding = engine.workflow("quick")
        await binding.create("old")
        await drain(engine)
        clock.advance(3600)
        await binding.create("new")
        await drain(engine)
        await binding.create("queued")
        with pytest.raises(ValueError, match="finished instances only"):
            await binding.purge(statuses=["queued"])
        with pytest.raises(ValueError, match="older_than"):
            await binding.purge(older_than="soon")
        assert await binding.purge(older_than="30 minutes") == 1
        assert await binding.purge(statuses=["errored"]) == 0
        clock.advance(1)  # ended before now, not at it
        assert await binding.purge() == 1
        assert await _statuses(engine, "quick") == {"queued": "queued"}


# -- creating the database ---------------------------------------------------------------------


async def test_create_false_never_creates_a_sqlite_file(tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "x.db"
    engine = Engine(f"sqlite:///{missing}", worker=False, create=False)
    with pytest.raises(ConfigError) as refused:
        await engine.open()
    assert f"no stepline database at {missing}" in str(refused.value)
    assert not (tmp_path / "typo").exists()
    async with Engine(f"sqlite:///{missing}", worker=False):
        pass  # the default creates it, with its directories
    assert missing.is_file()
    async with Engine(f"sqlite:///{missing}", [quick], create=False) as engine:
        instance = await engine.workflow("quick").create("c1")
        assert (await instance.wait(timeout=10)).status == "complete"


async def test_create_false_with_a_relative_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=str(tmp_path / "rel.db")):
        async with Engine("sqlite:///rel.db", worker=False, create=False):
            pass
    assert os.listdir(tmp_path) == []
    async with Engine("sqlite:///rel.db", worker=False):
        pass
    async with Engine("sqlite:///rel.db", worker=False, create=False):
        pass


# -- HTTP --------------------------------------------------------------------------------------


@pytest.fixture
async def http(make_engine: EngineFactory, clock: ManualClock) -> AsyncIterator[Any]:
    async with make_engine([gate, quick], clock=clock) as engine:
        app = create_app(engine)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://stepline") as client:
            yield engine, client


async def test_http_delete_follows_the_client_rule(http: Any) -> None:
    engine, client = http
    await engine.workflow("gate").create("w1")
    await drain(engine)
    url = "/api/workflows/gate/instances/w1"
    resp = await client.delete(url)
    assert resp.status_code == 409, resp.text
    message = resp.json()["error"]["message"]
    assert message == (
        "cannot delete instance 'w1' of workflow 'gate': it is waiting; terminate it first, "
        "or delete it with ?force=true"
    )
    assert (await client.get(url)).status_code == 200  # still there
    bad = await client.delete(url, params={"force": "yes"})
    assert bad.status_code == 400 and "'force' must be true or false" in bad.text
    assert (await client.delete(url, params={"force": "false"})).status_code == 409
    forced = await client.delete(url, params={"force": "true"})
    assert forced.status_code == 200 and forced.json() == {"id": "w1", "deleted": True}
    assert (await client.get(url)).status_code == 404


async def test_http_lists_an_instances_events(http: Any) -> None:
    engine, client = http
    instance = await engine.workflow("gate").create("e1")
    await drain(engine)
    await instance.send_event("other", {"x": 1})
    await instance.send_event("go", "yes")
    await drain(engine)
    resp = await client.get("/api/workflows/gate/instances/e1/events")
    assert resp.status_code == 200, resp.text
    events = resp.json()["events"]
    assert [(e["type"], e["payload"], e["consumed_by"]) for e in events] == [
        ("other", {"x": 1}, None),
        ("go", "yes", "first-1"),
    ]
    assert all(isinstance(e["sent_at"], float) for e in events)
    missing = await client.get("/api/workflows/gate/instances/nope/events")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "instance_not_found"
    unknown = await client.get("/api/workflows/nope/instances/e1/events")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "workflow_not_found"


def test_the_sync_facade_deletes_and_lists_events(store_url: str) -> None:
    with SyncEngine(store_url, [gate]) as engine:
        binding = engine.workflow("gate")
        instance = binding.create("s1")
        instance.send_event("go", {"a": 1})
        assert [(e.type, e.payload) for e in instance.events()] == [("go", {"a": 1})]
        with pytest.raises(IllegalStateError):
            instance.delete()
        assert binding.delete(["s1"], force=True) == 1
        assert binding.purge() == 0
