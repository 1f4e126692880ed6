"""The ``stepline`` CLI, run as a subprocess against a temporary project (SQLite).

Every command, the describe layout, ``--json`` output, the exit code and message of each bad
input, a worker stopped by SIGTERM mid-step and a second worker finishing the work.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from stepline import Engine

from ..conftest import uvloop

pytestmark = pytest.mark.slow

FLOWS = '''
import time
from pathlib import Path

from stepline import Dag, Workflow

HERE = Path(__file__).resolve().parent


class Greeting(Workflow):
    """Greets someone by name."""

    name = "greeting"

    async def run(self, event, step):
        who = await step.do("name", lambda: (event.payload or {}).get("name", "world"))
        return {"greeting": f"hello {who}"}


class Approval(Workflow):
    name = "approval"

    async def run(self, event, step):
        await step.do("prepare", lambda: {"ready": True})
        await step.sleep("nap", "10 milliseconds")
        approved = await step.wait_for_event("approval", type="approved", timeout="1 hour")
        return {"approved_by": approved.payload}


class Failing(Workflow):
    name = "failing"

    async def run(self, event, step):
        def flaky(ctx):
            raise ValueError(f"broken on attempt {ctx.attempt}")

        await step.do("flaky", {"retries": {"limit": 1, "delay": 0}}, flaky)


class Slow(Workflow):
    name = "slow"

    async def run(self, event, step):
        await step.do("first", lambda: 1)

        def slow():
            with (HERE / "slow.log").open("a") as log:
                log.write("start\\n")
            deadline = time.monotonic() + 30
            while not (HERE / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.02)  # the test creates "release" once the worker is stopping
            with (HERE / "slow.log").open("a") as log:
                log.write("end\\n")
            return 2

        await step.do("slow step", slow)
        await step.do("last", lambda: 3)
        return "done"


report = Dag("report", doc="Counts and sums.")


@report.step
def fetch(ctx):
    return {"rows": [1, 2, 3]}


@report.step(depends_on=["fetch"])
def total(ctx):
    return {"total": sum(ctx["rows"])}


@report.step(depends_on=["fetch"])
def count(ctx):
    return {"count": len(ctx["rows"])}
'''

CONFIG = """
[[workflows]]
name = "greeting"
class_name = "flows:Greeting"

[[workflows]]
name = "approval"
class_name = "flows:Approval"

[[workflows]]
name = "failing"
class_name = "flows:Failing"

[[workflows]]
name = "slow"
class_name = "flows:Slow"

[[workflows]]
name = "report"
class_name = "flows:report"

[worker]
lease = "5 seconds"
poll_interval = "50 milliseconds"
grace_period = "10 seconds"
"""

ALL_WORKFLOWS = ["approval", "failing", "greeting", "report", "slow"]


def cli_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("STEPLINE_DATABASE_URL", "FORCE_COLOR", "NO_COLOR")
    }
    env["PYTHONUTF8"] = "1"
    # Cache bytecode outside the source tree so each subprocess does not recompile stepline.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "stepline-test-pycache")
    env.update(extra)
    return env


def stepline(
    project: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stepline.cli", *args],
        cwd=project,
        capture_output=True,
        text=True,
        env=env or cli_env(),
        timeout=timeout,
    )


def ok(project: Path, *args: str) -> str:
    result = stepline(project, *args)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result.stdout


def as_json(project: Path, *args: str) -> Any:
    return json.loads(ok(project, *args, "--json"))


def in_parallel(project: Path, commands: Sequence[Sequence[str]]) -> list[Any]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda args: stepline(project, *args), commands))


def fields(text: str) -> dict[str, str]:
    """``Label:  value`` lines of the describe output (first occurrence of each label)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = re.match(r"^\s*([A-Z][A-Za-z ]*?):\s{2,}(.*)$", line)
        if match and match.group(1) not in found:
            found[match.group(1)] = match.group(2)
    return found


