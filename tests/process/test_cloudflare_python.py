"""A Cloudflare Python Workflows project (tests/cloudflare_python/project, written against
Cloudflare's SDK) served unchanged by ``stepline worker --wrangler`` in a subprocess, on both
stores; a worker killed with SIGKILL in the middle of a run, whose successor does not run the
recorded decorated steps again; ``stepline serve --wrangler`` driven by the real ``wrangler``
CLI, which lists and describes the instances."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from stepline import Engine

from .._served import TOKEN, free_port
from .._wrangler import install_wrangler, wrangler_env

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).resolve().parents[1] / "cloudflare_python" / "project"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the project, so that its default database lands in the test's folder."""
    target = tmp_path / "project"
    shutil.copytree(PROJECT, target, ignore=shutil.ignore_patterns("__pycache__", "stepline.db*"))
    return target


class Worker:
    """``stepline worker --wrangler wrangler.jsonc`` on ``url``, its stderr in a file."""

    def __init__(self, project: Path, url: str, name: str) -> None:
        self.log = project / f"{name}.log"
        env = {**os.environ, "STEPLINE_DATABASE_URL": url, "PYTHONUNBUFFERED": "1"}
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "stepline.cli", "worker", "--wrangler", "wrangler.jsonc",
                 "--lease", "1 second"],
                cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8")

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        return self.output()


@pytest.fixture
def workers(project: Path, store_url: str) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait(timeout=30)


async def output_of(engine: Engine, workflow: str, params: Any, instance_id: str) -> Any:
    instance = await engine.workflow(workflow).create(instance_id, params)
    status = await instance.wait(timeout=60)
    assert status.status == "complete", (workflow, status)
    return status.output


async def test_the_project_runs_unchanged_under_a_wrangler_worker(
    project: Path, store_url: str, workers: list[Worker]
) -> None:
    worker = Worker(project, store_url, "worker")
    workers.append(worker)
    async with Engine(store_url, worker=False) as engine:
        deadline = time.monotonic() + 60
        while {"diamond", "approval", "fatal", "spawner"} - {
            w.name for w in await engine.list_workflows()
        }:
            assert worker.proc.poll() is None, worker.output()
            assert time.monotonic() < deadline, worker.output()
            await asyncio.sleep(0.05)
        assert await output_of(engine, "diamond", {"source": "one two"}, "d1") == {
            "words": 2, "letters": 6, "step": "summary",
        }  # fmt: skip
        assert await output_of(engine, "fatal", None, "x1") == {
            "caught": "NonRetryableError",
            "message": "workers.workflows.NonRetryableError: invalid input on attempt 1",
        }
        spawned = await output_of(engine, "spawner", {"child": "kid"}, "s1")
        assert spawned["started"] == ["kid", 1]
        approval = await engine.workflow("approval").create("a1")
        await approval.send_event("decision", {"approved": False})  # kept until the wait
        assert (await approval.wait(timeout=60)).output == {"approved": False, "type": "decision"}
        (pause, *_rest) = await approval.steps()
        assert pause.wake_at is not None and pause.started_at is not None
        assert pause.wake_at - pause.started_at == pytest.approx(1.5, abs=0.01)
        starter = (await engine.workflow("starter").get("kid")).id
        assert starter == "kid"
    output = worker.stop()
    assert worker.proc.returncode == 0, output
    assert output.count("stepline ignores these keys: observability") == 1, output


def _ledger(folder: Path) -> list[str]:
    path = folder / "ledger.txt"
    return path.read_text().splitlines() if path.exists() else []


async def test_a_sigkill_mid_run_resumes_without_rerunning_recorded_steps(
    project: Path, store_url: str, workers: list[Worker], tmp_path: Path
) -> None:
    folder = tmp_path / "ledger"
    folder.mkdir()
    first = Worker(project, store_url, "first")
    workers.append(first)
    async with Engine(store_url, worker=False) as engine:
        deadline = time.monotonic() + 60
        while "ledger" not in {w.name for w in await engine.list_workflows()}:
            assert first.proc.poll() is None and time.monotonic() < deadline, first.output()
            await asyncio.sleep(0.05)
        instance = await engine.workflow("ledger").create("l1", {"folder": str(folder)})
        while "second started" not in _ledger(folder):
            assert first.proc.poll() is None and time.monotonic() < deadline, first.output()
            await asyncio.sleep(0.02)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(timeout=30)
        recorded = [(s.name, s.status) for s in await instance.steps()]
        assert ("first", "complete") in recorded
        (folder / "go").touch()
        second = Worker(project, store_url, "second")
        workers.append(second)
        status = await instance.wait(timeout=60)
        assert status.status == "complete" and status.output == 3, second.output()
    # first ran once; second ran again (its first run was killed before it was recorded).
    assert _ledger(folder) == ["first", "second started", "second started", "second", "third"]
    second.stop()


# -- the real wrangler CLI ------------------------------------------------------------------------


def _api(root: str, path: str) -> Any:
    answer = httpx.get(f"{root}/api{path}", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_wrangler_lists_and_describes_the_instances(project: Path, tmp_path: Path) -> None:
    executable = install_wrangler()
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    env = {**os.environ, "STEPLINE_API_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1"}
    env.pop("STEPLINE_DATABASE_URL", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "stepline.cli", "serve", "--wrangler", "wrangler.jsonc",
         "--worker", "--port", str(port)],
        cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{root}/api/workflows", timeout=2)
                break
            except httpx.TransportError:
                assert server.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
        home = tmp_path / "home"
        home.mkdir()

        def wrangler(*args: str) -> str:
            done = subprocess.run(
                [str(executable), "workflows", *args],
                cwd=home, env=wrangler_env(f"{root}/client/v4", TOKEN, home, "local"),
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
            return done.stdout + done.stderr

        assert "diamond" in wrangler("list") and "LedgerWorkflow" in wrangler("list")
        out = wrangler("trigger", "diamond", '{"source": "from wrangler"}', "--id", "w1")
        assert '"w1" has been queued successfully' in out
        while _api(root, "/workflows/diamond/instances/w1")["workflow"]["status"] != "complete":
            assert time.monotonic() < deadline + 30
            time.sleep(0.05)
        listed = wrangler("instances", "list", "diamond")
        assert "w1" in listed and "Completed" in listed
        out = wrangler("instances", "describe", "diamond", "w1")
        for text in ("Status:", "✅ Completed", "Name:      fetch_source-1", "Name:      summary-1",
                     '"words":2', '"step":"summary"'):  # fmt: skip
            assert text in out, out
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)
