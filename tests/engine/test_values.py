"""Stored values read back equal to what was given, or are refused (docs/data.md).

One rule for params, step results, event payloads and outputs, through the Python API, HTTP and
the CLI, on both stores: NaN, infinities, integers beyond 64 bits and objects of unsupported
types raise :class:`InvalidPayloadError` naming where the value is and what it is; typed values
(tuples, sets, bytes, datetimes, ...: tests/engine/test_typed_values.py) read back as
themselves, on the first run as on a replay. ``event.payload`` is ``{}`` for an instance created
without params.
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from stepline import (
    Engine,
    InvalidPayloadError,
    ManualClock,
    WorkflowEvent,
    WorkflowStep,
)
from stepline import workflow as workflow_decorator
from stepline.http import create_app

from ..conftest import EngineFactory, drain

WIDE = 2**64  # one past the widest integer JSON values are stored with
EXACT: dict[str, Any] = {
    "u64 max": 2**64 - 1,
    "i64 min": -(2**63),
    "huge float": 1e308,
    "tiny float": 5e-324,
    "whole float": 3.0,
    "negative zero": -0.0,
    "nul": "a\x00b",
    "emoji": "😀 é \u2028",
    "sql": "'; DROP TABLE instances; --",
    "": "an empty key",
    "nested": [[], {}, [1, [2.5, None, True, False]]],
}


# (case id, the value, what the message must say about it)
REFUSED: list[tuple[str, Any, str]] = [
    ("nan", math.nan, "is nan"),
    ("inf", math.inf, "is inf"),
    ("-inf", -math.inf, "is -inf"),
    ("wide int", WIDE, "the integer 18446744073709551616"),
    ("wide negative int", -(2**63) - 1, "the integer -9223372036854775809"),
    ("object", object(), "of type object"),
]


WHERE = "['v'][0]"
"""Where each refused value sits in ``{"v": [value]}``, as messages name it."""


# -- the Python API: refused before anything is stored ---------------------------------------


async def test_python_api_refuses_values_that_would_change(make_engine: EngineFactory) -> None:
    async with make_engine([echo]) as engine:
        wf = engine.workflow("echo")
        waiting = await wf.create("waiting", {"ok": True})
        for case, value, found in REFUSED:
            given = {"v": [value]}
            with pytest.raises(InvalidPayloadError) as info:
                await wf.create("refused", given)
            message = str(info.value)
            assert message.startswith("instance params is not JSON-serialisable"), (case, message)
            assert WHERE in message and found in message, (case, message)
            with pytest.raises(InvalidPayloadError) as info:
                await waiting.send_event("more", given)
            message = str(info.value)
            assert "payload of event 'more'" in message, (case, message)
            assert WHERE in message and found in message, (case, message)
            with pytest.raises(InvalidPayloadError, match="batch item 1"):
                await wf.create_batch([{"id": "b0"}, {"id": "b1", "params": given}])
        # Nothing was stored: one instance (the first), no event, no batch item.
        page = await engine.list_instances("echo")
        assert [r.id for r in page.instances] == ["waiting"]
        assert await waiting.events() == []


# -- step results and outputs: the instance ends errored, naming the step ----------------------

BAD_RESULTS: dict[str, Any] = {case: value for case, value, _ in REFUSED}


@workflow_decorator(name="returns")
async def returns(event: WorkflowEvent, step: WorkflowStep) -> Any:
    value = BAD_RESULTS[event.payload["case"]]
    if event.payload["where"] == "step":
        await step.do("value", lambda: {"v": [value]})
        return "unreachable"
    await step.do("fine", lambda: 1)
    return {"v": [value]}


async def test_step_results_and_outputs_are_refused(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([returns], clock=clock) as engine:
        wf = engine.workflow("returns")
        for index, (case, _, _) in enumerate(REFUSED):
            for where in ("step", "output"):
                await wf.create(f"{where}-{index}", {"case": case, "where": where})
        await drain(engine)
        for index, (case, _, found) in enumerate(REFUSED):
            step_instance = await wf.get(f"step-{index}")
            status = await step_instance.status()
            assert status.status == "errored", (case, status)
            assert status.error is not None and status.error["name"] == "InvalidPayloadError"
            message = status.error["message"]
            assert "the result of step 'value-1'" in message, (case, message)
            assert WHERE in message and found in message, (case, message)
            (record,) = await step_instance.steps()
            assert record.status == "errored" and len(record.attempts) == 1, (case, record)

            status = await (await wf.get(f"output-{index}")).status()
            assert status.status == "errored", (case, status)
            assert status.error is not None and status.error["name"] == "InvalidPayloadError"
            message = status.error["message"]
            assert "the output of run()" in message, (case, message)
            assert WHERE in message and found in message, (case, message)


# -- what is accepted reads back equal, on both stores ------------------------------------------

SEEN: list[Any] = []


@workflow_decorator(name="echo")
async def echo(event: WorkflowEvent, step: WorkflowStep) -> Any:
    result = await step.do("echo", lambda: event.payload)
    pair = await step.do("pair", lambda: (1, (2.5, "x")))
    SEEN.append(pair)
    more = await step.wait_for_event("more", type="more", timeout="1 hour")
    return {"params": event.payload, "step": result, "event": more.payload}


async def test_accepted_values_read_back_equal(store_url: str, clock: ManualClock) -> None:
    SEEN.clear()
    async with Engine(store_url, [echo], worker=False, clock=clock) as engine:
        instance = await engine.workflow("echo").create("exact", EXACT)
        await drain(engine)
        await instance.send_event("more", EXACT)
        await drain(engine)
    # A second engine decodes everything from the database afresh.
    async with Engine(store_url, [echo], worker=False, clock=clock) as engine:
        instance = await engine.workflow("echo").get("exact")
        status = await instance.status()
        assert status.status == "complete", status
        assert status.output == {"params": EXACT, "step": EXACT, "event": EXACT}
        assert (await instance.record()).params == EXACT
        steps = {s.name: s.output for s in await instance.steps()}
        assert steps["echo"] == EXACT
        # A tuple reads back as a tuple, on the first run as on replay.
        assert steps["pair"] == (1, (2.5, "x"))
    assert SEEN == [(1, (2.5, "x")), (1, (2.5, "x"))]


# -- event.payload without params ---------------------------------------------------------------


@workflow_decorator(name="greet")
async def greet(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("who", lambda: event.payload.get("name", "world"))


@workflow_decorator(name="shape")
async def shape(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("shape", lambda: event.payload)


async def test_event_payload_is_an_empty_dict_without_params(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([greet, shape], clock=clock) as engine:
        wf = engine.workflow("greet")
        await wf.create("none")
        await wf.create("explicit-none", None)
        await wf.create("named", {"name": "Ada"})
        await engine.workflow("shape").create("list", [])
        await engine.workflow("shape").create("zero", 0)
        await drain(engine)
        for instance_id in ("none", "explicit-none"):
            instance = await wf.get(instance_id)
            assert (await instance.status()).output == "world"
            assert (await instance.record()).params is None  # shown as "no params"
        assert (await (await wf.get("named")).status()).output == "Ada"
        # Params that were given, even falsy ones, stay as given.
        shapes = engine.workflow("shape")
        assert (await (await shapes.get("list")).status()).output == []
        assert (await (await shapes.get("zero")).status()).output == 0


# -- HTTP: the same rule, and integers past 64 bits refused as they are parsed ------------------


@dataclasses.dataclass
class Api:
    engine: Engine
    http: httpx.AsyncClient


@pytest.fixture
async def api(make_engine: EngineFactory, clock: ManualClock) -> AsyncIterator[Api]:
    async with make_engine([greet, echo], clock=clock) as engine:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://stepline") as http:
            yield Api(engine, http)


def _error(resp: httpx.Response, status: int, code: str) -> str:
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert error["code"] == code, error
    return str(error["message"])


async def test_http_refuses_integers_past_64_bits(api: Api) -> None:
    client = api.http
    base = "/api/workflows/echo/instances"
    wide = b'{"id": "w", "params": {"order": {"n": 18446744073709551616}}}'
    message = _error(await client.post(base, content=wide), 400, "invalid_input")
    assert "the request body" in message and "['params']['order']['n']" in message, message
    assert "18446744073709551616" in message, message
    batch = b'[{"id": "b", "params": [1, -9223372036854775809]}]'
    message = _error(await client.post(f"{base}/batch", content=batch), 400, "invalid_input")
    assert "[0]['params'][1]" in message and "-9223372036854775809" in message, message
    for literal in (b"NaN", b"Infinity", b"1e400"):  # not JSON, or not a finite number
        body = b'{"params": {"x": ' + literal + b"}}"
        _error(await client.post(base, content=body), 422, "invalid_json")

    exact = b'{"id": "e", "params": {"max": 18446744073709551615, "min": -9223372036854775808}}'
    assert (await client.post(base, content=exact)).status_code == 201
    event = f"{base}/e/events/more"
    message = _error(await client.post(event, content=b'{"n": 1e0, "m": 2' + b"0" * 30 + b"}"),
                     400, "invalid_input")  # fmt: skip
    assert "['m']" in message, message
    resp = await client.get(f"{base}/e")
    assert resp.json()["workflow"]["params"] == {"max": 2**64 - 1, "min": -(2**63)}
    engine = api.engine
    assert [r.id for r in (await engine.list_instances("echo")).instances] == ["e"]
    assert await (await engine.workflow("echo").get("e")).events() == []


async def test_http_null_params_are_no_params(api: Api) -> None:
    client = api.http
    base = "/api/workflows/greet/instances"
    assert (await client.post(base, json={"id": "null", "params": None})).status_code == 201
    assert (await client.post(base)).status_code == 201  # no body at all
    await drain(api.engine)
    detail = (await client.get(f"{base}/null")).json()
    assert detail["workflow"]["params"] is None
    assert detail["workflow"]["output"] == "world"


# -- CLI: exit 2 with one line, and exact values through the argument, a file and stdin ----------

FLOWS = """
from stepline import workflow


