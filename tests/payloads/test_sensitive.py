"""``step.do(name, {"sensitive": True}, fn)``: the workflow uses the result (on replay too),
the CLI, the HTTP API and the dashboard's data show ``[redacted]``; both stores."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from stepline import Engine, ManualClock, WorkflowEvent, WorkflowStep
from stepline import workflow as workflow_decorator
from stepline.http import create_app

from ..conftest import drain

TOKEN = "tok-SENSITIVE-VALUE"


@workflow_decorator(name="sens")
async def sens(event: WorkflowEvent, step: WorkflowStep) -> Any:
    token = await step.do("token", {"sensitive": True}, lambda: TOKEN)
    await step.sleep("nap", "1 minute")  # the token comes back from the history after it
    return await step.do("use", lambda: f"used {len(token)} chars, ends {token[-5:]}")


FLOWS = """
from stepline import workflow


@workflow(name="sens")
async def sens(event, step):
    token = await step.do("token", {"sensitive": True}, lambda: "tok-SENSITIVE-VALUE")
    return await step.do("use", lambda: len(token))
"""


async def test_the_workflow_uses_the_value_every_reader_sees_it_redacted(
    store_url: str, clock: ManualClock
) -> None:
    async with Engine(store_url, [sens], worker=False, clock=clock) as engine:
        instance = await engine.workflow("sens").create("s1")
        await drain(engine)
        clock.advance(61)
        await drain(engine)
        assert (await instance.status()).output == "used 19 chars, ends VALUE"
        steps = {s.name: s.output for s in await instance.steps(redact=True)}
        assert steps["token"] == "[redacted]"
        assert steps["use"] == "used 19 chars, ends VALUE"
        # The Python API gives the value to code that asks for it.
        assert {s.name: s.output for s in await instance.steps()}["token"] == TOKEN
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://stepline") as http:
            resp = await http.get("/api/workflows/sens/instances/s1")
            cloudflare = "/client/v4/accounts/acc/workflows/sens/instances/s1"
            cf_detail = await http.get(cloudflare)
            cf_step = await http.get(
                f"{cloudflare}/step", params={"name": "token-1", "type": "step"}
            )
        for answer in (cf_detail, cf_step):
            assert answer.status_code == 200, answer.text
            assert TOKEN not in answer.text and "[redacted]" in answer.text
        assert resp.status_code == 200
        assert TOKEN not in resp.text
        shown = {s["step"]: s["output"] for s in resp.json()["steps"]}
        assert shown["token"] == "[redacted]"


def test_the_cli_shows_it_redacted(tmp_path: Path) -> None:
    (tmp_path / "flows.py").write_text(FLOWS, encoding="utf-8")
    (tmp_path / "stepline.toml").write_text(
        '[[workflows]]\nname = "sens"\nclass_name = "flows:sens"\n', encoding="utf-8"
    )

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "stepline.cli", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    cli("run", "sens", "--id", "c1")
    for args in (
        ("workflows", "instances", "describe", "sens", "c1"),
        ("workflows", "instances", "describe", "sens", "c1", "--json"),
    ):
        out = cli(*args)
        assert "[redacted]" in out and "SENSITIVE" not in out, out


def test_sensitive_must_be_true_or_false() -> None:
    from stepline.config import parse_step_config

    assert parse_step_config({"sensitive": True}).to_json()["sensitive"] is True
    with pytest.raises(ValueError, match="sensitive"):
        parse_step_config({"sensitive": "yes"})
