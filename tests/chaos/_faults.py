"""Helpers of the worker-fault scenarios: `stepline worker` processes, a SIGSTOP that lands at a
quiet moment, and the lease fields of an instance read straight from the database.

The worker processes are the ones of :mod:`tests._procs` (ledger workflow, :class:`WorkerPool`
for logs, reports and clean-up); :func:`start_cli_worker` adds one that runs the real
``stepline worker`` command instead, configured by a ``stepline.toml``.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from stepline.store.postgres import split_url

from .._procs import ROOT, WorkerPool, WorkerProc


def write_config(path: Path, url: str, *, lease: float, grace: float) -> Path:
    """A ``stepline.toml`` for ``stepline worker``: the database and the ``[worker]`` section."""
    path.write_text(
        f'database = "{url}"\n\n'
        "[worker]\n"
        f"lease = {lease}\n"
        f"grace_period = {grace}\n"
        "poll_interval = 0.1\n"
    )
    return path


def start_cli_worker(pool: WorkerPool, config: Path) -> WorkerProc:
    """Start ``stepline --config CONFIG worker tests._procs:LedgerWorkflow`` as one of ``pool``'s
    workers (so that the pool reports and cleans it up like its own)."""
    n = len(pool.workers)
    out, err = pool.logs / f"worker-{n}.out", pool.logs / f"worker-{n}.err"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stepline.cli",
                "--config",
                str(config),
                "worker",
                "tests._procs:LedgerWorkflow",
            ],
            cwd=ROOT,
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    worker = WorkerProc(proc, out, err)
    pool.workers.append(worker)
    return worker


def wait_cli_ready(pool: WorkerPool, worker: WorkerProc, timeout: float = 30.0) -> None:
    """Wait until a ``stepline worker`` process has opened the store and started its loop."""
    deadline = time.monotonic() + timeout
    while "started for" not in worker.stderr_text():
        if worker.proc.poll() is not None:
            raise AssertionError(f"worker {worker.pid} exited early\n{pool.report()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"worker {worker.pid} not ready in {timeout} s\n{pool.report()}")
        time.sleep(0.02)


@dataclass(frozen=True)
class LeaseRow:
    status: str
    lease_owner: str | None
    lease_expires_at: float | None
    lease_token: int
    ready_at: float | None


_COLUMNS = "status, lease_owner, lease_expires_at, lease_token, ready_at"


def lease_row(url: str, instance_id: str) -> LeaseRow:
    """The lease fields of instance ``instance_id`` as stored (no stepline code in between)."""
    row: Any
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///"), timeout=10) as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM instances WHERE id = ?", (instance_id,)
            ).fetchone()
    else:
        conninfo, schema = split_url(url)
        query = sql.SQL("SELECT {} FROM {}.instances WHERE id = %s").format(
            sql.SQL(_COLUMNS), sql.Identifier(schema)
        )
        with psycopg.connect(conninfo, autocommit=True) as conn:
            row = conn.execute(query, (instance_id,)).fetchone()
    assert row is not None, f"no instance {instance_id}"
    return LeaseRow(*row)


def holds_database_locks(url: str) -> bool:
    """Whether some process is inside a write transaction (SQLite) or holds a lock on one of the
    schema's tables (PostgreSQL) right now."""
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=0, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return False
        except sqlite3.OperationalError:
            return True
        finally:
            conn.close()
    conninfo, schema = split_url(url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND l.pid <> pg_backend_pid()",
            (schema,),
        ).fetchone()
    return bool(row and row[0])


def quiet_stop(url: str, worker: WorkerProc, tries: int = 50) -> None:
    """SIGSTOP ``worker`` at a moment it holds no database lock (a stop inside a transaction
    would block every other process, which is a different scenario from a paused worker)."""
    for _ in range(tries):
        worker.proc.send_signal(signal.SIGSTOP)
        if not holds_database_locks(url):
            return
        worker.proc.send_signal(signal.SIGCONT)
        time.sleep(0.03)
    raise AssertionError(f"worker {worker.pid} held a database lock at every try")


def wait_exit(worker: WorkerProc, timeout: float, what: str, pool: WorkerPool) -> float:
    """Wait for ``worker`` to exit; return how long it took; fail with the logs after
    ``timeout``."""
    started = time.monotonic()
    try:
        worker.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"worker {worker.pid} did not exit within {timeout} s of {what}\n{pool.report()}"
        ) from None
    return time.monotonic() - started
