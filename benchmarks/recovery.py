"""Recovery: a worker killed with SIGKILL mid-workflow; how long until another finishes it.

Two worker processes run on a fresh database with the engine's defaults (lease 30 s, renewed
every lease / 3, poll interval 0.5 s). One instance of ``bench-slow`` (10 steps of 50 ms each) is
created; once three of its steps are recorded, the worker holding its lease is killed with
SIGKILL. The other worker, already running and idle, claims it when the lease expires, replays
the recorded steps and runs the rest.

- kill to complete: from the kill to the instance's stored ``ended_at`` (target: at most
  lease + 1 s);
- kill to lease expiry: how much of the lease was left (the lease was last renewed, or taken,
  before the kill; at worst a whole lease);
- expiry to takeover: from the lease expiry to the start of the first step the survivor ran
  (each step returns its process id and start time);
- takeover to complete: the survivor's replay and the remaining steps' work (at most
  7 x 50 ms of it).

Times from the stored records are on the store's clock (PostgreSQL: the server's); the kill
time is the benchmark's ``time.time()``: on one machine they agree to a millisecond or so.

Run: ``python -m benchmarks recovery`` (``--quick``: a 3 s lease).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import orjson

from ._common import client, wait_for_status
from ._config import BenchConfig, database, parse, work_directory
from ._db import fetch
from ._procs import WorkerOptions, worker_pool
from ._report import Figure, Floor, Report, median
from ._run import execute
from ._workflows import Slow

NAME = "recovery"
STEPS = 10
WORK = 0.05
KILL_AFTER = 3
DEFAULT_LEASE = 30.0


async def run(config: BenchConfig) -> list[Report]:
    """One report per store in ``config.stores``; the stores run at the same time (each on its
    own database with its own workers: the benchmark mostly waits for a lease to expire)."""
    return list(await asyncio.gather(*(_run_store(config, store) for store in config.stores)))


async def _recorded(url: str) -> tuple[int, str | None, float | None]:
    """(complete steps, lease owner, lease expiry) of the one instance."""
    rows = await fetch(
        url,
        "SELECT (SELECT count(*) FROM {t}steps WHERE status = 'complete'), lease_owner, "
        "lease_expires_at FROM {t}instances",
    )
    if not rows:
        return 0, None, None
    done, owner, expires = rows[0]
    return int(done), owner, expires


async def measure(url: str, logs: Path, lease: float) -> dict[str, float]:
    """One kill on a fresh database; times in seconds."""
    options = WorkerOptions(lease=lease)
    async with worker_pool(url, logs, 2, options) as pool:
        async with client(url) as engine:
            await engine.workflow(Slow.name).create(params={"steps": STEPS, "work": WORK})
        deadline = time.monotonic() + 60
        while True:
            done, owner, _ = await _recorded(url)
            if done >= KILL_AFTER and owner is not None:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the instance never reached step {KILL_AFTER}")
            await asyncio.sleep(0.005)
        victim = next(w for w in pool.workers if w.worker_id == owner)
        victim.kill()
        killed = time.time()
        await victim.proc.wait()
        _, _, expires = await _recorded(url)
        await wait_for_status(
            url, Slow.name, 1, ("complete",), timeout=lease * 3 + 60, interval=0.05
        )
    rows = await fetch(url, "SELECT ended_at FROM {t}instances")
    ended = float(rows[0][0])
    outputs = [orjson.loads(text) for (text,) in await fetch(url, "SELECT output FROM {t}steps")]
    survivor = [o["start"] for o in outputs if o["pid"] != victim.pid]
    if not survivor:
        raise RuntimeError("no step was run by the surviving worker")
    takeover = min(survivor)
    if expires is None:
        raise RuntimeError("the killed worker's lease expiry was not found")
    return {
        "kill_to_complete": ended - killed,
        "kill_to_expiry": float(expires) - killed,
        "expiry_to_takeover": takeover - float(expires),
        "takeover_to_complete": ended - takeover,
    }


async def _run_store(config: BenchConfig, store: str) -> Report:
    lease = 3.0 if config.quick else DEFAULT_LEASE
    runs = config.repetitions(heavy=True)
    series: dict[str, list[float]] = defaultdict(list)
    with work_directory(config) as directory:
        for _ in range(runs):
            with database(config, store, directory) as url:
                result = await measure(url, directory / "logs", lease)
            for key, value in result.items():
                series[key].append(value)
            print(f"  {NAME} {store}: {result['kill_to_complete']:.2f} s", flush=True)
    floor = Floor(f"the lease ({lease:g} s): nothing may take over a live lease", lease, "s")

    def fig(label: str, key: str, with_floor: bool = False) -> Figure:
        return Figure(
            label, median(series[key]), "s", floor if with_floor else None, tuple(series[key])
        )

    report = Report(
        NAME, f"Recovery on {store}: SIGKILL mid-workflow, lease {lease:g} s (median of {runs})"
    )
    report.figures = [
        fig("kill to complete (target <= lease + 1 s)", "kill_to_complete", True),
        fig("kill to lease expiry", "kill_to_expiry", True),
        fig("lease expiry to takeover (first step started)", "expiry_to_takeover"),
        fig("takeover to complete (replay + remaining steps)", "takeover_to_complete"),
    ]
    report.details = {
        "store": store,
        "lease": lease,
        "steps": STEPS,
        "work": WORK,
        "kill_after": KILL_AFTER,
        "runs": runs,
        "series": dict(series),
    }
    report.notes = [
        f"2 worker processes, lease {lease:g} s (renewed every {lease / 3:g} s), poll 0.5 s; "
        f"the instance has {STEPS} steps of {WORK * 1000:.0f} ms, killed after {KILL_AFTER}",
        f"heavy benchmark: median of {runs} runs (--heavy-runs); the stores were measured at "
        "the same time, each on its own database with its own workers",
    ]
    return report


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse(__doc__ or NAME, argv))


if __name__ == "__main__":
    main()
