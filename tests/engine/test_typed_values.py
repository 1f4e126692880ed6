"""Typed values through the engine, on both stores (docs/data.md): step results, params, event
payloads and outputs come back as what went in, on the first run and on every replay; declared
types (``type=``, ``-> Order``, ``@step.do``, ``WorkflowEvent[Order]``) convert what is read
back; what does not convert is an error naming the step and the type; the HTTP API shows typed
values readably."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import uuid
import zoneinfo
from pathlib import Path
from typing import Any

import httpx
import pydantic
import pytest

from stepline import Engine, InvalidPayloadError, ManualClock, WorkflowEvent, WorkflowStep
from stepline import workflow as workflow_decorator
from stepline.http import create_app
from stepline.payloads import BlobsConfig, KeySource, PayloadConfig

from ..conftest import EngineFactory, drain


class Size(enum.Enum):
    SMALL = "s"


@dataclasses.dataclass(frozen=True)
class Line:
    sku: str
    size: Size


class Order(pydantic.BaseModel):
    id: int
    at: datetime.datetime
    lines: list[Line] = []
    total: decimal.Decimal = decimal.Decimal("0")


AT = datetime.datetime(2026, 12, 7, 10, tzinfo=zoneinfo.ZoneInfo("Europe/Paris"))
ORDER = Order(id=7, at=AT, lines=[Line("a-1", Size.SMALL)], total=decimal.Decimal("12.50"))
VALUES: dict[str, Any] = {
    "at": AT,
    "day": datetime.date(2026, 12, 7),
    "wait": datetime.timedelta(hours=2),
    "cost": decimal.Decimal("12.50"),
    "ref": uuid.UUID(int=53),
    "size": Size.SMALL,
    "png": b"\x89PNG\r\n",
    "tags": {"a", "b"},
    "pair": (1, "x"),
    "line": Line("b-2", Size.SMALL),
    "order": ORDER,
    "$t": "user data with a tag key",
}

SEEN: list[Any] = []


@workflow_decorator(name="typed")
async def typed(event: WorkflowEvent, step: WorkflowStep) -> Any:
    values = await step.do("values", lambda: VALUES)
    order = await step.do("order", lambda: ORDER)
    SEEN.append((values, order))
    more = await step.wait_for_event("more", type="more", timeout="1 hour")
    return {"params": event.payload, "values": values, "event": more.payload}


async def test_typed_values_come_back_as_they_went_in(store_url: str, clock: ManualClock) -> None:
    SEEN.clear()
    async with Engine(store_url, [typed], worker=False, clock=clock) as engine:
        instance = await engine.workflow("typed").create("t", {"order": ORDER, "at": AT})
        await drain(engine)
        await instance.send_event("more", {"ids": {uuid.UUID(int=1)}})
        await drain(engine)
    # First run and replay saw the same values, of the same types.
    assert SEEN == [(VALUES, ORDER), (VALUES, ORDER)]
    for values, order in SEEN:
        assert type(order) is Order and type(values["line"]) is Line
        assert type(values["pair"]) is tuple and type(values["tags"]) is set
    # A second engine decodes everything from the database afresh.
    async with Engine(store_url, [typed], worker=False, clock=clock) as engine:
        instance = await engine.workflow("typed").get("t")
        status = await instance.status()
        assert status.status == "complete", status
        assert status.output == {
            "params": {"order": ORDER, "at": AT},
            "values": VALUES,
            "event": {"ids": {uuid.UUID(int=1)}},
        }
        steps = {s.name: s.output for s in await instance.steps()}
        assert steps["order"] == ORDER and steps["values"] == VALUES
        assert (await instance.events())[0].payload == {"ids": {uuid.UUID(int=1)}}


# -- declared types --------------------------------------------------------------------------


def order_dict() -> dict[str, Any]:
    return {"id": 8, "at": "2026-12-07T10:00:00+01:00", "lines": [{"sku": "a", "size": "s"}]}


def annotated() -> Order:
    return order_dict()  # type: ignore[return-value]  # the declared type converts it


class Typed(pydantic.BaseModel):
    name: str


@workflow_decorator(name="declared")
async def declared(event: WorkflowEvent[Order], step: WorkflowStep) -> Any:
    assert type(event.payload) is Order, event.payload
    by_type = await step.do("by type", order_dict, type=Order)
    by_annotation = await step.do("by annotation", annotated)
    listed = await step.do("listed", lambda: [order_dict()], type=list[Order])

    @step.do()
    async def decorated() -> Order:
        return order_dict()  # type: ignore[return-value]

    @step.do()
    async def uses(decorated: Order) -> str:
        return type(decorated).__name__

    result = await decorated()
    SEEN.append((by_type, by_annotation, listed, result, await uses()))
    await step.wait_for_event("go", type="go", timeout="1 hour")
    return event.payload.id


async def test_declared_types_convert_on_the_first_run_and_on_replay(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    SEEN.clear()
    async with make_engine([declared], clock=clock) as engine:
        instance = await engine.workflow("declared").create("d", order_dict())
        await drain(engine)
        await instance.send_event("go")
        await drain(engine)
        status = await instance.status()
        assert status.status == "complete" and status.output == 8, status
        # Stored as the callbacks returned them (plain JSON), converted where read.
        steps = {s.name: s.output for s in await instance.steps()}
        assert steps["by type"] == order_dict()
    assert len(SEEN) == 2 and SEEN[0] == SEEN[1]
    by_type, by_annotation, listed, result, seen_type = SEEN[0]
    expected = Order.model_validate(order_dict())
    assert by_type == by_annotation == result == expected and type(result) is Order
    assert listed == [expected] and type(listed[0]) is Order
    assert seen_type == "Order"


@workflow_decorator(name="invalid")
async def invalid(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("load", lambda: {"id": "not a number"}, type=Order)


@workflow_decorator(name="invalid-params")
async def invalid_params(event: WorkflowEvent[Order], step: WorkflowStep) -> Any:
    return await step.do("never", lambda: 1)


async def test_values_that_do_not_convert_are_errors_naming_the_step_and_the_type(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([invalid, invalid_params], clock=clock) as engine:
        bad_result = await engine.workflow("invalid").create("r")
        # Where the process has the workflow, create checks the params (nothing stored)...
        with pytest.raises(InvalidPayloadError, match=r"instance params does not read back as"):
            await engine.workflow("invalid-params").create("p", {"id": 1})
        with pytest.raises(InvalidPayloadError, match=r"params of batch item 0 .* Order"):
            await engine.workflow("invalid-params").create_batch([{"params": {"at": 1}}])
        assert (await engine.list_instances("invalid-params")).instances == []
    # ... and an instance created elsewhere (here: by an engine without the workflow) fails.
    async with make_engine([], clock=clock) as engine:
        bad_params = await engine.workflow("invalid-params").create("p", {"id": 1})
    async with make_engine([invalid, invalid_params], clock=clock) as engine:
        await drain(engine)
        bad_result = await engine.workflow("invalid").get("r")
        bad_params = await engine.workflow("invalid-params").get("p")
        status = await bad_result.status()
        assert status.status == "errored" and status.error is not None, status
        message = status.error["message"]
        assert status.error["name"] == "InvalidPayloadError", status.error
        assert "the result of step 'load'" in message and "Order" in message, message
        assert "id" in message, message  # pydantic's word on what failed
        status = await bad_params.status()
        assert status.status == "errored" and status.error is not None, status
        message = status.error["message"]
        assert "the params of instance 'p'" in message and "Order" in message, message
        assert await bad_params.steps() == []


class Opaque:
    pass


@workflow_decorator(name="unstorable")
async def unstorable(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("make", lambda: {"x": Opaque()})


async def test_an_unsupported_type_is_refused_at_the_step_naming_it(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([unstorable], clock=clock) as engine:
        instance = await engine.workflow("unstorable").create("u")
        await drain(engine)
        status = await instance.status()
        assert status.status == "errored" and status.error is not None
        message = status.error["message"]
        assert "the result of step 'make-1'" in message, message
        assert "['x']" in message and "Opaque" in message and "register_type" in message


# -- shown readably -------------------------------------------------------------------------


async def test_http_shows_typed_values_readably(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    SEEN.clear()
    async with make_engine([typed], clock=clock) as engine:
        await engine.workflow("typed").create("h", {"at": AT, "png": b"\x89PNG" + bytes(2048)})
        await drain(engine)
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://s") as http:
            detail = (await http.get("/api/workflows/typed/instances/h")).json()
            cloudflare = (
                await http.get("/client/v4/accounts/a/workflows/typed/instances/h")
            ).json()
    assert detail["workflow"]["params"] == {
        "at": "2026-12-07T10:00:00+01:00",
        "png": "<bytes 2 KiB: 89504e47…>",
    }
    steps = {s["name"]: s for s in detail["steps"]}
    assert steps["order-1"]["output"]["total"] == "12.50"
    assert steps["values-1"]["output"]["tags"] == ["a", "b"]
    assert steps["values-1"]["output"]["size"] == "s"
    assert cloudflare["success"], cloudflare
    shown = {s["name"]: s for s in cloudflare["result"]["steps"] if "name" in s}
    assert shown["order-1"]["output"]["at"] == "2026-12-07T10:00:00+01:00", shown


async def test_http_refuses_params_that_do_not_convert(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([invalid_params, declared], clock=clock) as engine:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://s") as http:
            base = "/api/workflows/invalid-params/instances"
            resp = await http.post(base, json={"id": "h", "params": {"id": "x"}})
            assert resp.status_code == 400, resp.text
            message = resp.json()["error"]["message"]
            assert "instance params does not read back as" in message and "Order" in message
            ok = await http.post(
                "/api/workflows/declared/instances", json={"id": "j", "params": order_dict()}
            )
            assert ok.status_code == 201, ok.text
        assert [r.id for r in (await engine.list_instances()).instances] == ["j"]


# -- under the payload codecs: typed values encrypted and offloaded ---------------------------


async def test_typed_values_survive_encryption_and_offload(
    store_url: str, clock: ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The payload codecs wrap the tagged text; what comes back is still typed."""
    monkeypatch.setenv("TEST_STEPLINE_TYPED_KEY", base64.b64encode(bytes(range(32))).decode())
    payloads = PayloadConfig(
        offload_over=1024,  # the params (a large bytes value) go to the blob store
        blobs=BlobsConfig(url=(tmp_path / "blobs").as_uri()),
        keys=(KeySource("k1", env="TEST_STEPLINE_TYPED_KEY"),),
        current_key="k1",
    )
    SEEN.clear()
    params = {"order": ORDER, "scan": b"\x89PNG" + bytes(4096)}
    async with Engine(store_url, [typed], worker=False, clock=clock, payloads=payloads) as engine:
        instance = await engine.workflow("typed").create("enc", params)
        await drain(engine)
        await instance.send_event("more", {"at": AT})
        await drain(engine)
    async with Engine(store_url, [typed], worker=False, clock=clock, payloads=payloads) as engine:
        instance = await engine.workflow("typed").get("enc")
        status = await instance.status()
        assert status.status == "complete", status
        assert status.output == {"params": params, "values": VALUES, "event": {"at": AT}}
        steps = {s.name: s.output for s in await instance.steps()}
        assert type(steps["order"]) is Order and steps["values"] == VALUES
    assert SEEN == [(VALUES, ORDER), (VALUES, ORDER)]
