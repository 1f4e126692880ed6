"""Seeing a deploy: the versions report (engine, HTTP API, CLI) and versions through the HTTP
API's create and restart, with bad input answered 400 naming the value and nothing stored."""

from __future__ import annotations

import httpx
import orjson
import pytest
from click.testing import CliRunner

from stepline import Engine, InstanceNotFoundError
from stepline.cli import cli
from stepline.http import create_app

from ..conftest import EngineFactory, drain
from .test_versions import OrderV1, OrderV2


async def test_the_versions_report(make_engine: EngineFactory) -> None:
    async with make_engine([OrderV1, OrderV2]) as engine:
        await engine.workflow("order").create("a", version="1")
        await engine.workflow("order").create("b")
        await engine.worker.beat_now()
        before = {v.version: v for v in await engine.workflow_versions("order")}
        assert before["1"].unfinished == {"queued": 1} and not before["1"].drained
        assert before["2"].workers == (engine.worker.id,)
        await drain(engine)
        after = {v.version: v for v in await engine.workflow_versions("order")}
        assert after["1"].drained and after["1"].finished == {"complete": 1}
        assert after["2"].to_json()["drained"] is True


async def test_the_http_api_creates_restarts_and_reports_versions(
    make_engine: EngineFactory,
) -> None:
    async with make_engine([OrderV1, OrderV2]) as engine:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://s") as client:
            base = "/api/workflows/order"
            made = await client.post(f"{base}/instances", json={"id": "a", "version": "1"})
            assert made.status_code == 201, made.text
            bad = await client.post(f"{base}/instances", json={"id": "b", "version": "8"})
            assert bad.status_code == 400 and "'8'" in bad.text
            assert (await engine.list_instances("order")).instances[0].id == "a"
            await drain(engine)
            moved = await client.patch(
                f"{base}/instances/a/status", json={"status": "restart", "version": "2"}
            )
            assert moved.status_code == 200, moved.text
            wrong = await client.patch(
                f"{base}/instances/a/status", json={"status": "pause", "version": "2"}
            )
            assert wrong.status_code == 400
            await drain(engine)
            assert (await engine.store.get_instance("order", "a")).output == "v2"
            report = (await client.get(f"{base}/versions")).json()
            assert [v["version"] for v in report["versions"]] == ["1", "2"]
            assert report["versions"][1]["finished"] == {"complete": 1}
            assert (await client.get("/api/workflows/nope/versions")).status_code == 404
            batch = await client.post(
                f"{base}/instances/batch?version=1", json=[{"id": "c"}, {"id": "d"}]
            )
            assert batch.status_code == 201, batch.text
            for made_id in ("c", "d"):
                assert (await engine.store.get_instance("order", made_id)).version == "1"
            newest = await client.post(f"{base}/instances/batch", json=[{"id": "e"}])
            assert newest.status_code == 201, newest.text
            assert (await engine.store.get_instance("order", "e")).version == "2"
            unknown = await client.post(f"{base}/instances/batch?version=8", json=[{"id": "f"}])
            assert unknown.status_code == 400 and "'8'" in unknown.text
            with pytest.raises(InstanceNotFoundError):
                await engine.store.get_instance("order", "f")


def test_the_cli_shows_the_versions(store_url: str, tmp_path: object) -> None:
    import asyncio

    async def seed() -> None:
        async with Engine(store_url, [OrderV1, OrderV2], worker=False) as engine:
            await engine.workflow("order").create("a", version="1")

    asyncio.run(seed())
    runner = CliRunner()
    result = runner.invoke(
        cli, ["--database", store_url, "workflows", "versions", "order", "--json"]
    )
    assert result.exit_code == 0, result.output
    (v1,) = orjson.loads(result.output)
    assert v1 == {"version": "1", "unfinished": {"queued": 1}, "finished": {}, "workers": [],
                  "drained": False}  # fmt: skip
    table = runner.invoke(cli, ["--database", store_url, "workflows", "versions", "order"])
    assert table.exit_code == 0 and "no live worker" in table.output
