"""Helpers for process-level tests: a ledger workflow, a worker entry point, a process pool and
the checks that compare the side-effect ledger with the recorded step history.

The worker side runs as ``python -m tests._procs --url URL [--lease S] [--concurrency N]`` from
the repository root. Everything the workflow needs (ledger directory, step count, step kinds)
comes in the instance params, so one definition serves every test.

The ledger: every step execution appends ``S,...`` when its callback starts and ``E,...`` when it
ends, to a file per worker process, with one unbuffered ``os.write`` on an ``O_APPEND`` descriptor
per line. A ``write`` that returned is in the kernel's page cache and survives SIGKILL of the
process (only a power loss could drop it, which these tests do not simulate, hence no fsync).
Each execution carries a random token that the step also returns, so the check can tell which
execution produced the recorded result.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import itertools
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepline import (
    Engine,
    InstanceStatus,
    StepContext,
    StepRecord,
    Workflow,
    WorkflowEvent,
    WorkflowStep,
)

from ._fileclock import FileClock

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = "ledger-workflow"

# -- worker side: the workflow and its ledger ------------------------------------------------

_fds: dict[str, int] = {}
_fds_lock = threading.Lock()


def _ledger_fd(directory: str) -> int:
    with _fds_lock:
        fd = _fds.get(directory)
        if fd is None:
            path = os.path.join(directory, f"ledger-{os.getpid()}.csv")
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            _fds[directory] = fd
        return fd


def note(directory: str, mark: str, instance_id: str, step: str, attempt: int, token: str) -> None:
    """Append one ledger line (``S`` start or ``E`` end of an execution) for this process."""
    line = f"{mark},{instance_id},{step},{attempt},{os.getpid()},{time.time():.6f},{token}\n"
    os.write(_ledger_fd(directory), line.encode())


def _note(directory: str, mark: str, ctx: StepContext, token: str) -> None:
    note(directory, mark, ctx.instance_id, ctx.step_name, ctx.attempt, token)


def step_kind(params: dict[str, Any], index: int) -> str:
    kinds: list[str] = params.get("kinds") or ["async"]
    return kinds[index % len(kinds)]


def make_step(ledger: str, kind: str, work: float) -> Callable[[StepContext], Any]:
    """A step callback of ``kind`` that notes its start and end in ``ledger``."""

    async def run_async(ctx: StepContext) -> dict[str, Any]:
        token = uuid.uuid4().hex[:16]
        _note(ledger, "S", ctx, token)
        if kind == "async-sleep":
            await asyncio.sleep(work)
        _note(ledger, "E", ctx, token)
        return {"token": token, "pid": os.getpid()}

    def run_sync(ctx: StepContext) -> dict[str, Any]:
        token = uuid.uuid4().hex[:16]
        _note(ledger, "S", ctx, token)
        if kind == "sync-sleep":
            time.sleep(work)
        _note(ledger, "E", ctx, token)
        return {"token": token, "pid": os.getpid()}

    return run_async if kind.startswith("async") else run_sync


class LedgerWorkflow(Workflow):
    """``steps`` steps named ``s0``..``sN``; each notes its execution in the ledger.

    Params: ``ledger`` (directory), ``steps`` (count), ``kinds`` (cycled per step: ``async``,
    ``sync`` (thread pool), ``async-sleep`` / ``sync-sleep`` (take ``work`` seconds)), ``nap``
    (optional: a durable ``step.sleep`` of ``nap`` seconds after step ``nap_after``).
    """

    name = WORKFLOW

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        params: dict[str, Any] = event.payload
        ledger: str = params["ledger"]
        work: float = params.get("work", 0.0)
        tokens: list[str] = []
        for index in range(params["steps"]):
            callback = make_step(ledger, step_kind(params, index), work)
            result = await step.do(f"s{index}", callback)
            tokens.append(result["token"])
            if params.get("nap") and index == params.get("nap_after", 0):
                await step.sleep("nap", params["nap"])
        return {"tokens": tokens}


def expected_steps(params: dict[str, Any]) -> list[str]:
    """The names of the steps an instance records, in start order."""
    names: list[str] = []
    for index in range(params["steps"]):
        names.append(f"s{index}")
        if params.get("nap") and index == params.get("nap_after", 0):
            names.append("nap")
    return names


async def _worker_main(
    url: str,
    lease: float,
    concurrency: int,
    poll: float,
    workflows: str | None,
    clock: str | None = None,
    scheduler_wait: float | None = None,
) -> None:
    # ``--workflows MODULE`` registers that module's ``WORKFLOWS`` (and named ``LIMITS``, if it
    # has any) instead of the ledger workflow
    module = importlib.import_module(workflows) if workflows else None
    registered = module.WORKFLOWS if module else [LedgerWorkflow]
    engine = Engine(
        url,
        registered,
        limits=getattr(module, "LIMITS", ()),
        lease=lease,
        concurrency=concurrency,
        poll_interval=poll,
        clock=FileClock(clock) if clock else None,
    )
    if scheduler_wait is not None:
        # A file clock jumps a minute at a time: look for due ticks often in real time.
        engine.scheduler.max_wait = scheduler_wait
    try:
        await engine.open()
        print(f"ready {os.getpid()}", flush=True)
        await engine.run_worker()
    finally:
        await engine.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="a stepline worker for process-level tests")
    parser.add_argument("--url", required=True)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--poll", type=float, default=0.05)
    parser.add_argument("--workflows", help="a module whose WORKFLOWS list the worker registers")
    parser.add_argument("--clock", help="read the time from this file (tests._fileclock)")
    parser.add_argument("--scheduler-wait", type=float, help="the scheduler's longest sleep")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(
        _worker_main(
            args.url,
            args.lease,
            args.concurrency,
            args.poll,
            args.workflows,
            args.clock,
            args.scheduler_wait,
        )
    )


# -- test side: worker processes -----------------------------------------------------------


@dataclass
class WorkerProc:
    """A worker subprocess with its output files."""

    proc: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path
    killed_at: float | None = None
    stderr_seen: int = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr_text(self) -> str:
        return self.stderr.read_text(errors="replace") if self.stderr.exists() else ""

    def new_errors(self) -> bool:
        """Whether stderr grew since the last call with an ERROR line or a traceback."""
        size = self.stderr.stat().st_size if self.stderr.exists() else 0
        if size <= self.stderr_seen:
            return False
        with self.stderr.open("rb") as f:
            f.seek(self.stderr_seen)
            text = f.read(size - self.stderr_seen)
        self.stderr_seen = size
        return b" ERROR " in text or b"Traceback" in text

    def is_ready(self) -> bool:
        return self.stdout.exists() and "ready" in self.stdout.read_text(errors="replace")


@dataclass
class WorkerPool:
    """Starts worker subprocesses; :meth:`cleanup` kills whatever is left (always call it)."""

    url: str
    logs: Path
    lease: float = 10.0
    concurrency: int = 100
    workflows: str | None = None
    """A module whose ``WORKFLOWS`` the workers register (default: the ledger workflow)."""
    clock: Path | None = None
    """A :class:`~tests._fileclock.FileClock` file the workers read the time from."""
    scheduler_wait: float | None = None
    workers: list[WorkerProc] = field(default_factory=list)

    def start(self) -> WorkerProc:
        n = len(self.workers)
        out, err = self.logs / f"worker-{n}.out", self.logs / f"worker-{n}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests._procs",
                    "--url",
                    self.url,
                    "--lease",
                    str(self.lease),
                    "--concurrency",
                    str(self.concurrency),
                    *(["--workflows", self.workflows] if self.workflows else []),
                    *(["--clock", str(self.clock)] if self.clock else []),
                    *(
                        ["--scheduler-wait", str(self.scheduler_wait)]
                        if self.scheduler_wait is not None
                        else []
                    ),
                ],
                cwd=ROOT,
                stdout=stdout,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
            )
        worker = WorkerProc(proc, out, err)
        self.workers.append(worker)
        return worker

    def wait_ready(self, workers: Iterable[WorkerProc], timeout: float = 30.0) -> None:
        """Wait until each worker has opened the store (printed ``ready``)."""
        pending = list(workers)
        deadline = time.monotonic() + timeout
        while pending:
            for worker in pending:
                if worker.proc.poll() is not None:
                    raise AssertionError(
                        f"worker {worker.pid} exited with {worker.proc.returncode} before it "
                        f"was ready\n{self.report()}"
                    )
            pending = [w for w in pending if not w.is_ready()]
            if pending and time.monotonic() > deadline:
                raise AssertionError(f"workers not ready after {timeout} s\n{self.report()}")
            time.sleep(0.02)

    def kill(self, worker: WorkerProc) -> None:
        """SIGKILL a worker and reap it."""
        worker.proc.send_signal(signal.SIGKILL)
        worker.killed_at = time.time()
        worker.proc.wait(timeout=10)

    def check_alive(self) -> None:
        """Fail if a worker that was not killed on purpose has exited, or has logged an error
        (so that a broken run fails at once instead of at the end of a long wait)."""
        for worker in self.workers:
            if worker.killed_at is None and worker.proc.poll() is not None:
                raise AssertionError(
                    f"worker {worker.pid} exited unexpectedly with {worker.proc.returncode}\n"
                    f"{self.report()}"
                )
            if worker.new_errors():
                raise AssertionError(f"worker {worker.pid} logged an error\n{self.report()}")

    def stop_all(self, timeout: float = 20.0) -> None:
        """SIGTERM the live workers; they must shut down gracefully and exit 0."""
        live = [w for w in self.workers if w.killed_at is None]
        for worker in live:
            worker.proc.send_signal(signal.SIGTERM)
        for worker in live:
            try:
                code = worker.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                raise AssertionError(
                    f"worker {worker.pid} did not stop within {timeout} s of SIGTERM\n"
                    f"{self.report()}"
                ) from None
            assert code == 0, f"worker {worker.pid} exited with {code}\n{self.report()}"

    def cleanup(self) -> None:
        for worker in self.workers:
            if worker.proc.poll() is None:
                worker.proc.kill()
                worker.proc.wait(timeout=10)

    @property
    def killed(self) -> dict[int, float]:
        """``{pid: time of SIGKILL}`` of the workers killed on purpose."""
        return {w.pid: w.killed_at for w in self.workers if w.killed_at is not None}

    def report(self) -> str:
        parts = []
        for n, worker in enumerate(self.workers):
            state = "killed" if worker.killed_at else f"exit {worker.proc.poll()}"
            text = worker.stderr_text()
            tail = text[-4000:] if text else "(empty)"
            parts.append(f"--- worker {n} pid {worker.pid} ({state}) stderr:\n{tail}")
        return "\n".join(parts)

    def verify(
        self,
        records: dict[str, tuple[InstanceStatus, dict[str, Any], list[StepRecord]]],
        executions: list[Execution],
    ) -> Verdict:
        """:func:`check_history` with this pool's kills; a failure quotes the workers' log lines
        about the instance concerned."""
        try:
            return check_history(records, executions, self.killed)
        except AssertionError as exc:
            found = re.search(r"instance (\S+) ", str(exc))
            about = self.lines_about(found.group(1)) if found else []
            raise AssertionError(
                f"{exc}\nkilled workers: {self.killed}\nworker log lines about it:\n"
                + ("\n".join(about) or "(none)")
            ) from None

    def lines_about(self, instance_id: str) -> list[str]:
        pattern = re.compile(rf"/{re.escape(instance_id)}\b")
        return [
            f"worker {worker.pid}: {line}"
            for worker in self.workers
            for line in worker.stderr_text().splitlines()
            if pattern.search(line)
        ]

    def stderr_problems(self, *, forbid: Sequence[str]) -> list[str]:
        """Lines of the workers' stderr that contain one of ``forbid`` (case-insensitive)."""
        found = []
        for worker in self.workers:
            for line in worker.stderr_text().splitlines():
                if any(word.lower() in line.lower() for word in forbid):
                    found.append(f"worker {worker.pid}: {line}")
        return found