def wait_for(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def make_project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "flows.py").write_text(FLOWS, encoding="utf-8")
    (root / "stepline.toml").write_text(CONFIG, encoding="utf-8")
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "project")


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A project where greeting/g1 completed and failing/f1 errored via ``stepline run``."""
    root = make_project(tmp_path_factory.mktemp("ran"))
    greeting, failing, report = in_parallel(
        root,
        [
            ["run", "greeting", '{"name": "Ada"}', "--id", "g1"],
            ["run", "failing", "--id", "f1"],
            ["run", "report", "--id", "rep1"],
        ],
    )
    return {"root": root, "greeting": greeting, "failing": failing, "report": report}


# -- help and completion -------------------------------------------------------------------------


def test_help_lists_every_command(project: Path) -> None:
    top, inst = in_parallel(project, [["--help"], ["workflows", "instances", "--help"]])
    for name in ("run", "worker", "workflows"):
        assert re.search(rf"^\s+{name}\s", top.stdout, re.M), top.stdout
    for name in (
        "list",
        "describe",
        "send-event",
        "pause",
        "resume",
        "terminate",
        "restart",
        "terminate-all",
        "delete",
    ):
        assert re.search(rf"^\s+{name}\s", inst.stdout, re.M), inst.stdout


def test_shell_completion_uses_clicks_mechanism(project: Path) -> None:
    script = stepline(project, env=cli_env(_STEPLINE_COMPLETE="bash_source"))
    assert script.returncode == 0
    assert "_stepline_completion" in script.stdout
    names = stepline(
        project,
        env=cli_env(
            _STEPLINE_COMPLETE="bash_complete",
            COMP_WORDS="stepline workflows trigger g",
            COMP_CWORD="3",
        ),
    )
    assert names.returncode == 0
    assert "plain,greeting" in names.stdout.split()


# -- run, describe, json --------------------------------------------------------------------------


def test_workflows_list_without_a_database_shows_config_and_creates_nothing(project: Path) -> None:
    text = ok(project, "workflows", "list")
    assert "Showing 5 workflows:" in text
    for name in ALL_WORKFLOWS:
        assert re.search(rf"│ {name}\s+│ flows:", text), text
    assert not (project / "stepline.db").exists()
    missing = stepline(project, "workflows", "instances", "list", "greeting")
    assert missing.returncode == 2
    assert "no stepline database at" in missing.stderr
    assert not (project / "stepline.db").exists()


def test_workflows_list_says_when_the_database_it_was_given_is_missing(tmp_path: Path) -> None:
    """An empty list for a mistyped path would look like an empty project."""
    typo = tmp_path / "typo.db"
    result = stepline(tmp_path, "--database", f"sqlite:///{typo}", "workflows", "list")
    assert result.returncode == 0, result.stderr
    assert f"no stepline database at {typo} (from --database)" in result.stdout, result.stdout
    assert not typo.exists()


def test_run_prints_a_summary_of_the_instance(ran: dict[str, Any]) -> None:
    result = ran["greeting"]
    assert result.returncode == 0, result.stderr
    assert "\x1b[" not in result.stdout  # no colours when not on a terminal
    got = fields(result.stdout)
    assert got["Workflow Name"] == "greeting"
    assert got["Instance Id"] == "g1"
    assert got["Status"] == "✅ Completed"
    assert got["Trigger"] == "💻 CLI"
    for label in ("Queued", "Start", "End"):
        assert re.fullmatch(r"\d{1,2}/\d{1,2}/\d{4}, \d{1,2}:\d\d:\d\d [AP]M", got[label])
    assert re.fullmatch(r"\d+ (milli)?seconds?", got["Duration"])
    assert got["Last Successful Step"] == "name-1"
    assert got["Output"] == '{"greeting":"hello Ada"}'
    assert "Steps:" in result.stdout
    step_line = r'^  ✅ name-1  🎯 Step  \d+ (milli)?seconds?\s+"Ada"$'
    assert re.search(step_line, result.stdout, re.M), result.stdout
    assert "┌" not in result.stdout  # one attempt: no attempts table (`--full` has it)
    # progress went to stderr, as plain lines
    assert "step 'name-1' started (attempt 1)" in result.stderr
    assert "step 'name-1' complete (attempt 1)" in result.stderr


def test_run_of_an_errored_instance_exits_1_and_shows_the_error(ran: dict[str, Any]) -> None:
    result = ran["failing"]
    assert result.returncode == 1, result.stderr
    got = fields(result.stdout)
    assert got["Status"] == "❌ Errored"
    assert got["Error"] == "ValueError: broken on attempt 2"
    step_line = r"^  ❌ flaky-1  🎯 Step  \d+ (milli)?seconds?\s+ValueError: broken on attempt 2$"
    assert re.search(step_line, result.stdout, re.M), result.stdout
    assert "Last Successful Step" not in got
    assert re.search(r"│ State\s+│ Error\s+│", result.stdout)
    assert re.search(r"❌ Error\s+│ ValueError: broken on attempt 1", result.stdout)
    assert "step 'flaky-1' attempt 1 failed: ValueError: broken on attempt 1" in result.stderr
    assert "step 'flaky-1' failed after 2 attempts" in result.stderr


def test_a_dag_shows_its_graph_with_node_states(ran: dict[str, Any]) -> None:
    result = ran["report"]
    assert result.returncode == 0, result.stderr
    assert fields(result.stdout)["Output"] == '{"rows":[1,2,3],"total":6,"count":3}'
    described = ok(ran["root"], "workflows", "instances", "describe", "report", "rep1")
    graph = described.split("Graph:\n")[1].split("Steps:")[0]
    assert re.search(r"^  1\s+fetch\s+complete\s+-", graph, re.M), graph
    assert re.search(r"^\s+count\s+complete\s+fetch", graph, re.M), graph
    workflow = fields(ok(ran["root"], "workflows", "describe", "report"))
    assert workflow["Kind"] == "dag"
    assert workflow["Description"] == "Counts and sums."


def test_describe_latest_and_options(ran: dict[str, Any]) -> None:
    root = ran["root"]
    full, latest, bare, short = in_parallel(
        root,
        [
            ["workflows", "instances", "describe", "greeting", "g1"],
            ["workflows", "instances", "describe", "greeting", "latest"],
            ["workflows", "instances", "describe", "greeting"],
            [
                "workflows",
                "instances",
                "describe",
                "greeting",
                "g1",
                "--no-step-output",
                "--truncate-output-limit",
                "5",
            ],
        ],
    )
    assert full.returncode == 0
    assert latest.stdout == full.stdout == bare.stdout
    assert fields(full.stdout)["Output"] == '{"greeting":"hello Ada"}'
    assert full.stdout.count("Output:") == 2  # the instance's and the step's
    assert short.stdout.count("Output:") == 1  # no step output
    assert fields(short.stdout)["Output"] == '{"gre… (19 more characters)'


def test_json_outputs(ran: dict[str, Any]) -> None:
    root = ran["root"]
    workflows = as_json(root, "workflows", "list")
    by_name = {w["name"]: w for w in workflows}
    assert sorted(by_name) == ALL_WORKFLOWS
    assert by_name["greeting"]["class_name"] == "flows:Greeting"
    assert by_name["greeting"]["counts"] == {"complete": 1}
    assert by_name["failing"]["counts"] == {"errored": 1}
    assert by_name["greeting"]["configured"] is True

    described = as_json(root, "workflows", "describe", "greeting")
    assert described["definition"]["doc"] == "Greets someone by name."

    instances = as_json(root, "workflows", "instances", "list", "greeting")
    assert [(i["id"], i["status"], i["trigger"]) for i in instances] == [("g1", "complete", "cli")]

    detail = as_json(root, "workflows", "instances", "describe", "failing", "f1")
    assert detail["status"] == "errored"
    assert detail["error"] == {"name": "ValueError", "message": "broken on attempt 2"}
    assert detail["last_successful_step"] is None
    (step,) = detail["steps"]
    assert step["name"] == "flaky-1"
    assert [a["state"] for a in step["attempts"]] == ["failed", "failed"]


def test_workflows_describe_text(ran: dict[str, Any]) -> None:
    got = fields(ok(ran["root"], "workflows", "describe", "greeting"))
    assert got["Name"] == "greeting"
    assert got["Class name"] == "flows:Greeting"
    assert got["Instances"] == "1 complete"
    assert got["Description"] == "Greets someone by name."
    assert got["Configured in"].endswith("stepline.toml (workflows[0])")


def test_run_file_targets_and_json(project: Path) -> None:
    by_file, by_module, by_json = in_parallel(
        project,
        [
            ["run", "flows.py:Greeting", '{"name": "File"}', "--id", "by-file"],
            ["run", "flows:Greeting", "--id", "by-module"],
            ["run", "greeting", '{"name": "Json"}', "--id", "by-json", "--json"],
        ],
    )
    assert by_file.returncode == 0, by_file.stderr
    assert fields(by_file.stdout)["Output"] == '{"greeting":"hello File"}'
    assert by_module.returncode == 0, by_module.stderr
    assert fields(by_module.stdout)["Output"] == '{"greeting":"hello world"}'
    assert by_json.returncode == 0, by_json.stderr
    data = json.loads(by_json.stdout)
    assert data["output"] == {"greeting": "hello Json"}
    assert [s["name"] for s in data["steps"]] == ["name-1"]


def test_run_interrupted_keeps_the_instance_for_a_worker(project: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "stepline.cli", "run", "approval", "--id", "a1"],
        cwd=project,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        seen = ""
        while "waiting for event 'approved'" not in seen:
            line = proc.stderr.readline()
            assert line, f"run ended early: {seen}"
            seen += line
        # once suspended, the instance holds no lease: an interrupt leaves it waiting
        wait_for(lambda: status_of(project, "approval", "a1") == "waiting", "the wait")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Interrupted: instance a1 is waiting" in err
    got = fields(out)
    assert got["Status"] == "⏳ Waiting"
    assert "👀 Waiting for event" in out
    assert "💤 Sleeping" in out


def test_run_stops_at_once_on_a_second_interrupt_during_a_long_step(project: Path) -> None:
    """A first Ctrl-C gives the running sync step the grace period (10 s here); a second one
    stops at once, without waiting for the step's thread, and the instance is left for a
    worker."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "stepline.cli", "run", "slow", "--id", "s9"],
        cwd=project,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    slow_log = project / "slow.log"
    try:
        wait_for(lambda: slow_log.exists() and "start" in slow_log.read_text(), "the slow step")
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None, "the first interrupt should wait for the running step"
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        _out, err = proc.communicate(timeout=30)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took < 8, f"the second interrupt took {took:.1f} s to stop the run: {err}"
    assert "end" not in slow_log.read_text(), "the step should still have been running"
    assert proc.returncode == 130, err
    assert "Interrupted: instance s9 is" in err
    assert status_of(project, "slow", "s9") in ("queued", "running")


