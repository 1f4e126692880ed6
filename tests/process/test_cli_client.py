"""The CLI as a client of an existing database, run as a subprocess (helpers of test_cli.py).

Client commands never create a database (a mistyped path exits 2 naming the file; ``stepline
db init``, a worker or ``run`` create it); ``serve`` without ``--worker`` likewise. Params and
payloads from a file or stdin. ``describe`` lists the instance's events. ``stepline worker``:
``--lease`` / ``--grace-period``, and a SIGTERM during its start-up exits cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from stepline import Engine, WorkflowEvent, WorkflowStep, workflow
from stepline.store.migrations import load_migrations
from stepline.store.sqlite.db import migrate as apply_migrations

from .._pg import drop_schema, pg_admin_url
from .test_cli import as_json, cli_env, in_parallel, make_project, ok, stepline, wait_for

pytestmark = pytest.mark.slow


def run_cli(
    project: Path, *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stepline.cli", *args],
        cwd=project,
        input=stdin,
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=timeout,
    )


def read_instance(project: Path, workflow_name: str, instance_id: str) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        url = f"sqlite:///{project / 'stepline.db'}"
        async with Engine(url, worker=False, create=False) as engine:
            instance = await engine.get_instance(workflow_name, instance_id)
            return (await instance.record()).to_json()

    return asyncio.run(read())


# -- a missing database ------------------------------------------------------------------------

CLIENT_COMMANDS = [
    ["workflows", "trigger", "greeting"],
    ["workflows", "trigger", "greeting", '{"name": "x"}', "--id", "t1"],
    ["workflows", "instances", "list", "greeting"],
    ["workflows", "instances", "describe", "greeting", "latest"],
    ["workflows", "instances", "send-event", "greeting", "g1", "--type", "go"],
    ["workflows", "instances", "pause", "greeting", "g1"],
    ["workflows", "instances", "resume", "greeting", "g1"],
    ["workflows", "instances", "terminate", "greeting", "g1"],
    ["workflows", "instances", "restart", "greeting", "g1"],
    ["workflows", "instances", "terminate-all", "greeting"],
    ["workflows", "instances", "delete", "greeting", "g1"],
    ["workflows", "instances", "delete", "greeting", "--older-than", "1 day"],
    ["workers", "list"],
    ["schedules", "list"],
    ["schedules", "pause", "nightly"],
    ["schedules", "resume", "nightly"],
    ["schedules", "trigger", "nightly", "--at", "0"],
    ["schedules", "backfill", "nightly", "--from", "0", "--to", "60"],
]


def test_client_commands_never_create_a_database(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    typo = tmp_path / "typo" / "x.db"
    results = in_parallel(
        project, [["--database", f"sqlite:///{typo}", *args] for args in CLIENT_COMMANDS]
    )
    problems = []
    for args, result in zip(CLIENT_COMMANDS, results, strict=True):
        expected = f"Error: no stepline database at {typo} (from --database); create it with "
        if (
            result.returncode != 2
            or not result.stderr.startswith(expected)
            or "`stepline db init`" not in result.stderr
            or len(result.stderr.strip().splitlines()) != 1
        ):
            problems.append(f"{args}: exit {result.returncode}, {result.stderr!r}")
    assert not problems, "\n".join(problems)
    assert not (tmp_path / "typo").exists()
    # The default database, next to stepline.toml, is not created by a trigger either.
    default = stepline(project, "workflows", "trigger", "greeting")
    assert default.returncode == 2
    assert f"no stepline database at {project / 'stepline.db'} (the default, next to" in (
        default.stderr
    )
    assert not (project / "stepline.db").exists()


def test_db_init_creates_the_database_then_clients_use_it(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    nested = tmp_path / "data" / "app.db"
    url = f"sqlite:///{nested}"
    latest = load_migrations("sqlite")[-1].version
    created = ok(project, "--database", url, "db", "init")
    assert created.strip() == f"🗄 Created {nested}, schema version {latest} (from --database)"
    assert as_json(project, "--database", url, "db", "init") == {
        "database": str(nested),
        "created": False,
        "version": latest,
        "previous_version": latest,
    }
    again = ok(project, "--database", url, "db", "init")
    assert again.strip() == (f"🗄 Schema up to date in {nested}: version {latest} (from --database)")
    triggered = as_json(project, "--database", url, "workflows", "trigger", "greeting")
    assert triggered["status"] == "queued"


def test_db_init_upgrades_an_older_sqlite_schema_and_says_so(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    old = tmp_path / "old.db"
    migrations = load_migrations("sqlite")
    with contextlib.closing(sqlite3.connect(old, isolation_level=None)) as conn:
        apply_migrations(conn, migrations[:1])
    upgraded = ok(project, "--database", f"sqlite:///{old}", "db", "init")
    assert upgraded.strip() == (
        f"🗄 Upgraded {old} from schema version 1 to {migrations[-1].version} (from --database)"
    )


@pytest.mark.postgres
def test_db_init_creates_a_new_postgresql_schema_and_says_so(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    base = pg_admin_url()
    url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
    latest = load_migrations("postgres")[-1].version
    try:
        created = ok(project, "--database", url, "db", "init")
        assert created.strip() == (
            f'🗄 Created schema "{schema}" of the PostgreSQL database, schema version {latest} '
            "(from --database)"
        )
        again = as_json(project, "--database", url, "db", "init")
        assert again == {
            "database": "the PostgreSQL database",
            "schema": schema,
            "created": False,
            "version": latest,
            "previous_version": latest,
        }
        same = ok(project, "--database", url, "db", "init")
        assert same.strip() == (
            f'🗄 Schema up to date in schema "{schema}" of the PostgreSQL database: version '
            f"{latest} (from --database)"
        )
    finally:
        drop_schema(base, schema)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_without_a_worker_refuses_a_missing_database(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    typo = tmp_path / "typo" / "x.db"
    args = ["--database", f"sqlite:///{typo}", "serve", "--port", str(_free_port())]
    result = run_cli(project, *args, timeout=30)
    assert result.returncode == 2, result.stderr
    assert f"no stepline database at {typo} (from --database)" in result.stderr
    assert "`stepline db init`" in result.stderr and "--worker" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "typo").exists()


# -- params and payloads from a file or stdin --------------------------------------------------


def test_params_and_payloads_from_a_file_or_stdin(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    ok(project, "db", "init")
    big = {"name": "Ada", "notes": "x" * 300_000}  # over Linux's 128 KiB limit per argument
    (project / "params.json").write_text(json.dumps(big), encoding="utf-8")
    out = as_json(
        project, "workflows", "trigger", "greeting", "--params-file", "params.json", "--id", "f1"
    )
    assert out["id"] == "f1"
    assert read_instance(project, "greeting", "f1")["params"] == big
    piped = run_cli(
        project,
        *("workflows", "trigger", "greeting", "--params-file", "-", "--id", "s1"),
        stdin='{"name": "from stdin ü"}',
    )
    assert piped.returncode == 0, piped.stderr
    assert read_instance(project, "greeting", "s1")["params"] == {"name": "from stdin ü"}

    sent = run_cli(
        project,
        *("workflows", "instances", "send-event", "greeting", "s1", "--type", "go"),
        *("--payload-file", "-", "--json"),
        stdin='[1, {"two": 2}]',
    )
    assert sent.returncode == 0, sent.stderr

    ran = run_cli(project, "run", "greeting", "--params-file", "-", "--json", stdin='{"name": "R"}')
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["output"] == {"greeting": "hello R"}

    SEND = ["workflows", "instances", "send-event", "greeting", "s1", "--type", "go"]
    (project / "bad.json").write_text("{nope", encoding="utf-8")
    (project / "latin1.json").write_bytes(b'{"name": "\xe9"}')
    bad = [
        (
            ["workflows", "trigger", "greeting", "{}", "--params-file", "params.json"],
            "Error: give PARAMS_JSON or --params-file, not both",
        ),
        (
            ["run", "greeting", "{}", "--params-file", "params.json"],
            "Error: give PARAMS_JSON or --params-file, not both",
        ),
        (
            [*SEND, "--payload", "1", "--payload-file", "params.json"],
            "Error: give --payload or --payload-file, not both",
        ),
        (
            ["workflows", "trigger", "greeting", "--params-file", "bad.json"],
            "Error: --params-file bad.json is not valid JSON",
        ),
        (
            ["workflows", "trigger", "greeting", "--params-file", "latin1.json"],
            "Error: --params-file latin1.json is not UTF-8 text",
        ),
        (
            ["workflows", "trigger", "greeting", "--params-file", "missing.json"],
            "Error: cannot read --params-file missing.json: No such file or directory",
        ),
    ]
    results = in_parallel(project, [args for args, _ in bad])
    problems = [
        f"{args}: exit {r.returncode}, {r.stderr!r}"
        for (args, expected), r in zip(bad, results, strict=True)
        if r.returncode != 2 or expected not in r.stderr or "Traceback" in r.stderr or r.stdout
    ]
    assert not problems, "\n".join(problems)
    ids = {i["id"] for i in as_json(project, "workflows", "instances", "list", "greeting")}
    assert len(ids) == 3 and {"f1", "s1"} <= ids  # the refused ones created nothing


# -- describe lists the events -------------------------------------------------------------------


@workflow(name="approval")
async def approval(event: WorkflowEvent, step: WorkflowStep) -> Any:
    approved = await step.wait_for_event("approval", type="approved", timeout="1 hour")
    return approved.payload


def test_describe_lists_pending_and_consumed_events(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    url = f"sqlite:///{project / 'stepline.db'}"

    async def drive(send: bool) -> None:
        async with Engine(url, [approval], worker=False) as engine:
            if not send:
                await engine.workflow("approval").create("a1")
            while await engine.worker.run_once():
                pass

    asyncio.run(drive(send=False))
    for event_type, payload in (("noise", '{"n": 1}'), ("approved", '"by ada"')):
        ok(project, "workflows", "instances", "send-event", "approval", "a1",
           "--type", event_type, "--payload", payload)  # fmt: skip
    asyncio.run(drive(send=True))
    text = ok(project, "workflows", "instances", "describe", "approval", "a1")
    events_part = text.split("Events:", 1)[1]
    rows = [line for line in events_part.splitlines() if line.startswith("│")]
    assert [cell.strip() for cell in rows[0].split("│")[1:-1]] == [
        "Type",
        "Sent",
        "Consumed by",
        "Payload",
    ]
    assert "noise" in rows[1] and "⏳ Pending" in rows[1] and '{"n":1}' in rows[1]
    assert "approved" in rows[2] and "approval-1" in rows[2] and '"by ada"' in rows[2]
    quiet = ok(project, "workflows", "instances", "describe", "approval", "a1", "--no-step-output")
    assert "Events:" in quiet and '{"n":1}' not in quiet and "Payload" not in quiet
    data = as_json(project, "workflows", "instances", "describe", "approval", "a1")
    assert [(e["type"], e["payload"], e["consumed_by"]) for e in data["events"]] == [
        ("noise", {"n": 1}, None),
        ("approved", "by ada", "approval-1"),
    ]
    assert all(isinstance(e["sent_at"], float) for e in data["events"])


# -- stepline worker: flags and start-up signals ------------------------------------------------


def _start(project: Path, log: Path, *args: str) -> subprocess.Popen[str]:
    handle = log.open("w", encoding="utf-8")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "stepline.cli", "worker", *args],
            cwd=project,
            env=cli_env(),
            stdout=handle,
            stderr=subprocess.STDOUT,
            text=True,
        )
    finally:
        handle.close()


def _wait_exit(proc: subprocess.Popen[str], timeout: float = 30) -> int:
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_worker_lease_and_grace_period_flags(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    bad = in_parallel(
        project,
        [
            ["worker", "--lease", "soon"],
            ["worker", "--grace-period", "-1"],
            ["worker", "--lease", "10 milliseconds"],
        ],
    )
    expected = [
        "Error: invalid --lease 'soon': it is not a duration",
        "Error: invalid --grace-period '-1': it must not be negative",
        "Error: invalid --lease '10 milliseconds': it must be at least 0.1 seconds",
    ]
    for result, message in zip(bad, expected, strict=True):
        assert result.returncode == 2 and result.stderr.startswith(message), result.stderr
        assert "Traceback" not in result.stderr
    log = tmp_path / "worker.log"
    # A bare number is seconds, as in stepline.toml.
    proc = _start(project, log, "--lease", "7", "--grace-period", "3 seconds")
    try:
        wait_for(lambda: "started for" in log.read_text(), "the worker to start")
        assert "lease 7 seconds, grace period 3 seconds" in log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert _wait_exit(proc) == 0, log.read_text()
    # Without the flags, [worker] in stepline.toml decides.
    proc = _start(project, log)
    try:
        wait_for(lambda: "started for" in log.read_text(), "the worker to start")
        assert "lease 5 seconds, grace period 10 seconds" in log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert _wait_exit(proc) == 0, log.read_text()


SLOW_IMPORT = """
import time
from pathlib import Path

