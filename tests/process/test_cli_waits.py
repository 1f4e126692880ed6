"""What the CLI says a waiting instance waits for: ``instances list`` shows a retrying instance
as retrying (the step, the attempt that failed, its error) rather than only waiting, and
``describe`` names what each waiting step waits for (an event and its deadline, a sleep's end,
a retry's next attempt, a child instance); the README's tour quotes that output."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from stepline import Engine, WorkflowEvent, WorkflowStep, workflow
from stepline.cli._render import fmt_time

from ..conftest import drain
from .test_cli import cli_env, fields, stepline, wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
HOUR = 3600.0


def _declined(ctx: Any) -> None:
    raise ValueError(f"card declined on attempt {ctx.attempt}")


@workflow(name="flaky")
async def flaky(event: WorkflowEvent, step: WorkflowStep) -> Any:
    retries = {"limit": 3, "delay": "1 hour", "backoff": "constant"}
    return await step.do("charge", {"retries": retries}, _declined)


@workflow(name="sleeper")
async def sleeper(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.sleep("nap", "1 hour")


@workflow(name="asker")
async def asker(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.wait_for_event("wait reply", type="reply", timeout="1 hour")


@workflow(name="parent")
async def parent(event: WorkflowEvent, step: WorkflowStep) -> Any:
    child = await step.start_workflow("asker", id="kid-1")
    return await step.wait_for_workflow("asker", child, timeout="1 hour")


@pytest.fixture(scope="module")
def waiting(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One instance of each kind of wait, brought there in-process; the times they wait for."""
    root = tmp_path_factory.mktemp("waits")
    url = f"sqlite:///{root / 'stepline.db'}"

    async def build() -> dict[str, Any]:
        flows = [flaky, sleeper, asker, parent]
        async with Engine(url, flows, worker=False) as engine:
            for name, instance_id in (("flaky", "f1"), ("sleeper", "s1"), ("parent", "p1")):
                await engine.workflow(name).create(instance_id)
            await drain(engine)
            steps = {
                (rec.workflow, rec.id): await (
                    await engine.get_instance(rec.workflow, rec.id)
                ).steps()
                for rec in (await engine.list_instances(limit=10)).instances
            }
            return {
                f"{workflow}/{instance_id}": {s.display_name: s.wake_at for s in found}
                for (workflow, instance_id), found in steps.items()
            }

    return {"root": root, "url": url, "wakes": asyncio.run(build())}


def cli(waiting: dict[str, Any], *args: str) -> str:
    result = stepline(waiting["root"], "--database", waiting["url"], *args)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result.stdout


def test_list_shows_a_retrying_instance_with_its_failed_attempt_and_error(
    waiting: dict[str, Any],
) -> None:
    text = cli(waiting, "workflows", "instances", "list", "flaky")
    row = next(line for line in text.splitlines() if "│ f1 " in line)
    assert "🔁 Retrying charge-1: attempt 1 failed, ValueError: card declined on attempt 1" in row
    assert "⏳ Waiting" not in row
    asleep = cli(waiting, "workflows", "instances", "list", "sleeper")
    assert "⏳ Waiting" in asleep and "Retrying" not in asleep
    (listed,) = json.loads(cli(waiting, "workflows", "instances", "list", "flaky", "--json"))
    assert listed["status"] == "waiting"
    wake = waiting["wakes"]["flaky/f1"]["charge-1"]
    assert listed["retry"] == {
        "step": "charge-1",
        "attempt": 1,
        "error": {"name": "ValueError", "message": "card declined on attempt 1"},
        "next_attempt_at": wake,
    }
    (other,) = json.loads(cli(waiting, "workflows", "instances", "list", "sleeper", "--json"))
    assert other["retry"] is None


def test_describe_of_a_retrying_instance_says_which_attempt_comes_when(
    waiting: dict[str, Any],
) -> None:
    text = cli(waiting, "workflows", "instances", "describe", "flaky", "f1")
    got = fields(text)
    wake = waiting["wakes"]["flaky/f1"]["charge-1"]
    assert got["Status"] == "🔁 Retrying"
    assert got["Waiting For"] == (
        f"🔁 attempt 2 of step 'charge-1' at {fmt_time(wake)}; "
        "attempt 1 failed: ValueError: card declined on attempt 1"
    )
    described = json.loads(cli(waiting, "workflows", "instances", "describe", "flaky", "--json"))
    assert described["retry"]["attempt"] == 1 and described["retry"]["step"] == "charge-1"


def test_describe_of_a_waiting_instance_says_what_it_waits_for(waiting: dict[str, Any]) -> None:
    wakes = waiting["wakes"]
    expected = {
        ("sleeper", "s1"): f"💤 sleep 'nap-1' until {fmt_time(wakes['sleeper/s1']['nap-1'])}",
        ("asker", "kid-1"): (
            f"👀 a 'reply' event, until {fmt_time(wakes['asker/kid-1']['wait reply-1'])}"
        ),
        ("parent", "p1"): (
            f"🔗 instance 'kid-1' of workflow 'asker' to end, until "
            f"{fmt_time(wakes['parent/p1']['wait asker kid-1-1'])}"
        ),
    }
    for (name, instance_id), waits_for in expected.items():
        got = fields(cli(waiting, "workflows", "instances", "describe", name, instance_id))
        assert got["Status"] == "⏳ Waiting", name
        assert got["Waiting For"] == waits_for, name
        described = json.loads(
            cli(waiting, "workflows", "instances", "describe", name, instance_id, "--json")
        )
        assert described["retry"] is None


# -- the README's tour --------------------------------------------------------------------------

TIME = r"\d{1,2}/\d{1,2}/\d{4}, \d{1,2}:\d\d:\d\d [AP]M"


def test_the_readme_tour_quotes_what_describe_prints_of_a_waiting_instance(
    tmp_path: Path,
) -> None:
    """The tour's comment on ``describe greeting ada`` is the describe output's line (``<time>``
    standing for the time it prints), run on the example it uses."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (comment,) = re.findall(r"instances describe greeting ada +# (.*)$", readme, re.M)
    label, _, value = comment.partition(": ")
    pattern = re.escape(value).replace(re.escape("<time>"), TIME)
    examples = ROOT / "examples"
    base = ["--config", str(examples / "stepline.toml"), "--database", f"sqlite:///{tmp_path}/t.db"]
    assert stepline(tmp_path, *base, "db", "init").returncode == 0
    worker = subprocess.Popen(
        [sys.executable, "-m", "stepline.cli", *base, "worker", "greeting"],
        cwd=examples,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        trigger = [*base, "workflows", "trigger", "greeting", '{"name": "Ada"}', "--id", "ada"]
        assert stepline(tmp_path, *trigger).returncode == 0

        def described() -> str:
            result = stepline(
                tmp_path, *base, "workflows", "instances", "describe", "greeting", "ada"
            )
            return result.stdout

        wait_for(lambda: "👀 a 'reply' event" in described(), "the wait for the reply")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    got = fields(described())
    assert got["Status"] == "⏳ Waiting"
    assert re.fullmatch(pattern, got[label]), (comment, got.get(label))
    time.sleep(0)  # nothing else: the worker is stopped
