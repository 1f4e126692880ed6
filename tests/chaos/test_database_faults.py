"""Database faults: killed PostgreSQL connections, a PostgreSQL server stopped and started again,
SQLite writers contending with a long read transaction.

Worker processes (``python -m tests._procs``) run ledger instances (steps recording all the time)
and waiters (each needs one event from the client) while the client, in this process, keeps
creating instances and sending events. What every scenario checks afterwards:

- every create and send_event that returned is reflected in the end state: each instance
  acknowledged exists and completes, each waiter ends with the payload of its event;
- calls made during an outage either succeed or fail with :class:`StoreUnavailableError` saying
  the database is unreachable, and none takes longer than the store's retry period (plus slack
  for a loaded machine);
- no recorded step runs again (no worker was killed, so the ledger allows no re-run at all);
- every process logs one line when an outage begins and one when it ends, nothing else: no
  line per failed statement, no traceback, no error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from stepline import Engine, StoreError
from stepline.errors import IllegalStateError, StoreUnavailableError
from stepline.store.postgres import PostgresStore
from stepline.store.sqlite import SqliteStore

from .._pg import connect, drop_schema, pg_admin_url
from .._procs import (
    WORKFLOW,
    WorkerPool,
    check_history,
    load_records,
    read_ledger,
    status_counts,
)
from ._dbflows import WAITER, WORKFLOWS
from ._pgserver import PgServer
from .conftest import say

pytestmark = pytest.mark.slow

LOST = re.compile(r"lost the connection to PostgreSQL at|stayed locked by another connection for")
BACK = re.compile(r"reconnected to PostgreSQL at|is writable again after")
UNDONE_CLAIM = re.compile(
    # Its own worker claims the instance again, or another worker does and fences it out.
    r"WARNING stepline\.worker: (instance \S+ abandoned: lease on instance|lease lost on \S+$)"
)
NOISE = re.compile(r" (WARNING|ERROR|CRITICAL) |Traceback")

LEDGER_KINDS = ["async-sleep", "sync", "async", "sync-sleep"]


# -- the client's traffic --------------------------------------------------------------------


@dataclass
class Call:
    kind: str
    target: str
    seconds: float
    error: BaseException | None


@dataclass
class Traffic:
    """Creates ledger instances and waiters and sends each waiter its event, remembering what
    was acknowledged and what failed (to be done again once the database is back)."""

    client: Engine
    rng: random.Random
    params: dict[str, Any]
    prefix: str
    calls: list[Call] = field(default_factory=list)
    ledger_ids: list[str] = field(default_factory=list)
    waiters: list[str] = field(default_factory=list)
    unsent: list[str] = field(default_factory=list)
    """Waiters whose create was acknowledged and whose event was not (yet)."""
    retry_creates: list[tuple[str, str]] = field(default_factory=list)
    _n: int = 0

    async def _call(self, kind: str, target: str, make: Callable[[], Awaitable[Any]]) -> bool:
        started = time.monotonic()
        error: BaseException | None = None
        try:
            await make()
        except StoreError as exc:
            error = exc
        self.calls.append(Call(kind, target, time.monotonic() - started, error))
        return error is None

    async def one(self) -> None:
        choice = self.rng.random()
        if self.unsent and choice < 0.35:
            target = self.unsent.pop(self.rng.randrange(len(self.unsent)))

            if not await self._call("send", target, lambda: self._send(target)):
                self.unsent.append(target)
            return
        self._n += 1
        target = f"{self.prefix}{self._n}"
        if choice < 0.65:
            ok = await self._call(
                "create", target, lambda: self.client.workflow(WORKFLOW).create(target, self.params)
            )
            if ok:
                self.ledger_ids.append(target)
            else:
                self.retry_creates.append((WORKFLOW, target))
        else:
            ok = await self._call(
                "create", target, lambda: self.client.workflow(WAITER).create(target, target)
            )
            if ok:
                self.waiters.append(target)
                self.unsent.append(target)
            else:
                self.retry_creates.append((WAITER, target))

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.one()
            await asyncio.sleep(self.rng.uniform(0.005, 0.03))

    async def complete(self) -> None:
        """Once the database is back: create what failed to be created, send every event not
        acknowledged (a create that failed is done again with create_batch, which skips an id
        that the failed call created after all)."""
        for workflow, target in self.retry_creates:
            params = self.params if workflow == WORKFLOW else target
            await self.client.workflow(workflow).create_batch([{"id": target, "params": params}])
            (self.ledger_ids if workflow == WORKFLOW else self.waiters).append(target)
            if workflow == WAITER:
                self.unsent.append(target)
        self.retry_creates.clear()
        for target in self.unsent:
            await self._send(target)
        self.unsent.clear()

    async def _send(self, target: str) -> None:
        handle = await self.client.workflow(WAITER).get(target)
        try:
            await handle.send_event("go", {"for": target})
        except IllegalStateError:
            # Allowed only where an earlier send said it could not learn whether its change
            # was applied (a commit cut off by the outage): then it was, and the waiter ended.
            if not self._outcome_unknown("send", target):
                raise

    def _outcome_unknown(self, kind: str, target: str) -> bool:
        return any(
            c.kind == kind
            and c.target == target
            and c.error is not None
            and "whether the change was applied" in str(c.error)
            for c in self.calls
        )

    def errors(self) -> list[Call]:
        return [c for c in self.calls if c.error is not None]

    def summary(self) -> str:
        errors = self.errors()
        kinds = Counter(type(c.error).__name__ for c in errors)
        sample = f"; e.g. {errors[0].error}" if errors else ""
        slowest = max((c.seconds for c in self.calls), default=0.0)
        return (
            f"{len(self.calls)} client calls ({len(self.ledger_ids)} ledger instances, "
            f"{len(self.waiters)} waiters), {len(errors)} failed {dict(kinds)}, slowest "
            f"{slowest:.1f} s{sample}"
        )


async def finished_count(client: Engine) -> int:
    infos = await client.list_workflows()
    return sum(
        n
        for info in infos
        for status, n in info.counts.items()
        if status in ("complete", "errored")
    )


async def settle(
    client: Engine, pool: WorkerPool, traffic: Traffic, crashed: float | None = None
) -> None:
    """Wait until every acknowledged instance has ended (failing at once if a worker logged an
    error or died), then check the end state against what was acknowledged.

    ``crashed``: when the database server last crashed (an immediate stop), if it did. A claim
    commits without waiting for its WAL flush, so a crash can undo it after its worker started
    the instance; that activation is then fenced out and the steps it ran whose records had not
    committed run again, as after a kill of the worker (at most once each)."""
    expected = len(traffic.ledger_ids) + len(traffic.waiters)
    timeout = 90.0
    deadline = time.monotonic() + timeout
    while (done := await finished_count(client)) < expected:
        pool.check_alive()
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{done} of {expected} instances ended after {timeout} s\n{pool.report()}"
            )
        await asyncio.sleep(0.1)
    infos = {info.name: dict(info.counts) for info in await client.list_workflows()}
    assert infos.get(WORKFLOW, {}) == {"complete": len(traffic.ledger_ids)}, infos
    assert infos.get(WAITER, {}) == {"complete": len(traffic.waiters)}, infos
    records = await load_records(client, traffic.ledger_ids, traffic.params)
    executions = read_ledger(Path(traffic.params["ledger"]))
    if crashed is None:
        # No worker is killed here: check_history then allows no step to run twice.
        verdict = pool.verify(records, executions)
        assert verdict.reruns == 0, verdict
    else:
        try:
            check_history(records, executions, {w.pid: crashed for w in pool.workers})
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{pool.report()}") from None
    binding = client.workflow(WAITER)
    for target in traffic.waiters:
        status = await (await binding.get(target)).status()
        assert status.output == {"for": target}, (target, status)


# -- logs --------------------------------------------------------------------------------------


@dataclass
class OutageLog:
    lost: list[str]
    back: list[str]
    other: list[str]

    @classmethod
    def of(cls, lines: list[str]) -> OutageLog:
        lost = [line for line in lines if LOST.search(line)]
        back = [line for line in lines if BACK.search(line)]
        other = [line for line in lines if NOISE.search(line) and line not in lost + back]
        return cls(lost, back, other)

    def check(self, who: str, outages: int, *, at_least: int = 0, crashed: bool = False) -> None:
        """One line when each outage began and one when it ended, at most one per outage that
        hit this process (two close together may be one), and nothing else (but, after a crash
        of the server, a line for each activation whose claim the crash undid)."""
        other = [line for line in self.other if not (crashed and UNDONE_CLAIM.search(line))]
        assert not other, f"{who} logged more than its outages:\n" + "\n".join(other)
        assert at_least <= len(self.lost) <= outages, (
            f"{who}: {outages} outages, outage lines:\n" + "\n".join(self.lost)
        )
        assert len(self.back) == len(self.lost), (
            f"{who}: outages and recoveries do not pair up:\n" + "\n".join(self.lost + self.back)
        )


class Captured(logging.Handler):
    """The client's own log lines (this process), formatted like a worker's."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(" " + self.format(record))


