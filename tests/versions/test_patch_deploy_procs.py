"""A rolling deploy with a patch before a second sleep, in processes, on each store: instances
of version 1 sleep under an old worker; a new worker whose code patches version 1 between two
sleeps starts beside it and both keep running to the end. An instance that wakes on the new
code takes the patch and sleeps again: its second wake must go to the new worker, never the old
one (whose replay would diverge on the marker). Every instance completes on the old path or
the patched path, none errored, and the ledger shows no old worker ran an instance that took
the patch."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from stepline import Engine

from .._procs import WorkerPool
from ..flow.test_fleet import records_of
from ._deploy_flows import TWICE, OldTwice
from .test_deploy_procs import wait_counts

pytestmark = pytest.mark.slow

COUNT = 200


async def test_an_instance_that_took_a_patch_never_wakes_on_an_old_worker(
    store_url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old_pool = WorkerPool(store_url, tmp_path / "old", lease=10, concurrency=100,
                          workflows="tests.versions._twice_old")  # fmt: skip
    new_pool = WorkerPool(store_url, tmp_path / "new", lease=10, concurrency=100,
                          workflows="tests.versions._twice_new")  # fmt: skip
    pools = [old_pool, new_pool]
    try:
        async with Engine(store_url, [OldTwice], worker=False) as client:
            old = old_pool.start()
            old_pool.wait_ready([old])
            # First naps of 4 to 12 s: most wake after the new worker started, on either
            # worker; the second naps, 1 to 3 s, while both still run.
            naps = [(4 + (i % 40) * 0.2, 1 + (i % 10) * 0.2) for i in range(COUNT)]
            items = [
                {"id": f"i-{i:03d}", "params": {"ledger": str(ledger), "nap": a, "second": b}}
                for i, (a, b) in enumerate(naps)
            ]
            await client.workflow(TWICE).create_batch(items)
            await wait_counts(
                client, pools, lambda c: c.get("waiting", 0) + c.get("complete", 0) == COUNT,
                "every instance asleep", 60, TWICE,
            )  # fmt: skip
            new = new_pool.start()
            new_pool.wait_ready([new])
            await wait_counts(
                client, pools, lambda c: c.get("complete", 0) == COUNT or c.get("errored", 0) > 0,
                "every instance complete", 120, TWICE,
            )  # fmt: skip
            records = await records_of(client, TWICE)
        old_pool.stop_all()
        new_pool.stop_all()
    finally:
        for pool in pools:
            pool.cleanup()

    assert Counter(r.status for r in records) == {"complete": COUNT}, [
        (r.id, r.error) for r in records if r.status != "complete"
    ]
    patched = {r.id for r in records if r.output["path"] == ["a", "sms", "email"]}
    assert patched and len(patched) < COUNT, len(patched)  # the deploy split them
    for record in records:
        if record.id in patched:
            assert record.output["ran"][1:] == ["patched", "patched"], record
        else:
            assert record.output["path"] == ["a", "email"], record

    # The ledger of activations: once an instance ran on the new code (where it took the
    # patch), the old worker never ran it again.
    lines = [
        line.split(",") for file in ledger.glob("runs-*.csv") for line in file.read_text().split()
    ]
    runs = sorted((int(at), int(pid), instance_id, code) for at, pid, instance_id, code in lines)
    assert {code for *_, code in runs} == {"old", "patched"}
    seen_new: set[str] = set()
    for _at, pid, instance_id, code in runs:
        assert (pid, code) in ((old.pid, "old"), (new.pid, "patched")), (pid, code)
        if code == "patched":
            seen_new.add(instance_id)
        elif instance_id in patched:
            assert instance_id not in seen_new, f"the old worker ran {instance_id} after the patch"
    assert patched <= seen_new