# -- trigger and control ------------------------------------------------------------------------


def read_db(project: Path, workflow: str | None = None) -> list[dict[str, Any]]:
    """Every instance in the project's database, read in-process (faster than the CLI)."""

    async def read() -> list[dict[str, Any]]:
        async with Engine(f"sqlite:///{project / 'stepline.db'}", worker=False) as engine:
            page = await engine.list_instances(workflow, limit=10_000)
            return [record.to_json() for record in page.instances]

    return asyncio.run(read())


def read_instance(project: Path, workflow: str, instance_id: str) -> dict[str, Any]:
    """One instance with its steps, read in-process (the shape of ``describe --json``)."""

    async def read() -> dict[str, Any]:
        async with Engine(f"sqlite:///{project / 'stepline.db'}", worker=False) as engine:
            record = await engine.store.get_instance(workflow, instance_id)
            steps = await engine.store.get_steps(workflow, instance_id)
            return {**record.to_json(), "steps": [step.to_json() for step in steps]}

    return asyncio.run(read())


def status_of(project: Path, workflow: str, instance_id: str) -> str:
    found = [i["status"] for i in read_db(project, workflow) if i["id"] == instance_id]
    return str(found[0]) if found else "missing"


def waiting_on_event(project: Path, workflow: str, instance_id: str) -> bool:
    """Whether the instance is parked on a ``wait_for_event`` step (not on a sleep)."""
    steps = read_instance(project, workflow, instance_id)["steps"]
    return any(s["type"] == "wait_for_event" and s["status"] == "waiting" for s in steps)


