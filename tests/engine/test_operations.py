"""Tags, filters and bulk actions on a real Engine (both stores): tags at creation and from
``step.tag``, filtered lists and counts from the binding and the engine, the plain ranges, bad
filters, bulk jobs run by the worker's side job; and the same through the HTTP API, where bad
input answers 400 naming the column, never a 500 nor SQL."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest
from click.testing import CliRunner

from stepline import Engine, ManualClock, WorkflowEvent, WorkflowStep, workflow
from stepline.cli import cli
from stepline.http import create_app
from stepline.operations.language import FilterError, TagError
from stepline.operations.runner import BulkRunner
from stepline.store.operations import BulkJobNotFoundError

from ..conftest import EngineFactory, drain


@workflow(name="charge")
async def charge(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.tag("region", "eu")
    await step.do("prepare", lambda: 1)
    return await step.do("charge", lambda: event.params or 0)


async def _seed(engine: Engine, clock: ManualClock) -> None:
    binding = engine.workflow("charge")
    await binding.create("a", tags={"customer": "c-42", "campaign": "spring"})
    clock.advance(60)
    await binding.create("b", tags={"customer": "c-42", "tier": 2})
    clock.advance(60)
    await binding.create_batch([{"id": "c", "tags": {"customer": "c-7", "vip": True}}])


async def test_tags_filters_and_ranges(make_engine: EngineFactory, clock: ManualClock):
    async with make_engine([charge], clock=clock) as engine:
        await _seed(engine, clock)
        binding = engine.workflow("charge")
        page = await binding.list(where="customer = 'c-42'")
        assert [r.id for r in page.instances] == ["b", "a"]
        assert page.instances[1].tags == {"customer": "c-42", "campaign": "spring"}
        assert await binding.count("customer = 'c-42'") == 2
        assert await engine.count_instances("vip = true") == 1
        start = engine.now()
        assert [r.id for r in (await binding.list(created_after=start - 60)).instances] == [
            "c",
            "b",
        ]
        assert [r.id for r in (await binding.list(created_before=start - 60)).instances] == ["a"]
        await drain(engine)
        found = await engine.list_instances(
            where="region = 'eu' and status = 'complete'", ended_after=start
        )
        assert {r.id for r in found.instances} == {"a", "b", "c"}
        assert (await binding.list(status="queued", where="exists region")).instances == []


async def test_bad_filters_and_tags_say_where(make_engine: EngineFactory, clock: ManualClock):
    async with make_engine([charge], clock=clock) as engine:
        binding = engine.workflow("charge")
        with pytest.raises(FilterError, match="column 1: unknown column 'stauts'") as bad:
            await binding.list(where="stauts = 'errored'")
        assert bad.value.position == 0
        with pytest.raises(FilterError, match="column 10: unknown status 'eroored'"):
            await binding.list(where="status = 'eroored'")
        with pytest.raises(FilterError, match="column 11: column 'created' is a time"):
            await engine.count_instances("created > 'yesterday'")
        with pytest.raises(ValueError, match="created_after"):
            await binding.list(created_after="soon")
        with pytest.raises(TagError, match="at most 20"):
            await binding.create("x", tags={f"k{n}": n for n in range(21)})
        with pytest.raises(TagError, match="invalid tag key"):
            await binding.create("x", tags={"no spaces": 1})
        with pytest.raises(TagError, match="a value is text, a number or a boolean"):
            await binding.create("x", tags={"k": [1]})
        assert await engine.count_instances() == 0  # nothing was created


async def test_bulk_jobs_through_the_engine(make_engine: EngineFactory, clock: ManualClock):
    async with make_engine([charge], clock=clock) as engine:
        await _seed(engine, clock)
        await drain(engine)
        dry = await engine.bulk.dry_run("restart", "customer = 'c-42'")
        assert (dry.count, [r.id for r in dry.first]) == (2, ["a", "b"])
        job = await engine.bulk.start("restart", "customer = 'c-42'", from_step="charge")
        assert (job.status, job.total) == ("running", 2)
        assert await BulkRunner(engine.store, batch=1).run_once()
        assert (await engine.bulk.get(job.id)).done == 1
        while await BulkRunner(engine.store).run_once():
            pass
        done = await engine.bulk.get(job.id)
        assert (done.status, done.done, done.skipped) == ("complete", 2, 0)
        steps = [s.name for s in await (await binding_get(engine, "a")).steps()]
        assert steps == ["prepare"]
        assert [j.id for j in await engine.bulk.list()] == [job.id]
        with pytest.raises(ValueError, match="needs a filter"):
            await engine.bulk.start("terminate", "")
        with pytest.raises(ValueError, match="restart action only"):
            await engine.bulk.start("pause", "id = 'a'", from_step="x")
        with pytest.raises(ValueError, match="unknown bulk action"):
            await engine.bulk.start("explode", "id = 'a'")  # type: ignore[arg-type]
        with pytest.raises(BulkJobNotFoundError):
            await engine.bulk.cancel("nope")
        by = await engine.bulk.start("pause", "id = 'a'", started_by="ops (cli)")
        assert (by.started_by, job.started_by) == ("ops (cli)", None)
        assert (await engine.bulk.get(by.id)).to_json()["started_by"] == "ops (cli)"
        for bad in ("", "x" * 201, "nul\x00"):
            with pytest.raises(ValueError, match="started_by must be"):
                await engine.bulk.start("pause", "id = 'a'", started_by=bad)


async def binding_get(engine: Engine, instance_id: str) -> Any:
    return await engine.workflow("charge").get(instance_id)


# -- HTTP -------------------------------------------------------------------------------------

BAD_FILTERS = [
    ("stauts = 'errored'", "column 1", "stauts"),
    ("status = 'nope'", "column 10", "status"),
    ("created >= 'not a time'", "column 12", "created"),
    ("priority = 'high'", "column 12", "priority"),
    ("customer = 'c-42' or", "column 21", "column name"),
    ("customer = 'x'; DROP TABLE instances; --", "column 15", ";"),
    ("customer = 'x' union select * from instances", "column 29", "'*'"),
    ("id = 'a' OR 1=1", "column 13", "column name"),
    ('"unclosed', "column 1", "not closed"),
    ("a.b.c = 1", "column 4", "'.'"),
    ("x = '\x00'", "column 6", "not allowed"),
]


@pytest.mark.parametrize(("where", "column", "names"), BAD_FILTERS)
async def test_bad_filters_answer_400_naming_the_column(
    make_engine: EngineFactory, clock: ManualClock, where: str, column: str, names: str
):
    async with make_engine([charge], clock=clock) as engine:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            for url, params in (
                ("/api/instances", {"where": where}),
                ("/api/workflows/charge/instances", {"where": where}),
                ("/api/instances/count", {"where": where}),
            ):
                resp = await client.get(url, params=params)
                assert resp.status_code == 400, (url, resp.text)
                message = resp.json()["error"]["message"]
                assert column in message and names in message, message
                assert "SELECT" not in message and "instance_tags" not in message
            resp = await client.post("/api/bulk", json={"action": "terminate", "where": where})
            assert resp.status_code == 400 and column in resp.text


async def test_tags_and_bulk_over_http(make_engine: EngineFactory, clock: ManualClock):
    async with make_engine([charge], clock=clock) as engine:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            base = "/api/workflows/charge/instances"
            resp = await client.post(base, json={"id": "h1", "tags": {"campaign": "spring"}})
            assert resp.status_code == 201, resp.text
            resp = await client.post(base + "/batch", json=[{"id": "h2", "tags": {"n": 1}}])
            assert resp.status_code == 201, resp.text
            bad = await client.post(base, json={"id": "h3", "tags": {"k": "\x00"}})
            assert bad.status_code == 400
            detail = (await client.get(base + "/h1")).json()
            assert detail["workflow"]["tags"] == {"campaign": "spring"}
            listed = await client.get(base, params={"where": "campaign = 'spring'"})
            assert [i["id"] for i in listed.json()["instances"]] == ["h1"]
            assert listed.json()["instances"][0]["tags"] == {"campaign": "spring"}
            count = await client.get("/api/instances/count", params={"where": "n >= 1"})
            assert count.json() == {"count": 1}
            dry = await client.post(
                "/api/bulk",
                json={"action": "terminate", "where": "exists campaign", "dry_run": True},
            )
            assert dry.status_code == 200 and dry.json()["count"] == 1
            started = await client.post(
                "/api/bulk", json={"action": "terminate", "where": "exists campaign"}
            )
            assert started.status_code == 201
            job_id = started.json()["id"]
            await BulkRunner(engine.store).run_once()
            job = (await client.get(f"/api/bulk/{job_id}")).json()
            assert (job["status"], job["done"]) == ("complete", 1)
            assert job["started_by"] is None  # the API is open: nobody to name
            assert (await client.get("/api/bulk")).json()["jobs"][0]["id"] == job_id
            assert (await client.post(f"/api/bulk/{job_id}/cancel")).json()["status"] == "complete"
            for url in ("/api/bulk/a%00b", "/api/instances/count?workflow=a%00b"):
                assert (await client.get(url)).status_code in (400, 404), url
            nul = {"action": "restart", "where": "id = 'x'", "from_step": "a\x00"}
            assert (await client.post("/api/bulk", json=nul)).status_code == 400
            missing = await client.get("/api/bulk/nope")
            assert (missing.status_code, missing.json()["error"]["code"]) == (
                404,
                "bulk_job_not_found",
            )
            for body in ({"action": "x"}, {"action": "pause", "extra": 1}, [], {"action": "pause"}):
                resp = await client.post("/api/bulk", json=body)
                assert resp.status_code == 400, (body, resp.text)


def test_the_cli_names_who_started_a_job(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def seed() -> None:
        async with Engine(store_url, [charge], worker=False) as engine:
            await engine.workflow("charge").create("a")

    asyncio.run(seed())
    monkeypatch.setattr("getpass.getuser", lambda: "alice")
    runner = CliRunner()
    base = ["--database", store_url]
    started = runner.invoke(
        cli, [*base, "workflows", "instances", "bulk", "pause", "--where", "id = 'a'", "--json"]
    )
    assert started.exit_code == 0, started.output
    job = orjson.loads(started.output)
    assert job["started_by"] == "alice (cli)"
    described = runner.invoke(cli, [*base, "bulk", "describe", job["id"]])
    assert "Started by: alice (cli)" in described.output, described.output
    listed = runner.invoke(cli, [*base, "bulk", "list"], env={"COLUMNS": "200"})
    assert "alice (cli)" in listed.output, listed.output


def test_a_dry_run_says_how_many_match_in_words_that_fit_the_count(store_url: str) -> None:
    async def seed() -> None:
        async with Engine(store_url, [charge], worker=False) as engine:
            for id in ("a", "b"):
                await engine.workflow("charge").create(id)

    asyncio.run(seed())
    runner = CliRunner()
    bulk = ["--database", store_url, "workflows", "instances", "bulk", "terminate", "--dry-run"]
    said = {
        where: runner.invoke(cli, [*bulk, "--where", where], env={"COLUMNS": "200"}).output
        for where in ("id = 'zz'", "id = 'a'", "exists id or id != ''")
    }
    assert said["id = 'zz'"].splitlines() == ["No instance matches: terminate would act on none"]
    assert said["id = 'a'"].splitlines()[0] == "1 instance matches: terminate would act on it"
    assert said["exists id or id != ''"].splitlines()[0] == (
        "2 instances match: terminate would act on them"
    )