@pytest.fixture
def client_log() -> Iterator[Captured]:
    handler = Captured()
    targets = [logging.getLogger(name) for name in ("stepline", "psycopg")]
    for logger in targets:
        logger.addHandler(handler)
    yield handler
    for logger in targets:
        logger.removeHandler(handler)


def ledger_params(directory: Path) -> dict[str, Any]:
    directory.mkdir(parents=True)
    return {"ledger": str(directory), "steps": 4, "kinds": LEDGER_KINDS, "work": 0.05}


# -- PostgreSQL: killed connections ------------------------------------------------------------


def with_app(url: str, app: str) -> str:
    return f"{url}&application_name={app}"


def terminate(admin_url: str, apps: list[str]) -> dict[str, int]:
    """pg_terminate_backend every connection of ``apps``; how many each had."""
    with connect(admin_url) as conn:
        rows = conn.execute(
            "SELECT application_name, count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = ANY(%s) AND pid <> pg_backend_pid()"
            " GROUP BY application_name",
            (apps,),
        ).fetchall()
    return {str(app): int(n) for app, n in rows}


@pytest.mark.postgres
async def test_killed_connections_are_survived_and_logged_once_each(
    chaos_seeds: list[int], tmp_path: Path, client_log: Captured
) -> None:
    """pg_terminate_backend on the connections of workers and client, while instances are
    created, events sent and steps recorded: nothing acknowledged is lost, nothing runs twice,
    and each process logs each hit once (and its recovery)."""
    admin = pg_admin_url()
    for seed in chaos_seeds:
        rng = random.Random(seed)
        schema = f"chaos_{uuid.uuid4().hex[:10]}"
        base = f"{admin}{'&' if '?' in admin else '?'}schema={schema}"
        tag = uuid.uuid4().hex[:8]
        apps = {name: f"chaos-{tag}-{name}" for name in ("w0", "w1", "w2", "client")}
        logs = tmp_path / f"seed-{seed}"
        logs.mkdir()
        pool = WorkerPool(base, logs, lease=10.0, workflows="tests.chaos._dbflows")
        client_log.lines.clear()
        try:
            for name in ("w0", "w1", "w2"):
                pool.url = with_app(base, apps[name])  # one name per worker: kills aim at one
                pool.start()
            pool.wait_ready(pool.workers)
            async with Engine(with_app(base, apps["client"]), WORKFLOWS, worker=False) as client:
                traffic = Traffic(client, rng, ledger_params(logs / "ledger"), "i")
                stop = asyncio.Event()
                drivers = [asyncio.create_task(traffic.run(stop)) for _ in range(2)]
                hits: Counter[str] = Counter()
                started = time.monotonic()
                await asyncio.sleep(rng.uniform(0.3, 0.8))
                for n in range(6):
                    one_worker = [rng.choice(["w0", "w1", "w2"])]
                    targets = rng.choice([list(apps), ["w0", "w1", "w2"], one_worker, ["client"]])
                    killed = await asyncio.to_thread(
                        terminate, admin, [apps[name] for name in targets]
                    )
                    by_name = {name: killed.get(apps[name], 0) for name in targets}
                    hits.update(name for name, count in by_name.items() if count)
                    say(
                        f"seed {seed} kill {n + 1} at +{time.monotonic() - started:.1f} s: "
                        f"backends terminated {by_name}"
                    )
                    await asyncio.sleep(rng.uniform(0.3, 1.0))
                stop.set()
                await asyncio.gather(*drivers)
                assert sum(hits.values()) >= 6, f"hardly any connection was killed: {hits}"
                # With the default 60 s of retries, no call fails for a killed connection.
                assert not traffic.errors(), traffic.summary()
                await traffic.complete()
                await settle(client, pool, traffic)
                say(f"seed {seed}: {traffic.summary()}; processes hit {dict(hits)}")
            pool.stop_all()
            for n, worker in enumerate(pool.workers):
                OutageLog.of(worker.stderr_text().splitlines()).check(
                    f"worker {n} (pid {worker.pid})", hits[f"w{n}"]
                )
            OutageLog.of(client_log.lines).check("the client", hits["client"])
        finally:
            pool.cleanup()
            drop_schema(admin, schema)