def test_trigger_and_control_commands(project: Path) -> None:
    ok(project, "db", "init")  # trigger never creates a database (a worker or db init does)
    out = ok(project, "workflows", "trigger", "greeting", '{"name": "Q"}', "--id", "q1")
    assert out.strip() == '🚀 Workflow instance "q1" has been queued successfully'
    generated = as_json(project, "workflows", "trigger", "greeting")
    assert generated["status"] == "queued"
    assert re.fullmatch(r"[0-9a-f-]{36}", generated["id"])
    listed = as_json(project, "workflows", "instances", "list", "greeting", "--reverse")
    assert [i["id"] for i in listed] == ["q1", generated["id"]]
    assert listed[0]["params"] == {"name": "Q"}
    assert listed[0]["trigger"] == "cli"

    text = ok(
        project, "workflows", "instances", "list", "greeting", "--per-page", "1", "--page", "2"
    )
    assert "Showing 1 instance from page 2:" in text and "│ q1 " in text
    assert "⌛ Queued" in text

    paused = ok(project, "workflows", "instances", "pause", "greeting", "q1")
    assert paused.strip() == '⏸ Instance "q1" of "greeting" was paused (now ⏸ Paused)'
    assert status_of(project, "greeting", "q1") == "paused"
    resumed = as_json(project, "workflows", "instances", "resume", "greeting", "q1")
    assert resumed["status"] == "queued"

    sent = ok(
        project,
        "workflows",
        "instances",
        "send-event",
        "greeting",
        "q1",
        "--type",
        "poke",
        "--payload",
        '{"n": 1}',
    )
    assert sent.startswith('📨 Event "poke" sent to instance "q1"')

    terminated = ok(project, "workflows", "instances", "terminate", "greeting", "q1")
    assert terminated.strip() == (
        '🚫 Instance "q1" of "greeting" was terminated (now 🚫 Terminated)'
    )
    again = stepline(project, "workflows", "instances", "terminate", "greeting", "q1")
    assert again.returncode == 2
    assert again.stderr.strip() == (
        "Error: cannot terminate instance 'q1' of workflow 'greeting': it is terminated"
    )
    restarted = as_json(project, "workflows", "instances", "restart", "greeting", "q1")
    assert restarted["status"] == "queued"
    rolling = ok(
        project, "workflows", "instances", "terminate", "greeting", generated["id"], "--rollback"
    )
    assert rolling.strip() == (
        f'🚫 Instance "{generated["id"]}" of "greeting" is terminating: a worker runs its '
        "rollbacks, then it ends terminated (now ⌛ Queued)"
    )

    summary = ok(project, "workflows", "instances", "terminate-all", "greeting")
    assert summary.strip() == '🚫 Terminated 2 instances of workflow "greeting"'
    assert {
        i["status"] for i in as_json(project, "workflows", "instances", "list", "greeting")
    } == {"terminated"}


