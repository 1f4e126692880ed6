"""The store as a whole: create_store, open (migrations), close, now, the workflows it knows,
and driver errors translated at the boundary."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from stepline import ConfigError, InstanceNotFoundError, ManualClock
from stepline.errors import SteplineError, StoreError
from stepline.records import WorkerInfo, WorkflowInfo
from stepline.store import SqliteStore, create_store
from stepline.store.base import Finish, Store, WorkflowMeta
from stepline.store.migrations import load_migrations
from stepline.store.postgres import PostgresStore

from ._support import WF, claim_one, create, raw, write
from .conftest import OpenStore


def test_create_store_picks_the_store_by_url(tmp_path: Path) -> None:
    assert isinstance(create_store(f"sqlite:///{tmp_path}/x.db"), SqliteStore)
    for url in ("postgresql://u@localhost/db", "postgres://u@localhost/db?schema=s"):
        assert isinstance(create_store(url), PostgresStore)
    with pytest.raises(ValueError, match="unsupported database URL"):
        create_store("mysql://localhost/db")
    assert not list(tmp_path.iterdir())  # nothing is opened before open()


async def test_create_false_refuses_a_missing_sqlite_file_and_creates_nothing(
    tmp_path: Path,
) -> None:
    store = create_store(f"sqlite:///{tmp_path}/missing/x.db", create=False)
    with pytest.raises(ConfigError, match="no stepline database at"):
        await store.open()
    await store.close()
    assert os.listdir(tmp_path) == []


async def test_open_creates_the_schema_through_every_numbered_migration(
    store: Store, store_url: str, store_kind: str
) -> None:
    versions = [m.version for m in load_migrations(store_kind)]
    assert raw(store_url, "SELECT version FROM schema_migrations ORDER BY version") == [
        (v,) for v in versions
    ]
    assert await store.list_workflows() == []
    assert await store.workers.list_workers() == []
    assert store.schema_versions == (0, versions[-1])  # created


async def test_schema_versions_say_what_open_did(open_store: OpenStore, store_url: str) -> None:
    unopened = create_store(store_url)
    assert unopened.schema_versions is None
    first = await open_store()
    latest = first.schema_versions[1] if first.schema_versions else None
    assert first.schema_versions == (0, latest) and latest is not None and latest > 1
    again = await open_store()
    assert again.schema_versions == (latest, latest)  # nothing changed


async def test_open_upgrades_an_older_schema_and_keeps_its_data(
    store: Store, open_store: OpenStore, store_url: str, store_kind: str
) -> None:
    (created,) = await create(store, "a")
    await store.close()
    # the database as the first migration left it
    for trigger in ("instances_tags_insert", "instances_tags_update", "instances_tags_delete"):
        raw(
            store_url,
            f"DROP TRIGGER {trigger}" + ("" if store_kind == "sqlite" else " ON instances"),
        )
    if store_kind == "postgres":
        raw(store_url, "DROP FUNCTION instance_tags_sync()")
    for index in ("instances_status_pk", "instances_created"):
        raw(store_url, f"DROP INDEX {index}")
    tables = ("instance_tags", "bulk_jobs")
    for table in (*tables, "instance_tag_numbers") if store_kind == "postgres" else tables:
        raw(store_url, f"DROP TABLE {table}")
    raw(store_url, "ALTER TABLE instances DROP COLUMN tags")
    # the indexes first: SQLite drops no column an index uses (PostgreSQL drops the index too)
    for index in ("instances_parked", "instances_dedup", "instances_started", "instances_ready"):
        raw(store_url, f"DROP INDEX {index}")
    for index in ("instances_workflow_ready", "instances_workflow_started"):  # SQLite's only
        raw(store_url, f"DROP INDEX IF EXISTS {index}")
    raw(
        store_url,
        "DROP TRIGGER instances_delete_at" + ("" if store_kind == "sqlite" else " ON instances"),
    )
    if store_kind == "postgres":
        raw(store_url, "DROP FUNCTION instances_delete_at()")
    raw(store_url, "DROP INDEX instances_delete_at")
    for table, column in (
        ("instances", "delete_at"),
        ("instances", "retention"),
        ("workflows", "retention"),
    ):
        raw(store_url, f"ALTER TABLE {table} DROP COLUMN {column}")
    for index in ("instances_deadline", "instances_parent_pk", "instances_key_unstarted"):
        raw(store_url, f"DROP INDEX {index}")
    for column in ("deadline_at", "parent_pk", "on_parent_close", "conflict"):
        raw(store_url, f"ALTER TABLE instances DROP COLUMN {column}")
    raw(store_url, "ALTER TABLE instances DROP COLUMN traceparent")
    raw(store_url, "ALTER TABLE instances DROP COLUMN patches")
    raw(store_url, "ALTER TABLE instances DROP COLUMN version")
    raw(store_url, "DROP INDEX instances_key_parked")
    raw(store_url, "ALTER TABLE instances DROP COLUMN held_ready_at")
    raw(store_url, "ALTER TABLE instances DROP COLUMN parked_on")
    raw(store_url, "DROP TABLE limit_slots")
    raw(store_url, "DROP TABLE limit_starts")
    raw(
        store_url, "CREATE INDEX instances_ready ON instances (ready_at) WHERE ready_at IS NOT NULL"
    )
    for column in ("priority", "key", "dedup_key"):
        raw(store_url, f"ALTER TABLE instances DROP COLUMN {column}")
    raw(store_url, "ALTER TABLE workflows DROP COLUMN limits")
    raw(store_url, "DROP TABLE limits")
    raw(store_url, "DROP TABLE workers")
    raw(store_url, "DROP TABLE schedules")
    raw(store_url, "ALTER TABLE instances DROP COLUMN schedule")
    for table in ("updates", "streams", "stream_items", "query_requests"):
        raw(store_url, f"DROP TABLE {table}")
    raw(store_url, "DELETE FROM schema_migrations WHERE version > 1")
    reopened = await open_store()
    versions = [(m.version,) for m in load_migrations(store_kind)]
    assert raw(store_url, "SELECT version FROM schema_migrations ORDER BY version") == versions
    assert reopened.schema_versions == (1, versions[-1][0])
    assert await reopened.get_instance(WF, "a") == created
    now = reopened.now()
    await reopened.workers.heartbeat(WorkerInfo("w", "h", 1, now, now, 1.0, (WF,), 1, 0), now)
    assert [w.id for w in await reopened.workers.list_workers()] == ["w"]
    assert await reopened.schedules.list_schedules() == []
    assert (await reopened.messages.read_stream(WF, "a", "progress", 0, 10)).items == []


async def test_close_finishes_pending_writes_and_is_idempotent(
    store: Store, open_store: OpenStore
) -> None:
    writer = await open_store()
    await create(writer, "a", "b")
    (claim_a,) = (await writer.claim("w", [WF], 1, 30.0, writer.now())).claims
    (claim_b,) = (await writer.claim("w", [WF], 1, 30.0, writer.now())).claims
    now = writer.now()
    pending = [
        asyncio.ensure_future(writer.record_step(claim_a.lease, write(f"s{n}", n), now))
        for n in range(1, 4)
    ]
    pending.append(asyncio.ensure_future(writer.finish(claim_b.lease, Finish("complete"), now)))
    await asyncio.sleep(0)  # every write is submitted, none awaited
    await writer.close()
    results = await asyncio.wait_for(asyncio.gather(*pending), 10)
    assert results == ["running"] * 3 + ["complete"]
    await writer.close()
    assert [s.name for s in await store.get_steps(WF, "a")] == ["s1", "s2", "s3"]
    assert (await store.get_instance(WF, "b")).status == "complete"


async def test_now_follows_the_clock_the_store_was_given(store: Store, clock: ManualClock) -> None:
    assert store.now() == clock()
    clock.advance(12.5)
    assert store.now() == clock()


async def test_now_without_a_clock_is_real_time(store_url: str) -> None:
    store = create_store(store_url)
    await store.open()
    try:
        assert abs(store.now() - time.time()) < 5.0
    finally:
        await store.close()


# -- workflows -------------------------------------------------------------------------------------


async def test_register_workflows_inserts_or_updates_keeping_created_at(
    store: Store, clock: ManualClock
) -> None:
    t0 = store.now()
    await store.register_workflows([WorkflowMeta("a", "A", {"steps": ["x"]})])
    clock.advance(10)
    await store.register_workflows(
        [WorkflowMeta("a", "Renamed", {"steps": ["x", "y"]}), WorkflowMeta("b", "B")]
    )
    a, b = await store.list_workflows()
    assert (a.name, a.class_name, a.definition, a.created_at) == (
        "a",
        "Renamed",
        {"steps": ["x", "y"]},
        t0,
    )
    assert (b.name, b.class_name, b.definition, b.created_at) == ("b", "B", None, t0 + 10)
    assert all(isinstance(w.created_at, float) and isinstance(w.updated_at, float) for w in (a, b))


async def test_list_workflows_sorts_by_name_with_instance_counts_by_status(store: Store) -> None:
    await store.register_workflows([WorkflowMeta("zeta", "Z"), WorkflowMeta("alpha", "A")])
    await create(store, "q1", "q2", "p", workflow="alpha")
    await store.control("alpha", "p", "pause")
    await create(store, "orphan", workflow="unregistered")
    listed = await store.list_workflows()
    assert [w.name for w in listed] == ["alpha", "zeta"]
    assert [w.counts for w in listed] == [{"queued": 2, "paused": 1}, {}]
    assert all(isinstance(w, WorkflowInfo) for w in listed)


# -- driver errors ---------------------------------------------------------------------------------


async def test_a_driver_error_becomes_a_stepline_error_chained_with_from(store: Store) -> None:
    """A NUL character in an id: SQLite stores text with it, PostgreSQL refuses it."""
    await create(store, "a")
    claim = await claim_one(store, "a")
    for call in (
        lambda: store.get_instance(WF, "a\x00b"),
        lambda: store.send_event(WF, "a\x00b", "go", None),
        lambda: store.record_step(claim.lease, write("bad\x00name", 1), store.now()),
    ):
        try:
            await call()
        except InstanceNotFoundError:
            continue
        except SteplineError as exc:
            assert isinstance(exc, StoreError) and exc.__cause__ is not None, repr(exc)


async def test_opening_a_file_that_is_not_a_sqlite_database_raises_store_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are notes, not a database\n" * 200)
    store = create_store(f"sqlite:///{path}")
    with pytest.raises(StoreError, match="not a database") as refused:
        await store.open()
    assert refused.value.__cause__ is not None
    await store.close()
