"""Flow control as users see it: creates with key, priority and dedup key over HTTP, and why a
due instance is held back, in the HTTP API and in ``instances describe``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from rich.console import Console

from stepline import Engine, Limit, ManualClock, Workflow, WorkflowEvent, WorkflowStep
from stepline.cli._render import describe_instance, describe_workflow
from stepline.held import read_held_reasons
from stepline.http import create_app

from ..conftest import EngineFactory


class _Noop(Workflow):
    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return None


class One(_Noop):
    name = "one"
    concurrency = 1


class Keyed(_Noop):
    name = "keyed"
    key_concurrency = 1


class Rated(_Noop):
    name = "rated"
    rate_limit = "1/minute"


class Shared(_Noop):
    name = "shared"
    limits = ("api",)


WORKFLOWS = [One, Keyed, Rated, Shared]


@pytest.fixture
async def engine(make_engine: EngineFactory, clock: ManualClock) -> AsyncIterator[Engine]:
    async with make_engine(WORKFLOWS, clock=clock, limits=[Limit("api", concurrency=1)]) as e:
        yield e


@pytest.fixture
async def http(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://stepline") as client:
        yield client


async def take_one(engine: Engine, workflow: str) -> None:
    """Claim one instance of ``workflow`` as a worker would, and keep it running."""
    claims = (await engine.store.claim("elsewhere", [workflow], 1, 30, engine.store.now())).claims
    assert len(claims) == 1


async def test_http_create_takes_key_priority_and_dedup_key(http: httpx.AsyncClient) -> None:
    url = "/api/workflows/one/instances"
    body = {"id": "a", "key": "customer-42", "priority": -1, "dedup_key": "order-7"}
    created = await http.post(url, json=body)
    assert created.status_code == 201, created.text
    again = await http.post(url, json={"id": "b", "dedup_key": "order-7"})
    assert again.status_code == 200
    assert again.json() == {"id": "a", "status": "queued", "duplicate": True}
    raised = await http.post(url, json={"dedup_key": "order-7", "on_duplicate": "raise"})
    assert raised.status_code == 409
    assert raised.json()["error"]["code"] == "duplicate_instance"
    assert "'a'" in raised.json()["error"]["message"]
    detail = (await http.get(f"{url}/a")).json()["workflow"]
    assert (detail["key"], detail["priority"], detail["dedup_key"]) == (
        "customer-42",
        -1,
        "order-7",
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"key": ""}, "key"),
        ({"key": 7}, "'key' must be a string"),
        ({"priority": "high"}, "'priority' must be an integer"),
        ({"priority": 2**40}, "priority"),
        ({"dedup_key": "x", "on_duplicate": "ignore"}, "on_duplicate"),
    ],
)
async def test_http_create_refuses_bad_flow_options(
    http: httpx.AsyncClient, body: dict[str, Any], message: str
) -> None:
    resp = await http.post("/api/workflows/one/instances", json=body)
    assert resp.status_code == 400, resp.text
    assert message in resp.json()["error"]["message"]


async def test_http_batch_items_take_key_and_priority_but_no_dedup_key(
    http: httpx.AsyncClient,
) -> None:
    url = "/api/workflows/keyed/instances/batch"
    ok = await http.post(url, json=[{"id": "x", "key": "k", "priority": 3}])
    assert ok.status_code == 201
    refused = await http.post(url, json=[{"dedup_key": "d"}])
    assert refused.status_code == 400
    assert "dedup_key" in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    ("workflow", "key", "reason"),
    [
        ("one", None, "concurrency 1/1"),
        ("keyed", "customer-42", "key customer-42 busy (1/1)"),
        ("rated", None, "rate limit: next start in 60 s"),
        ("shared", None, "limit api: concurrency 1/1"),
    ],
)
async def test_a_held_instance_says_which_limit_holds_it(
    engine: Engine, http: httpx.AsyncClient, workflow: str, key: str | None, reason: str
) -> None:
    binding = engine.workflow(workflow)
    await binding.create("first", key=key)
    await take_one(engine, workflow)
    held = await binding.create("second", key=key)
    record = await held.record()
    assert await read_held_reasons(engine.store, record) == [reason]
    detail = (await http.get(f"/api/workflows/{workflow}/instances/second")).json()
    assert detail["workflow"]["held"] == [reason]
    first = (await http.get(f"/api/workflows/{workflow}/instances/first")).json()
    assert first["workflow"]["held"] == []  # running: nothing holds it

    console = Console(width=120, record=True)
    console.print(describe_instance(record, [], now=engine.now(), held=[reason]))
    text = console.export_text()
    assert "Held By" in text and reason in text


async def test_a_workflows_limits_are_listed_and_described(
    engine: Engine, http: httpx.AsyncClient
) -> None:
    infos = {info.name: info for info in await engine.list_workflows()}
    assert infos["one"].limits is not None and infos["one"].limits["concurrency"] == 1
    assert infos["shared"].limits is not None and infos["shared"].limits["limits"] == ["api"]
    listed = (await http.get("/api/workflows/rated")).json()
    assert listed["limits"]["rate"] == [1, 60.0]

    console = Console(width=120, record=True)
    console.print(describe_workflow(infos["keyed"], None))
    assert "key concurrency 1" in console.export_text()