# -- PostgreSQL: the server stopped and started again ----------------------------------------

CLIENT_RETRY = 3.0
"""The client's retry period here: a call during an outage must fail within it."""
SLACK = 5.0
"""Added to the retry period for a loaded machine; less than the pool's own 10 s wait for a
connection, which the store once let a call spend past its retry period."""


@pytest.fixture(scope="module")
def pg_server() -> Iterator[PgServer]:
    server = PgServer()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.mark.postgres
async def test_server_stopped_and_started_again_mid_run(
    chaos_seeds: list[int], tmp_path: Path, client_log: Captured, pg_server: PgServer
) -> None:
    """A throwaway server is stopped (fast shutdown, or immediate: a crash to its clients) and
    started again, twice, while workers run steps and the client creates and sends: calls
    during the outage fail within the retry period saying the database is unreachable, every
    acknowledged call is kept, and each process logs each outage once and its end once."""
    for seed in chaos_seeds:
        rng = random.Random(seed)
        url = f"{pg_server.url}?schema=chaos_{seed}"
        logs = tmp_path / f"seed-{seed}"
        logs.mkdir()
        # Leases outlive the outages: the point here is recovery, not takeover.
        pool = WorkerPool(url, logs, lease=30.0, workflows="tests.chaos._dbflows")
        client_log.lines.clear()
        try:
            workers = [pool.start(), pool.start()]
            pool.wait_ready(workers)
            async with Engine(url, WORKFLOWS, worker=False) as client:
                store = client.store
                assert isinstance(store, PostgresStore)
                store.retry_seconds = CLIENT_RETRY
                traffic = Traffic(client, rng, ledger_params(logs / "ledger"), "i")
                stop = asyncio.Event()
                drivers = [asyncio.create_task(traffic.run(stop)) for _ in range(3)]
                started = time.monotonic()
                outages = 2
                crashed: float | None = None
                for n in range(outages):
                    await asyncio.sleep(rng.uniform(1.0, 2.0))
                    mode = rng.choice(["fast", "immediate"])
                    down = time.monotonic()
                    await asyncio.to_thread(pg_server.stop, mode)
                    if mode == "immediate":
                        crashed = time.time()
                    # A call made while the server is down fails within the retry period.
                    probe = time.monotonic()
                    with pytest.raises(StoreUnavailableError, match="database is unreachable"):
                        await client.workflow(WORKFLOW).create(f"probe{n}", traffic.params)
                    took = time.monotonic() - probe
                    await asyncio.sleep(rng.uniform(0.0, 1.5))
                    await asyncio.to_thread(pg_server.start)
                    say(
                        f"seed {seed} outage {n + 1}: {mode} stop at +{down - started:.1f} s, "
                        f"server down {time.monotonic() - down:.1f} s; a create during it "
                        f"failed after {took:.1f} s"
                    )
                    assert took <= CLIENT_RETRY + SLACK, f"a call took {took:.1f} s to fail"
                    traffic.retry_creates.append((WORKFLOW, f"probe{n}"))
                await asyncio.sleep(rng.uniform(0.5, 1.5))
                stop.set()
                await asyncio.gather(*drivers)
                failed = traffic.errors()
                say(f"seed {seed}: {traffic.summary()}")
                assert failed, "no call was made during an outage"
                for call in failed:
                    assert isinstance(call.error, StoreUnavailableError), call
                    assert "database is unreachable" in str(call.error), call
                    assert "Check that the server is running" in str(call.error), call
                slowest = max(c.seconds for c in traffic.calls)
                assert slowest <= CLIENT_RETRY + SLACK, f"a call took {slowest:.1f} s"
                await traffic.complete()
                await settle(client, pool, traffic, crashed)
            pool.stop_all()
            for n, worker in enumerate(pool.workers):
                OutageLog.of(worker.stderr_text().splitlines()).check(
                    f"worker {n} (pid {worker.pid})",
                    outages,
                    at_least=1,
                    crashed=crashed is not None,
                )
            OutageLog.of(client_log.lines).check("the client", outages, at_least=1)
        finally:
            pool.cleanup()


