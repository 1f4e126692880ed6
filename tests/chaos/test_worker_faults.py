"""A worker paused past its lease, graceful shutdown by signal, and a worker whose wall clock
jumps.

The first two run real worker processes (``python -m tests._procs`` and the ``stepline worker``
command) on both stores, with the side-effect ledger of :mod:`tests._procs` telling which
process ran each step and which execution produced the recorded result. The clock scenarios
run in-process with a clock the test moves.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from stepline import Engine, Workflow, WorkflowEvent, WorkflowStep

from .._procs import (
    WORKFLOW,
    Execution,
    LedgerWorkflow,
    WorkerPool,
    WorkerProc,
    read_ledger,
)
from ._faults import (
    lease_row,
    quiet_stop,
    start_cli_worker,
    wait_cli_ready,
    wait_exit,
    write_config,
)
from .conftest import say

CLEAN = ["Traceback", " ERROR ", "database is locked"]


@pytest.fixture
def pool(store_url: str, tmp_path: Path) -> Iterator[WorkerPool]:
    logs = tmp_path / "logs"
    logs.mkdir()
    made = WorkerPool(store_url, logs)
    yield made
    for worker in made.workers:  # a stopped process must be continued to be killed cleanly
        if worker.proc.poll() is None:
            worker.proc.send_signal(signal.SIGCONT)
    made.cleanup()


def ledger_dir(tmp_path: Path, seed: int) -> Path:
    path = tmp_path / f"ledger-{seed}"
    path.mkdir()
    return path


def runs_of(ledger: Path, step: str, pid: int | None = None) -> list[Execution]:
    """The runs of ``step`` (by worker ``pid``), in the order they started: the ledger's files
    are per process and read in the order of their names, and 1023 sorts before 844."""
    runs = [r for r in read_ledger(ledger) if r.step == step and (pid is None or r.pid == pid)]
    return sorted(runs, key=lambda r: r.start)


async def poll(what: str, check: Any, pool: WorkerPool, timeout: float = 30.0) -> Any:
    """Poll ``await check()`` (or ``check()``) until it returns something true; fail after
    ``timeout`` with the workers' logs."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if asyncio.iscoroutine(found):
            found = await found
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s\n{pool.report()}")
        await asyncio.sleep(0.02)


def stderr_lines(worker: WorkerProc, words: list[str]) -> list[str]:
    return [
        line
        for line in worker.stderr_text().splitlines()
        if any(word.lower() in line.lower() for word in words)
    ]


# -- a worker paused past its lease ---------------------------------------------------------------


@pytest.mark.slow
async def test_a_worker_paused_past_its_lease_is_fenced_out(
    store_url: str, tmp_path: Path, pool: WorkerPool, chaos_seeds: list[int]
) -> None:
    """SIGSTOP a worker mid-step until its lease expires and a successor records the step; after
    SIGCONT nothing the paused worker writes lands: the successor's record stands, the paused
    worker logs that it lost the instance (no traceback) and runs no further step of it."""
    pool.lease = 2.0
    for seed in chaos_seeds:
        await paused_round(store_url, ledger_dir(tmp_path, seed), pool, seed)
    problems = pool.stderr_problems(forbid=CLEAN)
    assert not problems, "\n".join(problems)


