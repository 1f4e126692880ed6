"""A rolling deploy, in processes, on each store: 1,000 instances of version 1 sleep under two
old workers; a deploy starts two new workers (version 1 patched, and version 2) beside them and
creates version 2 instances; the old workers are stopped one by one. Every version 1 instance
completes on the old path or the patched path as its history dictates, every version 2
instance on version 2, none errored, and the ledger of activations shows that no process ever
ran an instance of a version it does not serve."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from stepline import Engine

from .._procs import WorkerPool, WorkerProc
from ..flow.test_fleet import records_of
from ._deploy_flows import NAME, V2, OldV1, PatchedV1

pytestmark = pytest.mark.slow

V1_COUNT = 1000
V2_COUNT = 300


async def wait_counts(
    client: Engine,
    pools: list[WorkerPool],
    done: Callable[[dict[str, int]], bool],
    what: str,
    timeout: float,
    workflow: str = NAME,
) -> None:
    """Wait until ``done`` holds for the counts of ``workflow``'s instances by status, checking
    meanwhile that no worker of ``pools`` died."""
    deadline = time.monotonic() + timeout
    while True:
        for pool in pools:
            pool.check_alive()
        listed = {info.name: info.counts for info in await client.list_workflows()}
        counts = listed.get(workflow, {})
        if done(counts):
            return
        if time.monotonic() > deadline:
            reports = "\n".join(pool.report() for pool in pools)
            raise AssertionError(f"{what}: not after {timeout} s: {counts}\n{reports}")
        await asyncio.sleep(0.2)


def stop(worker: WorkerProc) -> None:
    """Stop one worker gracefully (SIGTERM); it must exit 0."""
    worker.killed_at = time.time()  # stopped on purpose: check_alive leaves it be
    worker.proc.send_signal(signal.SIGTERM)
    try:
        code = worker.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"worker {worker.pid} did not stop within 30 s") from None
    assert code == 0, f"worker {worker.pid} exited with {code}"


async def test_a_rolling_deploy_runs_every_instance_on_its_own_code(
    store_url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old_pool = WorkerPool(store_url, tmp_path / "old", lease=10, concurrency=200,
                          workflows="tests.versions._deploy_old")  # fmt: skip
    new_pool = WorkerPool(store_url, tmp_path / "new", lease=10, concurrency=200,
                          workflows="tests.versions._deploy_new")  # fmt: skip
    pools = [old_pool, new_pool]
    try:
        async with Engine(store_url, [OldV1], worker=False) as before:
            old = [old_pool.start(), old_pool.start()]
            old_pool.wait_ready(old)
            # Naps of 4 to 24 s: the first wake on the old workers, the later ones after the
            # deploy, on whichever worker claims them.
            items = [
                {"id": f"v1-{i:04d}", "params": {"ledger": str(ledger), "nap": 4 + (i % 50) * 0.4}}
                for i in range(V1_COUNT)
            ]
            await before.workflow(NAME).create_batch(items)
            await wait_counts(
                before, pools, lambda c: c.get("waiting", 0) + c.get("complete", 0) == V1_COUNT,
                "every version 1 instance asleep", 120,
            )  # fmt: skip
            # The deploy starts only once the old code has finished some instances, so a slow
            # machine cannot push every wake past the old workers' stop.
            await wait_counts(
                before, pools, lambda c: c.get("complete", 0) > 0,
                "a version 1 instance complete on the old workers", 120,
            )  # fmt: skip
        async with Engine(store_url, [PatchedV1, V2], worker=False) as after:
            new = [new_pool.start(), new_pool.start()]
            new_pool.wait_ready(new)
            items = [
                {"id": f"v2-{i:04d}", "params": {"ledger": str(ledger), "nap": 1 + (i % 10) * 0.2}}
                for i in range(V2_COUNT)
            ]
            await after.workflow(NAME).create_batch(items)  # the newest version: 2
            await asyncio.sleep(1)
            stop(old[0])
            await asyncio.sleep(2)
            stop(old[1])
            await wait_counts(
                after, pools, lambda c: c.get("complete", 0) == V1_COUNT + V2_COUNT
                or c.get("errored", 0) > 0, "every instance complete", 240,
            )  # fmt: skip
            records = await records_of(after, NAME)
            drained = {v.version: v.drained for v in await after.workflow_versions(NAME)}
        new_pool.stop_all()
    finally:
        for pool in pools:
            pool.cleanup()

    assert Counter(r.status for r in records) == {"complete": V1_COUNT + V2_COUNT}
    assert drained == {"1": True, "2": True}
    old_pids = {w.pid for w in old}
    new_pids = {w.pid for w in new}
    paths: Counter[str] = Counter()
    for record in records:
        ran, path = record.output["ran"], record.output["path"]
        if record.id.startswith("v2-"):
            assert record.version == "2" and path == ["start", "finish"], record
            assert ran == ["v2", "v2"], record
            continue
        assert record.version == "1", record
        if path == ["a", "sms", "email"]:
            assert ran[1:] == ["patched", "patched"], record  # the new path on the new code
            paths["patched"] += 1
        else:
            assert path == ["a", "email"] and ran[1] == "old", record  # the old path, all of it
            paths["old"] += 1
    assert paths["old"] > 0 and paths["patched"] > 0, paths  # the deploy split them

    # The ledger of activations: which process ran which instance, under which code.
    runs = [
        line.split(",")
        for file in ledger.glob("runs-*.csv")
        for line in file.read_text().splitlines()
    ]
    assert runs
    for pid, instance_id, version, code in runs:
        if int(pid) in old_pids:
            assert (version, code) == ("1", "old"), (pid, instance_id)
        else:
            assert int(pid) in new_pids, pid
            assert (version, code) in (("1", "patched"), ("2", "v2")), (pid, instance_id)
        assert instance_id.startswith("v2-" if version == "2" else "v1-"), (pid, instance_id)
    v2_runners = {int(pid) for pid, instance_id, _, _ in runs if instance_id.startswith("v2-")}
    assert v2_runners <= new_pids