RECOVERY = 6.0
"""Seconds after the server is back by which a call must succeed again (with generous slack)."""


@pytest.mark.postgres
async def test_an_outage_longer_than_the_retry_period_is_survived_quietly(
    chaos_seeds: list[int], tmp_path: Path, client_log: Captured, pg_server: PgServer
) -> None:
    """The server stays down past the store's retry period while an in-process worker runs
    steps: the step writes and claims of that time fail, the activations stop and run again
    once the server is back. Every instance completes, a step re-runs only if its record had
    not committed (at most once), and the outage is still one line (and one for its end), not a
    line per instance or per failed write."""
    for seed in chaos_seeds:
        rng = random.Random(seed)
        url = f"{pg_server.url}?schema=chaos_long_{seed}"
        params = ledger_params(tmp_path / f"seed-{seed}" / "ledger") | {"steps": 8, "work": 0.2}
        client_log.lines.clear()
        async with Engine(url, WORKFLOWS, worker=True, lease=5.0) as engine:
            store = engine.store
            assert isinstance(store, PostgresStore)
            store.retry_seconds = 1.0
            ids = [f"i{n}" for n in range(40)]
            await engine.workflow(WORKFLOW).create_batch([{"id": i, "params": params} for i in ids])
            await asyncio.sleep(rng.uniform(0.3, 0.8))
            before = await status_counts(engine)
            assert before.get("complete", 0) < len(ids), f"all done before the outage: {before}"
            mode = rng.choice(["fast", "immediate"])
            await asyncio.to_thread(pg_server.stop, mode)
            # Long enough that psycopg's own schedule of reconnect attempts (after 1, 3, 7, 15,
            # 31 s) would leave the pool empty for over 10 s after the server is back.
            down = rng.uniform(16.0, 18.0)
            await asyncio.sleep(down)
            await asyncio.to_thread(pg_server.start)
            back = time.time()
            up = time.monotonic()
            while True:
                with contextlib.suppress(StoreUnavailableError):
                    await engine.list_workflows()
                    break
            recovered = time.monotonic() - up
            assert recovered < RECOVERY, f"the first call succeeded {recovered:.1f} s after"
            store.retry_seconds = 60.0
            for instance_id in ids:
                status = await (await engine.workflow(WORKFLOW).get(instance_id)).wait(60)
                assert status.status == "complete", (instance_id, status)
            records = await load_records(engine, ids, params)
        executions = read_ledger(Path(params["ledger"]))
        # One process ran everything; the outage stands for a kill of it at its end.
        verdict = check_history(records, executions, {os.getpid(): back})
        say(
            f"seed {seed}: {mode} stop for {down:.1f} s (retry period 1 s), instances by status "
            f"then {before}; a call succeeded {recovered:.1f} s after the server was back; "
            f"{verdict.reruns} steps ran again; the process logged "
            f"{len(client_log.lines)} lines"
        )
        OutageLog.of(client_log.lines).check(
            "the worker's process", 1, at_least=1, crashed=mode == "immediate"
        )


