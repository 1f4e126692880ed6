"""Process-level tests: real worker subprocesses, SIGKILL, several workers on one database.

Each step of the ledger workflow (tests/_procs.py) notes its start and end in a side-effect
ledger that survives SIGKILL; the checks compare that ledger with the recorded step history.
Parametrised over the stores (``store_url``): SQLite (one file shared by every process) and
PostgreSQL.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stepline import Engine, InstanceStatus, StepRecord
from stepline.records import Attempt

from .._procs import (
    WORKFLOW,
    Execution,
    LedgerReader,
    LedgerWorkflow,
    Verdict,
    WorkerPool,
    check_history,
    load_records,
    read_ledger,
    status_counts,
    wait_until,
)

pytestmark = pytest.mark.slow

# Leases: short where a test kills workers (their instances move after the lease expires), long
# elsewhere. Not shorter than 5 s in the scale-out kill test: with 4 workers x 100+ activations
# on 2 cores, a step can wait seconds for a pooled PostgreSQL connection, and lease renewal waits
# in the same queue; a 2 s lease then expires under a live worker (seen at load average ~10).

PoolFactory = Callable[..., WorkerPool]

# Log lines that must never appear in a worker's stderr. (Not "lease lost": the worker logs it
# also for an activation that finished while its renewal was in flight. A real loss shows up in
# the ledger as a step run again by a live worker, which check_history rejects.)
CLEAN = ["database is locked", "Traceback", " ERROR "]


@pytest.fixture
def pools(store_url: str, tmp_path: Path) -> Iterator[PoolFactory]:
    """``pools(lease=..., concurrency=...)``: a worker pool; leftover processes are killed."""
    made: list[WorkerPool] = []

    def factory(**options: Any) -> WorkerPool:
        logs = tmp_path / f"logs-{len(made)}"
        logs.mkdir()
        pool = WorkerPool(store_url, logs, **options)
        made.append(pool)
        return pool

    yield factory
    for pool in made:
        pool.cleanup()


def ledger_dir(tmp_path: Path) -> Path:
    path = tmp_path / "ledger"
    path.mkdir()
    return path


async def create(client: Engine, prefix: str, count: int, params: dict[str, Any]) -> list[str]:
    ids = [f"{prefix}{n}" for n in range(count)]
    await client.workflow(WORKFLOW).create_batch([{"id": i, "params": params} for i in ids])
    return ids


def show(label: str, verdict: Verdict, started: float) -> None:
    print(
        f"\n{label}: {verdict.instances} instances, {verdict.executions} step executions, "
        f"{verdict.reruns} re-run after a kill, {verdict.open_at_kill} cut mid-step, "
        f"taken over {verdict.taken_over}, {verdict.multi_worker_instances} instances ran in "
        f"several workers, {time.monotonic() - started:.1f} s"
    )


async def kill_when(
    client: Engine,
    pool: WorkerPool,
    ledger: Path,
    ready: Callable[[dict[str, int], list[Any]], bool],
    what: str,
    timeout: float = 60.0,
) -> None:
    """Poll the database and the ledger until ``ready(counts, executions)``, else fail."""
    deadline = time.monotonic() + timeout
    reader = LedgerReader(ledger)
    while True:
        pool.check_alive()
        counts = await status_counts(client)
        if ready(counts, reader.read()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"never reached the moment to kill ({what}) within {timeout} s; by status: "
                f"{counts}\n{pool.report()}"
            )
        await asyncio.sleep(0.01)


async def test_sigkill_mid_step_then_another_worker_completes_everything(
    store_url: str, tmp_path: Path, pools: PoolFactory
) -> None:
    """kill -9 while steps run: every instance completes, recorded steps never run again, the
    interrupted steps run again exactly once."""
    started = time.monotonic()
    ledger = ledger_dir(tmp_path)
    params = {
        "ledger": str(ledger),
        "steps": 6,
        "kinds": ["async", "sync-sleep", "async-sleep", "sync", "sync-sleep", "async"],
        "work": 0.08,
    }
    async with Engine(store_url, [LedgerWorkflow], worker=False) as client:
        ids = await create(client, "k", 20, params)
        pool = pools(lease=1.0)
        victim = pool.start()

        def mid_step(_counts: dict[str, int], runs: list[Any]) -> bool:
            # Some progress, and step callbacks in flight right now.
            return sum(r.end is not None for r in runs) >= 25 and any(r.end is None for r in runs)

        await kill_when(client, pool, ledger, mid_step, "steps in flight")
        pool.kill(victim)
        pool.start()
        await wait_until(client, pool, len(ids), timeout=60)
        pool.stop_all()
        records = await load_records(client, ids, params)
    verdict = pool.verify(records, read_ledger(ledger))
    show("kill -9 mid-step", verdict, started)
    assert verdict.open_at_kill >= 1, "the kill hit no step in flight: the test proved nothing"
    assert verdict.reruns >= 1
    assert verdict.taken_over.get(victim.pid, 0) >= 1
    assert not pool.stderr_problems(forbid=CLEAN)


async def test_three_workers_share_one_database(
    store_url: str, tmp_path: Path, pools: PoolFactory
) -> None:
    """3 worker processes over 300 instances (with a durable sleep in the middle, so instances
    move between workers): all complete, no instance ever ran in two workers at once, no step
    ran or was recorded twice, no "database is locked"."""
    started = time.monotonic()
    ledger = ledger_dir(tmp_path)
    params = {
        "ledger": str(ledger),
        "steps": 5,
        "kinds": ["async", "async-sleep", "sync", "sync-sleep"],
        "work": 0.01,
        "nap": 0.05,
        "nap_after": 1,
    }
    async with Engine(store_url, [LedgerWorkflow], worker=False) as client:
        pool = pools(lease=10.0, concurrency=20)
        pool.wait_ready([pool.start() for _ in range(3)])
        ids = await create(client, "m", 300, params)
        await wait_until(client, pool, len(ids), timeout=60)
        pool.stop_all()
        records = await load_records(client, ids, params)
    runs = read_ledger(ledger)
    verdict = pool.verify(records, runs)
    show("3 workers", verdict, started)
    assert verdict.executions == 300 * 5
    assert {r.pid for r in runs} == {w.pid for w in pool.workers}, "a worker never ran a step"
    problems = pool.stderr_problems(forbid=CLEAN)
    assert not problems, "\n".join(problems)


SCALE_INSTANCES = 2000
SCALE_STEPS = 10


async def test_scale_out_four_workers(store_url: str, tmp_path: Path, pools: PoolFactory) -> None:
    """4 worker processes over 2,000 instances of a 10-step workflow: all complete, no instance
    ever run by two workers at once, each recorded step executed once."""
    started = time.monotonic()
    ledger = ledger_dir(tmp_path)
    params = {"ledger": str(ledger), "steps": SCALE_STEPS, "kinds": ["async"]}
    async with Engine(store_url, [LedgerWorkflow], worker=False) as client:
        pool = pools(lease=10.0)
        pool.wait_ready([pool.start() for _ in range(4)])
        ids = await create(client, "s", SCALE_INSTANCES, params)
        await wait_until(client, pool, len(ids), timeout=120)
        elapsed = time.monotonic() - started
        pool.stop_all()
        records = await load_records(client, ids, params)
    runs = read_ledger(ledger)
    verdict = pool.verify(records, runs)
    show("scale-out, 4 workers", verdict, started)
    print(f"run until all complete: {elapsed:.1f} s")
    assert verdict.executions == SCALE_INSTANCES * SCALE_STEPS
    assert {r.pid for r in runs} == {w.pid for w in pool.workers}, "a worker never ran a step"
    problems = pool.stderr_problems(forbid=CLEAN)
    assert not problems, "\n".join(problems)


class Busy:
    """A moment to kill one of the workers ``pids``: it is in the middle of some instance (it
    ran that instance's latest step, at least two steps are done and several remain), so the
    kill takes instances away from it; :attr:`pid` is the one found. (Workers move their
    instances forward in waves, so a condition on the number of complete instances could wait
    for a moment that never comes.)"""

    def __init__(self, *pids: int) -> None:
        self.pids = set(pids)
        self.pid: int | None = None

    def __call__(self, _counts: dict[str, int], runs: list[Any]) -> bool:
        latest: dict[str, Any] = {}
        steps: dict[str, set[str]] = {}
        for run in runs:
            steps.setdefault(run.instance, set()).add(run.step)
            if run.instance not in latest or run.start > latest[run.instance].start:
                latest[run.instance] = run
        for instance, last in latest.items():
            if last.pid in self.pids and 2 <= len(steps[instance]) <= SCALE_STEPS - 3:
                self.pid = last.pid
                return True
        return False


async def test_scale_out_with_a_worker_killed_twice(
    store_url: str, tmp_path: Path, pools: PoolFactory
) -> None:
    """The same with a busy worker killed by SIGKILL and restarted, and the restarted one killed
    and restarted again: all complete, no recorded step executed twice, the interrupted steps
    re-run at most once each.

    The instances are created in two halves, the second once the restarted worker is ready, so
    that the restarted worker has work in progress when it is killed again (otherwise, on a fast
    store, the others could finish everything while it starts up).
    """
    started = time.monotonic()
    ledger = ledger_dir(tmp_path)
    # Every other step takes 10 ms: on a fast machine a half of the instances otherwise went
    # through in well under a second, and the moment to kill could pass between two polls.
    params = {
        "ledger": str(ledger),
        "steps": SCALE_STEPS,
        "kinds": ["async", "async-sleep"],
        "work": 0.01,
    }
    half = SCALE_INSTANCES // 2
    async with Engine(store_url, [LedgerWorkflow], worker=False) as client:
        pool = pools(lease=5.0)
        pool.wait_ready([pool.start() for _ in range(4)])
        ids = await create(client, "x", half, params)
        # Whichever worker is busy first: one that happened to poll last may get none of a
        # half that the others finish within its poll interval.
        first = Busy(*(worker.pid for worker in pool.workers))
        await kill_when(client, pool, ledger, first, "first kill")
        victims = [next(worker for worker in pool.workers if worker.pid == first.pid)]
        pool.kill(victims[0])
        victims.append(pool.start())
        pool.wait_ready(victims[-1:])
        ids += await create(client, "y", half, params)
        await kill_when(client, pool, ledger, Busy(victims[1].pid), "second kill")
        pool.kill(victims[1])
        victims.append(pool.start())
        await wait_until(client, pool, len(ids), timeout=120)
        elapsed = time.monotonic() - started
        # It may have had nothing left to do; SIGTERM before it is ready would end it at once.
        pool.wait_ready(victims[-1:])
        pool.stop_all()
        records = await load_records(client, ids, params)
    verdict = pool.verify(records, read_ledger(ledger))
    show("scale-out, a worker killed twice", verdict, started)
    print(f"run until all complete: {elapsed:.1f} s")
    for victim in victims[:2]:
        assert verdict.taken_over.get(victim.pid, 0) >= 1, (
            f"no instance of killed worker {victim.pid} was finished by another: "
            "the kill hit an idle worker"
        )
    problems = pool.stderr_problems(forbid=CLEAN)
    assert not problems, "\n".join(problems)


def _history(
    recorded: dict[str, str],
) -> dict[str, tuple[InstanceStatus, dict[str, Any], list[StepRecord]]]:
    """One instance "i" of a 2-step ledger workflow whose steps recorded the given tokens."""
    steps = [
        StepRecord(
            name, 1, seq, "do", "complete", {"token": token, "pid": 1},
            attempts=(Attempt(1, 0.0, 0.0),),
        )
        for seq, (name, token) in enumerate(recorded.items(), start=1)
    ]  # fmt: skip
    status = InstanceStatus("complete", {"tokens": list(recorded.values())})
    return {"i": (status, {"ledger": "", "steps": 2}, steps)}


def test_the_ledger_check_catches_what_it_must() -> None:
    """check_history accepts a clean history and one cut by a kill, and rejects each violation,
    so the process tests above can fail."""
    s0, s1 = Execution("i", "s0", 1, 10, 1.0, "a", 1.1), Execution("i", "s1", 1, 10, 2.0, "b", 2.1)
    tokens = {"s0": "a", "s1": "b"}
    assert check_history(_history(tokens), [s0, s1], {}).reruns == 0
    cut = Execution("i", "s1", 1, 20, 1.5, "c")  # killed worker 20 at 1.6, mid-step
    verdict = check_history(_history(tokens), [s0, cut, s1], {20: 1.6})
    assert (verdict.reruns, verdict.open_at_kill, verdict.taken_over) == (1, 1, {20: 1})
    cases = [
        ([s0, s1, Execution("i", "s0", 1, 11, 0.5, "x", 0.6)], {}, "no worker running it"),
        ([s0, s1, Execution("i", "s1", 1, 20, 2.5, "x", 2.6)], {20: 3.0}, "after its result"),
        ([s0, s1, Execution("i", "s1", 1, 11, 1.05, "x", 1.08)], {11: 2.0}, "at once"),
        ([s0, Execution("i", "s1", 1, 10, 1.9, "z", 2.0)], {}, "does not match"),
        (
            [s0, s1, Execution("i", "s1", 1, 20, 1.2, "x"), Execution("i", "s1", 1, 20, 1.4, "y")],
            {20: 1.5},
            "twice in killed worker",
        ),
    ]
    for runs, killed, message in cases:
        with pytest.raises(AssertionError, match=message):
            check_history(_history(tokens), runs, killed)
