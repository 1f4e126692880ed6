"""Schedules made at run time over HTTP on both stores: POST /api/schedules, PATCH and DELETE
/api/schedules/{name}; code-declared ones read-only (409); bad input 400 naming the value,
never a 500; a read or operate token gets 403 and nothing changes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from stepline import Engine, ManualClock
from stepline.access import Token, digest
from stepline.http import create_app

from ..conftest import EngineFactory
from .test_http_api import assert_error
from .test_http_schedules import T0, Plain, Reports

ADMIN = {"Authorization": "Bearer the-admin"}
OPERATE = {"Authorization": "Bearer the-operator"}
TOKENS = [
    Token("ops", "admin", digest("the-admin")),
    Token("op", "operate", digest("the-operator")),
]


@pytest.fixture
async def client(
    make_engine: EngineFactory, clock: ManualClock
) -> AsyncIterator[tuple[Engine, httpx.AsyncClient]]:
    clock.set(T0)
    async with make_engine([Reports, Plain], clock=clock) as engine:
        await engine.scheduler.sync()
        transport = httpx.ASGITransport(app=create_app(engine, tokens=TOKENS))
        async with httpx.AsyncClient(
            transport=transport, base_url="http://stepline", headers=ADMIN
        ) as http:
            yield engine, http


NEW = {"name": "plain-hourly", "workflow": "plain", "cron": "0 * * * *", "params": {"x": 1}}


async def test_create_update_delete(client: tuple[Engine, httpx.AsyncClient]) -> None:
    engine, http = client
    resp = await http.post("/api/schedules", json={**NEW, "timezone": "Europe/Paris"})
    assert resp.status_code == 201, resp.text
    made = resp.json()
    assert (made["name"], made["source"], made["workflow"], made["params"]) == (
        "plain-hourly", "api", "plain", {"x": 1},
    )  # fmt: skip
    assert made["next_run"] == T0 - 30 - 9 * 3600 + 10 * 3600  # 10:00 UTC
    listed = (await http.get("/api/schedules")).json()["schedules"]
    assert {(s["name"], s["source"]) for s in listed} == {
        ("plain-hourly", "api"), ("reports-5", "code"), ("reports-night", "code"),
    }  # fmt: skip
    resp = await http.patch("/api/schedules/plain-hourly", json={"cron": "30 * * * *"})
    assert resp.status_code == 200, resp.text
    assert (resp.json()["cron"], resp.json()["timezone"]) == ("30 * * * *", "Europe/Paris")
    resp = await http.delete("/api/schedules/plain-hourly")
    assert resp.status_code == 200 and resp.json()["name"] == "plain-hourly"
    assert_error(await http.get("/api/schedules/plain-hourly"), 404, "schedule_not_found")
    assert [s.name for s in await engine.schedules().list()] == ["reports-5", "reports-night"]


async def test_code_declared_schedules_answer_409(
    client: tuple[Engine, httpx.AsyncClient],
) -> None:
    _, http = client
    resp = await http.patch("/api/schedules/reports-5", json={"cron": "* * * * *"})
    assert_error(resp, 409, "schedule_read_only")
    assert "'reports-5'" in resp.json()["error"]["message"]
    assert_error(await http.delete("/api/schedules/reports-5"), 409, "schedule_read_only")
    resp = await http.post("/api/schedules", json={**NEW, "name": "reports-night"})
    assert_error(resp, 409, "schedule_exists")
    assert "'reports-night'" in resp.json()["error"]["message"]
    await http.post("/api/schedules", json=NEW)
    assert_error(await http.post("/api/schedules", json=NEW), 409, "schedule_exists")


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({**NEW, "cron": "0 * * *"}, "'0 * * *'"),
        ({**NEW, "cron": "99 * * * *"}, "'99 * * * *'"),
        ({**NEW, "cron": 5}, "5"),
        ({**NEW, "workflow": "nope"}, "'nope'"),
        ({**NEW, "workflow": 3}, "3"),
        ({**NEW, "name": "bad name"}, "'bad name'"),
        ({**NEW, "name": None}, "None"),
        ({**NEW, "timezone": "Mars/Olympus"}, "'Mars/Olympus'"),
        ({**NEW, "overlap": "sometimes"}, "'sometimes'"),
        ({**NEW, "catch_up_limit": 0}, "0"),
        ({**NEW, "catch_up_limit": "9"}, "'9'"),
        ({**NEW, "extra": 1}, "'extra'"),
        ({"workflow": "plain", "cron": "* * * * *"}, "'name'"),
        ([NEW], "JSON object"),
    ],
)
async def test_bad_creates_are_400_naming_the_value(
    client: tuple[Engine, httpx.AsyncClient], body: Any, named: str
) -> None:
    engine, http = client
    resp = await http.post("/api/schedules", json=body)
    assert_error(resp, 400, "invalid_input")
    assert named in resp.json()["error"]["message"], resp.json()
    assert len(await engine.schedules().list()) == 2


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({}, "changes nothing"),
        ({"name": "other"}, "'name'"),
        ({"cron": "bad"}, "'bad'"),
        ({"workflow": "nope"}, "'nope'"),
        ({"timezone": ""}, "''"),
    ],
)
async def test_bad_updates_are_400_and_change_nothing(
    client: tuple[Engine, httpx.AsyncClient], body: Any, named: str
) -> None:
    engine, http = client
    await http.post("/api/schedules", json=NEW)
    resp = await http.patch("/api/schedules/plain-hourly", json=body)
    assert_error(resp, 400, "invalid_input")
    assert named in resp.json()["error"]["message"], resp.json()
    assert (await engine.schedules().get("plain-hourly")).record.cron == "0 * * * *"


async def test_an_operate_token_cannot_touch_schedules(
    client: tuple[Engine, httpx.AsyncClient],
) -> None:
    engine, http = client
    await http.post("/api/schedules", json=NEW)
    for method, url in (
        ("POST", "/api/schedules"),
        ("PATCH", "/api/schedules/plain-hourly"),
        ("DELETE", "/api/schedules/plain-hourly"),
        ("POST", "/api/schedules/reports-5/pause"),
    ):
        resp = await http.request(method, url, json={"cron": "* * * * *"}, headers=OPERATE)
        assert_error(resp, 403, "forbidden")
    assert (await engine.schedules().get("plain-hourly")).record.cron == "0 * * * *"
    assert (await http.get("/api/schedules", headers=OPERATE)).status_code == 200