# -- SQLite: writers of several processes, a long reader, checkpoints ------------------------

HOLDER = r"""
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
for line in sys.stdin:
    command = line.strip()
    if command == "read":  # a read transaction: its snapshot holds back every checkpoint
        conn.execute("BEGIN")
        out = f"reading {conn.execute('SELECT count(*) FROM steps').fetchone()[0]} steps"
    elif command == "write":  # the write lock: every other writer waits
        conn.execute("BEGIN IMMEDIATE")
        out = "writing"
    elif command == "end":
        conn.execute("COMMIT")
        out = "ended"
    else:  # waits for the readers, and holds writers off while it copies the WAL back
        out = f"checkpoint {conn.execute('PRAGMA wal_checkpoint(RESTART)').fetchone()}"
    print(out, flush=True)
"""


class Holder:
    """Another process with its own connection to the SQLite file, told what to hold."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    async def do(self, command: str) -> str:
        def send() -> str:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
            return self.proc.stdout.readline().strip()

        answer = await asyncio.to_thread(send)
        assert answer, f"the holder died on {command!r}"
        return answer

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


SQLITE_RETRY = 1.5
"""The client's lock wait here; longer than the holder's ordinary holds, shorter than its
lock-out."""


async def test_sqlite_writers_contend_with_a_long_reader_and_checkpoints(
    chaos_seeds: list[int], tmp_path: Path, client_log: Captured
) -> None:
    """Three worker processes and the client write to one SQLite file while another process
    holds read transactions open for seconds (holding back checkpoints), takes the write lock
    for a while, and runs RESTART checkpoints: everything acknowledged is kept, nothing runs
    twice, nothing is logged; a call that cannot get the lock within the retry period fails
    with StoreUnavailableError instead of waiting on."""
    for seed in chaos_seeds:
        rng = random.Random(seed)
        logs = tmp_path / f"seed-{seed}"
        logs.mkdir()
        path = logs / "stepline.db"
        url = f"sqlite:///{path}"
        pool = WorkerPool(url, logs, lease=30.0, workflows="tests.chaos._dbflows")
        client_log.lines.clear()
        holder: Holder | None = None
        try:
            async with Engine(url, WORKFLOWS, worker=False) as client:
                store = client.store
                assert isinstance(store, SqliteStore)
                store.retry_seconds = SQLITE_RETRY
                pool.wait_ready([pool.start() for _ in range(3)])
                holder = Holder(path)
                traffic = Traffic(client, rng, ledger_params(logs / "ledger"), "i")
                stop = asyncio.Event()
                drivers = [asyncio.create_task(traffic.run(stop)) for _ in range(3)]
                wal = path.with_name(path.name + "-wal")
                done: Counter[str] = Counter()
                largest_wal = 0
                started = time.monotonic()
                while time.monotonic() - started < 6.0:
                    kind = rng.choice(["read", "read", "write", "checkpoint"])
                    answer = await holder.do(kind)
                    if kind != "checkpoint":
                        held = rng.uniform(0.5, 2.0) if kind == "read" else rng.uniform(0.1, 0.6)
                        await asyncio.sleep(held)
                        await holder.do("end")
                    done[kind] += 1
                    largest_wal = max(largest_wal, wal.stat().st_size if wal.exists() else 0)
                    if kind == "checkpoint":
                        say(f"seed {seed}: {answer}")
                    await asyncio.sleep(rng.uniform(0.05, 0.3))
                # The lock held past the client's retry period: a call fails, and in time.
                await holder.do("write")
                probe = time.monotonic()
                with pytest.raises(StoreUnavailableError, match="stayed locked") as caught:
                    await client.workflow(WORKFLOW).create("probe", traffic.params)
                took = time.monotonic() - probe
                await asyncio.sleep(0.5)
                await holder.do("end")
                traffic.retry_creates.append((WORKFLOW, "probe"))
                say(
                    f"seed {seed}: holder ran {dict(done)} in {time.monotonic() - started:.1f} s, "
                    f"WAL up to {largest_wal // 1024} KiB; with the lock held, a create failed "
                    f"after {took:.1f} s: {caught.value}"
                )
                assert took <= SQLITE_RETRY + SLACK, f"a call took {took:.1f} s to fail"
                await asyncio.sleep(rng.uniform(0.3, 1.0))
                stop.set()
                await asyncio.gather(*drivers)
                say(f"seed {seed}: {traffic.summary()}")
                for call in traffic.errors():
                    assert isinstance(call.error, StoreUnavailableError), call
                slowest = max(c.seconds for c in traffic.calls)
                assert slowest <= SQLITE_RETRY + SLACK, f"a call took {slowest:.1f} s"
                await traffic.complete()
                await settle(client, pool, traffic)
            pool.stop_all()
            for n, worker in enumerate(pool.workers):
                OutageLog.of(worker.stderr_text().splitlines()).check(f"worker {n}", 0)
            # The client's lock-out is one outage (its end: the client's next write).
            OutageLog.of(client_log.lines).check("the client", 1, at_least=1)
        finally:
            if holder is not None:
                holder.close()
            pool.cleanup()