from stepline import Workflow

Path(__file__).with_name("importing").touch()
time.sleep(60)


class Never(Workflow):
    name = "never"

    async def run(self, event, step):
        return None
"""


def test_sigterm_while_importing_workflows_exits_cleanly(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    (project / "slow_flows.py").write_text(SLOW_IMPORT, encoding="utf-8")
    log = tmp_path / "worker.log"
    proc = _start(project, log, "slow_flows.py:Never")
    wait_for(lambda: (project / "importing").exists(), "the import to begin")
    proc.send_signal(signal.SIGTERM)
    code = _wait_exit(proc, timeout=20)
    output = log.read_text()
    assert code == 0, output
    assert output.strip() == "stopped by SIGTERM before the worker started (nothing claimed)"


def test_sigterm_while_the_store_opens_exits_cleanly_and_claims_nothing(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    ok(project, "db", "init")
    ok(project, "workflows", "trigger", "greeting", "--id", "g1")
    log = tmp_path / "worker.log"
    holder = sqlite3.connect(project / "stepline.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # the worker's migration step waits for this lock
        proc = _start(project, log)
        wait_for(lambda: "worker on" in log.read_text(), "the worker to open the store")
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert proc.poll() is None  # still waiting for the lock
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    code = _wait_exit(proc)
    output = log.read_text()
    assert code == 0, output
    assert "stopping before the worker started" in output
    assert "Traceback" not in output and "started for" not in output
    assert read_instance(project, "greeting", "g1")["status"] == "queued"
