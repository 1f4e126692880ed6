"""Process crashes: worker processes killed with SIGKILL under a mixed load, on each store.

500 instances of the mix of ``_mix.py`` (retries, sleeps, events sent by a separate process,
parallel steps, DAGs and sagas that roll back, child workflows) run on 3 worker processes. The
driver creates them in waves and, once per wave, SIGKILLs a random worker and starts a new one,
10 times. Afterwards the recorded history is compared with the side-effect ledger the steps
append to (``tests/_procs.py``) and with what each instance's params imply.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from stepline import Engine, InstanceRecord, StepRecord
from stepline.records import Attempt, StepKind

from .._procs import ROOT, Execution, WorkerPool, read_ledger
from ._mix import WAITS, WORKFLOWS, Outcome, Planned, children, events_for, expect, make_mix
from .conftest import say

INSTANCES = 500
WORKERS = 3
KILLS = 8
LEASE = 2.0
"""Short, so a killed worker's instances move on quickly; renewed every third of it (some steps
of ``chaos-sleep`` take longer than the lease: a live worker keeps them)."""
SETTLE = 120.0
"""Bound on the time from the last kill until every instance has ended."""
FORBIDDEN = ["Traceback", " ERROR ", "database is locked"]
TOKEN = re.compile(r"\bT[0-9a-f]{16}\b")


@pytest.fixture
def pools() -> Iterator[list[WorkerPool]]:
    """Pools made by the test; whatever they left running is killed."""
    pools: list[WorkerPool] = []
    yield pools
    for pool in pools:
        pool.cleanup()


@pytest.mark.slow
async def test_workers_killed_under_a_mixed_load(
    store_url: str, tmp_path: Path, chaos_seeds: list[int], pools: list[WorkerPool]
) -> None:
    for seed in chaos_seeds:
        work = tmp_path / f"round-{seed}"
        work.mkdir()
        pool = WorkerPool(store_url, work, lease=LEASE, workflows="tests.chaos._mix")
        pools.append(pool)
        await crash_round(store_url, work, seed, pool)


@dataclass
class Kill:
    at: float
    pid: int
    in_flight: int = 0
    """Its executions that never ended: the kill cut them."""


@dataclass
class Findings:
    """What the check saw, for the report."""

    statuses: Counter[str] = field(default_factory=Counter)
    executions: int = 0
    duplicates: list[str] = field(default_factory=list)
    """Each extra run of a step, with the kill that explains it."""


async def crash_round(url: str, work: Path, seed: int, pool: WorkerPool) -> None:
    rng = random.Random(seed)
    ledger = work / "ledger"
    ledger.mkdir()
    mix = make_mix(rng, INSTANCES, str(ledger), prefix=f"r{seed}-")
    everything = mix + [kid for planned in mix for kid in children(planned)]
    size = -(-INSTANCES // KILLS)
    waves = [mix[k * size : (k + 1) * size] for k in range(KILLS)]
    # wave k is created at offsets[k]; its worker kill comes `kill_after[k]` later
    intervals = [rng.uniform(2.0, 3.2) for _ in range(KILLS)]
    offsets = [sum(intervals[:k]) for k in range(KILLS)]
    kill_after = [rng.uniform(0.3, 1.2) for _ in range(KILLS)]
    sends: list[dict[str, Any]] = []
    for k, wave in enumerate(waves):
        for planned in wave:
            at = offsets[k] + rng.uniform(0.0, 3.0)
            for burst in events_for(planned):
                sends.append(
                    {"at": at, "workflow": planned.workflow, "id": planned.id, "events": burst}
                )
                at += rng.uniform(0.3, 1.5)
    say(
        f"seed {seed}: {len(mix)} instances (+{len(everything) - len(mix)} children) on {url}, "
        f"{WORKERS} workers, lease {LEASE} s, {KILLS} kills, {len(sends)} bursts of events"
    )
    kills: list[Kill] = []
    started = time.monotonic()
    async with Engine(url, WORKFLOWS, worker=False) as client:
        pool.wait_ready([pool.start() for _ in range(WORKERS)])
        already = await finished(client)
        t0 = time.time()
        plan = work / "plan.json"
        plan.write_text(json.dumps({"start": t0, "sends": sends}))
        sender = start_sender(url, work, plan)

        def log() -> str:
            return sender_log(work)

        try:
            for k, wave in enumerate(waves):
                await pause_until(t0 + offsets[k], pool, sender, log)
                await create_wave(client, wave)
                await pause_until(t0 + offsets[k] + kill_after[k], pool, sender, log)
                live = [w for w in pool.workers if w.killed_at is None]
                victim = live[rng.randrange(len(live))]
                pool.kill(victim)
                kills.append(Kill(time.time() - t0, victim.pid))
                last_kill = time.monotonic()
                say(f"kill {k + 1}: pid {victim.pid} at {kills[-1].at:.1f} s")
                pool.start()
                await pause_until(t0 + offsets[k] + intervals[k], pool, sender, log)
            await wait_finished(client, pool, work, everything, already, SETTLE)
            settled = time.monotonic() - last_kill
            assert sender.wait(timeout=60) == 0, f"the event sender failed\n{sender_log(work)}"
            pool.stop_all()
        finally:
            if sender.poll() is None:
                sender.kill()
                sender.wait(timeout=10)
        records = await load(client, everything)
    executions = read_ledger(ledger)
    for kill in kills:
        kill.in_flight = sum(1 for r in executions if r.pid == kill.pid and r.end is None)
    say(
        "kills (s after start, pid, steps cut mid-run): "
        + ", ".join(f"{k.at:.1f} {k.pid} {k.in_flight}" for k in kills)
    )
    findings = check(everything, records, executions, pool.killed, sent_events(work), t0)
    say(
        f"seed {seed}: {len(records)} instances by workflow and status: "
        + ", ".join(f"{key} {n}" for key, n in sorted(findings.statuses.items()))
    )
    say(
        f"seed {seed}: {findings.executions} step executions, {len(findings.duplicates)} extra "
        f"runs, each after a kill of the worker that ran it first; all ended {settled:.1f} s "
        f"after the last kill; {time.monotonic() - started:.1f} s in all"
    )
    for line in findings.duplicates[:60]:
        say(f"  duplicate: {line}")
    if len(findings.duplicates) > 60:
        say(f"  ... and {len(findings.duplicates) - 60} more")
    problems = [
        f"worker {w.pid}: {line}"
        for w in pool.workers
        for line in w.stderr_text().splitlines()
        if any(word in line for word in FORBIDDEN)
    ] + [f"sender: {line}" for line in sender_log(work).splitlines() if "Traceback" in line]
    assert not problems, "\n".join(problems[:40])
    assert sum(k.in_flight for k in kills) >= 1, "no kill cut a step mid-run: it proved nothing"
    assert findings.duplicates, "no step ran again after a kill: the kills proved nothing"


def start_sender(url: str, work: Path, plan: Path) -> subprocess.Popen[bytes]:
    with (work / "sender.out").open("wb") as out, (work / "sender.err").open("wb") as err:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.chaos._mix",
                "--url",
                url,
                "--plan",
                str(plan),
                "--out",
                str(work / "sent.csv"),
            ],
            cwd=ROOT,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )


def sender_log(work: Path) -> str:
    path = work / "sender.err"
    return path.read_text(errors="replace") if path.exists() else ""


def sent_events(work: Path) -> list[tuple[str, str, str, str]]:
    """(workflow, id, type, tag) of every event the sender had acknowledged."""
    path = work / "sent.csv"
    found = []
    for line in path.read_text().split("\n")[:-1] if path.exists() else []:
        _, workflow, instance_id, type_, tag = line.split(",")
        found.append((workflow, instance_id, type_, tag))
    return found


async def pause_until(
    when: float, pool: WorkerPool, sender: subprocess.Popen[bytes], stderr: Callable[[], str]
) -> None:
    """Sleep until the wall-clock time ``when``, failing at once if a process broke."""
    while time.time() < when:
        pool.check_alive()
        if sender.poll() not in (None, 0):
            raise AssertionError(f"the event sender exited with {sender.returncode}\n{stderr()}")
        await asyncio.sleep(min(0.05, max(0.0, when - time.time())))


async def create_wave(client: Engine, wave: list[Planned]) -> None:
    by_workflow: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for planned in wave:
        by_workflow[planned.workflow].append({"id": planned.id, "params": planned.params})
    for name, batch in by_workflow.items():
        await client.workflow(name).create_batch(batch)


async def wait_finished(
    client: Engine,
    pool: WorkerPool,
    work: Path,
    everything: list[Planned],
    already: int,
    timeout: float,
) -> None:
    """Wait until every instance has ended; else fail naming the unfinished ones, with the
    events the sender had acknowledged to each (a wait stuck on one of them lost it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pool.check_alive()
        # earlier rounds' instances are in the same store, all finished
        if await finished(client) >= already + len(everything):
            return
        await asyncio.sleep(0.2)
    records = await load(client, everything)
    acknowledged: dict[str, list[str]] = defaultdict(list)
    for _, instance_id, type_, _ in sent_events(work):
        acknowledged[instance_id].append(type_)
    stuck = [
        f"{p.workflow} {p.id}: {rec.status}, ready_at {rec.ready_at}, lease {rec.lease_owner}, "
        f"steps {[(s.display_name, s.status) for s in steps]}, events acknowledged to it "
        f"{acknowledged.get(p.id, [])}"
        for p in everything
        for rec, steps in [records[p.id]]
        if rec.status not in ("complete", "errored", "terminated")
    ]
    raise AssertionError(
        f"{len(stuck)} instances not finished {timeout} s after the last kill:\n"
        + "\n".join(stuck[:20])
        + f"\nkilled: {pool.killed}\n{pool.report()}"
    )


async def finished(client: Engine) -> int:
    """Instances of the mix's workflows that have ended (one query)."""
    names = {getattr(w, "name", None) for w in WORKFLOWS}
    return sum(
        n
        for info in await client.list_workflows()
        if info.name in names
        for status, n in info.counts.items()
        if status in ("complete", "errored", "terminated")
    )


async def load(
    client: Engine, everything: list[Planned]
) -> dict[str, tuple[InstanceRecord, list[StepRecord]]]:
    async def one(planned: Planned) -> tuple[InstanceRecord, list[StepRecord]]:
        instance = await client.workflow(planned.workflow).get(planned.id)
        return await instance.record(), await instance.steps()

    records: dict[str, tuple[InstanceRecord, list[StepRecord]]] = {}
    for start in range(0, len(everything), 50):
        chunk = everything[start : start + 50]
        for planned, record in zip(chunk, await asyncio.gather(*map(one, chunk)), strict=True):
            records[planned.id] = record
    return records


# -- the check -----------------------------------------------------------------------------------


def check(
    everything: list[Planned],
    records: dict[str, tuple[InstanceRecord, list[StepRecord]]],
    executions: list[Execution],
    killed: dict[int, float],
    sent: list[tuple[str, str, str, str]],
    t0: float,
) -> Findings:
    """Every rule of the scenario; the first violation fails with the instance concerned."""
    found = Findings(executions=len(executions))
    runs: dict[str, list[Execution]] = defaultdict(list)
    for run in executions:
        runs[run.instance].append(run)
    unknown = set(runs) - set(records)
    assert not unknown, f"the ledger shows executions of unknown instances {sorted(unknown)[:5]}"
    for planned in everything:
        record, steps = records[planned.id]
        found.statuses[f"{planned.workflow} {record.status}"] += 1
        where = f"{planned.workflow} {planned.id}"
        check_outcome(where, expect(planned), record, steps)
        found.duplicates += check_runs(where, steps, runs[planned.id], killed, t0)
        check_rollback_order(where, steps)
    check_events(everything, records, sent)
    return found


def check_outcome(
    where: str, outcome: Outcome, record: InstanceRecord, steps: list[StepRecord]
) -> None:
    """The instance is in the state its params imply, with its output, and holds no lease."""
    got = (record.status, record.output, (record.error or {}).get("name"), record.rollback)
    want = (outcome.status, outcome.output, outcome.error, outcome.rollback)
    history = [(s.display_name, s.kind, s.status, s.seq) for s in steps]
    assert got == want, (
        f"{where}: (status, output, error, rollback) {got}, expected {want}; "
        f"error {record.error}; steps {history}"
    )
    assert record.lease_owner is None, f"{where} ended holding a lease of {record.lease_owner}"
    names = [s.name for s in steps]
    assert sorted(names) == sorted(outcome.steps), f"{where} recorded steps {names}"
    for rec in steps:
        status = "errored" if rec.name in outcome.failed else "complete"
        assert rec.status == status, f"{where} step {rec.display_name} is {rec.status}"
        if rec.kind == "do":
            # Interrupted attempts (cut by a kill while recorded as running) are checked
            # against the kills in check_runs. They take an attempt number all the same, and
            # the callbacks fail by number: attempts numbered up to `fails` fail, the rest
            # end as the step does.
            fails = outcome.attempts.get(rec.name, 1) - 1
            last = "failed" if status == "errored" else "success"
            done = [a for a in rec.attempts if a.state != "interrupted"]
            states = [a.state for a in done]
            wanted = ["failed" if a.number <= fails else last for a in done]
            assert states == wanted and done and done[-1].number > fails, (
                f"{where} step {rec.display_name}: attempts "
                f"{[(a.number, a.state) for a in rec.attempts]}, the first {fails} failing"
            )


def recorded_tokens(rec: StepRecord) -> list[tuple[int, str]]:
    """(attempt number, token) of each recorded attempt of a ``do`` step or a rollback that
    ran to its end (not the interrupted ones)."""
    found = []
    for attempt in rec.attempts:
        if attempt.interrupted:
            continue
        text = json.dumps(attempt.error) if attempt.error else json.dumps(rec.output)
        tokens = TOKEN.findall(text)
        assert len(tokens) == 1, f"step {rec.display_name} attempt {attempt}: tokens {tokens}"
        found.append((attempt.number, tokens[0]))
    return found


def check_runs(
    where: str,
    steps: list[StepRecord],
    runs: list[Execution],
    killed: dict[int, float],
    t0: float,
) -> list[str]:
    """The ledger against the record: every recorded attempt's side effect happened (its token
    is in the ledger, from an execution that ended); every other execution of a step is an
    extra run explained by a kill (it ran in a killed worker, before the kill, before the
    recorded run of the same attempt, and at most once per killed worker); no execution of a
    step starts after its recorded result; no instance ran in two workers at once."""
    by_step: dict[str, list[Execution]] = defaultdict(list)
    for run in runs:
        by_step[run.step].append(run)
    recorded = {rec.name: rec for rec in steps if rec.kind in ("do", "rollback")}
    never = set(by_step) - set(recorded)
    assert not never, f"{where}: steps ran but were never recorded: {sorted(never)}"
    duplicates: list[str] = []
    for name, rec in recorded.items():
        step_runs = by_step.get(name, [])
        tokens = {run.token: run for run in step_runs}
        mapped: dict[int, Execution] = {}
        for number, token in recorded_tokens(rec):
            run = tokens.get(token)
            assert run is not None and run.end is not None, (
                f"{where} step {rec.display_name} attempt {number}: its recorded result (token "
                f"{token}) has no finished execution in the ledger: {step_runs}"
            )
            if rec.kind == "do":
                assert run.attempt == number, f"{where} {rec.display_name}: {run} is {number}"
            mapped[number] = run
        final = mapped[max(mapped)]
        # An interrupted attempt was cut by a kill, or never reached its callback (a sync
        # callback still queued for a pool thread when its worker died): it needs no execution
        # in the ledger. Every execution that was cut must still be explained by a kill (below).
        interrupted = {a.number for a in rec.attempts if a.interrupted}
        seen: set[tuple[int, int]] = set()
        for run in step_runs:
            if run in mapped.values():
                continue
            redo = mapped.get(run.attempt) if rec.kind == "do" else final
            if redo is None and run.attempt in interrupted:
                # Recorded as interrupted: the step ran again as the next attempt.
                redo = mapped.get(min((n for n in mapped if n > run.attempt), default=-1))
            explained = (
                run.pid in killed
                and run.start < killed[run.pid]
                and redo is not None
                and run.start < redo.start
                and (run.pid, run.attempt) not in seen
            )
            assert explained, (
                f"{where} step {rec.display_name} ran again without a kill to explain it: "
                f"{run} besides the recorded {redo}; killed workers {killed}"
            )
            seen.add((run.pid, run.attempt))
            cut = "cut mid-run" if run.end is None else "ended, not recorded"
            duplicates.append(
                f"{where} {rec.display_name} attempt {run.attempt}: pid {run.pid} at "
                f"{run.start - t0:.2f} s ({cut}), killed at {killed[run.pid] - t0:.2f} s; "
                f"recorded run pid {redo.pid if redo else '?'}"
            )
        latest = max(step_runs, key=lambda r: r.start)
        assert latest is final, (
            f"{where} step {rec.display_name} ran after its result was recorded: {latest}, "
            f"recorded {final}"
        )
    for a, b in itertools.combinations(runs, 2):
        if a.pid == b.pid:
            continue
        a_end = a.end if a.end is not None else killed.get(a.pid)
        b_end = b.end if b.end is not None else killed.get(b.pid)
        assert a_end is not None and b_end is not None, f"{where}: a run never ended: {a} {b}"
        assert a_end <= b.start or b_end <= a.start, f"{where} ran in two workers at once: {a} {b}"
    return duplicates


def check_rollback_order(where: str, steps: list[StepRecord]) -> None:
    """Rollbacks ran latest-completed step first (by recorded end; ties: later step first)."""
    undone = [s.name.removesuffix(":rollback") for s in steps if s.kind == "rollback"]
    if not undone:
        return
    by_name = {s.name: s for s in steps}
    forward = sorted(
        (by_name[name] for name in undone),
        key=lambda s: (s.ended_at or 0.0, s.seq),
        reverse=True,
    )
    rollbacks = sorted((s for s in steps if s.kind == "rollback"), key=lambda s: s.seq)
    assert [s.name for s in forward] == [s.name.removesuffix(":rollback") for s in rollbacks], (
        f"{where}: rollbacks ran in the order {[s.name for s in rollbacks]}, steps completed "
        f"{[(s.name, s.ended_at) for s in forward]}"
    )
    starts = [s.started_at or 0.0 for s in rollbacks]
    assert starts == sorted(starts), f"{where}: rollbacks overlapped or ran out of order"


def check_events(
    everything: list[Planned],
    records: dict[str, tuple[InstanceRecord, list[StepRecord]]],
    sent: list[tuple[str, str, str, str]],
) -> None:
    """The sender sent every planned event, and each was consumed by the wait meant for it."""
    planned = {
        (p.workflow, p.id, type_, payload["tag"])
        for p in everything
        for burst in events_for(p)
        for type_, payload in burst
    }
    wait_step = {type_: name for name, type_ in WAITS.items()}
    assert sorted(sent) == sorted(planned), (
        f"the sender acknowledged {len(sent)} events, {len(planned)} planned; missing "
        f"{sorted(planned - set(sent))[:5]}"
    )
    for workflow, instance_id, type_, tag in sent:
        record, steps = records[instance_id]
        wait = next((s for s in steps if s.name == wait_step[type_]), None)
        consumed = wait.output.get("payload") if wait and isinstance(wait.output, dict) else None
        assert consumed == {"tag": tag}, (
            f"event lost: {type_} {tag} sent to {workflow} {instance_id}, which is "
            f"{record.status} (ready_at {record.ready_at}); its wait recorded {wait}"
        )


# -- the check's own test: it rejects each violation -------------------------------------------


def _tok(n: int) -> str:
    return f"T{n:016x}"


def _rec(
    name: str, *tokens: int, kind: StepKind = "do", seq: int = 1, ended: float = 0.0
) -> StepRecord:
    """A recorded step whose attempts produced ``tokens`` (all failed but the last)."""
    attempts = [
        Attempt(n, 0.0, 0.0, {"name": "RuntimeError", "message": f"fails (token {_tok(t)})"})
        for n, t in enumerate(tokens[:-1], start=1)
    ]
    attempts.append(Attempt(len(tokens), 0.0, 0.0, None))
    output = {"token": _tok(tokens[-1])}
    return StepRecord(
        name, 1, seq, kind, "complete", output, attempts=tuple(attempts), ended_at=ended
    )


def _run(
    step: str, attempt: int, pid: int, start: float, token: int, end: float | None
) -> Execution:
    return Execution("i", step, attempt, pid, start, _tok(token), end)


def test_the_crash_check_rejects_each_violation() -> None:
    """check_runs, check_rollback_order and check_events accept clean histories and a re-run
    explained by a kill, and reject each rule's violation, so the scenario above can fail."""
    steps = [_rec("s", 1, 2), _rec("t", 3, seq=2)]
    clean = [
        _run("s", 1, 10, 1.0, 1, 1.1),
        _run("s", 2, 10, 2.0, 2, 2.1),
        _run("t", 1, 10, 3.0, 3, 3.1),
    ]
    assert check_runs("i", steps, clean, {}, 0.0) == []
    cut = _run("s", 2, 20, 1.5, 9, None)  # worker 20 killed at 1.6 mid-attempt 2
    assert len(check_runs("i", steps, [*clean, cut], {20: 1.6}, 0.0)) == 1
    cases = [
        ([*clean, _run("s", 2, 11, 1.5, 9, 1.55)], {}, "without a kill"),
        ([*clean, _run("s", 2, 20, 2.5, 9, 2.6)], {20: 3.0}, "without a kill"),
        ([*clean, _run("s", 2, 20, 1.7, 9, None)], {20: 1.6}, "without a kill"),
        ([*clean, cut, _run("s", 2, 20, 1.55, 8, 1.58)], {20: 1.6}, "without a kill"),
        (clean[:1] + clean[2:], {}, "no finished execution"),
        ([clean[0], _run("s", 2, 10, 2.0, 2, None), clean[2]], {}, "no finished execution"),
        ([*clean, _run("u", 1, 10, 4.0, 5, 4.1)], {}, "never recorded"),
        ([*clean[:2], _run("t", 1, 11, 2.05, 3, 3.1)], {}, "two workers at once"),
    ]
    for runs, killed, message in cases:
        with pytest.raises(AssertionError, match=message):
            check_runs("i", steps, runs, killed, 0.0)
    forward = [_rec("a", 1, seq=1, ended=1.0), _rec("b", 2, seq=2, ended=2.0)]
    undo_b, undo_a = (
        _rec("b:rollback", 3, kind="rollback", seq=3),
        _rec("a:rollback", 4, kind="rollback", seq=4),
    )
    check_rollback_order("i", [*forward, undo_b, undo_a])
    swapped = [replace(undo_a, seq=3), replace(undo_b, seq=4)]
    with pytest.raises(AssertionError, match="rollbacks ran in the order"):
        check_rollback_order("i", [*forward, *swapped])
    planned = Planned("chaos-event", "i", {t: f"tag-{t}" for t in WAITS.values()})
    record = InstanceRecord(
        1, "chaos-event", "i", "complete", None, None, None, None, "api", 0.0, 0.0, None, None
    )
    waits = [
        StepRecord(name, 1, n, "wait_for_event", "complete", {"payload": {"tag": f"tag-{t}"}})
        for n, (name, t) in enumerate(WAITS.items())
    ]
    sent = [("chaos-event", "i", t, f"tag-{t}") for burst in events_for(planned) for t, _ in burst]
    check_events([planned], {"i": (record, waits)}, sent)
    with pytest.raises(AssertionError, match="sender acknowledged"):
        check_events([planned], {"i": (record, waits)}, sent[1:])
    with pytest.raises(AssertionError, match="event lost: pack"):
        check_events([planned], {"i": (record, waits[:3])}, sent)
