"""``create_batch`` items take a create's options: ``timeout``, ``version``, ``retention``,
``tags``, ``key`` with ``on_conflict`` (and ``debounce``), checked as ``create`` checks them,
with errors naming the item and the field and nothing stored; in Python, the sync facade and
over HTTP. On both stores, on a manual clock."""

from __future__ import annotations

import re
from typing import Any

import httpx
import orjson
import pytest

from stepline import Engine, ManualClock, SyncEngine, Workflow, WorkflowEvent, WorkflowStep
from stepline.http import create_app
from stepline.operations.language.errors import TagError

from ..conftest import EngineFactory, drain
from ..versions.test_versions import OrderV1, OrderV2

WF = "order"


class Timed(Workflow):
    name = "timed"
    timeout = "2 hours"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await step.do("only", lambda: event.payload)


WORKFLOWS = [OrderV1, OrderV2, Timed]


async def stored(engine: Engine, workflow: str) -> dict[str, Any]:
    page = await engine.store.list_instances(workflow, None, 100, None)
    return {record.id: record for record in page.instances}


async def tags(engine: Engine, workflow: str) -> dict[str, Any]:
    """The instances' tags (a filtered list reads them)."""
    page = await engine.workflow(workflow).list(where="created >= 0")
    return {record.id: record.tags for record in page.instances}


async def test_timeout_retention_and_tags_per_item(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine(WORKFLOWS, clock=clock) as engine:
        now = clock()
        await engine.workflow("timed").create_batch(
            [
                {"id": "short", "timeout": "10 minutes", "tags": {"tier": 2}},
                {"id": "default", "retention": {"complete": "1 day"}},
                {"id": "seconds", "timeout": 30, "tags": {"vip": True}},
            ]
        )
        records = await stored(engine, "timed")
        assert records["short"].deadline_at == now + 600
        assert records["default"].deadline_at == now + 7200  # the workflow's timeout
        assert records["seconds"].deadline_at == now + 30
        assert await tags(engine, "timed") == {
            "short": {"tier": 2},
            "default": {},
            "seconds": {"vip": True},
        }
        await drain(engine)  # retention applies once they end
        kept = await engine.store.get_instance("timed", "default")
        assert (kept.status, kept.delete_at) == ("complete", now + 86400)
        assert (await engine.store.get_instance("timed", "short")).delete_at is None


async def test_a_version_per_item_over_the_batchs_own(make_engine: EngineFactory) -> None:
    async with make_engine(WORKFLOWS) as engine:
        binding = engine.workflow(WF)
        await binding.create_batch([{"id": "a", "version": "1"}, {"id": "b"}])
        await binding.create_batch([{"id": "c"}, {"id": "d", "version": "2"}], version="1")
        records = await stored(engine, WF)
        assert {i: r.version for i, r in records.items()} == {
            "a": "1",
            "b": "2",
            "c": "1",
            "d": "2",
        }
        await drain(engine)
        outputs = {i: (await engine.store.get_instance(WF, i)).output for i in "abcd"}
        assert outputs == {"a": "v1", "b": "v2", "c": "v1", "d": "v2"}


async def test_a_version_per_item_with_the_worker_taking_them_at_once(
    make_engine: EngineFactory,
) -> None:
    # With the in-process worker taking new instances at once, each runs its own version.
    async with make_engine(WORKFLOWS, worker=True, poll_interval=0.02) as engine:
        handles = await engine.workflow(WF).create_batch(
            [{"id": "m1", "version": "1"}, {"id": "m2", "version": "2"}, {"id": "m3"}]
        )
        results = {h.id: (await h.wait(timeout=20)).output for h in handles}
        assert results == {"m1": "v1", "m2": "v2", "m3": "v2"}


async def test_on_conflict_per_item(make_engine: EngineFactory, clock: ManualClock) -> None:
    async with make_engine(WORKFLOWS, clock=clock) as engine:
        binding = engine.workflow("timed")
        older = await binding.create("older", key="r")
        now = clock()
        handles = await binding.create_batch(
            [
                {"id": "d1", "params": 1, "key": "u", "on_conflict": "debounce", "debounce": 5},
                {"id": "plain", "params": "p"},
                {
                    "id": "d2",
                    "params": 2,
                    "key": "u",
                    "on_conflict": "debounce",
                    "debounce": "9 seconds",
                },
                {"id": "newest", "key": "r", "on_conflict": "replace_queued", "timeout": 60},
            ]
        )
        assert [h.id for h in handles] == ["d1", "plain", "d1", "newest"]
        records = await stored(engine, "timed")
        assert sorted(records) == ["d1", "newest", "older", "plain"]
        assert (records["d1"].params, records["d1"].ready_at) == (2, now + 9)
        assert records["older"].status == "terminated" and older.id == "older"
        assert records["newest"].deadline_at == now + 60
        # The same batch again is skipped whole: nothing joined, nothing replaced.
        again = await binding.create_batch(
            [{"id": "newest", "key": "r", "on_conflict": "replace_queued"}]
        )
        assert [h.id for h in again] == ["newest"]
        assert (await engine.store.get_instance("timed", "newest")).status == "queued"


BAD_ITEMS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"timeout": "soon"}, ValueError, "timeout of batch item 1"),
    ({"timeout": -5}, ValueError, "timeout of batch item 1"),
    ({"retention": {"complete": "forever"}}, ValueError, "retention of batch item 1"),
    ({"retention": 5}, ValueError, "retention of batch item 1"),
    ({"version": "8"}, ValueError, "create_batch item 1: workflow 'timed' has no version '8'"),
    (
        {"on_conflict": "debounce", "debounce": 5},
        ValueError,
        "create_batch item 1: on_conflict='debounce' needs a key",
    ),
    (
        {"key": "k", "on_conflict": "merge"},
        ValueError,
        "create_batch item 1: invalid on_conflict 'merge'",
    ),
    (
        {"key": "k", "on_conflict": "debounce"},
        ValueError,
        "create_batch item 1: on_conflict='debounce' needs a quiet period",
    ),
    (
        {"key": "k", "debounce": 5},
        ValueError,
        "create_batch item 1: debounce=5 is given without on_conflict",
    ),
    (
        {"key": "k", "on_conflict": "replace_queued", "debounce": 5},
        ValueError,
        "create_batch item 1: debounce=5 applies to on_conflict='debounce'",
    ),
    (
        {"key": "k", "on_conflict": "debounce", "debounce": "never"},
        ValueError,
        "create_batch item 1: ",
    ),
    ({"tags": {"9bad": 1}}, TagError, "tags of batch item 1"),
    ({"version": ["1"]}, ValueError, "create_batch item 1: version must be a string or None"),
    ({"dedup_key": "d"}, ValueError, "create_batch item 1: unknown key 'dedup_key'"),
]


