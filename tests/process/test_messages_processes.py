"""Messages across real processes, on each store (docs/messaging.md): an update whose worker is
SIGKILLed between recording it and replying still gets exactly one reply, its handler's steps
recorded once (a ledger), and so does one whose sending process's worker took the instance in
the send and was killed with it; a thousand concurrent updates to a hundred instances each get their
own reply, none lost or run twice; queries on parked instances are answered from a replay by
the workers (the client has no code), running no callback; a subscriber killed and reconnected
with its last seq reads every item once, in order."""

from __future__ import annotations

import asyncio
import collections
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from stepline import Engine, Instance

from .._procs import ROOT, WorkerPool
from ._message_flows import ledger_lines
from .test_cli import cli_env

FLOWS = "tests.process._message_flows"


@pytest.fixture
def pool(store_url: str, tmp_path: Path) -> Iterator[WorkerPool]:
    workers = WorkerPool(store_url, tmp_path, lease=2.0, workflows=FLOWS)
    try:
        yield workers
    finally:
        workers.cleanup()


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "ledger"
    path.mkdir()
    return path


async def _until(check: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def _all_waiting(client: Engine, workflow: str, count: int) -> bool:
    page = await client.list_instances(workflow, status="waiting", limit=count + 1)
    return len(page.instances) == count


async def _parked_account(client: Engine, ledger: Path) -> Instance:
    """Account ``a1``, once a worker has parked it."""
    account = await client.workflow("account").create("a1", {"ledger": str(ledger)})
    await _until(lambda: _all_waiting(client, "account", 1), "the account to park")
    return account


async def test_an_update_whose_worker_is_killed_gets_exactly_one_reply(
    store_url: str, pool: WorkerPool, ledger: Path
) -> None:
    first = pool.start()
    pool.wait_ready([first])
    async with Engine(store_url, worker=False) as client:
        account = await _parked_account(client, ledger)
        reply = asyncio.create_task(
            account.update("deposit", 5, "t1", True, update_id="u1", timeout=120)
        )

        async def settling() -> bool:
            return any(row[0] == "settle" for row in ledger_lines(ledger))

        # The handler's second step has started: its first step's record has committed.
        await _until(settling, "the handler's second step")
        pool.kill(first)
        assert not reply.done()
        (ledger / "go").touch()
        second = pool.start()
        pool.wait_ready([second])
        assert await reply == {"tag": "t1", "balance": 5}
        again = await account.update("deposit", 5, "t1", True, update_id="u1", timeout=10)
        assert again == {"tag": "t1", "balance": 5}  # the recorded reply, no second run
        rows = ledger_lines(ledger)
        assert [row for row in rows if row[0] == "record"] == [["record", "t1", str(first.pid)]]
        settles = [row[2] for row in rows if row[0] == "settle"]
        assert settles == [str(first.pid), str(second.pid)]  # the step that ran: again
        assert await account.query("balance_now", timeout=30) == 5
        update = await client.store.messages.get_update("account", "a1", "u1")
        assert update is not None and update.status == "complete"
        markers = [s for s in await account.steps() if s.kind == "update"]
        assert [(s.display_name, s.status) for s in markers] == [("@update:deposit-1", "complete")]
    pool.stop_all()


# A process with a worker of the workflow that sends an update: the send claims the instance
# for that worker, which runs the handler until the test kills the process.
_SENDER = """
import asyncio, sys
from stepline import Engine
from tests.process._message_flows import Account

async def main() -> None:
    async with Engine(sys.argv[1], [Account], lease=2.0) as engine:
        account = await engine.workflow("account").get("a1")
        await account.update("deposit", 5, "t1", True, update_id="u1", timeout=120)

asyncio.run(main())
"""


def _sender(url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _SENDER, url], cwd=ROOT, env=cli_env(),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


async def test_an_update_whose_sender_took_the_instance_and_was_killed_gets_one_reply(
    store_url: str, pool: WorkerPool, ledger: Path
) -> None:
    pool.wait_ready([pool.start()])
    async with Engine(store_url, worker=False) as client:
        account = await _parked_account(client, ledger)
        pool.stop_all()  # only the sender's worker is left to run the update
        sender = _sender(store_url)
        try:

            async def settling() -> bool:
                return any(row[0] == "settle" for row in ledger_lines(ledger))

            await _until(settling, "the handler's second step in the sender")
        finally:
            sender.kill()
            _, err = sender.communicate(timeout=30)
        rows = ledger_lines(ledger)
        settled = [row for row in rows if row[0] == "settle"]
        assert settled == [["settle", "t1", str(sender.pid)]], err
        (ledger / "go").touch()
        second = pool.start()
        pool.wait_ready([second])
        assert await account.update_result("u1", timeout=120) == {"tag": "t1", "balance": 5}
        rows = ledger_lines(ledger)
        assert [row for row in rows if row[0] == "record"] == [["record", "t1", str(sender.pid)]]
        settles = [row[2] for row in rows if row[0] == "settle"]
        assert settles == [str(sender.pid), str(second.pid)]  # the step that ran: again
    pool.stop_all()


async def test_a_thousand_concurrent_updates_to_a_hundred_instances(
    store_url: str, pool: WorkerPool, ledger: Path
) -> None:
    workers = [pool.start(), pool.start()]
    pool.wait_ready(workers)
    async with Engine(store_url, worker=False) as client:
        binding = client.workflow("account")
        items = [{"id": f"a{n}", "params": {"ledger": str(ledger)}} for n in range(100)]
        await binding.create_batch(items)
        await _until(lambda: _all_waiting(client, "account", 100), "100 parked accounts")
        handles = [Instance(client.store, "account", f"a{n}") for n in range(100)]

        async def deposit(n: int) -> Any:
            return await handles[n % 100].update(
                "deposit", n, f"t{n}", update_id=f"u{n}", timeout=600
            )

        replies = await asyncio.gather(*(deposit(n) for n in range(1000)))
        pool.check_alive()
        assert [reply["tag"] for reply in replies] == [f"t{n}" for n in range(1000)]
        for i in range(100):
            mine = [replies[n]["balance"] for n in range(i, 1000, 100)]
            total = sum(range(i, 1000, 100))
            assert len(set(mine)) == 10 and max(mine) == total, (i, mine)
        answers = await asyncio.gather(*(h.query("balance_now", timeout=60) for h in handles))
        assert answers == [sum(range(i, 1000, 100)) for i in range(100)]
        recorded = collections.Counter(row[1] for row in ledger_lines(ledger) if row[0] == "record")
        assert recorded == collections.Counter(f"t{n}" for n in range(1000))
        opened = [row for row in ledger_lines(ledger) if row[0] == "open"]
        assert len(opened) == 100  # the queries' replays ran no callback
    pool.stop_all()


def _subscriber(url: str, after: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable, "-m", "stepline.cli", "--database", url, "workflows", "instances",
            "subscribe", "importer", "i1", "--stream", "progress", "--after", str(after),
        ],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=cli_env(PYTHONUNBUFFERED="1"),
    )  # fmt: skip


def test_a_subscriber_killed_and_reconnected_reads_every_item_once(
    store_url: str, pool: WorkerPool
) -> None:
    worker = pool.start()
    pool.wait_ready([worker])

    async def create() -> None:
        async with Engine(store_url, worker=False) as client:
            await client.workflow("importer").create("i1", {"count": 300, "gap": 0.01})

    asyncio.run(create())
    seen: list[int] = []
    with _subscriber(store_url, 0) as first:
        assert first.stdout is not None
        for line in first.stdout:
            seen.append(orjson.loads(line)["seq"])
            if len(seen) == 40:
                break
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        # what it printed before it died, still in the pipe
        seen += [orjson.loads(line)["seq"] for line in first.stdout.read().splitlines()]
    assert 40 <= len(seen) < 300, "the subscriber was killed before the stream ended"
    with _subscriber(store_url, seen[-1]) as second:
        out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    seen += [orjson.loads(line)["seq"] for line in out.splitlines()]
    assert seen == list(range(1, 301))
    pool.stop_all()