async def paused_round(store_url: str, ledger: Path, pool: WorkerPool, seed: int) -> None:
    rng = random.Random(seed)
    kind = rng.choice(["async-sleep", "sync-sleep"])
    work = rng.uniform(1.2, 1.8)
    params = {"ledger": str(ledger), "steps": 2, "kinds": [kind], "work": work}
    instance_id = f"paused-{seed}"
    async with Engine(store_url, [LedgerWorkflow], worker=False) as client:
        paused = pool.start()
        pool.wait_ready([paused])
        await client.workflow(WORKFLOW).create(instance_id, params)
        # Stop it well inside its first step (past the step's `running` record at 0.2 s).
        (first,) = await poll("s0 started", lambda: runs_of(ledger, "s0", paused.pid), pool)
        await asyncio.sleep(max(0.0, first.start + 0.4 - time.time()))
        quiet_stop(store_url, paused)
        stopped_at = time.monotonic()
        successor = pool.start()
        handle = await client.workflow(WORKFLOW).get(instance_id)

        async def recorded_by_successor() -> bool:
            steps = {s.name: s for s in await handle.steps()}
            s0 = steps.get("s0")
            return bool(s0 and s0.status == "complete" and s0.output["pid"] == successor.pid)

        await poll("the successor recorded s0", recorded_by_successor, pool, timeout=40)
        paused.proc.send_signal(signal.SIGCONT)
        stopped_for = time.monotonic() - stopped_at
        status = await handle.wait(timeout=40)
        # The continued worker runs into its fence: its step is due, its renewal overdue.
        noticed = await poll(
            "the paused worker noticed its lost lease",
            lambda: stderr_lines(paused, ["lease lost", "abandoned"]),
            pool,
            timeout=20,
        )
        steps = {s.name: s for s in await handle.steps()}
        pool.stop_all()
    runs = read_ledger(ledger)
    mine = [r for r in runs if r.pid == paused.pid]
    theirs = {r.step: r for r in runs if r.pid == successor.pid}
    say(
        f"seed {seed}: worker {paused.pid} stopped {stopped_for:.1f} s mid-step ({kind} steps "
        f"of {work:.2f} s, lease 2 s), successor {successor.pid}; executions (step, pid, "
        f"ended) {[(r.step, r.pid, r.end is not None) for r in runs]}; the paused worker "
        f"logged {noticed}"
    )
    assert status.status == "complete", status
    assert [r.step for r in mine] == ["s0"], f"the paused worker ran {mine}"
    assert set(theirs) == {"s0", "s1"}
    for name in ("s0", "s1"):
        assert steps[name].output["token"] == theirs[name].token, (
            f"{name} records {steps[name].output}, not the successor's run {theirs[name]}"
        )
    assert status.output == {"tokens": [theirs["s0"].token, theirs["s1"].token]}
    row = lease_row(store_url, instance_id)
    assert (row.status, row.lease_owner) == ("complete", None)


# -- graceful shutdown ----------------------------------------------------------------------------


@pytest.mark.slow
async def test_sigterm_lets_a_running_step_finish_within_the_grace_period(
    store_url: str, tmp_path: Path, pool: WorkerPool, chaos_seeds: list[int]
) -> None:
    """`stepline worker` on SIGTERM mid-step: the step finishes within the grace period and is
    recorded, no new step starts, the instance is released (not left leased for the 60 s lease)
    and another worker completes it at once."""
    config = write_config(tmp_path / "stepline.toml", store_url, lease=60, grace=10)
    for seed in chaos_seeds:
        rng = random.Random(seed)
        kind = rng.choice(["async-sleep", "sync-sleep"])
        work = rng.uniform(0.8, 1.5)
        ledger = ledger_dir(tmp_path, seed)
        params = {"ledger": str(ledger), "steps": 2, "kinds": [kind], "work": work}
        instance_id = f"grace-{seed}"
        async with Engine(store_url, [LedgerWorkflow], worker=False) as client:
            first = start_cli_worker(pool, config)
            wait_cli_ready(pool, first)
            await client.workflow(WORKFLOW).create(instance_id, params)
            await poll("s0 started", lambda: runs_of(ledger, "s0"), pool)  # noqa: B023
            first.proc.send_signal(signal.SIGTERM)
            took = wait_exit(first, 30, "SIGTERM", pool)
            assert first.proc.returncode == 0, pool.report()
            row = lease_row(store_url, instance_id)
            (s0,) = runs_of(ledger, "s0")
            assert s0.end is not None and s0.pid == first.pid, s0
            handle = await client.workflow(WORKFLOW).get(instance_id)
            recorded = {s.name: s for s in await handle.steps()}
            assert recorded["s0"].output["token"] == s0.token, recorded
            assert "s1" not in recorded and not runs_of(ledger, "s1"), (
                "a step started after SIGTERM"
            )
            assert row.lease_owner is None and row.lease_expires_at is None, row
            assert row.ready_at is not None and row.ready_at <= time.time(), row
            released_at = time.monotonic()
            second = start_cli_worker(pool, config)
            status = await handle.wait(timeout=40)
            resumed_in = time.monotonic() - released_at
            pool.stop_all()
        say(
            f"seed {seed}: SIGTERM during {kind} step of {work:.2f} s (grace 10 s, lease 60 s); "
            f"the worker exited after {took:.1f} s with the step recorded, leaving {row}; "
            f"another worker completed the instance {resumed_in:.1f} s later"
        )
        assert status.status == "complete", status
        (s1,) = runs_of(ledger, "s1")
        assert s1.pid == second.pid and [r.token for r in runs_of(ledger, "s0")] == [s0.token]
        assert status.output == {"tokens": [s0.token, s1.token]}
    problems = pool.stderr_problems(forbid=CLEAN)
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["async-sleep", "sync-sleep"])
async def test_past_the_grace_period_the_instance_is_released_and_a_second_signal_stops_at_once(
    store_url: str, tmp_path: Path, pool: WorkerPool, chaos_seeds: list[int], kind: str
) -> None:
    """A step longer than the grace period: the worker exits soon after the grace period with
    the instance released (lease cleared at once, not left to expire), another worker resumes it
    at once; that worker, signalled twice, stops at once, releasing it again."""
    short = write_config(tmp_path / "short.toml", store_url, lease=60, grace=1)
    long = write_config(tmp_path / "long.toml", store_url, lease=60, grace=60)
    for seed in chaos_seeds:
        rng = random.Random(seed)
        again = rng.choice([signal.SIGTERM, signal.SIGINT])
        ledger = ledger_dir(tmp_path, seed)
        params = {"ledger": str(ledger), "steps": 2, "kinds": [kind], "work": 120.0}
        instance_id = f"past-{seed}"
        async with Engine(store_url, [LedgerWorkflow], worker=False) as client:
            first = start_cli_worker(pool, short)
            wait_cli_ready(pool, first)
            await client.workflow(WORKFLOW).create(instance_id, params)
            await poll("s0 started", lambda: runs_of(ledger, "s0"), pool)  # noqa: B023
            first.proc.send_signal(signal.SIGTERM)
            took = wait_exit(first, 20, "SIGTERM with a grace period of 1 s", pool)
            row = lease_row(store_url, instance_id)
            assert first.proc.returncode == 0, pool.report()
            assert row.lease_owner is None and row.lease_expires_at is None, row
            assert row.ready_at is not None and row.ready_at <= time.time(), row
            released_at = time.monotonic()
            second = start_cli_worker(pool, long)
            await poll("another worker resumed s0", lambda: runs_of(ledger, "s0", second.pid), pool)  # noqa: B023
            resumed_in = time.monotonic() - released_at
            second.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.5)
            assert second.proc.poll() is None, "SIGTERM did not give the step its grace period"
            second.proc.send_signal(again)
            stopped_in = wait_exit(second, 15, f"a second signal ({again.name})", pool)
            row2 = lease_row(store_url, instance_id)
        say(
            f"seed {seed}: {kind} step of 120 s; SIGTERM with grace 1 s: exit after {took:.1f} s "
            f"leaving {row}; resumed by another worker {resumed_in:.1f} s later (lease 60 s); "
            f"SIGTERM then {again.name} to it: exit after {stopped_in:.1f} s leaving {row2}"
        )
        assert resumed_in < 30, "the instance waited for its lease to expire"
        assert row2.lease_owner is None and row2.lease_expires_at is None, row2
        assert row2.ready_at is not None and row2.ready_at <= time.time(), row2
        assert [r.pid for r in runs_of(ledger, "s0")] == [first.pid, second.pid]
    problems = pool.stderr_problems(forbid=CLEAN)
    assert not problems, "\n".join(problems)


