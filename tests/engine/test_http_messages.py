"""The message endpoints (docs/messaging.md, docs/http.md): queries, updates and stream
subscriptions over HTTP, with their errors; the instance detail carries the streams' latest
items."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest

import stepline
from stepline import Engine, ManualClock, Workflow, WorkflowEvent, WorkflowStep
from stepline.http import create_app

from ..conftest import EngineFactory, drain
from .test_http_api import assert_error

URL = "/api/workflows/tally/instances"


class Tally(Workflow):
    name = "tally"

    def __init__(self) -> None:
        self.count = 0

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        for n in range(3):
            await step.publish("progress", {"n": n})
        await step.wait_for_event("stop", type="stop", timeout="1 day")
        return self.count

    @stepline.query
    def count_plus(self, extra: int = 0) -> int:
        return self.count + extra

    @stepline.query
    def boom(self) -> int:
        raise ValueError("no")

    @stepline.update
    async def bump(self, step: WorkflowStep, by: int) -> int:
        self.count += await step.do("bump", lambda: by)
        return self.count

    @bump.validator
    def _small(self, by: int) -> None:
        if by > 10:
            raise ValueError("too much")


@dataclass
class Api:
    engine: Engine
    client: httpx.AsyncClient

    async def until(self, call: Any) -> httpx.Response:
        """A request that needs the worker driven while it waits."""
        task = asyncio.create_task(call)
        for _ in range(400):
            await drain(self.engine)
            if task.done():
                break
            await asyncio.sleep(0.005)
        return await task


@pytest.fixture
async def api(make_engine: EngineFactory, clock: ManualClock) -> AsyncIterator[Api]:
    async with make_engine([Tally], clock=clock, max_payload=2000) as engine:
        app = create_app(engine, max_body=8000, stream_interval=0.02)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://stepline") as client:
            await engine.workflow("tally").create(id="t")
            await drain(engine)
            yield Api(engine, client)


async def test_query_over_http(api: Api) -> None:
    resp = await api.client.get(f"{URL}/t/queries/count_plus", params={"args": "[4]"})
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"query": "count_plus", "answer": 4}
    assert (await api.client.get(f"{URL}/t/queries/count_plus")).json()["answer"] == 0
    assert_error(await api.client.get(f"{URL}/t/queries/nope"), 404, "query_not_found")
    assert_error(await api.client.get(f"{URL}/t/queries/boom"), 422, "query_failed")
    bad = await api.client.get(f"{URL}/t/queries/count_plus", params={"args": "[1, 2]"})
    assert_error(bad, 400, "invalid_input")
    assert_error(
        await api.client.get(f"{URL}/t/queries/count_plus", params={"args": "{"}),
        400,
        "invalid_input",
    )
    assert_error(
        await api.client.get(f"{URL}/t/queries/count_plus", params={"args": '{"a": 1}'}),
        400,
        "invalid_input",
    )
    assert_error(await api.client.get(f"{URL}/none/queries/count_plus"), 404, "instance_not_found")
    big = await api.client.get(f"{URL}/t/queries/count_plus", params={"args": f'["{"x" * 3000}"]'})
    assert_error(big, 413, "payload_too_large")


async def test_update_over_http(api: Api) -> None:
    post = api.client.post
    resp = await api.until(post(f"{URL}/t/updates/bump", json={"args": [2], "update_id": "u"}))
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"update": "bump", "update_id": "u", "reply": 2}
    again = await post(f"{URL}/t/updates/bump", json={"args": [2], "update_id": "u"})
    assert again.json()["reply"] == 2  # recorded: no second run
    sent = await post(f"{URL}/t/updates/bump", json={"args": [3], "wait": False})
    assert sent.status_code == 202 and sent.json()["update"] == "bump"
    assert_error(await post(f"{URL}/t/updates/nope", json={}), 404, "update_not_found")
    assert_error(await post(f"{URL}/t/updates/bump", json={"args": [1, 2]}), 400, "invalid_input")
    refused = await api.until(post(f"{URL}/t/updates/bump", json={"args": [50]}))
    assert "too much" in assert_error(refused, 422, "update_rejected")
    for body in ([1], {"args": 1}, {"other": 1}, {"wait": "yes"}, {"update_id": ""}):
        assert_error(await post(f"{URL}/t/updates/bump", json=body), 400, "invalid_input")
    assert_error(await post(f"{URL}/t/updates/bump", content=b"{"), 422, "invalid_json")
    slow = await post(f"{URL}/t/updates/bump", json={"args": [1], "timeout": 0.05})
    assert "wait again" in assert_error(slow, 504, "timeout")
    await api.engine.workflow("tally").create(id="done")
    instance = await api.engine.workflow("tally").get("done")
    await instance.terminate()
    assert_error(await post(f"{URL}/done/updates/bump", json={"args": [1]}), 409, "illegal_state")


async def _events(client: httpx.AsyncClient, url: str, **headers: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async with client.stream("GET", url, headers=headers) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        block: dict[str, Any] = {}
        async for line in resp.aiter_lines():
            if not line:
                if block:
                    events.append(block)
                    if block.get("event") == "end":
                        return events
                block = {}
                continue
            field, _, value = line.partition(": ")
            block[field] = orjson.loads(value) if field == "data" else value
    return events


async def test_subscribe_sends_each_item_with_its_seq_as_id_and_resumes(api: Api) -> None:
    instance = await api.engine.workflow("tally").get("t")
    await instance.send_event("stop")
    await drain(api.engine)
    url = f"{URL}/t/subscribe?stream=progress"
    events = await _events(api.client, url)
    assert [(e["event"], e.get("id")) for e in events] == [
        ("item", "1"), ("item", "2"), ("item", "3"), ("end", None)
    ]  # fmt: skip
    assert events[1]["data"]["value"] == {"n": 1}
    assert events[-1]["data"] == {"status": "complete"}
    resumed = await _events(api.client, url, **{"Last-Event-ID": "2"})
    assert [e.get("id") for e in resumed] == ["3", None]
    after = await _events(api.client, url + "&after=1")
    assert [e.get("id") for e in after] == ["2", "3", None]
    assert_error(await api.client.get(f"{URL}/t/subscribe"), 400, "invalid_input")
    assert_error(await api.client.get(url + "&after=-1"), 400, "invalid_input")
    assert_error(await api.client.get(f"{URL}/t/subscribe?stream=a b"), 400, "invalid_input")
    assert_error(await api.client.get(f"{URL}/x/subscribe?stream=p"), 404, "instance_not_found")


async def test_subscribe_follows_a_running_instance(api: Api) -> None:
    url = f"{URL}/t/subscribe?stream=progress&after=3"
    reader = asyncio.create_task(_events(api.client, url))
    await asyncio.sleep(0.1)
    assert not reader.done()
    instance = await api.engine.workflow("tally").get("t")
    await instance.send_event("stop")
    await drain(api.engine)
    events = await asyncio.wait_for(reader, 5)
    assert [e["event"] for e in events] == ["end"]


async def test_the_detail_shows_each_streams_latest_item(api: Api) -> None:
    detail = (await api.client.get(f"{URL}/t")).json()
    [latest] = detail["streams"]
    assert (latest["stream"], latest["seq"], latest["value"]) == ("progress", 3, {"n": 2})
