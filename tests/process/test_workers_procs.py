"""Worker liveness across processes: a real ``stepline worker`` shows in ``stepline workers
list --json``; after SIGKILL it shows dead, instances of its workflow are flagged in describe,
and its row expires at the next heartbeat of another worker; a worker stopped by SIGTERM
deregisters. Heartbeats every 0.2 s, so this takes seconds. Both stores (``store_url``).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stepline import Engine
from stepline.records import WORKER_EXPIRE_BEATS, WORKER_LIVE_BEATS

from .test_cli import cli_env

pytestmark = pytest.mark.slow

HEARTBEAT = 0.2

FLOWS = """
from stepline import Workflow


class Served(Workflow):
    name = "served"

    async def run(self, event, step):
        return await step.do("only", lambda: "ran")


class Orphan(Workflow):
    name = "orphan"

    async def run(self, event, step):
        return await step.do("only", lambda: "ran")
"""

CONFIG = f"""
[[workflows]]
name = "served"
class_name = "flows:Served"

[[workflows]]
name = "orphan"
class_name = "flows:Orphan"

[worker]
heartbeat = "{HEARTBEAT} seconds"
poll_interval = "50 milliseconds"
grace_period = "2 seconds"
"""


class Project:
    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        self.url = url
        self.procs: list[subprocess.Popen[str]] = []

    def command(self) -> list[str]:
        return [sys.executable, "-m", "stepline.cli", "--database", self.url]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.command(), *args],
            cwd=self.root,
            capture_output=True,
            text=True,
            env=cli_env(),
            timeout=60,
        )

    def json(self, *args: str) -> Any:
        result = self.run(*args, "--json")
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return json.loads(result.stdout)

    def start_worker(self, log: str) -> subprocess.Popen[str]:
        """``stepline worker flows.py:Served``: it runs "served" only, not "orphan"."""
        with (self.root / log).open("w", encoding="utf-8") as handle:
            proc = subprocess.Popen(
                [*self.command(), "worker", "flows.py:Served"],
                cwd=self.root,
                env=cli_env(),
                stdout=handle,
                stderr=subprocess.STDOUT,
                text=True,
            )
        self.procs.append(proc)
        return proc

    def workers(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.json("workers", "list")
        return rows

    def describe(self, workflow: str, instance_id: str) -> dict[str, Any]:
        data: dict[str, Any] = self.json(
            "workflows", "instances", "describe", workflow, instance_id
        )
        return data


async def _create_database(url: str) -> None:
    async with Engine(url, worker=False):
        pass  # opening creates and migrates the database


@pytest.fixture
def project(store_url: str, tmp_path: Path) -> Iterator[Project]:
    (tmp_path / "flows.py").write_text(FLOWS)
    (tmp_path / "stepline.toml").write_text(CONFIG)
    made = Project(tmp_path, store_url)
    asyncio.run(_create_database(store_url))
    queued = made.run("workflows", "trigger", "orphan", "--id", "o1")
    assert queued.returncode == 0, queued.stderr
    yield made
    for proc in made.procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def wait_for(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def row_of(rows: list[dict[str, Any]], pid: int) -> dict[str, Any] | None:
    return next((row for row in rows if row["pid"] == pid), None)


def test_a_killed_worker_shows_dead_then_expires(project: Project) -> None:
    first = project.start_worker("worker1.log")
    row = wait_for(lambda: row_of(project.workers(), first.pid), "the worker to register")
    assert row["live"] is True
    assert row["workflows"] == ["served"]
    assert row["heartbeat"] == HEARTBEAT

    # "orphan" is queued and no worker runs it; "served" runs.
    assert project.describe("orphan", "o1")["warning"] == "no live worker serves 'orphan'"
    described = project.run("workflows", "instances", "describe", "orphan", "o1")
    assert "⚠ no live worker serves 'orphan'" in described.stdout
    triggered = project.run("workflows", "trigger", "served", "--id", "s1")
    assert triggered.returncode == 0, triggered.stderr
    done = wait_for(
        lambda: (d := project.describe("served", "s1"))["status"] == "complete" and d,
        "s1 to complete",
    )
    assert done["warning"] is None

    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    killed_at = time.monotonic()
    dead = wait_for(
        lambda: (r := row_of(project.workers(), first.pid)) is not None and not r["live"] and r,
        "the killed worker to show dead",
    )
    assert dead["id"] == row["id"]
    # It cannot look dead before its live window is over.
    assert time.monotonic() - killed_at >= HEARTBEAT * (WORKER_LIVE_BEATS - 1)
    assert project.run("workflows", "trigger", "served", "--id", "s2").returncode == 0
    assert project.describe("served", "s2")["warning"] == "no live worker serves 'served'"

    # A second worker's heartbeats delete the dead row once it is old enough, and run s2.
    second = project.start_worker("worker2.log")
    wait_for(
        lambda: (d := project.describe("served", "s2"))["status"] == "complete" and d,
        "the second worker to run s2",
    )
    rows = wait_for(
        lambda: (r := project.workers()) and row_of(r, first.pid) is None and r,
        "the dead worker's row to expire",
        timeout=WORKER_EXPIRE_BEATS * HEARTBEAT + 30,
    )
    assert [(r["pid"], r["live"]) for r in rows] == [(second.pid, True)]

    # A graceful stop deregisters.
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=30) == 0, (project.root / "worker2.log").read_text()
    assert project.workers() == []
    assert project.describe("served", "s2")["warning"] is None  # complete: needs no worker