# -- a wall clock that jumps -------------------------------------------------------------------


_REAL_TIME = time.time


class JumpingClock:
    """This machine's wall clock (``time.time``, patched for the test), moved by :meth:`jump` as
    an NTP step or an operator would move it.

    The engines are given no clock, so each store keeps real time as it does in production:
    the SQLite store reads this clock, the PostgreSQL store the server's clock carried on by the
    monotonic clock."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.offset = 0.0
        monkeypatch.setattr(time, "time", lambda: _REAL_TIME() + self.offset)

    def jump(self, seconds: float) -> None:
        self.offset += seconds


class Napper(Workflow):
    """One step, a durable sleep of ``nap`` seconds, one step; or, with ``work``, one long step
    (counted in ``RUNS``) instead."""

    name = "napper"
    RUNS: ClassVar[list[str]] = []

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        params: dict[str, Any] = event.payload
        if params.get("work"):

            async def long_step() -> str:
                Napper.RUNS.append(event.instance_id)
                await asyncio.sleep(params["work"])
                return "worked"

            return await step.do("work", long_step)
        await step.do("before", lambda: "before")
        await step.sleep("nap", params["nap"])
        return await step.do("after", lambda: "after")


async def statuses(engine: Engine, ids: list[str]) -> dict[str, str]:
    binding = engine.workflow(Napper)
    return {i: (await (await binding.get(i)).status()).status for i in ids}


async def wait_statuses(
    engine: Engine, wanted: dict[str, str], what: str, timeout: float = 20.0
) -> float:
    """Poll until every instance of ``wanted`` has its status; return how long it took."""
    started = time.monotonic()
    found: dict[str, str] = {}
    while time.monotonic() - started < timeout:
        found = await statuses(engine, list(wanted))
        if found == wanted:
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what}: wanted {wanted}, still {found} after {timeout} s")


async def test_a_clock_jump_forward_fires_timers_no_earlier_than_the_jump_and_steals_no_lease(
    store_url: str, store_kind: str, chaos_seeds: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wall clock jumps an hour forward while a worker has sleeping instances and a long step
    under lease: on SQLite, whose time is the machine's, sleeps due within the hour wake (early
    by less than the jump) and a sleep due after it does not; on PostgreSQL, whose time is the
    server's carried on by the monotonic clock, no sleep wakes early at all. Either way the
    running step is taken neither by its own worker nor by the idle one beside it (its lease,
    written by the old clock, looks expired by the new one): it runs once."""
    for seed in chaos_seeds:
        rng = random.Random(seed)
        near, far = rng.uniform(600, 3000), rng.uniform(3700, 7200)
        work = rng.uniform(2.0, 3.0)
        clock = JumpingClock(monkeypatch)
        Napper.RUNS.clear()
        options: dict[str, Any] = {"lease": 3.0}
        # Two workers on one machine's clock: the one running the step (its instances are
        # created here, so it takes them), and an idle peer that looks at the database more
        # often, so that it would see the stale lease first.
        async with (
            Engine(store_url, [Napper], poll_interval=0.5, **options) as engine,
            Engine(store_url, [Napper], poll_interval=0.05, **options),
        ):
            binding = engine.workflow(Napper)
            await binding.create(f"near-{seed}", {"nap": near})
            await binding.create(f"far-{seed}", {"nap": far})
            await binding.create(f"busy-{seed}", {"work": work})
            await wait_statuses(
                engine, {f"near-{seed}": "waiting", f"far-{seed}": "waiting"}, "asleep"
            )
            while not Napper.RUNS:  # noqa: ASYNC110 - the step runs in the engine's worker
                await asyncio.sleep(0.01)
            clock.jump(3600)
            near_after = "complete" if store_kind == "sqlite" else "waiting"
            woke_in = await wait_statuses(
                engine,
                {f"near-{seed}": near_after, f"busy-{seed}": "complete"},
                "after the jump",
            )
            await asyncio.sleep(0.5)  # a worker that fires wrongly early does so at once
            after = await statuses(engine, [f"far-{seed}", f"near-{seed}"])
            runs = list(Napper.RUNS)
        say(
            f"seed {seed}: clock +3600 s with sleeps of {near:.0f} and {far:.0f} s and a step "
            f"of {work:.1f} s under a 3 s lease: the step was done {woke_in:.1f} s later, the "
            f"near one is {after[f'near-{seed}']}, the far one is {after[f'far-{seed}']}, the "
            f"step ran {len(runs)} time(s)"
        )
        assert after == {f"far-{seed}": "waiting", f"near-{seed}": near_after}, (
            "a timer fired earlier than the jump explains"
        )
        assert runs == [f"busy-{seed}"], (
            f"the step ran {runs}: a worker took it over from a live one"
        )