async def status_counts(client: Engine) -> dict[str, int]:
    """Instances of the ledger workflow by status (one query)."""
    infos = await client.list_workflows()
    return next((dict(i.counts) for i in infos if i.name == WORKFLOW), {})


async def wait_until(
    client: Engine, pool: WorkerPool, finished: int, timeout: float
) -> dict[str, int]:
    """Poll the database until ``finished`` instances have ended; fail clearly after ``timeout``.

    Also fails at once if a worker that was not killed on purpose has exited.
    """
    deadline = time.monotonic() + timeout
    counts: dict[str, int] = {}
    while time.monotonic() < deadline:
        pool.check_alive()
        counts = await status_counts(client)
        if sum(counts.get(s, 0) for s in ("complete", "errored", "terminated")) >= finished:
            return counts
        await asyncio.sleep(0.05)
    raise AssertionError(
        f"fewer than {finished} instances finished after {timeout} s (by status: {counts})\n"
        f"{pool.report()}"
    )


# -- test side: the ledger and the checks --------------------------------------------------


@dataclass
class Execution:
    """One run of a step callback, as the ledger saw it."""

    instance: str
    step: str
    attempt: int
    pid: int
    start: float
    token: str
    end: float | None = None


class LedgerReader:
    """Reads the ledger files of a directory as they grow: each :meth:`read` parses only the
    lines written since the last, so a test can poll a ledger of many thousand executions
    often without falling behind the workers it watches."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.runs: dict[str, Execution] = {}
        self._read_up_to: dict[Path, int] = {}

    def read(self) -> list[Execution]:
        """Every execution noted so far."""
        for path in sorted(self.directory.glob("ledger-*.csv")):
            start = self._read_up_to.get(path, 0)
            with path.open("rb") as f:
                f.seek(start)
                text = f.read()
            # a writer may be appending right now: only lines that end in a newline are whole
            whole = text[: text.rfind(b"\n") + 1]
            self._read_up_to[path] = start + len(whole)
            for line in whole.decode().split("\n")[:-1]:
                self._note(line)
        return list(self.runs.values())

    def _note(self, line: str) -> None:
        mark, instance, step, attempt, pid, at, token = line.split(",")
        if mark == "S":
            if token in self.runs:
                raise AssertionError(f"ledger token {token} started twice: {line}")
            self.runs[token] = Execution(instance, step, int(attempt), int(pid), float(at), token)
        else:
            run = self.runs.get(token)
            if run is None or run.end is not None:
                raise AssertionError(f"ledger end without a single start: {line}")
            run.end = float(at)


def read_ledger(directory: Path) -> list[Execution]:
    """Every execution noted in the ledger files of ``directory``."""
    return LedgerReader(directory).read()


@dataclass
class Verdict:
    """What the check found, for assertions on the scenario and for printing."""

    instances: int = 0
    executions: int = 0
    reruns: int = 0
    """Executions whose result was not recorded (interrupted by a kill) and so ran again."""
    open_at_kill: int = 0
    """Executions by a killed worker that never ended: the kill hit them mid-step."""
    taken_over: dict[int, int] = field(default_factory=dict)
    """For each killed pid, instances it had started that another worker then finished."""
    multi_worker_instances: int = 0
    """Instances whose steps ran in more than one worker process."""


def check_history(
    records: dict[str, tuple[InstanceStatus, dict[str, Any], list[StepRecord]]],
    executions: list[Execution],
    killed: dict[int, float],
) -> Verdict:
    """Compare the recorded history of every instance with the ledger.

    ``records`` maps an instance id to (status, output, recorded steps) and its params. The rules:

    - every instance is complete; its recorded steps are exactly the workflow's steps, in order,
      each recorded once with one successful attempt (after at most one ``interrupted`` attempt
      per execution cut by a kill), and its output lists the recorded tokens;
    - every recorded ``do`` step was produced by exactly one ledger execution (its token), which
      ran to its end; any other execution of that step was cut short by a kill: it ran in a
      killed worker, started before the recorded one, and each killed worker ran it at most once
      (an interrupted step re-runs at most once per interruption, a recorded step never again);
    - no two executions of one instance overlap in time (an execution cut short ends at the
      kill), so no instance ever ran in two workers at once, and the recorded executions follow
      the step order.
    """
    verdict = Verdict(instances=len(records), executions=len(executions))
    by_instance: dict[str, list[Execution]] = defaultdict(list)
    for run in executions:
        by_instance[run.instance].append(run)
    unknown = set(by_instance) - set(records)
    assert not unknown, f"ledger shows executions of unknown instances {sorted(unknown)[:5]}"
    for instance_id, (status, params, steps) in records.items():
        where = f"instance {instance_id}"
        assert status.status == "complete", f"{where} ended {status.status}: {status.error}"
        names = [s.name for s in steps]
        assert names == expected_steps(params), f"{where} recorded steps {names}"
        for seq, rec in enumerate(steps, start=1):
            assert (rec.count, rec.seq, rec.status) == (1, seq, "complete"), (
                f"{where} step {rec.display_name}: count {rec.count}, seq {rec.seq}, "
                f"status {rec.status}"
            )
        runs = by_instance.get(instance_id, [])
        recorded_runs: list[Execution] = []
        tokens: list[str] = []
        for rec in steps:
            if rec.kind != "do":
                continue
            # One successful attempt, after one interrupted attempt per kill that cut the step
            # while it was recorded as running.
            interrupted = len(rec.attempts) - 1
            assert [a.state for a in rec.attempts] == ["interrupted"] * interrupted + ["success"], (
                f"{where} step {rec.display_name} attempts {rec.attempts}"
            )
            token = rec.output["token"]
            tokens.append(token)
            step_runs = [r for r in runs if r.step == rec.name]
            chosen = [r for r in step_runs if r.token == token]
            assert len(chosen) == 1 and chosen[0].end is not None, (
                f"{where} step {rec.display_name}: the recorded result (token {token}) does not "
                f"match one finished ledger execution: {step_runs}"
            )
            recorded = chosen[0]
            recorded_runs.append(recorded)
            others = [r for r in step_runs if r is not recorded]
            seen_pids: set[int] = set()
            for other in others:
                assert other.pid in killed, (
                    f"{where} step {rec.display_name} ran again although no worker running it "
                    f"was killed: recorded {recorded}, also {other}"
                )
                assert other.start < recorded.start, (
                    f"{where} step {rec.display_name} ran after its result was recorded: "
                    f"recorded {recorded}, later {other}"
                )
                assert other.pid not in seen_pids, (
                    f"{where} step {rec.display_name} ran twice in killed worker {other.pid}"
                )
                seen_pids.add(other.pid)
            assert interrupted <= len(others), (
                f"{where} step {rec.display_name}: {interrupted} interrupted attempts but only "
                f"{len(others)} cut executions: {others}"
            )
            verdict.reruns += len(others)
        assert status.output == {"tokens": tokens}, f"{where} output {status.output}"
        starts = [r.start for r in recorded_runs]
        assert starts == sorted(starts), f"{where} steps recorded out of order: {recorded_runs}"
        ordered = sorted(runs, key=lambda r: r.start)
        for before, after in itertools.pairwise(ordered):
            end = before.end if before.end is not None else killed.get(before.pid)
            assert end is not None, f"{where}: execution never ended in a live worker: {before}"
            assert end <= after.start, (
                f"{where} ran twice at once: {before} (until {end}) overlaps {after}"
            )
        pids = {r.pid for r in runs}
        if len(pids) > 1:
            verdict.multi_worker_instances += 1
        last_pid = recorded_runs[-1].pid if recorded_runs else None
        for pid in pids & set(killed):
            if last_pid != pid:
                verdict.taken_over[pid] = verdict.taken_over.get(pid, 0) + 1
        verdict.open_at_kill += sum(1 for r in runs if r.end is None)
    return verdict


async def load_records(
    client: Engine, ids: Sequence[str], params: dict[str, Any]
) -> dict[str, tuple[InstanceStatus, dict[str, Any], list[StepRecord]]]:
    """Status and recorded steps of every instance, read through the client API."""
    binding = client.workflow(WORKFLOW)

    async def one(instance_id: str) -> tuple[InstanceStatus, dict[str, Any], list[StepRecord]]:
        handle = await binding.get(instance_id)
        return await handle.status(), params, await handle.steps()

    records: dict[str, tuple[InstanceStatus, dict[str, Any], list[StepRecord]]] = {}
    for start in range(0, len(ids), 50):  # a few at once: PostgreSQL reads overlap
        chunk = ids[start : start + 50]
        for instance_id, record in zip(
            chunk, await asyncio.gather(*(one(i) for i in chunk)), strict=True
        ):
            records[instance_id] = record
    return records


if __name__ == "__main__":
    main()
