"""Deadlines across processes: one stored by a create is carried out by whichever worker runs
when it passes, after the worker that ran the instance was killed (SIGKILL). On both stores."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest

from stepline import Engine

from .._procs import WORKFLOW, LedgerWorkflow, WorkerPool, read_ledger, status_counts, wait_until

pytestmark = pytest.mark.slow

TIMEOUT = 8.0
"""Room for the instances to reach their sleep on a loaded machine before it passes."""


async def test_a_deadline_outlives_the_worker_that_ran_the_instance(
    store_url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    params = {
        "ledger": str(ledger), "steps": 4, "kinds": ["async"], "nap": 3600, "nap_after": 1,
    }  # fmt: skip
    pool = WorkerPool(store_url, logs, lease=1.0)
    try:
        async with Engine(store_url, [LedgerWorkflow], worker=False) as client:
            binding = client.workflow(WORKFLOW)
            victim = pool.start()
            pool.wait_ready([victim])
            created = time.monotonic()
            ids = [f"d{n}" for n in range(10)]
            for instance_id in ids:
                await binding.create(instance_id, params, timeout=TIMEOUT)
            counts: dict[str, int] = {}
            while time.monotonic() < created + TIMEOUT - 1:
                counts = await status_counts(client)
                if counts.get("waiting", 0) == len(ids):  # all asleep after s1
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError(f"never all asleep: {counts}\n{pool.report()}")
            pool.kill(victim)
            await asyncio.sleep(max(0.0, created + TIMEOUT + 0.5 - time.monotonic()))
            assert (await status_counts(client)).get("waiting", 0) == len(ids)
            pool.start()
            counts = await wait_until(client, pool, len(ids), timeout=30)
            assert counts.get("errored") == len(ids), counts
            for instance_id in ids:
                status = await (await binding.get(instance_id)).status()
                assert status.error is not None
                assert status.error["name"] == "WorkflowTimeoutError"
        runs = Counter((run.instance, run.step) for run in read_ledger(ledger))
        assert runs == {(i, s): 1 for i in ids for s in ("s0", "s1")}  # nothing after the nap
    finally:
        pool.cleanup()