def test_restart_from_a_step(project: Path) -> None:
    ok(project, "run", "greeting", '{"name": "R"}', "--id", "r1")
    out = ok(
        project, "workflows", "instances", "restart", "greeting", "r1", "--from-step-name", "name"
    )
    assert out.strip() == (
        '🔄 Instance "r1" of "greeting" was restarted from step "name-1" (now ⌛ Queued)'
    )
    detail = read_instance(project, "greeting", "r1")
    assert detail["status"] == "queued" and detail["steps"] == []
    unknown = stepline(
        project, "workflows", "instances", "restart", "greeting", "r1", "--from-step-name", "nope"
    )
    assert unknown.returncode == 2
    assert "instance has no recorded step 'nope' (count 1)" in unknown.stderr


def test_delete_by_id_and_by_age(project: Path) -> None:
    ok(project, "db", "init")
    ok(project, "workflows", "trigger", "greeting", "--id", "d1")
    triggered = in_parallel(
        project, [["workflows", "trigger", "greeting", "--id", i] for i in ("d2", "d3")]
    )
    assert [r.returncode for r in triggered] == [0, 0]
    unfinished = stepline(project, "workflows", "instances", "delete", "greeting", "d1")
    assert unfinished.returncode == 2
    assert "cannot delete instance 'd1' of workflow 'greeting': it is queued" in unfinished.stderr
    forced = ok(project, "workflows", "instances", "delete", "greeting", "d1", "--force")
    assert forced.strip() == '🗑 Deleted 1 instance of workflow "greeting"'
    terminated = in_parallel(
        project, [["workflows", "instances", "terminate", "greeting", i] for i in ("d2", "d3")]
    )
    assert [r.returncode for r in terminated] == [0, 0]
    kept = as_json(project, "workflows", "instances", "delete", "greeting", "--older-than", "1 day")
    assert kept == {"deleted": 0}
    purged = ok(
        project,
        "workflows",
        "instances",
        "delete",
        "greeting",
        "--status",
        "terminated",
        "--older-than",
        "0 seconds",
    )
    assert purged.strip() == '🗑 Deleted 2 instances of workflow "greeting" (terminated)'
    assert read_db(project) == []


