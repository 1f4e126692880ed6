"""A retrying instance over the HTTP API: listed instances and an instance's detail carry
``retry`` (the step, its attempt that failed last, the error, when the next attempt is due),
read for a whole page at once; the OpenAPI document describes it. On each store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import jsonschema_rs
import pytest

from stepline import Engine, ManualClock, WorkflowEvent, WorkflowStep, workflow
from stepline.http import create_app

from ..conftest import EngineFactory, drain

HOUR = 3600.0


def _declined(ctx: Any) -> None:
    raise ValueError(f"card declined on attempt {ctx.attempt}")


@workflow(name="charger")
async def charger(event: WorkflowEvent, step: WorkflowStep) -> Any:
    retries = {"limit": 3, "delay": "1 hour", "backoff": "constant"}
    return await step.do("charge", {"retries": retries}, _declined)


@workflow(name="asker")
async def asker(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.wait_for_event("reply", type="reply", timeout="1 hour")


@pytest.fixture
async def served(
    make_engine: EngineFactory, clock: ManualClock
) -> AsyncIterator[tuple[Engine, httpx.AsyncClient]]:
    async with make_engine([charger, asker], clock=clock) as engine:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://stepline") as client:
            yield engine, client


def validator(doc: dict[str, Any], schema: str) -> Any:
    root = {"$ref": f"#/components/schemas/{schema}", "components": doc["components"]}
    return jsonschema_rs.Draft202012Validator(root)


async def test_listed_and_detailed_instances_carry_their_retry(
    served: tuple[Engine, httpx.AsyncClient], clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, client = served
    for n in range(3):
        await engine.workflow("charger").create(f"c{n}")
    await engine.workflow("asker").create("a1")
    await drain(engine)
    retry = {
        "step": "charge-1",
        "attempt": 1,
        "error": {"name": "ValueError", "message": "card declined on attempt 1"},
        "next_attempt_at": clock() + HOUR,
    }
    reads: list[str] = []
    for target, name in (
        (engine.store.operations, "unfinished_steps"),
        (engine.store, "get_steps"),
    ):
        real = getattr(target, name)

        async def counted(*args: Any, _name: str = name, _real: Any = real) -> Any:
            reads.append(_name)
            return await _real(*args)

        monkeypatch.setattr(target, name, counted)
    doc = (await client.get("/api/openapi.json")).json()
    page = (await client.get("/api/instances")).json()
    assert reads == ["unfinished_steps"]  # one read for the page, none per instance
    validator(doc, "InstancePage").validate(page)
    listed = {item["id"]: (item["status"], item["retry"]) for item in page["instances"]}
    assert listed == {
        "a1": ("waiting", None),
        "c2": ("waiting", retry),
        "c1": ("waiting", retry),
        "c0": ("waiting", retry),
    }
    by_workflow = (await client.get("/api/workflows/charger/instances")).json()
    assert [item["retry"] for item in by_workflow["instances"]] == [retry] * 3

    detail = (await client.get("/api/workflows/charger/instances/c1")).json()
    validator(doc, "InstanceDetail").validate(detail)
    assert detail["workflow"]["retry"] == retry
    waiting = (await client.get("/api/workflows/asker/instances/a1")).json()
    assert waiting["workflow"]["retry"] is None

    clock.advance(HOUR)
    await drain(engine)
    detail = (await client.get("/api/workflows/charger/instances/c1")).json()
    assert detail["workflow"]["retry"]["attempt"] == 2
    for schema in ("InstanceSummary", "Instance"):
        assert "retry" in doc["components"]["schemas"][schema]["required"]