@pytest.mark.parametrize(("bad", "error", "message"), BAD_ITEMS)
async def test_a_bad_item_names_its_index_and_field_and_nothing_is_stored(
    make_engine: EngineFactory, bad: dict[str, Any], error: type[Exception], message: str
) -> None:
    async with make_engine(WORKFLOWS) as engine:
        items = [{"id": "good", "key": "k", "on_conflict": "replace_queued"}, {"id": "bad", **bad}]
        with pytest.raises(error, match=re.escape(message)):
            await engine.workflow("timed").create_batch(items)
        assert await stored(engine, "timed") == {}


def test_the_sync_facade_takes_the_same_items(store_url: str) -> None:
    with SyncEngine(store_url, WORKFLOWS, worker=False) as engine:
        handles = engine.workflow(WF).create_batch(
            [
                {"id": "s1", "key": "k", "on_conflict": "debounce", "debounce": 5},
                {"id": "s2", "key": "k", "on_conflict": "debounce", "debounce": 5, "version": "1"},
            ],
            version="2",
        )
        assert [h.id for h in handles] == ["s1", "s1"]
        assert engine.workflow(WF).get("s1").id == "s1"


async def test_http_batch_items_take_the_options(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine(WORKFLOWS, clock=clock) as engine:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://s") as client:
            now = clock()
            url = f"/api/workflows/{WF}/instances/batch?version=1"
            items = [
                {"id": "h1", "key": "u", "on_conflict": "debounce", "debounce": "5 seconds"},
                {"id": "h2", "params": 2, "key": "u", "on_conflict": "debounce", "debounce": 5},
                {
                    "id": "h3",
                    "version": "2",
                    "timeout": "1 minute",
                    "tags": {"tier": 1},
                    "retention": {"errored": "2 days"},
                },
            ]
            resp = await client.post(url, json=items)
            assert resp.status_code == 201, resp.text
            assert [i["id"] for i in resp.json()["instances"]] == ["h1", "h1", "h3"]
            records = await stored(engine, WF)
            assert sorted(records) == ["h1", "h3"]
            assert (records["h1"].version, records["h1"].params) == ("1", 2)
            assert (records["h3"].version, records["h3"].deadline_at) == ("2", now + 60)
            assert (await tags(engine, WF))["h3"] == {"tier": 1}

            bad = [{"id": "ok"}, {"id": "no", "timeout": "later"}]
            refused = await client.post(url, json=bad)
            assert refused.status_code == 400, refused.text
            assert "timeout of batch item 1" in refused.json()["error"]["message"]
            wrong = await client.post(url, json=[{"id": "t", "on_conflict": 5}])
            assert wrong.status_code == 400
            assert "item 0 of the batch: 'on_conflict'" in wrong.json()["error"]["message"]
            assert sorted(await stored(engine, WF)) == ["h1", "h3"]
            spec = orjson.loads((await client.get("/api/openapi.json")).content)
            item = spec["components"]["schemas"]["BatchItem"]["properties"]
            assert {"timeout", "on_conflict", "debounce", "version", "retention"} <= set(item)
