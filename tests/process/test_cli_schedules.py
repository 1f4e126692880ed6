"""``stepline schedules ...`` as a subprocess on a SQLite project whose schedules a scheduler
stored: list (table and JSON), pause, resume, trigger (``--at`` ISO or epoch, idempotent),
backfill, and the exit code and one-line message of each bad input."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from stepline import Engine, Schedule, Workflow, WorkflowEvent, WorkflowStep

from .test_cli import as_json, in_parallel, ok, stepline

pytestmark = pytest.mark.slow


class Nightly(Workflow):
    name = "nightly"
    schedules = (
        Schedule("0 3 * * *", name="nightly-3am", timezone="Europe/Paris", params={"n": 1}),
        Schedule("*/5 * * * *", name="every-5", catch_up="all", catch_up_limit=7),
    )

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return None


CONFIG = """
database = "sqlite:///app.db"

[[workflows]]
name = "other"
class_name = "flows:Other"
"""

FLOWS = """
from stepline import Workflow


class Other(Workflow):
    name = "other"

    async def run(self, event, step):
        return None
"""


async def _store_schedules(url: str) -> None:
    async with Engine(url, [Nightly], worker=False) as engine:
        await engine.scheduler.sync()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "stepline.toml").write_text(CONFIG, encoding="utf-8")
    (tmp_path / "flows.py").write_text(FLOWS, encoding="utf-8")
    asyncio.run(_store_schedules(f"sqlite:///{tmp_path / 'app.db'}"))
    return tmp_path


def fails(result: Any, text: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and text in lines[0], lines


def test_list_pause_resume(project: Path) -> None:
    listed, table, only = in_parallel(
        project,
        [
            ["schedules", "list", "--json"],
            ["schedules", "list"],
            ["schedules", "list", "--workflow", "other", "--json"],
        ],
    )
    rows = json.loads(listed.stdout)
    assert [row["name"] for row in rows] == ["every-5", "nightly-3am"]
    nightly = rows[1]
    assert nightly["workflow"] == "nightly" and nightly["cron"] == "0 3 * * *"
    assert nightly["timezone"] == "Europe/Paris" and nightly["params"] == {"n": 1}
    assert nightly["paused"] is False and nightly["last_run"] is None
    assert nightly["next_run"] > datetime.now(UTC).timestamp()
    assert datetime.fromtimestamp(nightly["next_run"], UTC).minute == 0
    assert table.returncode == 0
    assert "Showing 2 schedules (0 paused):" in table.stdout
    shown = ("nightly-3am", "0 3 * * *", "Europe/Paris", "▶ active", "catch-up all (at most 7)")
    for text in shown:
        assert text in table.stdout, table.stdout
    assert json.loads(only.stdout) == []

    paused = ok(project, "schedules", "pause", "nightly-3am")
    assert paused.strip() == '⏸ Schedule "nightly-3am" of "nightly" is paused'
    (row,) = as_json(project, "schedules", "list", "--workflow", "nightly")[1:]
    assert row["paused"] is True and row["next_run"] is None
    assert "⏸ paused" in ok(project, "schedules", "list")
    resumed = as_json(project, "schedules", "resume", "nightly-3am")
    assert resumed["paused"] is False and resumed["next_run"] is not None


def test_trigger_and_backfill(project: Path) -> None:
    at = datetime(2024, 1, 31, 9, 0, tzinfo=UTC).timestamp()
    first = as_json(project, "schedules", "trigger", "every-5", "--at", "2024-01-31T09:00:42Z")
    assert first["id"] == "every-5-20240131T0900Z" and first["workflow"] == "nightly"
    assert first["trigger"] == "cron" and first["status"] == "queued"
    assert first["schedule"] == {"name": "every-5", "cron": "*/5 * * * *", "tick": at}
    again, epoch = in_parallel(
        project,
        [
            ["schedules", "trigger", "every-5", "--at", str(int(at) + 5)],
            ["schedules", "trigger", "nightly-3am", "--at", "2024-01-31T09:00", "--json"],
        ],
    )
    assert again.returncode == 0
    assert again.stdout.strip() == (
        '⏰ Schedule "every-5": instance "every-5-20240131T0900Z" of "nightly" (⌛ Queued)'
    )
    assert json.loads(epoch.stdout)["id"] == "nightly-3am-20240131T0900Z"

    filled = as_json(
        project, "schedules", "backfill", "every-5", "--from", "2024-01-31T09:00Z",
        "--to", str(int(at) + 20 * 60),
    )  # fmt: skip
    ids = [f"every-5-20240131T09{m:02d}Z" for m in range(0, 21, 5)]
    assert filled["count"] == 5 and [i["id"] for i in filled["instances"]] == ids
    assert (filled["created"], filled["existing"]) == (4, 1)  # 09:00 was triggered above
    text = ok(project, "schedules", "backfill", "every-5", "--from", "2024-01-31T09:00Z",
              "--to", "2024-01-31T09:10Z")  # fmt: skip
    assert text.strip() == (
        '⏰ Backfilled schedule "every-5" (workflow "nightly"): 0 instances created, 3 existed '
        "already: " + ", ".join(ids[:3])
    )
    text = ok(project, "schedules", "backfill", "every-5", "--from", "2024-01-31T09:20Z",
              "--to", "2024-01-31T09:25Z")  # fmt: skip
    assert text.strip() == (
        '⏰ Backfilled schedule "every-5" (workflow "nightly"): 1 instance created, 1 existed '
        "already: every-5-20240131T0920Z, every-5-20240131T0925Z"
    )
    ids.append("every-5-20240131T0925Z")
    listed = as_json(project, "workflows", "instances", "list", "nightly", "--per-page", "100")
    assert sorted(r["id"] for r in listed) == sorted([*ids, "nightly-3am-20240131T0900Z"])
    # The schedule's own state is not changed by triggers and backfills.
    (row,) = [r for r in as_json(project, "schedules", "list") if r["name"] == "every-5"]
    assert row["last_run"] is None and row["last_instance"] is None


def test_bad_input_exits_2_with_one_line(project: Path) -> None:
    cases: list[tuple[list[str], str]] = [
        (["schedules", "pause", "nope"], "no schedule is named 'nope'"),
        (["schedules", "resume", "nope"], "no schedule is named 'nope'"),
        (["schedules", "trigger", "nope"], "no schedule is named 'nope'"),
        (["schedules", "backfill", "nope", "--from", "0", "--to", "60"], "'nope'"),
        (["schedules", "list", "--workflow", "nope"], "unknown workflow 'nope'"),
        (["schedules", "trigger", "every-5", "--at", "soon"], "invalid --at 'soon'"),
        (["schedules", "trigger", "every-5", "--at", "-5"], "--at '-5' is out of range"),
        (
            ["schedules", "backfill", "every-5", "--from", "2024-01-02", "--to", "2024-01-01"],
            "end is before start",
        ),
        (
            ["schedules", "backfill", "every-5", "--from", "2000-01-01", "--to", "2024-01-01"],
            "more than 10000 ticks",
        ),
        (["schedules", "backfill", "every-5", "--from", "x", "--to", "0"], "invalid --from 'x'"),
    ]
    results = in_parallel(project, [args for args, _ in cases])
    for (args, text), result in zip(cases, results, strict=True):
        try:
            fails(result, text)
        except AssertionError as exc:
            raise AssertionError(f"{args}: {exc}") from None
    missing = stepline(project, "--database", f"sqlite:///{project / 'x.db'}", "schedules", "list")
    fails(missing, "no stepline database at")
    assert not (project / "x.db").exists()


def test_create_update_delete_at_run_time(project: Path) -> None:
    made = as_json(
        project, "schedules", "create", "other-9am", "--workflow", "other", "--cron",
        "0 9 * * MON-FRI", "--timezone", "Europe/Paris", "--params", '{"k": 2}',
        "--overlap", "skip",
    )  # fmt: skip
    assert (made["source"], made["workflow"], made["params"]) == ("api", "other", {"k": 2})
    assert (made["timezone"], made["overlap"], made["catch_up"]) == ("Europe/Paris", "skip", "skip")
    updated = ok(project, "schedules", "update", "other-9am", "--cron", "0 10 * * *")
    assert updated.startswith('⏰ Schedule "other-9am" of "other" updated: 0 10 * * * (Europe')
    table = ok(project, "schedules", "list")
    assert "other-9am" in table and " api " in table and " code " in table
    (row,) = as_json(project, "schedules", "list", "--workflow", "other")
    assert (row["cron"], row["params"], row["overlap"]) == ("0 10 * * *", {"k": 2}, "skip")
    deleted = ok(project, "schedules", "delete", "other-9am")
    assert deleted.strip() == '⏰ Schedule "other-9am" of "other" deleted'
    assert as_json(project, "schedules", "list", "--workflow", "other") == []


def test_bad_run_time_schedules_exit_2_naming_the_value(project: Path) -> None:
    base = ["schedules", "create", "x", "--workflow", "other", "--cron"]
    results = in_parallel(
        project,
        [
            [*base, "0 9 * *"],
            ["schedules", "create", "x", "--workflow", "nope", "--cron", "0 9 * * *"],
            [*base, "0 9 * * *", "--timezone", "Mars/Base"],
            [*base, "0 9 * * *", "--params", "{bad"],
            ["schedules", "create", "every-5", "--workflow", "other", "--cron", "0 9 * * *"],
            ["schedules", "update", "every-5", "--cron", "0 9 * * *"],
            ["schedules", "delete", "nightly-3am"],
            ["schedules", "delete", "missing"],
        ],
    )
    texts = [
        "'0 9 * *'", "'nope'", "'Mars/Base'", "--params", "'every-5' exists already",
        "'every-5' is declared in code", "'nightly-3am' is declared in code", "'missing'",
    ]  # fmt: skip
    for result, text in zip(results, texts, strict=True):
        fails(result, text)
    assert [r["name"] for r in as_json(project, "schedules", "list")] == ["every-5", "nightly-3am"]