# -- bad input ----------------------------------------------------------------------------------

BAD_INPUTS: list[tuple[list[str], str]] = [
    (["workflows", "trigger", "greeting", "{bad"], "Error: PARAMS_JSON is not valid JSON"),
    (
        ["workflows", "trigger", "nope"],
        "Error: unknown workflow 'nope'; known workflows: "
        "approval, failing, greeting, report, slow",
    ),
    (
        ["workflows", "trigger", "greeting", "--id", "g1"],
        "Error: workflow 'greeting' already has an instance 'g1'",
    ),
    (["workflows", "trigger", "greeting", "--id", "bad id"], "Error: invalid instance id 'bad id'"),
    (["workflows", "instances", "list", "nope"], "Error: unknown workflow 'nope'; known workflows"),
    (
        ["workflows", "instances", "describe", "greeting", "nope"],
        "Error: workflow 'greeting' has no instance 'nope'",
    ),
    (
        ["workflows", "instances", "describe", "greeting", "bad id!"],
        "Error: invalid instance id 'bad id!'",
    ),
    (
        ["workflows", "instances", "describe", "slow", "latest"],
        "Error: workflow 'slow' has no instances yet",
    ),
    (
        ["workflows", "instances", "terminate", "greeting", "g1"],
        "Error: cannot terminate instance 'g1' of workflow 'greeting': it is complete",
    ),
    (
        ["workflows", "instances", "pause", "failing", "f1"],
        "Error: cannot pause instance 'f1' of workflow 'failing': it is errored",
    ),
    (
        ["workflows", "instances", "send-event", "greeting", "g1", "--type", "x"],
        "Error: cannot send an event to instance 'g1'",
    ),
    (
        ["workflows", "instances", "send-event", "greeting", "g1", "--type", "x", "--payload", "{"],
        "Error: --payload is not valid JSON",
    ),
    (
        ["workflows", "instances", "restart", "greeting", "g1", "--from-step-count", "2"],
        "Error: --from-step-count needs --from-step-name",
    ),
    (
        ["workflows", "instances", "delete", "greeting", "g1", "--older-than", "1 day"],
        "Error: give instance ids, or --status/--older-than, not both",
    ),
    (
        ["workflows", "instances", "delete", "greeting", "--older-than", "soon"],
        "Error: invalid --older-than 'soon'",
    ),
    (["workflows", "instances", "delete", "greeting"], "Error: give instance ids to delete"),
    (
        ["run", "nope"],
        "Error: unknown workflow 'nope'; known workflows: approval, failing, "
        "greeting, report, slow; or run code directly: stepline run path/to/file.py:ClassName",
    ),
    (["run", "flows.py:Nope"], "has no attribute 'Nope'"),
    (
        ["run", "flows.py"],
        "flows.py defines 5 workflows (Greeting, Approval, Failing, Slow, report); "
        "name one: flows.py:Greeting",
    ),
    (["run", "missing.py:X"], "missing.py does not exist"),
    (["--config", "missing.toml", "workflows", "list"], "missing.toml does not exist"),
    (
        ["workflows", "instances", "list", "greeting", "--status", "done"],
        "Invalid value for '--status'",
    ),
]


