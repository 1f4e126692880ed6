"""The schedule routes of the HTTP API on both stores: list (by workflow), detail, pause,
resume, trigger, backfill, their errors, the instance's ``schedule`` field, and the OpenAPI
document (schemathesis, against a server whose workflows declare schedules)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.generation import GenerationMode

from stepline import Engine, ManualClock, Schedule, Workflow, WorkflowEvent, WorkflowStep
from stepline.http import create_app

from .._http_server import ServerThread
from ..conftest import EngineFactory
from .test_http_api import CHECKS, assert_error

T0 = datetime(2024, 1, 31, 9, 0, 30, tzinfo=UTC).timestamp()


class Reports(Workflow):
    name = "reports"
    schedules = (
        Schedule("*/5 * * * *", name="reports-5"),
        Schedule("0 3 * * *", name="reports-night", timezone="Europe/Paris", params={"a": 1}),
    )

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return None


class Plain(Workflow):
    name = "plain"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return None


@pytest.fixture
async def client(
    make_engine: EngineFactory, clock: ManualClock
) -> AsyncIterator[httpx.AsyncClient]:
    clock.set(T0)
    async with make_engine([Reports, Plain], clock=clock) as engine:
        await engine.scheduler.sync()
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://stepline") as http:
            yield http


async def test_list_and_get(client: httpx.AsyncClient) -> None:
    resp = await client.get("/api/schedules")
    assert resp.status_code == 200, resp.text
    rows = resp.json()["schedules"]
    assert [r["name"] for r in rows] == ["reports-5", "reports-night"]
    five = rows[0]
    assert five["workflow"] == "reports" and five["cron"] == "*/5 * * * *"
    assert five["paused"] is False and five["last_run"] is None
    assert five["next_run"] == T0 - 30 + 5 * 60
    assert (await client.get("/api/schedules?workflow=plain")).json() == {"schedules": []}
    by_workflow = await client.get("/api/schedules", params={"workflow": "reports"})
    assert len(by_workflow.json()["schedules"]) == 2
    one = await client.get("/api/schedules/reports-night")
    assert one.status_code == 200 and one.json()["params"] == {"a": 1}
    assert one.json()["timezone"] == "Europe/Paris"


async def test_pause_and_resume(client: httpx.AsyncClient) -> None:
    paused = await client.post("/api/schedules/reports-5/pause")
    assert paused.status_code == 200, paused.text
    assert paused.json()["paused"] is True and paused.json()["next_run"] is None
    assert (await client.get("/api/schedules/reports-5")).json()["paused"] is True
    resumed = await client.post("/api/schedules/reports-5/resume", json={})
    assert resumed.status_code == 200
    assert resumed.json()["paused"] is False and resumed.json()["next_run"] is not None


async def test_trigger_and_backfill(client: httpx.AsyncClient) -> None:
    now = await client.post("/api/schedules/reports-5/trigger")
    assert now.status_code == 200, now.text
    assert now.json() == {
        "schedule": "reports-5",
        "workflow": "reports",
        "id": "reports-5-20240131T0900Z",
        "status": "queued",
    }
    at = await client.post("/api/schedules/reports-5/trigger", json={"at": "2024-01-31T08:00Z"})
    assert at.json()["id"] == "reports-5-20240131T0800Z"
    again = await client.post("/api/schedules/reports-5/trigger", json={"at": T0 - 3600})
    assert again.json()["id"] == "reports-5-20240131T0800Z"
    detail = await client.get("/api/workflows/reports/instances/reports-5-20240131T0800Z")
    record = detail.json()["workflow"]
    assert record["trigger"] == "cron"
    assert record["schedule"] == {"name": "reports-5", "cron": "*/5 * * * *", "tick": T0 - 3630}
    listed = (await client.get("/api/workflows/reports/instances")).json()["instances"]
    assert {r["id"]: r["schedule"]["name"] for r in listed} == {
        "reports-5-20240131T0900Z": "reports-5",
        "reports-5-20240131T0800Z": "reports-5",
    }

    filled = await client.post(
        "/api/schedules/reports-5/backfill",
        json={"from": "2024-01-31T07:50Z", "to": "2024-01-31T08:05:00+00:00"},
    )
    assert filled.status_code == 200, filled.text
    body = filled.json()
    assert body["schedule"] == "reports-5" and body["count"] == 4
    assert (body["created"], body["existing"]) == (3, 1)  # 08:00 was triggered above
    assert [i["id"] for i in body["instances"]] == [
        f"reports-5-20240131T{hm}Z" for hm in ("0750", "0755", "0800", "0805")
    ]
    again = (
        await client.post(
            "/api/schedules/reports-5/backfill",
            json={"from": "2024-01-31T07:50Z", "to": "2024-01-31T08:05Z"},
        )
    ).json()
    assert (again["count"], again["created"], again["existing"]) == (4, 0, 4)


@pytest.mark.parametrize(
    ("path", "body", "status", "code", "text"),
    [
        ("/api/schedules/nope", None, 404, "schedule_not_found", "'nope'"),
        ("/api/schedules/nope/pause", None, 404, "schedule_not_found", "'nope'"),
        ("/api/schedules/nope/resume", None, 404, "schedule_not_found", "'nope'"),
        ("/api/schedules/nope/trigger", {}, 404, "schedule_not_found", "'nope'"),
        ("/api/schedules/nope/backfill", {"from": 0, "to": 60}, 404, "schedule_not_found", ""),
        ("/api/schedules?workflow=nope", None, 404, "workflow_not_found", "'nope'"),
        ("/api/schedules?workflow=", None, 400, "invalid_input", "empty"),
        ("/api/schedules/reports-5/trigger", {"at": "soon"}, 400, "invalid_input", "'at'"),
        ("/api/schedules/reports-5/trigger", {"at": True}, 400, "invalid_input", "'at'"),
        ("/api/schedules/reports-5/trigger", {"at": -1}, 400, "invalid_input", "out of range"),
        ("/api/schedules/reports-5/trigger", {"when": 1}, 400, "invalid_input", "'when'"),
        ("/api/schedules/reports-5/trigger", [1], 400, "invalid_input", "JSON object"),
        ("/api/schedules/reports-5/pause", {"x": 1}, 400, "invalid_input", "'x'"),
        ("/api/schedules/reports-5/backfill", {"from": 0}, 400, "invalid_input", "'to'"),
        ("/api/schedules/reports-5/backfill", {"from": 120, "to": 60}, 400, "invalid_input", ""),
        (
            "/api/schedules/reports-5/backfill",
            {"from": 0, "to": T0},
            400,
            "invalid_input",
            "more than 10000 ticks",
        ),
    ],
)
async def test_errors(
    client: httpx.AsyncClient, path: str, body: Any, status: int, code: str, text: str
) -> None:
    if body is None and not path.endswith(("pause", "resume")):
        resp = await client.get(path)
    else:
        resp = await client.post(path, json=body)
    assert text in assert_error(resp, status, code)


async def test_unparsable_body_is_422(client: httpx.AsyncClient) -> None:
    resp = await client.post("/api/schedules/reports-5/trigger", content=b"{")
    assert_error(resp, 422, "invalid_json")


# -- schemathesis, with schedules stored ---------------------------------------------------------


@pytest.fixture
def live_api(store_url: str) -> Iterator[str]:
    engine = Engine(store_url, [Reports, Plain], worker=True, poll_interval=0.05, grace_period=1)
    with ServerThread(create_app(engine, manage_engine=True)) as server:
        yield server.url


@pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies"
    ":hypothesis.errors.HypothesisDeprecationWarning"
)
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_schedule_routes_match_the_openapi_document(live_api: str, mode: GenerationMode) -> None:
    """As test_http_api's schemathesis test, on the schedule routes only, with the path
    parameter also drawn from the stored names so that the 200 answers are checked too."""
    schema = schemathesis.openapi.from_url(f"{live_api}/api/openapi.json")
    rejection = schema.config.checks.negative_data_rejection
    rejection.expected_statuses = [*rejection.expected_statuses, "413"]
    operations = schema.include(path_regex="^/api/schedules")
    strategy = operations.as_strategy(mode)

    @given(case=strategy)
    @settings(
        max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def check(case: Any) -> None:
        if case.path_parameters and mode == GenerationMode.POSITIVE:
            case.path_parameters["name"] = "reports-5"
        case.call_and_validate(base_url=live_api, checks=CHECKS)

    check()
