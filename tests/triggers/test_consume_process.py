"""``stepline consume`` as a process, per broker and store: 1,000 messages make exactly 1,000
instances, also when the consumer is killed with SIGKILL mid-batch and started again.

Adding a broker is adding its name to ``tests/brokers/conftest.BROKERS`` (with its
``tests/brokers/_<name>.py`` fixture module).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stepline import Engine

from ..brokers.conftest import BROKER_PARAMS, claim_idle, cleanup, kit

pytestmark = pytest.mark.slow

MESSAGES = 1000

FLOWS = """
from stepline import Workflow


class Orders(Workflow):
    name = "orders"

    async def run(self, event, step):
        return None
"""


@pytest.fixture(params=BROKER_PARAMS)
def broker_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def queue(broker_kind: str) -> AsyncIterator[str]:
    name = f"proc-{uuid.uuid4().hex[:12]}"
    yield name
    await cleanup(broker_kind, name)


@pytest.fixture
def project(tmp_path: Path, store_url: str, broker_kind: str, queue: str) -> Path:
    module = kit(broker_kind)
    (tmp_path / "flows.py").write_text(FLOWS)
    (tmp_path / "stepline.toml").write_text(
        f"""
database = "{store_url}"

[[workflows]]
name = "orders"
class_name = "flows:Orders"

[[triggers.queue]]
broker = "{module.URL}"
queue = "{queue}"
workflow = "orders"
batch_size = 20
claim_idle = {claim_idle(broker_kind)}
"""
    )
    return tmp_path


def start_consume(project: Path, command: str = "consume") -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "STEPLINE_DATABASE_URL"}
    return subprocess.Popen(
        [sys.executable, "-m", "stepline.cli", command, "--log-level", "warning"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


async def publish(broker_kind: str, queue: str) -> list[str]:
    broker = kit(broker_kind).make(queue)
    await broker.connect()
    ids = [f"msg-{n:04d}" for n in range(MESSAGES)]
    for n, message_id in enumerate(ids):
        await broker.publish(b'{"n": %d}' % n, message_id=message_id)
    await broker.close()
    return ids


async def count(engine: Engine) -> int:
    for info in await engine.list_workflows():
        if info.name == "orders":
            return sum(info.counts.values())
    return 0


async def wait_for(engine: Engine, proc: subprocess.Popen[str], low: int, high: int) -> int:
    """Poll until between ``low`` and ``high`` instances exist (the consumer must live)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        found = await count(engine)
        if low <= found <= high:
            return found
        if proc.poll() is not None:
            raise AssertionError(f"stepline consume exited: {proc.communicate()[1]}")
        await asyncio.sleep(0.02)
    raise AssertionError(f"{await count(engine)} instances, expected {low}..{high}")


async def all_ids(engine: Engine) -> set[str]:
    found: set[str] = set()
    cursor = None
    while True:
        page = await engine.list_instances("orders", limit=500, cursor=cursor)
        found.update(record.id for record in page.instances)
        if page.cursor is None:
            return found
        cursor = page.cursor


async def test_a_thousand_messages_make_a_thousand_instances(
    project: Path, store_url: str, broker_kind: str, queue: str
) -> None:
    ids = await publish(broker_kind, queue)
    proc = start_consume(project)
    async with Engine(store_url, worker=False) as engine:
        try:
            await wait_for(engine, proc, MESSAGES, MESSAGES)
        finally:
            err = stop(proc)
        assert await all_ids(engine) == set(ids)
    assert "dead-lettered" not in err


async def test_killed_mid_batch_and_restarted_still_exactly_a_thousand(
    project: Path, store_url: str, broker_kind: str, queue: str
) -> None:
    ids = await publish(broker_kind, queue)
    async with Engine(store_url, worker=False) as engine:
        first = start_consume(project)
        try:
            await wait_for(engine, first, 1, MESSAGES - 100)
        finally:
            first.send_signal(signal.SIGKILL)
            first.communicate(timeout=30)
        assert await count(engine) < MESSAGES
        second = start_consume(project)
        try:
            await wait_for(engine, second, MESSAGES, MESSAGES)
            # Messages the dead consumer held come back after claim_idle: still nothing new.
            await asyncio.sleep(claim_idle(broker_kind) * 3)
            assert await count(engine) == MESSAGES
        finally:
            stop(second)
        assert await all_ids(engine) == set(ids)


async def test_the_worker_runs_the_queue_triggers_too(
    project: Path, store_url: str, broker_kind: str, queue: str
) -> None:
    broker = kit(broker_kind).make(queue)
    await broker.connect()
    for n in range(5):
        await broker.publish(b'{"n": %d}' % n, message_id=f"w-{n}")
    await broker.close()
    proc = start_consume(project, "worker")
    async with Engine(store_url, worker=False) as engine:
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                page = await engine.list_instances("orders", status="complete", limit=10)
                if len(page.instances) == 5:
                    break
                assert proc.poll() is None, proc.communicate()[1]
                await asyncio.sleep(0.05)
        finally:
            stop(proc)
        page = await engine.list_instances("orders", status="complete", limit=10)
        assert sorted(r.id for r in page.instances) == [f"w-{n}" for n in range(5)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "no queue triggers to run"),
        (("--trigger", "nope"), "no queue trigger named 'nope'"),
    ],
)
def test_consume_refuses_a_project_without_those_triggers(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    (tmp_path / "stepline.toml").write_text('database = "sqlite:///x.db"\n')
    env = {k: v for k, v in os.environ.items() if k != "STEPLINE_DATABASE_URL"}
    done = subprocess.run(
        [sys.executable, "-m", "stepline.cli", "consume", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr


def test_consume_refuses_a_bad_trigger_table_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / "stepline.toml").write_text(
        '[[triggers.queue]]\nbroker = "redis://127.0.0.1:6379/0"\nqueue = "q"\nbatch_size = 0\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "STEPLINE_DATABASE_URL"}
    done = subprocess.run(
        [sys.executable, "-m", "stepline.cli", "consume"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "key 'triggers.queue[0].batch_size' must be a whole number" in done.stderr