def test_bad_input_is_one_line_exit_2_and_changes_nothing(ran: dict[str, Any]) -> None:
    root = ran["root"]
    before = read_db(root)
    results = in_parallel(root, [args for args, _ in BAD_INPUTS])
    problems = []
    for (args, expected), result in zip(BAD_INPUTS, results, strict=True):
        lines = result.stderr.strip().splitlines()
        if result.returncode != 2 or expected not in result.stderr or "Traceback" in result.stderr:
            problems.append(f"{args}: exit {result.returncode}, stderr {result.stderr!r}")
        elif (
            not args[-1].startswith("--status")
            and "Invalid value" not in expected
            and len(lines) != 1
        ):
            problems.append(f"{args}: more than one line: {result.stderr!r}")
        if result.stdout:
            problems.append(f"{args}: printed to stdout: {result.stdout!r}")
    assert not problems, "\n".join(problems)
    assert read_db(root) == before


def test_broken_config_is_one_line_naming_file_and_key(tmp_path: Path) -> None:
    (tmp_path / "stepline.toml").write_text("[[workflows]]\nname = 'x'\n", encoding="utf-8")
    result = stepline(tmp_path, "workflows", "list")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"Error: {tmp_path / 'stepline.toml'}: key 'workflows[0].class_name' is missing"
    )
    worker = stepline(tmp_path / ".", "--database", f"sqlite:///{tmp_path}/x.db", "worker")
    assert worker.returncode == 2
    assert "key 'workflows[0].class_name' is missing" in worker.stderr


def test_an_unknown_event_loop_is_one_line_exit_2(project: Path) -> None:
    for command in (["workflows", "instances", "list", "greeting"], ["worker"]):
        result = stepline(project, *command, env=cli_env(STEPLINE_EVENT_LOOP="trio"))
        assert result.returncode == 2, (command, result.stderr)
        assert result.stderr.strip() == (
            "Error: STEPLINE_EVENT_LOOP='trio' is not one of auto, uvloop, asyncio"
        )
        assert not result.stdout


def test_worker_without_workflows_explains_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "stepline.toml").write_text("", encoding="utf-8")
    result = stepline(tmp_path, "worker")
    assert result.returncode == 2
    assert "no workflows to run" in result.stderr
    assert "add [[workflows]] entries" in result.stderr


def test_trigger_with_no_workflow_known_says_how_to_make_one_known(tmp_path: Path) -> None:
    """A new user's first trigger, before any worker ran and without a stepline.toml."""
    url = f"sqlite:///{tmp_path}/x.db"
    assert stepline(tmp_path, "--database", url, "db", "init").returncode == 0
    result = stepline(tmp_path, "--database", url, "workflows", "trigger", "greeting")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: unknown workflow 'greeting'; no workflow is known yet")
    assert "`stepline worker path/to/file.py:ClassName`" in lines[0]
    assert "[[workflows]]" in lines[0]


def test_colours_on_a_terminal(ran: dict[str, Any]) -> None:
    coloured = stepline(
        ran["root"],
        "workflows",
        "instances",
        "describe",
        "greeting",
        "g1",
        env=cli_env(FORCE_COLOR="1"),
    )
    assert coloured.returncode == 0
    assert "\x1b[32m✅ Completed" in coloured.stdout


# -- workers ------------------------------------------------------------------------------------


def start_worker(project: Path, log: Path, **env: str) -> subprocess.Popen[str]:
    handle = log.open("w", encoding="utf-8")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "stepline.cli", "worker", "--concurrency", "4"],
            cwd=project,
            env=cli_env(**env),
            stdout=handle,
            stderr=subprocess.STDOUT,
            text=True,
        )
    finally:
        handle.close()