async def test_a_clock_jump_back_delays_a_timer_by_at_most_the_jump(
    store_url: str, store_kind: str, chaos_seeds: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wall clock jumps a minute back while an instance sleeps, then (a minute later, here
    moved on at once) the clock reaches its wake time. On SQLite the worker wakes it soon (after
    the pause of half a lease that follows any forward step, see the test above), not after a
    wait computed from the clock before it caught up, and meanwhile it does not fire early. On
    PostgreSQL the jump does not move the store's time: the sleep ends on time."""
    for seed in chaos_seeds:
        rng = random.Random(seed)
        nap = rng.uniform(1.0, 2.0)
        clock = JumpingClock(monkeypatch)
        options: dict[str, Any] = {"lease": 2.0, "poll_interval": 0.2}
        async with Engine(store_url, [Napper], **options) as engine:
            await engine.workflow(Napper).create(f"nap-{seed}", {"nap": nap})
            await wait_statuses(engine, {f"nap-{seed}": "waiting"}, "asleep")
            clock.jump(-60)
            await asyncio.sleep(nap + 0.5)
            meanwhile = await statuses(engine, [f"nap-{seed}"])
            clock.jump(60)  # the minute has passed
            woke_in = await wait_statuses(
                engine, {f"nap-{seed}": "complete"}, "after the clock caught up"
            )
        say(
            f"seed {seed}: a sleep of {nap:.1f} s, clock -60 s: "
            f"{meanwhile[f'nap-{seed}']} past its time; clock back on time: woke {woke_in:.1f} s "
            "later"
        )
        on_time = "waiting" if store_kind == "sqlite" else "complete"
        assert meanwhile == {f"nap-{seed}": on_time}
        assert woke_in < 5.0, "the worker slept on a wait computed before the clock caught up"
