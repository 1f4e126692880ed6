"""``stepline workflows instances query|update|subscribe`` against a running ``stepline
worker`` (SQLite): a query answered here with the project's code, and by the worker for a
client without it; an update's reply, the same reply for the same --update-id; a stream
printed as JSON lines until the instance ends."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .test_cli import cli_env, ok, stepline, wait_for

pytestmark = pytest.mark.slow

FLOWS = """
import stepline
from stepline import Workflow


class Counter(Workflow):
    name = "counter"

    def __init__(self):
        self.count = 0

    async def run(self, event, step):
        for n in range(3):
            await step.publish("progress", {"n": n})
        await step.wait_for_event("stop", type="stop", timeout="1 hour")
        return self.count

    @stepline.query
    def total(self, extra=0):
        return self.count + extra

    @stepline.update
    async def add(self, step, by):
        self.count += await step.do("add", lambda: by)
        return {"count": self.count}
"""


def _project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "flows.py").write_text(FLOWS, encoding="utf-8")
    (root / "stepline.toml").write_text(
        'database = "sqlite:///messages.db"\n\n[[workflows]]\nname = "counter"\n'
        'class_name = "flows:Counter"\n\n[worker]\npoll_interval = "0.05 seconds"\n',
        encoding="utf-8",
    )
    return root


def _status(project: Path) -> str:
    return str(json.loads(ok(project, *INST, "describe", "counter", "c1", "--json"))["status"])


INST = ("workflows", "instances")


def test_query_update_and_subscribe_from_the_command_line(tmp_path: Path) -> None:
    project = _project(tmp_path / "project")
    ok(project, "db", "init")
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "stepline.cli", "worker"],
            cwd=project, stdout=out, stderr=subprocess.STDOUT, env=cli_env(),
        )  # fmt: skip
    try:
        ok(project, "workflows", "trigger", "counter", "--id", "c1")
        wait_for(lambda: _status(project) == "waiting", "the instance to wait")
        assert json.loads(ok(project, *INST, "query", "counter", "c1", "total")) == 0
        update = (*INST, "update", "counter", "c1", "add", "5", "--update-id", "u1")
        assert json.loads(ok(project, *update)) == {"count": 5}
        assert json.loads(ok(project, *update)) == {"count": 5}  # recorded: no second run
        assert json.loads(ok(project, *INST, "query", "counter", "c1", "total", "2")) == 7
        # without the project's code (another directory, the same database): the worker answers
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        database = f"sqlite:///{project / 'messages.db'}"
        routed = stepline(elsewhere, "--database", database, *INST, "query", "counter", "c1",
                          "total", "--timeout", "20 seconds")  # fmt: skip
        assert routed.returncode == 0, routed.stderr
        assert json.loads(routed.stdout) == 5
        unknown = stepline(project, *INST, "query", "counter", "c1", "nope")
        assert unknown.returncode == 2 and "has no query 'nope'" in unknown.stderr
        ok(project, *INST, "send-event", "counter", "c1", "--type", "stop")
        lines = ok(project, *INST, "subscribe", "counter", "c1", "--stream", "progress")
        items = [json.loads(line) for line in lines.splitlines()]
        assert [(item["seq"], item["value"]) for item in items] == [
            (1, {"n": 0}), (2, {"n": 1}), (3, {"n": 2})
        ]  # fmt: skip
        assert _status(project) == "complete"
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()