def stop_worker(proc: subprocess.Popen[str], *, signalled: bool = False) -> int:
    """Stop a worker with SIGTERM (unless ``signalled`` already: a second one stops at once)."""
    if not signalled:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigterm_stops_a_worker_gracefully_and_a_second_worker_finishes(project: Path) -> None:
    ok(project, "db", "init")
    triggered = in_parallel(
        project,
        [
            ["workflows", "trigger", workflow, "--id", instance_id]
            for workflow, instance_id in (("slow", "s1"), ("approval", "a1"), ("greeting", "g1"))
        ],
    )
    assert [r.returncode for r in triggered] == [0, 0, 0], [r.stderr for r in triggered]
    slow_log = project / "slow.log"

    first = start_worker(project, project / "worker1.log", STEPLINE_EVENT_LOOP="auto")
    try:
        wait_for(lambda: slow_log.exists() and "start" in slow_log.read_text(), "the slow step")
        # "waiting" alone could be the short nap before the event wait: wait for the wait step
        wait_for(lambda: waiting_on_event(project, "approval", "a1"), "the approval wait")
        wait_for(lambda: status_of(project, "greeting", "g1") == "complete", "the greeting")
        first.send_signal(signal.SIGTERM)
        wait_for(
            lambda: "waiting for 1 running activation\n" in (project / "worker1.log").read_text(),
            "the worker to start its graceful shutdown",
        )
        (project / "release").touch()  # now the running step may finish
    finally:
        code = stop_worker(first, signalled=True)
    log1 = (project / "worker1.log").read_text(encoding="utf-8")
    assert code == 0, log1
    assert f"event loop {'asyncio' if uvloop is None else 'uvloop'});" in log1
    # graceful: the running step finished, no new step started
    assert "slow/s1: step 'slow step-1' complete (attempt 1)" in log1
    assert "step 'last-1' started" not in log1
    assert "greeting/g1: step 'name-1' complete (attempt 1)" in log1
    assert "approval/a1: step 'approval-1' waiting for event 'approved'" in log1
    assert "instance greeting/g1 -> complete" in log1
    halfway = read_instance(project, "slow", "s1")
    assert halfway["status"] == "queued"  # released at shutdown, runnable at once
    assert [(s["name"], s["status"]) for s in halfway["steps"]] == [
        ("first-1", "complete"),
        ("slow step-1", "complete"),
    ]

    ok(
        project,
        "workflows",
        "instances",
        "send-event",
        "approval",
        "a1",
        "--type",
        "approved",
        "--payload",
        '"boss"',
    )

    second = start_worker(project, project / "worker2.log", STEPLINE_EVENT_LOOP="asyncio")
    try:
        wait_for(lambda: status_of(project, "slow", "s1") == "complete", "slow to complete")
        wait_for(lambda: status_of(project, "approval", "a1") == "complete", "approval")
    finally:
        code = stop_worker(second)
    log2 = (project / "worker2.log").read_text(encoding="utf-8")
    assert code == 0, log2
    assert "event loop asyncio);" in log2
    assert "slow/s1: step 'last-1' complete (attempt 1)" in log2
    assert "step 'slow step-1' started" not in log2
    assert "approval/a1: step 'approval-1' received event 'approved'" in log2
    assert "instance slow/s1 -> complete" in log2

    assert slow_log.read_text().split() == ["start", "end"]  # the slow step ran exactly once
    done = read_instance(project, "slow", "s1")
    assert done["output"] == "done"
    slow_step = next(s for s in done["steps"] if s["name"] == "slow step-1")
    assert len(slow_step["attempts"]) == 1
    approval = read_instance(project, "approval", "a1")
    assert approval["output"] == {"approved_by": "boss"}
    text = ok(project, "workflows", "instances", "describe", "approval", "a1")
    assert "👀 Waiting for event" in text and "💤 Sleeping" in text
    assert fields(text)["Event type"] == "approved"


def test_trigger_with_a_deadline_and_debounce(project: Path) -> None:
    ok(project, "db", "init")
    first = as_json(
        project, "workflows", "trigger", "greeting", '{"n": 1}', "--key", "u",
        "--on-conflict", "debounce", "--debounce", "1 hour", "--timeout", "2 hours",
    )  # fmt: skip
    again = as_json(
        project, "workflows", "trigger", "greeting", '{"n": 2}', "--key", "u",
        "--on-conflict", "debounce", "--debounce", "1 hour",
    )  # fmt: skip
    assert again["id"] == first["id"]
    (listed,) = as_json(project, "workflows", "instances", "list", "greeting")
    assert listed["params"] == {"n": 2}
    assert listed["deadline_at"] == pytest.approx(listed["created_at"] + 7200, abs=5)
    shown = ok(project, "workflows", "instances", "describe", "greeting", first["id"])
    assert "Deadline" in shown
    replaced = as_json(
        project, "workflows", "trigger", "greeting", "--key", "u", "--on-conflict",
        "replace_queued",
    )  # fmt: skip
    assert status_of(project, "greeting", first["id"]) == "terminated"
    assert status_of(project, "greeting", replaced["id"]) == "queued"
