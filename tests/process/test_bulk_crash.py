"""A bulk restart by filter survives a worker SIGKILLed in the middle of it: each instance is
restarted exactly once. Both stores (``store_url``).

10,000 errored instances (not the issue's 100,000: at 100,000 this test took 78 s on both
stores on the shared 2 cores, seeding and the CLI's start-ups included, and what is tested, a
batch's actions committing with the job's cursor, does not change with the count;
``python -m benchmarks bulk`` runs the 100,000). They are seeded in SQL, each with a
complete step ``prepare`` and an errored step ``charge``. The job restarts them from
``charge``; no worker runs the workflow afterwards, so a second restart of an instance would
find no step ``charge`` to restart from and count as skipped: ``done == N`` with nothing
skipped, and every instance queued with ``prepare`` alone, shows each was restarted once.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from stepline import Engine
from stepline.store.postgres import split_url
from stepline.store.sqlite import path_from_url

from .test_cli import cli_env

pytestmark = pytest.mark.slow

N = 10_000

FLOWS = """
from stepline import NonRetryableError, Workflow


class Served(Workflow):
    name = "served"

    async def run(self, event, step):
        return await step.do("only", lambda: "ran")


class Charge(Workflow):
    name = "charge"

    async def run(self, event, step):
        await step.do("prepare", lambda: 1)

        def decline():
            raise NonRetryableError("declined")

        return await step.do("charge", decline)
"""

CONFIG = """
[[workflows]]
name = "served"
class_name = "flows:Served"

[[workflows]]
name = "charge"
class_name = "flows:Charge"

[worker]
poll_interval = "50 milliseconds"
grace_period = "2 seconds"
"""

SEED = [
    """INSERT INTO instances (workflow, id, status, trigger, created_at, updated_at, started_at,
        ended_at, error, tags)
    SELECT 'charge', 'i' || n, 'errored', 'api', 1000.0 + n, 1000.0 + n, 1000.0 + n,
        1000.0 + n, '{"name": "NonRetryableError", "message": "declined"}',
        '{"customer": "c-42", "n": ' || n || '}'
    FROM numbers""",
    """INSERT INTO steps (instance_pk, name, count, seq, kind, status, output, started_at,
        ended_at)
    SELECT pk, 'prepare', 1, 1, 'do', 'complete', '1', created_at, created_at
    FROM instances WHERE workflow = 'charge'""",
    """INSERT INTO steps (instance_pk, name, count, seq, kind, status, error, started_at,
        ended_at)
    SELECT pk, 'charge', 1, 2, 'do', 'errored', error, created_at, created_at
    FROM instances WHERE workflow = 'charge'""",
]


def _sql(url: str, statements: list[str]) -> list[Any]:
    """Run ``statements`` in one transaction; the rows of the last."""
    if url.startswith("sqlite:"):
        with closing(sqlite3.connect(path_from_url(url), timeout=30)) as conn:
            rows: list[Any] = []
            for statement in statements:
                rows = conn.execute(statement).fetchall()
            conn.commit()
            return rows
    conninfo, schema = split_url(url)
    with psycopg.connect(conninfo) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        cur = None
        for statement in statements:
            cur = conn.execute(statement.encode())
        return cur.fetchall() if cur is not None and cur.description else []


def _seed(url: str) -> None:
    if url.startswith("sqlite:"):
        numbers = (
            f"WITH RECURSIVE numbers(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM numbers "
            f"WHERE n < {N}) "
        )
        # SQLite takes the CTE before the INSERT's SELECT.
        first = SEED[0].replace("SELECT 'charge'", numbers + "SELECT 'charge'")
    else:
        first = SEED[0].replace("FROM numbers", f"FROM generate_series(1, {N}) AS numbers(n)")
    _sql(url, [first, *SEED[1:]])


def _job(url: str) -> tuple[str, int, int, int]:
    ((status, done, skipped, total),) = _sql(
        url, ["SELECT status, done, skipped, total FROM bulk_jobs"]
    )
    return status, int(done), int(skipped), int(total)


class Project:
    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        self.url = url
        self.procs: list[subprocess.Popen[str]] = []

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "stepline.cli", "--database", self.url, *args],
            cwd=self.root, capture_output=True, text=True, env=cli_env(), timeout=120,
        )  # fmt: skip

    def start_worker(self, log: str) -> subprocess.Popen[str]:
        """A worker of "served" only: it runs bulk jobs, never "charge"."""
        with (self.root / log).open("w", encoding="utf-8") as handle:
            proc = subprocess.Popen(
                [sys.executable, "-m", "stepline.cli", "--database", self.url, "worker",
                 "flows.py:Served"],
                cwd=self.root, env=cli_env(), stdout=handle, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
        self.procs.append(proc)
        return proc


async def _create_database(url: str) -> None:
    async with Engine(url, worker=False):
        pass


@pytest.fixture
def project(store_url: str, tmp_path: Path) -> Iterator[Project]:
    (tmp_path / "flows.py").write_text(FLOWS)
    (tmp_path / "stepline.toml").write_text(CONFIG)
    asyncio.run(_create_database(store_url))
    made = Project(tmp_path, store_url)
    yield made
    for proc in made.procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_a_bulk_restart_survives_a_killed_worker_exactly_once(project: Project) -> None:
    url = project.url
    _seed(url)
    dry = project.run(
        "workflows", "instances", "bulk", "restart", "--where",
        "customer = 'c-42' and status = 'errored'", "--dry-run", "--json",
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["count"] == N
    started = project.run(
        "workflows", "instances", "bulk", "restart", "--where",
        "customer = 'c-42' and status = 'errored'", "--from-step", "charge", "--json",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    job = json.loads(started.stdout)
    assert (job["status"], job["total"], job["done"]) == ("running", N, 0)

    first = project.start_worker("worker1.log")
    deadline = time.monotonic() + 600
    while _job(url)[1] < N // 10:  # a tenth done: kill it in the middle of the job
        assert first.poll() is None, (project.root / "worker1.log").read_text()
        assert time.monotonic() < deadline, "the first worker made no progress"
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    status, done_at_kill, _skipped, total = _job(url)
    assert status == "running" and done_at_kill < total, "the job ended before the kill"

    second = project.start_worker("worker2.log")
    while _job(url)[0] == "running":
        assert second.poll() is None, (project.root / "worker2.log").read_text()
        assert time.monotonic() < deadline, f"the job did not finish: {_job(url)}"
        time.sleep(0.1)
    assert _job(url) == ("complete", N, 0, N)
    ((queued, one_step),) = _sql(
        url,
        [
            "SELECT count(*), sum(CASE WHEN (SELECT count(*) FROM steps s"
            " WHERE s.instance_pk = i.pk) = 1 THEN 1 ELSE 0 END)"
            " FROM instances i WHERE workflow = 'charge' AND status = 'queued'"
        ],
    )
    assert (queued, one_step) == (N, N)
    described = project.run("bulk", "describe", job["id"])
    assert f"{N} done, 0 skipped, of {N}" in described.stdout, described.stdout