@workflow(name="greet")
async def greet(event, step):
    return await step.do("who", lambda: event.payload.get("name", "world"))
"""


def _cli(
    root: Path, url: str, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stepline.cli", "--database", url, *args],
        cwd=root,
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
    )


async def test_cli_refuses_integers_past_64_bits(
    store_url: str, tmp_path: Path, clock: ManualClock
) -> None:
    (tmp_path / "flows.py").write_text(FLOWS, encoding="utf-8")
    (tmp_path / "stepline.toml").write_text(
        '[[workflows]]\nname = "greet"\nclass_name = "flows:greet"\n', encoding="utf-8"
    )
    (tmp_path / "wide.json").write_text('{"deep": [18446744073709551616]}', encoding="utf-8")
    async with Engine(store_url, [greet], worker=False, clock=clock) as engine:
        await engine.workflow("greet").create("target", {"name": "Ada"})
    wide = '{"n": 18446744073709551616}'
    commands: list[tuple[list[str], str | None, str]] = [
        (["workflows", "trigger", "greet", wide, "--id", "a"], None, "PARAMS_JSON"),
        (["workflows", "trigger", "greet", "--params-file", "wide.json"], None, "['deep'][0]"),
        (["workflows", "trigger", "greet", "--params-file", "-"], wide, "--params-file <stdin>"),
        (
            ["workflows", "instances", "send-event", "greet", "target", "--type", "t",
             "--payload", wide],
            None,
            "--payload",
        ),
        (["workflows", "trigger", "greet", '{"n": 18446744073709551615}', "--id", "max"], None, ""),
        (["workflows", "trigger", "greet", "null", "--id", "null"], None, ""),
    ]  # fmt: skip
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda c: _cli(tmp_path, store_url, *c[0], stdin=c[1]), commands))
    for (args, _, named), result in zip(commands, results, strict=True):
        if not named:
            assert result.returncode == 0, (args, result.stderr)
            continue
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        assert named in lines[0] and "outside the 64-bit range" in lines[0], lines[0]
    async with Engine(store_url, [greet], worker=False, clock=clock) as engine:
        wf = engine.workflow("greet")
        ids = sorted(r.id for r in (await engine.list_instances("greet")).instances)
        assert ids == ["max", "null", "target"]
        assert (await (await wf.get("max")).record()).params == {"n": 2**64 - 1}
        assert (await (await wf.get("null")).record()).params is None
        assert await (await wf.get("target")).events() == []
        await drain(engine)
        assert (await (await wf.get("null")).status()).output == "world"
